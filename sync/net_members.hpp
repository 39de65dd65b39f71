// The membership of a job across machines (sync/net_job.hpp): which machines are live, ready or
// dead, when each was last heard and what it last told (its state bits, clock, view, flushed
// clock, snapshot requests), whether this machine reaches a quorum, and who leads. A machine
// silent for dead_ms is dead; the lowest live rank that has the weights, on the side with a
// quorum, leads, and this machine's own lead is a lease (a majority heard within 3/4 of dead_ms).
// Not for: whether a control message is believed (sync/net_control.hpp decides, and this only
// keeps what a believed one told), chunks and their owners (sync/net_shares.hpp), the group
// (the daemon passes leads, pauses and iterations on), logging.
// Threads: none of its own; one owner (the network daemon) calls everything; not thread-safe.
// Time comes in as arguments (`now`), never from the clock, so tests can step it.
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

#include "sync/net_control.hpp"
#include "transport/transport.hpp"

namespace hogstream {

// One machine of the job, as this one knows it.
struct NetMember {
  using Clock = std::chrono::steady_clock;
  bool heard = false;  // ever (any run)
  bool live = false;   // heard within dead_ms
  Clock::time_point last;
  uint32_t flags = 0;   // NetFlag bits it last told
  int64_t count = 0;    // iterations its solvers ran, this run (its clock)
  int64_t counted = 0;  // how much of `count` our group's counter holds
  Clock::time_point count_at;  // when `count` was last taken
  int64_t claimed = 0;  // the highest clock it told this run (`count` is what of it is taken)
  int64_t doubted = 0;  // the highest claim clamped that `count` has not reached yet (0: none)
  Clock::time_point doubted_at;  // when that claim was first clamped
  int64_t view = 0;     // its view of the global iteration
  int64_t flushed = 0;  // its iterations whose progress has gone out to every owner (track_fresh)
  int solvers = 1;      // its solvers: its clock per solver is count / solvers
  int64_t snapshots = 0, snapshots_taken = -1;  // its snapshot requests; those passed on (-1: none yet)
  int64_t rate_count = 0;  // its count when its rate was last taken (the daemon's figures)
  uint64_t rate_in = 0, rate_out = 0;  // payload bytes from and to it then
  double rate = 0;         // the fastest rate (it/s) it has shown: bounds its clock's jumps
  bool tested = false;     // it said it was testing (kNetTesting) since the last rate window
  bool left = false;       // it left on notice (kNetLeft): gone, not dead, and out of the quorum
  bool admitted = false;   // a new machine admitted while the job ran (counted in the quorum once heard)
  Clock::time_point admitted_at;
  uint64_t held = 0;       // NetControl::held: the leaving machines whose finals it holds
};

enum class QuorumChange { kNone, kLost, kRegained };

class NetMembers {
 public:
  using Clock = std::chrono::steady_clock;
  NetMembers(int rank, int machines);

  int rank() const { return rank_; }
  int machines() const { return machines_; }
  // A new machine joined the running job (NetJob's admission): `machines` now, the new ones
  // not yet heard.
  void Grow(int machines);
  NetMember& operator[](int r) { return m_[static_cast<size_t>(r)]; }
  const NetMember& operator[](int r) const { return m_[static_cast<size_t>(r)]; }

  // This machine has the weights (may own chunks).
  void set_ready(bool ready) { ready_ = ready; }
  bool ready() const { return ready_; }
  // This machine leaves on notice (kNetLeaving): it no longer leads.
  void set_leaving(bool leaving) { leaving_ = leaving; }
  bool Leaving(int r) const { return r == rank_ ? leaving_ : (m_[r].flags & (kNetLeaving | kNetLeft)) != 0; }
  bool Live(int r) const { return r == rank_ || m_[r].live; }
  bool Ready(int r) const { return r == rank_ ? ready_ : (m_[r].live && (m_[r].flags & kNetReady)); }

  // A believed control message from machine r: heard now, its state and counts taken. A new
  // run of it (`new_run`): its snapshot counts start again, its clock counts from `since`, and
  // from zero where it `restarted`. `joined_running`: this machine joined a running job, so a
  // machine first heard now has its past in the view taken: its clock is taken as it is.
  // A machine that says it has left (kNetLeft) is not live from then on (until a new run).
  // Returns whether its clock's claim was clamped (BoundClock). A clamped claim is doubted
  // until its count reaches it (an honest burst, told at once, is borne out by the machine's
  // next messages); see Unbacked.
  void NewRun(int r, bool restarted, Clock::time_point since);
  bool Hear(int r, Clock::time_point now, const ControlState& told, bool joined_running);

