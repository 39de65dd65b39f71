#include "sync/hogwild.hpp"

#include <glog/logging.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cmath>
#include <cstring>
#include <iomanip>
#include <map>
#include <memory>
#include <sstream>
#include <thread>

#include <unistd.h>

#include "core/context.hpp"
#include "core/io.hpp"
#include "sync/local_segment.hpp"
#include "sync/net_job.hpp"
#include "sync/shm_region.hpp"
#include "sync/svb.hpp"

namespace hogstream {

SolverSpec ParseSolverSpec(const std::string& text) {
  SolverSpec spec;
  std::vector<std::string> parts;
  std::stringstream ss(text);
  for (std::string p; std::getline(ss, p, ':');) parts.push_back(p);
  HS_REQUIRE(!text.empty() && !parts.empty()) << "SOLVERS must be [gpu_id:]*cpu_count, got '" << text << "'";
  for (size_t i = 0; i < parts.size(); ++i) {
    const std::string& p = parts[i];
    HS_REQUIRE(!p.empty() && p.find_first_not_of("0123456789") == std::string::npos && p.size() < 6)
        << "SOLVERS must be [gpu_id:]*cpu_count (non-negative integers), got '" << text << "'";
    const int v = std::stoi(p);
    if (i + 1 < parts.size()) spec.gpus.push_back(v);
    else spec.cpus = v;
  }
  HS_REQUIRE(spec.cpus + static_cast<int>(spec.gpus.size()) > 0) << "SOLVERS '" << text << "' asks for no solver";
  return spec;
}

SolverPlace PlaceSolver(int machine, int machines, int local, int locals) {
  HS_CHECK(machines >= 1 && machine >= 0 && machine < machines && locals >= 1 && local >= 0 && local < locals)
      << machine << "/" << machines << ", " << local << "/" << locals;
  const double length = 1.0 / (static_cast<double>(machines) * locals);
  return {machine * kMaxGroupSolvers + local, (static_cast<double>(machine) + static_cast<double>(local) / locals) / machines,
          length};
}

std::vector<std::pair<double, double>> TakenOverPartitions(int machine, int machines, int local, int locals,
                                                           uint64_t dead) {
  const int tracked = std::min(machines, 64);
  std::vector<int> live;
  for (int r = 0; r < machines; ++r)
    if (r >= tracked || !((dead >> r) & 1)) live.push_back(r);
  const auto me = std::find(live.begin(), live.end(), machine);
  std::vector<std::pair<double, double>> ranges;
  if (me == live.end() || locals < 1) return ranges;
  const double slice = 1.0 / machines / static_cast<double>(live.size()) / locals;
  const double k = static_cast<double>(me - live.begin()) * locals + local;
  for (int d = 0; d < tracked; ++d)
    if ((dead >> d) & 1) ranges.emplace_back(static_cast<double>(d) / machines + k * slice, slice);
  return ranges;
}

float MachineRoundScale(int mates) {
  HS_CHECK(mates >= 1) << mates;
  return static_cast<float>(std::min<double>(mates, kJobSolverSpeed) / mates);
}

uint64_t SolverSeed(uint64_t base, int rank) {
  return base + 0x9E3779B97F4A7C15ULL * static_cast<uint64_t>(rank);
}

namespace {

// Solvers of one process: contexts, solvers, and (private mode) their segments.
struct Local {
  int index;      // within this process
  int rank = -1;  // within the job; -1 until the process has joined
  std::unique_ptr<Context> ctx;
  std::unique_ptr<Solver> solver;
  std::unique_ptr<Segment> segment;
  int device_copy = -1;  // a GPU solver's copy on its device: its index in Run::devices
  // The lead bound of a private copy: the segment's sweeps when last seen to advance, and this
  // solver's iterations since then.
  uint64_t seen_sweeps = 0;
  int ahead = 0;
  int unsound = 0;  // bsp / gsp: rounds in a row whose step of this solver was left out (non-finite)
  // A private copy's re-takes (RetakeCopy): this solver's iterations so far, and at its last
  // re-take; re-takes in a row (each within one iteration of the previous).
  int64_t iterations = 0;
  int64_t retaken_at = -2;
  int retakes_in_row = 0;
  std::atomic<uint64_t> lead_waits{0};  // read by the leader's display
  std::atomic<uint64_t> retakes{0};     // read by the leader's display
  std::vector<std::unique_ptr<SolverCallback>> callbacks;  // the solver's (AddCallback), owned here
};

// Hands `c` to solver `me` (after those it has) and keeps it alive as long as the solver.
void AddCallback(Local& me, std::unique_ptr<SolverCallback> c) {
  me.solver->AddCallback(c.get());
  me.callbacks.push_back(std::move(c));
}

// Adds the segment figures of this process's private copies (the GPU solvers' segments too,
// their sweep rate over the last display interval) to the reporting solver's display record;
// that solver's thread calls it while every Local (and its segment) is alive.
class SegmentFiguresSink : public StatsSink {
 public:
  SegmentFiguresSink(std::shared_ptr<StatsSink> next, const std::vector<Local>* locals,
                     const std::unique_ptr<GpuCopies>* devices)
      : next_(std::move(next)), locals_(locals), devices_(devices) {}
  void OnTrain(TrainFigures& f) override {
    const auto now = std::chrono::steady_clock::now();
    for (const Local& l : *locals_) {
      if (l.segment) {
        const SegmentStats s = l.segment->stats();
        f.segments.push_back({l.rank, s.bytes_moved, s.chunks_sent, s.dropped, s.sweeps,
                              s.stale_ignored, s.sweeps_per_sec});
      } else if (l.device_copy >= 0 && *devices_) {
        const GpuSegmentStats s = (*devices_)->segment(l.device_copy).stats();
        auto& [sweeps, at] = last_[l.rank];
        const double secs = std::chrono::duration<double>(now - at).count();
        const double rate = sweeps && secs > 0 ? (s.sweeps - sweeps) / secs : 0;
        sweeps = s.sweeps;
        at = now;
        f.segments.push_back({l.rank, s.bytes, s.chunks, 0, s.sweeps, 0, rate});
      }
    }
    next_->OnTrain(f);
  }
  void OnTest(const TestFigures& f) override { next_->OnTest(f); }

