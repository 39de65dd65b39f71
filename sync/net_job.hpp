// One machine's part of a training job across machines: the network daemon that links this
// machine's host copy of the weights to every other machine's, and the bridge between the
// machine's group (MachineGroup, sync/group.hpp) and the job's. Not for: addresses, sockets, launch (bin/peers.*
// opens the transport), local solvers (sync/hogwild.cpp runs them on the host copy).
// NetJob is the daemon loop and the glue; its state lives in three rooms, each with its own
// file and tests: NetControlChannel (sync/net_control.hpp: the control message, its freshness,
// agreement and refusals), NetMembers (sync/net_members.hpp: liveness, quorum, the leader, what
// each machine told) and NetShares (sync/net_shares.hpp: chunk owners, epochs, masters).
// Threads: one daemon thread (started by Attach, ended by Finish or the destructor) owns the
// transport, the endpoints and the three rooms. The owner thread calls set_*, UseSvb, Attach
// and Finish; any thread the accessors, stats, Line and Recover (atomics, or the figures under
// a mutex).
//
// Topology: every machine is master of a share of the chunks (ShareChunks over the machines
// that are live and ready, in rank order) and slave of everyone else's, on ONE host buffer that
// its local solvers train. One daemon thread drives one transport: it posts positions of its
// own chunks (to the group where the transport multicasts, else to each machine, each with its
// own window), answers others' positions with deltas, applies deltas to its own chunks, and
// sleeps on the transport's wait_fd when idle. A master sweeps its chunks at most once per
// sweep_ms and, if sweeps_per_iter is set, at most that often per iteration of this machine's
// solvers (SweepPacer), so the link leaves the cores to the solvers.
//
// Control: every heartbeat_ms each machine tells every other one (MsgKind::kIteration) the
// floor of its run's master epochs (epoch), the iterations its solvers ran (clock), its view
// of the global iteration (seq) and its state (chunk: NetFlag bits). Each adds the others' new
// iterations to its own group's counter, so the global iteration (lr schedule, intervals, max_iter) is the
// sum over all solvers of all machines, on every machine, to within a heartbeat.
//
// Liveness: a machine silent for dead_ms is dead; the others re-share its chunks among
// themselves (a new epoch on every master) and the lowest live rank leads (tests, displays,
// snapshots: MachineGroup::SetLeads). A machine started while the job runs (a restart, or
// a late one) owns nothing until it has received a position of every chunk, then takes back a
// share. Its iterations count from its restart; what a dead machine had not yet sent is lost.
//
// Join as a new machine (`--join`: a machine not in the others' --peers, started with their
// list plus its own entry, last): its first good frame reaches the others from an unknown
// address claiming the next rank; where the transport can learn addresses (udp://: Transport::
// set_admit), each machine admits it as machine `machines` (one at a time, only while
// training, not under bsp, gsp or --svb), grows its tables, and from there it is a joiner as a
// restarted machine is: once its control messages are proven it receives the weights, then
// takes a share; every machine's data partition is cut anew over the machines (a machine
// admitted but not yet holding the weights has its partition read by the others). A machine
// admitted whose messages are never proven within dead_ms is taken as gone (out of the quorum;
// without --job-key, anyone who knows the job's id could otherwise grow it).
// Leave on notice (SIGUSR1: MachineGroup's leave request): the machine stops leading, its
// solvers stop and return, its progress goes out (flushed, as at the end), its masters stop
// posting and await the answers out, then send each owned chunk's final values (kFinal) until
// every live machine says it holds them (NetControl::held), and it says it has left (kNetLeft):
// the others re-share its chunks at once, each new owner starting from the leaver's values with
// every machine's progress since still to come, and read its data partition. Nothing it
// computed is lost; nobody waits dead_ms.
// End: a machine whose solvers are done keeps answering positions until each chunk it does
// not own has been answered once more (its progress has gone out: "flushed"); the leader holds
// its final snapshot (MachineGroup::HoldFinal) until every live machine is flushed and each
// chunk it does not own has been answered twice more (the owners' values with those deltas
// in), or drain_ms pass; then its "done" tells the others to stop, and it goes on saying so
// until every live machine has said it back (or dead_ms pass).
// Multicast: a position under the window awaits the delta of every live machine it reaches.
// --svb (UseSvb, sync/svb.hpp): the chunks of the big InnerProduct weights are owned by nobody
// and never streamed; their gradients' factor sets go out as kFactors messages (to the group
// where positions go there, else to each live machine) and come in to the SvbLink's inbox.
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/solver.hpp"
#include "sync/group.hpp"
#include "sync/net_control.hpp"
#include "sync/net_members.hpp"
#include "sync/net_shares.hpp"
#include "sync/segment.hpp"
#include "sync/wire.hpp"
#include "transport/transport.hpp"

