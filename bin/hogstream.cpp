// hogstream: the command-line front end. Each command is a few lines over the libraries;
// every Error ends here as one line on stderr and exit status 1. `hogstream --help` lists the
// commands and `hogstream COMMAND --help` a command's flags, declared in bin/commands.cpp.
#include <glog/logging.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <climits>
#include <cmath>
#include <iomanip>
#include <optional>
#include <array>
#include <cstdlib>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <iostream>

#include "base/hash.hpp"
#include "bin/program.hpp"
#include "core/context.hpp"
#include "core/net.hpp"
#include "core/net_report.hpp"
#include "core/solver.hpp"
#include "core/upgrade.hpp"
#include "core/io.hpp"
#include "sync/simulate.hpp"
#include "data/convert.hpp"
#include "data/data_layer.hpp"
#include "data/lmdb.hpp"
#include "observe/plot.hpp"
#include "bench/link_bench.hpp"

namespace hogstream {
namespace {

// `hogstream --help`: the commands, each with the first line of what it does.
std::string Usage() {
  std::string text = "usage: hogstream COMMAND [flags] [ARGS]\ncommands:\n";
  for (const Command& c : HogstreamCommands()) {
    std::string name = c.name.substr(c.name.find(' ') + 1);
    name.resize(std::max<size_t>(name.size() + 1, 10), ' ');
    text += "  " + name + c.about.substr(0, c.about.find('\n')) + "\n";
  }
  return text + "`hogstream COMMAND --help` gives a command's arguments and every flag with its default;\n"
                "`hogstream --version` the version.\n";
}

std::unique_ptr<Net> LoadNet(const Flags& f) {
  HS_REQUIRE(f.has("model")) << "--model=NET.prototxt is required";
  NetOptions opt;
  const std::string phase = f.get("phase");
  HS_REQUIRE(phase == "TRAIN" || phase == "TEST") << "--phase must be TRAIN or TEST, got '" << phase << "'";
  opt.phase = phase == "TRAIN" ? pb::TRAIN : pb::TEST;
  opt.level = static_cast<int>(f.int_in("level", INT_MIN, INT_MAX));
  opt.stages = f.all("stage");
  opt.input_shapes = InputShapes(f);
  pb::NetParameter param = ReadNetText(f.get("model"), &opt.source);
  return std::make_unique<Net>(param, opt);
}

int Describe(int argc, char** argv) {
  Flags f(HogstreamCommand("describe"), argc, argv, 2);
  auto net = LoadNet(f);
  DescribeNet(*net, std::cout);
  return 0;
}

int Time(int argc, char** argv) {
  Flags f(HogstreamCommand("time"), argc, argv, 2);
  // --gpu=ID times the GPU passes (each layer's time then ends when the device is idle).
  const bool gpu = f.has("gpu");
  const int device = gpu ? static_cast<int>(f.get_int("gpu", 0, 0, 1023)) : 0;
  if (gpu) RequireGpu(device, "--gpu=" + std::to_string(device));
  Context ctx(gpu ? Mode::GPU : Mode::CPU, device, 1);
  ctx.set_threads(static_cast<int>(f.int_in("threads", 1, 1024)));
  ContextScope scope(&ctx);
  auto net = LoadNet(f);
  const auto report = TimeNet(*net, static_cast<int>(f.int_in("iterations", 1, INT_MAX)));
  PrintTiming(*net, report, std::cout);
  return 0;
}

int Train(int argc, char** argv) {
  Flags f(HogstreamCommand("train"), argc, argv, 2);
  HS_REQUIRE(f.has("solver")) << "--solver=SOLVER.prototxt is required";
  pb::SolverParameter param = ReadSolverText(f.get("solver"));
  // `caffe train -gpu ID` and its CPU counterpart: the file's solver_mode is overridden, not
  // edited (every stock Caffe solver says GPU).
  HS_REQUIRE(!(f.has("cpu") && f.has("gpu"))) << "give --cpu or --gpu=ID, not both";
  if (f.has("cpu") && f.get("cpu") == "true" && param.solver_mode() != pb::SolverParameter::CPU) {
    LOG(INFO) << "--cpu: training on the CPU (the solver file says solver_mode: GPU)";
    param.set_solver_mode(pb::SolverParameter::CPU);
  }
  if (f.has("gpu")) {
    HS_REQUIRE(!f.has("solvers") && !f.has("peers"))
        << "--gpu=ID is for one solver; with --solvers or --peers name the GPUs in SOLVERS (e.g. 0:0)";
    param.set_solver_mode(pb::SolverParameter::GPU);
    param.set_device_id(static_cast<int>(f.get_int("gpu", 0, 0, 1023)));
  }
  if (f.has("iterations")) param.set_max_iter(static_cast<int>(f.get_int("iterations", 0, 0, INT_MAX)));
  // The Hogwild runner covers one solver too; the plain path below is `caffe train`'s.
  std::unique_ptr<NetJob> net;
  PeerEntry mine;
  std::shared_ptr<void> store;  // (a keyed job's rendezvous store, for new machines while it runs)
  net = TrainNetJob(f, param, &mine, &store);  // one machine of a job across machines, or null
  // --solvers, else this machine's solvers= in a topology file, else one.
  HogwildOptions h = HogwildFromFlags(f, f.get("solvers", mine.solvers.empty() ? "1" : mine.solvers), &mine);
  h.net = net.get();
  if (f.has("solvers") || f.has("shm") || f.has("private") || net || h.policy.needs_private()) {
    RunHogwild(param, h);
    return 0;
  }
  SolverOptions opt;
  opt.input_shapes = h.input_shapes;
  opt.action = h.action;
  opt.stats = h.stats;
  // solver_mode: GPU trains on device_id, as `caffe train` does.
  const bool gpu = param.solver_mode() == pb::SolverParameter::GPU;
  if (gpu) RequireGpu(param.device_id(), "solver_mode: GPU (device_id " + std::to_string(param.device_id()) +
                                             "; --cpu trains on the CPU)");
  Context ctx(gpu ? Mode::GPU : Mode::CPU, param.device_id(), param.random_seed() >= 0 ? param.random_seed() : 0);
  ContextScope scope(&ctx);
  auto solver = CreateSolver(param, opt);
  if (!h.weights.empty()) solver->net().CopyTrainedLayersFromFiles(h.weights);
  LOG(INFO) << "Starting Optimization";
  solver->Solve(h.resume);
  return 0;
}

int Test(int argc, char** argv) {
  Flags f(HogstreamCommand("test"), argc, argv, 2);
  HS_REQUIRE(f.has("weights")) << "--weights=MODEL.caffemodel is required";
  HS_REQUIRE(f.has("model")) << "--model=NET.prototxt is required";
  Context ctx(Mode::CPU, 0, 1);
  ContextScope scope(&ctx);
  NetOptions opt;
  opt.phase = pb::TEST;
  opt.level = static_cast<int>(f.int_in("level", INT_MIN, INT_MAX));
  opt.stages = f.all("stage");
  opt.input_shapes = InputShapes(f);
  Net net(ReadNetText(f.get("model"), &opt.source), opt);
  net.CopyTrainedLayersFromFiles(f.get("weights"));
  // `caffe test`'s lines, outputs in Caffe's order (by name): "Batch i, NAME = v" per batch,
  // then "Loss: L" and "NAME = mean (* w = w*mean loss)".
  const std::vector<OutputSlot> slots = CaffeOutputOrder(net);
  const int iterations = static_cast<int>(f.int_in("iterations", 1, INT_MAX));
  LOG(INFO) << "Running for " << iterations << " iterations.";
  double loss = 0;
  const std::vector<double> mean = net.ForwardMean(iterations, &loss, [&](int i, double) {
    for (const OutputSlot& s : slots)
      LOG(INFO) << "Batch " << i << ", " << s.name << " = " << s.blob->cpu_data()[s.element];
  });
  LOG(INFO) << "Loss: " << loss;
  for (const OutputSlot& s : slots) {
    const float v = static_cast<float>(mean[s.flat]);
    std::ostringstream suffix;
    if (s.loss_weight != 0.f) suffix << " (* " << s.loss_weight << " = " << s.loss_weight * v << " loss)";
    LOG(INFO) << s.name << " = " << v << suffix.str();
  }
  return 0;
}

int Convert(int argc, char** argv) {
  Flags f(HogstreamCommand("convert"), argc, argv, 2);
  const auto& a = f.positional();
  HS_REQUIRE(!a.empty()) << "convert needs a kind: mnist, cifar10, imageset or mean (see hogstream help)";
  HS_REQUIRE(a[0] == "imageset" || (!f.has("resize_height") && !f.has("resize_width") && !f.has("shuffle") &&
                                    !f.has("gray") && !f.has("encoded") && !f.has("encode_type") &&
                                    !f.has("check_size") && !f.has("seed")))
      << "the --resize/--shuffle/--gray/--encoded/--check_size/--seed flags are for convert imageset";
  size_t n = 0;
  if (a[0] == "mnist") {
    HS_REQUIRE(a.size() == 4) << "usage: hogstream convert mnist IMAGES LABELS OUT_LMDB";
    n = ConvertMnist(a[1], a[2], a[3]);
  } else if (a[0] == "cifar10") {
    HS_REQUIRE(a.size() >= 3) << "usage: hogstream convert cifar10 BATCH.bin... OUT_LMDB";
    n = ConvertCifar10(std::vector<std::string>(a.begin() + 1, a.end() - 1), a.back());
  } else if (a[0] == "imageset") {
    HS_REQUIRE(a.size() == 4) << "usage: hogstream convert imageset ROOT LIST OUT_LMDB [--resize_height=H "
                                 "--resize_width=W] [--shuffle] [--gray] [--encoded] [--encode_type=jpg|png]";
    ImagesetOptions o;
    o.resize_height = static_cast<int>(f.int_in("resize_height", 0, 1 << 16));
    o.resize_width = static_cast<int>(f.int_in("resize_width", 0, 1 << 16));
    o.shuffle = f.get("shuffle") == "true";
    o.gray = f.get("gray") == "true";
    o.encoded = f.get("encoded") == "true";
    o.check_size = f.get("check_size") == "true";
    o.encode_type = f.get("encode_type");
    o.seed = static_cast<uint32_t>(f.int_in("seed", 0, UINT32_MAX));
    n = ConvertImageset(a[1], a[2], a[3], o);
  } else if (a[0] == "mean") {
    HS_REQUIRE(a.size() == 3) << "usage: hogstream convert mean LMDB OUT.binaryproto";
    n = ComputeMean(a[1], a[2]);
  } else {
    HS_FAIL() << "unknown conversion '" << a[0] << "' (mnist, cifar10, imageset, mean)";
  }
  std::cout << "converted " << n << " records to " << a.back() << "\n";
  return 0;
}

// Caffe's extract_features: the named blobs of a trained net, batch by batch, one Datum per
// item (channels x height x width as Caffe's 4-d view of the blob, values in float_data),
// keyed "%010d" by the item's index, one LMDB per blob.
int Extract(int argc, char** argv) {
  Flags f(HogstreamCommand("extract"), argc, argv, 2);
  const auto& a = f.positional();
  HS_REQUIRE(a.size() == 1 && f.has("model") && f.has("weights") && f.has("blobs"))
      << "usage: hogstream extract --model=NET --weights=MODEL --blobs=BLOB[,BLOB...] [--iterations=N] "
         "OUT[,OUT...]";
  auto split = [](const std::string& text) {
    std::vector<std::string> out;
    std::stringstream ss(text);
    for (std::string item; std::getline(ss, item, ',');) out.push_back(item);
    return out;
  };
  const std::vector<std::string> blobs = split(f.get("blobs")), outs = split(a[0]);
  HS_REQUIRE(!blobs.empty() && blobs.size() == outs.size())
      << blobs.size() << " blob(s) but " << outs.size() << " output(s): give one LMDB per blob";
  Context ctx(Mode::CPU, 0, 1);
  ContextScope scope(&ctx);
  NetOptions opt;
  const std::string phase = f.get("phase");
  HS_REQUIRE(phase == "TRAIN" || phase == "TEST") << "--phase must be TRAIN or TEST, got '" << phase << "'";
  opt.phase = phase == "TRAIN" ? pb::TRAIN : pb::TEST;
  opt.level = static_cast<int>(f.int_in("level", INT_MIN, INT_MAX));
  opt.stages = f.all("stage");
  opt.input_shapes = InputShapes(f);
  Net net(ReadNetText(f.get("model"), &opt.source), opt);
  net.CopyTrainedLayersFromFiles(f.get("weights"));
  std::vector<std::shared_ptr<Blob>> sources;
  for (const std::string& b : blobs) {
    sources.push_back(net.blob_by_name(b));
    HS_REQUIRE(sources.back()) << "the net has no blob '" << b << "'";
    HS_REQUIRE(sources.back()->num_axes() >= 1) << "blob '" << b << "' has no item axis";
  }
  std::vector<std::unique_ptr<LmdbWriter>> dbs;
  for (const std::string& o : outs) dbs.push_back(std::make_unique<LmdbWriter>(o));
  const int iterations = static_cast<int>(f.int_in("iterations", 1, INT_MAX));
  std::vector<size_t> items(blobs.size(), 0);
  pb::Datum datum;
  std::string value;
  for (int it = 0; it < iterations; ++it) {
    net.Forward();
    for (size_t k = 0; k < blobs.size(); ++k) {
      const Blob& b = *sources[k];
      const int num = b.shape(0), dim = num ? b.count() / num : 0;
      const bool legacy = b.num_axes() <= 4;  // Caffe's channels x height x width
      datum.Clear();
      datum.set_channels(legacy && b.num_axes() > 1 ? b.shape(1) : dim);
      datum.set_height(legacy && b.num_axes() > 2 ? b.shape(2) : 1);
      datum.set_width(legacy && b.num_axes() > 3 ? b.shape(3) : 1);
      for (int n = 0; n < num; ++n) {
        datum.clear_float_data();
        const float* v = b.cpu_data() + static_cast<size_t>(n) * dim;
        datum.mutable_float_data()->Add(v, v + dim);
        datum.SerializeToString(&value);
        char key[16];
        std::snprintf(key, sizeof key, "%010zu", items[k]++);
        dbs[k]->Put(key, value);
      }
    }
  }
  for (size_t k = 0; k < dbs.size(); ++k) {
    dbs[k]->Commit();
    LOG(INFO) << "Extracted " << items[k] << " items of '" << blobs[k] << "' to " << outs[k];
  }
  return 0;
}

int Upgrade(int argc, char** argv) {
  Flags f(HogstreamCommand("upgrade"), argc, argv, 2);
  const auto& a = f.positional();
  HS_REQUIRE(a.size() == 1 || a.size() == 2) << "usage: hogstream upgrade NET|SOLVER [OUT]";
  const UpgradedFile u = UpgradeFile(a[0]);
  if (a.size() == 2) {
    std::ofstream out(a[1]);
    out << u.text;
    out.close();
    HS_REQUIRE(out.good()) << a[1] << ": write failed: " << ErrnoText(errno);
  } else {
    std::cout << u.text;
  }
  LOG(INFO) << u.summary << (a.size() == 2 ? "; wrote " + a[1] : "");
  return 0;
}

// "4k,16k,1M" -> bytes.
std::vector<uint32_t> ByteSizes(const std::string& text) {
  std::vector<uint32_t> sizes;
  std::stringstream ss(text);
  for (std::string item; std::getline(ss, item, ',');) {
    size_t pos = 0;
    unsigned long v = 0;
    try {
      v = std::stoul(item, &pos);
    } catch (...) {
      pos = 0;
    }
    HS_REQUIRE(pos > 0 && item.size() - pos <= 1 && item.size() <= 9)
        << "--chunk wants sizes like 4096, 16k or 1M, got '" << item << "'";
    const char unit = pos < item.size() ? item[pos] : ' ';
    HS_REQUIRE(unit == ' ' || unit == 'k' || unit == 'K' || unit == 'm' || unit == 'M')
        << "--chunk: unknown unit in '" << item << "' (k or M)";
    v *= unit == ' ' ? 1 : (unit == 'k' || unit == 'K') ? 1024 : 1024 * 1024;
    HS_REQUIRE(v > 0 && v <= (1u << 24)) << "--chunk size " << item << " is out of range (16 MiB at most)";
    sizes.push_back(static_cast<uint32_t>(v));
  }
  return sizes;
}

// "A,B": one value per end of the link (a single value serves both).
std::array<std::string, 2> PerEnd(const std::string& flag, const std::string& v) {
  const size_t comma = v.find(',');
  if (comma == std::string::npos) return {v, v};
  HS_REQUIRE(v.find(',', comma + 1) == std::string::npos)
      << "--" << flag << " takes one value per end of the link (A,B), got '" << v << "'";
  return {v.substr(0, comma), v.substr(comma + 1)};
}

int Bench(int argc, char** argv) {
  Flags f(HogstreamCommand("bench"), argc, argv, 2);
  HS_REQUIRE(f.has("loopback") != f.has("peers"))
      << "bench needs --loopback (both ends in this process; --netns=A,B for two namespaces) or "
         "--peers=udp://IP:PORT,IP:PORT | raw://MAC,MAC (one end per host, same command on both)";
  LinkBenchOptions o;
  o.transport = f.get("transport");
  if (f.has("chunk")) {
    o.chunk_bytes = ByteSizes(f.get("chunk"));
    HS_REQUIRE(!o.chunk_bytes.empty()) << "--chunk needs at least one size";  // (none: the defaults)
  }
  if (f.has("batch")) {
    o.batches.clear();
    std::stringstream ss(f.get("batch"));
    for (std::string b; std::getline(ss, b, ',');) {
      char* end = nullptr;
      const long v = std::strtol(b.c_str(), &end, 10);
      HS_REQUIRE(!b.empty() && *end == 0 && v >= 1 && v <= 1024)
          << "--batch wants sizes in [1, 1024] like 1,16,64, got '" << b << "'";
      o.batches.push_back(static_cast<uint32_t>(v));
    }
  }
  const std::string secs = f.get("seconds");
  try {
    o.seconds = std::stod(secs);
  } catch (...) {
    HS_FAIL() << "--seconds wants a number, got '" << secs << "'";
  }
  o.repeat = static_cast<int>(f.int_in("repeat", 1, 100));
  o.slots = static_cast<uint32_t>(f.int_in("slots", 1, 4096));
  o.window = static_cast<uint32_t>(f.int_in("window", 0, 65536));
  if (f.has("netns")) o.netns = PerEnd("netns", f.get("netns"));
  if (f.has("where")) o.where = PerEnd("where", f.get("where"));
  o.multicast = f.get("multicast");
  const std::string gso = f.get("gso");
  HS_REQUIRE(gso == "on" || gso == "off") << "--gso is on or off, got '" << gso << "'";
  o.gso = gso == "on";
  o.job_key = f.get("job-key");
  o.peers = f.get("peers");
  if (f.has("timeout")) {
    const std::string t = f.get("timeout");
    try {
      o.peer_timeout_s = std::stod(t);
    } catch (...) {
      HS_FAIL() << "--timeout wants seconds, got '" << t << "'";
    }
  }
  if (f.has("buffer")) {
    const std::vector<uint32_t> b = ByteSizes(f.get("buffer"));
    HS_REQUIRE(b.size() == 1) << "--buffer takes one size (the weights kept in sync), like 16M";
    o.buffer_bytes = b[0];
  }
  const std::vector<LinkBenchRow> rows = RunLinkBench(o);
  if (rows.empty()) {  // --peers, end 1
    std::cout << "bench: this end served every run; the other end prints the table\n";
    return 0;
  }
  PrintLinkBench(rows, std::cout, f.has("json"));
  return 0;
}

int UiTokenCommand(int argc, char** argv) {
  Flags f(HogstreamCommand("ui-token"), argc, argv, 2);
  HS_REQUIRE(f.has("job-key")) << "ui-token: give the job's --job-key=FILE";
  std::cout << UiControlToken(LoadJobKey(f.get("job-key"))) << "\n";
  return 0;
}

int PlotCommand(int argc, char** argv) {
  Flags f(HogstreamCommand("plot"), argc, argv, 2);
  PlotOptions o;
  o.logs = f.positional();
  o.out = f.has("out") ? f.get("out") : f.get("-o");  // -o OUT, -oOUT or --out=OUT
  o.x = f.get("x");
  if (f.has("y")) {
    o.y.clear();
    std::stringstream ss(f.get("y"));
    for (std::string q; std::getline(ss, q, ',');)
      if (!q.empty()) o.y.push_back(q);
  }
  const int series = Plot(o);
  std::cout << "wrote " << o.out << " (" << series << " series from " << o.logs.size() << " log"
            << (o.logs.size() == 1 ? "" : "s") << ")\n";
  return 0;
}

// A number from a flag, within [min, max] (max exclusive where `open`).
double NumberFlag(const Flags& f, const std::string& name, double min, double max, bool open = false) {
  const std::string text = f.get(name);
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  HS_REQUIRE(!text.empty() && end && *end == 0 && v >= min && (open ? v < max : v <= max))
      << "--" << name << " wants a number in [" << min << ", " << max << (open ? ")" : "]") << ", got '" << text << "'";
  return v;
}

std::vector<double> NumberList(const Flags& f, const std::string& name, double min, double max) {
  std::vector<double> out;
  std::stringstream ss(f.get(name));
  for (std::string item; std::getline(ss, item, ',');) {
    char* end = nullptr;
    const double v = std::strtod(item.c_str(), &end);
    HS_REQUIRE(!item.empty() && end && *end == 0 && v >= min && v <= max)
        << "--" << name << " wants numbers in [" << min << ", " << max << "] like 1,4,8, got '" << item << "'";
    out.push_back(v);
  }
  return out;
}

// simulate --reference=FILE: one machine's run, kept under a key that names what shapes it
// (the build, the solver and its nets' text, the flags a lone machine's run reads), so a
// sweep of rules or sizes runs it once. Not in the key: the network and the straggler flags,
// which a lone machine never meets.
std::string ReferenceKey(const pb::SolverParameter& param, const SimulateOptions& o) {
  std::ostringstream k;
  k << Version() << "\n" << param.DebugString();
  for (const std::string& net : {param.net(), param.train_net(), param.test_net().empty() ? "" : param.test_net(0)}) {
    if (net.empty()) continue;
    std::ifstream in(net, std::ios::binary);
    k << "\n" << net << "\n" << in.rdbuf();
  }
  k << std::setprecision(17) << "\nseed " << o.seed << " step_ms " << o.step_ms << " jitter " << o.jitter << " drift "
    << o.drift << " drift_steps " << o.drift_steps << " max_iter " << o.max_iter << " test_every " << o.test_every
    << " score " << o.score << " targets";
  for (double t : o.targets) k << " " << t;
  std::ostringstream hex;
  hex << std::hex << Digest64(k.str());
  return hex.str();
}

std::optional<SimulateResult> ReadReference(const std::string& path, const std::string& key) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || j.value("key", "") != key) {
    std::cerr << "simulate: " << path << " holds another run (or none); running one machine again\n";
    return std::nullopt;
  }
  try {
    SimulateResult r;
    r.machines = 1;
    r.rule = j.at("rule").get<std::string>();
    r.ended_early = j.at("ended_early").get<std::string>();
    r.iterations = j.at("iterations").get<int64_t>();
    r.virtual_s = j.at("virtual_s").get<double>();
    r.weights_hash = std::stoull(j.at("weights_hash").get<std::string>(), nullptr, 16);
    for (const auto& c : j.at("targets")) r.crossings.push_back({c.at(0).get<double>(), c.at(1).get<double>(), c.at(2).get<double>()});
    for (const auto& p : j.at("curve")) r.curve.push_back({p.at(0).get<int64_t>(), p.at(1).get<double>(), p.at(2).get<double>()});
    return r;
  } catch (const std::exception&) {
    std::cerr << "simulate: " << path << " is not a reference this build wrote; running one machine again\n";
    return std::nullopt;
  }
}

