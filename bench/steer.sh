#!/usr/bin/env bash
# A 2-machine job (two `hogstream train --peers=...` processes on UDP loopback, LeNet on
# Fashion-MNIST) with an attacker on its wire: its accuracy and every refused frame by reason,
# against the same job undisturbed; and its throughput with and without --job-key (the MAC's
# cost), in one sitting.
#
#   bench/steer.sh
#   1. the MAC's cost: REPEAT pairs of runs, keyed and unkeyed in turn, undisturbed; the median
#      of the job's iterations per second (both machines) for each;
#   2. keyed, undisturbed, while build/frame_flood records every frame the machines send each
#      other (an earlier run, to replay);
#   3. keyed, while frame_flood sends FLOOD datagrams to both machines (spread over the run's
#      expected time, from 3 s in): garbage, frames forged
#      without the key (from a stranger's address and from the other machine's), and run 2's
#      frames replayed to their original machine from their original address.
#   env: ITER=2000 FLOOD=1000000 REPEAT=2 SOLVER=configs/lenet/solver.prototxt BUILD_DIR=build
#        OUT=out/steer
# Needs root (frame_flood reads lo with AF_PACKET and forges source addresses).
set -euo pipefail
HS_ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$HS_ROOT"
ITER=${ITER:-2000}
FLOOD=${FLOOD:-1000000}
REPEAT=${REPEAT:-2}
SOLVER=${SOLVER:-configs/lenet/solver.prototxt}
BUILD_DIR=${BUILD_DIR:-build}
OUT=${OUT:-out/steer}
BIN=$BUILD_DIR/hogstream
FLOODER=$BUILD_DIR/frame_flood
[[ $(id -u) == 0 ]] || { echo "steer.sh: needs root (AF_PACKET capture, forged source addresses)"; exit 77; }
[[ -x $BIN && -x $FLOODER ]] || { echo "steer.sh: build $BIN and $FLOODER first"; exit 1; }
[[ -d data/fashion-mnist/train_lmdb ]] || { echo "steer.sh: run scripts/demo.sh once (it converts Fashion-MNIST)"; exit 1; }
mkdir -p "$OUT"
PIDS=()
cleanup() { for pid in "${PIDS[@]}"; do kill -9 "$pid" 2>/dev/null || true; done; }
trap cleanup EXIT
source "$HS_ROOT/bench/frozen_build.sh"
hs_freeze_build  # a rebuild meanwhile cannot touch the sitting
BIN=$BUILD_DIR/hogstream

sed -e "s|^snapshot_prefix:.*|snapshot_prefix: \"$OUT/steer\"|" -e "s|^test_interval:.*|test_interval: $ITER|" \
    -e "s|^snapshot:.*|snapshot: 0|" "$SOLVER" > "$OUT/solver.prototxt"
head -c 64 /dev/urandom > "$OUT/key"
P0=$((20000 + RANDOM % 20000)); P1=$((P0 + 1))
PEERS=udp://127.0.0.1:$P0,udp://127.0.0.1:$P1

# run NAME [flags...]: both machines, waits for both; logs in $OUT/NAME.m{0,1}.log
run() {
  local name=$1; shift
  local pids=()
  for r in 0 1; do
    "$BIN" train --solver="$OUT/solver.prototxt" --iterations="$ITER" --peers="$PEERS" --rank=$r --job=steer "$@" \
      > "$OUT/$name.m$r.log" 2>&1 &
    pids+=($!); PIDS+=($!)
  done
  local rc=0
  for pid in "${pids[@]}"; do wait "$pid" || rc=$?; done
  return $rc
}
accuracy() { grep "Test net output #0: accuracy" "$1" | tail -1 | sed 's/.*accuracy = //'; }
rate() { sed -n 's/.*ran [0-9]* iterations in [0-9.]* s (\([0-9.]*\) iter\/s).*/\1/p' "$1" | tail -1; }
refused() { grep -o "refused: .*" "$1" | tail -1; }

total() { echo "$(rate "$1.m0.log") $(rate "$1.m1.log")" | awk '{print $1 + $2}'; }
median() { sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }

echo "== 1. the MAC's cost: $REPEAT x (keyed, unkeyed), undisturbed: $BIN train --peers=$PEERS --job=steer [--job-key=KEY]"
keyed_rates=() plain_rates=()
for ((i = 0; i < REPEAT; ++i)); do
  run "mac$i" --job-key="$OUT/key"; keyed_rates+=("$(total "$OUT/mac$i")")
  run "nomac$i"; plain_rates+=("$(total "$OUT/nomac$i")")
  echo "   pair $i: keyed ${keyed_rates[-1]} iter/s, unkeyed ${plain_rates[-1]} iter/s"
done
echo "== 2. keyed, undisturbed, every frame recorded"
"$FLOODER" capture "$P0,$P1" 50000 "$OUT/capture.bin" 32 > "$OUT/capture.log" 2>&1 &
CAP=$!; PIDS+=($CAP)
sleep 0.5
run keyed --job-key="$OUT/key"
kill "$CAP" 2>/dev/null || true; wait "$CAP" 2>/dev/null || true
echo "== 3. keyed, $FLOOD datagrams thrown at both machines"
# Spread over about the time the undisturbed run took, starting 3 s in (once both machines run).
secs=$(sed -n 's/.*ran [0-9]* iterations in \([0-9.]*\) s.*/\1/p' "$OUT/keyed.m0.log" | tail -1)
flood_rate=$(awk -v n="$FLOOD" -v s="${secs:-30}" 'BEGIN {t = s - 6; if (t < 5) t = 5; print n / t}')
"$FLOODER" flood "$P0,$P1" "$FLOOD" "$flood_rate" steer "$OUT/key" "$OUT/capture.bin" > "$OUT/flood.log" 2>&1 &
FL=$!; PIDS+=($FL)
for ((t = 0; t < 600; ++t)); do grep -q ready "$OUT/flood.log" && break; sleep 0.1; done  # loaded; 3 s to go
run attacked --job-key="$OUT/key" || true
wait "$FL" 2>/dev/null || true

echo
cat "$OUT/flood.log"
printf "MAC's cost: median job iter/s keyed %s, unkeyed %s (%s pairs)\n" \
  "$(printf '%s\n' "${keyed_rates[@]}" | median)" "$(printf '%s\n' "${plain_rates[@]}" | median)" "$REPEAT"
printf "%-22s %9s %12s %12s\n" run accuracy "m0 iter/s" "m1 iter/s"
for n in mac0 nomac0 keyed attacked; do
  printf "%-22s %9s %12s %12s\n" "$n" "$(accuracy "$OUT/$n.m0.log")" "$(rate "$OUT/$n.m0.log")" "$(rate "$OUT/$n.m1.log")"
done
echo "refused while attacked:"
for r in 0 1; do echo "  machine $r: $(refused "$OUT/attacked.m$r.log")"; done
echo "  (foreign = another job, an address not in --peers, or a frame claiming another machine; bad MAC;"
echo "   malformed = no frame of ours; control = control messages refused; stale data = positions and"
echo "   deltas not current (replays of another run land here); dropped by the kernel = never read)"