namespace hogstream {

// gsp across machines: the default `scale` of the 1/staleness weights between its machines,
// min(machines - 1, kJobSolverSpeed - 1) (at least 1). At equal pace each delta reaches a master
// after the other machines' (staleness about machines - 1), so a group mate's delta, which its
// round already made synchronous, and the other groups' come whole; only a machine that falls
// behind is weighted down. With scale 1 every delta was cut to about 1/3 at 4 machines, and gsp
// ended 0.7-0.8 points short of one solver (docs/experiments/2026-11-27-bsp-gsp-across-machines.md).
float GspWeightScale(int machines);
// easgd's rate (docs/experiments/2026-11-27-easgd-centre-rate.md). The centre is the
// mean of its copies, so at the recipe's rate a job of T copies ends where one solver is after
// 1/T of the iterations; and it trails them: a copy drifting v per iteration, pulled toward the
// centre every P iterations, moves the centre at K / (1 + K) v in the steady state, where K is
// how many pulls of that size the centre (or this machine's share of it) takes per period: the
// `solvers` of this process whole, and each other machine's `solvers` pulls (their sum, one
// delta) by `weight`, the aggregation's weight at equal pace:
//   K = solvers (1 + (machines - 1) weight).
// Each solver's base_lr is therefore multiplied by
//   min(machines x solvers, kEasgdSpeed) (1 + K) / K
// so that the centre moves as one solver on min(T, kEasgdSpeed) batches together (the linear
// scaling of larger batches). 1 for a single copy.
constexpr int kEasgdSpeed = 4;  // measured: 8 machines at 8 times the rate diverged in 1 of 3 runs
double EasgdSpeed(int machines, int solvers, double weight);
// Multiplies base_lr by `speed` (EasgdSpeed); returns one line saying so ("" = nothing).
std::string EasgdSpeedUp(int copies, double speed, pb::SolverParameter* param);

// Pacing of one master's sweeps (each owned chunk's position posted once): at most one sweep
// per sweep_ms (0: no limit) and, where per_iteration > 0, at most that many sweeps per
// iteration of this machine's solvers plus one per kIdleMs, so that positions still flow while
// no solver steps (the start, a joiner taking the weights, a recovery). A sweep
// faster than the solvers step carries little that is new and takes the cores from them: a
// cifar10_quick iteration at 0.4 core lasts as long as seven sweeps at the time limit alone.
// Not on by default (NetJobOptions::sweeps_per_iter = 0): solvers that wait for the exchange
// (bsp, gsp, a machine joining) step rarely, and with the limit their rounds crawl at the
// trickle (docs/experiments/2026-11-28-sweeps-per-iter.md).
class SweepPacer {
 public:
  static constexpr double kIdleMs = 200;
  SweepPacer(uint32_t sweep_ms, uint32_t per_iteration) : sweep_ms_(sweep_ms), per_iteration_(per_iteration) {}
  // How many of `chunks` (one sweep) may go out now, `seconds` and `iterations` (this
  // machine's, never negative) after the last call.
  size_t Allow(size_t chunks, double seconds, int64_t iterations);
  void Spent(size_t posted);

