// hogwild.bin and gpus.bin (the same program; CMake builds it under both names): Hogwild
// training on one host.
//
//   hogwild.bin [flags] SOLVER SOLVERS      (hogwild.bin --help: every flag, from bin/commands.cpp)
//
// SOLVERS is [gpu_id:]*cpu_count: "4" = four CPU solver threads, "0:0:2" = two solvers on GPU 0
// and two CPU solvers, "0:1:0" = one solver on each of GPUs 0 and 1. GPU solvers train private
// copies on their devices, linked to the host weights by GPU segments (one daemon for all of
// them); with GPU solvers, the CPU solvers train private copies too. Run the same line in
// several shells with --shm=NAME and the processes train one shared copy of the weights.
// Same as `hogstream train --solver=SOLVER --solvers=SOLVERS ...`.
#include "bin/program.hpp"
#include "core/io.hpp"

#ifndef HS_PROGRAM
#define HS_PROGRAM "hogwild.bin"
#endif

int main(int argc, char** argv) {
  using namespace hogstream;
  return RunProgram(HS_PROGRAM, argv[0], [&] {
    const Command command = HogwildBinCommand(HS_PROGRAM);
    Flags f(command, argc, argv, 1);
    HS_REQUIRE(f.positional().size() == 2)
        << "usage: " << command.name << " [flags] " << command.args << " (" HS_PROGRAM " --help for more)";
    pb::SolverParameter param = ReadSolverText(f.positional()[0]);
    if (f.has("iterations")) param.set_max_iter(static_cast<int>(f.get_int("iterations", 0, 0, INT_MAX)));
    RunHogwild(param, HogwildFromFlags(f, f.positional()[1]));
    return 0;
  });
}
