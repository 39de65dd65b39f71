// The bridge between a job across machines (sync/net_job.hpp) and this machine's group
// (sync/group.hpp's MachineGroup), each daemon pass:
// - the others' new iterations join the group's count of the global iteration;
// - the quorum: a machine cut off from most of the job neither leads nor tests nor snapshots
//   (two sides of a partition would each write the job's files) and its solvers wait; back
//   with the others, it re-takes their weights as a joiner does, so that the two sides' chunks
//   are never spliced; cut off for quorum_ms, it gives up;
// - the leader (NetMembers chooses; the group is told whether it leads);
// - requests both ways: a signal on any machine is a request (its stop flag) to the leader; the
//   leader's stop tells every machine to stop training now, so that the job ends at one global
//   iteration and the leader's drain finds everyone's last deltas at once; the others' snapshot
//   requests join this group's (never echoed back); the leader's done ends this machine's job.
// Not for: liveness, quorum and the leader's choice (sync/net_members.hpp), the end's drain and
// leave on notice (sync/net_leave.hpp), logging (the daemon says what the changes mean).
// Threads: the network daemon; leader() from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

#include "sync/group.hpp"
#include "sync/net_leave.hpp"
#include "sync/net_members.hpp"

namespace hogstream {

class NetBridge {
 public:
  using Clock = std::chrono::steady_clock;
  NetBridge(int rank, uint32_t dead_ms, uint32_t quorum_ms) : rank_(rank), dead_ms_(dead_ms), quorum_ms_(quorum_ms) {}
  void set_group(MachineGroup* g) { g_ = g; }

  // The others' new iterations into the group's global iteration.
  void CountOthers(NetMembers& members);

  enum class Quorum {
    kHeld,      // nothing changed
    kLost,      // cut off now: the group paused
    kRetake,    // back with a majority after a loss while training: the daemon re-takes the weights
    kGaveUp,    // cut off for quorum_ms (`started`: past the start): the job ends here
  };
  // `training`: the daemon trains; `recovering`: a recovery is under way (it re-takes anyway).
  Quorum WatchQuorum(Clock::time_point now, NetMembers& members, bool started, bool training, bool recovering);

  // The leader chosen now; the group told when it changed. Returns the leader before (-2: no change).
  int ChooseLeader(Clock::time_point now, NetMembers& members);
  int leader() const { return lead_.load(); }  // any thread (-1: none yet)

  // Requests and the end of the job, to and from the live others (see the file comment);
  // true when "every live machine is done" changed (NetEnd::all_done).
  bool PassRequests(NetMembers& members, NetEnd& end);
  // The snapshot requests added to the group from the others' (this machine's own count, told
  // to the others, leaves them out).
  int64_t snapshots_passed() const { return snapshots_passed_; }

 private:
  void PassRequestsOf(int r, NetMembers& members, NetEnd& end);

  int rank_;
  uint32_t dead_ms_, quorum_ms_;
  MachineGroup* g_ = nullptr;
  bool lost_quorum_ = false;  // cut off, and not yet back with the weights
  int64_t snapshots_passed_ = 0;
  std::atomic<int> lead_{-1};
};

}  // namespace hogstream
