// hogstream: the command-line front end. Each command is a few lines over the libraries;
// every Error ends here as one line on stderr and exit status 1.
//
//   hogstream describe --model=NET [--phase=TRAIN|TEST] [--stage=S] [--level=N] [--input=TOP:N,C,H,W]
//   hogstream time     --model=NET [--iterations=50] [--threads=1] [--phase=...] [--input=...]
//   hogstream train    --solver=SOLVER [--snapshot=STATE | --weights=MODEL] [--iterations=N]
//   hogstream test     --model=NET --weights=MODEL [--iterations=50]
//   hogstream convert  mnist IMAGES LABELS OUT | cifar10 BIN... OUT | mean LMDB OUT.binaryproto
#include <glog/logging.h>

#include <algorithm>
#include <cstring>
#include <sstream>
#include <iostream>

#include "bin/flags.hpp"
#include "core/context.hpp"
#include "core/net.hpp"
#include "core/net_report.hpp"
#include "core/solver.hpp"
#include "data/convert.hpp"
#include "sync/hogwild.hpp"

namespace hogstream {
namespace {

const char kUsage[] =
    "usage: hogstream COMMAND [flags]\n"
    "commands:\n"
    "  describe --model=NET [--phase=TRAIN|TEST] [--level=N] [--stage=S]... [--input=TOP:N,C,H,W]...\n"
    "           one row per layer (name, type, top shapes, parameters), then 'params: N'\n"
    "  time     --model=NET [--iterations=50] [--threads=1] [--phase=...] [--input=...]\n"
    "           per-layer forward/backward ms and the total per batch\n"
    "  train    --solver=SOLVER [--snapshot=STATE | --weights=MODEL[,MODEL]] [--iterations=N]\n"
    "           [--sigint_effect=stop|snapshot|none] [--sighup_effect=snapshot|stop|none]\n"
    "           [--solvers=[gpu:]*N [--shm=NAME] [--private] [--chunk=FLOATS]]  Hogwild\n"
    "           trains like `caffe train`; logs in Caffe's format on stderr\n"
    "  test     --model=NET --weights=MODEL [--iterations=50]\n"
    "           scores a trained model on the TEST phase of NET\n"
    "  convert  mnist IMAGES LABELS OUT_LMDB     IDX files (gzipped or not) to an LMDB of Datums\n"
    "           cifar10 BATCH.bin... OUT_LMDB   CIFAR-10 binary batches to an LMDB\n"
    "           mean LMDB OUT.binaryproto       per-pixel mean image of an LMDB\n"
    "--input gives the shape of a top whose Data layer's source is absent (a label top\n"
    "defaults to the batch size).\n";

const std::vector<std::string> kNetFlags = {"model", "phase", "level", "stage", "input"};

std::vector<std::string> With(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// TOP:N,C,H,W
std::pair<std::string, std::vector<int>> ParseInput(const std::string& spec) {
  const auto colon = spec.find(':');
  HS_REQUIRE(colon != std::string::npos && colon > 0)
      << "--input wants TOP:N,C,H,W, got '" << spec << "'";
  std::vector<int> dims;
  std::string rest = spec.substr(colon + 1);
  size_t pos = 0;
  while (pos <= rest.size()) {
    const size_t comma = std::min(rest.find(',', pos), rest.size());
    const std::string d = rest.substr(pos, comma - pos);
    HS_REQUIRE(!d.empty() && d.find_first_not_of("0123456789") == std::string::npos)
        << "--input wants TOP:N,C,H,W with positive integers, got '" << spec << "'";
    dims.push_back(std::stoi(d));
    HS_REQUIRE(dims.back() > 0) << "--input dimensions must be > 0 in '" << spec << "'";
    pos = comma + 1;
  }
  return {spec.substr(0, colon), dims};
}

std::unique_ptr<Net> LoadNet(const Flags& f) {
  HS_REQUIRE(f.has("model")) << "--model=NET.prototxt is required";
  NetOptions opt;
  const std::string phase = f.get("phase", "TRAIN");
  HS_REQUIRE(phase == "TRAIN" || phase == "TEST") << "--phase must be TRAIN or TEST, got '" << phase << "'";
  opt.phase = phase == "TRAIN" ? pb::TRAIN : pb::TEST;
  opt.level = static_cast<int>(f.get_int("level", 0));
  opt.stages = f.all("stage");
  for (const auto& spec : f.all("input")) opt.input_shapes.insert(ParseInput(spec));
  pb::NetParameter param = ReadNetText(f.get("model"), &opt.source);
  return std::make_unique<Net>(param, opt);
}

int Describe(int argc, char** argv) {
  Flags f(argc, argv, 2, kNetFlags);
  auto net = LoadNet(f);
  DescribeNet(*net, std::cout);
  return 0;
}

int Time(int argc, char** argv) {
  Flags f(argc, argv, 2, With(kNetFlags, {"iterations", "threads"}));
  Context ctx(Mode::CPU, 0, 1);
  ctx.set_threads(static_cast<int>(f.get_int("threads", 1)));
  ContextScope scope(&ctx);
  auto net = LoadNet(f);
  const auto report = TimeNet(*net, static_cast<int>(f.get_int("iterations", 50)));
  PrintTiming(*net, report, std::cout);
  return 0;
}

// Loads weights from one or more comma-separated .caffemodel files (later ones win).
void LoadWeights(Net& net, const std::string& list) {
  std::stringstream ss(list);
  std::string file;
  while (std::getline(ss, file, ',')) {
    if (file.empty()) continue;
    pb::NetParameter weights;
    ReadBinaryProto(file, &weights);
    net.CopyTrainedLayersFrom(weights);
  }
}

int Train(int argc, char** argv) {
  Flags f(argc, argv, 2, {"solver", "snapshot", "weights", "iterations", "sigint_effect",
                          "sighup_effect", "input", "solvers", "shm", "private", "chunk"},
          {"private"});
  HS_REQUIRE(f.has("solver")) << "--solver=SOLVER.prototxt is required";
  HS_REQUIRE(!(f.has("snapshot") && f.has("weights")))
      << "give --snapshot (resume) or --weights (fine-tune), not both";
  pb::SolverParameter param = ReadSolverText(f.get("solver"));
  if (f.has("iterations")) param.set_max_iter(static_cast<int>(f.get_int("iterations", 0)));
  SolverOptions opt;
  for (const auto& spec : f.all("input")) opt.input_shapes.insert(ParseInput(spec));
  opt.action = InstallSignalActions(f.get("sigint_effect", "stop"), f.get("sighup_effect", "snapshot"));
  if (f.has("solvers") || f.has("shm") || f.has("private")) {
    // Hogwild: several solvers on one copy of the weights (see hogwild.bin).
    HogwildOptions h;
    h.solvers = ParseSolverSpec(f.get("solvers", "1"));
    h.shm = f.get("shm");
    h.private_copies = f.has("private");
    h.chunk_floats = static_cast<size_t>(f.get_int("chunk", 16384));
    h.resume = f.get("snapshot");
    h.weights = f.get("weights");
    h.input_shapes = opt.input_shapes;
    h.action = opt.action;
    RunHogwild(param, h);
    return 0;
  }
  Context ctx(Mode::CPU, 0, param.random_seed() >= 0 ? param.random_seed() : 0);
  ContextScope scope(&ctx);
  auto solver = CreateSolver(param, opt);
  if (f.has("weights")) LoadWeights(solver->net(), f.get("weights"));
  LOG(INFO) << "Starting Optimization";
  solver->Solve(f.get("snapshot"));
  return 0;
}

int Test(int argc, char** argv) {
  Flags f(argc, argv, 2, With(kNetFlags, {"weights", "iterations"}));
  HS_REQUIRE(f.has("weights")) << "--weights=MODEL.caffemodel is required";
  Context ctx(Mode::CPU, 0, 1);
  ContextScope scope(&ctx);
  NetOptions opt;
  opt.phase = pb::TEST;
  for (const auto& spec : f.all("input")) opt.input_shapes.insert(ParseInput(spec));
  HS_REQUIRE(f.has("model")) << "--model=NET.prototxt is required";
  Net net(ReadNetText(f.get("model"), &opt.source), opt);
  LoadWeights(net, f.get("weights"));
  const int iters = static_cast<int>(f.get_int("iterations", 50));
  HS_REQUIRE(iters > 0) << "--iterations must be > 0";
  std::vector<double> sums;
  double loss = 0;
  for (int i = 0; i < iters; ++i) {
    loss += net.Forward();
    size_t k = 0;
    for (const Blob* b : net.output_blobs())
      for (int j = 0; j < b->count(); ++j, ++k) {
        if (sums.size() <= k) sums.push_back(0);
        sums[k] += b->cpu_data()[j];
      }
    LOG(INFO) << "Batch " << i << ", running mean loss = " << loss / (i + 1);
  }
  LOG(INFO) << "Loss: " << loss / iters;
  size_t k = 0;
  for (size_t j = 0; j < net.output_blobs().size(); ++j) {
    const std::string& name = net.blob_names()[net.output_blob_indices()[j]];
    for (int e = 0; e < net.output_blobs()[j]->count(); ++e, ++k)
      LOG(INFO) << name << " = " << sums[k] / iters;
  }
  return 0;
}

int Convert(int argc, char** argv) {
  Flags f(argc, argv, 2, {});
  const auto& a = f.positional();
  HS_REQUIRE(!a.empty()) << "convert needs a kind: mnist, cifar10 or mean (see hogstream help)";
  size_t n = 0;
  if (a[0] == "mnist") {
    HS_REQUIRE(a.size() == 4) << "usage: hogstream convert mnist IMAGES LABELS OUT_LMDB";
    n = ConvertMnist(a[1], a[2], a[3]);
  } else if (a[0] == "cifar10") {
    HS_REQUIRE(a.size() >= 3) << "usage: hogstream convert cifar10 BATCH.bin... OUT_LMDB";
    n = ConvertCifar10(std::vector<std::string>(a.begin() + 1, a.end() - 1), a.back());
  } else if (a[0] == "mean") {
    HS_REQUIRE(a.size() == 3) << "usage: hogstream convert mean LMDB OUT.binaryproto";
    n = ComputeMean(a[1], a[2]);
  } else {
    HS_FAIL() << "unknown conversion '" << a[0] << "' (mnist, cifar10, mean)";
  }
  std::cout << "converted " << n << " records to " << a.back() << "\n";
  return 0;
}

int Main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "help") || !std::strcmp(argv[1], "--help")) {
    std::cout << kUsage;
    return argc < 2 ? 1 : 0;
  }
  const std::string cmd = argv[1];
  if (cmd == "describe") return Describe(argc, argv);
  if (cmd == "time") return Time(argc, argv);
  if (cmd == "train") return Train(argc, argv);
  if (cmd == "test") return Test(argc, argv);
  if (cmd == "convert") return Convert(argc, argv);
  HS_FAIL() << "unknown command '" << cmd << "' (try: hogstream help)";
}

}  // namespace
}  // namespace hogstream

int main(int argc, char** argv) {
  // Caffe's log format on stderr, so Caffe's log parsers read our logs.
  FLAGS_logtostderr = true;
  FLAGS_colorlogtostderr = false;
  FLAGS_log_year_in_prefix = false;  // "I1121 ..." as Caffe's logs, which its parsers expect
  google::InitGoogleLogging(argv[0]);
  try {
    return hogstream::Main(argc, argv);
  } catch (const hogstream::Error& e) {
    std::cerr << "hogstream: " << e.what() << "\n";
  } catch (const hogstream::Bug& e) {
    std::cerr << "hogstream: internal error: " << e.what() << "\n";
  } catch (const std::exception& e) {
    std::cerr << "hogstream: " << e.what() << "\n";
  }
  return 1;
}
