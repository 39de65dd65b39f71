#!/usr/bin/env bash
# Scale-out, measured honestly on one host: N "machines", each a network namespace on a bridge
# whose processes are held to the same CPU share by a cgroup of their own (v1 cpu.cfs_quota_us
# or v2 cpu.max, whichever the host has), so N machines use N x SHARE cores of this host and
# share nothing else. For each N in COUNTS: hogstream (one `hogstream train --peers=...` per
# machine, one solver each) and, with PEER=1, a PyTorch DistributedDataParallel twin (gloo,
# Debian's python3-torch, the same caps and the same per-machine batch). Each is scaled against
# its own 1-machine run at the same share, in the same sitting.
#
#   bench/scaleout.sh [lenet|cifar]          (needs root: namespaces, cgroups; cifar: the data
#                                             from scripts/cifar10.sh)
#   env: COUNTS="1 2 4 8"  MODE=mcast|udp|raw  SHARE=auto (0.4 up to 4 machines, 0.2 for more)
#        ITER=6000 (global iterations; cifar: 5000)  TARGET=0.89 (cifar: 0.75)  PEER=1
#        PERIOD_US=10000 (the cgroup's CPU period)  ROUNDS=1 (repeat the whole table)
#        EXTRA="more hogstream flags"  BUILD_DIR=build  SLOW=K:S (machine K of each job of
#        several machines at share S: a straggler; the leader names it, "lags", in its log)
#        STATS=1 (each machine writes its figures to OUT/TAG.mK.json: --stats_json)
#        BASE=0 (no 1-machine baseline: the counts' rows only, without speed-up)
#        OUT=out/scaleout  DEADLINE=1800 (seconds per run)  RUNS_ONLY=1 (no table: divergence
#        counts; prints one line per run)  DDP_STOP=1 (the DDP twin ends at its first test at
#        TARGET, its "final" is then that accuracy: its engine is several times slower per core
#        than ours, and a whole sitting would otherwise take hours; 0: every iteration)
# Prints one row per (system, N): time to TARGET, speed-up and efficiency against N = 1, final
# accuracy, wall time, and for hogstream the leader's staleness and bytes. A run that diverged
# (a non-finite loss, or no accuracy) is marked so; one whose net ended dead (a final accuracy
# at chance: below DEAD=0.15 on these 10-class sets) is marked "dead".
set -euo pipefail
HS_ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$HS_ROOT"
NET=${1:-lenet}
COUNTS=${COUNTS:-1 2 4 8}
# The cgroup's accounting period: a share s runs s x PERIOD_US of every PERIOD_US. 10 ms, not
# the kernel's default 100 ms, which holds a busy machine of 0.4 core off the CPU for 60 ms at a
# time (no real machine of 0.4 the speed stalls so; docs/experiments/2026-11-28-cgroup-period.md).
PERIOD_US=${PERIOD_US:-10000}
MODE=${MODE:-mcast}
PEER=${PEER:-1}
ROUNDS=${ROUNDS:-1}
BUILD_DIR=${BUILD_DIR:-build}
OUT=${OUT:-out/scaleout}
DEADLINE=${DEADLINE:-1800}
case $NET in
  lenet) SOLVER=${SOLVER:-configs/lenet/solver.prototxt}; ITER=${ITER:-6000}; TARGET=${TARGET:-0.89} ;;
  cifar) SOLVER=${SOLVER:-configs/cifar10/quick_5k_solver.prototxt}; ITER=${ITER:-5000}; TARGET=${TARGET:-0.75}
         [[ -d data/cifar10/train_lmdb && -f data/cifar10/bin/test_batch.bin ]] ||
           { echo "scaleout.sh: no CIFAR-10 in data/cifar10: run scripts/cifar10.sh first"; exit 1; } ;;
  *) echo "scaleout.sh: lenet or cifar"; exit 2 ;;