 private:
  uint32_t sweep_ms_, per_iteration_;
  double by_time_ = 0, by_iterations_ = 0;  // credit in chunks
};

struct NetJobOptions {
  int rank = 0;                    // this machine's index in the job's list
  int machines = 1;
  std::vector<std::string> names;  // per rank, for messages (e.g. "udp://10.0.0.2:7000"); may be empty
  bool multicast = false;          // positions to Dest::Group(0) (one send reaches every machine)
  uint32_t chunk_floats = 0;       // 0: as many as one message carries (a multiple of 4)
  bool chunk_at_params = false;    // no chunk straddles two parameter blobs (Attach's `params`)
  uint32_t heartbeat_ms = 20;      // control message to every machine at least this often
  uint32_t dead_ms = 2000;         // silence after which a machine is dead
  uint32_t start_ms = 60000;       // how long to wait for every machine at the start
  uint32_t sweep_ms = 20;          // a master sweeps its chunks at most once per sweep_ms
  uint32_t sweeps_per_iter = 0;    // ... and at most this often per local iteration (0: no limit)
  uint32_t window = 64;            // positions awaiting their delta, per destination
  uint32_t drain_ms = 5000;        // the leader's longest wait for the others' last deltas
  // Codec, weed-out and aggregation of every segment (--compress, --policy=weedout:N,
  // --aggregate: rule.aggregate, sync/aggregate.hpp); its update counts are made per job (every
  // master endpoint of this machine shares them).
  SegmentRule rule;
  bool track_fresh = false;        // keep fresh_rounds() up to date (ssp, bsp, gsp across machines)
  // bsp / gsp (Policy::MachineGroups): each machine's synchronous group, per rank. Then
  // slowest_other() is over the machines of this one's group only, by their iterations whose
  // progress has gone out, and a delta's staleness counts from its group's last one.
  std::vector<int> machine_group;
  // Agreement (Agree): hashes every machine must share; 0 = not checked (kAgreeNet defaults to
  // the buffer's length and parameter offsets given to Attach).
  uint64_t agree[kAgreeKinds] = {};
  // Quorum: a machine that reaches fewer than half of the job (counting itself; exactly half
  // only with rank 0 among them) does not lead, test or snapshot; cut off that long, it ends
  // with one line (0: 30 x dead_ms).
  uint32_t quorum_ms = 0;
  // Stragglers: a machine still training whose iteration rate stays below this fraction of
  // the median of the machines training, kStragglerSeconds rate windows in a row, is named
  // (the leader's log once, every machine's figures while it lags); 0: never.
  double straggler = 0.5;
  // Chunk shares in proportion to these weights, by rank (--share_weights: a machine of less
  // capacity masters fewer chunks; beyond the list, 1; empty: equal shares). Agreed.
  std::vector<double> share_weights;
  // The machines the job's settings are made for (ShareMomentum, easgd's speed): a new
  // machine's are the others' (one fewer than its list); 0: `machines`.
  int job_machines = 0;
  bool admit = false;               // admit a new machine (another's --join) where the transport can (bin: with a job key)
  bool log = true;
};

// One machine of the job as this one sees it (core/stats.hpp): its rate, and what its deltas
// did to the chunks this machine masters.
using NetPeerFigures = PeerNetFigures;

// How long a master a re-share replaced still takes the answers to its positions: a second,
// or half of dead_ms where that is longer (a machine may be slow that long and still live; an
// answer given up on loses its delta).
inline constexpr std::chrono::milliseconds kRetiredMasterGrace{1000};
inline std::chrono::milliseconds RetiredMasterGrace(uint32_t dead_ms) {
  return std::max(kRetiredMasterGrace, std::chrono::milliseconds(dead_ms / 2));
}

// Rate windows (of a second or more) in a row below NetJobOptions::straggler before a machine
// is named a straggler.
inline constexpr int kStragglerSeconds = 2;

// A machine's figures (core/stats.hpp's NetworkFigures, which its stats sink receives) and the
// control messages it refused, by reason.
struct NetJobStats : NetworkFigures {
  uint64_t control_refusals[static_cast<size_t>(ControlRefusal::kCount)] = {};
  uint64_t clock_unbacked = 0;  // clocks claimed beyond what their sender could have run, never borne out
};

class SvbLink;

class NetJob {
 public:
  // `transport` reaches every other machine: peer r is rank r; Dest::Group(0) all of them
  // when opt.multicast.
  NetJob(std::unique_ptr<Transport> transport, NetJobOptions opt);
  ~NetJob();
  NetJob(const NetJob&) = delete;
  NetJob& operator=(const NetJob&) = delete;

