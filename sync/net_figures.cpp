// The figures of one machine of a job across machines (see net_figures.hpp).
#include "sync/net_figures.hpp"

#include <glog/logging.h>

#include <algorithm>
#include <iomanip>
#include <iterator>
#include <sstream>

#include "sync/net_endpoints.hpp"
#include "sync/net_shares.hpp"

namespace hogstream {

std::string MachineName(int r, const std::vector<std::string>& names) {
  std::ostringstream os;
  os << "machine " << r;
  if (r >= 0 && static_cast<size_t>(r) < names.size() && !names[r].empty()) os << " (" << names[r] << ")";
  return os.str();
}

FrameLosses ClassifyFrames(uint64_t dropped, const std::array<uint64_t, static_cast<size_t>(Reject::kCount)>& rejected,
                           uint64_t not_sync) {
  auto r = [&](Reject why) { return rejected[static_cast<size_t>(why)]; };
  uint64_t total = 0;
  for (uint64_t n : rejected) total += n;
  FrameLosses l;
  l.lost = dropped + r(Reject::kChecksum);
  l.foreign = r(Reject::kJob) + r(Reject::kSender);
  l.mac = r(Reject::kMac);
  l.malformed = total - r(Reject::kChecksum) - l.foreign - l.mac + not_sync;
  return l;
}

FrameLosses FrameLossesOf(const TransportCounters& tc, uint64_t not_sync) {
  FrameLosses l = ClassifyFrames(tc.dropped, tc.rejected, not_sync);
  l.kernel = tc.kernel_dropped;
  return l;
}

std::string RefusedText(const NetJobStats& s) {
  std::ostringstream os;
  uint64_t control = 0;
  for (uint64_t c : s.control_refusals) control += c;
  os << s.foreign << " foreign, " << s.refused_mac << " bad MAC, " << s.malformed << " malformed, " << control << " control";
  if (control) {
    os << " (";
    const char* sep = "";
    for (size_t i = 0; i < std::size(s.control_refusals); ++i) {
      if (!s.control_refusals[i]) continue;
      os << sep << s.control_refusals[i] << " " << ControlRefusalName(static_cast<ControlRefusal>(i));
      sep = ", ";
    }
    os << ")";
  }
  os << ", " << s.refused_value << " by value, " << s.stale << " stale data";
  if (s.clock_unbacked) os << ", " << s.clock_unbacked << " clocks not borne out";
  if (s.kernel_dropped) os << "; " << s.kernel_dropped << " datagrams dropped by the kernel (receive buffer full)";
  return os.str();
}

std::string NetLine(const NetJobStats& s) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(0) << "Network: machine " << s.leader << " leads; iter/s:";
  for (const NetPeerFigures& p : s.peers) {
    os << " m" << p.rank << " ";
    if (p.left) os << "left";
    else if (!p.live) os << "dead";
    else if (!p.ready) os << "joining";
    else os << p.iter_per_s << (p.straggler ? " (lags)" : "");
  }
  os << std::setprecision(1) << "; " << s.sweeps_per_s << " sweeps/s, " << std::setprecision(3) << s.gbit_out
     << "/" << s.gbit_in << " Gbit/s out/in, " << s.lost << " frames lost ("
     << std::setprecision(2) << (s.messages_sent ? 100.0 * s.lost / s.messages_sent : 0.0) << "% of sent), " << s.unanswered
     << " positions unanswered in time, staleness " << std::setprecision(0) << s.staleness << " it (max "
     << s.staleness_max << "), weight " << std::setprecision(2) << s.weight << ", " << s.reshares << " re-shares; refused: "
     << RefusedText(s);
  if (!s.quorum) os << "; NO QUORUM";
  if (s.recoveries) os << ", " << s.recoveries << " recoveries";
  return os.str();
}

