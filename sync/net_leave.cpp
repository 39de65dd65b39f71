// How one machine's part of a job ends: leave on notice and the end-of-job drain (see
// net_leave.hpp).
#include "sync/net_leave.hpp"

#include <algorithm>
#include <iomanip>
#include <sstream>

#include "sync/net_endpoints.hpp"
#include "sync/net_shares.hpp"

namespace hogstream {

using std::chrono::milliseconds;

uint64_t HeldFinals(const NetMembers& members, const std::vector<PeerId>& owners, const SlaveEndpoint& slave) {
  uint64_t held = 0;
  for (int r = 0; r < members.machines() && r < 64; ++r) {
    if (r == members.rank() || !members[r].live || !(members[r].flags & kNetLeaving)) continue;
    const auto owned = std::count(owners.begin(), owners.end(), static_cast<PeerId>(r));
    if (slave.finals_from(static_cast<PeerId>(r)) >= owned) held |= uint64_t{1} << r;
  }
  return held;
}

bool EveryoneHolds(const NetMembers& members) {
  for (int r = 0; r < members.machines() && r < 64; ++r)
    if (r != members.rank() && members[r].live && !(members[r].held >> members.rank() & 1)) return false;
  return true;
}

const char* NetLeave::Refusal(bool ending, size_t ready) {
  if (ending) return "its solvers are done already (the job is ending)";
  return ready < 2 ? "no other machine has the weights to go on with" : nullptr;
}

std::string NetLeave::NoticeLine(const std::string& me, size_t chunks) const {
  std::ostringstream os;
  os << me << " leaves the job on notice at iteration " << iteration()
     << ": its solvers stop, its progress goes out, then the last values of its " << chunks << " chunks";
  return os.str();
}

std::string NetLeave::LeftLine(const std::string& me, Clock::time_point now) const {
  std::ostringstream os;
  os << me << " has left the job " << std::setprecision(3) << seconds(now) << " s after the notice (" << final_sweeps()
     << " sweeps of finals; " << (held() ? "every machine holds them" : "not every machine said it holds them") << ")";
  return os.str();
}

void NetLeave::Begin(Clock::time_point now, int64_t iteration) {
  step_ = Step::kDraining;
  began_ = now;
  iteration_ = iteration;
}

NetLeave::Do NetLeave::Next(Clock::time_point now, const Seen& seen) {
  switch (step_) {
    case Step::kNone:
    case Step::kLeft:
      return Do::kWait;
    case Step::kDraining:
      if (!seen.flushed) return Do::kWait;
      step_ = Step::kQuiet;
      quiet_at_ = now;
      return Do::kWait;
    case Step::kQuiet: {
      const bool awaited = seen.in_flight || (window_ == 0 && now - quiet_at_ < milliseconds(4 * heartbeat_ms_));
      const auto patience = milliseconds(std::max<uint32_t>(dead_ms_ / 4, 50));
      if (awaited && now - quiet_at_ < patience) return Do::kWait;
      step_ = Step::kHanding;
      finals_at_ = now - std::chrono::hours(1);
      [[fallthrough]];
    }
    case Step::kHanding:
      if (seen.held || now - quiet_at_ > milliseconds(dead_ms_)) {
        step_ = Step::kLeft;
        held_ = seen.held;
        left_.store(true);
        return Do::kLeft;
      }
      return now - finals_at_ < milliseconds(heartbeat_ms_) ? Do::kWait : Do::kPostFinals;
  }
  return Do::kWait;
}

void NetLeave::FinalsOut(Clock::time_point now) {
  finals_at_ = now;
  ++final_sweeps_;
}

void NetEnd::Step(Clock::time_point now, bool solvers_done, const NetEndpoints& e, const NetShares& s) {
  if (solvers_done && !finished_) {
    finished_ = true;
    finished_at_ = now;
    at_finish_ = e.Answers(s.owners().size());
  }
  if (finished_ && !flushed_)
    flushed_ = e.AnsweredSince(at_finish_, 1, s) || now - finished_at_ > milliseconds(drain_ms_);
}

bool NetEnd::Drained(Clock::time_point now, bool others_flushed, const NetEndpoints& e, const NetShares& s, bool* late) {
  if (others_flushed && flushed_ && !draining_) {
    draining_ = true;
    at_drain_ = e.Answers(s.owners().size());
  }
  const bool drained = draining_ && e.AnsweredSince(at_drain_, 2, s);
  *late = !drained && now - finished_at_ > milliseconds(drain_ms_);
  return drained || *late;
}

}  // namespace hogstream