  // bsp / gsp across machines, before Attach: each rank's synchronous group (see
  // NetJobOptions::machine_group); fresh rounds are then kept too.
  void set_machine_group(std::vector<int> groups);
  // Before Attach: one of the hashes every machine must share (NetJobOptions::agree).
  void set_agreement(Agree which, uint64_t hash);
  // A failure that ended the job after the start (the quorum lost for good, a machine that
  // disagrees): one line, empty when none. The caller reports it after Finish.
  std::string error() const;
  // Starts the daemon on this machine's host copy `weights` (n floats, trained by the
  // group's first `local_solvers` ranks) and blocks until training may begin: every machine
  // has been heard from (a new job; after start_ms, an Error naming the silent ones), or this
  // machine has joined a running job (its weights received, the global iteration taken over).
  // `params`: where each of the net's parameter blobs starts in `weights` (chunks are cut there
  // with opt.chunk_at_params). `stop` is asked while waiting: true (a signal, say) ends the
  // wait with an Error.
  void Attach(MachineGroup* group, int local_solvers, float* weights, size_t n,
              const std::vector<size_t>& params = {}, const std::function<bool()>& stop = {});
  // --svb, before Attach: `skip` ([begin, end) float ranges, cut at parameter boundaries) is
  // never streamed; `link` carries those weights' factors. A machine cannot then join a running
  // job (W never travels as values): that is an Error at its start.
  void UseSvb(std::shared_ptr<SvbLink> link, std::vector<std::pair<size_t, size_t>> skip);
  // Before Attach: where this machine's exchange figures go (StatsSink::OnNetwork, from the
  // daemon thread, about once a second while it runs, and once as it finishes).
  void set_stats(std::shared_ptr<StatsSink> sink);
  // The sharing policy's name and figures (PolicyRun::figures) for this machine's reports,
  // bound by the runner once its policy exists and cleared (empty) before the policy goes.
  // Any thread.
  void set_policy_figures(std::string name, std::function<PolicyFigures()> figures);
  // After the local solvers have returned: tells the others a little longer (done, or
  // finished), then stops the daemon. Idempotent.
  void Finish();