void WriteReference(const std::string& path, const std::string& key, const SimulateResult& r) {
  std::ostringstream hash;
  hash << std::hex << r.weights_hash;
  nlohmann::ordered_json j = {{"key", key},
                              {"rule", r.rule},
                              {"ended_early", r.ended_early},
                              {"iterations", r.iterations},
                              {"virtual_s", r.virtual_s},
                              {"weights_hash", hash.str()}};
  j["targets"] = nlohmann::ordered_json::array();
  for (const SimulateResult::Crossing& c : r.crossings) j["targets"].push_back({c.target, c.iter, c.virtual_s});
  j["curve"] = nlohmann::ordered_json::array();
  for (const SimulateResult::Point& p : r.curve) j["curve"].push_back({p.iter, p.virtual_s, p.score});
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    out << j.dump() << "\n";
    HS_REQUIRE(out.good()) << "simulate: cannot write " << tmp;
  }
  HS_REQUIRE(std::rename(tmp.c_str(), path.c_str()) == 0) << "simulate: cannot write " << path << ": " << std::strerror(errno);
}

// `hogstream simulate`: a job of N machines in virtual time (sync/simulate.hpp), per N a row.
// The simulator's settings from its flags (--machines, --bsp and --reference are the command's).
SimulateOptions SimulateFlags(const Flags& f, const pb::SolverParameter& param) {
  SimulateOptions o;
  o.seed = static_cast<uint64_t>(f.int_in("seed", 0, INT64_MAX));
  o.step_ms = NumberFlag(f, "step_ms", 1e-3, 1e6);
  o.jitter = NumberFlag(f, "jitter", 0, 1, /*open=*/true);
  o.drift = NumberFlag(f, "drift", 0, 1);
  o.drift_steps = NumberFlag(f, "drift_steps", 1, 1e9);
  o.read_at = NumberFlag(f, "read_at", 0, 1);
  o.stragglers = static_cast<int>(f.int_in("stragglers", 0, 4096));
  o.straggler_factor = NumberFlag(f, "straggler_factor", 1, 1e3);
  o.link.latency_us = NumberFlag(f, "latency_us", 0, 1e7);
  o.link.gbit_per_s = NumberFlag(f, "gbit", 1e-3, 1e4);
  o.link.loss = NumberFlag(f, "loss", 0, 1, /*open=*/true);
  o.sweep_ms = static_cast<uint32_t>(f.int_in("sweep_ms", 0, 60000));
  o.sweeps_per_iter = static_cast<uint32_t>(f.int_in("sweeps_per_iter", 0, 1000));
  o.chunk_floats = static_cast<uint32_t>(f.int_in("chunk_floats", 0, 1 << 20));
  o.aggregate = f.get("aggregate");
  o.epoch = [&param] { return EpochIterations(param); };
  if (f.has("max_iter")) o.max_iter = f.get_int("max_iter", 0, 1, INT_MAX);
  o.test_every = f.int_in("test_every", 1, INT_MAX);
  o.score = f.get("score");
  o.targets = NumberList(f, "targets", -1e30, 1e30);
  std::sort(o.targets.begin(), o.targets.end());
  o.log = f.has("log");
  return o;
}

