#!/usr/bin/env bash
# Ordinary mistakes and requests on a 2-machine job (two `hogstream train --peers=...`
# processes on UDP loopback, LeNet on Fashion-MNIST), each printed as what happened:
#   solver     machine 1 runs another solver file (base_lr 0.5): both must refuse to start,
#              one line each naming the other and what differs;
#   net        machine 1 runs another net (ip1 with 400 outputs): the same;
#   reversed   machine 1 is given the --peers list in the other order: both refuse to start;
#   signal     SIGINT to machine 1 (a follower) mid-run: the whole job stops at once, the
#              leader writes one snapshot, both exit 0;
#   sighup     SIGHUP to machine 1: the leader writes one snapshot, training goes on.
#   env: CASES="solver net reversed signal sighup" SOLVER=configs/lenet/solver.prototxt
#        BUILD_DIR=build OUT=out/steer_cases
set -euo pipefail
HS_ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$HS_ROOT"
CASES=${CASES:-solver net reversed signal sighup}
SOLVER=${SOLVER:-configs/lenet/solver.prototxt}
BUILD_DIR=${BUILD_DIR:-build}
OUT=${OUT:-out/steer_cases}
BIN=$BUILD_DIR/hogstream
[[ -x $BIN ]] || { echo "steer_cases.sh: build $BIN first"; exit 1; }
[[ -d data/fashion-mnist/train_lmdb ]] || { echo "steer_cases.sh: run scripts/demo.sh once (it converts Fashion-MNIST)"; exit 1; }
rm -rf "$OUT"; mkdir -p "$OUT"
PIDS=()
cleanup() { for pid in "${PIDS[@]}"; do kill -9 "$pid" 2>/dev/null || true; done; }
trap cleanup EXIT

NET=$(sed -n 's/^net: *"\(.*\)"/\1/p' "$SOLVER")
solver_file() {  # NAME [sed expressions...]: a copy of the solver writing its snapshots to $OUT
  local name=$1; shift
  sed -e "s|^snapshot_prefix:.*|snapshot_prefix: \"$OUT/$name\"|" -e "s|^snapshot:.*|snapshot: 0|" \
      -e "s|^test_interval:.*|test_interval: 100000|" -e "s|^display:.*|display: 200|" "$@" "$SOLVER" > "$OUT/$name.prototxt"
}
ports() { P0=$((20000 + RANDOM % 20000)); P1=$((P0 + 1)); }
start() {  # LOG RANK PEERS SOLVER [flags]
  local log=$1 rank=$2 peers=$3 solver=$4; shift 4
  "$BIN" train --solver="$solver" --peers="$peers" --rank="$rank" --job=cases --start_timeout=20 "$@" > "$log" 2>&1 &
  PIDS+=($!)
}
ends() {  # LOG: exit status and the last line
  echo "     $(basename "$1"): $(tail -n 1 "$1" | cut -c1-220)"
}
waitall() { local rc=0 s; for pid in "$@"; do wait "$pid" && s=0 || s=$?; echo -n "exit $s; "; done; echo; }

for c in $CASES; do
  ports
  peers=udp://127.0.0.1:$P0,udp://127.0.0.1:$P1
  case $c in
    solver|net)
      solver_file a
      if [[ $c == solver ]]; then
        solver_file b -e "s|^base_lr:.*|base_lr: 0.5|"
      else
        sed -e "0,/num_output: 500/s//num_output: 400/" "$NET" > "$OUT/net400.prototxt"
        solver_file b -e "s|^net:.*|net: \"$OUT/net400.prototxt\"|"
      fi
      echo "== $c: machine 1 runs another $c"
      start "$OUT/$c.m0.log" 0 "$peers" "$OUT/a.prototxt" --iterations=200; a=$!
      start "$OUT/$c.m1.log" 1 "$peers" "$OUT/b.prototxt" --iterations=200; b=$!
      echo -n "     "; waitall $a $b; ends "$OUT/$c.m0.log"; ends "$OUT/$c.m1.log" ;;
    reversed)
      solver_file a
      echo "== reversed: machine 1 has --peers in the other order"
      start "$OUT/rev.m0.log" 0 "$peers" "$OUT/a.prototxt" --iterations=200; a=$!
      start "$OUT/rev.m1.log" 0 "udp://127.0.0.1:$P1,udp://127.0.0.1:$P0" "$OUT/a.prototxt" --iterations=200; b=$!
      echo -n "     "; waitall $a $b; ends "$OUT/rev.m0.log"; ends "$OUT/rev.m1.log" ;;
    signal|sighup)
      solver_file "$c"
      sig=INT; [[ $c == sighup ]] && sig=HUP
      echo "== $c: SIG$sig to machine 1 (a follower) at about 400 global iterations"
      iters=100000; [[ $c == sighup ]] && iters=1200
      start "$OUT/$c.m0.log" 0 "$peers" "$OUT/$c.prototxt" --iterations=$iters; a=$!
      start "$OUT/$c.m1.log" 1 "$peers" "$OUT/$c.prototxt" --iterations=$iters; b=$!
      for ((t = 0; t < 600; ++t)); do
        grep -q "Iteration [4-9][0-9][0-9]\|Iteration [0-9]\{4,\}" "$OUT/$c.m0.log" && break; sleep 0.1
      done
      kill -$sig $b
      echo -n "     "; waitall $a $b
      echo "     snapshots: $(cd "$OUT" && ls "$c"_iter_*.caffemodel 2>/dev/null | tr '\n' ' ')"
      grep -h "Snapshotting to\|stopped early\|Optimization Done" "$OUT/$c.m0.log" | sed 's/^.*\] /     m0: /'
      grep -h "Optimization\|stop" "$OUT/$c.m1.log" | tail -n 2 | sed 's/^.*\] /     m1: /'
      echo "     iterations run: m0 $(sed -n 's/.*ran \([0-9]*\) iterations.*/\1/p' "$OUT/$c.m0.log"), m1 $(sed -n 's/.*ran \([0-9]*\) iterations.*/\1/p' "$OUT/$c.m1.log")" ;;
    *) echo "steer_cases.sh: unknown case $c"; exit 2 ;;
  esac
done
