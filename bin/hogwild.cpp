// hogwild.bin: Hogwild training on one host.
//
//   hogwild.bin SOLVER SOLVERS [--shm=NAME] [--private] [--snapshot=STATE | --weights=MODEL]
//               [--iterations=N] [--chunk=FLOATS] [--sigint_effect=...] [--sighup_effect=...]
//
// SOLVERS is [gpu_id:]*cpu_count ("4" = four CPU solver threads). Run the same line in
// several shells with --shm=NAME and the processes train one shared copy of the weights.
// Same as `hogstream train --solver=SOLVER --solvers=SOLVERS ...`.
#include <glog/logging.h>

#include <iostream>

#include "bin/flags.hpp"
#include "core/io.hpp"
#include "sync/hogwild.hpp"

int main(int argc, char** argv) {
  FLAGS_logtostderr = true;
  FLAGS_colorlogtostderr = false;
  FLAGS_log_year_in_prefix = false;
  google::InitGoogleLogging(argv[0]);
  using namespace hogstream;
  try {
    Flags f(argc, argv, 1, {"shm", "private", "snapshot", "weights", "iterations", "chunk",
                            "sigint_effect", "sighup_effect", "input"},
            {"private"});
    if (f.positional().size() != 2) {
      std::cerr << "usage: hogwild.bin SOLVER.prototxt SOLVERS [--shm=NAME] [--private] "
                   "[--snapshot=STATE | --weights=MODEL] [--iterations=N] [--chunk=FLOATS]\n"
                   "  SOLVERS: [gpu_id:]*cpu_count, e.g. 4 (four CPU solver threads)\n";
      return 1;
    }
    HS_REQUIRE(!(f.has("snapshot") && f.has("weights"))) << "give --snapshot or --weights, not both";
    pb::SolverParameter param = ReadSolverText(f.positional()[0]);
    if (f.has("iterations")) param.set_max_iter(static_cast<int>(f.get_int("iterations", 0)));
    HogwildOptions opt;
    opt.solvers = ParseSolverSpec(f.positional()[1]);
    opt.shm = f.get("shm");
    opt.private_copies = f.has("private");
    opt.chunk_floats = static_cast<size_t>(f.get_int("chunk", 16384));
    HS_REQUIRE(opt.chunk_floats > 0) << "--chunk must be > 0";
    opt.resume = f.get("snapshot");
    opt.weights = f.get("weights");
    opt.action = InstallSignalActions(f.get("sigint_effect", "stop"), f.get("sighup_effect", "snapshot"));
    RunHogwild(param, opt);
    return 0;
  } catch (const Error& e) {
    std::cerr << "hogwild.bin: " << e.what() << "\n";
  } catch (const std::exception& e) {
    std::cerr << "hogwild.bin: internal error: " << e.what() << "\n";
  }
  return 1;
}