// --machines: the job sizes to run, one machine first (every SE is against it), each once.
std::vector<int> SimulatedSizes(const Flags& f) {
  std::vector<int> sizes{1};
  for (double n : NumberList(f, "machines", 1, 4096)) {
    HS_REQUIRE(n == std::floor(n)) << "--machines wants whole numbers, got " << n;
    if (std::find(sizes.begin(), sizes.end(), static_cast<int>(n)) == sizes.end()) sizes.push_back(static_cast<int>(n));
  }
  return sizes;
}

// --bsp: the synchronous reference's lr multipliers, each "n", "sqrt", "half" or a number.
std::vector<std::string> BspMultipliers(const Flags& f) {
  std::vector<std::string> bsp;
  std::stringstream ss(f.get("bsp"));
  for (std::string m; std::getline(ss, m, ',');) {
    char* end = nullptr;
    const double v = std::strtod(m.c_str(), &end);
    HS_REQUIRE(m == "n" || m == "sqrt" || m == "half" || (!m.empty() && *end == 0 && v > 0))
        << "--bsp wants lr multipliers like sqrt,half,n or 4, got '" << m << "'";
    bsp.push_back(m);
  }
  return bsp;
}

double BspLr(const std::string& m, int n) {
  return m == "n" ? n : m == "sqrt" ? std::sqrt(static_cast<double>(n)) : m == "half" ? n / 2.0 : std::stod(m);
}