  // The rest of machine r's claim where its run has ended (taken for dead, left, or replaced by
  // a restart): the next messages that would have brought it (BoundClock) will not come. Taken
  // at once, up to kClockSettle iterations; returns how many were added to its count.
  int64_t Settle(int r);
  // Takes for dead the live machines silent for more than `dead_ms` (and settles their clocks);
  // returns them. Also judges the claims doubted for more than kClockBearOut (Unbacked).
  std::vector<int> CheckLiveness(Clock::time_point now, uint32_t dead_ms);
  // Clocks claimed beyond what their machine could have run and never borne out: its count had
  // not reached the claim kClockBearOut after it was clamped, or its run ended (Settle) short
  // of it. A forged clock counts here; an honest burst clamped and then taken does not.
  uint64_t unbacked() const { return unbacked_; }
  // Machines heard and gone, dead or left (not those that finished the job): bit r for
  // machine r < 64.
  uint64_t DeadMask() const;

  // Per rank: this machine, and the live machines last heard within `within` of `now`.
  std::vector<bool> Reached(Clock::time_point now, Clock::duration within = Clock::duration::max()) const;
  // These machines may lead the job: more than half of the job's machines that have not left,
  // or exactly half with the lowest of them.
  bool Quorum(const std::vector<bool>& reached) const;
  // The quorum of the machines reached now, against the last one watched.
  QuorumChange WatchQuorum(Clock::time_point now);
  bool quorum() const { return quorum_; }
  // Without a quorum for more than `ms` (since it was lost).
  bool CutOffFor(Clock::time_point now, uint32_t ms) const;

  // The leader now: the lowest ready rank not leaving while this side has a quorum, and this machine only
  // while it has heard a majority within 3/4 of `dead_ms` (the lease); -1: none.
  int ChooseLeader(Clock::time_point now, uint32_t dead_ms);
  int leader() const { return leader_; }

  // A machine admitted while the job ran that has not been heard from yet (nor left): the next
  // waits for it.
  bool AnyAdmittedUnheard() const;
  // Machine `r` (a new one, the tables grown for it) admitted now.
  void Admitted(int r, Clock::time_point now) {
    m_[r].admitted = true;
    m_[r].admitted_at = now;
  }
  // Where a message for every live other machine goes: the group where `multicast`, else
  // each live other machine.
  std::vector<Dest> LiveDests(bool multicast) const;
  std::vector<PeerId> ReadyRanks() const;  // in rank order: who owns chunks
  std::vector<bool> LiveRanks() const;     // per rank (this one live)
  int LiveOthers() const;
  bool AllOthersLive() const;
  // Every live other machine told `flag` (true when none is live) / some live other one did.
  bool AllLiveOthers(uint32_t flag) const;
  bool AnyLiveOther(uint32_t flag) const;
  // The live machines training: any, and the median of their views (the lower of two; 0: none).
  bool AnyTraining() const;
  int64_t MedianView() const;
  // Takes every heard machine's new iterations as counted; returns their sum.
  int64_t TakeNewIterations();
  // Their past is in the global iteration already (a joiner): their clocks are taken as they
  // were told, whole, and counted.
  void CountAllAsTaken();
  // The fewest iterations any other live machine still training has run (with `groups`: only
  // this one's group, by flushed iterations), per solver (a machine's count over its solvers,
  // so machines of different solver counts are held alike); `mine` (per solver) when there is none.
  int64_t SlowestOther(const std::vector<int>& groups, int64_t mine) const;

 private:
  int rank_, machines_;
  std::vector<NetMember> m_;  // per rank (this one's: only its rate)
  bool ready_ = false;
  bool leaving_ = false;
  bool quorum_ = true;
  Clock::time_point quorum_lost_at_;
  int leader_ = -1;
  uint64_t unbacked_ = 0;
  // Machine r's doubted claim: cleared where its count has reached it; counted as unbacked
  // where `ended` (its run) or doubted since before `now - kClockBearOut`.
  void Judge(NetMember& p, Clock::time_point now, bool ended);
};

}  // namespace hogstream
