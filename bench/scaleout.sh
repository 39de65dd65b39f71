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
#        SNAP=100 (the two efficiencies: every SNAP global iterations the leader snapshots the
#        job's weights, no test runs inside the job, and after the run each snapshot is scored
#        on the whole test set outside the cgroups; 0: the job tests itself every test_interval
#        as before, and the SE/HE columns are left out)
#        DDP="n" (the DDP rows, one per variant: n, half, sqrt, one = the base rate times N, N/2,
#        sqrt N, 1 after a warm-up of DDP_WARMUP=500 global iterations; local = PyTorch's
#        post-local SGD, the models averaged every DDP_LOCAL_H=8 steps after the warm-up)
#        HOGSTREAM=0 (the DDP rows alone)  BASE=0 (no 1-machine baseline: the counts' rows only, without speed-up)
#        OUT=out/scaleout  DEADLINE=1800 (seconds per run)  RUNS_ONLY=1 (no table: divergence
#        counts; prints one line per run)  DDP_STOP=1 (SNAP=0 only: the DDP twin ends at its first test at
#        TARGET, its "final" is then that accuracy: its engine is several times slower per core
#        than ours, and a whole sitting would otherwise take hours; 0: every iteration)
# Prints one row per (system, N): time to TARGET, speed-up and efficiency against N = 1, final
# accuracy, wall time, and for hogstream the leader's staleness and bytes. With SNAP (the
# default) also: the global iteration where the curve crosses TARGET (interpolated between
# snapshots), the statistical efficiency SE = the lone machine's crossing / the job's, the
# hardware efficiency HE = global iterations per second per machine / the lone machine's (both
# between the first and last snapshot), each machine's CPU against its share (the cgroups'
# accounting), the ratio 1 / (N SE HE) this predicts beside the measured time ratio, and with
# ROUNDS > 1 the medians over the rounds (each round its own seed: random_seed, --seed). A run that diverged
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
DDP=${DDP:-n}                  # the DDP variants: n half sqrt one local (ddp_run)
DDP_WARMUP=${DDP_WARMUP:-500}  # global iterations of the DDP rate ramp
DDP_LOCAL_H=${DDP_LOCAL_H:-8}  # post-local SGD: local steps between averages
ROUNDS=${ROUNDS:-1}
BUILD_DIR=${BUILD_DIR:-build}
OUT=${OUT:-out/scaleout}
SNAP=${SNAP:-100}
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
# Each machine's CPU time: v2's cpu.stat; in v1 a cpuacct group beside the cpu one, where the
# host mounts that controller apart ("-": not counted).
ACCT_ROOT=-
if [[ $CG_KIND == v2 ]]; then ACCT_ROOT=$CG_ROOT
elif [[ -f /sys/fs/cgroup/cpuacct/cpuacct.usage ]]; then ACCT_ROOT=/sys/fs/cgroup/cpuacct
elif [[ -f $CG_ROOT/cpuacct.usage ]]; then ACCT_ROOT=$CG_ROOT
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
    if [[ $ACCT_ROOT != - && $ACCT_ROOT != "$CG_ROOT" ]]; then
      mkdir -p "$ACCT_ROOT/${P}m$i"
      CGS+=("$ACCT_ROOT/${P}m$i")
    fi
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
  local acct=-
  [[ $ACCT_ROOT != - && $ACCT_ROOT != "$CG_ROOT" ]] && acct=$ACCT_ROOT/${P}m$i
  sh -c 'echo $$ > "$1/cgroup.procs"; [ "$2" = - ] || echo $$ > "$2/cgroup.procs"; shift 2; exec "$@"' sh \
    "$CG_ROOT/${P}m$i" "$acct" ip netns exec "${P}m$i" "$@" > "$log" 2>&1 &
  PIDS+=($!)
}
# cpu_share n share wall: the machines' mean CPU time over wall x share, in percent ("-" where
# the host does not count it). Read before cleanup removes the groups.
cpu_share() {
  local n=$1 share=$2 wall=$3 i total=0 v
  [[ $ACCT_ROOT == - ]] && { echo -; return; }
  for ((i = 0; i < n; ++i)); do
    if [[ $CG_KIND == v2 ]]; then v=$(awk '$1 == "usage_usec" { printf "%.3f", $2 / 1e6 }' "$ACCT_ROOT/${P}m$i/cpu.stat")
    else v=$(awk '{ printf "%.3f", $1 / 1e9 }' "$ACCT_ROOT/${P}m$i/cpuacct.usage"); fi
    total=$(echo "$total + ${v:-0}" | bc -l)
  done
  awk -v t="$total" -v n="$n" -v s="$share" -v w="$wall" 'BEGIN { printf "%.0f", 100 * t / (n * s * w) }'
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
# solver_for TAG ROUND: the run's copy of the solver, OUT/TAG.solver.prototxt. With SNAP: a
# snapshot every SNAP global iterations into OUT/TAG.snap/ and no test inside the job; the
# round's random_seed either way.
solver_for() {
  local tag=$1 round=$2 dir=$OUT/$1.snap
  rm -rf "$dir"
  mkdir -p "$dir"
  local snap=(-e "s|^snapshot:.*|snapshot: 0|")
  ((SNAP > 0)) && snap=(-e "s|^snapshot:.*|snapshot: $SNAP|" -e "s|^test_interval:.*|test_interval: 1000000000|"
                        -e "/^test_initialization:/d")
  sed -e "s|^snapshot_prefix:.*|snapshot_prefix: \"$dir/s\"|" "${snap[@]}" -e "/^random_seed:/d" "$SOLVER" \
    > "$OUT/$tag.solver.prototxt"
  echo "random_seed: $round" >> "$OUT/$tag.solver.prototxt"
  ((SNAP > 0)) && echo "test_initialization: false" >> "$OUT/$tag.solver.prototxt"
  echo "$OUT/$tag.solver.prototxt"
}
NET_PROTO=$(sed -n 's/^net: *"\(.*\)".*/\1/p' "$SOLVER")
TEST_ITER=$(sed -n 's/^test_iter: *\([0-9]*\).*/\1/p' "$SOLVER" | head -1)
# snapshot_curve SYSTEM DIR T0: one line per snapshot, "global_iteration seconds accuracy" in
# order (seconds since T0, from the file's time; accuracy on the whole test set, "nan" where
# the weights are not finite), scored here, outside the machines' cgroups, by every core.
snapshot_curve() {
  local sys=$1 dir=$2 t0=$3
  if [[ $sys == hogstream ]]; then
    find "$dir" -name '*.caffemodel' -printf '%T@ %p\n' | sed -E 's/^([0-9.]+) (.*_iter_([0-9]+)\.caffemodel)$/\3 \1 \2/' |
      sort -n | xargs -P "$(nproc)" -n 3 sh -c '
        out=$("$0" test --model="$1" --weights="$5" --iterations="$2" 2>&1)
        acc=$(echo "$out" | sed -n "s/^.*\] accuracy = \([0-9.]*\).*$/\1/p" | tail -1)
        echo "$out" | grep -qiE "Loss: .*(nan|inf)" && acc=nan
        echo "$3 $4 ${acc:-nan}"' "$BUILD_DIR/hogstream" "$NET_PROTO" "$TEST_ITER" |
      sort -n | awk -v t0="$t0" '{ printf "%d %.2f %s\n", $1, $2 - t0, $3 }'
  else
    join <(find "$dir" -name 'iter_*.pt' -printf '%T@ %f\n' | sed -E 's/^([0-9.]+) iter_([0-9]+)\.pt$/\2 \1/' | sort -k1,1) \
         <(OMP_NUM_THREADS=1 /usr/bin/python3 "$HS_ROOT/bench/ddp_twin.py" --net "$NET" --score "$dir" | sort -k1,1) |
      sort -n | awk -v t0="$t0" '{ printf "%d %.2f %s\n", $1, $2 - t0, $3 }'
  fi
}
# curve_figures CURVE: "it_target t_target final rate": the crossing of TARGET interpolated
# between the snapshots around it ("- -" if never), the last accuracy, and global iterations
# per second between the first and last snapshot.
curve_figures() {
  awk -v T="$TARGET" '
    $3 == "nan" { bad = 1 }
    NR == 1 { i0 = $1; s0 = $2 }
    !bad && $3 + 0 >= T && ix == "" {
      if (NR == 1 || pa == "") { ix = $1; sx = $2 }
      else { f = (T - pa) / ($3 - pa); ix = pi + f * ($1 - pi); sx = ps + f * ($2 - ps) }
    }
    { pi = $1; ps = $2; pa = ($3 == "nan" ? "" : $3); li = $1; ls = $2; la = $3 }
    END {
      if (NR == 0) { print "- - - -"; exit }
      printf "%s %s %s %s\n", (ix == "" ? "-" : sprintf("%.0f", ix)), (sx == "" ? "-" : sprintf("%.1f", sx)), la,
        (ls > s0 ? sprintf("%.2f", (li - i0) / (ls - s0)) : "-")
    }' "$1"
}

# A final accuracy at chance: the net died (held short of NaN, it learns nothing) though no loss
# went non-finite.
DEAD=${DEAD:-0.15}
dead_net() { [[ -n $1 && $1 != nan && $1 != - ]] && awk -v a="$1" -v d="$DEAD" 'BEGIN { exit !(a < d) }'; }

# run_figures SYSTEM TAG T0: "t_target final it_target rate" of a finished run: from its
# snapshots' curve (SNAP; OUT/TAG.curve is kept), else from the leader's own tests (the last
# two "-").
run_figures() {
  local sys=$1 tag=$2 t0=$3 tt acc ix=- rate=-
  if ((SNAP > 0)); then
    snapshot_curve "$sys" "$OUT/$tag.snap" "$t0" > "$OUT/$tag.curve"
    read -r ix tt acc rate < <(curve_figures "$OUT/$tag.curve")
  else
    tt=$(time_to_target "$OUT/$tag.m0.log"); acc=$(final_accuracy "$OUT/$tag.m0.log" || true)
  fi
  echo "$tt ${acc:--} $ix $rate"
}

# One hogstream run of n machines (round r): prints "time_to_target final wall staleness bytes
# diverged it_target rate cpu" (the last three "-" without SNAP).
hogstream_run() {
  local n=$1 share=$2 tag=$3 r=${4:-1}
  local solver; solver=$(solver_for "$tag" "$r")
  setup "$n" "$share"
  local peers=() i
  for ((i = 0; i < n; ++i)); do peers+=("10.79.0.$((i + 1)):7000"); done
  local flags=(train --solver="$solver" --iterations="$ITER")
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
  local cpu; cpu=$(cpu_share "$n" "$share" "$wall")
  cleanup
  local lead=$OUT/$tag.m0.log
  local diverged=no
  grep -qE "loss is (nan|-?inf)|diverged|every copy" "$OUT"/$tag.m*.log && diverged=yes
  local tt acc ix rate
  read -r tt acc ix rate < <(run_figures hogstream "$tag" "$t0")
  [[ $acc == - ]] && acc=
  ((SNAP > 0)) || cpu=-
  [[ -z $acc || $acc == nan ]] && diverged=yes
  [[ $diverged == no ]] && dead_net "$acc" && diverged=dead
  local st by
  st=$(grep -oE "staleness [0-9.]+ it \(max [0-9]+\)" "$lead" | tail -1 | awk '{print $2 "/" $5}' | tr -d ')' || true)
  by=$(grep -oE "sent [0-9.]+ GB" "$lead" | tail -1 | awk '{print $2}' || true)
  printf "%s %s %.1f %s %s %s %s %s %s\n" "$tt" "${acc:--}" "$wall" "${st:--}" "${by:--}" "$diverged" "$ix" "$rate" "$cpu"
}

# One DDP run of n machines (round r) in the variant v (DDP's words): "n", "half", "sqrt", "one"
# (the base rate times N, N/2, sqrt N or 1 after the warm-up) or "local" (post-local SGD:
# DDP through the warm-up, then the models averaged every DDP_LOCAL_H steps, the rate x N).
# The same figures as hogstream_run (staleness and bytes "-").
ddp_run() {
  local n=$1 share=$2 tag=$3 r=${4:-1} v=${5:-n}
  local dir=$OUT/$tag.snap
  rm -rf "$dir"; mkdir -p "$dir"
  setup "$n" "$share"
  local args=(--net "$NET" --iterations "$ITER" --seed "$r" --warmup "$DDP_WARMUP")
  if [[ $v == local ]]; then args+=(--lr-mult n --post-local "$DDP_LOCAL_H"); else args+=(--lr-mult "$v"); fi
  if ((SNAP > 0)); then args+=(--snapshot-every "$SNAP" --snapshot-dir "$dir" --test-interval 0)
  else args+=(--stop-at "$([[ ${DDP_STOP:-1} == 1 ]] && echo "$TARGET" || echo 0)"); fi
  local i t0; t0=$(date +%s.%N)
  for ((i = 0; i < n; ++i)); do
    run_in "$i" "$OUT/$tag.m$i.log" env OMP_NUM_THREADS=1 MASTER_ADDR=10.79.0.1 MASTER_PORT=29500 WORLD_SIZE="$n" RANK="$i" \
      GLOO_SOCKET_IFNAME=eth0 /usr/bin/python3 "$HS_ROOT/bench/ddp_twin.py" "${args[@]}"
  done
  wait_all || true
  local wall; wall=$(echo "$(date +%s.%N) - $t0" | bc)
  local cpu; cpu=$(cpu_share "$n" "$share" "$wall")
  cleanup
  local lead=$OUT/$tag.m0.log diverged=no tt acc ix rate
  read -r tt acc ix rate < <(run_figures ddp "$tag" "$t0")
  [[ $acc == - ]] && acc=
  ((SNAP > 0)) || cpu=-
  [[ -z $acc || $acc == nan ]] && diverged=yes
  grep -qiE "nan|diverged" "$lead" && diverged=yes
  [[ $diverged == no ]] && dead_net "$acc" && diverged=dead
  printf "%s %s %.1f - - %s %s %s %s\n" "$tt" "${acc:--}" "$wall" "$diverged" "$ix" "$rate" "$cpu"
}

share_for() { [[ -n ${SHARE:-} && ${SHARE:-} != auto ]] && echo "$SHARE" || { (($1 <= 4)) && echo 0.4 || echo 0.2; }; }

if [[ ${RUNS_ONLY:-0} == 1 ]]; then  # repeated runs of each N, one line each (divergence counts)
  for ((r = 1; r <= ROUNDS; ++r)); do
    for n in $COUNTS; do
      echo "run $r, $n machines ($MODE, share $(share_for "$n")): $(hogstream_run "$n" "$(share_for "$n")" "r$r.n$n" "$r")"
    done
  done
  exit 0
fi

# The systems: hogstream (HOGSTREAM=0: left out), and with PEER=1 a DDP row per variant in DDP (ddp_run).
systems=()
[[ ${HOGSTREAM:-1} == 1 ]] && systems+=(hogstream)
if [[ $PEER == 1 ]]; then
  if /usr/bin/python3 -c "import torch" 2>/dev/null; then
    for v in $DDP; do systems+=("ddp-$v"); done
  else echo "scaleout.sh: no python3-torch: the DDP twin is left out (apt-get install python3-torch)"; fi
fi
run_system() {  # run_system SYSTEM N SHARE TAG ROUND
  case $1 in
    hogstream) hogstream_run "$2" "$3" "$4" "$5" ;;
    ddp-*) ddp_run "$2" "$3" "$4" "$5" "${1#ddp-}" ;;
  esac
}
echo "== scale-out: $NET, $MODE, ITER=$ITER global iterations, target $TARGET; COUNTS=$COUNTS$( ((SNAP > 0)) && echo "; snapshots every $SNAP scored offline" || { [[ ${DDP_STOP:-1} == 1 ]] && echo "; ddp stops at the target"; })"
HEAD=(system N share t_target speedup effic final wall_s staleness GB_out diverged it_target SE HE cpu% pred ratio)
FMT="%-10s %2s %5s %9s %8s %6s %7s %8s %10s %7s %8s %9s %5s %5s %5s %5s %5s\n"
# shellcheck disable=SC2059
printf "$FMT" "${HEAD[@]}"
ROWS=$OUT/rows.txt
: > "$ROWS"
for ((r = 1; r <= ROUNDS; ++r)); do
  declare -A base=() base_it=() base_rate=()
  # Baselines (N = 1) at each share first, then the counts, interleaving the systems. The DDP
  # variants share one baseline (at N = 1 they are the same run).
  for n in $COUNTS; do
    for sys in "${systems[@]}"; do
      share=$(share_for "$n")
      key=${sys%%-*}$share
      if [[ ${BASE:-1} == 0 ]]; then
        base[$key]=- base_it[$key]=- base_rate[$key]=-  # no baseline: no speed-up column
      elif [[ -z ${base[$key]:-} ]]; then
        read -r t acc wall st by dv ix rate cpu < <(run_system "$sys" 1 "$share" "r$r.${sys%%-*}.base$share" "$r")
        base[$key]=$t base_it[$key]=$ix base_rate[$key]=$rate
        one=1.00; [[ $ix == - ]] && one=-  # no snapshots (SNAP=0): no SE or HE
        row=("${sys%%-*}" 1 "$share" "$t" 1.00 1.00 "$acc" "$wall" "$st" "$by" "$dv" "$ix" "$one" "$one" "$cpu" "$one" 1.00)
        # shellcheck disable=SC2059
        printf "$FMT" "${row[@]}" | tee -a "$ROWS"
      fi
      [[ $n == 1 ]] && continue
      read -r t acc wall st by dv ix rate cpu < <(run_system "$sys" "$n" "$share" "r$r.$sys.n$n" "$r")
      b=${base[$key]} bi=${base_it[$key]} br=${base_rate[$key]}
      sp=- ef=- se=- he=- pred=- ratio=-
      if [[ $t != - && $b != - ]]; then
        sp=$(echo "scale=2; $b / $t" | bc); ef=$(echo "scale=2; $b / $t / $n" | bc); ratio=$(echo "scale=3; $t / $b" | bc)
      fi
      [[ $ix != - && $bi != - ]] && se=$(echo "scale=2; $bi / $ix" | bc)
      [[ $rate != - && $br != - ]] && he=$(echo "scale=2; $rate / $n / $br" | bc)
      [[ $se != - && $he != - ]] && pred=$(awk -v n="$n" -v s="$se" -v h="$he" 'BEGIN { if (s * h > 0) printf "%.3f", 1 / (n * s * h); else print "-" }')
      row=("$sys" "$n" "$share" "$t" "$sp" "$ef" "$acc" "$wall" "$st" "$by" "$dv" "$ix" "$se" "$he" "$cpu" "$pred" "$ratio")
      # shellcheck disable=SC2059
      printf "$FMT" "${row[@]}" | tee -a "$ROWS"
    done
  done
