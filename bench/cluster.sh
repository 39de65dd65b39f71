#!/usr/bin/env bash
# Several "machines" on one host: network namespaces on a bridge, each running a real
# `hogstream train --peers=...` process, LeNet on Fashion-MNIST. Prints the leader's final test
# accuracy, the wall time, per-machine img/s, the link's Gbit/s and lost frames, and how each
# machine ended.
#
#   bench/cluster.sh [udp|mcast|raw] [plain|kill|leaderkill|rejoin|elastic]
#     udp    unicast UDP            mcast  UDP, positions multicast (239.7.7.7)
#     raw    raw Ethernet (AF_PACKET), positions to a group MAC: raw.bin SOLVER SOLVERS MAC1:MAC2:...
#     kill       machine N-1 killed (SIGKILL) at KILL_AT global iterations
#     leaderkill machine 0 (the leader) killed at KILL_AT
#     rejoin     machine N-1 killed at KILL_AT and started again REJOIN_AFTER seconds later
#     elastic    (udp, mcast) machine 1 leaves on notice (SIGUSR1) at LEAVE_AT global iterations,
#                a new machine (another namespace, not in the others' --peers) joins with
#                --join at JOIN_AT, and the leader (machine 0) leaves at LEADER_LEAVE_AT; every
#                machine has a --job-key. Each event's line gives the time and iteration.
#   BASELINE=1: first the same solver in one process with SOLVERS threads, on the host; then
#     both runs' time to TARGET test accuracy (default 0.89) and the cluster's ratio to it
#     (issue 10's scaling goal: MACHINES=4 SOLVERS=3, ratio <= 0.35, on a 16-core machine;
#     run it 3 times and quote the medians)
#   FOREIGN=1: a second job of as many machines (another --job, other ports, the same
#     multicast group or the same raw interfaces) trains on the same wire at the same time
#   env: MACHINES=3 SOLVERS=1 ITER=10000 KILL_AT=3000 REJOIN_AFTER=5 LOSS=0 MTU=1500
#        LEAVE_AT=2000 JOIN_AT=4000 LEADER_LEAVE_AT=6000 KEYED=0 (1: a --job-key for every scenario)
#        SWEEP_MS=20 SOLVER=configs/lenet/solver.prototxt BUILD_DIR=build OUT=out/cluster
#        EXTRA="more flags for every machine"  DEADLINE=3600 (seconds for the whole run)
# Needs root (namespaces; raw sockets). Deletes its namespaces on exit, whatever happens.
set -euo pipefail
HS_ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$HS_ROOT"
MODE=${1:-mcast}
SCENARIO=${2:-plain}
MACHINES=${MACHINES:-3}
SOLVERS=${SOLVERS:-1}
ITER=${ITER:-10000}
KILL_AT=${KILL_AT:-3000}
REJOIN_AFTER=${REJOIN_AFTER:-5}
LOSS=${LOSS:-0}
MTU=${MTU:-1500}
SWEEP_MS=${SWEEP_MS:-20}
SOLVER=${SOLVER:-configs/lenet/solver.prototxt}
BUILD_DIR=${BUILD_DIR:-build}
OUT=${OUT:-out/cluster}
DEADLINE=${DEADLINE:-3600}
BIN=$BUILD_DIR/hogstream
[[ $(id -u) == 0 ]] || { echo "cluster.sh: needs root (network namespaces)"; exit 77; }
[[ -x $BIN ]] || { echo "cluster.sh: build $BIN first (scripts/test.sh)"; exit 1; }
[[ -d data/fashion-mnist/train_lmdb ]] || { echo "cluster.sh: run scripts/demo.sh once (it converts Fashion-MNIST)"; exit 1; }
case $MODE in udp|mcast|raw) ;; *) echo "cluster.sh: mode udp, mcast or raw"; exit 2;; esac
case $SCENARIO in plain|kill|leaderkill|rejoin|elastic) ;; *) echo "cluster.sh: scenario plain, kill, leaderkill, rejoin or elastic"; exit 2;; esac
[[ $SCENARIO == elastic && $MODE == raw ]] && { echo "cluster.sh: elastic needs udp or mcast (raw knows its machines at the start)"; exit 2; }
LEAVE_AT=${LEAVE_AT:-2000}
JOIN_AT=${JOIN_AT:-4000}
LEADER_LEAVE_AT=${LEADER_LEAVE_AT:-6000}
NS=$MACHINES  # namespaces: one more for the elastic scenario's new machine
[[ $SCENARIO == elastic ]] && NS=$((MACHINES + 1))

P=hsc$$  # namespace prefix
PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
  for ((i = 0; i < NS; ++i)); do ip netns del "${P}m$i" 2>/dev/null || true; done
  ip netns del "${P}br" 2>/dev/null || true
}
trap cleanup EXIT
source "$HS_ROOT/bench/frozen_build.sh"
hs_freeze_build  # a rebuild meanwhile cannot touch the sitting
BIN=$BUILD_DIR/hogstream