// SE at target k: one machine's global iterations (= samples, one batch each) over the job's;
// -1 where either did not reach it.
double SimulatedSe(const SimulateResult& r, const SimulateResult& one, size_t k) {
  return one.crossings[k].iter >= 0 && r.crossings[k].iter > 0 ? one.crossings[k].iter / r.crossings[k].iter : -1.0;
}

// One simulated job as one JSON object (nlohmann, as bench --json).
std::string SimulatedJson(const SimulateResult& r, const SimulateOptions& run, const SimulateResult& one) {
  std::ostringstream hash;
  hash << std::hex << r.weights_hash;
  nlohmann::ordered_json j = {{"machines", r.machines},
                              {"bsp", run.bsp ? run.bsp_lr : 0},
                              {"rule", r.rule},
                              {"seed", run.seed},
                              {"jitter", run.jitter},
                              {"read_at", run.read_at},
                              {"stragglers", run.stragglers},
                              {"ended_early", r.ended_early},
                              {"iterations", r.iterations},
                              {"virtual_s", r.virtual_s},
                              {"bytes", r.bytes},
                              {"lost", r.lost},
                              {"deltas", r.deltas_applied},
                              {"refused", r.deltas_refused},
                              {"weights_hash", hash.str()}};
  j["targets"] = nlohmann::ordered_json::array();
  for (size_t k = 0; k < r.crossings.size(); ++k)
    j["targets"].push_back({{"target", r.crossings[k].target},
                            {"iter", r.crossings[k].iter},
                            {"virtual_s", r.crossings[k].virtual_s},
                            {"se", SimulatedSe(r, one, k)}});
  j["staleness"] = std::vector<uint64_t>(std::begin(r.staleness), std::end(r.staleness));
  j["curve"] = nlohmann::ordered_json::array();
  for (const SimulateResult::Point& p : r.curve) j["curve"].push_back({p.iter, p.virtual_s, p.score});
  return j.dump();
}

