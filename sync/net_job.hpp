// One machine's part of a training job across machines: the network daemon that links this
// machine's host copy of the weights to every other machine's, and the bridge between the
// machine's group (MachineGroup, sync/group.hpp) and the job's. Not for: addresses, sockets, launch (bin/peers.*
// opens the transport), local solvers (sync/hogwild.cpp runs them on the host copy).
// NetJob is the daemon loop, the dispatch and the glue; its state lives in rooms, each with its
// own file and tests: NetControlChannel (sync/net_control.hpp: the control message, its
// freshness, agreement, refusals and when the next is due), NetMembers (sync/net_members.hpp:
// liveness, quorum, the leader, what each machine told), NetShares (sync/net_shares.hpp: chunk
// owners, epochs, masters), NetEndpoints and FreshRounds (sync/net_endpoints.hpp: the slave, the
// masters, their pacing and the retired ones; the synchronous rounds), NetStart
// (sync/net_start.hpp: a new job, a joiner, a failed start), NetBridge (sync/net_bridge.hpp: the
// others' iterations, quorum, leader and requests, to and from the group), NetLeave and NetEnd
// (sync/net_leave.hpp: leave on notice, the end-of-job drain), NetRecovery
// (sync/net_recovery.hpp) and NetFigures (sync/net_figures.hpp: figures, stragglers, log lines).
// The aggregation's maths lives in sync/aggregate.hpp.
// Threads: one daemon thread (started by Attach, ended by Finish or the destructor) owns the
// transport and the rooms. The owner thread calls set_*, UseSvb, Attach
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
#include "base/news.hpp"
#include "sync/net_bridge.hpp"
#include "sync/net_control.hpp"
#include "sync/net_endpoints.hpp"
#include "sync/net_figures.hpp"
#include "sync/net_leave.hpp"
#include "sync/net_members.hpp"
#include "sync/net_options.hpp"
#include "sync/net_recovery.hpp"
#include "sync/net_shares.hpp"
#include "sync/net_start.hpp"
#include "sync/segment.hpp"
#include "sync/wire.hpp"
#include "transport/transport.hpp"

namespace hogstream {

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
  // Before Attach: where this machine's exchange figures go (NetworkSink::OnNetwork, from the
  // daemon thread, about once a second while it runs, and once as it finishes).
  void set_stats(std::shared_ptr<NetworkSink> sink);
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
  bool left() const { return leave_.left(); }
  // The machine whose word ended this one's training, and the global iteration then (-1 and 0:
  // none; this machine led, left, or the job never ended), from any thread. Its name: Name.
  int ended_by() const { return end_.ended_by(); }
  int64_t ended_at() const { return end_.ended_at(); }
  bool stopped() const { return end_.stopped(); }  // ... on the leader's stop (a request)
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
  uint64_t fresh_rounds() const { return rounds_.rounds(); }
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
  using Clock = std::chrono::steady_clock;
  void Run();  // the daemon loop
  // The daemon's phases before training (false: the daemon ends, start_.failed or the
  // recovery's failure set): a new job's start (every machine heard and ready) or a joiner's
  // first step; then, joining (a newcomer, a recovery), until every chunk is received.
  bool Start(Clock::time_point now);
  void JoinRunning(int64_t view);   // Start: a newcomer to a running job
  void StartTraining();             // Start: every machine heard and ready
  bool Join(Clock::time_point now);
  void Joined(Clock::time_point now);  // Join: every chunk received
  size_t Receive();  // handles what came in; returns how many messages
  bool Dispatch(const Message& m);  // Receive, one message (false: it waits for a send slot)
  int64_t LocalIterations() const;  // this machine's solvers' iterations
  // A control message: decoded and checked by control_, what it told kept by members_.
  void OnControl(const Message& m);
  void TakeNewRun(PeerId src, const ControlNews& news);
  void Disagreed(PeerId src, int agree, Clock::time_point now);
  ControlState Told() const;  // what this machine's control message says
  void SendControl();
  void CheckLiveness();
  // Re-shares the chunks (shares_) among the ready machines; the endpoints follow.
  void Reshare();
  void Post();
  // The bridge between the job and this machine's group, each daemon pass: the others'
  // iterations counted, the quorum watched (false: this machine gave up), the leader chosen,
  // requests and the end of the job passed on both ways, and the end-of-job drain.
  void Bridge();
  bool WatchQuorum(Clock::time_point now);
  bool GiveUp();  // cut off for quorum_ms: the job ends here with one line
  void ChooseLeader(Clock::time_point now);
  void Drain(Clock::time_point now);
  // Leave on notice, each daemon pass: the steps of NetLeave (sync/net_leave.hpp).
  void LeaveOnNotice(Clock::time_point now);
  void HeardOf(int r, uint32_t flags_before, bool left_before);  // a machine began or ended its leave
  // Transport::set_admit, from Poll on the daemon thread: machine `r` (a new one) at `address`.
  bool Admit(PeerId r, const std::string& address);
  void Grow(int machines);  // the tables of every room, and this machine's, for `machines`
  void Figures(bool report = true);  // report: hand them to the sink (once a second)
  void Clocks();  // slowest_other_, the fresh rounds
  void SendFactors();  // --svb
  void BeginRecovery(const char* why);  // daemon: give up the owned chunks, re-take them all
  void Refused(PeerId from, uint32_t chunk, Refusal why, const char* what);  // names a sender once
  uint32_t Flags() const;
  void News();  // daemon: wakes AwaitNews