esac
export TARGET
[[ $(id -u) == 0 ]] || { echo "scaleout.sh: needs root (namespaces, cgroups)"; exit 77; }
[[ -x $BUILD_DIR/hogstream ]] || { echo "scaleout.sh: build $BUILD_DIR/hogstream first (scripts/test.sh)"; exit 1; }
source "$HS_ROOT/bench/log_times.sh"

# The CPU controller: v1 (a cpu hierarchy) or v2 (cpu.max in the unified tree).
if [[ -f /sys/fs/cgroup/cpu/cpu.cfs_quota_us ]]; then
  CG_ROOT=/sys/fs/cgroup/cpu CG_KIND=v1
elif [[ -f /sys/fs/cgroup/cgroup.controllers ]] && grep -qw cpu /sys/fs/cgroup/cgroup.controllers; then
  CG_ROOT=/sys/fs/cgroup CG_KIND=v2
  grep -qw cpu /sys/fs/cgroup/cgroup.subtree_control || echo +cpu > /sys/fs/cgroup/cgroup.subtree_control
else
  echo "scaleout.sh: no CPU cgroup controller (v1 cpu or v2 cpu.max) on this host"; exit 77
fi

P=hss$$
NS=() CGS=() PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
  sleep 0.2
  for ns in "${NS[@]}"; do ip netns del "$ns" 2>/dev/null || true; done
  for cg in "${CGS[@]}"; do rmdir "$cg" 2>/dev/null || true; done
  NS=() CGS=() PIDS=()
}
trap cleanup EXIT
source "$HS_ROOT/bench/frozen_build.sh"
hs_freeze_build  # a rebuild meanwhile cannot touch the sitting