// One simulated job as the lines a reader reads: its targets, SE and time against one machine,
// and (asynchronous jobs) its deltas, bytes and staleness.
std::string SimulatedText(const SimulateResult& r, const SimulateOptions& run, const SimulateResult& one) {
  const int n = r.machines;
  std::ostringstream os;
  os << std::fixed;
  os << n << " machine" << (n == 1 ? "" : "s") << " (" << r.rule << "): " << r.iterations << " global iterations, "
     << std::setprecision(1) << r.virtual_s << " s virtual";
  if (!r.ended_early.empty()) os << "\n  ended early: " << r.ended_early;
  for (size_t k = 0; k < r.crossings.size(); ++k) {
    const SimulateResult::Crossing& c = r.crossings[k];
    os << "\n  " << run.score << " " << std::setprecision(4) << c.target << ": ";
    if (c.iter < 0) {
      os << "not reached";
      continue;
    }
    os << std::setprecision(0) << c.iter << " global iterations, " << std::setprecision(1) << c.virtual_s
       << " s virtual";
    if (const double se = SimulatedSe(r, one, k); se > 0) {
      os << ", SE " << std::setprecision(2) << se;
      if (one.crossings[k].virtual_s > 0)
        os << ", time " << std::setprecision(3) << c.virtual_s / one.crossings[k].virtual_s << "x one machine's";
    }
  }
  if (n > 1 && !run.bsp) {
    uint64_t deltas = 0;
    for (uint64_t b : r.staleness) deltas += b;
    os << "\n  " << r.deltas_applied << " deltas applied (" << r.deltas_refused << " refused), "
       << std::setprecision(1) << r.bytes / 1e6 << " MB sent, " << r.lost
       << " frames lost; staleness (global iterations):";
    for (size_t b = 0; b < kStalenessBuckets; ++b) {
      if (!r.staleness[b]) continue;
      const std::string bucket = b + 1 < kStalenessBuckets ? "<=" + std::to_string(kStalenessBounds[b])
                                                           : ">" + std::to_string(kStalenessBounds[b - 1]);
      os << " " << bucket << " " << std::setprecision(0)
         << 100.0 * static_cast<double>(r.staleness[b]) / static_cast<double>(deltas) << "%";
    }
    for (const std::string& line : r.solver_lines) os << "\n  solver: " << line;
  }
  os << "\n  weights " << std::hex << r.weights_hash << std::dec;
  return os.str();
}

