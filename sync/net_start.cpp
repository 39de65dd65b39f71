// How one machine of a job begins (see net_start.hpp).
#include "sync/net_start.hpp"

#include <algorithm>
#include <sstream>

#include "sync/net_figures.hpp"
#include "sync/net_recovery.hpp"
#include "sync/segment.hpp"

namespace hogstream {

NetStart::Go NetStart::Decide(Clock::time_point now, Clock::time_point started, NetMembers& members, bool svb) {
  if (disagreed_ && now - disagreed_at_ > std::chrono::milliseconds(5 * heartbeat_ms_)) {
    Fail("");  // (the line Disagreed kept)
    return Go::kFailed;
  }
  const bool running = members.AnyTraining();
  if (running && !members.ready() && svb) {
    Fail("--svb: this machine cannot join a running job (the InnerProduct weights travel only as gradients)");
    return Go::kFailed;
  }
  // (Once ready, this machine is one of a new job's first.) A joiner waits until it hears a
  // strict majority of the job, whose views it takes (Quorum's tie rule, exactly half with
  // machine 0, would let machine 0 join on one other's view alone). The global iteration it
  // starts from: the median of the members' views (NetMembers::MedianView); every member's own
  // count only grows by what it could have run (BoundClock).
  const std::vector<bool> reached = members.Reached(now);
  if (running && !members.ready() && 2 * std::count(reached.begin(), reached.end(), true) > members.machines())
    return Go::kJoinRunning;
  if (members.AllOthersLive()) {
    members.set_ready(true);
    return members.AllLiveOthers(kNetReady) || running ? Go::kTrain : Go::kWait;
  }
  return now - started > std::chrono::milliseconds(start_ms_) ? Go::kSilent : Go::kWait;
}

NetStart::Joining NetStart::Join(Clock::time_point now, Clock::time_point started, const SlaveEndpoint& slave,
                                 bool owner, NetRecovery& recovery, uint32_t dead_ms) {
  if (owner) recovery.SawOwner(now);
  if (slave.chunks_heard() == slave.layout().count && slave.retaking() == 0 && (owner || !recovery.under_way()))
    return Joining::kJoined;
  if (recovery.under_way()) {
    if (!recovery.NoOwnerFor(now, dead_ms)) return Joining::kWait;
    recovery.Fail("every machine's copy of the weights diverged (non-finite) and none is left to recover "
                  "from: the job cannot go on (lower base_lr, or check the data)");
    return Joining::kFailed;
  }
  if (now - started <= std::chrono::milliseconds(start_ms_)) return Joining::kWait;
  std::ostringstream os;
  os << "joining a running job: only " << slave.chunks_heard() << " of " << slave.layout().count
     << " chunks received after " << start_ms_ / 1000.0 << " s";
  Fail(os.str());
  return Joining::kFailed;
}

void NetStart::Disagreed(Clock::time_point now, std::string why) {
  if (disagreed_) return;
  error_ = std::move(why);
  disagreed_ = true;
  disagreed_at_ = now;
}

std::string NoWordLine(const NetMembers& members, const std::vector<std::string>& names, uint32_t start_ms,
                       const FrameLosses& l, uint64_t unproven) {
  std::ostringstream os;
  os << "no word from";
  for (int r = 0; r < members.machines(); ++r)
    if (r != members.rank() && !members[r].live) os << " " << MachineName(r, names);
  os << " after " << start_ms / 1000.0 << " s";
  if (l.mac) os << "; " << l.mac << " frames failed the MAC: does every machine have the same --job-key?";
  if (l.foreign) os << "; " << l.foreign << " frames came from another job, or from an address not in --peers "
                    << "(or claiming another machine's rank): is every machine given the same --peers, in the same order, and --job?";
  if (!l.mac && !l.foreign && unproven)
    os << "; its messages arrive but never echo this run (do its frames come back to it?)";
  if (!l.mac && !l.foreign && !unproven) os << " (is it started, with the same --peers list and job?)";
  return os.str();
}

}  // namespace hogstream
