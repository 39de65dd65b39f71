#!/usr/bin/env bash
# Whole-net forward+backward time per batch, one thread: hogstream beside the PyTorch peer
# (../shared/peers/torch_peer.py, Debian's python3-torch) run interleaved in the same session,
# and beside the Caffe figures measured on the project machine (LeNet 21 ms, cifar10_quick
# 151 ms per batch). Prints every round, then medians and ratios.
#
#   bench/time_nets.sh [ROUNDS=3]       (needs a build in build/ or $BUILD_DIR)
#
# The peer reports training images/s (forward, backward and the SGD update); we convert it
# to ms per batch. hogstream's figure is `hogstream time` (forward + backward, no update),
# so the peer's number includes one weight update per batch more than ours (~0.1-0.5 ms).
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}
BIN=${BUILD_DIR:-build}/hogstream
PEER=../shared/peers/torch_peer.py
[[ -x $BIN ]] || { echo "build first: scripts/test.sh" >&2; exit 1; }
have_peer=0
if [[ -f $PEER ]] && /usr/bin/python3 -c "import torch" 2>/dev/null; then have_peer=1; else
  echo "PyTorch peer unavailable (needs $PEER and python3-torch): hogstream only" >&2; fi

declare -A CAFFE=([lenet]=21 [cifar]=151) GOAL=([lenet]=12 [cifar]=60)
declare -A BATCH=([lenet]=64 [cifar]=100)
declare -A MODEL=([lenet]=configs/lenet/lenet_train_test.prototxt [cifar]=configs/cifar10/quick_train_test.prototxt)
declare -A INPUT=([lenet]=data:64,1,28,28 [cifar]=data:100,3,32,32)
declare -A ITERS=([lenet]=200 [cifar]=40)
results=$(mktemp)

for ((r = 1; r <= ROUNDS; ++r)); do
  for net in lenet cifar; do
    if ((have_peer)); then
      ips=$(/usr/bin/python3 "$PEER" --mode "$net" --threads 1 --checkpoints '' --warmup 10 \
              --window-iters $((ITERS[$net] / 2)) --windows 3 2>/dev/null |
            sed -n 's/^RESULT //p' | python3 -c 'import json,sys; print(json.load(sys.stdin)["median_images_per_s"])')
      ms=$(python3 -c "print(f'{${BATCH[$net]} * 1000 / $ips:.3f}')")
      echo "round $r $net torch $ms"
      echo "$net torch $ms" >>"$results"
    fi
    ms=$(OMP_NUM_THREADS=1 "$BIN" time --model="${MODEL[$net]}" --input="${INPUT[$net]}" \
           --iterations="${ITERS[$net]}" --threads=1 | sed -n 's/^Median Forward-Backward: \([0-9.]*\).*/\1/p')
    echo "round $r $net hogstream $ms"
    echo "$net hogstream $ms" >>"$results"
  done
done

echo
printf '%-7s %14s %14s %10s %12s %12s %8s\n' net "hogstream ms" "torch ms" "caffe ms" "vs torch" "vs caffe" goal
for net in lenet cifar; do
  python3 - "$results" "$net" "${CAFFE[$net]}" "${GOAL[$net]}" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
net, caffe, goal = sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
med = lambda who: statistics.median(float(r[2]) for r in rows if r[0] == net and r[1] == who) \
    if any(r[0] == net and r[1] == who for r in rows) else float("nan")
h, t = med("hogstream"), med("torch")
print(f"{net:7s} {h:14.2f} {t:14.2f} {caffe:10.0f} {t / h:11.2f}x {caffe / h:11.2f}x {'<= %g' % goal:>8s} "
      f"{'MET' if h <= goal else 'MISSED'}")
PY
done
rm -f "$results"
