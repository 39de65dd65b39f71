// The figures of one machine of a job across machines (sync/net_job.hpp): what the transport
// lost or refused, classed; each machine's rate, bytes and what its deltas did here; the
// machines that lag (StragglerWatch); the one-line summaries for the log; and the store other
// threads read (NetFigures: the last figures, the stats sink's feed, the policy's figures, the
// job's fatal error).
// Not for: counting (the transport, the endpoints and NetMembers count; this room reads them),
// deciding anything about the job (a straggler is named, never acted upon).
// Threads: NetFigures::Take on the network daemon (or its owner once it stopped); last(),
// error() and set_policy from any thread. The free functions are pure.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "sync/figures.hpp"
#include "sync/net_control.hpp"
#include "sync/net_members.hpp"
#include "transport/transport.hpp"

namespace hogstream {

class NetEndpoints;
class NetShares;

// A machine's figures (sync/figures.hpp's NetworkFigures, which its network sink receives) and the
// control messages it refused, by reason.
struct NetJobStats : NetworkFigures {
  uint64_t control_refusals[static_cast<size_t>(ControlRefusal::kCount)] = {};
  uint64_t clock_unbacked = 0;  // clocks claimed beyond what their sender could have run, never borne out
};

// One machine of the job as this one sees it (sync/figures.hpp): its rate, and what its deltas
// did to the chunks this machine masters.
using NetPeerFigures = PeerNetFigures;

// "machine 2 (udp://10.0.0.3:7000)": rank r, with its entry of the job's list where it has one.
std::string MachineName(int r, const std::vector<std::string>& names);

// What the transport refused or lost, by kind: lost on the way (injected drops, a frame of ours
// corrupted: bad checksum), not this job's (another job's id, or from an address that is not a
// machine of the job), a failed MAC (another key, or a forgery), datagrams that are no frame of
// ours at all (`not_sync`: good frames of the job whose payload is no sync message), and those
// the kernel dropped (receive buffer full; the whole transport only).
struct FrameLosses {
  uint64_t lost = 0, foreign = 0, mac = 0, malformed = 0, kernel = 0;
};
FrameLosses ClassifyFrames(uint64_t dropped, const std::array<uint64_t, static_cast<size_t>(Reject::kCount)>& rejected,
                           uint64_t not_sync = 0);
FrameLosses FrameLossesOf(const TransportCounters& tc, uint64_t not_sync);

// "3 foreign, 2 bad MAC, 0 malformed, 5 control (4 unproven, 1 replayed), 0 by value, ...":
// what a machine refused, by reason, for its log lines.
std::string RefusedText(const NetJobStats& s);
// The leader's display line: who leads, each machine's rate (or left, dead, joining, lags),
// sweeps/s, Gbit/s, losses, staleness, weight, re-shares, refusals, quorum, recoveries.
std::string NetLine(const NetJobStats& s);

// The daemon's lines for what a change means (each the text after "Network: "; `me` and `who`
// are MachineName's). A job begins: this machine's share of the chunks.
std::string TrainingLine(int machines, const std::string& me, size_t owned, uint32_t chunks, uint32_t chunk_floats,
                         bool at_params);
// The chunks re-shared among the `ready` machines: this machine's share.
std::string ReshareLine(const std::vector<PeerId>& ready, const std::string& me, size_t owned, size_t chunks);
// Cut off from most of the job (`reached` of `machines`), and for good after `quorum_ms`.
std::string QuorumLostLine(const std::string& me, int reached, int machines);
std::string GaveUpLine(const std::string& me, int machines, uint32_t quorum_ms);
// Another machine began its leave on notice at global iteration `view` (`began`), or has left
// after `count` iterations.
std::string OtherLeaveLine(const std::string& who, bool began, int64_t view, int64_t count);
// A delta refused by value (absurd: over the RMS bound; else non-finite) from `who`.
std::string RefusalLine(const std::string& who, bool absurd, const char* what, uint32_t chunk);

// "Network: machine 0 ran 6000 iterations in 51.2 s (117.2 iter/s); sent 1.2 GB, ...": what
// machine `name` did over the whole job (`seconds` since it attached), for the log at its end.
std::string JobLine(const std::string& name, int64_t iterations, double seconds, const TransportCounters& tc,
                    const NetJobStats& s);

// Rate windows (of a second or more) in a row below the bound before a machine is named a
// straggler.
inline constexpr int kStragglerSeconds = 2;

// The machines whose iteration rate stays below `bound` of the median of those training,
// kStragglerSeconds windows in a row (0: never). A machine that tested within a window (its
// rate fell for that) is left out of it: not counted for the median, nor for or against its
// own lag. One machine training alone lags nobody.
class StragglerWatch {
 public:
  explicit StragglerWatch(double bound) : bound_(bound) {}
  struct Rate {
    int rank = 0;
    double iter_per_s = 0;
    bool training = false;  // past its start, not yet done
    bool tested = false;    // tested within the window
  };
  struct Change {
    int rank = 0;
    bool lags = false;  // began (true) or ceased (false) to lag
    double iter_per_s = 0;
    int windows = 0;     // windows in a row below the bound (when it began)
    int training = 0;    // machines training in the window
  };
  // One rate window: the machines that began or ceased to lag.
  std::vector<Change> Window(const std::vector<Rate>& rates);
  bool lags(int rank) const { return rank >= 0 && static_cast<size_t>(rank) < lags_.size() && lags_[rank]; }
  double median() const { return median_; }  // of the last window
  double bound() const { return bound_; }

