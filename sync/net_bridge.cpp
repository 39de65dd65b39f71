// The bridge between a job across machines and this machine's group (see net_bridge.hpp).
#include "sync/net_bridge.hpp"

namespace hogstream {

void NetBridge::CountOthers(NetMembers& members) {
  const int64_t more = members.TakeNewIterations();
  if (more > 0) g_->AddOthers(more);
}

NetBridge::Quorum NetBridge::WatchQuorum(Clock::time_point now, NetMembers& members, bool started, bool training,
                                         bool recovering) {
  Quorum q = Quorum::kHeld;
  switch (members.WatchQuorum(now)) {
    case QuorumChange::kLost:
      g_->SetPaused(true);  // cut off, its solvers wait: their work would be dropped
      lost_quorum_ = true;
      q = Quorum::kLost;
      break;
    case QuorumChange::kRegained:
      if (lost_quorum_ && training && !recovering) {
        lost_quorum_ = false;
        q = Quorum::kRetake;  // its solvers wait until it has the weights
      } else {
        g_->SetPaused(false);
      }
      break;
    case QuorumChange::kNone:
      break;
  }
  if (started && members.CutOffFor(now, quorum_ms_)) return Quorum::kGaveUp;
  return q;
}

int NetBridge::ChooseLeader(Clock::time_point now, NetMembers& members) {
  const int before = members.leader();
  const int leader = members.ChooseLeader(now, dead_ms_);
  if (leader == before) return -2;
  lead_.store(leader);
  g_->SetLeads(leader == rank_);
  return before;
}

bool NetBridge::PassRequests(NetMembers& members, NetEnd& end) {
  if (g_->StopRequested()) end.set_stop();
  for (int r = 0; r < members.machines(); ++r)
    if (r != rank_ && members[r].live) PassRequestsOf(r, members, end);
  return end.set_all_done(end.done() && members.AllLiveOthers(kNetDone));
}

void NetBridge::PassRequestsOf(int r, NetMembers& members, NetEnd& end) {
  NetMember& p = members[r];
  if (p.flags & kNetStop) {
    if (r == members.leader()) end.set_stopped();  // a stop request ends the job early
    g_->Request(SolverAction::STOP);
    if (r == members.leader()) g_->Stop();
  }
  if (p.snapshots > p.snapshots_taken) {  // a snapshot request (SIGHUP) on that machine
    if (p.snapshots_taken >= 0) {
      g_->PassSnapshotRequests(p.snapshots - p.snapshots_taken);
      snapshots_passed_ += p.snapshots - p.snapshots_taken;  // not this machine's own: never echoed
    }
    p.snapshots_taken = p.snapshots;
  }
  if (p.flags & kNetDone) {  // the leader has finished the job: whatever still trains stops
    if (!end.done()) end.EndedBy(r, g_->Reached());  // who ended it, and where (FinishRun says so if early)
    if (p.flags & kNetKeep) g_->SetFailedElsewhere();  // before job_done: Finish reads it then
    g_->EndJob();
    end.set_done();  // and says so back, so the leader knows it was heard
  }
}

}  // namespace hogstream