  std::unique_ptr<Transport> transport_;
  Wire wire_;  // the transport, with sync's header on every message: what the daemon sends and polls on
  NetJobOptions opt_;
  // The rooms of the daemon's state (daemon thread only once Attach started it, but for what
  // each says other threads may read).
  NetControlChannel control_;  // what is said and believed (sync/net_control.hpp)
  NetMembers members_;         // who is live, ready, leads; what each told (sync/net_members.hpp)
  NetShares shares_;           // who masters which chunk (sync/net_shares.hpp)
  NetEndpoints endpoints_;     // the slave, the masters and those retired (sync/net_endpoints.hpp)
  FreshRounds rounds_;         // the synchronous rounds a policy waits for (ibid.)
  NetLeave leave_;             // leave on notice (sync/net_leave.hpp)
  NetEnd end_;                 // the end of the job and its drain (ibid.)
  NetRecovery recovery_;       // re-taking the weights after a non-finite loss (sync/net_recovery.hpp)
  NetFigures figures_;         // the figures, the stragglers, the fatal error (sync/net_figures.hpp)
  NewsBoard news_;             // AwaitNews
  NetStart start_;             // how this machine began: a new job, a joiner, a failure (sync/net_start.hpp)
  NetBridge bridge_;           // the others' iterations, quorum, leader and requests to the group (sync/net_bridge.hpp)
  MachineGroup* g_ = nullptr;
  int local_ = 0;
  std::shared_ptr<SvbLink> svb_;  // --svb; null: none
  std::vector<std::pair<size_t, size_t>> svb_skip_;
  enum class Phase { kStart, kJoining, kTraining } phase_ = Phase::kStart;  // daemon
  Clock::time_point attached_at_;  // owner thread
  Clock::time_point started_, last_figures_, last_clocks_;  // daemon: when it began; the last figures, clocks
  Inbox inbox_;                   // daemon: the batch polled, not yet all handled
  // Shared with other threads.
  std::atomic<bool> quit_{false};
  std::atomic<bool> joined_running_{false};
  std::atomic<int> machines_now_{0};   // opt_.machines, for other threads
  std::atomic<int64_t> slowest_other_{0};
  std::atomic<uint64_t> dead_{0};
  std::thread thread_;
  bool finished_called_ = false;  // owner thread
};

}  // namespace hogstream