ip netns add "${P}br"
ip -n "${P}br" link add br0 type bridge
ip -n "${P}br" link set br0 up
for ((i = 0; i < NS; ++i)); do
  ns=${P}m$i
  ip netns add "$ns"
  ip link add "eth$i$P" type veth peer name "p$i$P"
  ip link set "eth$i$P" netns "$ns"
  ip link set "p$i$P" netns "${P}br"
  ip -n "$ns" link set "eth$i$P" name eth0
  ip -n "${P}br" link set "p$i$P" master br0 mtu "$MTU" up
  ip -n "$ns" link set eth0 mtu "$MTU" up
  ip -n "$ns" link set lo up
  ip -n "$ns" addr add "10.78.0.$((i + 1))/24" dev eth0
  ip -n "$ns" route add 224.0.0.0/4 dev eth0
done
ip -n "${P}br" link set br0 mtu "$MTU"

peers=() macs=()
for ((i = 0; i < MACHINES; ++i)); do
  peers+=("10.78.0.$((i + 1)):7000")
  macs+=("$(ip -n "${P}m$i" -br link show eth0 | awk '{print $3}')")
done
case $MODE in
  udp) PEERS="udp://$(IFS=,; echo "${peers[*]}")"; MC=() ;;
  mcast) PEERS="udp://$(IFS=,; echo "${peers[*]}")"; MC=(--multicast=239.7.7.7:7001) ;;
  raw) PEERS="raw://$(IFS=,; echo "${macs[*]}")"; MC=(--multicast=on) ;;
esac
rm -rf "$OUT"
mkdir -p "$OUT"
sed -e "s|^snapshot_prefix:.*|snapshot_prefix: \"$OUT/lenet\"|" "$SOLVER" > "$OUT/solver.prototxt"
if [[ $MODE == raw ]]; then  # the seed's form: raw.bin SOLVER SOLVERS MAC1:MAC2:...
  BIN=$BUILD_DIR/raw.bin
  flags=("$OUT/solver.prototxt" "$SOLVERS" "$(IFS=:; echo "${macs[*]//:/}")" --iterations="$ITER")
else
  flags=(train --solver="$OUT/solver.prototxt" --solvers="$SOLVERS" --iterations="$ITER" --peers="$PEERS")
fi
flags+=("${MC[@]}" --sweep_ms="$SWEEP_MS" --job=cluster$$)
[[ $LOSS != 0 ]] && flags+=(--loss="$LOSS")
if [[ $SCENARIO == elastic || ${KEYED:-0} == 1 ]]; then
  head -c 64 /dev/urandom > "$OUT/job.key"
  flags+=(--job-key="$OUT/job.key")
fi
# shellcheck disable=SC2206
[[ -n ${EXTRA:-} ]] && flags+=($EXTRA)

start() {  # machine i, log suffix
  ip netns exec "${P}m$1" "$BIN" "${flags[@]}" > "$OUT/m$1$2.log" 2>&1 &
  PIDS[$1]=$!
}
source "$HS_ROOT/bench/log_times.sh"  # time_to_target, final_accuracy
if [[ ${BASELINE:-0} == 1 ]]; then
  echo "== baseline: one process, $SOLVERS solver threads: $BUILD_DIR/hogstream train --solver=$OUT/solver.prototxt --solvers=$SOLVERS --iterations=$ITER"
  tb0=$(date +%s.%N)
  "$BUILD_DIR/hogstream" train --solver="$OUT/solver.prototxt" --solvers="$SOLVERS" --iterations="$ITER" > "$OUT/single.log" 2>&1
  printf "baseline wall time: %.1f s, final accuracy %s, time to %s: %s s\n" "$(echo "$(date +%s.%N) - $tb0" | bc)" \
    "$(final_accuracy "$OUT/single.log")" "$TARGET" \
    "$(time_to_target "$OUT/single.log")"
  rm -f "$OUT"/lenet_iter_*  # the cluster's snapshots next
fi
echo "== $MACHINES machines, $MODE, $SCENARIO: $BIN ${flags[*]}"
t0=$(date +%s.%N)
for ((i = 0; i < MACHINES; ++i)); do start $i ""; done
if [[ ${FOREIGN:-0} == 1 ]]; then  # another job on the same wire
  sed -e "s|^snapshot_prefix:.*|snapshot_prefix: \"$OUT/foreign\"|" "$OUT/solver.prototxt" > "$OUT/foreign.prototxt"
  fflags=()
  for a in "${flags[@]}"; do
    case $a in
      --job=*) fflags+=(--job=foreign$$) ;;
      --peers=udp://*) fflags+=("${a//:7000/:7100}") ;;
      *solver.prototxt) fflags+=("${a/solver.prototxt/foreign.prototxt}") ;;  # --solver=F, or raw.bin's F
      *) fflags+=("$a") ;;
    esac
  done
  echo "== and a foreign job on the same wire: $BIN ${fflags[*]}"
  for ((i = 0; i < MACHINES; ++i)); do
    ip netns exec "${P}m$i" "$BIN" "${fflags[@]}" > "$OUT/f$i.log" 2>&1 &
    PIDS+=($!)
  done
fi

