#!/usr/bin/env bash
# Signals against real training: RUNS runs of `hogwild.bin configs/lenet/solver.prototxt 2`
# (LeNet on Fashion-MNIST, two solver threads), each sent SIGHUPS SIGHUPs 20-150 ms apart and
# then a SIGINT; prints each run's exit status and snapshot count, and the number of aborts
# (exit 134) and other failures. Exit 0 when every run exited 0.
#
#   scripts/signal_soak.sh [RUNS=20] [SIGHUPS=8]
set -euo pipefail
HS_ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$HS_ROOT"
RUNS=${1:-20}
SIGHUPS=${2:-8}
source scripts/setup.sh
hs_ensure_packages dataset-fashion-mnist
hs_build hogwild_bin hogstream >/dev/null
FM=/usr/share/datasets/fashion-mnist
mkdir -p data/fashion-mnist
for split in train t10k; do
  out=data/fashion-mnist/$([[ $split == train ]] && echo train || echo test)_lmdb
  [[ -d $out ]] || "$BUILD_DIR/hogstream" convert mnist "$FM/$split-images-idx3-ubyte.gz" \
    "$FM/$split-labels-idx1-ubyte.gz" "$out" >/dev/null
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
sed "s#^snapshot_prefix:.*#snapshot_prefix: \"$work/s\"#" configs/lenet/solver.prototxt >"$work/solver.prototxt"
aborts=0 failures=0
for ((run = 1; run <= RUNS; run++)); do
  rm -f "$work"/s_iter_*
  "$BUILD_DIR/hogwild.bin" "$work/solver.prototxt" 2 2>"$work/log" &
  pid=$!
  for ((i = 0; i < 600; i++)); do grep -q "Iteration 0" "$work/log" && break; sleep 0.05; done
  sleep 0.3
  for ((k = 0; k < SIGHUPS; k++)); do
    kill -HUP "$pid" 2>/dev/null || true
    sleep "0.$(printf %03d $((20 + RANDOM % 130)))"
  done
  sleep 0.3
  kill -INT "$pid" 2>/dev/null || true
  rc=0
  for ((i = 0; i < 1200; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
  if kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid"; rc=hang; fi
  wait "$pid" || rc=${rc/0/$?}
  snaps=$(find "$work" -name "s_iter_*.caffemodel" | wc -l)
  echo "run $run: exit $rc, $snaps snapshots"
  [[ $rc == 134 ]] && aborts=$((aborts + 1))
  [[ $rc != 0 ]] && failures=$((failures + 1))
done
echo "$RUNS runs x $SIGHUPS SIGHUPs: $aborts aborts, $failures non-zero exits"
((failures == 0))