 private:
  std::shared_ptr<StatsSink> next_;
  const std::vector<Local>* locals_;
  const std::unique_ptr<GpuCopies>* devices_;
  std::map<int, std::pair<uint64_t, std::chrono::steady_clock::time_point>> last_;  // per GPU solver's rank
};

// How this process's solvers share their progress, decided from the options before any
// solver exists (every check a user's mistake can fail is here, so it fails at once).
struct Plan {
  int n = 0;  // solvers in this process: the GPU ones (ranks 0..) first, then the CPU ones
  // Each solver trains a private copy streamed to the shared weights (else all train those).
  bool private_copies = false;
  // The policy among this process's private copies. Across machines the policy's rule (codec,
  // weights) is the network's, and the copies (a tree: solvers' copies -> the machine's host
  // buffer -> the network) stream to the host buffer as plain async, except:
  //   bsp, gsp  the machine's solvers average their steps into the host buffer (a bsp round,
  //             scaled by 1 / the machines of its group), and wait for the group's machines
  //             (NetJob's flushed clocks) before the next iteration (net_rounds);
  //   easgd     each solver's copy exchanges elastically with the host buffer, the centre's
  //             share on this machine, which the network keeps in step with the others;
  //   ssp, max-advance  the bound holds between machines (machine_gate).
  Policy local;
  bool net_rounds = false;
  bool machine_gate = false;
  bool rounds = false;  // the local policy averages steps in rounds (bsp, gsp): no segment per copy
  // GPU solvers train copies on their devices, each linked to the master by a GPU segment
  // (sync/gpu_segment.hpp), under async; under the other policies (whose rounds and exchanges
  // work on host copies) a GPU solver's copy is on the host, streamed by a segment like a CPU
  // solver's, and the device holds a mirror of it, refreshed every iteration.
  bool device_copies = false;
  std::vector<int> machine_group;  // net_rounds: each machine's synchronous group
};

Plan MakePlan(const pb::SolverParameter& param, const HogwildOptions& opt) {
  using PK = Policy::Kind;
  const std::vector<int>& gpus = opt.solvers.gpus;
  const Policy& policy = opt.policy;
  Plan p;
  p.n = opt.solvers.cpus + static_cast<int>(gpus.size());
  HS_REQUIRE(p.n >= 1 && p.n <= kMaxGroupSolvers) << "between 1 and " << kMaxGroupSolvers
                                                  << " solvers, got " << p.n;
  if (!opt.device)
    for (int g : gpus) RequireGpu(g, "SOLVERS names GPU " + std::to_string(g));
  HS_REQUIRE(!gpus.empty() || param.solver_mode() == pb::SolverParameter::CPU)
      << "solver_mode: GPU with CPU solvers only; name the GPUs in SOLVERS (e.g. 0:0 for one solver on GPU 0) "
         "or pass --cpu (or set solver_mode: CPU in the solver file)";
  HS_REQUIRE(!opt.net || opt.shm.empty())
      << "a job across machines runs this machine's solvers as threads of one process: leave out --shm";
  p.net_rounds = opt.net && policy.rounds();
  const bool net_easgd = opt.net && policy.kind == PK::kEasgd;
  p.private_copies =
      opt.private_copies || (!opt.net && policy.needs_private()) || p.net_rounds || net_easgd || !gpus.empty();
  p.local = opt.net ? Policy{} : policy;
  if (p.net_rounds) p.local.kind = PK::kBsp;
  if (net_easgd) {
    p.local.kind = PK::kEasgd;
    p.local.alpha = policy.alpha;
    p.local.period = policy.period;
  }
  p.local.timeout = policy.timeout;
  p.machine_gate = opt.net && (policy.kind == PK::kSsp || policy.kind == PK::kMaxAdvance);
  p.rounds = p.local.kind == PK::kBsp || p.local.kind == PK::kGsp;
  p.device_copies = !gpus.empty() && p.local.kind == PK::kAsync;
  HS_REQUIRE(opt.shm.empty() || !policy.needs_private() || policy.kind == PK::kAsync || policy.kind == PK::kWeedout)
      << "--policy=" << policy.name() << " needs every solver in this process: leave out --shm";
  if (p.net_rounds) {
    p.machine_group = policy.MachineGroups(opt.net->machines(), p.n);
    opt.net->set_machine_group(p.machine_group);
  } else {
    policy.CheckGroups(p.n);
  }
  HS_REQUIRE(!policy.svb || (policy.kind == PK::kAsync && opt.shm.empty()))
      << "--svb runs with --policy=async (with or without --compress, --staleness-weight), in one process or "
         "across machines: leave out --shm and --policy=" << policy.name();
  HS_REQUIRE(!policy.svb || !(opt.net && opt.private_copies))
      << "--svb across machines trains each machine's host copy directly: leave out --private";
  HS_REQUIRE(!policy.svb || gpus.empty()) << "--svb runs on CPU solvers only: leave the GPUs out of SOLVERS";
  HS_REQUIRE(!policy.svb || param.iter_size() == 1) << "--svb sends the factors of one pass: set iter_size: 1";
  LOG_IF(INFO, opt.log && (p.n > 1 || p.private_copies || opt.net))
      << "Hogwild: " << p.n << " solver thread" << (p.n > 1 ? "s" : "") << " in this process"
      << (gpus.empty() ? "" : " (" + std::to_string(gpus.size()) + " on GPUs)") << ", "
      << (p.private_copies ? p.device_copies ? "each on a private copy (the GPU solvers' on their devices) streamed to"
                                             : "each on a private copy streamed to"
                           : "on")
      << " the "
      << (opt.shm.empty() ? "host" : "/dev/shm") << " weights"
      << (policy.kind != PK::kAsync || policy.needs_private() ? ", policy " + policy.name() : "");
  return p;
}

// One run of this process's solvers: what the steps below share. It lives on RunHogwild's
// stack; the solver threads (one per Local) work on it, meeting at `sync`.
struct Run {
  Run(const pb::SolverParameter& param, const HogwildOptions& opt, Plan plan)
      : param(param), opt(opt), plan(std::move(plan)), locals(this->plan.n), sync(this->plan.n), errors(this->plan.n) {}
  // Every daemon stopped before the buffers it streams go: the master (own_weights, shm) is
  // declared after the locals and so destroyed before them, and a run that ended in an error
  // leaves its segments running (their solvers' end hooks never ran).
  ~Run() {
    if (opt.net && policy) opt.net->set_policy_figures("", {});  // the policy goes before the network's daemon
    devices.reset();  // (their daemon stopped, what they had in flight landed)
    for (Local& l : locals)
      if (l.segment) l.segment->Stop();
    for (auto& gs : group_segments) gs->Stop();
    heartbeat_stop.store(true);
    if (heartbeat.joinable()) heartbeat.join();
  }

