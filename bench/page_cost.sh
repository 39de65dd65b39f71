#!/usr/bin/env bash
# What the live page costs a job: a 2-machine job (LeNet on Fashion-MNIST, one solver per
# machine, UDP on loopback, each machine serving its page with --ui) run with nobody watching,
# with a poller asking every machine's /stats.json for what is new each second (the server's
# cost alone), and with a headless Chromium holding every machine's page open (each page polls
# every 1.5 s and redraws; on this host the browser's own CPU comes out of the job's cores,
# where a user's browser would run elsewhere), interleaved, ROUNDS times; the job's images/s
# from the leader's last "Progress" line (the job's rate since its start). Prints each run and
# the medians.
#
#   bench/page_cost.sh [ROUNDS=3] [ITERATIONS=3000]
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}
ITERS=${2:-3000}
B=${BUILD_DIR:-build}
[[ -x $B/hogstream ]] || { echo "build first: scripts/test.sh" >&2; exit 1; }
command -v chromium >/dev/null || { echo "page_cost: needs Debian's chromium (apt-get install chromium)" >&2; exit 1; }
WORK=$(mktemp -d)
browsers=()
cleanup() {
  for p in "${browsers[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT
FM=/usr/share/datasets/fashion-mnist
mkdir -p data/fashion-mnist
for s in train t10k; do
  out=data/fashion-mnist/$([[ $s == train ]] && echo train || echo test)_lmdb
  [[ -d $out ]] || "$B/hogstream" convert mnist "$FM/$s-images-idx3-ubyte.gz" "$FM/$s-labels-idx1-ubyte.gz" "$out" >/dev/null
done
grep -v -E '^(test_interval|max_iter|snapshot|snapshot_prefix|display):' configs/lenet/solver.prototxt >"$WORK/s.prototxt"
printf 'max_iter: %d\ntest_interval: 1000\ndisplay: 100\nsnapshot: 0\nsnapshot_after_train: false\nsnapshot_prefix: "%s/lenet"\n' \
  "$ITERS" "$WORK" >>"$WORK/s.prototxt"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
last_rate() { sed -n 's/.*Progress: .* iterations, \([0-9]*\) img\/s.*/\1/p' "$1" | tail -1; }

# poll PORT PID: what the page asks, each second, while PID runs
poll() {
  local next=0 n
  while kill -0 "$2" 2>/dev/null; do
    n=$(curl -s "http://127.0.0.1:$1/stats.json?after=$next" | sed -n '1s/^{"next":\([0-9]*\).*/\1/p')
    next=${n:-$next}
    sleep 1
  done
}

# run WATCHED(0 nobody|1 a browser|2 a poller): one job; prints the leader's images/s
run() {
  local u0 u1 w0 w1 peers
  u0=$(free_port); u1=$(free_port); w0=$(free_port); w1=$(free_port)
  peers=udp://127.0.0.1:$u0,127.0.0.1:$u1
  browsers=()
  for r in 0 1; do
    local w=$([[ $r == 0 ]] && echo "$w0" || echo "$w1")
    OMP_NUM_THREADS=1 "$B/hogstream" train --solver="$WORK/s.prototxt" --peers="$peers" --rank=$r \
      --ui=127.0.0.1:$w --job=page$$ 2>"$WORK/m$r.log" &
    eval "pid$r=\$!"
  done
  if [[ $1 == 2 ]]; then
    poll "$w0" "$pid0" &
    poll "$w1" "$pid1" &
  fi
  if [[ $1 == 1 ]]; then
    for w in $w0 $w1; do
      chromium --headless --no-sandbox --disable-gpu --disable-dev-shm-usage --user-data-dir="$WORK/chrome_$w" --remote-debugging-port=0 \
        "http://127.0.0.1:$w/" >/dev/null 2>&1 &
      browsers+=($!)
    done
  fi
  wait "$pid0" "$pid1"
  for p in "${browsers[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  last_rate "$WORK/m0.log"
}

res=$WORK/res
for ((r = 1; r <= ROUNDS; ++r)); do
  for watched in 0 2 1; do
    ips=$(run $watched)
    what=("nobody watching       " "a browser on each page" "a poller on each page ")
    echo "round $r ${what[$watched]} $ips img/s"
    echo "$watched $ips" >>"$res"
  done
done
python3 - "$res" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1]) if len(l.split()) == 2]
med = lambda k: statistics.median(float(r[1]) for r in rows if r[0] == k)
a, p, b = med("0"), med("2"), med("1")
print(f"\nmedians: nobody watching {a:.0f} img/s; a poller on each page {p:.0f} img/s ({p / a:.3f}x); "
      f"a browser on each page {b:.0f} img/s ({b / a:.3f}x)")
PY
