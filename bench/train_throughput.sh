#!/usr/bin/env bash
# Training throughput, one thread: `hogstream train` beside the PyTorch peer
# (../shared/peers/torch_peer.py with Debian's python3-torch), interleaved round by round in
# one run, medians at the end. Also the peak RSS of hogstream's LeNet training.
#
#   bench/train_throughput.sh [ROUNDS=3]
#
# LeNet: Fashion-MNIST LMDBs (made by scripts/demo.sh or here), batch 64, Caffe's LeNet solver,
# 2000 iterations, no testing; img/s from the log between iterations 200 and 1900.
# cifar10_quick: an LMDB of random 32x32x3 images (the peer also trains on random data),
# batch 100, 400 iterations; img/s between iterations 100 and 300.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}
BIN=${BUILD_DIR:-build}/hogstream
PEER=../shared/peers/torch_peer.py
[[ -x $BIN ]] || { echo "build first: scripts/test.sh" >&2; exit 1; }
have_peer=0
if [[ -f $PEER ]] && /usr/bin/python3 -c "import torch" 2>/dev/null; then have_peer=1; else
  echo "PyTorch peer unavailable (needs $PEER and python3-torch): hogstream only" >&2; fi
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

# Data.
FM=/usr/share/datasets/fashion-mnist
mkdir -p data/fashion-mnist
[[ -d data/fashion-mnist/train_lmdb ]] || "$BIN" convert mnist "$FM/train-images-idx3-ubyte.gz" \
  "$FM/train-labels-idx1-ubyte.gz" data/fashion-mnist/train_lmdb >/dev/null
python3 - "$WORK/random.bin" <<'PY'
import os, sys
rec = 1 + 3 * 32 * 32
with open(sys.argv[1], "wb") as f:
    for i in range(5000):
        f.write(bytes([i % 10]) + os.urandom(rec - 1))
PY
"$BIN" convert cifar10 "$WORK/random.bin" "$WORK/cifar_lmdb" >/dev/null
"$BIN" convert mean "$WORK/cifar_lmdb" "$WORK/mean.binaryproto" >/dev/null

# Solvers: the configs with testing off and the data pointed at the bench's LMDBs.
sed -e "s#data/cifar10/train_lmdb#$WORK/cifar_lmdb#; s#data/cifar10/test_lmdb#$WORK/cifar_lmdb#" \
    -e "s#data/cifar10/mean.binaryproto#$WORK/mean.binaryproto#" \
    configs/cifar10/quick_train_test.prototxt >"$WORK/cifar_net.prototxt"
strip_solver() {  # $1 solver, $2 net, $3 iterations, $4 display
  grep -v -E '^(net|test_iter|test_interval|display|max_iter|snapshot|snapshot_prefix):' "$1"
  printf 'net: "%s"\nmax_iter: %d\ndisplay: %d\nsnapshot: 0\nsnapshot_after_train: false\n' "$2" "$3" "$4"
}
strip_solver configs/lenet/solver.prototxt "$PWD/configs/lenet/lenet_train_test.prototxt" 2000 100 >"$WORK/lenet_solver.prototxt"
strip_solver configs/cifar10/quick_solver.prototxt "$WORK/cifar_net.prototxt" 400 100 >"$WORK/cifar_solver.prototxt"

# img/s between two "Iteration N (" lines of a Caffe-format log; $4 = batch.
rate_from_log() {
  python3 - "$1" "$2" "$3" "$4" <<'PY'
import re, sys
log, a, b, batch = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
t = {}
for line in open(log):
    m = re.match(r"I\d{4} (\d+):(\d+):([\d.]+) .*\] Iteration (\d+) \(", line)
    if m:
        t[int(m.group(4))] = int(m.group(1)) * 3600 + int(m.group(2)) * 60 + float(m.group(3))
print(f"{(b - a) * batch / (t[b] - t[a]):.1f}")
PY
}
with_peak_rss() {  # $1 = file for the peak RSS (MiB) of the command "${@:2}"
  python3 -c '
import resource, subprocess, sys
subprocess.run(sys.argv[2:], check=True)
open(sys.argv[1], "w").write(f"{resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024:.1f}")' "$@"
}

results=$WORK/results
for ((r = 1; r <= ROUNDS; ++r)); do
  if ((have_peer)); then
    ips=$(/usr/bin/python3 "$PEER" --mode lenet --threads 1 --checkpoints '' --warmup 100 \
            --window-iters 500 --windows 3 2>/dev/null | sed -n 's/^RESULT //p' |
          python3 -c 'import json,sys; print(json.load(sys.stdin)["median_images_per_s"])')
    echo "round $r lenet torch $ips img/s"; echo "lenet torch $ips" >>"$results"
  fi
  OMP_NUM_THREADS=1 with_peak_rss "$WORK/rss" "$BIN" train --solver="$WORK/lenet_solver.prototxt" 2>"$WORK/lenet.log"
  rss=$(cat "$WORK/rss")
  ips=$(rate_from_log "$WORK/lenet.log" 200 1900 64)
  echo "round $r lenet hogstream $ips img/s (peak RSS $rss MiB)"
  echo "lenet hogstream $ips" >>"$results"; echo "rss hogstream $rss" >>"$results"
  if ((have_peer)); then
    ips=$(/usr/bin/python3 "$PEER" --mode cifar --threads 1 --warmup 20 --window-iters 100 \
            --windows 3 2>/dev/null | sed -n 's/^RESULT //p' |
          python3 -c 'import json,sys; print(json.load(sys.stdin)["median_images_per_s"])')
    echo "round $r cifar torch $ips img/s"; echo "cifar torch $ips" >>"$results"
  fi
  OMP_NUM_THREADS=1 "$BIN" train --solver="$WORK/cifar_solver.prototxt" 2>"$WORK/cifar.log"
  ips=$(rate_from_log "$WORK/cifar.log" 100 300 100)
  echo "round $r cifar hogstream $ips img/s"; echo "cifar hogstream $ips" >>"$results"
done

echo
python3 - "$results" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
med = lambda k, who: statistics.median(float(r[2]) for r in rows if r[0] == k and r[1] == who) \
    if any(r[0] == k and r[1] == who for r in rows) else float("nan")
print(f"{'net':7s} {'hogstream img/s':>16s} {'torch img/s':>12s} {'ratio':>7s} {'goal':>6s}")
for k in ("lenet", "cifar"):
    h, t = med(k, "hogstream"), med(k, "torch")
    print(f"{k:7s} {h:16.0f} {t:12.0f} {h / t:6.2f}x {'>= 1.5x':>8s} {'MET' if h / t >= 1.5 else 'MISSED'}")
rss = max(float(r[2]) for r in rows if r[0] == "rss")
print(f"peak RSS of LeNet training: {rss:.1f} MiB (goal <= 118) {'MET' if rss <= 118 else 'MISSED'}")
PY
