// Sufficient-vector broadcast (see svb.hpp for the rule, why it is right and what it loses).
#include "sync/svb.hpp"

#include <algorithm>
#include <cstring>
#include <iomanip>
#include <sstream>

#include "base/common.hpp"
#include "core/context.hpp"
#include "core/filler.hpp"
#include "core/layer.hpp"
#include "core/math.hpp"
#include "core/net.hpp"

namespace hogstream {

namespace {
constexpr auto kRelaxed = std::memory_order_relaxed;
void Add(std::atomic<uint64_t>& c, uint64_t v = 1) { c.fetch_add(v, kRelaxed); }
}  // namespace

// ---------------------------------------------------------------- layers and the maths

std::vector<SvbLayer> FindSvbLayers(Net& net) {
  std::vector<SvbLayer> out;
  const auto& owners = net.param_owners();
  const auto& where = net.param_layer_indices();
  const float* flat = net.param_data();
  for (size_t p = 0; p < where.size(); ++p) {
    const auto [li, blob] = where[p];
    const Layer& layer = *net.layers()[li];
    if (blob != 0 || std::string(layer.type()) != "InnerProduct" || owners[p] != static_cast<int>(p)) continue;
    bool shared = false;  // another layer's param points at this W: its gradient is not ours alone
    for (size_t q = 0; q < owners.size(); ++q) shared = shared || (q != p && owners[q] == static_cast<int>(p));
    if (shared) continue;
    const auto& ip = layer.layer_param().inner_product_param();
    const Blob& bottom = *net.bottom_vecs()[li][0];
    const int axis = bottom.CanonicalAxisIndex(ip.axis());
    SvbLayer l;
    l.name = net.layer_names()[li];
    l.layer = static_cast<int>(li);
    l.transpose = ip.transpose();
    l.outputs = static_cast<int>(ip.num_output());
    l.inputs = bottom.count(axis);
    l.batch = bottom.count(0, axis);
    const float* w = layer.blobs()[0]->cpu_data();
    if (w < flat || w >= flat + net.param_buffer_size()) continue;  // not in the flat buffer
    l.offset = static_cast<size_t>(w - flat);
    if (l.floats() >= l.weights()) continue;  // B (M + N) >= M N: the deltas are cheaper
    out.push_back(l);
  }
  HS_REQUIRE(out.size() <= 65536) << "--svb: " << out.size() << " InnerProduct layers; at most 65536";
  return out;
}

void FillSvbWeights(Net& net, const std::vector<SvbLayer>& layers, uint64_t seed, float* master) {
  Context ctx(Mode::CPU, 0, seed);
  ContextScope scope(&ctx);
  for (const SvbLayer& l : layers) {
    Layer& layer = *net.layers()[l.layer];
    Fill(layer.layer_param().inner_product_param().weight_filler(), layer.blobs()[0].get());
    std::memcpy(master + l.offset, net.param_data() + l.offset, l.weights() * sizeof(float));
  }
}

std::vector<std::pair<size_t, size_t>> SvbRanges(const std::vector<SvbLayer>& layers) {
  std::vector<std::pair<size_t, size_t>> r;
  for (const SvbLayer& l : layers) r.emplace_back(l.offset, l.offset + l.weights());
  std::sort(r.begin(), r.end());
  return r;
}

void CaptureFactors(Net& net, const SvbLayer& l, float* out) {
  const Blob& top = *net.top_vecs()[l.layer][0];
  const Blob& bottom = *net.bottom_vecs()[l.layer][0];
  const size_t dy = static_cast<size_t>(l.batch) * l.outputs, x = static_cast<size_t>(l.batch) * l.inputs;
  HS_CHECK(static_cast<size_t>(top.count()) == dy && static_cast<size_t>(bottom.count()) == x)
      << "--svb: layer " << l.name << " changed shape since the start";
  std::memcpy(out, top.cpu_diff(), dy * sizeof(float));
  std::memcpy(out + dy, bottom.cpu_data(), x * sizeof(float));
}

void AddFactorGradient(const SvbLayer& l, const float* factors, float* diff) {
  const float* dy = factors;
  const float* x = factors + static_cast<size_t>(l.batch) * l.outputs;
  if (l.transpose) {
    gemm(Trans::Yes, Trans::No, l.inputs, l.outputs, l.batch, 1.f, x, dy, 1.f, diff);  // dW(NxM) += X^T dY
  } else {
    gemm(Trans::Yes, Trans::No, l.outputs, l.inputs, l.batch, 1.f, dy, x, 1.f, diff);  // dW(MxN) += dY^T X
  }
}

// ---------------------------------------------------------------- in one process

void FactorInbox::Put(FactorSetPtr set) {
  std::lock_guard<std::mutex> lock(mu_);
  sets_.push_back(std::move(set));
}

std::vector<FactorSetPtr> FactorInbox::Take() {
  std::vector<FactorSetPtr> out;
  std::lock_guard<std::mutex> lock(mu_);
  out.swap(sets_);
  return out;
}

SvbHub::SvbHub(int members) {
  HS_REQUIRE(members >= 1) << "--svb: no solver";
  for (int i = 0; i < members; ++i) inboxes_.push_back(std::make_unique<FactorInbox>());
}

void SvbHub::Publish(int from, const FactorSetPtr& set) {
  for (int i = 0; i < members(); ++i) {
    if (i == from) continue;
    inboxes_[i]->Put(set);
    Add(bytes_, set->data.size() * sizeof(float));  // what a link to that solver would carry
  }
}

// ---------------------------------------------------------------- across machines

SvbLink::SvbLink(std::vector<SvbLayer> layers, SvbLinkOptions opt)
    : layers_(std::move(layers)), opt_(opt), next_seq_(layers_.size(), 0) {
  HS_REQUIRE(opt_.outbox >= 1) << "--svb: an outbox of no set";
}

void SvbLink::Publish(FactorSetPtr set) {
  HS_CHECK(set->layer < layers_.size() && set->data.size() == layers_[set->layer].floats());
  std::unique_lock<std::mutex> lock(out_mu_);
  out_cv_.wait_for(lock, std::chrono::milliseconds(opt_.wait_ms), [this] { return out_.size() < opt_.outbox; });
  while (out_.size() >= opt_.outbox) {  // the wire cannot keep up: the oldest goes unsent
    out_.pop_front();
    Add(unsent_);
  }
  const uint64_t seq = ++next_seq_[set->layer];
  out_.push_back({std::move(set), seq});
  Add(published_);
}

uint64_t SvbLink::queued() const {
  std::lock_guard<std::mutex> lock(out_mu_);
  return out_.size();
}

size_t SvbLink::Send(Wire* t, const std::vector<Dest>& dests, uint32_t epoch) {
  const uint32_t max = t->caps().max_payload;
  HS_REQUIRE(max >= sizeof(FactorPart) + 16) << "--svb: the transport's " << max << "-byte messages are too short";
  const uint32_t per_part = (max - static_cast<uint32_t>(sizeof(FactorPart))) / sizeof(float) / 4 * 4;
  size_t sent = 0;
  std::unique_lock<std::mutex> lock(out_mu_);
  while (!out_.empty()) {
    Outgoing& o = out_.front();
    if (o.dest >= dests.size()) {  // to everyone (or there is no one): done with it
      out_.pop_front();
      out_cv_.notify_all();
      continue;
    }
    const FactorSet& s = *o.set;
    const uint32_t total = static_cast<uint32_t>(s.data.size());
    const uint32_t parts = (total + per_part - 1) / per_part;
    std::byte* slot = t->AcquireSend();
    if (!slot) {
      t->Flush();
      if (!(slot = t->AcquireSend())) break;  // the wire is full: the rest goes next turn
    }
    const uint32_t begin = o.part * per_part, n = std::min(per_part, total - begin);
    const FactorPart prefix{o.part, parts, per_part, total};
    std::memcpy(slot, &prefix, sizeof prefix);
    std::memcpy(slot + sizeof prefix, s.data.data() + begin, n * sizeof(float));
    Header h;
    h.kind = MsgKind::kFactors;
    h.encoding = Encoding::kFloat32;
    h.epoch = epoch;
    h.chunk = s.layer;
    h.seq = o.seq;
    h.clock = s.iter;
    h.length = static_cast<uint32_t>(sizeof prefix + n * sizeof(float));
    t->CommitSend(dests[o.dest], h);
    Add(bytes_sent_, h.length);
    ++sent;
    if (++o.part == parts) {
      o.part = 0;
      ++o.dest;
    }
  }
  lock.unlock();
  t->Flush();
  return sent;
}

bool SvbLink::Window::Has(uint64_t seq) const {
  if (seq > high) return false;
  const uint64_t back = high - seq;
  return back >= 64 || (seen >> back) & 1;
}

void SvbLink::Window::Mark(uint64_t seq) {
  if (seq > high) {
    const uint64_t shift = seq - high;
    seen = shift >= 64 ? 1 : (seen << shift) | 1;
    high = seq;
  } else if (high - seq < 64) {
    seen |= uint64_t{1} << (high - seq);
  }
}

void SvbLink::OnMessage(const Message& m) {
  const Header& h = m.h;
  FactorPart p{};
  if (h.kind != MsgKind::kFactors || h.encoding != Encoding::kFloat32 || h.chunk >= layers_.size() ||
      h.seq == 0 || h.length < sizeof p) {
    Add(malformed_);
    return;
  }
  std::memcpy(&p, m.payload, sizeof p);
  const SvbLayer& l = layers_[h.chunk];
  const uint64_t total = l.floats();
  const uint64_t n = (h.length - sizeof p) / sizeof(float);
  if (p.total != total || p.per_part == 0 || p.parts != (total + p.per_part - 1) / p.per_part || p.part >= p.parts ||
      (h.length - sizeof p) % sizeof(float) != 0 ||
      n != std::min<uint64_t>(p.per_part, total - static_cast<uint64_t>(p.part) * p.per_part)) {
    Add(malformed_);  // not a set of this layer's shape (another net, another batch, corrupt)
    return;
  }
  // A sender's new incarnation numbers its sets afresh: forget what was heard from the old one.
  auto [e, fresh] = epoch_.try_emplace(h.source, h.epoch);
  if (!fresh && e->second != h.epoch) {
    e->second = h.epoch;
    for (auto it = pending_.begin(); it != pending_.end();)
      it = std::get<0>(it->first) == h.source ? pending_.erase(it) : std::next(it);
    for (auto it = done_.begin(); it != done_.end();)
      it = it->first.first == h.source ? done_.erase(it) : std::next(it);
  }
  Window& w = done_[{h.source, h.chunk}];
  if (w.Has(h.seq)) {
    Add(late_);  // a part of a set already complete or dropped
    return;
  }
  Pending& s = pending_[Key{h.source, h.chunk, h.seq}];
  if (s.data.empty()) {
    s.data.resize(total);
    s.have.assign(p.parts, false);
    s.iter = h.clock;
    s.first = std::chrono::steady_clock::now();
  }
  if (s.have[p.part]) {
    Add(duplicate_);
    return;
  }
  s.have[p.part] = true;
  std::memcpy(s.data.data() + static_cast<size_t>(p.part) * p.per_part, m.payload + sizeof p, n * sizeof(float));
  if (++s.got < p.parts) return;
  auto set = std::make_shared<FactorSet>();
  set->layer = h.chunk;
  set->iter = s.iter;
  set->data = std::move(s.data);
  pending_.erase(Key{h.source, h.chunk, h.seq});
  w.Mark(h.seq);
  Add(received_);
  inbox_.Put(std::move(set));
}

void SvbLink::Expire() {
  const auto now = std::chrono::steady_clock::now();
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (now - it->second.first < std::chrono::milliseconds(opt_.deadline_ms)) {
      ++it;
      continue;
    }
    const auto& [source, layer, seq] = it->first;
    done_[{source, layer}].Mark(seq);  // its late parts are recognised, not a new set
    Add(dropped_);
    it = pending_.erase(it);
  }
}