int SimulateCommand(int argc, char** argv) {
  Flags f(HogstreamCommand("simulate"), argc, argv, 2);
  HS_REQUIRE(f.has("solver")) << "--solver=SOLVER.prototxt is required";
  const pb::SolverParameter param = ReadSolverText(f.get("solver"));
  SimulateOptions o = SimulateFlags(f, param);
  const bool json = f.has("json");
  const std::vector<int> sizes = SimulatedSizes(f);
  const std::vector<std::string> bsp = BspMultipliers(f);
  const int64_t bsp_warmup = f.int_in("bsp_warmup", 0, INT_MAX);
  const bool bsp_only = f.has("bsp_only");
  HS_REQUIRE(!bsp_only || !bsp.empty()) << "--bsp_only wants --bsp=M[,M...]";
  std::optional<SimulateResult> one;
  auto print = [&](const SimulateResult& r, const SimulateOptions& run) {
    std::cout << (json ? SimulatedJson(r, run, *one) : SimulatedText(r, run, *one)) << std::endl;
  };
  auto progress = [json](const std::string& line) {
    if (!json) std::cerr << line << "\n";
  };
  const int stragglers = o.stragglers;
  const std::string reference = f.get("reference");
  for (int n : sizes) {
    o.machines = n;
    o.bsp = false;
    // A straggler is one of several: the reference, one machine, runs at the common speed.
    o.stragglers = std::min(stragglers, n - 1);
    SimulateResult r;
    if (n == 1 && !reference.empty()) {
      const std::string key = ReferenceKey(param, o);
      std::optional<SimulateResult> kept = ReadReference(reference, key);
      r = kept ? *kept : Simulate(param, o, progress);
      if (kept)
        progress("simulate: one machine's run from " + reference);
      else
        WriteReference(reference, key, r);
    } else if (n > 1 && bsp_only) {
      r.machines = 0;  // (the asynchronous job is not run: only the references below)
    } else {
      r = Simulate(param, o, progress);
    }
    if (!one) one = r;
    if (r.machines) print(r, o);
    if (n == 1) continue;
    for (const std::string& m : bsp) {
      SimulateOptions b = o;
      b.bsp = true;
      b.bsp_lr = BspLr(m, n);
      b.bsp_warmup = bsp_warmup;
      print(Simulate(param, b, progress), b);
    }
  }
  return 0;
}

