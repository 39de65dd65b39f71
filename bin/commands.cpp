#include "bin/commands.hpp"

#include "bench/link_bench.hpp"
#include "data/convert.hpp"
#include "observe/plot.hpp"
#include "sync/hogwild.hpp"
#include "sync/net_job.hpp"
#include "sync/simulate.hpp"
#include "transport/registry.hpp"

namespace hogstream {
namespace {

using Specs = std::vector<FlagSpec>;

Specs Join(Specs a, const Specs& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// "a,b,c" from a list.
template <typename T, typename F>
std::string Listed(const std::vector<T>& items, F text) {
  std::string s;
  for (const T& item : items) {
    if (!s.empty()) s += ',';
    s += text(item);
  }
  return s;
}

const FlagSpec kInput = {"input", "TOP:N,C,H,W", "",
                         "the shape of a top whose Data layer's source is absent; repeatable (a label top "
                         "defaults to the batch size)"};

// A net from a file: describe, time, test, extract. `phase`: the default phase.
Specs NetFlags(const std::string& phase, const std::string& phase_help = "which phase's layers") {
  return {{"model", "NET.prototxt", "", "the net (required)"},
          {"phase", "TRAIN|TEST", phase, phase_help},
          {"level", "N", "0", "the net state's level (layers' include/exclude rules)"},
          {"stage", "S", "", "a stage of the net state; repeatable"},
          kInput};
}

// Training on one host: `hogstream train`, hogwild.bin, gpus.bin, raw.bin.
Specs HogwildFlags() {
  const HogwildOptions h;
  return {
      {"snapshot", "STATE", "", "resume from this .solverstate (not with --weights)"},
      {"weights", "MODEL[,MODEL]", "", "start from these trained .caffemodel files (not with --snapshot)"},
      {"iterations", "N", "", "train N iterations (default: the solver's max_iter)"},
      {"sigint_effect", "stop|snapshot|none", "stop", "what SIGINT and SIGTERM do"},
      {"sighup_effect", "snapshot|stop|none", "snapshot", "what SIGHUP does"},
      {"shm", "NAME", "", "train one copy of the weights in /dev/shm NAME with every process given it "
                          "(default: this process alone)"},
      {"private", "", "", "each solver trains its own copy, synced through a segment"},
      {"chunk", "FLOATS", std::to_string(h.chunk_floats), "floats per chunk of the segment"},
      {"policy", "async|bsp|ssp:S|max-advance:K|weedout:N|easgd:A[:P]|gsp:0,1;2,3", "",
       "how the copies share their progress (default: async)"},
      {"staleness-weight", "", "", "weigh each delta by 1/staleness"},
      {"compress", "fp16|int8|topk:F", "", "compress the deltas exchanged (default: none, float32)"},
      {"policy_timeout", "SECONDS", std::to_string(Policy{}.timeout.count() / 1000),
       "the longest a policy waits for a solver, then an error"},
      {"svb", "", "", "big InnerProduct weights as sufficient vectors (async; --private in one process)"},
      {"copy_lead", "K", std::to_string(h.copy_lead),
       "private copies: iterations a solver runs without a completed sweep before it waits (0: never)"},
      {"sweep_pause_us", "US", std::to_string(h.sweep_pause_us),
       "private copies: the daemon's pause between sweeps (-1: 2000 for a CPU copy, 0 for a GPU one)"},
      {"aggregate", "auto|RULE[=V][,K=V...]", h.aggregate,
       "how a master takes the others' deltas: auto, " + Listed(AggregateRegistry::Names(), [](const std::string& r) { return r; }) +
           " (each rule's keys: sync/README.md, Aggregation; warmup, cool and cooled also as N% of the run)"},
      kInput,
      {"metrics", "[HOST:]PORT", "", "serve this process's figures as a Prometheus endpoint (each machine its own)"},
      {"ui", "[HOST:]PORT", "", "serve the job's live page at http://HOST:PORT/ (with /metrics and /stats.json; "
                                "default host 127.0.0.1)"},
      {"ui_control", "", "", "the page's Stop and Snapshot buttons (with a --job-key, only with its control token; "
                             "without one, from this host only)"},
      {"stats_json", "FILE", "", "append this process's figures to FILE as JSON lines (each machine its own)"},
  };
}

// One machine of a job across machines: `hogstream train --peers`, raw.bin.
Specs NetJobFlags() {
  const NetJobOptions n;
  return {
      {"multicast", "GROUP:PORT|on", "",
       "send positions to a group (udp: GROUP:PORT in 239.0.0.0/8; raw: on or a group MAC) (default: none)"},
      {"rank", "N", "", "this machine's index in the list (default: the entry with a local address)"},
      {"iface", "NAME|RDMA_DEVICE[:PORT]", "",
       "the interface or RDMA device (default: the entry's iface=; verbs: the first device, port 1)"},
      {"job", "NAME", "", "the job's name; jobs on one wire tell each other apart by it (default: the list)"},
      {"job-key", "FILE", "", "a keyed MAC on every frame, with the key in FILE (default: none)"},
      {"join", "", "",
       "a new machine joins the running job: --peers is the others' list plus this machine's entry, last "
       "(udp, with the job's --job-key)"},
      {"loss", "P", "", "drop this fraction of the data messages, to see how a job takes it (default: 0)"},
      {"sweep_ms", "MS", std::to_string(n.sweep_ms), "a master sweeps its chunks at most once per MS"},
      {"sweeps_per_iter", "N", std::to_string(n.sweeps_per_iter),
       "... and at most N times per iteration of this machine's solvers (0: no limit)"},
      {"window", "N", std::to_string(n.window), "positions a master has awaiting their delta, per receiver (0: no limit)"},
      {"dead_ms", "MS", std::to_string(n.dead_ms), "silence after which a machine is dead"},
      {"quorum_ms", "MS", "0", "how long a machine cut off from a majority of the job waits before it gives up "
                               "(default: 30 x --dead_ms)"},
      {"share_weights", "W0,W1,...", "",
       "each machine's share of the chunks it masters, by rank, in proportion (a machine of a quarter of the others' "
       "CPU: 1,1,1,0.25; default: equal shares)"},
      {"straggler", "F", "0.5",
       "name a machine whose iteration rate stays below F of the median of the machines training (0: never)"},
      {"start_timeout", "SECONDS", std::to_string(n.start_ms / 1000),
       "how long every machine is waited for at the start"},
      {"chunk_at_params", "", "", "chunk boundaries at the parameter blobs' boundaries"},
      {"payload", "BYTES", "0",
       "bytes per datagram or frame, a multiple of 16 (default: what one carries within the MTU)"},
  };
}

Specs TrainFlags() {
  return Join(Join({{"solver", "SOLVER.prototxt", "", "the solver (required)"},
                    {"cpu", "", "", "train on the CPU whatever the solver's solver_mode says"},
                    {"gpu", "ID", "", "train one solver on GPU ID (as caffe train -gpu) (default: the solver's "
                                      "solver_mode and device_id)"},
                    {"solvers", "[gpu:]*N", "",
                     "Hogwild solvers: 4 = four CPU threads, 0:0:2 = two on GPU 0 and two CPU (default: 1, or "
                     "this machine's solvers= in a topology file)"},
                    {"peers", TransportUsage() + "|@FILE", "",
                     "one machine of a job across these machines (default: this host alone)"},
                    {"rendezvous", "[SCHEME://]HOST:PORT", "",
                     "one machine of a job whose list comes from a store at HOST:PORT, served by rank 0, training over SCHEME (" + TransportList(true) + ", default udp) (default: "
                     "torchrun's MASTER_ADDR:MASTER_PORT, srun's first node or mpirun's host where one launched "
                     "this process with more than one rank)"},
                    {"machines", "N", "", "--rendezvous: the job's machines (default: the launcher's WORLD_SIZE, "
                                          "OMPI_COMM_WORLD_SIZE, SLURM_NTASKS or PMI_SIZE)"}},
                   HogwildFlags()),
              NetJobFlags());
}

std::vector<Command> MakeHogstreamCommands() {
  const LinkBenchOptions bench;
  const PlotOptions plot;
  const ImagesetOptions imageset;
  const SimulateOptions sim;
  auto kib = [](uint32_t b) { return b % 1024 ? std::to_string(b) : std::to_string(b / 1024) + "k"; };
  return {
      {"hogstream describe", "--model=NET.prototxt",
       "one row per layer (name, type, top shapes, parameters), then 'params: N'",
       NetFlags("TRAIN")},
      {"hogstream time", "--model=NET.prototxt",
       "per-layer forward/backward ms and the total per batch (--gpu: on that GPU)",
       Join(NetFlags("TRAIN"), {{"iterations", "N", "50", "batches timed"},
                                {"threads", "N", "1", "CPU threads"},
                                {"gpu", "ID", "", "time on GPU ID (default: the CPU)"}})},
      {"hogstream train", "--solver=SOLVER.prototxt",
       "trains like `caffe train`; logs in Caffe's format on stderr\n"
       "(--solvers, --shm, --private or a --policy other than async: Hogwild; --peers: one machine of a\n"
       "job across machines)",
       TrainFlags()},
      {"hogstream test", "--model=NET.prototxt --weights=MODEL",
       "scores a trained model on the TEST phase of NET",
       Join(NetFlags("TEST", "ignored: test scores the TEST phase"),
            {{"weights", "MODEL", "", "the trained weights (required)"},
             {"iterations", "N", "50", "batches scored"}})},
      {"hogstream extract", "--model=NET.prototxt --weights=MODEL --blobs=BLOB[,BLOB...] OUT[,OUT...]",
       "the blobs' values, item by item, into one LMDB of float Datums per blob\n"
       "(Caffe's extract_features); OUT: one LMDB per blob, in --blobs' order",
       Join(NetFlags("TEST"), {{"weights", "MODEL", "", "the trained weights (required)"},
                               {"blobs", "BLOB[,BLOB...]", "", "the blobs to extract (required)"},
                               {"iterations", "N", "1", "batches run"}})},
      {"hogstream convert",
       "mnist IMAGES LABELS OUT | cifar10 BATCH.bin... OUT | imageset ROOT LIST OUT | mean LMDB OUT",
       "data sets to LMDBs of Datums, and an LMDB's mean image\n"
       "  mnist IMAGES LABELS OUT_LMDB     IDX files (gzipped or not)\n"
       "  cifar10 BATCH.bin... OUT_LMDB   CIFAR-10 binary batches\n"
       "  imageset ROOT LIST OUT_LMDB     JPEG/PNG files listed as 'PATH LABEL' lines (Caffe's convert_imageset)\n"
       "  mean LMDB OUT.binaryproto       per-pixel mean image of an LMDB (encoded ones decoded)\n"
       "(the flags are for imageset)",
       {{"resize_height", "H", std::to_string(imageset.resize_height),
         "resize to H rows (with --resize_width; 0: as is)"},
        {"resize_width", "W", std::to_string(imageset.resize_width),
         "resize to W columns (with --resize_height; 0: as is)"},
        {"shuffle", "", "", "shuffle the list"},
        {"seed", "N", std::to_string(imageset.seed), "the shuffle's seed"},
        {"gray", "", "", "decode as one gray channel"},
        {"check_size", "", "", "require every image to have the first one's size"},
        {"encoded", "", "", "store the encoded image, not pixels"},
        {"encode_type", "jpg|png", "", "re-encode as this (with --encoded) (default: the file's own)"}}},
      {"hogstream bench", "--loopback | --peers=udp://IP:PORT,IP:PORT|raw://MAC,MAC",
       "segment rate over a link next to the link's raw rate, per chunk and batch size\n"
       "(--loopback: both ends in this process; --peers: the same command on both hosts, the local\n"
       "entry picks the end)",
       {{"transport", "inproc|udp|raw|verbs", bench.transport, "the link"},
        {"loopback", "", "", "both ends in this process (--netns=A,B for two namespaces)"},
        {"peers", "udp://IP:PORT,IP:PORT|raw://MAC,MAC", "", "one end per host (default: none)"},
        {"timeout", "SECONDS", "", "--peers: how long a silent peer is waited for (default: " +
                                       std::to_string(static_cast<int>(bench.peer_timeout_s)) + ")"},
        {"chunk", "SIZES", "", "chunk sizes, like 4096,16k,1M (default: " + Listed(BenchChunks(), kib) +
                                   ", where one message carries them, else the most it carries)"},
        {"batch", "SIZES", "", "frames per flush, 1 to 1024 each (default: " +
                                   Listed(bench.batches, [](uint32_t b) { return std::to_string(b); }) + ")"},
        {"seconds", "S", "1", "per measurement"},
        {"repeat", "N", std::to_string(bench.repeat), "interleaved rounds; the table shows medians"},
        {"slots", "N", std::to_string(bench.slots), "send/receive slots per endpoint"},
        {"window", "N", std::to_string(bench.window), "positions awaiting a delta (0: 2 MiB worth)"},
        {"netns", "NS_A,NS_B", "", "a network namespace per end (default: this one)"},
        {"where", "A,B", "", "per end: udp, an IPv4 address (default: 127.0.0.1); raw, an interface"},
        {"multicast", "GROUP", "", "positions to a group (udp: IPv4; raw: MAC) (default: none, unicast)"},
        {"gso", "on|off", "on", "udp: UDP GSO where the kernel has it"},
        {"job-key", "FILE", "", "a keyed MAC on every frame (default: none)"},
        {"buffer", "SIZE", "", "the weights kept in sync, like 16M (default: " +
                                   std::to_string(bench.buffer_bytes >> 20) + "M)"},
        {"json", "", "", "one JSON object per row instead of the table"}}},
      {"hogstream ui-token", "--job-key=FILE",
       "the control token the page's buttons need in a job with this --job-key (--ui_control)",
       {{"job-key", "FILE", "", "the job's key file (required)"}}},
      {"hogstream plot", "-o OUT.png|OUT.svg LOG...",
       "training curves from Caffe-format logs (ours or Caffe's), one colour per log",
       {{"-o", "OUT", "", "the image: OUT.png or OUT.svg (required; or --out)"},
        {"out", "OUT", "", "the same as -o"},
        {"x", "iters|seconds", plot.x, "the x axis"},
        {"y", "Q[,Q...]", "", "the panels, of " + Listed(PlotQuantities(), [](const std::string& q) { return q; }) +
                                  " (default: " + Listed(plot.y, [](const std::string& q) { return q; }) + ")"}}},
      {"hogstream simulate", "--solver=SOLVER.prototxt --machines=N[,N...]",
       "a job of N machines in virtual time, in one process and one thread: the real solvers, segments\n"
       "and aggregation rule over a simulated network; per N, the global iterations to each target\n"
       "score, the statistical efficiency SE against one machine (run first), virtual time, staleness\n"
       "and bytes. Deterministic: one seed, one result, bit for bit",
       {{"solver", "SOLVER.prototxt", "", "the solver (required); its test net is scored"},
        {"machines", "N[,N...]", "1,4", "job sizes; 1 (the reference for SE) is added where absent"},
        {"aggregate", "RULE[,K=V...]", "", "the aggregation rule, as train's --aggregate (default: auto for each N)"},
        {"targets", "S[,S...]", "", "scores to reach; the run stops at the last (default: none, to max_iter)"},
        {"score", "OUTPUT", sim.score, "the test net output scored"},
        {"test_every", "N", std::to_string(sim.test_every), "global iterations between scores of machine 0's copy"},
        {"max_iter", "N", "", "global iterations at most (default: the solver's max_iter)"},
        {"seed", "N", std::to_string(sim.seed), "the simulation's seed (initial weights, jitter, loss)"},
        {"step_ms", "MS", "25", "one machine's iteration in virtual milliseconds"},
        {"jitter", "F", "0", "each step takes step_ms x (1 + U(-F, F)), F in [0, 1)"},
        {"drift", "F", "0", "... and x exp(d), each machine's d drifting with standard deviation F in [0, 1]"},
        {"drift_steps", "K", "25", "... correlated over about K of its steps (machines slow or fast for a while)"},
        {"read_at", "F", "0", "where in its step a machine reads its weights (0: the start, 1: the end); what arrives later lands under its update"},
        {"stragglers", "K", "0", "the last K machines of a job (at most N - 1) are slower ..."},
        {"straggler_factor", "F", "2", "... by F"},
        {"latency_us", "US", "50", "one-way latency of a frame"},
        {"gbit", "G", "10", "each machine's link, Gbit/s"},
        {"loss", "P", "0", "probability that a frame is lost"},
        {"sweep_ms", "MS", std::to_string(sim.sweep_ms), "a master sweeps its chunks at most once per MS (as train's)"},
        {"sweeps_per_iter", "N", "0", "... and at most N times per local iteration (0: no limit)"},
        {"chunk_floats", "N", "0", "floats per chunk (0: as many as a frame carries)"},
        {"bsp", "M[,M...]", "", "after each N, the synchronous reference at each lr multiplier M: n, sqrt, half or "
                                "a number (default: none)"},
        {"bsp_warmup", "N", "0", "the reference's linear warm-up of its lr, in global iterations"},
        {"bsp_only", "", "", "only the synchronous references for N > 1, not the asynchronous job (default: both)"},
        {"reference", "FILE", "", "one machine's run kept in FILE and read back while the build, the solver, its nets "
                                  "and the flags it reads stay the same (default: run it each time)"},
        {"json", "", "", "one JSON object per job size instead of the table"},
        {"log", "", "", "the engine's own log lines"}}},
      {"hogstream upgrade", "NET|SOLVER [OUT]",
       "a V1/V0 net (or a solver with solver_type) in the current format, to OUT or stdout", {}},
  };
}

}  // namespace

const std::vector<Command>& HogstreamCommands() {
  static const std::vector<Command> commands = MakeHogstreamCommands();
  return commands;
}

const Command* FindHogstreamCommand(const std::string& name) {
  for (const Command& c : HogstreamCommands())
    if (c.name == "hogstream " + name) return &c;
  return nullptr;
}

const Command& HogstreamCommand(const std::string& name) {
  const Command* c = FindHogstreamCommand(name);
  if (!c) throw Bug("no hogstream command '" + name + "'");
  return *c;
}

Command HogwildBinCommand(const std::string& program) {
  return {program, "SOLVER.prototxt SOLVERS",
          "Hogwild training on this host; the same as `hogstream train --solver=SOLVER --solvers=SOLVERS`.\n"
          "  SOLVERS: [gpu_id:]*cpu_count, e.g. 4 (four CPU solver threads), 0:0:2 (two on GPU 0, two\n"
          "  CPU), 0:1:0 (one on each of GPUs 0 and 1). The same line in several shells, each with\n"
          "  --shm=NAME, and the processes train one shared copy of the weights.",
          HogwildFlags()};
}

const Command& RawBinCommand() {
  static const Command command = {
      "raw.bin", "SOLVER.prototxt SOLVERS MAC1:MAC2[:MAC3...]",
      "one machine of a Hogwild job across machines over raw Ethernet; the same as `hogstream train\n"
      "--solver=SOLVER --solvers=SOLVERS --peers=raw://MAC1,MAC2,...`. Needs CAP_NET_RAW (root).\n"
      "  SOLVERS: [gpu_id:]*cpu_count, this machine's solver threads (e.g. 4)\n"
      "  MACs: every machine's, in the same order everywhere (12 hex digits each); each machine\n"
      "  finds its rank as the position of a MAC of one of its own NICs",
      Join(HogwildFlags(), NetJobFlags())};
  return command;
}

}  // namespace hogstream
