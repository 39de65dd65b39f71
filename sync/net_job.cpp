// The network daemon of one machine (see net_job.hpp for the topology, control, liveness and
// the end of a job). Everything below Run() happens on the daemon thread; other threads see
// only the atomics, the figures under their mutex, and the group's fields.
#include "sync/net_job.hpp"

#include <glog/logging.h>
#include <poll.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <random>
#include <cmath>
#include <iomanip>
#include <sstream>

#include "core/common.hpp"
#include "sync/svb.hpp"

namespace hogstream {

namespace {
using Clock = std::chrono::steady_clock;
double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }
// What the transport refused or lost, by kind: lost on the way (injected drops, a frame of
// ours corrupted: bad checksum), not this job's (another job's id, or from an address that is
// not a machine of the job), a failed MAC (another key, or a forgery), and datagrams that are
// no frame of ours at all.
struct Losses {
  uint64_t lost, foreign, mac, malformed, kernel;
};

uint64_t FreshNonce() {
  std::random_device rd;
  uint64_t v = 0;
  while (v == 0) v = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  return v;
}
// Adds a master's figures to a sum over masters (a maximum for staleness_max).
void Accumulate(MasterEndpoint::Stats& sum, const MasterEndpoint::Stats& s) {
  sum.sweeps += s.sweeps;
  sum.positions_sent += s.positions_sent;
  sum.deltas_applied += s.deltas_applied;
  sum.unanswered += s.unanswered;
  sum.staleness_sum += s.staleness_sum;
  sum.staleness_max = std::max(sum.staleness_max, s.staleness_max);
  sum.weight_milli += s.weight_milli;
  sum.refused_nonfinite += s.refused_nonfinite;
  sum.refused_absurd += s.refused_absurd;
  sum.deltas_duplicate += s.deltas_duplicate;
  sum.deltas_too_old += s.deltas_too_old;
  sum.deltas_other_epoch += s.deltas_other_epoch;
  sum.malformed += s.malformed;
}
// ShareChunks over the chunks not skipped (--svb); a skipped chunk has no owner (kNoPeer).
std::vector<PeerId> ShareStreamed(const std::vector<bool>& skipped, uint32_t count, const std::vector<PeerId>& peers) {
  if (skipped.empty()) return ShareChunks(count, peers);
  std::vector<uint32_t> streamed;
  for (uint32_t c = 0; c < count; ++c)
    if (!skipped[c]) streamed.push_back(c);
  const std::vector<PeerId> share = ShareChunks(static_cast<uint32_t>(streamed.size()), peers);
  std::vector<PeerId> owners(count, kNoPeer);
  for (size_t i = 0; i < streamed.size(); ++i) owners[streamed[i]] = share[i];
  return owners;
}
// "3 foreign, 2 bad MAC, 0 malformed, 5 control (4 unproven, 1 replayed), 0 by value": what a
// machine refused, by reason, for its log lines.
std::string RefusedText(const NetJobStats& s) {
  std::ostringstream os;
  uint64_t control = 0;
  for (uint64_t c : s.control_refused) control += c;
  os << s.foreign << " foreign, " << s.refused_mac << " bad MAC, " << s.malformed << " malformed, " << control << " control";
  if (control) {
    os << " (";
    const char* sep = "";
    for (size_t i = 0; i < std::size(s.control_refused); ++i) {
      if (!s.control_refused[i]) continue;
      os << sep << s.control_refused[i] << " " << ControlRefusalName(static_cast<ControlRefusal>(i));
      sep = ", ";
    }
    os << ")";
  }
  os << ", " << s.refused << " by value, " << s.stale << " stale data";
  if (s.clock_clamped) os << ", " << s.clock_clamped << " clocks clamped";
  if (s.kernel_dropped) os << "; " << s.kernel_dropped << " datagrams dropped by the kernel (receive buffer full)";
  return os.str();
}

// `not_sync`: good frames of the job whose payload is not one of sync's messages (Wire).
Losses LossesOf(const TransportCounters& tc, uint64_t not_sync) {
  auto r = [&](Reject why) { return tc.rejected[static_cast<size_t>(why)]; };
  Losses l;
  l.lost = tc.dropped + r(Reject::kChecksum);
  l.foreign = r(Reject::kJob) + r(Reject::kSender);
  l.mac = r(Reject::kMac);
  l.malformed = tc.rejected_total() - r(Reject::kChecksum) - l.foreign - l.mac + not_sync;
  l.kernel = tc.kernel_dropped;
  return l;
}
}  // namespace

const char* AgreeName(Agree a) {
  switch (a) {
    case kAgreePeers: return "--peers list (or its order, or the job's name)";
    case kAgreeNet: return "net (its parameter shapes)";
    case kAgreeSolver: return "solver settings (update rule or schedule)";
    case kAgreeSettings: return "exchange settings (--policy, --compress, --aggregate, chunking)";
    case kAgreeKinds: break;
  }
  return "?";
}

const char* ControlRefusalName(ControlRefusal r) {
  switch (r) {
    case ControlRefusal::kMalformed: return "malformed";
    case ControlRefusal::kUnproven: return "unproven";
    case ControlRefusal::kReplay: return "replayed";
    case ControlRefusal::kOldRun: return "old run";
    case ControlRefusal::kNotLeader: return "done not from the leader";
    case ControlRefusal::kDisagree: return "disagreeing";
    case ControlRefusal::kCount: break;
  }
  return "?";
}

void ParseAggregate(const std::string& text, int machines, SegmentRule* rule, float default_scale,
                    bool* share_momentum) {
  // The defaults (sync/README.md, "Many machines, one master"): every delta weighted by
  // 1 / its staleness in updates (the deltas of the others applied to its chunk since this
  // sender's previous one, + 1; about machines - 1 at equal pace), so that the job as a whole
  // moves about twice one machine's step whatever the count: more, with each machine's own
  // momentum acting on progress that reaches the others late, diverged from 4 machines on.
  // "share" (where the caller offers it): every delta whole and the solvers' momentum shared
  // (ShareMomentum) instead.
  rule->warmup_until = 0;
  rule->warmup_from = 1;
  rule->stale_budget = 0;
  rule->absurd = 100;
  rule->weight_scale = default_scale;
  if (share_momentum) *share_momentum = false;
  if (text == "sum") return;
  if (text == "share") {
    HS_REQUIRE(share_momentum) << "--aggregate=share: only for a job across machines whose deltas are added (not easgd, "
                                  "bsp or gsp, nor private copies in one process)";
    *share_momentum = machines >= 2;
    rule->staleness_weight = false;
    return;
  }
  rule->staleness_weight = rule->staleness_weight || machines > 2;
  if (text.empty() || text == "auto") return;
  std::stringstream ss(text);
  for (std::string item; std::getline(ss, item, ',');) {
    const size_t eq = item.find('=');
    const std::string key = item.substr(0, eq), value = eq == std::string::npos ? "" : item.substr(eq + 1);
    char* end = nullptr;
    const double v = std::strtod(value.c_str(), &end);
    HS_REQUIRE(eq != std::string::npos && !value.empty() && end && *end == 0 && v >= 0 && std::isfinite(v))
        << "--aggregate: '" << item << "' is not KEY=NUMBER (auto, sum, share, or weight=, scale=, warmup=, from=, budget=, absurd=)";
    if (key == "warmup") rule->warmup_until = static_cast<uint64_t>(v);
    else if (key == "from") rule->warmup_from = static_cast<float>(std::min(1.0, v));
    else if (key == "budget") rule->stale_budget = static_cast<uint64_t>(v);
    else if (key == "absurd") rule->absurd = static_cast<float>(v);
    else if (key == "weight") rule->staleness_weight = v != 0;
    else if (key == "scale") rule->weight_scale = static_cast<float>(std::max(v, 1e-3));
    else HS_REQUIRE(false) << "--aggregate: unknown key '" << key << "' (weight, scale, warmup, from, budget, absurd)";
  }
}

