// raw.bin: one machine of a Hogwild job across machines over raw Ethernet.
//
//   raw.bin [flags] SOLVER SOLVERS MAC1:MAC2[:MAC3...]   (raw.bin --help: every flag)
//
// The same line on every machine: each finds its rank as the position in the list of a MAC of
// one of its own NICs (MACs as 12 hex digits, e.g. 0025908a56d8). SOLVERS is
// [gpu_id:]*cpu_count: this machine's solver threads. Needs CAP_NET_RAW (root). Same as
// `hogstream train --solver=SOLVER --solvers=SOLVERS --peers=raw://MAC1,MAC2,...`.
#include "bin/program.hpp"
#include "core/io.hpp"

int main(int argc, char** argv) {
  using namespace hogstream;
  return RunProgram("raw.bin", argv[0], [&] {
    Flags f(RawBinCommand(), argc, argv, 1);
    HS_REQUIRE(f.positional().size() == 3)
        << "usage: raw.bin [flags] " << RawBinCommand().args << " (raw.bin --help for more)";
    pb::SolverParameter param = ReadSolverText(f.positional()[0]);
    if (f.has("iterations")) param.set_max_iter(static_cast<int>(f.get_int("iterations", 0, 0, INT_MAX)));
    PeerEntry mine;
    std::unique_ptr<NetJob> net = NetJobFromFlags(f, f.positional()[2], /*raw_form=*/true, param, &mine);
    HogwildOptions h = HogwildFromFlags(f, f.positional()[1], &mine);
    h.net = net.get();
    RunHogwild(param, h);
    return 0;
  });
}