  const pb::SolverParameter& param;
  std::string agreed_settings;  // across machines: SolverSettings before this machine's SolverLocalShare
  const HogwildOptions& opt;
  const Plan plan;
  std::vector<Local> locals;
  std::barrier<> sync;
  std::vector<std::exception_ptr> errors;  // per solver: what ended it
  std::shared_ptr<StatsSink> stats;
  // Seeds: fixed by random_seed (replayable), fresh otherwise; distinct per rank.
  uint64_t base_seed = 0;
  // The shared weights and the group's counters: this process's own, or a /dev/shm job's.
  OwnedSolverGroup own_group;
  std::unique_ptr<ShmRegion> shm;
  std::vector<float> own_weights;
  std::unique_ptr<SharedGroup> job;  // the solvers' view of the group (core/group.hpp)
  MachineGroup* machine = nullptr;   // across machines: `job`, as the network daemon sets it
  float* master = nullptr;
  bool creator = true;
  int base_rank = 0;
  // The policy's state and buffers (private copies, or the clock bound between machines):
  // gsp's group buffers, each linked to the master by its own segment; the update counts
  // every segment of the master shares.
  std::unique_ptr<PolicyRun> policy;
  std::vector<std::vector<float>> group_weights;
  std::vector<std::unique_ptr<Segment>> group_segments;
  std::shared_ptr<ChunkUpdates> updates;
  std::unique_ptr<SvbRun> svb;  // --svb with a layer worth it (sync/svb.hpp)
  std::unique_ptr<GpuCopies> devices;  // the GPU solvers' device copies (Plan::device_copies)
  // This process's pulse for its ranks.
  std::thread heartbeat;
  std::atomic<bool> heartbeat_stop{false};
};

// The leader's display line of this process's segments (and the policy's and --svb's).
std::string SegmentLine(const Run& r) {
  std::ostringstream os;
  os << "Segments:";
  auto one = [&os](const char* who, int id, const SegmentStats& s, uint64_t lead_waits, uint64_t retakes) {
    os << " [" << who << " " << id << ": " << s.sweeps << " sweeps, " << std::fixed << std::setprecision(1)
       << s.sweeps_per_sec << " sweeps/s, " << (s.bytes_moved >> 20) << " MiB, " << s.chunks_sent << " chunks, "
       << s.dropped << " lost";
    if (lead_waits) os << ", " << lead_waits << " lead waits";
    if (retakes) os << ", " << retakes << " re-takes";
    if (s.weeded) os << ", " << s.weeded << " weeded";
    os << "]";
  };
  for (const Local& l : r.locals)
    if (l.segment)
      one("solver", l.rank, l.segment->stats(), l.lead_waits.load(std::memory_order_relaxed),
          l.retakes.load(std::memory_order_relaxed));
  for (size_t g = 0; g < r.group_segments.size(); ++g)
    one("group", static_cast<int>(g), r.group_segments[g]->stats(), 0, 0);
  for (const Local& l : r.locals)
    if (l.device_copy >= 0) {
      const GpuSegmentStats s = r.devices->segment(l.device_copy).stats();
      os << " [solver " << l.rank << " on its device: " << s.sweeps << " sweeps, " << (s.bytes >> 20) << " MiB";
      if (const uint64_t waits = l.lead_waits.load(std::memory_order_relaxed)) os << ", " << waits << " lead waits";
      os << "]";
    }
  if (r.policy) os << "\n" << r.policy->Line();
  if (r.svb) os << "\n" << r.svb->Line();
  return os.str();
}

// B. The first solver of the process finds the shared weights: creates them (the job's first
//    process: from its own fillers, --weights or --snapshot) or attaches to a /dev/shm job's.
void OpenSharedWeights(Run& r, Solver& first) {
  const HogwildOptions& opt = r.opt;
  Net& net = first.net();
  const size_t floats = net.param_buffer_size();
  SolverGroup* group = nullptr;  // the counters: the /dev/shm job's, or this process's own
  if (!opt.shm.empty()) {
    JobIdentity id;
    id.floats = floats;
    id.shape_hash = ParamShapeHash(net);
    id.solver_settings = SolverSettings(r.param);
    r.shm = ShmRegion::CreateOrAttach(opt.shm, id, &r.creator);
    group = r.shm->group();
    r.master = r.shm->weights();
    LOG_IF(INFO, opt.log) << (r.creator ? "Created " : "Attached to ") << r.shm->path();
  } else {
    r.own_group = NewSolverGroup();
    group = r.own_group.get();
    r.own_weights.resize(floats);
    r.master = r.own_weights.data();
  }
  if (opt.net) {
    auto m = std::make_unique<MachineGroup>(group, opt.log);
    r.machine = m.get();
    r.job = std::move(m);
  } else {
    r.job = std::make_unique<SharedGroup>(group, opt.log);
  }
  const int n = r.plan.n;
  r.base_rank = r.job->JoinRanks(n);
  HS_REQUIRE(r.base_rank + n <= kMaxGroupSolvers)
      << "the job already has " << r.base_rank << " solvers; at most " << kMaxGroupSolvers;
  if (r.creator) {
    if (!opt.weights.empty()) net.CopyTrainedLayersFromFiles(opt.weights);
    if (!opt.resume.empty()) {
      first.Restore(opt.resume);
      r.job->TakeGlobalIteration(first.iter());
    }
    std::memcpy(r.master, net.param_data(), floats * sizeof(float));
  }
}

// --svb: the big InnerProduct weights travel as sufficient vectors (after OpenSharedWeights).
void SetUpSvb(Run& r, Net& net) {
  const HogwildOptions& opt = r.opt;
  std::vector<SvbLayer> layers = FindSvbLayers(net);
  std::string names;
  for (const SvbLayer& l : layers) names += " " + l.name;
  LOG_IF(INFO, opt.log && layers.empty())
      << "SVB: no InnerProduct layer has batch x (outputs + inputs) < outputs x inputs: nothing to do, "
         "every parameter streams as usual";
  LOG_IF(INFO, opt.log && !layers.empty()) << "SVB:" << names << " travel as sufficient vectors";
  if (!layers.empty() && opt.net) {
    // W never travels as values: every machine starts from the same one (or the same file).
    if (r.creator && opt.weights.empty() && opt.resume.empty())
      FillSvbWeights(net, layers, r.param.random_seed() >= 0 ? r.param.random_seed() : 0x5eedULL, r.master);
    auto link = std::make_shared<SvbLink>(layers);
    opt.net->UseSvb(link, SvbRanges(layers));
    r.svb = std::make_unique<SvbRun>(std::move(layers), link);
  } else if (!layers.empty()) {
    r.svb = std::make_unique<SvbRun>(std::move(layers), r.plan.n, r.master);
  }
}

// Across machines: links the host copy to the others' and waits for them (or, joining a
// running job, for the weights and the global iteration).
void JoinMachines(Run& r, Net& net) {
  std::vector<size_t> params;
  for (Blob* p : net.learnable_params()) params.push_back(p->cpu_data() - net.param_data());
  const size_t floats = net.param_buffer_size();
  NetJob* job = r.opt.net;
  job->set_agreement(kAgreeNet, ParamShapeHash(net) ^ floats);
  job->set_agreement(kAgreeSolver, Digest64(r.agreed_settings));
  if (r.opt.network) job->set_stats(r.opt.network);  // every machine's exchange, on its own sink
  job->Attach(r.machine, r.plan.n, r.master, floats, params,
              [&opt = r.opt] { return opt.action && opt.action() == SolverAction::STOP; });
}

// C. Solver i joins the group. Its place decides its random stream and data: solvers of one
//    process, and of a job across machines, read disjoint partitions (PlaceSolver); processes
//    of a --shm job, which do not know how many will join, start at golden-ratio steps of the
//    rank.
void PlaceInJob(Run& r, int i) {
  const HogwildOptions& opt = r.opt;
  const int n = r.plan.n;
  Local& me = r.locals[i];
  me.rank = r.base_rank + i;
  if (opt.shm.empty()) {
    const SolverPlace place = PlaceSolver(opt.net ? opt.net->rank() : 0, opt.net ? opt.net->machines() : 1, i, n);
    me.ctx->set_seed(SolverSeed(r.base_seed, place.seed_rank));
    me.ctx->set_data_partition(place.begin, place.length);
    if (opt.net) {  // a dead machine's partition is read by the others until it is back
      me.ctx->set_data_takeover([net = opt.net, i, n] {
        return TakenOverPartitions(net->rank(), net->machines(), i, n, net->dead_machines());
      });
      // ... and the data is cut anew over the machines when a new one joins.
      me.ctx->set_data_repartition([net = opt.net, i, n] {
        const SolverPlace p = PlaceSolver(net->rank(), net->machines(), i, n);
        return std::pair<double, double>(p.begin, p.length);
      });
    }
  } else {
    me.ctx->set_seed(SolverSeed(r.base_seed, me.rank));
    me.ctx->set_data_shard(std::fmod(0.6180339887498949 * me.rank, 1.0));
  }
  me.solver->JoinGroup(r.job.get(), me.rank);
}

// Across machines: the policy's figures go into this machine's network reports.
void ShowPolicy(Run& r) {
  if (r.opt.net) r.opt.net->set_policy_figures(r.opt.policy.name(), [p = r.policy.get()] { return p->figures(); });
}

// The copies' policy (first solver, once every copy exists): its buffers (gsp's groups and
// their segments), its state over every copy, and across machines its rounds.
void MakeCopiesPolicy(Run& r, const SegmentOptions& seg) {
  using PK = Policy::Kind;
  const Plan& plan = r.plan;
  const size_t floats = r.locals[0].solver->net().param_buffer_size();
  r.updates = std::make_shared<ChunkUpdates>(ChunkLayout(floats, seg.chunk_floats, seg.boundaries).count);
  std::vector<int> ranks;
  std::vector<float*> copies;
  for (Local& l : r.locals) {
    ranks.push_back(r.base_rank + l.index);
    copies.push_back(l.solver->net().param_data());
  }
  std::vector<float*> targets;
  if (plan.local.kind == PK::kBsp) targets.push_back(r.master);
  if (plan.local.kind == PK::kGsp) {  // each group trains its own buffer, streamed to the master
    r.group_weights.assign(plan.local.groups.size(), std::vector<float>(r.master, r.master + floats));
    for (auto& gw : r.group_weights) {
      targets.push_back(gw.data());
      SegmentOptions gs = seg;
      gs.rule = plan.local.Rule(r.updates);
      r.group_segments.push_back(std::make_unique<Segment>(r.master, gw.data(), gw.size(), gs));
    }
  }
  r.policy = std::make_unique<PolicyRun>(plan.local, r.job.get(), ranks, copies, targets, floats,
                                         [&r](int k) { return !r.job->Gone(r.locals[k].rank); });
  r.policy->set_exchange([&r](int k) { r.locals[k].segment->Sweep(); });
  r.policy->set_refresh([&r](int k) { r.locals[k].segment->AwaitSweeps(2, r.plan.local.timeout); });
  if (plan.net_rounds) {
    NetJob* job = r.opt.net;
    const int mates = static_cast<int>(
        std::count(plan.machine_group.begin(), plan.machine_group.end(), plan.machine_group[job->rank()]));
    r.policy->set_machines([job] { return job->slowest_other(); }, [job] { return job->fresh_rounds(); },
                           [job](const auto& done, auto deadline) { return job->AwaitNews(done, deadline); });
    r.policy->set_machine_rounds(MachineRoundScale(mates), r.opt.policy.name());
  }
  ShowPolicy(r);
}

// bsp / gsp: a solver whose step is left out of this many rounds in a row (non-finite) ends.
constexpr int kUnsoundRounds = 3;

// Solver i's private copy went non-finite (its loss did): it re-takes the shared weights whole
// through its segment (Segment::Retake) and the solver forgets its momentum, so one copy's
// divergence costs its lost steps, not the run. Across machines, if the host copy is lost too,
// it is re-taken from the other machines first (NetJob::Recover). A copy that is non-finite
// again within one iteration of its re-take, kRetakesInRow times in a row, has diverged from
// sound weights: false, and the solver's one line. On the solver's own thread (the segment's
// owner).
constexpr int kRetakesInRow = 3;
bool RetakeCopy(Run& r, int i, std::string* why) {
  Local& l = r.locals[i];
  l.retakes_in_row = l.iterations <= l.retaken_at + 1 ? l.retakes_in_row + 1 : 1;
  l.retaken_at = l.iterations;
  if (l.retakes_in_row >= kRetakesInRow) {
    *why = "solver " + std::to_string(l.rank) + "'s copy went non-finite again right after re-taking the shared weights, " +
           std::to_string(kRetakesInRow) + " times in a row (diverged: lower base_lr?)";
    return false;
  }
  auto retake = [&] {
    if (l.device_copy < 0) return l.segment->Retake();
    const bool taken = r.devices->segment(l.device_copy).Retake(r.devices->api().CurrentStream());
    l.solver->net().DeviceParamsWritten();
    return taken;
  };
  bool whole = retake();
  if (!whole && r.opt.net) {  // the host copy is lost too: the other machines' first
    if (!r.opt.net->Recover(why)) return false;
    whole = retake();
  }
  if (!whole) {
    *why = "solver " + std::to_string(l.rank) + "'s copy went non-finite and the shared weights it would re-take are not finite either";
    return false;
  }
  if (l.retakes.fetch_add(1, std::memory_order_relaxed) == 0)
    LOG_IF(WARNING, r.opt.log) << "Sharing: solver " << l.rank << "'s copy went non-finite after " << l.iterations
                               << " of its iterations: it re-took the shared weights and forgot its momentum "
                               << "(further re-takes are counted in the Segments line)";
  return true;
}

// The rule by which the master takes a private copy's deltas (a CPU copy's segment and the GPU
// copies' alike). Private copies in one process move the master only by their deltas: from 3
// up, each is weighted min(1, 2/staleness) by default (whole, 4 copies under load went NaN;
// 1/staleness alone held but averaged the copies' steps). Not for easgd (its elastic rule) nor
// weed-out (its own), nor under a job across machines. (--aggregate=scale=1 gives MXNet-G's
// 1/staleness exactly.)
SegmentRule CopiesRule(const Run& r) {
  using PK = Policy::Kind;
  const Policy& local = r.plan.local;
  SegmentRule rule = local.Rule(r.updates);
  if (!r.opt.net && local.kind != PK::kEasgd && local.kind != PK::kWeedout) {
    AggregateSetting s;
    s.machines = r.plan.n;
    s.default_scale = 2;
    s.policy_weights = local.weights();
    rule.aggregate = MakeAggregate(r.opt.aggregate, s);
  }
  return rule;
}

// The callbacks of a private copy: its last progress handed in before it counts as finished
// (so the final snapshot holds everyone's work); before each iteration the lead bound
// (HogwildOptions::copy_lead: one sweep awaited, for at most 2 s; a daemon that stopped, at the
// end, lets the solver go on at once) and the policy's wait; after each, the policy's round
// and the count of its unsound steps; a device copy's master swapped in for the leader's tests
// and snapshots; and, where the copy can re-take the shared weights, its divergence.
class CopyCallback final : public SolverCallback {
 public:
  CopyCallback(Run& r, int i, bool retakes) : r_(r), i_(i), retakes_(retakes) {}