  int rank() const { return opt_.rank; }
  const SegmentRule& rule() const { return opt_.rule; }
  // The machines the job's settings are made for (NetJobOptions::job_machines).
  int job_machines() const { return opt_.job_machines ? opt_.job_machines : opt_.machines; }
  // The job's machines (grows as new ones are admitted), from any thread.
  int machines() const { return machines_now_.load(std::memory_order_relaxed); }
  bool joined_running() const { return joined_running_; }
  bool leads() const;
  // This machine left the job on notice (its chunks handed over): from any thread.
  bool left() const { return left_.load(); }
  // The machine whose word ended this one's training, and the global iteration then (-1 and 0:
  // none; this machine led, left, or the job never ended), from any thread. Its name: Name.
  int ended_by() const { return ended_by_.load(); }
  int64_t ended_at() const { return ended_at_.load(); }
  bool stopped() const { return stopped_.load(); }  // ... on the leader's stop (a request)
  std::string Name(int r) const;
  // The clocks a sharing policy bounds (sync/policy.hpp), from any thread: the fewest
  // iterations per solver any other live machine still training has run (its solvers' count
  // over its solver count; this machine's own when none), and how many times every chunk this machine does not own
  // has been answered (a count that grows by one each time every one of them has been answered
  // again: two more mean this machine's progress is out and the others' is in). Both updated by
  // the daemon.
  int64_t slowest_other() const { return slowest_other_.load(std::memory_order_relaxed); }
  // The machines taken for dead now (bit r: machine r, the first 64), from any thread: their
  // data partitions are read by the others (TakenOverPartitions) until they are back.
  uint64_t dead_machines() const { return dead_.load(std::memory_order_relaxed); }
  uint64_t fresh_rounds() const { return fresh_rounds_.load(std::memory_order_relaxed); }
  // Waits, from any thread, until `done()` holds or `deadline` passes (returns done()). The
  // daemon wakes the waiters whenever slowest_other(), fresh_rounds(), a recovery, the start,
  // the lead, the job's end or a leave changes, and when it ends; `done` is also asked every 50 ms, for what the daemon does not tell (a
  // solver's stop flag).
  bool AwaitNews(const std::function<bool()>& done, std::chrono::steady_clock::time_point deadline) const;
  NetJobStats stats() const;
  // A local solver's loss went non-finite: this machine's copy is lost. Asks the daemon to give
  // up the chunks it masters and re-take every chunk whole from the others' positions (a
  // machine joining again), and waits for that. Any solver thread; several may ask at once.
  // Returns false with `why` set when the job cannot recover: no other machine has a sound copy
  // (every copy diverged) within dead_ms, or the daemon has stopped.
  bool Recover(std::string* why);
  // One line for the leader's display: who leads, per-machine rate, sweeps/s, Gbit/s, losses,
  // staleness.
  std::string Line() const;

 private:
  static NetJobOptions Checked(NetJobOptions opt, const Transport* t);  // the constructor's checks
  void Run();  // the daemon loop
  // The daemon's phases before training (false: the daemon ends, start_failed_ or
  // recover_failed_ set): a new job's start (every machine heard and ready) or a joiner's
  // first step; then, joining (a newcomer, a recovery), until every chunk is received.
  bool Start(std::chrono::steady_clock::time_point now);
  void JoinRunning(int64_t view);   // Start: a newcomer to a running job
  void StartTraining();             // Start: every machine heard and ready
  std::string NoWordLine() const;   // Start: who stayed silent, and what may be wrong
  bool Join(std::chrono::steady_clock::time_point now);
  void Joined(std::chrono::steady_clock::time_point now);  // Join: every chunk received
  size_t Receive();  // handles what came in; returns how many messages
  bool Dispatch(const Message& m);  // Receive, one message (false: it waits for a send slot)
  int64_t LocalIterations() const;  // this machine's solvers' iterations
  // A control message: decoded and checked by control_, what it told kept by members_.
  void OnControl(const Message& m);
  void TakeNewRun(PeerId src, const ControlNews& news);
  void Disagreed(PeerId src, int agree, std::chrono::steady_clock::time_point now);
  ControlState Told() const;  // what this machine's control message says
  void SendControl();
  void CheckLiveness();
  // Re-shares the chunks (shares_) among the ready machines, and makes the masters it names.
  void Reshare();
  void MakeMasters(const std::vector<NetShares::Master>& make, uint32_t receivers);
  void Post();
  // The bridge between the job and this machine's group, each daemon pass: the others'
  // iterations counted, the quorum watched (false: this machine gave up), the leader chosen,
  // requests and the end of the job passed on both ways, and the end-of-job drain.
  void Bridge();
  void CountOthers();
  bool WatchQuorum(std::chrono::steady_clock::time_point now);
  bool GiveUp();  // cut off for quorum_ms: the job ends here with one line
  void ChooseLeader(std::chrono::steady_clock::time_point now);
  void PassRequests();
  void PassRequestsOf(int r);
  void Drain(std::chrono::steady_clock::time_point now);
  // Leave on notice, each daemon pass: the steps of the class comment, one at a time.
  void LeaveOnNotice(std::chrono::steady_clock::time_point now);
  bool EveryoneHolds() const;  // every live machine holds this one's finals
  uint64_t Held() const;       // NetControl::held: the leaving machines whose finals this one holds
  void HeardOf(int r, uint32_t flags_before, bool left_before);  // a machine began or ended its leave
  // Transport::set_admit, from Poll on the daemon thread: machine `r` (a new one) at `address`.
  bool Admit(PeerId r, const std::string& address);
  void Grow(int machines);  // the tables of every room, and this machine's, for `machines`
  bool AnsweredSince(const std::vector<uint64_t>& at, uint64_t more) const;  // every chunk not ours
  std::vector<uint64_t> Answers() const;                                     // per chunk, so far
  void Figures(bool report = true);  // report: hand them to stats_ (once a second)
  void PeerFigures(NetJobStats* s, double lapse, bool rates);
  void EndpointFigures(NetJobStats* s) const;
  void RetireSources(const MasterEndpoint& m);  // a master gone: keep its per-sender figures
  // The master a delta answers: this machine's current one for its sender, or one a re-share
  // retired that posted the position (by epoch) while it takes answers.
  MasterEndpoint* MasterFor(const Message& m);
  void ExpireRetiredMasters(std::chrono::steady_clock::time_point now);
  // After a rate window: marks (and names, once, in the leader's log) the machines whose rate
  // stays below opt_.straggler of the median of those training.
  void Stragglers(NetJobStats* s);
  bool Training(int r) const;  // machine r (this one too) is past its start and not yet done
  NetworkFigures Report(const NetJobStats& s) const;  // for stats_
  void Clocks();  // slowest_other_, fresh_rounds_
  void FreshRound();
  void SendFactors();  // --svb
  void BeginRecovery(const char* why);  // daemon: give up the owned chunks, re-take them all
  void Refused(PeerId from, uint32_t chunk, Refusal why, const char* what);  // names a sender once
  uint32_t Flags() const;