std::string ShareMomentum(int machines, pb::SolverParameter* param) {
  const std::string& type = param->type();
  const float mu = param->momentum();
  if (machines < 2 || !(type.empty() || type == "SGD" || type == "Nesterov") || !(mu > 0 && mu < 1)) return "";
  const double shared = std::max(0.0, 1.0 - machines * (1.0 - mu));
  const int speed = std::min(machines, kShareMomentumSpeed);
  // lr / (1 - momentum), each machine's speed, times speed / machines: the job moves at
  // `speed` times one machine's.
  const double scale = (1 - shared) / (1 - mu) * speed / machines;
  std::ostringstream os;
  os << machines << " machines add their deltas whole; each machine's momentum " << mu << " -> " << shared
     << " and base_lr " << param->base_lr() << " -> " << param->base_lr() * scale << " (the job moves at " << speed
     << " times one machine's speed; the asynchrony between machines acts as the rest of the momentum)";
  param->set_momentum(static_cast<float>(shared));
  param->set_base_lr(static_cast<float>(param->base_lr() * scale));
  return os.str();
}

struct NetJob::Peer {
  bool heard = false;  // ever (any incarnation)
  bool live = false;   // heard within dead_ms
  Clock::time_point last;
  // Freshness: the run (nonce) taken from it once it echoed ours, the last control counter
  // taken, the latest runs heard but not proven (echoed back so that it can prove itself),
  // and the runs a newer one replaced (never taken again).
  uint64_t nonce = 0, counter = 0;
  uint64_t hello[NetControl::kEchoes - 1] = {};
  std::vector<uint64_t> retired;
  bool disagrees = false;  // named once
  int64_t snapshots = 0, snapshots_taken = -1;  // its snapshot requests; those passed on (-1: none yet)
  Clock::time_point count_at;  // when `count` was last taken
  uint32_t flags = 0;
  int64_t count = 0;    // iterations its solvers ran, this incarnation (its clock)
  int64_t counted = 0;  // how much of `count` our group's counter holds
  int64_t view = 0;     // its view of the global iteration
  int64_t flushed = 0;  // its iterations whose progress has gone out to every owner (track_fresh)
  int64_t rate_count = 0;
  double rate = 0;
};

NetJob::NetJob(std::unique_ptr<Transport> transport, NetJobOptions opt)
    : transport_(std::move(transport)), wire_(transport_.get()), opt_(std::move(opt)) {
  HS_REQUIRE(transport_ != nullptr) << "a networked job needs a transport";
  HS_REQUIRE(opt_.machines >= 1 && opt_.machines < kNoPeer)
      << "a job of " << opt_.machines << " machines";
  HS_REQUIRE(opt_.rank >= 0 && opt_.rank < opt_.machines)
      << "machine rank " << opt_.rank << " outside a job of " << opt_.machines;
  HS_REQUIRE(!opt_.multicast || t_->caps().multicast)
      << "this transport cannot multicast; leave out --multicast";
  HS_REQUIRE(opt_.heartbeat_ms > 0 && opt_.dead_ms > 2 * opt_.heartbeat_ms)
      << "the dead-machine timeout (" << opt_.dead_ms << " ms) must exceed two heartbeats ("
      << opt_.heartbeat_ms << " ms)";
  nonce_ = FreshNonce();
  incarnation_ = static_cast<uint32_t>(nonce_ ^ (nonce_ >> 32)) | 1;
  epoch_ = static_cast<uint32_t>(std::chrono::duration_cast<std::chrono::seconds>(
                                     std::chrono::system_clock::now().time_since_epoch())
                                     .count());
  first_epoch_ = epoch_;
  for (int r = 0; r < opt_.machines; ++r) peers_.push_back(std::make_unique<Peer>());
  if (!opt_.quorum_ms) opt_.quorum_ms = 30 * opt_.dead_ms;
}

NetJob::~NetJob() {
  quit_.store(true);
  if (thread_.joinable()) thread_.join();
}

std::string NetJob::Name(int r) const {
  std::ostringstream os;
  os << "machine " << r;
  if (static_cast<size_t>(r) < opt_.names.size() && !opt_.names[r].empty()) os << " (" << opt_.names[r] << ")";
  return os.str();
}

void NetJob::set_machine_group(std::vector<int> groups) {
  HS_REQUIRE(!thread_.joinable()) << "NetJob::set_machine_group after Attach";
  HS_CHECK(groups.empty() || static_cast<int>(groups.size()) == opt_.machines) << groups.size() << " groups";
  opt_.machine_group = std::move(groups);
  opt_.track_fresh = opt_.track_fresh || !opt_.machine_group.empty();
}

void NetJob::set_agreement(Agree which, uint64_t hash) {
  HS_REQUIRE(!thread_.joinable()) << "NetJob::set_agreement after Attach";
  opt_.agree[which] = hash;
}

std::string NetJob::error() const {
  std::lock_guard<std::mutex> lock(figures_mu_);
  return fatal_;
}

