// How solvers share their progress (--policy, --staleness-weight, --compress): the other
// systems' models as switches on the same machinery, so a job can pick one and compare.
// Not for: the delta rule itself and its hooks (sync/segment.hpp, sync/codec.hpp), threads
// and segments of a process (sync/hogwild.hpp), machines (sync/net_job.hpp).
//
//   async           Hogwild delta streaming (the default): nobody ever waits.
//   bsp             bulk-synchronous: every solver's step of an iteration is in before anyone
//                   starts the next, and the weights move by the average of the steps.
//   ssp:S           stale-synchronous: a solver may be at most S iterations ahead of the
//                   slowest live one; when it had to wait, it also waits for two fresh sweeps
//                   of its segment, so it reads the master as it stands after the wait.
//   max-advance:K   the fastest waits while it leads the slowest by K iterations (a throttle:
//                   no freshness wait).
//   weedout:N       a delta whose sender's previous report on that chunk is not among the
//                   chunk's last N is dropped, and counted (the straggler's stale progress).
//   easgd:A[:P]     elastic averaging: every P iterations (default 1) e = A (local - centre);
//                   local -= e; centre += e. The centre is the master (what is tested and
//                   snapshotted). The centre is the copies' mean and trails them, so each
//                   solver's base_lr is scaled up with the copies (EasgdSpeed, sync/net_job.hpp).
//   gsp:GROUPS      groups synchronous inside (bsp), asynchronous to each other; each group's
//                   deltas weighted by 1 / staleness. GROUPS: "0,1;2,3" (solver indices) or
//                   @FILE with one group per line.
//   --staleness-weight   1 / staleness weights for async and ssp too.
//   --compress=fp16|int8|topk:F   compressed deltas and positions (sync/codec.hpp).
//   --svb           sufficient-vector broadcast for big InnerProduct weights (sync/svb.hpp).
//
// Across machines (sync/hogwild.cpp wires it): ssp and max-advance bound this machine against
// the slowest other one; bsp and gsp average each machine's solvers' steps into its host copy
// (scaled by 1 / the machines of its group, so the owners of the chunks sum the group's
// average) and wait before the next iteration until the group's machines have sent theirs
// out, then for two fresh rounds; a machine that finished its round early may already have
// sent part of its next step, which a slower machine then reads (the sum stays exact; the
// steps of one round are all in before anyone starts the next). A step lost on the wire is
// lost, as under async. gsp's groups are then sets of whole machines, and the staleness of a
// delta counts from its group's last one. easgd: each solver's copy exchanges with the host
// copy, which the network keeps in step with the other machines' (the centre).
// Every wait has a deadline (--policy_timeout, 120 s): a solver that does not arrive in time is
// named in a one-line Error; a solver that failed or finished is dropped from the wait at once.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/solver.hpp"
#include "sync/group.hpp"
#include "sync/codec.hpp"
#include "sync/segment.hpp"

namespace hogstream {

struct Policy {
  enum class Kind { kAsync, kBsp, kSsp, kMaxAdvance, kWeedout, kEasgd, kGsp };
  Kind kind = Kind::kAsync;
  uint32_t bound = 0;     // ssp:S, max-advance:K, weedout:N
  float alpha = 0;        // easgd
  uint32_t period = 1;    // easgd
  std::vector<std::vector<int>> groups;  // gsp: solver indices, every solver in exactly one
  bool staleness_weight = false;
  Codec codec;
  bool svb = false;  // --svb: big InnerProduct weights travel as sufficient vectors (sync/svb.hpp)
  std::chrono::milliseconds timeout{120000};

  // --policy=TEXT (empty: async), --staleness-weight, --compress=TEXT. A mistake is one line.
  static Policy Parse(const std::string& policy, bool staleness_weight = false, const std::string& compress = "");
  std::string name() const;  // as written on the command line, switches included
  // Whether solvers of one process need private copies linked by segments (everything but
  // plain async without switches).
  bool needs_private() const;
  // Whether the policy asks for 1/staleness weights (--staleness-weight, gsp's between groups).
  bool weights() const { return staleness_weight || kind == Kind::kGsp; }
  // The segment rule for the endpoints of one master buffer: the codec, weed-out, and the
  // aggregation the policy asks for (the 1/staleness weights or every delta whole; --aggregate
  // replaces it, sync/aggregate.hpp).
  SegmentRule Rule(std::shared_ptr<ChunkUpdates> updates) const;
  // Checks the groups against `solvers` (gsp); a mistake is one line.
  void CheckGroups(int solvers) const;
  // Across machines (bsp, gsp), machine r's synchronous group: bsp one group of every machine;
  // gsp's GROUPS name the job's solvers by global index (machine-major, `per_machine` each),
  // and each machine's solvers must all be in one group (a group is a set of machines).
  // Empty for the other policies. A mistake is one line.
  std::vector<int> MachineGroups(int machines, int per_machine) const;
  bool rounds() const { return kind == Kind::kBsp || kind == Kind::kGsp; }
};


// The policy's state for the solvers of one process with private copies: clock gates, the
// synchronous rounds of bsp / gsp (a lock-free average by stripes between two barriers), and
// easgd's periodic exchange. One object per process; Before/After/End from each solver's own
// thread (index = its index in the process).
class PolicyRun {
 public:
  // `copies[i]` is solver i's private copy, `targets[g]` what group g's round averages into
  // (bsp: the master; gsp: each group's own buffer), all `floats` long and alive meanwhile.
  // `live(i)` says whether solver i may still arrive (it has not failed).
  PolicyRun(const Policy& policy, const SharedGroup* group, std::vector<int> ranks, std::vector<float*> copies,
            std::vector<float*> targets, size_t floats, std::function<bool(int)> live);

