#include "sync/hogwild.hpp"

#include <glog/logging.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <cmath>
#include <cstring>
#include <iomanip>
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
  return {machine * SolverGroup::kMaxSolvers + local, (static_cast<double>(machine) + static_cast<double>(local) / locals) / machines,
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
  // The lead bound of a private copy: the segment's sweeps when last seen to advance, and this
  // solver's iterations since then.
  uint64_t seen_sweeps = 0;
  int ahead = 0;
  std::atomic<uint64_t> lead_waits{0};  // read by the leader's display
};

// Adds the segment figures of this process's private copies to the leader's display record;
// the leader's thread calls it while every Local (and its segment) is alive.
class SegmentFiguresSink : public StatsSink {
 public:
  SegmentFiguresSink(std::shared_ptr<StatsSink> next, const std::vector<Local>* locals)
      : next_(std::move(next)), locals_(locals) {}
  void OnTrain(TrainFigures& f) override {
    for (const Local& l : *locals_) {
      if (!l.segment) continue;
      const SegmentStats s = l.segment->stats();
      f.segments.push_back({l.rank, s.bytes_moved, s.chunks_sent, s.dropped, s.sweeps,
                            s.stale_ignored, s.sweeps_per_sec});
    }
    next_->OnTrain(f);
  }
  void OnTest(const TestFigures& f) override { next_->OnTest(f); }

 private:
  std::shared_ptr<StatsSink> next_;
  const std::vector<Local>* locals_;
};

}  // namespace