int Main(int argc, char** argv) {
  const std::string cmd = argc < 2 ? "" : argv[1];
  if (cmd == "help" && argc > 2) {  // `hogstream help train`: as `hogstream train --help`
    const Command* c = FindHogstreamCommand(argv[2]);
    HS_REQUIRE(c) << "unknown command '" << argv[2] << "' (try: hogstream help)";
    std::cout << HelpText(*c);
    return 0;
  }
  if (cmd.empty() || cmd == "help" || cmd == "--help" || cmd == "-h") {
    std::cout << Usage();
    return cmd.empty() ? 1 : 0;
  }
  if (cmd == "--version") {
    std::cout << "hogstream " << Version() << "\n";
    return 0;
  }
  if (cmd == "describe") return Describe(argc, argv);
  if (cmd == "time") return Time(argc, argv);
  if (cmd == "train") return Train(argc, argv);
  if (cmd == "test") return Test(argc, argv);
  if (cmd == "convert") return Convert(argc, argv);
  if (cmd == "plot") return PlotCommand(argc, argv);
  if (cmd == "ui-token") return UiTokenCommand(argc, argv);
  if (cmd == "bench") return Bench(argc, argv);
  if (cmd == "upgrade") return Upgrade(argc, argv);
  if (cmd == "extract") return Extract(argc, argv);
  if (cmd == "simulate") return SimulateCommand(argc, argv);
  HS_FAIL() << "unknown command '" << cmd << "' (try: hogstream help)";
}

}  // namespace
}  // namespace hogstream

int main(int argc, char** argv) {
  return hogstream::RunProgram("hogstream", argv[0], [&] { return hogstream::Main(argc, argv); });
}