  // Before solver i's next iteration: waits while a clock bound says so. false: stop.
  bool Before(int i);
  // After solver i's update: its part of a synchronous round, or an easgd exchange through
  // `exchange` (which the runner binds to the solver's segment).
  void After(int i);
  // Solver i trains no more: nobody waits for it again. true: it was the last of its group
  // to end (gsp: the runner then flushes the group's segment); without groups, always.
  bool End(int i);
  // easgd: what After calls every `period` iterations for solver i.
  void set_exchange(std::function<void(int)> exchange) { exchange_ = std::move(exchange); }
  // ssp: waits until solver i's segment has made two fresh sweeps (the runner binds it).
  void set_refresh(std::function<void(int)> refresh) { refresh_ = std::move(refresh); }
  // Across machines (ssp, max-advance): the bound holds per solver, between this machine's
  // solvers (their mean count: they share one buffer, so not between each other) and the
  // slowest other machine's (`slowest_other`, its iterations over its solver count), so that
  // machines of different solver counts are held alike. ssp's refresh then waits for two more
  // `fresh_rounds` (every chunk this machine does not own answered twice). Both waits sleep in
  // `await` (NetJob::AwaitNews: woken when either count moves), up to --policy_timeout.
  using Await = std::function<bool(const std::function<bool()>& done, std::chrono::steady_clock::time_point deadline)>;
  void set_machines(std::function<int64_t()> slowest_other, std::function<uint64_t()> fresh_rounds, Await await);
  // Across machines, bsp and gsp (the run made as bsp over this machine's solvers, its target
  // the host copy that the network links to the others): a round adds the average of the local
  // steps times `scale` (1 / the machines of this machine's group, so that each owner sums the
  // group's average); before each iteration a solver waits until every other live machine of
  // its group has sent out as many iterations per solver (`slowest_other`, NetJob's flushed clock), then
  // for two fresh rounds (the others' steps in), and reloads its copy from the host. `shown`
  // is the policy's name for the lines. Call after set_machines.
  void set_machine_rounds(float scale, std::string shown);

  int group_of(int i) const { return group_of_[i]; }
  // bsp / gsp: whether solver i's step of its last round was finite (else it was left out, and
  // the solver should forget its momentum); true for the other policies.
  bool sound(int i) const { return sound_[i].load() != 0; }
  PolicyFigures figures() const;
  std::string Line() const;  // "Policy ssp:2: 14 waits (0.8 s), ..." for the leader's display

 private:
  // Waits until every other live, unfinished member of `members` has arrived at `phase`.
  // false: the job is stopping. A member late past the timeout is an Error naming it.
  bool Arrive(int i, const std::vector<int>& members, int64_t phase);
  bool Blocked(int i) const;  // a clock bound holds solver i back now
  bool Wait(int i);           // while Blocked (ssp: then two fresh sweeps); false: stop
  std::string shown() const { return shown_.empty() ? policy_.name() : shown_; }
  void Round(int i);          // bsp / gsp: average the group's steps
  void Waited(std::chrono::steady_clock::time_point since);

  Policy policy_;
  const SharedGroup* group_;
  std::vector<int> ranks_;
  std::vector<float*> copies_, targets_;
  size_t floats_;
  std::function<bool(int)> live_;
  std::function<void(int)> exchange_, refresh_;
  std::function<int64_t()> slowest_other_;
  Await await_;  // set_machines
  bool machine_rounds_ = false;
  float scale_ = 1;     // of a round's average (machine rounds)
  std::string shown_;   // the policy's name in lines, when not policy_.name()
  std::vector<int> group_of_;                    // solver index -> group
  std::vector<std::vector<int>> groups_;         // bsp: one group of everyone
  std::vector<std::vector<float>> base_;         // per solver: the weights its step started from
  std::unique_ptr<std::atomic<int64_t>[]> arrived_;  // per solver: last phase arrived at
  std::unique_ptr<std::atomic<int32_t>[]> ended_;
  std::unique_ptr<std::atomic<int32_t>[]> sound_;   // per solver: its step of this round is finite
  std::atomic<uint64_t> unsound_{0};
  std::vector<int64_t> rounds_done_;             // per solver (its own thread only)
  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<uint64_t> waits_{0}, rounds_{0};
  std::atomic<int64_t> wait_us_{0};
};

}  // namespace hogstream