  std::unique_ptr<Transport> transport_;
  Wire wire_;         // the transport, with sync's header on every message
  Wire* t_ = &wire_;  // what the daemon sends and polls on
  NetJobOptions opt_;
  // The three rooms of the daemon's state (daemon thread only, once Attach started it).
  NetControlChannel control_;  // what is said and believed
  NetMembers members_;         // who is live, ready, leads; what each told
  NetShares shares_;           // who masters which chunk
  int64_t snapshots_passed_ = 0;  // daemon: snapshot requests added to the group from the others'
  bool lost_quorum_ = false;      // daemon: cut off, and not yet back with the weights
  std::string fatal_;                 // under figures_mu_: error()
  bool disagreed_ = false;            // daemon: a machine that disagrees was heard at the start
  std::chrono::steady_clock::time_point disagreed_at_;
  uint32_t incarnation_;
  MachineGroup* g_ = nullptr;
  int local_ = 0;
  float* w_ = nullptr;
  size_t n_ = 0;
  uint32_t chunk_floats_ = 0;
  std::unique_ptr<ChunkLayout> layout_;
  std::shared_ptr<SvbLink> svb_;                  // --svb; null: none
  std::vector<std::pair<size_t, size_t>> svb_skip_;

  std::unique_ptr<SlaveEndpoint> slave_;
  std::vector<std::unique_ptr<MasterEndpoint>> masters_;  // [0] multicast; else per rank
  std::vector<SweepPacer> pacers_;                        // per master
  int64_t posted_at_iterations_ = 0;                      // LocalIterations() at the last Post