std::string JobLine(const std::string& name, int64_t iterations, double seconds, const TransportCounters& tc,
                    const NetJobStats& s) {
  const double secs = std::max(1e-9, seconds);
  std::ostringstream os;
  os << std::fixed << std::setprecision(1) << "Network: " << name << " ran " << iterations << " iterations in " << secs
     << " s (" << iterations / secs << " iter/s); sent " << std::setprecision(3) << tc.bytes_sent * 1e-9
     << " GB, received " << tc.bytes_received * 1e-9 << " GB (" << (tc.bytes_sent + tc.bytes_received) * 8e-9 / secs
     << " Gbit/s); " << s.lost << " frames lost (" << std::setprecision(2) << (tc.sent ? 100.0 * s.lost / tc.sent : 0.0)
     << "% of sent); " << s.reshares << " re-shares; refused: " << RefusedText(s);
  return os.str();
}

std::vector<StragglerWatch::Change> StragglerWatch::Window(const std::vector<Rate>& rates) {
  std::vector<double> training;
  for (const Rate& r : rates) {
    if (r.rank < 0) continue;
    if (static_cast<size_t>(r.rank) >= below_.size()) {
      below_.resize(static_cast<size_t>(r.rank) + 1, 0);
      lags_.resize(below_.size(), 0);
    }
    if (r.training && !r.tested) training.push_back(r.iter_per_s);
  }
  median_ = 0;
  if (!training.empty()) {
    std::sort(training.begin(), training.end());
    const size_t n = training.size();
    median_ = n % 2 ? training[n / 2] : (training[n / 2 - 1] + training[n / 2]) / 2;
  }
  std::vector<Change> changes;
  for (const Rate& r : rates) {
    if (r.rank < 0 || r.tested) continue;
    const size_t i = static_cast<size_t>(r.rank);
    // Two machines training at least: one alone has nobody to lag behind.
    const bool below = bound_ > 0 && training.size() >= 2 && median_ > 0 && r.training && r.iter_per_s < bound_ * median_;
    below_[i] = below ? below_[i] + 1 : 0;
    const int n = static_cast<int>(training.size());
    if (!lags_[i] && below_[i] >= kStragglerSeconds) {
      lags_[i] = 1;
      changes.push_back({r.rank, true, r.iter_per_s, below_[i], n});
    } else if (lags_[i] && !below) {
      lags_[i] = 0;
      changes.push_back({r.rank, false, r.iter_per_s, 0, n});
    }
  }
  return changes;
}

void NetFigures::set_policy(std::string name, std::function<PolicyFigures()> figures) {
  std::lock_guard<std::mutex> lock(policy_mu_);
  policy_name_ = std::move(name);
  policy_figures_ = std::move(figures);
}

NetJobStats NetFigures::last() const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_;
}

void NetFigures::set_error(std::string line) {
  std::lock_guard<std::mutex> lock(mu_);
  error_ = std::move(line);
}

std::string NetFigures::error() const {
  std::lock_guard<std::mutex> lock(mu_);
  return error_;
}

bool NetFigures::FirstRefusal(PeerId from, bool absurd) {
  const size_t i = static_cast<size_t>(from) * 2 + absurd;
  if (i >= named_.size()) named_.resize(i + 2, 0);
  if (named_[i]) return false;
  named_[i] = 1;
  return true;
}