SvbFigures SvbLink::figures() const {
  SvbFigures f;
  f.sets_published = published_.load(kRelaxed);
  f.bytes_sent = bytes_sent_.load(kRelaxed);
  f.sets_applied = received_.load(kRelaxed);
  f.sets_dropped = dropped_.load(kRelaxed);
  f.sets_unsent = unsent_.load(kRelaxed);
  f.parts_duplicate = duplicate_.load(kRelaxed);
  f.parts_late = late_.load(kRelaxed);
  f.parts_malformed = malformed_.load(kRelaxed);
  return f;
}

// ---------------------------------------------------------------- a process's solvers

SvbRun::SvbRun(std::vector<SvbLayer> layers, int members, float* master)
    : layers_(std::move(layers)), hub_(std::make_unique<SvbHub>(members)), master_(master) {}

SvbRun::SvbRun(std::vector<SvbLayer> layers, std::shared_ptr<SvbLink> link)
    : layers_(std::move(layers)), link_(std::move(link)) {}

void SvbRun::RefreshMaster(Net& net) {
  for (const SvbLayer& l : layers_)
    std::memcpy(master_ + l.offset, net.param_data() + l.offset, l.weights() * sizeof(float));
}

void SvbRun::OnGradient(int i, Net& net) {
  if (master_ && i == 0) RefreshMaster(net);  // solver 0's replica as of its last step
  for (uint32_t k = 0; k < layers_.size(); ++k) {
    auto set = std::make_shared<FactorSet>();
    set->layer = k;
    set->data.resize(layers_[k].floats());
    CaptureFactors(net, layers_[k], set->data.data());
    if (hub_) hub_->Publish(i, set);
    else link_->Publish(set);
    Add(published_);
  }
  const std::vector<FactorSetPtr> in = hub_ ? hub_->Take(i) : link_->Take();
  for (const FactorSetPtr& s : in) {
    const SvbLayer& l = layers_[s->layer];
    AddFactorGradient(l, s->data.data(), net.param_diff() + l.offset);
  }
  Add(applied_, in.size());
}