HogwildReport RunHogwild(const pb::SolverParameter& given, const HogwildOptions& opt) {
  // --aggregate=share: a job across machines whose deltas are added whole shares its momentum
  // (ShareMomentum).
  pb::SolverParameter param = given;
  if (opt.net && opt.net->shares_momentum()) {
    const std::string line = ShareMomentum(opt.net->machines(), &param);
    LOG_IF(INFO, opt.log && !line.empty()) << "Network: " << line;
  }
  // GPU solvers first (ranks 0..), then the CPU ones. A GPU solver trains a private copy on its
  // device; its host copy is what the segment streams to the shared weights (each iteration's
  // update is made on the host and uploaded with the next pass).
  const std::vector<int>& gpus = opt.solvers.gpus;
  const int n = opt.solvers.cpus + static_cast<int>(gpus.size());
  HS_REQUIRE(n >= 1 && n <= SolverGroup::kMaxSolvers) << "between 1 and " << SolverGroup::kMaxSolvers
                                                       << " solvers, got " << n;
  for (int g : gpus) RequireGpu(g, "SOLVERS names GPU " + std::to_string(g));
  HS_REQUIRE(!gpus.empty() || param.solver_mode() == pb::SolverParameter::CPU)
      << "solver_mode: GPU with CPU solvers only; name the GPUs in SOLVERS (e.g. 0:0 for one solver on GPU 0) "
         "or pass --cpu (or set solver_mode: CPU in the solver file)";
  HS_REQUIRE(!opt.net || opt.shm.empty())
      << "a job across machines runs this machine's solvers as threads of one process: leave out --shm";
  const Policy& policy = opt.policy;
  using PK = Policy::Kind;
  // Across machines the policy's rule (codec, weights) is the network's, and private copies
  // (a tree: solvers' copies -> the machine's host buffer -> the network) stream to the host
  // buffer as plain async, except:
  //   bsp, gsp  the machine's solvers average their steps into the host buffer (a bsp round,
  //             scaled by 1 / the machines of its group), and wait for the group's machines
  //             (NetJob's flushed clocks) before the next iteration;
  //   easgd     each solver's copy exchanges elastically with the host buffer, the centre's
  //             share on this machine, which the network keeps in step with the others.
  //   ssp, max-advance  the bound holds between machines (machine_gate).
  const bool net_rounds = opt.net && policy.rounds();
  const bool net_easgd = opt.net && policy.kind == PK::kEasgd;
  const bool private_copies =
      opt.private_copies || (!opt.net && policy.needs_private()) || net_rounds || net_easgd || !gpus.empty();
  Policy local_policy = opt.net ? Policy{} : policy;
  if (net_rounds) local_policy.kind = PK::kBsp;
  if (net_easgd) {
    local_policy.kind = PK::kEasgd;
    local_policy.alpha = policy.alpha;
    local_policy.period = policy.period;
  }
  local_policy.timeout = policy.timeout;
  const bool machine_gate = opt.net && (policy.kind == PK::kSsp || policy.kind == PK::kMaxAdvance);
  HS_REQUIRE(opt.shm.empty() || !policy.needs_private() || policy.kind == PK::kAsync || policy.kind == PK::kWeedout)
      << "--policy=" << policy.name() << " needs every solver in this process: leave out --shm";
  std::vector<int> machine_group;
  if (net_rounds) {
    machine_group = policy.MachineGroups(opt.net->machines(), n);
    opt.net->set_machine_group(machine_group);
  } else {
    policy.CheckGroups(n);
  }
  HS_REQUIRE(!policy.svb || (policy.kind == PK::kAsync && opt.shm.empty()))
      << "--svb runs with --policy=async (with or without --compress, --staleness-weight), in one process or "
         "across machines: leave out --shm and --policy=" << policy.name();
  HS_REQUIRE(!policy.svb || !(opt.net && opt.private_copies))
      << "--svb across machines trains each machine's host copy directly: leave out --private";
  HS_REQUIRE(!policy.svb || gpus.empty()) << "--svb runs on CPU solvers only: leave the GPUs out of SOLVERS";
  HS_REQUIRE(!policy.svb || param.iter_size() == 1) << "--svb sends the factors of one pass: set iter_size: 1";
  LOG_IF(INFO, opt.log && (n > 1 || private_copies || opt.net))
      << "Hogwild: " << n << " solver thread" << (n > 1 ? "s" : "") << " in this process"
      << (gpus.empty() ? "" : " (" + std::to_string(gpus.size()) + " on GPUs)") << ", "
      << (private_copies ? "each on a private copy streamed to" : "on") << " the "
      << (opt.shm.empty() ? "host" : "/dev/shm") << " weights"
      << (policy.kind != PK::kAsync || policy.needs_private() ? ", policy " + policy.name() : "");
  std::unique_ptr<SolverGroup> own_group;
  std::unique_ptr<ShmRegion> shm;
  std::vector<float> own_weights;
  SolverGroup* group = nullptr;  // the counters (ordinary memory, or /dev/shm)
  std::unique_ptr<SharedGroup> job;  // the solvers' view of them (core/group.hpp)
  MachineGroup* machine = nullptr;   // across machines: job, as the network daemon sets it
  float* master = nullptr;
  bool creator = true;
  int base_rank = 0;

  std::vector<Local> locals(n);
  std::barrier sync(n);
  std::thread heartbeat;
  std::atomic<bool> heartbeat_stop{false};
  std::vector<std::exception_ptr> errors(n);
  std::shared_ptr<StatsSink> stats;
  if (opt.stats) stats = private_copies ? std::make_shared<SegmentFiguresSink>(opt.stats, &locals) : opt.stats;
  // The policy's state and buffers (private copies only): gsp's group buffers, each linked to
  // the master by its own segment; the update counts every segment of the master shares.
  std::unique_ptr<PolicyRun> run;
  std::vector<std::vector<float>> group_weights;
  std::vector<std::unique_ptr<Segment>> group_segments;
  std::shared_ptr<ChunkUpdates> updates;
  const bool rounds = local_policy.kind == PK::kBsp || local_policy.kind == PK::kGsp;
  std::unique_ptr<SvbRun> svb;  // --svb with a layer worth it (sync/svb.hpp)

  auto segment_stats = [&locals, &group_segments, &run, &svb]() {
    std::ostringstream os;
    os << "Segments:";
    auto one = [&os](const char* who, int id, const SegmentStats& s, uint64_t lead_waits) {
      os << " [" << who << " " << id << ": " << s.sweeps << " sweeps, " << std::fixed << std::setprecision(1)
         << s.sweeps_per_sec << " sweeps/s, " << (s.bytes_moved >> 20) << " MiB, " << s.chunks_sent << " chunks, "
         << s.dropped << " lost";
      if (lead_waits) os << ", " << lead_waits << " lead waits";
      if (s.weeded) os << ", " << s.weeded << " weeded";
      os << "]";
    };
    for (const Local& l : locals)
      if (l.segment) one("solver", l.rank, l.segment->stats(), l.lead_waits.load(std::memory_order_relaxed));
    for (size_t g = 0; g < group_segments.size(); ++g)
      one("group", static_cast<int>(g), group_segments[g]->stats(), 0);
    if (run) os << "\n" << run->Line();
    if (svb) os << "\n" << svb->Line();
    return os.str();
  };

  // Seeds: fixed by random_seed (replayable), fresh otherwise; distinct per rank.
  const uint64_t base_seed = param.random_seed() >= 0 ? static_cast<uint64_t>(param.random_seed()) : FreshSeed();

  auto body = [&](int i) {
    Local& me = locals[i];
    try {
      ContextScope scope(me.ctx.get());
      // A. Every solver builds its nets: fillers draw from its own stream. Data readers start
      //    at the first batch, once the solver's rank (and so its seed and shard) is known.
      SolverOptions so;
      so.input_shapes = opt.input_shapes;
      so.action = opt.action;
      so.log = opt.log;
      so.reseed = false;
      so.device_update = false;  // a GPU solver's segment streams its host copy
      so.stats = stats;
      me.solver = CreateSolver(param, so);
      Net& net = me.solver->net();
      sync.arrive_and_wait();
      // B. The first solver of the process finds the shared weights: creates them (the job's
      //    first process: from its own fillers, --weights or --snapshot) or attaches.
      if (i == 0) {
        const size_t floats = net.param_buffer_size();
        if (!opt.shm.empty()) {
          JobIdentity id;
          id.floats = floats;
          id.shape_hash = ParamShapeHash(net);
          id.solver_settings = SolverSettings(param);
          shm = ShmRegion::CreateOrAttach(opt.shm, id, &creator);
          group = shm->group();
          master = shm->weights();
          LOG_IF(INFO, opt.log) << (creator ? "Created " : "Attached to ") << shm->path();
        } else {
          own_group = std::make_unique<SolverGroup>();
          group = own_group.get();
          own_weights.resize(floats);
          master = own_weights.data();
        }
        if (opt.net) {
          auto m = std::make_unique<MachineGroup>(group, opt.log);
          machine = m.get();
          job = std::move(m);
        } else {
          job = std::make_unique<SharedGroup>(group, opt.log);
        }
        base_rank = group->solvers.fetch_add(n);
        HS_REQUIRE(base_rank + n <= SolverGroup::kMaxSolvers)
            << "the job already has " << base_rank << " solvers; at most " << SolverGroup::kMaxSolvers;
        if (creator) {
          if (!opt.weights.empty()) net.CopyTrainedLayersFromFiles(opt.weights);
          if (!opt.resume.empty()) {
            me.solver->Restore(opt.resume);
            group->iter.store(me.solver->iter());
          }
          std::memcpy(master, net.param_data(), floats * sizeof(float));
        }
        if (policy.svb) {  // big InnerProduct weights as sufficient vectors
          std::vector<SvbLayer> layers = FindSvbLayers(net);
          std::string names;
          for (const SvbLayer& l : layers) names += " " + l.name;
          LOG_IF(INFO, opt.log && layers.empty())
              << "SVB: no InnerProduct layer has batch x (outputs + inputs) < outputs x inputs: nothing to do, "
                 "every parameter streams as usual";
          LOG_IF(INFO, opt.log && !layers.empty()) << "SVB:" << names << " travel as sufficient vectors";
          if (!layers.empty() && opt.net) {
            // W never travels as values: every machine starts from the same one (or the same file).
            if (creator && opt.weights.empty() && opt.resume.empty())
              FillSvbWeights(net, layers, param.random_seed() >= 0 ? param.random_seed() : 0x5eedULL, master);
            auto link = std::make_shared<SvbLink>(layers);
            opt.net->UseSvb(link, SvbRanges(layers));
            svb = std::make_unique<SvbRun>(std::move(layers), link);
          } else if (!layers.empty()) {
            svb = std::make_unique<SvbRun>(std::move(layers), n, master);
          }
        }
        // Across machines: link the host copy to the others' and wait for them (or, joining a
        // running job, for the weights and the global iteration).
        if (opt.net) {
          std::vector<size_t> params;
          for (Blob* p : net.learnable_params()) params.push_back(p->cpu_data() - net.param_data());
          opt.net->set_agreement(kAgreeNet, ParamShapeHash(net) ^ floats);
          opt.net->set_agreement(kAgreeSolver, Digest64(SolverSettings(param)));
          opt.net->Attach(machine, n, master, floats, params,
                          [&] { return opt.action && opt.action() == SolverAction::STOP; });
        }
      }
      sync.arrive_and_wait();
      HS_REQUIRE(master != nullptr) << "the first solver failed to set up the shared weights";
      // C. Join the group on the shared weights, or on a private copy plus a segment. The
      //    place decides the random stream and the data: solvers of one process, and of a job
      //    across machines, read disjoint partitions (PlaceSolver); processes of a --shm job,
      //    which do not know how many will join, start at golden-ratio steps of the rank.
      me.rank = base_rank + i;
      if (opt.shm.empty()) {
        const SolverPlace place = PlaceSolver(opt.net ? opt.net->rank() : 0, opt.net ? opt.net->machines() : 1, i, n);
        me.ctx->set_seed(SolverSeed(base_seed, place.seed_rank));
        me.ctx->set_data_partition(place.begin, place.length);
        if (opt.net)  // a dead machine's partition is read by the others until it is back
          me.ctx->set_data_takeover([net = opt.net, i, n] {
            return TakenOverPartitions(net->rank(), net->machines(), i, n, net->dead_machines());
          });
      } else {
        me.ctx->set_seed(SolverSeed(base_seed, me.rank));
        me.ctx->set_data_shard(std::fmod(0.6180339887498949 * me.rank, 1.0));
      }
      std::function<std::string()> extra;
      if (me.rank == 0 && private_copies) extra = segment_stats;
      if (me.rank == 0 && opt.net)
        extra = [net = opt.net, private_copies, &segment_stats] {
          std::string lines = net->Line();
          if (private_copies) lines.append("\n").append(segment_stats());
          return lines;
        };
      me.solver->JoinGroup(job.get(), me.rank, extra);
      if (private_copies) {
        std::memcpy(net.param_data(), master, net.param_buffer_size() * sizeof(float));
        SegmentOptions seg;
        seg.chunk_floats = static_cast<uint32_t>(opt.chunk_floats);
        seg.pause_us = static_cast<uint32_t>(opt.sweep_pause_us >= 0 ? opt.sweep_pause_us
                                                                      : me.ctx->mode() == Mode::GPU ? 0 : 2000);
        if (svb) {  // W travels as factors: chunks cut at the params, W's left out
          seg.boundaries = net.learnable_offsets();
          std::sort(seg.boundaries.begin(), seg.boundaries.end());
          seg.skip = SvbRanges(svb->layers());
        }
        sync.arrive_and_wait();  // every copy made, before the policy's state reads them
        if (i == 0) {
          updates = std::make_shared<ChunkUpdates>(ChunkLayout(net.param_buffer_size(), seg.chunk_floats, seg.boundaries).count);
          std::vector<int> ranks;
          std::vector<float*> copies;
          for (Local& l : locals) {
            ranks.push_back(base_rank + l.index);
            copies.push_back(l.solver->net().param_data());
          }
          std::vector<float*> targets;
          if (local_policy.kind == PK::kBsp) targets.push_back(master);
          if (local_policy.kind == PK::kGsp) {  // each group trains its own buffer, streamed to the master
            group_weights.assign(local_policy.groups.size(), std::vector<float>(master, master + net.param_buffer_size()));
            for (auto& gw : group_weights) {
              targets.push_back(gw.data());
              SegmentOptions gs = seg;
              gs.rule = local_policy.Rule(updates);
              group_segments.push_back(std::make_unique<Segment>(master, gw.data(), gw.size(), gs));
            }
          }
          run = std::make_unique<PolicyRun>(local_policy, group, ranks, copies, targets, net.param_buffer_size(),
                                            [&locals, group](int k) { return !group->gone[locals[k].rank].load(); });
          run->set_exchange([&locals](int k) { locals[k].segment->Sweep(); });
          run->set_refresh([&locals, &local_policy](int k) { locals[k].segment->AwaitSweeps(2, local_policy.timeout); });
          if (net_rounds) {
            const int mates = static_cast<int>(
                std::count(machine_group.begin(), machine_group.end(), machine_group[opt.net->rank()]));
            run->set_machines([job = opt.net] { return job->slowest_other(); },
                              [job = opt.net] { return job->fresh_rounds(); });
            run->set_machine_rounds(1.f / static_cast<float>(mates), policy.name());
          }
        }
        sync.arrive_and_wait();  // the policy's state is made
        if (!rounds) {  // the copy streams through its own segment (easgd: exchanges on demand)
          seg.rule = local_policy.Rule(updates);
          // Private copies in one process move the master only by their deltas: from 3 up,
          // each is weighted min(1, 2/staleness) by default (whole, 4 copies under load went
          // NaN; 1/staleness alone held but averaged the copies' steps). Not for easgd (its
          // elastic rule) nor weed-out (its own), nor under a job across machines.
          // (--aggregate=scale=1 gives MXNet-G's 1/staleness exactly.)
          if (!opt.net && local_policy.kind != PK::kEasgd && local_policy.kind != PK::kWeedout)
            ParseAggregate(opt.aggregate, n, &seg.rule, 2.f);
          if (local_policy.kind == PK::kEasgd) seg.elastic = local_policy.alpha;
          me.segment = std::make_unique<Segment>(master, net.param_data(), net.param_buffer_size(), seg);
        }
        // The leader tests and snapshots the master; each solver hands in its last progress
        // before it counts as finished, so the final snapshot holds everyone's work.
        me.solver->UseMaster(master, [&, i] {
          if (svb) svb->OnTrainEnd(i, locals[i].solver->net());
          const bool last_of_group = run->End(i);
          if (Segment* s = locals[i].segment.get()) {
            s->Stop();
            s->Sweep();
          }
          if (local_policy.kind == PK::kGsp && last_of_group) {
            Segment* gs = group_segments[run->group_of(i)].get();
            gs->Stop();
            gs->Sweep();
          }
        });
        // The lead bound (HogwildOptions::copy_lead): one sweep awaited, for at most 2 s (a
        // daemon that stopped, at the end, lets the solver go on at once).
        const int lead = opt.copy_lead;
        me.solver->SetIterationHooks(
            [&, i, lead] {
              Local& l = locals[i];
              if (lead > 0 && l.segment && l.segment->running()) {
                const uint64_t sweeps = l.segment->stats().sweeps;
                if (sweeps != l.seen_sweeps) {
                  l.seen_sweeps = sweeps;
                  l.ahead = 0;
                }
                if (++l.ahead > lead) {
                  l.lead_waits.fetch_add(1, std::memory_order_relaxed);
                  l.segment->AwaitSweeps(1, std::chrono::milliseconds(2000));
                  l.seen_sweeps = l.segment->stats().sweeps;
                  l.ahead = 1;
                }
              }
              return run->Before(i);
            },
            [&, i] { run->After(i); });
      } else {
        net.UseParamBuffer(master, /*copy_in=*/false);
      }
      if (machine_gate) {  // the clock bound holds between machines
        sync.arrive_and_wait();  // every rank known
        if (i == 0) {
          std::vector<int> ranks;
          for (Local& l : locals) ranks.push_back(l.rank);
          run = std::make_unique<PolicyRun>(policy, group, ranks, std::vector<float*>(n, nullptr), std::vector<float*>{},
                                            net.param_buffer_size(), [](int) { return true; });
          run->set_machines([job = opt.net] { return job->slowest_other(); },
                            [job = opt.net] { return job->fresh_rounds(); });
        }
        sync.arrive_and_wait();
        me.solver->SetIterationHooks([&, i] { return run->Before(i); }, [&, i] { run->After(i); });
        if (me.rank == 0) extra = [before = extra, &run] { return before() + "\n" + run->Line(); };
        if (me.rank == 0) me.solver->JoinGroup(job.get(), me.rank, extra);
      }
      if (svb) me.solver->SetGradientHook([&, i] { svb->OnGradient(i, locals[i].solver->net()); });
      // Across machines a copy that went non-finite is re-taken from the others (on the host
      // copy, which every local solver trains; a private copy follows it through its segment).
      if (opt.net && !private_copies) me.solver->SetDivergenceHook([job = opt.net](std::string* why) { return job->Recover(why); });
      sync.arrive_and_wait();
      if (i == 0) {
        if (shm && creator) shm->MarkReady();
        // This process's pulse for its ranks: alive (not necessarily progressing), so a long
        // test pass never looks like death.
        heartbeat = std::thread([&] {
          while (!heartbeat_stop.load()) {
            const int64_t now = HeartbeatNowMs();
            for (int r = base_rank; r < base_rank + n; ++r) group->heartbeat_ms[r].store(now);
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
          }
        });
      }
      if (me.segment && policy.kind != PK::kEasgd) me.segment->Start();
      if (i == 0)
        for (auto& gs : group_segments) gs->Start();
      // D. Train until the global iteration reaches max_iter (or the leader stops the job).
      me.solver->Solve();
    } catch (...) {
      errors[i] = std::current_exception();
      // Gone at once, though this process still beats: if it led, another takes over; one
      // solver's error (a corrupt record, say) ends the job.
      if (job) job->Leave(me.rank);
      sync.arrive_and_drop();
    }
  };

  for (int i = 0; i < n; ++i) {
    locals[i].index = i;
    const bool on_gpu = i < static_cast<int>(gpus.size());
    locals[i].ctx = std::make_unique<Context>(on_gpu ? Mode::GPU : Mode::CPU, on_gpu ? gpus[i] : 0, 1);
    locals[i].ctx->set_seed(SolverSeed(base_seed, i));
  }
  std::vector<std::thread> threads;
  for (int i = 1; i < n; ++i) threads.emplace_back(body, i);
  body(0);
  for (auto& t : threads) t.join();
  heartbeat_stop.store(true);
  if (heartbeat.joinable()) heartbeat.join();
  if (opt.net) {
    opt.net->Finish();
    // The machines that did not lead end as Caffe's log tools expect a run to end.
    bool ok = true;
    for (auto& e : errors) ok = ok && !e;
    const std::string failed = opt.net->error();  // the job went on without this machine
    HS_REQUIRE(!ok || failed.empty()) << failed;
    if (ok && !opt.net->leads() && opt.log)
      LOG(INFO) << "Optimization Done. (machine " << opt.net->rank() << "; the final test and snapshot are the leader's)";
  }
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
  HogwildReport report;
  report.created = creator;
  report.global_iter = group ? group->iter.load() : 0;
  for (const Local& l : locals) {
    report.ranks.push_back(l.rank);
    report.done.push_back(group && l.rank >= 0 ? group->done[l.rank].load() : 0);
    report.seeds.push_back(l.ctx->seed());
    report.shards.push_back(l.ctx->data_shard());
    if (l.segment) report.segments.push_back(l.segment->stats());
  }
  for (auto& gs : group_segments) report.segments.push_back(gs->stats());
  if (run) report.policy = run->figures();
  if (svb) report.svb = svb->figures();
  if (master && group) report.weights.assign(master, master + locals[0].solver->net().param_buffer_size());
  if (opt.log && (run || !report.segments.empty() || svb)) {  // what sharing cost, once, at the end
    uint64_t bytes = 0;
    for (const SegmentStats& st : report.segments) bytes += st.bytes_moved;
    int64_t mine = 0;
    for (int64_t d : report.done) mine += d;
    std::ostringstream os;
    os << "Sharing: " << (run ? run->Line() : "Policy " + policy.name()) << "; segments moved " << std::fixed
       << std::setprecision(1) << bytes / 1048576.0 << " MiB, " << (mine ? bytes / 1024.0 / mine : 0)
       << " KiB per iteration of this process";
    if (svb)
      os << "; " << svb->Line() << ", " << (mine ? report.svb.bytes_sent / 1024.0 / mine : 0) << " KiB per iteration";
    LOG(INFO) << os.str();
  }
  return report;
}

}  // namespace hogstream