void NetFigures::Take(const NetFiguresInput& in, NetMembers& members, bool report) {
  // Rates over a second at least (a machine's iterations come in heartbeats).
  const Clock::time_point now = Clock::now();
  const double lapse = std::max(1e-9, std::chrono::duration<double>(now - last_rates_).count());
  const bool rates = lapse >= 1.0 || chunks_ == 0;
  if (rates) last_rates_ = now;
  NetJobStats s;
  s.machine = in.rank;
  s.leader = in.leader;
  s.global_iter = in.global_iter;
  Peers(in, members, &s, lapse, rates);
  if (in.endpoints && in.endpoints->open() && in.shares) in.endpoints->Figures(&s, in.machines, *in.shares);
  s.recoveries = in.recoveries;
  s.svb_bytes_sent = in.svb_bytes_sent;
  s.aggregation = aggregation_;
  {
    std::lock_guard<std::mutex> lock(policy_mu_);
    if (policy_figures_) {
      s.policy = policy_name_;
      s.policy_figures = policy_figures_();
    }
  }
  const TransportCounters tc = in.transport->counters();
  const FrameLosses losses = FrameLossesOf(tc, in.not_sync);
  s.lost = losses.lost;
  s.foreign = losses.foreign;
  s.refused_mac = losses.mac;
  s.malformed = losses.malformed;
  s.kernel_dropped = losses.kernel;
  if (in.control) std::copy(in.control->refusals(), in.control->refusals() + std::size(s.control_refusals), s.control_refusals);
  for (uint64_t n : s.control_refusals) s.control_refused += n;
  s.clock_unbacked = members.unbacked();
  s.quorum = members.quorum();
  s.messages_sent = tc.sent;
  s.bytes_sent = tc.bytes_sent;
  s.bytes_received = tc.bytes_received;
  chunks_ = s.chunks;
  std::unique_lock<std::mutex> lock(mu_);
  s.sweeps_per_s = last_.sweeps_per_s;
  s.gbit_out = last_.gbit_out;
  s.gbit_in = last_.gbit_in;
  if (rates) {
    // Sweeps per destination: each master sweeps its chunks once for its machine (or group).
    const size_t destinations = in.endpoints && in.endpoints->open() ? in.endpoints->destinations() : 0;
    s.sweeps_per_s = (s.sweeps - last_sweeps_) / lapse / static_cast<double>(std::max<size_t>(1, destinations));
    s.gbit_out = (tc.bytes_sent - last_bytes_sent_) * 8e-9 / lapse;
    s.gbit_in = (tc.bytes_received - last_bytes_received_) * 8e-9 / lapse;
    last_sweeps_ = s.sweeps;
    last_bytes_sent_ = tc.bytes_sent;
    last_bytes_received_ = tc.bytes_received;
  }
  last_ = s;
  lock.unlock();
  if (sink_ && rates && report) sink_->OnNetwork(s);
}

void NetFigures::Peers(const NetFiguresInput& in, NetMembers& members, NetJobStats* s, double lapse, bool rates) {
  std::vector<PeerCounters> traffic(static_cast<size_t>(in.machines));
  for (const PeerCounters& c : in.transport->peer_counters())
    if (c.peer < in.machines) traffic[c.peer] = c;
  const std::vector<std::string> none;
  const std::vector<std::string>& names = in.names ? *in.names : none;
  std::lock_guard<std::mutex> lock(mu_);  // (last_: the rates of the last window)
  for (int r = 0; r < in.machines; ++r) {
    NetMember& p = members[r];
    NetPeerFigures f;
    f.rank = r;
    f.name = names.size() > static_cast<size_t>(r) ? names[r] : "";
    f.self = r == in.rank;
    f.live = members.Live(r);
    f.ready = members.Ready(r);
    f.left = f.self ? in.self_left : p.left;
    f.leader = r == in.leader;
    f.iterations = f.self ? in.mine : p.count;
    const bool known = last_.peers.size() > static_cast<size_t>(r);
    f.iter_per_s = known ? last_.peers[r].iter_per_s : 0;
    const PeerCounters& t = traffic[static_cast<size_t>(r)];
    const FrameLosses l = ClassifyFrames(t.dropped, t.rejected);  // as the job's totals are classed
    f.bytes_in = t.bytes_received;
    f.bytes_out = t.bytes_sent;
    f.frames_lost = l.lost;
    f.frames_foreign = l.foreign;
    f.frames_bad_mac = l.mac;
    f.frames_malformed = l.malformed;
    if (known) {
      f.gbit_in = last_.peers[r].gbit_in;
      f.gbit_out = last_.peers[r].gbit_out;
    }
    if (rates) {
      f.iter_per_s = (f.iterations - p.rate_count) / lapse;
      p.rate_count = f.iterations;
      p.rate = std::max(p.rate, f.iter_per_s);  // the fastest it has shown (bounds its clock's jumps)
      f.gbit_in = (f.bytes_in - std::min(p.rate_in, f.bytes_in)) * 8e-9 / lapse;
      f.gbit_out = (f.bytes_out - std::min(p.rate_out, f.bytes_out)) * 8e-9 / lapse;
      p.rate_in = f.bytes_in;
      p.rate_out = f.bytes_out;
    }
    s->peers.push_back(f);
  }
  if (rates) Stragglers(in, members, s);
  for (NetPeerFigures& f : s->peers) f.straggler = stragglers_.lags(f.rank);
  s->median_iter_per_s = stragglers_.median();  // of the last window
}