  bool BeforeIteration() override {
    Local& l = r_.locals[i_];
    GpuSegment* device = l.device_copy >= 0 ? &r_.devices->segment(l.device_copy) : nullptr;
    const int lead = r_.opt.copy_lead;
    if (lead > 0 && (device || (l.segment && l.segment->running()))) {
      auto sweeps = [&] { return device ? device->stats().sweeps : l.segment->stats().sweeps; };
      if (const uint64_t now = sweeps(); now != l.seen_sweeps) {
        l.seen_sweeps = now;
        l.ahead = 0;
      }
      if (++l.ahead > lead) {
        l.lead_waits.fetch_add(1, std::memory_order_relaxed);
        if (device) device->AwaitSweeps(1, std::chrono::milliseconds(2000));
        else l.segment->AwaitSweeps(1, std::chrono::milliseconds(2000));
        l.seen_sweeps = sweeps();
        l.ahead = 1;
      }
    }
    return r_.policy->Before(i_);
  }

  void AfterIteration() override {
    Local& l = r_.locals[i_];
    ++l.iterations;
    r_.policy->After(i_);
    // A step left out of its round for a non-finite element: its momentum is lost too, and
    // a solver whose steps keep coming out non-finite from sound weights has diverged.
    l.unsound = r_.policy->sound(i_) ? 0 : l.unsound + 1;
    HS_REQUIRE(l.unsound < kUnsoundRounds)
        << "solver " << l.rank << "'s step was non-finite " << kUnsoundRounds
        << " rounds in a row, each from the round's weights (diverged: lower base_lr?)";
    if (l.unsound) l.solver->ForgetHistory();
  }

