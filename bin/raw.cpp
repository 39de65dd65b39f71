// raw.bin: one machine of a Hogwild job across machines over raw Ethernet.
//
//   raw.bin SOLVER SOLVERS MAC1:MAC2[:MAC3...] [--iface=NAME] [--multicast=on] [--rank=N]
//           [--snapshot=STATE | --weights=MODEL] [--iterations=N] [--job=NAME]
//           [--job-key=FILE] [--loss=P] [--sweep_ms=20] [--dead_ms=2000] [--start_timeout=60]
//           [--metrics=[HOST:]PORT] [--stats_json=FILE]
//
// The same line on every machine: each finds its rank as the position in the list of a MAC of
// one of its own NICs (MACs as 12 hex digits, e.g. 0025908a56d8). SOLVERS is
// [gpu_id:]*cpu_count: this machine's solver threads. Needs CAP_NET_RAW (root). Same as
// `hogstream train --solver=SOLVER --solvers=SOLVERS --peers=raw://MAC1,MAC2,...`.
#include <iostream>

#include "bin/program.hpp"
#include "core/io.hpp"

int main(int argc, char** argv) {
  using namespace hogstream;
  return RunProgram("raw.bin", argv[0], [&] {
    Flags f(argc, argv, 1, With(kHogwildFlags, kNetJobFlags), {"chunk_at_params", "staleness-weight", "svb"});
    if (f.positional().size() != 3) {
      std::cerr << "usage: raw.bin SOLVER.prototxt SOLVERS MAC1:MAC2[:MAC3...] [--iface=NAME] "
                   "[--multicast=on] [--rank=N]\n"
                   "               [--snapshot=STATE | --weights=MODEL] [--iterations=N] [--job=NAME] "
                   "[--job-key=FILE] [--loss=P]\n"
                   "  SOLVERS: [gpu_id:]*cpu_count, this machine's solvers (e.g. 4)\n"
                   "  MACs: every machine's, in the same order everywhere (12 hex digits each)\n";
      return 1;
    }
    pb::SolverParameter param = ReadSolverText(f.positional()[0]);
    if (f.has("iterations")) param.set_max_iter(static_cast<int>(f.get_int("iterations", 0, 0, INT_MAX)));
    PeerEntry mine;
    std::unique_ptr<NetJob> net = NetJobFromFlags(f, f.positional()[2], /*raw_form=*/true, &mine);
    HogwildOptions h = HogwildFromFlags(f, f.positional()[1], &mine);
    h.net = net.get();
    RunHogwild(param, h);
    return 0;
  });
}