void NetFigures::Stragglers(const NetFiguresInput& in, NetMembers& members, NetJobStats* s) {
  std::vector<StragglerWatch::Rate> rates;
  for (const NetPeerFigures& f : s->peers) {
    NetMember& p = members[f.rank];
    StragglerWatch::Rate r;
    r.rank = f.rank;
    r.iter_per_s = f.iter_per_s;
    r.training = f.self ? in.self_training
                        : p.live && (p.flags & kNetTraining) && !(p.flags & (kNetFinished | kNetDone));
    r.tested = p.tested;
    p.tested = false;
    rates.push_back(r);
  }
  const bool say = in.leads && in.log;
  const std::vector<std::string> none;
  const std::vector<std::string>& names = in.names ? *in.names : none;
  for (const StragglerWatch::Change& c : stragglers_.Window(rates)) {
    if (c.lags)
      LOG_IF(WARNING, say) << std::fixed << std::setprecision(1) << "Network: " << MachineName(c.rank, names) << " lags: "
                           << c.iter_per_s << " iter/s against the median " << stragglers_.median() << " of the "
                           << c.training << " machines training (below " << stragglers_.bound() << " of it for "
                           << c.windows << " s)";
    else  // (said only while others train: at the job's end the last machine training is alone)
      LOG_IF(INFO, say && c.training >= 2) << std::fixed << std::setprecision(1) << "Network: "
                                           << MachineName(c.rank, names) << " no longer lags (" << c.iter_per_s
                                           << " iter/s, median " << stragglers_.median() << ")";
  }
}

std::string TrainingLine(int machines, const std::string& me, size_t owned, uint32_t chunks, uint32_t chunk_floats,
                         bool at_params) {
  std::ostringstream os;
  os << "all " << machines << " machines heard from; " << me << " masters " << owned << " of " << chunks
     << " chunks of " << chunk_floats << " floats" << (at_params ? " at most, cut at parameter boundaries" : "");
  return os.str();
}

std::string ReshareLine(const std::vector<PeerId>& ready, const std::string& me, size_t owned, size_t chunks) {
  std::ostringstream os;
  os << "chunks re-shared among machines";
  for (PeerId r : ready) os << " " << r;
  os << "; " << me << " masters " << owned << " of " << chunks;
  return os.str();
}

std::string QuorumLostLine(const std::string& me, int reached, int machines) {
  std::ostringstream os;
  os << me << " reaches " << reached << " of " << machines << " machines, not a majority: it does not lead, test or "
     << "snapshot, its solvers wait, and it re-takes the job's weights once the others are back";
  return os.str();
}

std::string GaveUpLine(const std::string& me, int machines, uint32_t quorum_ms) {
  std::ostringstream os;
  os << me << " has reached no majority of the job's " << machines << " machines for " << quorum_ms / 1000.0
     << " s: it gives up (the others go on without it)";
  return os.str();
}

std::string OtherLeaveLine(const std::string& who, bool began, int64_t view, int64_t count) {
  std::ostringstream os;
  if (began) {
    os << who << " leaves the job on notice at iteration " << view
       << "; its progress and its chunks' last values come to every machine";
  } else {
    os << who << " has left the job after " << count << " iterations"
       << "; its chunks are re-shared (from its last values) and its data read by the others";
  }
  return os.str();
}

std::string RefusalLine(const std::string& who, bool absurd, const char* what, uint32_t chunk) {
  std::ostringstream os;
  os << "refused a" << (absurd ? "n absurd " : " non-finite ") << what << " from " << who << " (chunk " << chunk
     << (absurd ? ", RMS over the bound" : "") << "); further refusals are counted in the Network line";
  return os.str();
}

}  // namespace hogstream