  bool Diverged(std::string* why) override { return retakes_ && RetakeCopy(r_, i_, why); }

  void TrainEnd() override {
    Local& l = r_.locals[i_];
    if (r_.svb) r_.svb->OnTrainEnd(i_, l.solver->net());
    const bool last_of_group = r_.policy->End(i_);
    if (Segment* s = l.segment.get()) {
      s->Stop();
      s->Sweep();
    }
    if (l.device_copy >= 0) r_.devices->Finish(l.device_copy);
    if (r_.plan.local.kind == Policy::Kind::kGsp && last_of_group) {
      Segment* gs = r_.group_segments[r_.policy->group_of(i_)].get();
      gs->Stop();
      gs->Sweep();
    }
  }

  bool OnMaster(const std::function<void()>& f) override {
    Local& l = r_.locals[i_];
    if (l.device_copy < 0) return false;  // a host copy: the solver views the master in place
    Net& net = l.solver->net();
    r_.devices->RunOnMaster(l.device_copy, r_.devices->api().CurrentStream(), [&] {
      net.DeviceParamsWritten();
      f();
    });
    net.DeviceParamsWritten();
    return true;
  }

 private:
  Run& r_;
  const int i_;
  const bool retakes_;
};

// Solver i on a private copy: the shared weights copied in, its segment (or the policy's
// rounds) linking it to them, and its hooks. Every solver calls it (it meets the others).
void WirePrivateCopy(Run& r, int i) {
  using PK = Policy::Kind;
  const HogwildOptions& opt = r.opt;
  const Policy& local = r.plan.local;
  Local& me = r.locals[i];
  Net& net = me.solver->net();
  std::memcpy(net.param_data(), r.master, net.param_buffer_size() * sizeof(float));
  SegmentOptions seg;
  seg.chunk_floats = static_cast<uint32_t>(opt.chunk_floats);
  seg.pause_us = static_cast<uint32_t>(opt.sweep_pause_us >= 0 ? opt.sweep_pause_us
                                                                : me.ctx->mode() == Mode::GPU ? 0 : 2000);
  if (r.svb) {  // W travels as factors: chunks cut at the params, W's left out
    seg.boundaries = net.learnable_offsets();
    std::sort(seg.boundaries.begin(), seg.boundaries.end());
    seg.skip = SvbRanges(r.svb->layers());
  }
  r.sync.arrive_and_wait();  // every copy made, before the policy's state reads them
  if (i == 0) MakeCopiesPolicy(r, seg);
  if (i == 0 && r.plan.device_copies) {
    DeviceApi* api = r.opt.device ? r.opt.device : LoadedDeviceApi();
    HS_CHECK(api) << "GPU solvers, and no device runtime loaded";
    GpuSegmentOptions gs;
    gs.chunk_floats = static_cast<uint32_t>(opt.chunk_floats);
    // The master counts the GPU copies' deltas with the CPU copies' (one staleness clock per
    // chunk), and weighs them by the same rule (from three copies up, by default).
    gs.updates = r.updates;
    gs.aggregate = CopiesRule(r).aggregate;
    r.devices = std::make_unique<GpuCopies>(*api, r.master, net.param_buffer_size(), gs);
  }
  r.sync.arrive_and_wait();  // the policy's state (and the device copies' home) is made
  if (r.plan.device_copies && i < static_cast<int>(opt.solvers.gpus.size())) {
    // A GPU solver's copy on its device, filled from the master and streamed by a GPU segment;
    // its nets view it (on the fake device, as host memory: the nets run in CPU mode there).
    me.device_copy = r.devices->Add();
    float* copy = r.devices->copy(me.device_copy);
    if (me.ctx->mode() == Mode::GPU) net.UseDeviceParamBuffer(copy);
    else net.UseParamBuffer(copy, /*copy_in=*/false);
  } else if (!r.plan.rounds) {  // the copy streams through its own segment (easgd: exchanges on demand)
    seg.rule = CopiesRule(r);
    if (local.kind == PK::kEasgd) seg.elastic = local.alpha;
    me.segment = std::make_unique<Segment>(r.master, net.param_data(), net.param_buffer_size(), seg);
  }
  me.solver->UseMaster(r.master);
  // A private copy that went non-finite re-takes the shared weights (a CPU copy streamed by its
  // own segment, or a GPU solver's copy on its device: not bsp or gsp, whose rounds hand every
  // copy the round's weights, nor --svb, whose factored weights are not streamed, nor a GPU
  // solver's host copy).
  const bool retakes = (me.segment && me.ctx->mode() == Mode::CPU && !r.svb) || me.device_copy >= 0;
  AddCallback(me, std::make_unique<CopyCallback>(r, i, retakes));
}

// A policy's clock bound and rounds on the solver's loop (the machine gate: ssp, max-advance
// across machines on shared weights).
class PolicyCallback final : public SolverCallback {
 public:
  PolicyCallback(Run& r, int i) : r_(r), i_(i) {}
  bool BeforeIteration() override { return r_.policy->Before(i_); }
  void AfterIteration() override { r_.policy->After(i_); }