# The global iteration as the leader's log last displayed it.
global_iter() {
  cat "$OUT"/m*.log 2>/dev/null | grep -oE "Iteration [0-9]+ \(" | awk '{print $2}' | sort -n | tail -1
}
victim=-1
case $SCENARIO in kill|rejoin) victim=$((MACHINES - 1)) ;; leaderkill) victim=0 ;; esac
killed=0 restarted=0 kill_time=0
left1=0 joined=0 left0=0
elapsed() { echo "$(date +%s.%N) - $t0" | bc | cut -c1-6; }
while :; do
  now=$(date +%s.%N)
  if (( $(echo "$now - $t0 > $DEADLINE" | bc) )); then echo "cluster.sh: past the ${DEADLINE}s deadline"; exit 1; fi
  if [[ $SCENARIO == elastic ]]; then
    it=$(global_iter || echo 0)
    it=${it:-0}
    if [[ $left1 == 0 && $it -ge $LEAVE_AT ]]; then
      kill -USR1 "${PIDS[1]}"; left1=1
      echo "== machine 1 asked to leave (SIGUSR1) at iteration $it, $(elapsed) s"
    fi
    if [[ $joined == 0 && $it -ge $JOIN_AT ]]; then
      jflags=()
      for a in "${flags[@]}"; do
        case $a in --peers=*) jflags+=("$a,10.78.0.$((MACHINES + 1)):7000") ;; *) jflags+=("$a") ;; esac
      done
      jflags+=(--join --rank="$MACHINES")
      ip netns exec "${P}m$MACHINES" "$BIN" "${jflags[@]}" > "$OUT/m$MACHINES.log" 2>&1 &
      PIDS[$MACHINES]=$!; joined=1
      echo "== machine $MACHINES (new) started with --join at iteration $it, $(elapsed) s"
    fi
    if [[ $left0 == 0 && $it -ge $LEADER_LEAVE_AT ]]; then
      kill -USR1 "${PIDS[0]}"; left0=1
      echo "== machine 0 (the leader) asked to leave (SIGUSR1) at iteration $it, $(elapsed) s"
    fi
  fi
  if [[ $victim -ge 0 && $killed == 0 && $(global_iter || echo 0) -ge $KILL_AT ]] 2>/dev/null; then
    kill -9 "${PIDS[$victim]}"; killed=1; kill_time=$now
    echo "== killed machine $victim (SIGKILL) at iteration $(global_iter), $(echo "$now - $t0" | bc | cut -c1-6) s"
  fi
  if [[ $SCENARIO == rejoin && $killed == 1 && $restarted == 0 ]] &&
     (( $(echo "$now - $kill_time > $REJOIN_AFTER" | bc) )); then
    start "$victim" .rejoin; restarted=1
    echo "== restarted machine $victim at iteration $(global_iter)"
  fi
  running=0
  for pid in "${PIDS[@]}"; do kill -0 "$pid" 2>/dev/null && running=1; done
  [[ $running == 0 ]] && break
  sleep 0.5
done
for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
t1=$(date +%s.%N)

echo "== results ($MODE, $SCENARIO, $MACHINES x $SOLVERS solvers, $ITER global iterations, loss $LOSS)"
printf "wall time: %.1f s\n" "$(echo "$t1 - $t0" | bc)"
for f in "$OUT"/m*.log "$OUT"/f*.log; do
  [[ -f $f ]] || continue
  m=$(basename "$f" .log)
  end=$(grep -hoE "Optimization Done.*|Optimization stopped early|(Stopped|Ended) early: .*|Left the job.*|raw.bin: .*|hogstream: .*" "$f" | tail -1 || true)
  acc=$(grep "Test net output #0: accuracy" "$f" | tail -1 | sed 's/.*accuracy = //' || true)
  net=$(grep "Network: machine [0-9]* leads" "$f" | tail -1 | sed 's/.*\] //' || true)
  echo "$m: ${end:-(no end: killed)}${acc:+; last test accuracy $acc}"
  [[ -n $net ]] && echo "    $net"
  grep -hoE "Network: machine [0-9]+ \([^)]*\) has left the job [0-9.]+ s after the notice.*|Network: machine [0-9]+ \([^)]*\) has the weights after.*|Network: machine [0-9]+ \([^)]*\) joins a running job at iteration [0-9]+" "$f" |
    sed 's/^/    /' || true
done
lead=$(grep -l "Optimization Done.$" "$OUT"/m*.log 2>/dev/null | head -1 || true)
if [[ -n $lead ]]; then
  echo "final accuracy (leader $(basename "$lead" .log)): $(final_accuracy "$lead")"
  tc=$(time_to_target "$lead")
  echo "time to $TARGET: $tc s"
  if [[ ${BASELINE:-0} == 1 ]]; then
    tb=$(time_to_target "$OUT/single.log")
    if [[ $tb != - && $tc != - ]]; then
      echo "ratio to one process with $SOLVERS threads: $(echo "scale=3; $tc / $tb" | bc) (cluster $tc s / one process $tb s)"
    fi
  fi
fi
ls "$OUT"/lenet_iter_*.caffemodel 2>/dev/null | tail -2 || true