  // Daemon state.
  enum class Phase { kStart, kJoining, kTraining } phase_ = Phase::kStart;
  // Leave on notice: solvers stopping and progress going out; no new positions, the answers
  // awaited; finals out until every live machine holds them; gone.
  enum class Leave { kNone, kDraining, kQuiet, kHanding, kLeft } leave_ = Leave::kNone;
  std::chrono::steady_clock::time_point leave_at_, quiet_at_, finals_at_;
  int64_t leave_iter_ = 0;
  uint64_t final_sweeps_ = 0;
  bool finished_ = false, flushed_ = false, done_ = false, stop_ = false;
  std::vector<uint64_t> answers_at_finish_, answers_at_drain_;
  bool draining_ = false;
  std::chrono::steady_clock::time_point finished_at_, last_control_, last_post_, last_figures_;
  bool answer_now_ = false;  // a control message due before the next interval (a new peer run heard)
  std::chrono::steady_clock::time_point attached_at_;  // owner thread
  std::chrono::steady_clock::time_point started_;      // daemon: when it began
  Message batch_[32];
  size_t polled_ = 0, next_ = 0;
  // Masters a re-share replaced, still taking the answers to their positions until a deadline.
  std::vector<std::pair<std::chrono::steady_clock::time_point, std::unique_ptr<MasterEndpoint>>> retired_masters_;
  MasterEndpoint::Stats retired_{};  // the figures of masters gone, summed
  std::vector<MasterEndpoint::SourceStats> retired_sources_;  // theirs per sender, by rank
  std::shared_ptr<StatsSink> stats_;  // set before Attach; called by the daemon
  mutable std::mutex policy_mu_;      // the policy's figures, which the runner binds at any time
  std::string policy_name_;
  std::function<PolicyFigures()> policy_figures_;
  void News();  // daemon: wakes AwaitNews
  mutable std::mutex news_mu_;
  mutable std::condition_variable news_cv_;

  // Shared with other threads.
  std::atomic<bool> start_ok_{false}, quit_{false};
  std::atomic<bool> joined_running_{false};
  std::atomic<bool> all_done_{false};  // done, and every live machine has said so too
  std::atomic<bool> left_{false};      // Leave::kLeft
  std::atomic<int> ended_by_{-1};      // ended_by()
  std::atomic<int64_t> ended_at_{0};
  std::atomic<bool> stopped_{false};
  std::atomic<int> machines_now_{0};   // opt_.machines, for other threads
  std::atomic<int> lead_{-1};
  std::atomic<int64_t> slowest_other_{0};
  std::atomic<uint64_t> dead_{0};
  std::atomic<uint64_t> fresh_rounds_{0};
  std::atomic<int64_t> flushed_iter_{0};  // this machine's iterations whose progress has gone out
  std::vector<uint64_t> mark_answers_;   // daemon: per chunk, its answers when this fresh round began
  int64_t mark_iter_ = 0;                // daemon: this machine's iterations then
  std::chrono::steady_clock::time_point last_clocks_;
  std::string start_error_;  // set by the daemon before start_ok_ stays false and quit_
  std::atomic<bool> start_failed_{false};
  // Recovery (Recover): asked by solver threads, begun and ended by the daemon.
  std::atomic<uint64_t> recover_asked_{0}, recover_done_{0};
  std::atomic<bool> recover_failed_{false};
  uint64_t recover_target_ = 0;  // daemon: the asks the recovery under way answers
  bool recovering_ = false;      // daemon
  std::chrono::steady_clock::time_point recover_began_, owner_seen_;  // daemon
  std::string recover_error_;    // set by the daemon before recover_failed_
  uint64_t recoveries_ = 0;      // daemon
  std::vector<uint8_t> named_;   // daemon: per rank x reason, whether a refusal was logged
  std::vector<int> below_;       // daemon: per rank, rate windows in a row below the straggler bound
  double median_ = 0;            // daemon: the median rate of the machines training, last window
  std::vector<uint8_t> lags_;    // daemon: per rank, named a straggler now
  mutable std::mutex figures_mu_;
  NetJobStats figures_;  // under figures_mu_
  uint64_t last_bytes_sent_ = 0, last_bytes_received_ = 0, last_sweeps_ = 0;  // under figures_mu_
  uint32_t figures_chunks_ = 0;  // daemon thread
  std::thread thread_;
  bool finished_called_ = false;
};

}  // namespace hogstream