 private:
  Run& r_;
  const int i_;
};

// ssp, max-advance across machines: the clock bound holds between machines. Every solver
// calls it (it meets the others).
void WireMachineGate(Run& r, int i) {
  Local& me = r.locals[i];
  r.sync.arrive_and_wait();  // every rank known
  if (i == 0) {
    std::vector<int> ranks;
    for (Local& l : r.locals) ranks.push_back(l.rank);
    r.policy = std::make_unique<PolicyRun>(r.opt.policy, r.job.get(), ranks, std::vector<float*>(r.plan.n, nullptr),
                                           std::vector<float*>{}, me.solver->net().param_buffer_size(),
                                           [](int) { return true; });
    NetJob* job = r.opt.net;
    r.policy->set_machines([job] { return job->slowest_other(); }, [job] { return job->fresh_rounds(); },
                           [job](const auto& done, auto deadline) { return job->AwaitNews(done, deadline); });
    ShowPolicy(r);
  }
  r.sync.arrive_and_wait();
  AddCallback(me, std::make_unique<PolicyCallback>(r, i));
}

// The leader's display: the exchange's line (across machines), the private copies' segments
// (with the policy's and --svb's lines), the policy's across machines; each from its own figures.
class DisplayCallback final : public SolverCallback {
 public:
  explicit DisplayCallback(const Run& r) : r_(r) {}
  void OnDisplay() override {
    if (r_.opt.net) LOG(INFO) << r_.opt.net->Line();
    if (r_.plan.private_copies) {
      std::istringstream lines(SegmentLine(r_));
      for (std::string line; std::getline(lines, line);)
        if (!line.empty()) LOG(INFO) << line;
    }
    if (r_.plan.machine_gate && r_.policy) LOG(INFO) << r_.policy->Line();
  }