void NetJob::Attach(MachineGroup* group, int local_solvers, float* weights, size_t n,
                    const std::vector<size_t>& params, const std::function<bool()>& stop) {
  HS_REQUIRE(!thread_.joinable() && !finished_called_) << "NetJob::Attach called twice";
  if (!opt_.agree[kAgreeNet]) {  // the buffer's layout, at least
    std::vector<uint64_t> shape{n};
    shape.insert(shape.end(), params.begin(), params.end());
    opt_.agree[kAgreeNet] = Digest64(shape.data(), shape.size() * sizeof(uint64_t));
  }
  g_ = group;
  local_ = local_solvers;
  w_ = weights;
  n_ = n;
  const uint32_t most = t_->caps().max_payload / sizeof(float) / 4 * 4;
  chunk_floats_ = opt_.chunk_floats ? opt_.chunk_floats : most;
  HS_REQUIRE(chunk_floats_ > 0 && chunk_floats_ <= most)
      << "chunks of " << chunk_floats_ << " floats do not fit this transport's messages ("
      << most << " floats at most)";
  layout_ = std::make_unique<ChunkLayout>(n_, chunk_floats_, opt_.chunk_at_params || svb_ ? params : std::vector<size_t>{});
  if (svb_) skipped_ = SkippedChunks(*layout_, svb_skip_);
  slave_ = std::make_unique<SlaveEndpoint>(w_, *layout_, transport_.get());
  slave_->set_codec(opt_.rule.codec);
  slave_->set_on_refused([this](PeerId from, uint32_t c, Refusal why) { Refused(from, c, why, "position"); });
  // Data frames are bound to the sender's run: positions count only once that run has proved
  // itself (OnControl lowers the floor to the first epoch it announced).
  for (int r = 0; r < opt_.machines; ++r)
    if (r != opt_.rank) slave_->set_min_epoch(static_cast<PeerId>(r), std::numeric_limits<uint32_t>::max());
  named_.assign(static_cast<size_t>(opt_.machines) * 2, 0);
  // Shared by every master endpoint; a synchronous group's machines share their staleness.
  opt_.rule.updates = std::make_shared<ChunkUpdates>(layout_->count, opt_.machine_group);
  g_->HoldFinal();
  attached_at_ = Clock::now();
  g_->SetLeads(opt_.machines == 1);
  thread_ = std::thread([this] { Run(); });
  while (!start_ok_.load() && !start_failed_.load()) {
    if (stop && stop()) {
      quit_.store(true);
      thread_.join();
      HS_REQUIRE(false) << "stopped while waiting for the other machines";
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (start_failed_.load()) {
    thread_.join();
    HS_REQUIRE(false) << start_error_;
  }
}

void NetJob::Finish() {
  if (finished_called_) return;
  finished_called_ = true;
  if (!thread_.joinable()) return;
  // The others hear this machine's last state a few times; the leader's "done" until every
  // live machine has said it back (a lost "done" would make one of them take over and end
  // the job again), or dead_ms.
  const Clock::time_point until = Clock::now() + std::chrono::milliseconds(opt_.dead_ms);
  std::this_thread::sleep_for(std::chrono::milliseconds(5 * opt_.heartbeat_ms));
  while (leads() && !all_done_.load() && Clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(opt_.heartbeat_ms));
  quit_.store(true);
  thread_.join();
  if (!opt_.log || !g_) return;
  // What this machine did over the whole job, for the log (and tools that read it).
  const int64_t mine = LocalIterations();
  const double secs = std::max(1e-9, Seconds(Clock::now() - attached_at_));
  const TransportCounters tc = t_->counters();
  Figures();
  const NetJobStats s = stats();
  LOG(INFO) << std::fixed << std::setprecision(1) << "Network: " << Name(opt_.rank) << " ran " << mine
            << " iterations in " << secs << " s (" << mine / secs << " iter/s); sent "
            << std::setprecision(3) << tc.bytes_sent * 1e-9 << " GB, received " << tc.bytes_received * 1e-9
            << " GB (" << (tc.bytes_sent + tc.bytes_received) * 8e-9 / secs << " Gbit/s); " << s.lost
            << " frames lost (" << std::setprecision(2) << (tc.sent ? 100.0 * s.lost / tc.sent : 0.0)
            << "% of sent); " << reshares_ << " re-shares; refused: " << RefusedText(s);
}

bool NetJob::leads() const { return lead_.load() == opt_.rank; }

int64_t NetJob::LocalIterations() const {
  int64_t n = 0;
  for (int r = 0; g_ && r < local_; ++r) n += g_->shared().done[r].load(std::memory_order_relaxed);
  return n;
}

uint32_t NetJob::Flags() const {
  uint32_t f = 0;
  if (ready_) f |= kNetReady;
  if (phase_ == Phase::kTraining) f |= kNetTraining;
  if (finished_) f |= kNetFinished;
  if (flushed_) f |= kNetFlushed;
  if (done_) f |= kNetDone;
  if (done_ && g_ && g_->final_failed()) f |= kNetKeep;
  if (stop_) f |= kNetStop;
  return f;
}

// ---------------------------------------------------------------- the daemon

void NetJob::Run() {
  started_ = Clock::now();
  last_post_ = last_figures_ = started_;
  last_control_ = started_ - std::chrono::hours(1);
  const int fd = t_->wait_fd();
  bool reported_status = false;
  while (!quit_.load(std::memory_order_relaxed)) {
    const Clock::time_point now = Clock::now();
    const size_t received = Receive();
    if (disagreed_ && phase_ == Phase::kStart && now - disagreed_at_ > std::chrono::milliseconds(5 * opt_.heartbeat_ms)) {
      start_failed_.store(true);  // a machine that disagrees (OnControl named it)
      return;
    }
    // An answer due at once goes out at most every 2 ms: forged hellos (new nonces without a
    // key) must not make this machine send a message for each.
    if (now - last_control_ >= std::chrono::milliseconds(opt_.heartbeat_ms) ||
        (answer_now_ && now - last_control_ >= std::chrono::milliseconds(2))) {
      answer_now_ = false;
      SendControl();
    }
    CheckLiveness();
    if (phase_ == Phase::kStart) {
      if (!Start(now)) return;
    } else {
      if (phase_ == Phase::kJoining && !Join(now)) return;
      if (phase_ == Phase::kTraining && recover_asked_.load() > recover_done_.load() && !recovering_) BeginRecovery("lost its copy of the weights (non-finite)");
      Reshare();
      Bridge();
      Post();
      if (svb_) SendFactors();
    }
    t_->Flush();
    if (now - last_figures_ >= std::chrono::milliseconds(100)) Figures();
    if (now - last_clocks_ >= std::chrono::milliseconds(2)) {
      last_clocks_ = now;
      Clocks();
    }
    const Status st = t_->status();
    if (!st.ok() && !reported_status) {
      reported_status = true;
      LOG(ERROR) << "Network: " << st.what;
    }
    // Idle (nothing came in): sleep on the transport until something does, 1 ms at most, so
    // pacing, heartbeats and the group are looked at often enough.
    if (received == 0 && fd >= 0) {
      pollfd p{fd, POLLIN, 0};
      ::poll(&p, 1, 1);
    } else if (received == 0) {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
}

bool NetJob::Start(Clock::time_point now) {
    // A newcomer to a running job joins it; otherwise a new job starts once every machine
    // is heard from and ready (each is ready as soon as it has heard every other one).
    bool all = true, running = false;
    std::vector<int64_t> views;  // of the machines training: a joiner takes their median
    for (int r = 0; r < opt_.machines; ++r) {
      if (r == opt_.rank) continue;
      const Peer& p = *peers_[r];
      all = all && p.live;
      if (p.live && (p.flags & kNetTraining)) {
        running = true;
        views.push_back(p.view);
      }
    }
    // The global iteration a joiner starts from: the median of the members' views (the lower
    // one of two: a view too high would end this machine's training at once), so that no
    // single member, mistaken or lying, sets it where three or more are heard; every
    // member's own count only grows by what it could have run (OnControl).
    std::sort(views.begin(), views.end());
    const int64_t view = views.empty() ? 0 : views[(views.size() - 1) / 2];
    if (running && !ready_ && svb_) {
      start_error_ = "--svb: this machine cannot join a running job (the InnerProduct weights travel only as gradients)";
      start_failed_.store(true);
      return false;
    }
    // (Once ready, this machine is one of a new job's first.) A joiner waits until it hears
    // a strict majority of the job, whose views it takes (Quorum's tie rule, exactly half
    // with machine 0, would let machine 0 join on one other's view alone).
    const std::vector<bool> reached = Reached(now);
    if (running && !ready_ && 2 * std::count(reached.begin(), reached.end(), true) > opt_.machines) {
      phase_ = Phase::kJoining;
      joined_running_.store(true);
      g_->shared().iter.store(view);
      for (auto& p : peers_) p->counted = p->count;  // their past is in `view` already
      LOG_IF(INFO, opt_.log) << "Network: " << Name(opt_.rank) << " joins a running job at iteration "
                             << view << "; receiving the weights";
      Reshare();
    } else if (all) {
      ready_ = true;
      bool all_ready = true;
      for (int r = 0; r < opt_.machines; ++r)
        if (r != opt_.rank) all_ready = all_ready && (peers_[r]->flags & kNetReady);
      if (all_ready || running) {
        phase_ = Phase::kTraining;
        Reshare();
        LOG_IF(INFO, opt_.log) << "Network: all " << opt_.machines << " machines heard from; "
                               << Name(opt_.rank) << " masters " << owned_.size() << " of "
                               << slave_->layout().count << " chunks of " << chunk_floats_ << " floats"
                               << (opt_.chunk_at_params ? " at most, cut at parameter boundaries" : "");
        start_ok_.store(true);
      }
    } else if (now - started_ > std::chrono::milliseconds(opt_.start_ms)) {
      std::ostringstream os;
      os << "no word from";
      for (int r = 0; r < opt_.machines; ++r)
        if (r != opt_.rank && !peers_[r]->live) os << " " << Name(r);
      os << " after " << opt_.start_ms / 1000.0 << " s";
      const Losses l = LossesOf(t_->counters(), t_->malformed());
      uint64_t unproven = control_refused_[static_cast<size_t>(ControlRefusal::kUnproven)];
      if (l.mac) os << "; " << l.mac << " frames failed the MAC: does every machine have the same --job-key?";
      if (l.foreign) os << "; " << l.foreign << " frames came from another job, or from an address not in --peers "
                        << "(or claiming another machine's rank): is every machine given the same --peers, in the same order, and --job?";
      if (!l.mac && !l.foreign && unproven)
        os << "; its messages arrive but never echo this run (do its frames come back to it?)";
      if (!l.mac && !l.foreign && !unproven) os << " (is it started, with the same --peers list and job?)";
      start_error_ = os.str();
      start_failed_.store(true);
      return false;
    }
  return true;
}

bool NetJob::Join(Clock::time_point now) {
  bool others_sound = false;  // another machine has the weights (a recovery takes them from it)
  for (int r = 0; r < opt_.machines; ++r)
    others_sound = others_sound || (r != opt_.rank && peers_[r]->live && (peers_[r]->flags & kNetReady));
  if (others_sound) owner_seen_ = now;
  if (slave_->chunks_heard() == slave_->layout().count && slave_->retaking() == 0) {
    ready_ = true;
    phase_ = Phase::kTraining;
    if (recovering_) {
      recovering_ = false;
      ++recoveries_;
      g_->SetPaused(false);
      LOG_IF(INFO, opt_.log) << "Network: " << Name(opt_.rank) << " re-took the job's weights in "
                             << std::setprecision(3) << Seconds(now - recover_began_) << " s; training on";
      recover_done_.store(recover_target_);
    } else {
      LOG_IF(INFO, opt_.log) << "Network: " << Name(opt_.rank) << " has the weights after "
                             << std::setprecision(3) << Seconds(now - started_) << " s; taking a share";
      start_ok_.store(true);
    }
  } else if (recovering_) {
    if (now - owner_seen_ > std::chrono::milliseconds(opt_.dead_ms)) {
      recover_error_ = "every machine's copy of the weights diverged (non-finite) and none is left to recover "
                       "from: the job cannot go on (lower base_lr, or check the data)";
      recover_failed_.store(true);
      return false;
    }
  } else if (now - started_ > std::chrono::milliseconds(opt_.start_ms)) {
    std::ostringstream os;
    os << "joining a running job: only " << slave_->chunks_heard() << " of " << slave_->layout().count
       << " chunks received after " << opt_.start_ms / 1000.0 << " s";
    start_error_ = os.str();
    start_failed_.store(true);
    return false;
  }
  return true;
}

size_t NetJob::Receive() {
  size_t handled = 0;
  for (;; ++handled) {
    if (next_ == polled_) {
      if (polled_) t_->Release(polled_);
      next_ = polled_ = 0;
      polled_ = t_->Poll(batch_, std::size(batch_));
      if (polled_ == 0) return handled;
    }
    const Message& m = batch_[next_];
    const PeerId src = m.h.source;
    if (src >= opt_.machines || src == opt_.rank) {
      ++next_;  // not one of the job's machines (the transport knows only them: defensive)
      continue;
    }
    switch (m.h.kind) {
      case MsgKind::kPosition:
        if (!slave_->Answer(m)) {
          t_->Flush();
          if (!slave_->Answer(m)) return handled;  // no slot for its delta yet: this batch waits
        }
        break;
      case MsgKind::kDelta: {
        MasterEndpoint* master = masters_.empty() ? nullptr : opt_.multicast ? masters_[0].get() : masters_[src].get();
        if (master) master->OnDelta(m);
        break;
      }
      case MsgKind::kIteration:
        OnControl(m);
        break;
      case MsgKind::kFactors:
        if (svb_) svb_->OnMessage(m);
        break;
      default:
        break;
    }
    ++next_;
  }
}

void NetJob::OnControl(const Message& m) {
  const PeerId src = m.h.source;
  Peer& p = *peers_[src];
  const Clock::time_point now = Clock::now();
  auto refuse = [&](ControlRefusal why) { ++control_refused_[static_cast<size_t>(why)]; };
  if (m.h.length != sizeof(NetControl)) return refuse(ControlRefusal::kMalformed);
  NetControl b;
  std::memcpy(&b, m.payload, sizeof b);
  if (b.nonce == 0) return refuse(ControlRefusal::kMalformed);
  // Freshness. A message is believed only once its sender has echoed this run's nonce (drawn
  // at random at our start): a frame recorded in an earlier run cannot, whatever its MAC.
  // Until then it is a hello: its nonce is echoed back in ours, so a live machine proves
  // itself within two control intervals.
  if (std::find(p.retired.begin(), p.retired.end(), b.nonce) != p.retired.end())
    return refuse(ControlRefusal::kOldRun);
  auto echo_back = [&] {  // our next messages to it echo its nonce
    if (b.nonce != p.nonce && std::find(std::begin(p.hello), std::end(p.hello), b.nonce) == std::end(p.hello)) {
      for (int i = NetControl::kEchoes - 2; i > 0; --i) p.hello[i] = p.hello[i - 1];
      p.hello[0] = b.nonce;
      answer_now_ = true;  // a new run of it: its proof need not wait for our next interval
    }
  };
  if (std::find(std::begin(b.echo), std::end(b.echo), nonce_) == std::end(b.echo)) {
    echo_back();
    return refuse(ControlRefusal::kUnproven);
  }
  if (b.nonce == p.nonce && b.counter <= p.counter) return refuse(ControlRefusal::kReplay);
  // Agreement: the same peers list, net, solver and exchange settings.
  for (int a = 0; a < kAgreeKinds; ++a) {
    if (!b.agree[a] || !opt_.agree[a] || b.agree[a] == opt_.agree[a]) continue;
    if (!p.disagrees) {
      p.disagrees = true;
      std::ostringstream os;
      os << Name(src) << " differs from " << Name(opt_.rank) << " in its " << AgreeName(static_cast<Agree>(a))
         << ": every machine of a job needs the same";
      if (phase_ == Phase::kStart) {
        // Ends the start after a few more control messages, so that the other machine
        // hears this one (proven) and names the difference too.
        if (!disagreed_) start_error_ = os.str();
        disagreed_ = true;
        disagreed_at_ = now;
      } else {
        LOG_IF(ERROR, opt_.log) << "Network: " << os.str() << "; its messages are refused";
      }
    }
    echo_back();  // so that it can believe us, and name the difference too
    return refuse(ControlRefusal::kDisagree);
  }
  if (b.nonce != p.nonce) {
    // Another run of that machine, proven fresh: first contact, or a restart.
    if (p.nonce != 0) {
      if (p.retired.size() >= 16) p.retired.erase(p.retired.begin());
      p.retired.push_back(p.nonce);
    }
    if (p.heard) {
      // Restarted: its numbering starts again, and its iterations count from zero.
      LOG_IF(INFO, opt_.log) << "Network: " << Name(src) << " restarted; it rejoins";
      slave_->ForgetOwner(src);
      p.count = p.counted = p.rate_count = p.flushed = 0;
      p.rate = 0;
    }
    p.snapshots = 0;
    p.snapshots_taken = -1;
    p.nonce = b.nonce;
    p.count_at = attached_at_;
    // Its positions count from here, and only those of this run (epochs above the one it
    // announces): a position recorded in an earlier run is stale even for a chunk that has
    // not yet heard this run's master.
    slave_->set_min_epoch(src, m.h.epoch);
    answer_now_ = true;  // echo its nonce at once: it believes this machine one trip later
    for (uint64_t& h : p.hello) h = h == b.nonce ? 0 : h;
  }
  p.counter = b.counter;
  uint32_t flags = m.h.chunk;
  if ((flags & kNetDone) && src != leader_ && !done_) {
    // Only the leader ends the job; the others say "done" back once they have heard it.
    refuse(ControlRefusal::kNotLeader);
    flags &= ~(kNetDone | kNetKeep);
  }
  if (!p.live && p.heard && phase_ == Phase::kTraining)
    LOG_IF(INFO, opt_.log) << "Network: " << Name(src) << " is back";
  const int64_t claimed = static_cast<int64_t>(std::min<uint64_t>(m.h.clock, std::numeric_limits<int64_t>::max()));
  if (!p.heard && joined_running_.load(std::memory_order_relaxed)) {
    // First heard after this machine joined a running job: its past is in the view taken, so
    // its clock is taken as it is and counts only from here.
    p.count = p.counted = claimed;
    p.count_at = now;
  }
  p.heard = p.live = true;
  p.last = now;
  p.flags = flags;
  // Its clock only grows, and by no more than it could have run since: 1 024 iterations plus
  // eight times the fastest rate it has shown (or this machine's), over the time since it was
  // last taken. A jump beyond that is taken in part (the rest comes with its next messages).
  if (claimed > p.count) {
    const double secs = Seconds(now - p.count_at);
    const double rate = std::max({p.rate, peers_[opt_.rank]->rate, 1000.0});
    const int64_t most = p.count + 1024 + static_cast<int64_t>(std::min(8 * rate * secs, 1e15));
    if (claimed > most) ++clock_clamped_;
    p.count = std::min(claimed, most);
    p.count_at = now;
  }
  p.view = static_cast<int64_t>(std::min<uint64_t>(m.h.seq, std::numeric_limits<int64_t>::max()));
  p.flushed = std::min(b.flushed, p.count);
  p.snapshots = std::max(p.snapshots, b.snapshots);
}

void NetJob::SendControl() {
  const Clock::time_point now = Clock::now();
  Header h;
  h.kind = MsgKind::kIteration;
  h.epoch = first_epoch_;  // every master epoch of this run is above it (set_min_epoch)
  h.chunk = Flags();
  h.clock = static_cast<uint64_t>(LocalIterations());
  h.seq = g_ ? static_cast<uint64_t>(g_->shared().iter.load(std::memory_order_relaxed)) : 0;
  h.length = sizeof(NetControl);
  NetControl b;
  b.nonce = nonce_;
  b.counter = ++control_counter_;
  // How many of its iterations have gone out (what a synchronous round waits for).
  b.flushed = opt_.track_fresh ? flushed_iter_.load(std::memory_order_relaxed) : 0;
  b.snapshots = g_ ? g_->shared().snapshot_requests.load(std::memory_order_relaxed) - snapshots_passed_ : 0;
  std::copy(std::begin(opt_.agree), std::end(opt_.agree), b.agree);
  for (int r = 0; r < opt_.machines; ++r) {
    if (r == opt_.rank) continue;
    std::byte* slot = t_->AcquireSend();
    if (!slot) {
      t_->Flush();
      if (!(slot = t_->AcquireSend())) return;  // try again next turn (last_control_ not moved)
    }
    const Peer& p = *peers_[r];
    b.echo[0] = p.nonce;
    std::copy(std::begin(p.hello), std::end(p.hello), b.echo + 1);
    std::memcpy(slot, &b, sizeof b);
    t_->CommitSend(Dest::Peer(static_cast<PeerId>(r)), h);
  }
  t_->Flush();
  last_control_ = now;
}

void NetJob::CheckLiveness() {
  const Clock::time_point now = Clock::now();
  uint64_t dead = 0;
  for (int r = 0; r < opt_.machines; ++r) {
    Peer& p = *peers_[r];
    if (r != opt_.rank && p.live && now - p.last > std::chrono::milliseconds(opt_.dead_ms)) {
      p.live = false;
      if (phase_ != Phase::kStart && !(p.flags & kNetDone))
        LOG_IF(INFO, opt_.log) << "Network: " << Name(r) << " silent for " << opt_.dead_ms / 1000.0
                               << " s: taken for dead; its chunks are re-shared and its data read by the others";
    }
    // Once training, a machine heard and gone (not one that finished the job) leaves its data
    // partition to the others.
    if (r != opt_.rank && r < 64 && phase_ == Phase::kTraining && p.heard && !p.live && !(p.flags & kNetDone))
      dead |= uint64_t{1} << r;
  }
  dead_.store(dead, std::memory_order_relaxed);
}

void NetJob::Reshare() {
  std::vector<PeerId> owners_ranks;
  std::vector<bool> live(opt_.machines, false);
  for (int r = 0; r < opt_.machines; ++r) {
    const bool self = r == opt_.rank;
    live[r] = self || peers_[r]->live;
    if (self ? ready_ : (peers_[r]->live && (peers_[r]->flags & kNetReady))) owners_ranks.push_back(static_cast<PeerId>(r));
  }
  if (owners_ranks.empty()) return;  // nobody has the weights (cannot happen once started)
  std::vector<PeerId> owners = ShareStreamed(skipped_, slave_->layout().count, owners_ranks);
  // Masters go to the live machines (a newcomer receives positions before it owns anything).
  bool same = owners == owners_;
  if (same && !opt_.multicast) {
    for (int r = 0; r < opt_.machines; ++r) {
      if (r == opt_.rank || owned_.empty()) continue;
      same = same && (masters_[r] != nullptr) == static_cast<bool>(live[r]);
    }
  }
  int receivers = 0;  // the live machines a multicast position reaches
  for (int r = 0; r < opt_.machines; ++r) receivers += r != opt_.rank && live[r];
  if (same && !masters_.empty() == !owned_.empty()) {
    if (opt_.multicast && !masters_.empty()) masters_[0]->set_receivers(static_cast<uint32_t>(receivers));
    return;
  }
  for (const auto& m : masters_)
    if (m) Accumulate(retired_, m->stats());
  masters_.clear();
  if (owners != owners_) {
    if (!owners_.empty()) ++reshares_;
    slave_->set_owners(owners, static_cast<PeerId>(opt_.rank));
    owners_ = owners;
    owned_.clear();
    for (uint32_t c = 0; c < owners_.size(); ++c)
      if (owners_[c] == opt_.rank) owned_.push_back(c);
    if (reshares_ > 0 && opt_.log) {
      std::ostringstream os;
      os << "Network: chunks re-shared among machines";
      for (PeerId r : owners_ranks) os << " " << r;
      os << "; " << Name(opt_.rank) << " masters " << owned_.size() << " of " << owners_.size();
      LOG(INFO) << os.str();
    }
  }
  if (owned_.empty()) return;
  FlowOptions flow;
  flow.window = opt_.window;
  auto make = [&](Dest to) {
    auto m = std::make_unique<MasterEndpoint>(w_, *layout_, transport_.get(), to, Access::kPlain, flow);
    m->set_owned(owned_);
    m->set_rule(opt_.rule);
    m->set_epoch(++epoch_);  // newer than any this machine used: slaves take it at once
    m->set_on_refused([this](PeerId from, uint32_t c, Refusal why) { Refused(from, c, why, "delta"); });
    return m;
  };
  if (opt_.multicast) {
    masters_.push_back(make(Dest::Group(0)));
    masters_[0]->set_receivers(static_cast<uint32_t>(receivers));  // a window per receiver
  } else {
    masters_.resize(opt_.machines);
    for (int r = 0; r < opt_.machines; ++r)
      if (r != opt_.rank && live[r]) masters_[r] = make(Dest::Peer(static_cast<PeerId>(r)));
  }
  credit_.assign(masters_.size(), 0);
}

void NetJob::Post() {
  const Clock::time_point now = Clock::now();
  const double dt = Seconds(now - last_post_);
  last_post_ = now;
  const uint64_t clock = static_cast<uint64_t>(g_->shared().iter.load(std::memory_order_relaxed));
  for (size_t i = 0; i < masters_.size(); ++i) {
    MasterEndpoint* m = masters_[i].get();
    if (!m) continue;
    const double sweep = static_cast<double>(owned_.size());
    credit_[i] = opt_.sweep_ms ? std::min(sweep, credit_[i] + sweep * dt * 1000.0 / opt_.sweep_ms) : sweep;
    m->set_clock(clock);
    if (credit_[i] >= 1) credit_[i] -= static_cast<double>(m->PostPositions(static_cast<size_t>(credit_[i])));
  }
}

void NetJob::Bridge() {
  const Clock::time_point now = Clock::now();
  CountOthers();
  if (!WatchQuorum(now)) return;
  ChooseLeader(now);
  PassRequests();
  Drain(now);
  if (g_->shared().job_done.load() && leader_ == opt_.rank) done_ = true;
}

void NetJob::CountOthers() {
  // The others' new iterations join this machine's count of the global iteration.
  for (int r = 0; r < opt_.machines; ++r) {
    Peer& p = *peers_[r];
    if (r == opt_.rank || !p.heard || p.count <= p.counted) continue;
    g_->shared().iter.fetch_add(p.count - p.counted, std::memory_order_relaxed);
    p.counted = p.count;
  }
}

bool NetJob::WatchQuorum(Clock::time_point now) {
  // Quorum: a machine cut off from most of the job neither leads nor tests nor snapshots (two
  // sides of a partition would each write the job's files) and its solvers wait; back with the
  // others, it re-takes their weights as a joiner does, so that the two sides' chunks are
  // never spliced.
  const std::vector<bool> live = Reached(now);
  const bool quorum = Quorum(live);
  if (quorum != quorum_) {
    quorum_ = quorum;
    if (!quorum) {
      g_->SetPaused(true);  // cut off, its solvers wait: their work would be dropped
      quorum_lost_at_ = now;
      lost_quorum_ = true;
      LOG_IF(WARNING, opt_.log) << "Network: " << Name(opt_.rank) << " reaches " << std::count(live.begin(), live.end(), true)
                                << " of " << opt_.machines << " machines, not a majority: it does not lead, test or "
                                << "snapshot, its solvers wait, and it re-takes the job's weights once the others are back";
    } else if (lost_quorum_ && phase_ == Phase::kTraining && !recovering_) {
      lost_quorum_ = false;
      BeginRecovery("is back with a majority of the job");  // its solvers wait until it has the weights
    } else {
      g_->SetPaused(false);
    }
  }
  if (!quorum_ && phase_ != Phase::kStart && now - quorum_lost_at_ > std::chrono::milliseconds(opt_.quorum_ms)) {
    std::ostringstream os;
    os << Name(opt_.rank) << " has reached no majority of the job's " << opt_.machines << " machines for "
       << opt_.quorum_ms / 1000.0 << " s: it gives up (the others go on without it)";
    LOG_IF(ERROR, opt_.log) << "Network: " << os.str();
    {
      std::lock_guard<std::mutex> lock(figures_mu_);
      fatal_ = os.str();
    }
    g_->EndJob();  // its solvers return; the caller reports error()
    quit_.store(true);
    return false;
  }
  return true;
}

void NetJob::ChooseLeader(Clock::time_point now) {
  // Leader: the lowest live rank that has the weights, on the side with a quorum.
  int leader = -1;
  for (int r = 0; quorum_ && r < opt_.machines && leader < 0; ++r)
    if (r == opt_.rank ? ready_ : (peers_[r]->live && (peers_[r]->flags & kNetReady))) leader = r;
  // The lead is a lease: this machine leads only while it has heard a majority within 3/4 of
  // dead_ms. Cut off, it stops leading (testing, snapshotting) a quarter of dead_ms before the
  // others take it for dead and one of them takes over: two leaders never overlap.
  if (leader == opt_.rank && !Quorum(Reached(now, std::chrono::milliseconds(opt_.dead_ms * 3 / 4)))) leader = -1;
  if (leader != leader_) {
    if (leader_ >= 0 && leader >= 0 && opt_.log)
      LOG(INFO) << "Network: " << Name(leader) << " leads the job now (tests, display, snapshots)";
    leader_ = leader;
    lead_.store(leader);
    g_->SetLeads(leader == opt_.rank);
  }
}

void NetJob::PassRequests() {
  // Requests and the end of the job, to and from the others. A signal on any machine is a
  // request (its stop flag) to the leader; the leader's own stop flag tells every machine to
  // stop training now, so that the job ends at one global iteration and the leader's drain
  // finds everyone's last deltas at once.
  if (g_->shared().stop_requested.load()) stop_ = true;
  for (int r = 0; r < opt_.machines; ++r) {
    Peer& p = *peers_[r];
    if (r == opt_.rank || !p.live) continue;
    if (p.flags & kNetStop) {
      g_->Request(SolverAction::STOP);
      if (r == leader_) g_->Stop();
    }
    if (p.snapshots > p.snapshots_taken) {  // a snapshot request (SIGHUP) on that machine
      if (p.snapshots_taken >= 0) {
        g_->shared().snapshot_requests.fetch_add(p.snapshots - p.snapshots_taken);
        snapshots_passed_ += p.snapshots - p.snapshots_taken;  // not this machine's own: never echoed
      }
      p.snapshots_taken = p.snapshots;
    }
    if (p.flags & kNetDone) {  // the leader has finished the job: whatever still trains stops
      if (p.flags & kNetKeep) g_->SetFailedElsewhere();  // before job_done: Finish reads it then
      g_->EndJob();
      done_ = true;  // and says so back, so the leader knows it was heard
    }
  }
  bool heard_done = true;
  for (int r = 0; r < opt_.machines; ++r)
    if (r != opt_.rank && peers_[r]->live) heard_done = heard_done && (peers_[r]->flags & kNetDone);
  all_done_.store(done_ && heard_done);
}

void NetJob::Drain(Clock::time_point now) {
  // This machine's solvers done: its progress goes out (flushed once every chunk it does not
  // own has been answered since). The leader's final snapshot waits for the others' last
  // deltas: every live machine flushed, then each chunk it does not own answered twice more
  // (the owners' values with those deltas in), or drain_ms.
  bool local_done = local_ > 0;
  for (int r = 0; r < local_; ++r) local_done = local_done && g_->shared().finished[r].load();
  if (local_done && !finished_) {
    finished_ = true;
    finished_at_ = now;
    answers_at_finish_.resize(owners_.size());
    for (uint32_t c = 0; c < owners_.size(); ++c) answers_at_finish_[c] = slave_->answers(c);
  }
  auto answered_since = [&](const std::vector<uint64_t>& at, uint64_t more) {
    for (uint32_t c = 0; c < owners_.size(); ++c)
      if (owners_[c] != opt_.rank && owners_[c] != kNoPeer && slave_->answers(c) < at[c] + more) return false;
    return true;
  };
  if (finished_ && !flushed_)
    flushed_ = answered_since(answers_at_finish_, 1) || now - finished_at_ > std::chrono::milliseconds(opt_.drain_ms);
  if (finished_ && g_->holding_final() && leader_ == opt_.rank) {
    bool others = true;
    for (int r = 0; r < opt_.machines; ++r)
      if (r != opt_.rank && peers_[r]->live) others = others && (peers_[r]->flags & kNetFlushed);
    if (others && flushed_ && !draining_) {
      draining_ = true;
      answers_at_drain_.resize(owners_.size());
      for (uint32_t c = 0; c < owners_.size(); ++c) answers_at_drain_[c] = slave_->answers(c);
    }
    const bool drained = draining_ && answered_since(answers_at_drain_, 2);
    if (drained || now - finished_at_ > std::chrono::milliseconds(opt_.drain_ms)) {
      if (!drained) LOG_IF(INFO, opt_.log) << "Network: the others' last deltas not all in after "
                                           << opt_.drain_ms / 1000.0 << " s; snapshotting what is here";
      g_->ReleaseFinal();
    }
  }
}

std::vector<bool> NetJob::Reached(Clock::time_point now, Clock::duration within) const {
  std::vector<bool> reached(opt_.machines, false);
  for (int r = 0; r < opt_.machines; ++r)
    reached[r] = r == opt_.rank || (peers_[r]->live && now - peers_[r]->last <= within);
  return reached;
}

bool NetJob::Quorum(const std::vector<bool>& live) const {
  const int n = static_cast<int>(std::count(live.begin(), live.end(), true));
  return 2 * n > opt_.machines || (2 * n == opt_.machines && live[0]);
}

void NetJob::BeginRecovery(const char* why) {
  recover_target_ = recover_asked_.load();
  recovering_ = true;
  recover_began_ = owner_seen_ = Clock::now();
  ready_ = false;  // the others stop taking this machine's positions and share its chunks out
  phase_ = Phase::kJoining;
  LOG_IF(WARNING, opt_.log) << "Network: " << Name(opt_.rank) << " " << why << " at iteration "
                            << g_->shared().iter.load() << "; it hands over its chunks and re-takes the job's weights";
  Reshare();            // owns nothing now
  slave_->RetakeAll();  // every chunk's next position taken whole
}

bool NetJob::Recover(std::string* why) {
  const uint64_t ticket = recover_asked_.fetch_add(1) + 1;
  while (recover_done_.load() < ticket) {
    if (recover_failed_.load() || quit_.load() || !thread_.joinable()) {
      if (why) *why = recover_failed_.load() ? recover_error_ : "the network daemon has stopped";
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

void NetJob::Refused(PeerId from, uint32_t chunk, Refusal why, const char* what) {
  if (from >= opt_.machines) return;
  uint8_t& named = named_[static_cast<size_t>(from) * 2 + (why == Refusal::kAbsurd)];
  if (named || !opt_.log) return;
  named = 1;
  LOG(WARNING) << "Network: refused a" << (why == Refusal::kAbsurd ? "n absurd " : " non-finite ") << what << " from "
               << Name(from) << " (chunk " << chunk << (why == Refusal::kAbsurd ? ", RMS over the bound" : "")
               << "); further refusals are counted in the Network line";
}

void NetJob::Clocks() {
  // With synchronous groups, only the machines of this one's group count, by what they have
  // sent out (flushed), not merely run.
  const bool grouped = !opt_.machine_group.empty();
  int64_t slowest = std::numeric_limits<int64_t>::max();
  for (int r = 0; r < opt_.machines; ++r) {
    const Peer& p = *peers_[r];
    if (grouped && opt_.machine_group[r] != opt_.machine_group[opt_.rank]) continue;
    if (r != opt_.rank && p.live && (p.flags & kNetTraining) && !(p.flags & kNetFinished))
      slowest = std::min(slowest, grouped ? p.flushed : p.count);
  }
  slowest_other_.store(slowest == std::numeric_limits<int64_t>::max() ? LocalIterations() : slowest,
                       std::memory_order_relaxed);
  if (!opt_.track_fresh || !slave_ || owners_.empty()) return;
  // A fresh round: every chunk this machine does not own answered since the last one ended
  // (each one, not merely the count of the least answered). The iterations run when a round
  // began have gone out when it ends.
  const int64_t mine = LocalIterations();
  const bool first = mark_answers_.size() != owners_.size();
  bool round = !first;
  for (uint32_t c = 0; round && c < owners_.size(); ++c)
    round = owners_[c] == static_cast<PeerId>(opt_.rank) || owners_[c] == kNoPeer || slave_->answers(c) > mark_answers_[c];
  if (!round && !first) return;
  mark_answers_.resize(owners_.size());
  for (uint32_t c = 0; c < owners_.size(); ++c) mark_answers_[c] = slave_->answers(c);
  if (first) {
    mark_iter_ = mine;
    return;
  }
  flushed_iter_.store(mark_iter_, std::memory_order_relaxed);
  mark_iter_ = mine;
  fresh_rounds_.fetch_add(1, std::memory_order_relaxed);
  if (grouped) SendControl();  // the group waits for this: tell it now, not at the heartbeat
}

void NetJob::UseSvb(std::shared_ptr<SvbLink> link, std::vector<std::pair<size_t, size_t>> skip) {
  HS_REQUIRE(!thread_.joinable()) << "NetJob::UseSvb after Attach";
  svb_ = std::move(link);
  svb_skip_ = std::move(skip);
}

void NetJob::SendFactors() {
  svb_->Expire();
  std::vector<Dest> to;
  if (opt_.multicast) to.push_back(Dest::Group(0));
  for (int r = 0; r < opt_.machines && !opt_.multicast; ++r)
    if (r != opt_.rank && peers_[r]->live) to.push_back(Dest::Peer(static_cast<PeerId>(r)));
  svb_->Send(t_, to, incarnation_);
}

void NetJob::Figures() {
  // Rates over a second at least (a machine's iterations come in heartbeats).
  const Clock::time_point now = Clock::now();
  const double lapse = std::max(1e-9, Seconds(now - last_figures_));
  const bool rates = lapse >= 1.0 || figures_chunks_ == 0;
  if (rates) last_figures_ = now;
  NetJobStats s;
  s.leader = leader_;
  s.global_iter = g_ ? g_->shared().iter.load() : 0;
  const int64_t mine = LocalIterations();
  for (int r = 0; r < opt_.machines; ++r) {
    Peer& p = *peers_[r];
    NetPeerFigures f;
    f.rank = r;
    f.self = r == opt_.rank;
    f.live = f.self || p.live;
    f.ready = f.self ? ready_ : (p.live && (p.flags & kNetReady));
    f.leader = r == leader_;
    f.iterations = f.self ? mine : p.count;
    f.iter_per_s = figures_.peers.size() > static_cast<size_t>(r) ? figures_.peers[r].iter_per_s : 0;
    if (rates) {
      f.iter_per_s = (f.iterations - p.rate_count) / lapse;
      p.rate_count = f.iterations;
      p.rate = std::max(p.rate, f.iter_per_s);  // the fastest it has shown (bounds its clock's jumps)
    }
    s.peers.push_back(f);
  }
  MasterEndpoint::Stats all = retired_;
  for (const auto& m : masters_)
    if (m) Accumulate(all, m->stats());
  s.sweeps = all.sweeps;
  s.positions_sent = all.positions_sent;
  s.deltas_applied = all.deltas_applied;
  s.unanswered = all.unanswered;
  s.staleness_max = all.staleness_max;
  s.staleness = all.deltas_applied ? static_cast<double>(all.staleness_sum) / all.deltas_applied : 0;
  s.positions_answered = slave_ ? slave_->stats().positions_applied : 0;
  s.refused = all.refused_nonfinite + all.refused_absurd + (slave_ ? slave_->stats().positions_refused : 0);
  const SlaveEndpoint::Stats slave = slave_ ? slave_->stats() : SlaveEndpoint::Stats{};
  s.stale = all.deltas_duplicate + all.deltas_too_old + all.deltas_other_epoch + all.malformed + slave.positions_stale +
            slave.positions_foreign + slave.malformed;
  s.weight = all.deltas_applied ? all.weight_milli / 1000.0 / static_cast<double>(all.deltas_applied) : 0;
  s.recoveries = recoveries_;
  const TransportCounters tc = t_->counters();
  const Losses losses = LossesOf(tc, t_->malformed());
  s.lost = losses.lost;
  s.foreign = losses.foreign;
  s.refused_mac = losses.mac;
  s.malformed = losses.malformed;
  s.kernel_dropped = losses.kernel;
  std::copy(std::begin(control_refused_), std::end(control_refused_), s.control_refused);
  s.clock_clamped = clock_clamped_;
  s.quorum = quorum_;
  s.sent = tc.sent;
  s.reshares = reshares_;
  s.owned = static_cast<uint32_t>(owned_.size());
  s.chunks = static_cast<uint32_t>(owners_.size());
  figures_chunks_ = s.chunks;
  std::lock_guard<std::mutex> lock(figures_mu_);
  s.sweeps_per_s = figures_.sweeps_per_s;
  s.gbit_out = figures_.gbit_out;
  s.gbit_in = figures_.gbit_in;
  if (rates) {
    // Sweeps per destination: each master sweeps its chunks once for its machine (or group).
    size_t destinations = 0;
    for (const auto& m : masters_) destinations += m != nullptr;
    s.sweeps_per_s = (s.sweeps - last_sweeps_) / lapse / static_cast<double>(std::max<size_t>(1, destinations));
    s.gbit_out = (tc.bytes_sent - last_bytes_sent_) * 8e-9 / lapse;
    s.gbit_in = (tc.bytes_received - last_bytes_received_) * 8e-9 / lapse;
    last_sweeps_ = s.sweeps;
    last_bytes_sent_ = tc.bytes_sent;
    last_bytes_received_ = tc.bytes_received;
  }
  figures_ = s;
}

NetJobStats NetJob::stats() const {
  std::lock_guard<std::mutex> lock(figures_mu_);
  return figures_;
}

std::string NetJob::Line() const {
  const NetJobStats s = stats();
  std::ostringstream os;
  os << std::fixed << std::setprecision(0) << "Network: machine " << s.leader << " leads; iter/s:";
  for (const NetPeerFigures& p : s.peers) {
    os << " m" << p.rank << " ";
    if (!p.live) os << "dead";
    else if (!p.ready) os << "joining";
    else os << p.iter_per_s;
  }
  os << std::setprecision(1) << "; " << s.sweeps_per_s << " sweeps/s, " << std::setprecision(3) << s.gbit_out
     << "/" << s.gbit_in << " Gbit/s out/in, " << s.lost << " frames lost ("
     << std::setprecision(2) << (s.sent ? 100.0 * s.lost / s.sent : 0.0) << "% of sent), " << s.unanswered
     << " positions unanswered in time, staleness " << std::setprecision(0) << s.staleness << " it (max "
     << s.staleness_max << "), weight " << std::setprecision(2) << s.weight << ", " << s.reshares << " re-shares; refused: "
     << RefusedText(s);
  if (!s.quorum) os << "; NO QUORUM";
  if (s.recoveries) os << ", " << s.recoveries << " recoveries";
  if (svb_) {
    const SvbFigures f = svb_->figures();
    os << std::setprecision(1) << "; SVB: " << f.bytes_sent / 1048576.0 << " MiB of factors out, " << f.sets_applied
       << " sets in, " << f.sets_dropped << " dropped incomplete, " << f.sets_unsent << " unsent";
  }
  return os.str();
}

}  // namespace hogstream
