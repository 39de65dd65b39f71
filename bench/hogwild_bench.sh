#!/usr/bin/env bash
# Hogwild on one host, LeNet on Fashion-MNIST (the README's data), measured against the
# PyTorch Hogwild peer (../shared/peers/torch_peer.py --mode hogwild, Debian's python3-torch)
# interleaved in the same run.
#
#   bench/hogwild_bench.sh throughput [ROUNDS=3]   img/s: peer 2 procs | 2 threads | 2 procs x 1 over --shm
#   bench/hogwild_bench.sh convergence             10 000 global iterations, 1 vs 2 solvers:
#                                                  final accuracy, wall time to first reach 0.89
#
# Throughput is read from the leader's "Progress" line at the end of a 3000-iteration run
# (testing off), i.e. the job's images per second since its start.
set -euo pipefail
cd "$(dirname "$0")/.."
MODE=${1:-throughput}
ROUNDS=${2:-3}
B=${BUILD_DIR:-build}
PEER=../shared/peers/torch_peer.py
[[ -x $B/hogwild.bin ]] || { echo "build first: scripts/test.sh" >&2; exit 1; }
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"; rm -f /dev/shm/hogstream.bench_$$' EXIT
FM=/usr/share/datasets/fashion-mnist
mkdir -p data/fashion-mnist
for s in train t10k; do
  out=data/fashion-mnist/$([[ $s == train ]] && echo train || echo test)_lmdb
  [[ -d $out ]] || "$B/hogstream" convert mnist "$FM/$s-images-idx3-ubyte.gz" "$FM/$s-labels-idx1-ubyte.gz" "$out" >/dev/null
done

# solver ITERS TEST_INTERVAL > file: configs/lenet with overrides
solver() {
  grep -v -E '^(test_interval|max_iter|snapshot|snapshot_prefix|display):' configs/lenet/solver.prototxt
  printf 'max_iter: %d\ntest_interval: %d\ndisplay: 100\nsnapshot: 0\nsnapshot_after_train: false\n' "$1" "$2"
  printf 'snapshot_prefix: "%s/lenet"\n' "$WORK"
  [[ $2 -gt $1 ]] && echo "test_initialization: false"
  true
}
last_rate() { sed -n 's/.*Progress: .* iterations, \([0-9]*\) img\/s.*/\1/p' "$1" | tail -1; }

if [[ $MODE == throughput ]]; then
  solver 3000 100000 >"$WORK/s.prototxt"
  res=$WORK/res
  for ((r = 1; r <= ROUNDS; ++r)); do
    if [[ -f $PEER ]] && /usr/bin/python3 -c "import torch" 2>/dev/null; then
      ips=$(/usr/bin/python3 "$PEER" --mode hogwild --procs 2 --checkpoints '' --warmup 50 \
              --window-iters 500 --windows 3 2>/dev/null | sed -n 's/^RESULT //p' |
            python3 -c 'import json,sys; print(json.load(sys.stdin)["median_images_per_s"])')
      echo "round $r torch-hogwild-2procs $ips"; echo "torch $ips" >>"$res"
    fi
    OMP_NUM_THREADS=1 "$B/hogwild.bin" "$WORK/s.prototxt" 2 2>"$WORK/t.log"
    ips=$(last_rate "$WORK/t.log"); echo "round $r hogstream-2threads $ips"; echo "threads $ips" >>"$res"
    # Two processes, one solver each, one job: the second joins the first's /dev/shm segment.
    OMP_NUM_THREADS=1 "$B/hogwild.bin" "$WORK/s.prototxt" 1 --shm=bench_$$ 2>"$WORK/p0.log" &
    p0=$!
    sleep 0.3
    OMP_NUM_THREADS=1 "$B/hogwild.bin" "$WORK/s.prototxt" 1 --shm=bench_$$ 2>"$WORK/p1.log"
    wait $p0
    ips=$(last_rate "$WORK/p0.log"); echo "round $r hogstream-2procs-shm $ips"; echo "shm $ips" >>"$res"
  done
  python3 - "$res" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
med = lambda k: statistics.median(float(r[1]) for r in rows if r[0] == k) if any(r[0] == k for r in rows) else float("nan")
t = med("torch")
print(f"\nmedians (img/s): torch hogwild 2 procs {t:.0f}")
for k, name in (("threads", "hogstream 2 solver threads"), ("shm", "hogstream 2 processes over /dev/shm")):
    h = med(k)
    print(f"  {name:38s} {h:7.0f}  = {h / t:.2f}x torch  (goal >= 1.5x: {'MET' if h / t >= 1.5 else 'MISSED'})")
PY
  exit 0
fi

# convergence: one run per solver count; accuracy on the 10k test images every 500 global its.
solver 10000 500 >"$WORK/c.prototxt"
for n in 1 2; do
  OMP_NUM_THREADS=1 "$B/hogwild.bin" "$WORK/c.prototxt" $n 2>"$WORK/c$n.log"
  python3 - "$WORK/c$n.log" "$n" <<'PY'
import re, sys
start = None; first = None; final = None
ts = lambda m: int(m.group(1)) * 3600 + int(m.group(2)) * 60 + float(m.group(3))
for line in open(sys.argv[1]):
    m = re.match(r"I\d{4} (\d+):(\d+):([\d.]+)", line)
    if not m: continue
    if start is None and "Solving" in line: start = ts(m)
    a = re.search(r"Test net output #0: accuracy = ([\d.]+)", line)
    if a:
        final = float(a.group(1))
        if first is None and final >= 0.89: first = ts(m) - start
print(f"{sys.argv[2]} solver(s): final test accuracy {final:.4f}; wall time to first reach 0.89: "
      f"{'%.1f s' % first if first is not None else 'never'}")
PY
done
