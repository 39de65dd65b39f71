#!/usr/bin/env bash
# The sharing policies side by side (issue 12's convergence table): LeNet on Fashion-MNIST,
# the same global iterations for every row, one solver first as the reference. Per row: the
# command, final test accuracy, wall time, time to TARGET accuracy, bytes moved per global
# iteration, and the waits the policy made.
#
#   bench/policies.sh [local|net]
#     local  one process, SOLVERS solver threads with private copies:
#            hogwild.bin SOLVER SOLVERS --policy=... (bytes: what the in-process segments copy)
#     net    SOLVERS "machines" (network namespaces on a bridge, one solver each) over UDP:
#            bench/cluster.sh udp plain with EXTRA="--policy=..." (bytes: sent by all machines)
#   env: ROWS="--policy=bsp|--policy=ssp:2|..." (rows separated by '|'; default: every policy
#        and switch that runs in that mode), SOLVERS=4 ITER=10000 TARGET=0.89
#        SOLVER=configs/lenet/solver.prototxt BUILD_DIR=build OUT=out/policies
# Needs data/fashion-mnist (scripts/demo.sh makes it); net needs root. The machine's cores are
# shared by every solver of a row: wall times compare rows of one sitting, not machines.
set -euo pipefail
HS_ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$HS_ROOT"
MODE=${1:-local}
SOLVERS=${SOLVERS:-4}
ITER=${ITER:-10000}
SOLVER=${SOLVER:-configs/lenet/solver.prototxt}
BUILD_DIR=${BUILD_DIR:-build}
OUT=${OUT:-out/policies}
source bench/log_times.sh  # time_to_target, final_accuracy
[[ -x $BUILD_DIR/hogstream && -x $BUILD_DIR/hogwild.bin ]] || { echo "build first: scripts/test.sh" >&2; exit 1; }
[[ -d data/fashion-mnist/train_lmdb ]] || { echo "no data/fashion-mnist: run scripts/demo.sh first" >&2; exit 1; }
source "$HS_ROOT/bench/frozen_build.sh"
hs_freeze_build  # a rebuild meanwhile cannot touch the sitting
groups="0"
for ((s = 1; s < SOLVERS; ++s)); do groups+=$([[ $s == $((SOLVERS / 2)) ]] && echo ";" || echo ",")$s; done
case $MODE in
  local) default="--private|--policy=bsp|--policy=ssp:2|--policy=max-advance:3|--policy=weedout:$((2 * SOLVERS))|--policy=easgd:0.5:4|--policy=gsp:$groups|--policy=async --staleness-weight|--policy=ssp:2 --staleness-weight|--policy=async --compress=fp16|--policy=async --compress=int8|--policy=async --compress=topk:0.1 --staleness-weight|--policy=async --svb|--policy=async --svb --staleness-weight" ;;
  # (net: each compression under the default aggregation; --staleness-weight asks for the
  # 1/staleness weights instead and has rows of its own)
  net) default="--policy=async|--policy=bsp|--policy=ssp:2|--policy=max-advance:3|--policy=weedout:$((2 * SOLVERS))|--policy=easgd:0.5:4|--policy=gsp:$groups|--policy=async --staleness-weight|--policy=ssp:2 --staleness-weight|--policy=async --compress=fp16|--policy=async --compress=int8|--policy=async --compress=topk:0.1|--policy=async --compress=topk:0.1 --staleness-weight|--policy=async --svb|--policy=async --svb --staleness-weight" ;;
  *) echo "usage: bench/policies.sh [local|net]" >&2; exit 2 ;;
esac
IFS='|' read -r -a rows <<< "${ROWS:-$default}"
mkdir -p "$OUT" out  # out/: configs/lenet's snapshot_prefix
table="$OUT/table.txt"
: > "$table"

row() {  # row NAME LOG WALL BYTES_PER_ITER WAITS
  printf "%-40s %9s %8.1f %10s %12s  %s\n" "$1" "$(final_accuracy "$2")" "$3" "$(time_to_target "$2")" "$4" "$5" | tee -a "$table"
}

echo "== reference: one solver, $BUILD_DIR/hogstream train --solver=$SOLVER --iterations=$ITER"
t0=$(date +%s.%N)
"$BUILD_DIR/hogstream" train --solver="$SOLVER" --iterations="$ITER" > "$OUT/single.log" 2>&1
printf "%-40s %9s %8s %10s %12s  %s\n" "row ($MODE, $SOLVERS solvers)" accuracy "wall s" "to $TARGET" "KiB/iter" waits | tee -a "$table"
row "1 solver" "$OUT/single.log" "$(echo "$(date +%s.%N) - $t0" | bc)" 0 -

for ((k = 0; k < ${#rows[@]}; ++k)); do
  flags=${rows[$k]}
  log="$OUT/row$k.log"
  echo "== $flags"
  t0=$(date +%s.%N)
  if [[ $MODE == local ]]; then
    # shellcheck disable=SC2086  # the row's flags are words
    "$BUILD_DIR/hogwild.bin" "$SOLVER" "$SOLVERS" $flags --iterations="$ITER" > "$log" 2>&1 || echo "(exit $?: see $log)"
    wall=$(echo "$(date +%s.%N) - $t0" | bc)
    kib=$(sed -n 's/.*segments moved .* MiB, \([0-9.]*\) KiB per iteration.*/\1/p' "$log" | tail -1)
    # --svb: the factor vectors travel beside the segments; count them in the row's bytes
    svb=$(sed -n 's/.*Sharing: .*SVB .*, \([0-9.]*\) KiB per iteration$/\1/p' "$log" | tail -1)
    [[ -n $kib && -n $svb ]] && kib=$(echo "scale=1; ($kib + $svb) / 1" | bc)
    waits=$(sed -n "s/.*Sharing: Policy .*: \([0-9]* waits[^;]*\);.*/\1/p" "$log" | tail -1)
  else
    MACHINES=$SOLVERS SOLVERS=1 ITER=$ITER OUT="$OUT/net$k" EXTRA="$flags" bench/cluster.sh udp plain > "$log" 2>&1 || echo "(exit $?: see $log)"
    wall=$(sed -n 's/^wall time: \([0-9.]*\) s/\1/p' "$log")
    lead=$(grep -l "Optimization Done.$" "$OUT/net$k"/m*.log | head -1 || true)
    if [[ -z $lead ]]; then  # no leader finished: say how the machines ended, go on
      printf "%-40s %s\n" "$flags" "no leader finished: $(grep -hoE "hogstream: .*" "$OUT/net$k"/m*.log | sort -u | head -1)" | tee -a "$table"
      continue
    fi
    cp "$lead" "$log.leader"
    sent=$(cat "$OUT/net$k"/m*.log | sed -n 's/.* ran [0-9]* iterations .* sent \([0-9.]*\) GB,.*/\1/p' | paste -sd+ | bc)
    kib=$(echo "scale=1; $sent * 1000000000 / 1024 / $ITER" | bc)
    waits=$(grep -h "Policy .*waits" "$lead" | tail -1 | sed 's/.*: \([0-9]* waits[^,;]*\).*/\1/' || true)
    log="$log.leader"
  fi
  row "$flags" "$log" "$wall" "${kib:--}" "${waits:--}"
done
echo "== table ($MODE): $table"
cat "$table"
