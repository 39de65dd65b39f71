// The membership of a job across machines (see net_members.hpp): liveness, quorum, the leader,
// and what each machine last told.
#include "sync/net_members.hpp"

#include <algorithm>
#include <limits>

#include "base/common.hpp"

namespace hogstream {

NetMembers::NetMembers(int rank, int machines) : rank_(rank), machines_(machines), m_(static_cast<size_t>(machines)) {
  HS_CHECK(rank >= 0 && rank < machines) << "rank " << rank << " of " << machines;
}

void NetMembers::Grow(int machines) {
  HS_CHECK(machines >= machines_) << machines << " machines after " << machines_;
  machines_ = machines;
  m_.resize(static_cast<size_t>(machines));
}

void NetMembers::NewRun(int r, bool restarted, Clock::time_point since) {
  NetMember& p = m_[r];
  if (restarted) {  // its numbering starts again, and its iterations count from zero
    p.count = p.counted = p.claimed = p.rate_count = p.flushed = p.doubted = 0;
    p.rate = 0;
  }
  p.snapshots = 0;
  p.snapshots_taken = -1;
  p.count_at = since;
  p.left = false;  // a machine that left and is started again is a member again
}

bool NetMembers::Hear(int r, Clock::time_point now, const ControlState& told, bool joined_running) {
  NetMember& p = m_[r];
  if (!p.heard && joined_running) {
    // First heard after this machine joined a running job: its past is in the view taken, so
    // its clock is taken as it is and counts only from here.
    p.count = p.counted = p.claimed = told.clock;
    p.count_at = now;
  }
  p.heard = true;
  p.left = (told.flags & kNetLeft) != 0;
  p.live = !p.left;
  p.last = now;
  p.flags = told.flags;
  p.held = told.held;
  if (told.flags & kNetTesting) p.tested = true;
  bool clamped = false;
  if (told.clock > p.count) {
    const double secs = std::chrono::duration<double>(now - p.count_at).count();
    // Its own rate once shown; until then at least kClockRateUnknown (this machine's may be
    // far below it: a leader testing, a slower share).
    const double rate = std::max(p.rate > 0 ? p.rate : kClockRateUnknown, m_[rank_].rate);
    p.count = BoundClock(p.count, told.clock, secs, rate, &clamped);
    p.count_at = now;
    if (clamped && told.clock > p.doubted) {
      if (p.doubted == 0) p.doubted_at = now;
      p.doubted = told.clock;
    }
  }
  p.claimed = std::max({p.claimed, told.clock, p.count});
  if (p.left) Settle(r);  // its last word
  Judge(p, now, false);
  p.view = told.view;
  p.flushed = std::min(told.flushed, p.count);
  p.solvers = std::max(1, told.solvers);
  p.snapshots = std::max(p.snapshots, told.snapshots);
  return clamped;
}

std::vector<int> NetMembers::CheckLiveness(Clock::time_point now, uint32_t dead_ms) {
  std::vector<int> died;
  for (int r = 0; r < machines_; ++r) {
    NetMember& p = m_[r];
    if (r != rank_ && p.admitted && !p.heard && !p.left && now - p.admitted_at > std::chrono::milliseconds(dead_ms))
      p.left = true;  // admitted, never proven: gone (out of the quorum)
    if (r != rank_ && p.live && now - p.last > std::chrono::milliseconds(dead_ms)) {
      p.live = false;
      Settle(r);
      died.push_back(r);
    }
    Judge(p, now, false);
  }
  return died;
}

void NetMembers::Judge(NetMember& p, Clock::time_point now, bool ended) {
  if (p.doubted == 0) return;
  if (p.count >= p.doubted) {
    p.doubted = 0;  // borne out
  } else if (ended || now - p.doubted_at > kClockBearOut) {
    ++unbacked_;
    p.doubted = 0;
  }
}

uint64_t NetMembers::DeadMask() const {
  uint64_t dead = 0;
  for (int r = 0; r < machines_ && r < 64; ++r) {
    const NetMember& p = m_[r];
    // (and a new machine not yet holding the weights, or one admitted and never proven)
    const bool gone = (p.heard || p.left) && !p.live && !(p.flags & kNetDone);
    const bool joining = p.admitted && !p.left && !(p.live && (p.flags & kNetReady));
    if (r != rank_ && (gone || joining)) dead |= uint64_t{1} << r;
  }
  return dead;
}

std::vector<bool> NetMembers::Reached(Clock::time_point now, Clock::duration within) const {
  std::vector<bool> reached(static_cast<size_t>(machines_), false);
  for (int r = 0; r < machines_; ++r) reached[r] = r == rank_ || (m_[r].live && now - m_[r].last <= within);
  return reached;
}

bool NetMembers::Quorum(const std::vector<bool>& reached) const {
  // A machine that left on notice is out of the count (it will not come back as the other side
  // of a partition).
  const int n = static_cast<int>(std::count(reached.begin(), reached.end(), true));
  int members = 0, first = -1;
  for (int r = 0; r < machines_; ++r) {
    if (r != rank_ && (m_[r].left || (m_[r].admitted && !m_[r].heard))) continue;
    ++members;
    if (first < 0) first = r;
  }
  return 2 * n > members || (2 * n == members && reached[first]);
}

QuorumChange NetMembers::WatchQuorum(Clock::time_point now) {
  const bool quorum = Quorum(Reached(now));
  if (quorum == quorum_) return QuorumChange::kNone;
  quorum_ = quorum;
  if (quorum) return QuorumChange::kRegained;
  quorum_lost_at_ = now;
  return QuorumChange::kLost;
}

bool NetMembers::CutOffFor(Clock::time_point now, uint32_t ms) const {
  return !quorum_ && now - quorum_lost_at_ > std::chrono::milliseconds(ms);
}

int NetMembers::ChooseLeader(Clock::time_point now, uint32_t dead_ms) {
  // Leader: the lowest live rank that has the weights, on the side with a quorum.
  int leader = -1;
  for (int r = 0; quorum_ && r < machines_ && leader < 0; ++r)
    if (Ready(r) && !Leaving(r)) leader = r;
  // The lead is a lease: this machine leads only while it has heard a majority within 3/4 of
  // dead_ms. Cut off, it stops leading (testing, snapshotting) a quarter of dead_ms before the
  // others take it for dead and one of them takes over: two leaders never overlap.
  if (leader == rank_ && !Quorum(Reached(now, std::chrono::milliseconds(dead_ms * 3 / 4)))) leader = -1;
  leader_ = leader;
  return leader;
}

bool NetMembers::AnyAdmittedUnheard() const {
  for (const NetMember& p : m_)
    if (p.admitted && !p.heard && !p.left) return true;
  return false;
}

std::vector<Dest> NetMembers::LiveDests(bool multicast) const {
  if (multicast) return {Dest::Group(0)};
  std::vector<Dest> to;
  for (int r = 0; r < machines_; ++r)
    if (r != rank_ && m_[r].live) to.push_back(Dest::Peer(static_cast<PeerId>(r)));
  return to;
}

std::vector<PeerId> NetMembers::ReadyRanks() const {
  std::vector<PeerId> ready;
  for (int r = 0; r < machines_; ++r)
    if (Ready(r)) ready.push_back(static_cast<PeerId>(r));
  return ready;
}

std::vector<bool> NetMembers::LiveRanks() const {
  std::vector<bool> live(static_cast<size_t>(machines_), false);
  for (int r = 0; r < machines_; ++r) live[r] = Live(r);
  return live;
}

int NetMembers::LiveOthers() const {
  int n = 0;
  for (int r = 0; r < machines_; ++r) n += r != rank_ && m_[r].live;
  return n;
}

bool NetMembers::AllOthersLive() const {
  for (int r = 0; r < machines_; ++r)
    if (r != rank_ && !m_[r].live) return false;
  return true;
}

bool NetMembers::AllLiveOthers(uint32_t flag) const {
  for (int r = 0; r < machines_; ++r)
    if (r != rank_ && m_[r].live && !(m_[r].flags & flag)) return false;
  return true;
}

bool NetMembers::AnyLiveOther(uint32_t flag) const {
  for (int r = 0; r < machines_; ++r)
    if (r != rank_ && m_[r].live && (m_[r].flags & flag)) return true;
  return false;
}

bool NetMembers::AnyTraining() const { return AnyLiveOther(kNetTraining); }

int64_t NetMembers::MedianView() const {
  // The lower one of two: a view too high would end a joiner's training at once. No single
  // member, mistaken or lying, sets it where three or more are heard.
  std::vector<int64_t> views;
  for (int r = 0; r < machines_; ++r)
    if (r != rank_ && m_[r].live && (m_[r].flags & kNetTraining)) views.push_back(m_[r].view);
  std::sort(views.begin(), views.end());
  return views.empty() ? 0 : views[(views.size() - 1) / 2];
}

int64_t NetMembers::TakeNewIterations() {
  int64_t sum = 0;
  for (int r = 0; r < machines_; ++r) {
    NetMember& p = m_[r];
    if (r == rank_ || !p.heard || p.count <= p.counted) continue;
    sum += p.count - p.counted;
    p.counted = p.count;
  }
  return sum;
}

int64_t NetMembers::Settle(int r) {
  NetMember& p = m_[r];
  const int64_t more = std::max<int64_t>(0, std::min(p.claimed - p.count, kClockSettle));
  p.count += more;
  p.claimed = p.count;  // the rest, beyond what it could have run, is not believed
  Judge(p, Clock::now(), true);
  return more;
}

void NetMembers::CountAllAsTaken() {
  for (NetMember& p : m_) {
    p.count = std::max(p.count, p.claimed);
    p.counted = p.count;
  }
}

int64_t NetMembers::SlowestOther(const std::vector<int>& groups, int64_t mine) const {
  // With synchronous groups, only the machines of this one's group count, by what they have
  // sent out (flushed), not merely run.
  const bool grouped = !groups.empty();
  int64_t slowest = std::numeric_limits<int64_t>::max();
  for (int r = 0; r < machines_; ++r) {
    const NetMember& p = m_[r];
    if (r == rank_ || (grouped && groups[r] != groups[rank_])) continue;
    if (p.live && (p.flags & kNetTraining) && !(p.flags & kNetFinished))
      slowest = std::min(slowest, (grouped ? p.flushed : p.count) / p.solvers);
  }
  return slowest == std::numeric_limits<int64_t>::max() ? mine : slowest;
}

}  // namespace hogstream