 private:
  const Run& r_;
};

// The gradient of solver i, before its update: --svb folds in the others' (sync/svb.hpp), or a
// test's hook (HogwildOptions::after_backward) sees it.
class GradientCallback final : public SolverCallback {
 public:
  GradientCallback(Run& r, int i) : r_(r), i_(i) {}
  void AfterBackward(Net& net) override {
    if (r_.svb) r_.svb->OnGradient(i_, net);
    else r_.opt.after_backward(i_, net);
  }

 private:
  Run& r_;
  const int i_;
};

// Shared weights across machines that went non-finite: re-taken from the other machines.
class RecoverCallback final : public SolverCallback {
 public:
  explicit RecoverCallback(NetJob* job) : job_(job) {}
  bool Diverged(std::string* why) override { return job_->Recover(why); }

 private:
  NetJob* job_;
};

// This process's pulse for its ranks: alive (not necessarily progressing), so a long test
// pass never looks like death.
void StartHeartbeat(Run& r) {
  r.heartbeat = std::thread([&r] {
    NameThisThread("hs-heartbeat");
    while (!r.heartbeat_stop.load()) {
      const int64_t now = HeartbeatNowMs();
      r.job->Beat(r.base_rank, r.plan.n, now);
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
}

// Solver i's thread, from its nets to the end of its training.
void TrainOne(Run& r, int i) {
  const HogwildOptions& opt = r.opt;
  Local& me = r.locals[i];
  if (i > 0) NameThisThread("hs-solver-" + std::to_string(i));  // (solver 0 runs on the main thread)
  try {
    ContextScope scope(me.ctx.get());
    // A. Every solver builds its nets: fillers draw from its own stream. Data readers start
    //    at the first batch, once the solver's rank (and so its seed and shard) is known.
    SolverOptions so;
    so.input_shapes = opt.input_shapes;
    so.action = opt.action;
    so.log = opt.log;
    so.reseed = false;
    // A GPU solver's copy on its device is updated there; a host copy (other policies) on the host.
    so.device_update = r.plan.device_copies;
    so.stats = r.stats;
    if (opt.net) {
      so.norm_guard = opt.net->rule().aggregate->norm_guard();
      so.lr_factor = opt.net->rule().aggregate->LrFactor();
    }
    me.solver = CreateSolver(r.param, so);
    Net& net = me.solver->net();
    r.sync.arrive_and_wait();
    if (i == 0) {  // B.
      OpenSharedWeights(r, *me.solver);
      if (opt.policy.svb) SetUpSvb(r, net);
      if (opt.net) JoinMachines(r, net);
    }
    r.sync.arrive_and_wait();
    HS_REQUIRE(r.master != nullptr) << "the first solver failed to set up the shared weights";
    // C. Join the group on the shared weights, or on a private copy plus a segment.
    PlaceInJob(r, i);
    if (r.plan.private_copies) WirePrivateCopy(r, i);
    else net.UseParamBuffer(r.master, /*copy_in=*/false);
    if (r.plan.machine_gate) WireMachineGate(r, i);
    if (me.rank == 0) AddCallback(me, std::make_unique<DisplayCallback>(r));
    HS_CHECK(!(r.svb && opt.after_backward)) << "a test's gradient hook with --svb";
    if (r.svb || opt.after_backward) AddCallback(me, std::make_unique<GradientCallback>(r, i));
    // Across machines a copy that went non-finite is re-taken from the others (on the host
    // copy, which every local solver trains; a private copy follows it through its segment).
    if (opt.net && !r.plan.private_copies) AddCallback(me, std::make_unique<RecoverCallback>(opt.net));
    r.sync.arrive_and_wait();
    if (i == 0) {
      if (r.shm && r.creator) r.shm->MarkReady();
      StartHeartbeat(r);
    }
    if (me.segment && r.plan.local.kind != Policy::Kind::kEasgd) me.segment->Start();
    if (i == 0) {
      for (auto& gs : r.group_segments) gs->Start();
      if (r.devices) r.devices->Start();
    }
    // D. Train until the global iteration reaches max_iter (or the leader stops the job).
    me.solver->Solve();
    if (const NormGuard* g = me.solver->norm_guard(); g && opt.log)
      LOG(INFO) << "Network: solver " << i << " clipped " << g->clipped() << " of its " << g->steps()
                << " gradients to " << kShareNormGuard << " times the mean of their recent norms"
                << (g->let_gos() ? "; it let a runaway go " + std::to_string(g->let_gos()) + " times" : "");
  } catch (...) {
    r.errors[i] = std::current_exception();
    // Gone at once, though this process still beats: if it led, another takes over; one
    // solver's error (a corrupt record, say) ends the job.
    if (r.job) r.job->Leave(me.rank);
    r.sync.arrive_and_drop();
  }
}

// After the last solver: the network's end, then this process's first error, if any.
void FinishRun(Run& r) {
  if (r.devices) r.devices->Stop();
  r.heartbeat_stop.store(true);
  if (r.heartbeat.joinable()) r.heartbeat.join();
  if (NetJob* job = r.opt.net) {
    job->Finish();
    // The machines that did not lead end as Caffe's log tools expect a run to end.
    bool ok = true;
    for (auto& e : r.errors) ok = ok && !e;
    const std::string failed = job->error();  // the job went on without this machine
    HS_REQUIRE(!ok || failed.empty()) << failed;
    if (ok && job->left() && r.opt.log)
      LOG(INFO) << "Left the job. (machine " << job->rank() << ", on notice; the job goes on without it)";
    else if (ok && !job->leads() && r.opt.log) {
      // A job ended before its last iteration says so, and on whose word: a stop, or a forged
      // "done" in a job without a key, reads differently from a finished run.
      const int64_t last = r.param.max_iter();
      if (job->ended_by() >= 0 && job->ended_at() < last)
        LOG(WARNING) << (job->stopped() ? "Stopped early: " : "Ended early: ") << job->Name(job->ended_by())
                     << ", the leader, ended the job at global iteration " << job->ended_at() << " of " << last
                     << (job->stopped() ? " on a stop request" : " without a stop request")
                     << ". (machine " << job->rank() << ")";
      else
        LOG(INFO) << "Optimization Done. (machine " << job->rank() << "; the final test and snapshot are the leader's)";
    }
  }
  for (auto& e : r.errors)
    if (e) std::rethrow_exception(e);
}

HogwildReport MakeReport(const Run& r) {
  HogwildReport report;
  report.created = r.creator;
  report.global_iter = r.job ? r.job->Reached() : 0;
  for (const Local& l : r.locals) {
    report.ranks.push_back(l.rank);
    report.done.push_back(r.job && l.rank >= 0 ? r.job->DoneBy(l.rank) : 0);
    report.seeds.push_back(l.ctx->seed());
    report.shards.push_back(l.ctx->data_shard());
    if (l.segment) report.segments.push_back(l.segment->stats());
  }
  for (auto& gs : r.group_segments) report.segments.push_back(gs->stats());
  for (const Local& l : r.locals)  // (in solver order)
    if (l.device_copy >= 0) report.device_segments.push_back(r.devices->segment(l.device_copy).stats());
  if (r.policy) report.policy = r.policy->figures();
  if (r.svb) report.svb = r.svb->figures();
  if (r.master && r.job) report.weights.assign(r.master, r.master + r.locals[0].solver->net().param_buffer_size());
  if (r.opt.log && (r.policy || !report.segments.empty() || r.svb)) {  // what sharing cost, once, at the end
    uint64_t bytes = 0;
    for (const SegmentStats& st : report.segments) bytes += st.bytes_moved;
    int64_t mine = 0;
    for (int64_t d : report.done) mine += d;
    std::ostringstream os;
    os << "Sharing: " << (r.policy ? r.policy->Line() : "Policy " + r.opt.policy.name()) << "; segments moved "
       << std::fixed << std::setprecision(1) << bytes / 1048576.0 << " MiB, " << (mine ? bytes / 1024.0 / mine : 0)
       << " KiB per iteration of this process";
    if (r.svb)
      os << "; " << r.svb->Line() << ", " << (mine ? report.svb.bytes_sent / 1024.0 / mine : 0) << " KiB per iteration";
    uint64_t retakes = 0;  // the display lines may have missed the last ones, or all of them
    for (const Local& l : r.locals) retakes += l.retakes.load(std::memory_order_relaxed);
    if (retakes) os << "; private copies re-took the shared weights " << retakes << " times";
    LOG(INFO) << os.str();
  }
  return report;
}

}  // namespace

HogwildReport RunHogwild(const pb::SolverParameter& given, const HogwildOptions& opt) {
  // A job across machines: its aggregation rule sets the solvers' rates (the momentum share of
  // --aggregate=share, sync/aggregate.hpp).
  pb::SolverParameter param = given;
  if (opt.device) param.set_solver_mode(pb::SolverParameter::CPU);  // (the fake's nets run on the host)
  if (opt.net)
    for (const std::string& line : opt.net->rule().aggregate->AdjustJobSolver(opt.net->job_machines(), &param))
      LOG_IF(INFO, opt.log) << "Network: " << line;
  Plan plan = MakePlan(param, opt);
  // The machines agree on the settings before each one's own solver count scales its rates
  // (SolverLocalShare, EasgdSpeedUp).
  std::string agreed = SolverSettings(param);
  if (opt.net) {
    const std::string line = opt.net->rule().aggregate->AdjustLocalSolver(plan.n, &param);
    LOG_IF(INFO, opt.log && !line.empty()) << "Network: " << line;
  }
  if (plan.local.kind == Policy::Kind::kEasgd) {  // the centre averages the copies and trails them
    const int machines = opt.net ? opt.net->job_machines() : 1;
    const double weight = opt.net ? opt.net->rule().aggregate->EqualPaceWeight(machines) : 1;
    const std::string line = EasgdSpeedUp(machines * plan.n, EasgdSpeed(machines, plan.n, weight), &param);
    LOG_IF(INFO, opt.log && !line.empty()) << "Sharing: " << line;
  }
  Run r(param, opt, std::move(plan));
  r.agreed_settings = std::move(agreed);
  if (opt.stats) r.stats = r.plan.private_copies ? std::make_shared<SegmentFiguresSink>(opt.stats, &r.locals, &r.devices) : opt.stats;
  r.base_seed = param.random_seed() >= 0 ? static_cast<uint64_t>(param.random_seed()) : FreshSeed();
  const std::vector<int>& gpus = opt.solvers.gpus;
  for (int i = 0; i < r.plan.n; ++i) {
    r.locals[i].index = i;
    const bool on_gpu = i < static_cast<int>(gpus.size());
    r.locals[i].ctx = std::make_unique<Context>(on_gpu && !opt.device ? Mode::GPU : Mode::CPU, on_gpu ? gpus[i] : 0, 1);
    r.locals[i].ctx->set_seed(SolverSeed(r.base_seed, i));
  }
  std::vector<std::thread> threads;
  for (int i = 1; i < r.plan.n; ++i) threads.emplace_back(TrainOne, std::ref(r), i);
  TrainOne(r, 0);
  for (auto& t : threads) t.join();
  FinishRun(r);
  return MakeReport(r);
}

}  // namespace hogstream