# machines N: namespaces ${P}m0.., bridge ${P}br, addresses 10.79.0.(i+1), cgroups at SHARE.
setup() {
  local n=$1 share=$2
  NS+=("${P}br")
  ip netns add "${P}br"
  ip -n "${P}br" link add br0 type bridge
  ip -n "${P}br" link set br0 up
  for ((i = 0; i < n; ++i)); do
    local ns=${P}m$i
    NS+=("$ns")
    ip netns add "$ns"
    ip link add "e$i$P" type veth peer name "p$i$P"
    ip link set "e$i$P" netns "$ns"
    ip link set "p$i$P" netns "${P}br"
    ip -n "$ns" link set "e$i$P" name eth0
    ip -n "${P}br" link set "p$i$P" master br0 up
    ip -n "$ns" link set eth0 up
    ip -n "$ns" link set lo up
    ip -n "$ns" addr add "10.79.0.$((i + 1))/24" dev eth0
    ip -n "$ns" route add 224.0.0.0/4 dev eth0
    local cg=$CG_ROOT/${P}m$i
    mkdir -p "$cg"
    CGS+=("$cg")
    local s=$share  # SLOW=K:S: machine K of a job of several at share S (a straggler)
    [[ -n ${SLOW:-} ]] && ((n > 1 && i == ${SLOW%%:*})) && s=${SLOW#*:}
    local quota; quota=$(awk -v s="$s" -v p="$PERIOD_US" 'BEGIN { printf "%d", s * p }')
    if [[ $CG_KIND == v1 ]]; then
      echo "$PERIOD_US" > "$cg/cpu.cfs_period_us"
      echo "$quota" > "$cg/cpu.cfs_quota_us"
    else
      echo "$quota $PERIOD_US" > "$cg/cpu.max"
    fi
  done
}
# run_in i LOG CMD...: machine i's namespace and cgroup (the cgroup first: `ip netns exec`
# remounts /sys).
run_in() {
  local i=$1 log=$2; shift 2
  sh -c 'echo $$ > "$1/cgroup.procs"; shift; exec "$@"' sh "$CG_ROOT/${P}m$i" ip netns exec "${P}m$i" "$@" > "$log" 2>&1 &
  PIDS+=($!)
}
wait_all() {  # every pid, within DEADLINE; 1 if past it
  local t0=$SECONDS
  while :; do
    local running=0
    for pid in "${PIDS[@]}"; do kill -0 "$pid" 2>/dev/null && running=1; done
    [[ $running == 0 ]] && break
    if (( SECONDS - t0 > DEADLINE )); then echo "scaleout.sh: a run passed the ${DEADLINE}s deadline" >&2; return 1; fi
    sleep 0.5
  done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  return 0
}

mkdir -p "$OUT"
sed -e "s|^snapshot_prefix:.*|snapshot_prefix: \"$OUT/snap\"|" -e "s|^snapshot:.*|snapshot: 0|" "$SOLVER" > "$OUT/solver.prototxt"

# A final accuracy at chance: the net died (held short of NaN, it learns nothing) though no loss
# went non-finite.
DEAD=${DEAD:-0.15}
dead_net() { [[ -n $1 && $1 != nan && $1 != - ]] && awk -v a="$1" -v d="$DEAD" 'BEGIN { exit !(a < d) }'; }

# One hogstream run of n machines: prints "time_to_target final wall staleness bytes diverged".
hogstream_run() {
  local n=$1 share=$2 tag=$3
  setup "$n" "$share"
  local peers=() i
  for ((i = 0; i < n; ++i)); do peers+=("10.79.0.$((i + 1)):7000"); done
  local flags=(train --solver="$OUT/solver.prototxt" --iterations="$ITER")
  if ((n > 1)); then
    case $MODE in
      udp) flags+=(--peers="udp://$(IFS=,; echo "${peers[*]}")") ;;
      mcast) flags+=(--peers="udp://$(IFS=,; echo "${peers[*]}")" --multicast=239.7.7.7:7001) ;;
      raw) local macs=()
           for ((i = 0; i < n; ++i)); do macs+=("$(ip -n "${P}m$i" -br link show eth0 | awk '{print $3}')"); done
           flags+=(--peers="raw://$(IFS=,; echo "${macs[*]}")" --multicast=on) ;;
    esac
    flags+=(--job="scale$$$tag")
  fi
  # shellcheck disable=SC2206
  [[ -n ${EXTRA:-} ]] && flags+=($EXTRA)
  local t0; t0=$(date +%s.%N)
  for ((i = 0; i < n; ++i)); do
    local own=()
    [[ ${STATS:-0} == 1 ]] && own=(--stats_json="$OUT/$tag.m$i.json")
    run_in "$i" "$OUT/$tag.m$i.log" "$BUILD_DIR/hogstream" "${flags[@]}" "${own[@]}"
  done
  wait_all || true
  local wall; wall=$(echo "$(date +%s.%N) - $t0" | bc)
  cleanup
  local lead=$OUT/$tag.m0.log
  local diverged=no
  grep -qE "loss is (nan|-?inf)|diverged|every copy" "$OUT"/$tag.m*.log && diverged=yes
  local acc; acc=$(final_accuracy "$lead" || true)
  [[ -z $acc ]] && diverged=yes
  [[ $diverged == no ]] && dead_net "$acc" && diverged=dead
  local st by
  st=$(grep -oE "staleness [0-9.]+ it \(max [0-9]+\)" "$lead" | tail -1 | awk '{print $2 "/" $5}' | tr -d ')' || true)
  by=$(grep -oE "sent [0-9.]+ GB" "$lead" | tail -1 | awk '{print $2}' || true)
  printf "%s %s %.1f %s %s %s\n" "$(time_to_target "$lead")" "${acc:--}" "$wall" "${st:--}" "${by:--}" "$diverged"
}