done
# The medians over the rounds, per system and N (SE, HE, predicted and measured ratio; runs
# that never reached TARGET count as "-" and are left out, their number said).
if ((ROUNDS > 1 && SNAP > 0)); then
  echo "== medians over $ROUNDS rounds (runs that never reached $TARGET left out)"
  printf "%-10s %2s %5s %5s %5s %5s %5s %s\n" system N SE HE cpu% pred ratio reached
  awk '
    function med(list,   a, k, t) { k = split(list, a, " "); if (k == 0) return "-"
      for (i = 1; i <= k; ++i) for (j = i + 1; j <= k; ++j) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
      return k % 2 ? a[(k + 1) / 2] : sprintf("%.3f", (a[k / 2] + a[k / 2 + 1]) / 2) }
    function add(name, v) { if (v != "-") L[name] = L[name] " " v }
    $2 > 1 { k = $1 SUBSEP $2; keys[k] = 1; runs[k]++; if ($12 != "-") hit[k]++
             add("se" k, $13); add("he" k, $14); add("cpu" k, $15); add("pred" k, $16); add("ratio" k, $17) }
    END { for (k in keys) { split(k, p, SUBSEP)
            printf "%-10s %2s %5s %5s %5s %5s %5s %d/%d\n", p[1], p[2], med(L["se" k]), med(L["he" k]), med(L["cpu" k]),
              med(L["pred" k]), med(L["ratio" k]), hit[k], runs[k] } }' "$ROWS" | sort -k1,1 -k2,2n
fi