void SvbRun::OnTrainEnd(int i, Net& net) {
  if (master_ && i == 0) RefreshMaster(net);
}

SvbFigures SvbRun::figures() const {
  SvbFigures f;
  if (link_) f = link_->figures();
  f.sets_published = published_.load(kRelaxed);
  f.sets_applied = applied_.load(kRelaxed);
  if (hub_) f.bytes_sent = hub_->bytes_sent();
  return f;
}

std::string SvbLink::Line() const {
  const SvbFigures f = figures();
  std::ostringstream os;
  os << std::fixed << std::setprecision(1) << "SVB: " << f.bytes_sent / 1048576.0 << " MiB of factors out, "
     << f.sets_applied << " sets in, " << f.sets_dropped << " dropped incomplete, " << f.sets_unsent << " unsent";
  return os.str();
}

std::string SvbRun::Line() const {
  const SvbFigures f = figures();
  std::ostringstream os;
  os << "SVB";
  for (const SvbLayer& l : layers_) os << " " << l.name;
  os << ": " << f.sets_published << " factor sets made, " << std::fixed << std::setprecision(1)
     << f.bytes_sent / 1048576.0 << " MiB of factors sent, " << f.sets_applied << " sets applied, " << f.sets_dropped
     << " dropped incomplete, " << f.sets_unsent << " unsent";
  if (f.parts_duplicate + f.parts_late + f.parts_malformed)
    os << " (parts: " << f.parts_duplicate << " duplicate, " << f.parts_late << " late, " << f.parts_malformed
       << " malformed)";
  return os.str();
}

}  // namespace hogstream
