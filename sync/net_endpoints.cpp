// This machine's endpoints in a job across machines (see net_endpoints.hpp).
#include "sync/net_endpoints.hpp"

#include <algorithm>
#include <iterator>
#include <limits>

namespace hogstream {

namespace {
double Seconds(std::chrono::steady_clock::duration d) { return std::chrono::duration<double>(d).count(); }

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
}  // namespace

size_t SweepPacer::Allow(size_t chunks, double seconds, int64_t iterations) {
  const double sweep = static_cast<double>(chunks);
  by_time_ = sweep_ms_ ? std::min(sweep, by_time_ + sweep * seconds * 1000.0 / sweep_ms_) : sweep;
  if (!per_iteration_) return static_cast<size_t>(by_time_);
  const double sweeps = std::max(static_cast<double>(iterations) * per_iteration_, seconds * 1000.0 / kIdleMs);
  by_iterations_ = std::min(sweep * per_iteration_, by_iterations_ + sweep * sweeps);
  return static_cast<size_t>(std::min(by_time_, by_iterations_));
}

void SweepPacer::Spent(size_t posted) {
  by_time_ -= static_cast<double>(posted);
  by_iterations_ -= static_cast<double>(posted);
}

void NetEndpoints::Open(float* w, const ChunkLayout& layout, const SegmentRule& rule, NetRefusedFn refused) {
  w_ = w;
  layout_ = std::make_unique<ChunkLayout>(layout);
  rule_ = rule;
  refused_ = std::move(refused);
  slave_ = std::make_unique<SlaveEndpoint>(w_, *layout_, t_);
  slave_->set_codec(rule_.codec);
  slave_->set_on_refused([this](PeerId from, uint32_t c, Refusal why) {
    if (refused_) refused_(from, c, why, "position");
  });
  last_post_ = Clock::now();
}

void NetEndpoints::Reshare(const NetShares& shares, const NetShares::Change& ch,
                           const std::vector<uint32_t>& owned_before, PeerId self, int machines, Clock::time_point now) {
  if (!ch.masters) {
    if (opt_.multicast && !masters_.empty()) masters_[0]->set_receivers(ch.receivers);
    return;
  }
  // The masters made anew keep taking, for a while, the answers to the positions they posted:
  // a delta in flight at a re-share is applied to this copy, where a chunk still this
  // machine's has it, and one that moved goes out with this machine's next answer to its new
  // owner (once a slave of it, w - last carries it).
  std::vector<uint32_t> lost;
  if (ch.owners) {
    slave_->set_owners(shares.owners(), self);
    std::set_difference(owned_before.begin(), owned_before.end(), shares.owned().begin(), shares.owned().end(),
                        std::back_inserter(lost));
  }
  const Clock::time_point until = now + RetiredMasterGrace(opt_.dead_ms);
  for (auto& m : masters_) {
    if (!m) continue;
    if (!lost.empty()) m->PostFinals(lost, slave_->last());  // what set_owners made `last`, exactly
    retired_.push_back({until, std::move(m)});
  }
  masters_.clear();
  if (!shares.owned().empty()) Make(ch.make, shares.owned(), ch.receivers, machines);
}

void NetEndpoints::Make(const std::vector<NetShares::Master>& make, const std::vector<uint32_t>& owned,
                        uint32_t receivers, int machines) {
  FlowOptions flow;
  flow.window = opt_.window;
  if (!opt_.multicast) masters_.resize(static_cast<size_t>(machines));
  for (const NetShares::Master& to : make) {
    auto m = std::make_unique<MasterEndpoint>(w_, *layout_, t_, to.to, Access::kPlain, flow);
    m->set_owned(owned);
    m->set_rule(rule_);
    m->set_epoch(to.epoch);  // newer than any this machine used: slaves take it at once
    m->set_on_refused([this](PeerId from, uint32_t c, Refusal why) {
      if (refused_) refused_(from, c, why, "delta");
    });
    if (opt_.multicast) {
      m->set_receivers(receivers);  // a window per receiver
      masters_.push_back(std::move(m));
    } else {
      masters_[to.to.id] = std::move(m);
    }
  }
  pacers_.assign(masters_.size(), SweepPacer(opt_.sweep_ms, opt_.sweeps_per_iter));
}

void NetEndpoints::Grow(int machines) {
  if (!opt_.multicast && !masters_.empty()) {
    masters_.resize(static_cast<size_t>(machines));
    pacers_.resize(masters_.size(), SweepPacer(opt_.sweep_ms, opt_.sweeps_per_iter));
  }
  // Its data frames count once its run has proved itself (NetJob::OnControl lowers the floor).
  slave_->set_min_epoch(static_cast<PeerId>(machines - 1), std::numeric_limits<uint32_t>::max());
}

void NetEndpoints::Post(size_t chunks, uint64_t clock, int64_t local_iterations, Clock::time_point now) {
  const double dt = Seconds(now - last_post_);
  last_post_ = now;
  const int64_t stepped = std::max<int64_t>(0, local_iterations - posted_at_iterations_);
  posted_at_iterations_ = local_iterations;
  for (auto& [until, m] : retired_) m->set_clock(clock);  // (their answers' staleness)
  Expire(now);
  for (size_t i = 0; i < masters_.size(); ++i) {
    MasterEndpoint* m = masters_[i].get();
    if (!m) continue;
    const size_t allowed = pacers_[i].Allow(chunks, dt, stepped);
    m->set_clock(clock);
    if (allowed > 0) pacers_[i].Spent(m->PostPositions(allowed));
  }
}

MasterEndpoint* NetEndpoints::MasterFor(const Message& m) {
  MasterEndpoint* now = nullptr;
  if (!masters_.empty()) now = opt_.multicast ? masters_[0].get() : m.h.source < masters_.size() ? masters_[m.h.source].get() : nullptr;
  if (now && now->epoch() == m.h.epoch) return now;
  for (auto& [until, r] : retired_)
    if (r->epoch() == m.h.epoch) return r.get();
  return now;  // (it counts the delta as another incarnation's)
}

void NetEndpoints::Expire(Clock::time_point now) {
  for (auto it = retired_.begin(); it != retired_.end();) {
    if (it->first > now) {
      ++it;
      continue;
    }
    Accumulate(retired_sum_, it->second->stats());
    for (const auto& [from, f] : it->second->source_stats()) {
      if (from >= retired_from_.size()) retired_from_.resize(static_cast<size_t>(from) + 1);
      retired_from_[from].Add(f);
    }
    it = retired_.erase(it);
  }
}

bool NetEndpoints::InFlight() const {
  for (const auto& m : masters_)
    if (m && m->in_flight() > 0) return true;
  return false;
}

bool NetEndpoints::PostFinals() {
  bool all = true;
  for (const auto& m : masters_) all = (!m || m->PostFinals()) && all;
  return all;
}

size_t NetEndpoints::destinations() const {
  size_t n = 0;
  for (const auto& m : masters_) n += m != nullptr;
  return n;
}

std::vector<uint64_t> NetEndpoints::Answers(size_t chunks) const {
  std::vector<uint64_t> at(chunks);
  for (uint32_t c = 0; c < at.size(); ++c) at[c] = slave_->answers(c);
  return at;
}

bool NetEndpoints::AnsweredSince(const std::vector<uint64_t>& at, uint64_t more, const NetShares& shares) const {
  for (uint32_t c = 0; c < shares.owners().size(); ++c)
    if (shares.Theirs(c) && slave_->answers(c) < at[c] + more) return false;
  return true;
}

void NetEndpoints::Figures(NetworkFigures* s, int machines, const NetShares& shares) const {
  MasterEndpoint::Stats all = retired_sum_;
  // Per sender: its deltas to this machine's masters, the retired ones' included.
  std::vector<MasterEndpoint::SourceStats> from = retired_from_;
  from.resize(std::max(from.size(), static_cast<size_t>(machines)));
  auto add = [&](const MasterEndpoint& m) {
    Accumulate(all, m.stats());
    for (const auto& [r, f] : m.source_stats())
      if (r < from.size()) from[r].Add(f);
  };
  for (const auto& m : masters_)
    if (m) add(*m);
  for (const auto& [until, m] : retired_) add(*m);
  for (PeerNetFigures& p : s->peers) {
    if (p.rank < 0 || static_cast<size_t>(p.rank) >= from.size()) continue;
    const MasterEndpoint::SourceStats& f = from[static_cast<size_t>(p.rank)];
    p.deltas_applied = f.applied;
    p.refused = f.refused;
    p.staleness_sum = f.staleness_sum;
    std::copy(std::begin(f.staleness), std::end(f.staleness), std::begin(p.staleness));
  }
  s->sweeps = all.sweeps;
  s->positions_sent = all.positions_sent;
  s->deltas_applied = all.deltas_applied;
  s->unanswered = all.unanswered;
  s->staleness_max = all.staleness_max;
  s->staleness = all.deltas_applied ? static_cast<double>(all.staleness_sum) / all.deltas_applied : 0;
  const SlaveEndpoint::Stats slave = slave_ ? slave_->stats() : SlaveEndpoint::Stats{};
  s->positions_answered = slave.positions_applied;
  s->refused_value = all.refused_nonfinite + all.refused_absurd + slave.positions_refused;
  s->stale = all.deltas_duplicate + all.deltas_too_old + all.deltas_other_epoch + all.malformed + slave.positions_stale +
             slave.positions_foreign + slave.malformed;
  s->weight = all.deltas_applied ? all.weight_milli / 1000.0 / static_cast<double>(all.deltas_applied) : 0;
  s->owned = static_cast<uint32_t>(shares.owned().size());
  s->chunks = static_cast<uint32_t>(shares.owners().size());
  s->reshares = shares.reshares();
}

bool FreshRounds::Step(const NetEndpoints& e, const NetShares& shares, int64_t local_iterations) {
  const size_t chunks = shares.owners().size();
  const bool first = mark_.size() != chunks;
  bool round = !first;
  for (uint32_t c = 0; round && c < chunks; ++c) round = !shares.Theirs(c) || e.slave().answers(c) > mark_[c];
  if (!round && !first) return false;
  mark_ = e.Answers(chunks);
  if (first) {
    mark_iter_ = local_iterations;
    return false;
  }
  flushed_iter_.store(mark_iter_, std::memory_order_relaxed);
  mark_iter_ = local_iterations;
  rounds_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

}  // namespace hogstream