 private:
  double bound_;
  std::vector<int> below_;     // per rank, windows in a row below the bound
  std::vector<uint8_t> lags_;  // per rank, named now
  double median_ = 0;
};

// What the daemon hands NetFigures::Take, each time (about every 100 ms).
struct NetFiguresInput {
  int rank = 0, machines = 1, leader = -1;
  bool leads = false, log = true;
  const std::vector<std::string>* names = nullptr;  // the job's list (may be null)
  int64_t global_iter = 0;
  int64_t mine = 0;              // this machine's solvers' iterations
  bool self_left = false;        // this machine has left on notice
  bool self_training = false;    // ... and is training (past its start, its solvers not done)
  const Transport* transport = nullptr;
  uint64_t not_sync = 0;         // Wire::malformed: frames of the job that are no sync message
  const NetEndpoints* endpoints = nullptr;  // null before Attach
  const NetShares* shares = nullptr;
  const NetControlChannel* control = nullptr;
  uint64_t recoveries = 0;
  uint64_t svb_bytes_sent = 0;
};

class NetFigures {
 public:
  using Clock = std::chrono::steady_clock;
  explicit NetFigures(double straggler) : stragglers_(straggler) {}
  // Where the figures go once a second (NetworkSink::OnNetwork, from the daemon thread); before
  // the daemon starts.
  void set_sink(std::shared_ptr<NetworkSink> sink) { sink_ = std::move(sink); }
  // The aggregation rule's line, carried in every report (before the daemon starts).
  void set_aggregation(std::string line) { aggregation_ = std::move(line); }
  const std::shared_ptr<NetworkSink>& sink() const { return sink_; }
  // The sharing policy's name and figures (bound and cleared by the runner), any thread.
  void set_policy(std::string name, std::function<PolicyFigures()> figures);
  // Builds the figures now: rates (iterations, bytes, sweeps) over a second at least, the
  // stragglers at each such window (their names in the leader's log, once), the members'
  // rate fields updated. `report`: hand them to the sink when rates were taken.
  void Take(const NetFiguresInput& in, NetMembers& members, bool report = true);
  NetJobStats last() const;  // any thread
  // The failure that ended the job (one line; empty: none), any thread.
  void set_error(std::string line);
  std::string error() const;
  // A refusal from `from` for `why`: true the first time (name it in the log), false after.
  bool FirstRefusal(PeerId from, bool absurd);

 private:
  void Peers(const NetFiguresInput& in, NetMembers& members, NetJobStats* s, double lapse, bool rates);
  void Stragglers(const NetFiguresInput& in, NetMembers& members, NetJobStats* s);

  std::shared_ptr<NetworkSink> sink_;
  StragglerWatch stragglers_;      // daemon
  std::vector<uint8_t> named_;     // daemon: per rank x (non-finite, absurd), whether a refusal was named
  Clock::time_point last_rates_{};  // daemon: when rates were last taken (epoch: never)
  uint64_t last_bytes_sent_ = 0, last_bytes_received_ = 0, last_sweeps_ = 0;  // daemon, at that time
  uint32_t chunks_ = 0;            // daemon: the chunks of the last figures (none yet: rates each time)
  mutable std::mutex mu_;          // last_, error_
  NetJobStats last_;
  std::string error_;
  std::mutex policy_mu_;           // the policy's binding, which the runner changes at any time
  std::string policy_name_;
  std::string aggregation_;
  std::function<PolicyFigures()> policy_figures_;
};

}  // namespace hogstream
