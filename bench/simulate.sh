#!/usr/bin/env bash
# Scale-out in virtual time (`hogstream simulate`, sync/README.md "The simulator"): for each
# aggregation rule in RULES and each speed profile, one simulated job per N in COUNTS (and one
# machine, the reference), LeNet on Fashion-MNIST or cifar10_quick; prints per row the global
# iterations to each target, the statistical efficiency SE against one machine, and the virtual
# time against one machine's. Deterministic: the same SEED, the same table. The host's speed
# does not enter the figures (only how long the table takes to make).
#
#   bench/simulate.sh [lenet|cifar]
#   env: COUNTS="4 8 16"  RULES="auto"  PROFILES="homog jitter"  (jitter: +-20% per step and one
#        machine 2x slower)  SEEDS="1"  TARGETS (lenet 0.87,0.88,0.89; cifar 0.70,0.75)
#        ITER (global iterations at most; lenet 10000, cifar 5000)  TEST_EVERY=100
#        BSP="sqrt half n" (the synchronous reference's lr multipliers after each N; "" for none)
#        BSP_WARMUP=500 (its linear warm-up, global iterations)
#        EXTRA="more simulate flags"  BUILD_DIR=build  OUT=out/simulate (JSON lines kept there)
set -euo pipefail
HS_ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$HS_ROOT"
NET=${1:-lenet}
COUNTS=${COUNTS:-4 8 16}
RULES=${RULES:-auto}
PROFILES=${PROFILES:-homog jitter}
SEEDS=${SEEDS:-1}
TEST_EVERY=${TEST_EVERY:-100}
BSP=${BSP-sqrt half n}
BSP_WARMUP=${BSP_WARMUP:-500}
BUILD_DIR=${BUILD_DIR:-build}
OUT=${OUT:-out/simulate}
case $NET in
  lenet) SOLVER=${SOLVER:-configs/lenet/solver.prototxt}; ITER=${ITER:-10000}; TARGETS=${TARGETS:-0.87,0.88,0.89}
         [[ -d data/fashion-mnist/train_lmdb ]] || { echo "simulate.sh: no data/fashion-mnist: run scripts/demo.sh once"; exit 1; } ;;
  cifar) SOLVER=${SOLVER:-configs/cifar10/quick_5k_solver.prototxt}; ITER=${ITER:-5000}; TARGETS=${TARGETS:-0.70,0.75}
         [[ -d data/cifar10/train_lmdb ]] || { echo "simulate.sh: no CIFAR-10 in data/cifar10: run scripts/cifar10.sh first"; exit 1; } ;;
  *) echo "simulate.sh: lenet or cifar"; exit 2 ;;
esac
[[ -x $BUILD_DIR/hogstream ]] || { echo "simulate.sh: build $BUILD_DIR/hogstream first (scripts/test.sh)"; exit 1; }
mkdir -p "$OUT"
echo "# $(lscpu | sed -n 's/^Model name: *//p' | head -1); $NET; targets $TARGETS; counts $COUNTS; $(date -u +%FT%TZ)"
machines=$(echo 1 $COUNTS | tr ' ' ',')
for seed in $SEEDS; do
  for profile in $PROFILES; do
    case $profile in
      homog) speed=() ;;
      jitter) speed=(--jitter=0.2 --stragglers=1 --straggler_factor=2) ;;
      *) echo "simulate.sh: profile homog or jitter, not $profile"; exit 2 ;;
    esac
    for rule in $RULES; do
      tag="$NET.$rule.$profile.s$seed"
      agg=(); [[ $rule == auto ]] || agg=(--aggregate="$rule")
      bsp=(); [[ -z $BSP ]] || bsp=(--bsp="$(echo $BSP | tr ' ' ',')" --bsp_warmup="$BSP_WARMUP")
      # shellcheck disable=SC2086
      "$BUILD_DIR/hogstream" simulate --solver="$SOLVER" --machines="$machines" --targets="$TARGETS" \
        --max_iter="$ITER" --test_every="$TEST_EVERY" --seed="$seed" "${speed[@]}" "${agg[@]}" "${bsp[@]}" ${EXTRA:-} --json \
        > "$OUT/$tag.jsonl"
      python3 - "$OUT/$tag.jsonl" "$rule" "$profile" "$seed" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
one = rows[0]
for r in rows:
    cells = []
    for t, o in zip(r["targets"], one["targets"]):
        if t["iter"] < 0:
            cells.append(f"{t['target']}: -")
            continue
        ratio = t["virtual_s"] / o["virtual_s"] if o["iter"] >= 0 and o["virtual_s"] > 0 else float("nan")
        cells.append(f"{t['target']}: {t['iter']:.0f} it SE {t['se']:.2f} time {ratio:.3f}x")
    st = r["staleness"]; n = sum(st) or 1
    rule = f"bsp x{r['bsp']:.3g}" if r["bsp"] > 0 else sys.argv[2]
    if r["ended_early"]:
        cells.append("ended early: " + r["ended_early"])
    print(f"{rule:>10} {sys.argv[3]:>6} s{sys.argv[4]} N={r['machines']:<3} " + " | ".join(cells)
          + f" | final {r['curve'][-1][2]:.4f} at {r['iterations']}")
PY
    done
  done
done
