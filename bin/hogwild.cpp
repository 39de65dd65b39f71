// hogwild.bin and gpus.bin (the same program; CMake builds it under both names): Hogwild
// training on one host.
//
//   hogwild.bin SOLVER SOLVERS [--shm=NAME] [--private] [--snapshot=STATE | --weights=MODEL]
//               [--iterations=N] [--chunk=FLOATS] [--sigint_effect=...] [--sighup_effect=...]
//               [--metrics=[HOST:]PORT] [--stats_json=FILE] [--copy_lead=K] [--sweep_pause_us=US]
//
// SOLVERS is [gpu_id:]*cpu_count: "4" = four CPU solver threads, "0:0:2" = two solvers on GPU 0
// and two CPU solvers, "0:1:0" = one solver on each of GPUs 0 and 1. GPU solvers train private
// copies streamed to the host weights, which the CPU solvers train directly. Run the same line in
// several shells with --shm=NAME and the processes train one shared copy of the weights.
// Same as `hogstream train --solver=SOLVER --solvers=SOLVERS ...`.
#include <iostream>

#include "bin/program.hpp"
#include "core/io.hpp"

#ifndef HS_PROGRAM
#define HS_PROGRAM "hogwild.bin"
#endif

int main(int argc, char** argv) {
  using namespace hogstream;
  return RunProgram(HS_PROGRAM, argv[0], [&] {
    Flags f(argc, argv, 1, kHogwildFlags, {"private", "staleness-weight", "svb"});
    if (f.positional().size() != 2) {
      std::cerr << "usage: " HS_PROGRAM " SOLVER.prototxt SOLVERS [--shm=NAME] [--private] "
                   "[--snapshot=STATE | --weights=MODEL] [--iterations=N] [--chunk=FLOATS]\n"
                   "                   [--policy=async|bsp|ssp:S|max-advance:K|weedout:N|easgd:A[:P]|gsp:GROUPS]\n"
                   "                   [--staleness-weight] [--compress=fp16|int8|topk:F] [--svb]\n"
                   "                   [--copy_lead=K] [--sweep_pause_us=US]\n"
                   "                   [--metrics=[HOST:]PORT] [--stats_json=FILE]\n"
                   "  SOLVERS: [gpu_id:]*cpu_count, e.g. 4 (four CPU solver threads), 0:0:2 (two on GPU 0, two CPU)\n";
      return 1;
    }
    pb::SolverParameter param = ReadSolverText(f.positional()[0]);
    if (f.has("iterations")) param.set_max_iter(static_cast<int>(f.get_int("iterations", 0, 0, INT_MAX)));
    RunHogwild(param, HogwildFromFlags(f, f.positional()[1]));
    return 0;
  });
}