# One DDP run of n machines: the same figures (staleness and bytes "-").
ddp_run() {
  local n=$1 share=$2 tag=$3
  setup "$n" "$share"
  local i t0; t0=$(date +%s.%N)
  for ((i = 0; i < n; ++i)); do
    run_in "$i" "$OUT/$tag.m$i.log" env OMP_NUM_THREADS=1 MASTER_ADDR=10.79.0.1 MASTER_PORT=29500 WORLD_SIZE="$n" RANK="$i" \
      GLOO_SOCKET_IFNAME=eth0 /usr/bin/python3 "$HS_ROOT/bench/ddp_twin.py" --net "$NET" --iterations "$ITER" \
      --stop-at "$([[ ${DDP_STOP:-1} == 1 ]] && echo "$TARGET" || echo 0)"
  done
  wait_all || true
  local wall; wall=$(echo "$(date +%s.%N) - $t0" | bc)
  cleanup
  local lead=$OUT/$tag.m0.log acc diverged=no
  acc=$(final_accuracy "$lead" || true)
  [[ -z $acc ]] && diverged=yes
  grep -qiE "nan" "$lead" && diverged=yes
  [[ $diverged == no ]] && dead_net "$acc" && diverged=dead
  printf "%s %s %.1f - - %s\n" "$(time_to_target "$lead")" "${acc:--}" "$wall" "$diverged"
}

share_for() { [[ -n ${SHARE:-} && ${SHARE:-} != auto ]] && echo "$SHARE" || { (($1 <= 4)) && echo 0.4 || echo 0.2; }; }

if [[ ${RUNS_ONLY:-0} == 1 ]]; then  # repeated runs of each N, one line each (divergence counts)
  for ((r = 1; r <= ROUNDS; ++r)); do
    for n in $COUNTS; do
      echo "run $r, $n machines ($MODE, share $(share_for "$n")): $(hogstream_run "$n" "$(share_for "$n")" "r$r.n$n")"
    done
  done
  exit 0
fi

systems=(hogstream)
if [[ $PEER == 1 ]]; then
  if /usr/bin/python3 -c "import torch" 2>/dev/null; then systems+=(ddp)
  else echo "scaleout.sh: no python3-torch: the DDP twin is left out (apt-get install python3-torch)"; fi
fi
echo "== scale-out: $NET, $MODE, ITER=$ITER global iterations, target $TARGET; COUNTS=$COUNTS$([[ ${DDP_STOP:-1} == 1 ]] && echo "; ddp stops at the target")"
printf "%-9s %2s %5s %9s %8s %6s %7s %8s %10s %7s %s\n" system N share "t_target" speedup effic final "wall_s" staleness "GB_out" diverged
for ((r = 1; r <= ROUNDS; ++r)); do
  declare -A base=()
  # Baselines (N = 1) at each share first, then the counts, interleaving the systems.
  for n in $COUNTS; do
    for sys in "${systems[@]}"; do
      share=$(share_for "$n")
      if [[ ${BASE:-1} == 0 ]]; then
        base[$sys$share]=-  # no baseline: no speed-up column
      elif [[ -z ${base[$sys$share]:-} ]]; then
        read -r t acc wall st by dv < <(${sys}_run 1 "$share" "r$r.$sys.base$share")
        base[$sys$share]=$t
        printf "%-9s %2s %5s %9s %8s %6s %7s %8s %10s %7s %s\n" "$sys" 1 "$share" "$t" 1.00 1.00 "$acc" "$wall" "$st" "$by" "$dv"
      fi
      [[ $n == 1 ]] && continue
      read -r t acc wall st by dv < <(${sys}_run "$n" "$share" "r$r.$sys.n$n")
      b=${base[$sys$share]}
      if [[ $t != - && $b != - ]]; then
        sp=$(echo "scale=2; $b / $t" | bc); ef=$(echo "scale=2; $b / $t / $n" | bc)
      else sp=- ef=-; fi
      printf "%-9s %2s %5s %9s %8s %6s %7s %8s %10s %7s %s\n" "$sys" "$n" "$share" "$t" "$sp" "$ef" "$acc" "$wall" "$st" "$by" "$dv"
    done
  done
done
