#!/usr/bin/env bash
# Issue 11's measurements on a lent GPU machine, in one device call. That machine has CUDA,
# PyTorch and cmake but none of our other build dependencies (protobuf, oneDNN, LMDB, glog...)
# and no network, so the build is made here and carried there:
#
#   bench/gpu.sh pack        here: CUDA build for sm_90 ($BUILD_DIR, default build), then
#                            .devpack/ (git-ignored, < 64 MiB): binaries, their non-system
#                            shared libraries (xz), the Fashion-MNIST IDX files, torch_peer.py
#                            and the CaffeNet prototxt from ../shared
#   device tool:  run(command="STAGES='1 2 3 4' bench/gpu.sh device", carry=[".devpack"])
#                 then STAGES=5, then STAGES=6 (a device call ends at 10 minutes; the three
#                 take about 3 + 4 + 5): the report of each is $OUT/gpu_report.txt
#
# Stages of `device` (each goes on if the one before failed, and says so):
#   1. the machine: nvidia-smi, torch's CUDA, core count
#   2. every GPU test (gtest filter *Gpu*:*GPU*); FULL=1 also runs the whole suite (CI runs it
#      anyway, on a machine without a GPU)
#   3. pinned cudaMemcpy H2D+D2H rate, 64 KiB..16 MiB chunks (bench/gpu_copy_bench.cpp), and
#      the GPU segment's sweep rate at the same chunk sizes (bench/gpu_segment_bench.cpp)
#   4. training img/s on GPU 0 (`hogstream train`, solver_mode GPU, the net's Data layers
#      replaced by constant DummyData: bench/dummy_data_net.py) against torch_peer.py
#      --device cuda: LeNet 64, cifar10_quick 100, CaffeNet 256; and `hogstream time --gpu=0`
#   5. GPU training, LeNet on Fashion-MNIST: one GPU solver alone (3 000 it), gpus.bin 0:0 and
#      0:1 (3 000 it), two solvers on GPU 0 (gpus.bin 0:0:0, GPUS_ITERS=10 000): test accuracy
#   6. the CPU side on the machine's cores against its PyTorch: LeNet 1 thread
#      (train img/s vs --mode lenet --threads 1) and 16 Hogwild threads (vs --mode hogwild
#      --procs 16), ROUNDS (3) interleaved rounds, medians
#   8. scale-out on the machine's cores: bench/scaleout.sh's machines at 1 core each (see stage8)
#   7. private GPU copies' stability: gpus.bin COPIES (0:0:0) LeNet 3 000 it, ROUNDS runs for
#      each --sweep_pause_us:--copy_lead setting in SETTINGS (or "default")
# STAGES="3 4" bench/gpu.sh device runs only those.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PACK=$ROOT/.devpack
MODE=${1:-}
PY=${PY:-python3}  # the python3 whose torch is the peer (the device's plain python3)

die() { echo "gpu.sh: $*" >&2; exit 1; }
# hs PROGRAM ARGS...: one of the carried programs, with the carried libraries.
hs() { local p=$1; shift; LD_LIBRARY_PATH=$HSLIB "$BIN/$p" "$@"; }

pack() {
  set -e
  local B=${BUILD_DIR:-build}
  [[ -x /usr/local/cuda/bin/nvcc ]] || die "no CUDA toolkit at /usr/local/cuda"
  [[ -f ../shared/peers/torch_peer.py ]] || die "../shared/peers/torch_peer.py is missing"
  # shellcheck source=scripts/setup.sh
  HS_ROOT=$ROOT BUILD_DIR=$B HOGSTREAM_CUDA=ON HOGSTREAM_BENCH=ON \
    bash -c 'source scripts/setup.sh; hs_ensure_packages; hs_build'
  local bins=(hogstream hogwild.bin gpus.bin raw.bin hogstream_tests hogstream_gpu_tests segment_bench gpu_copy_bench
              gpu_segment_bench)
  for b in "${bins[@]}"; do [[ -x $B/$b ]] || die "$B/$b was not built"; done
  rm -rf "$PACK"
  mkdir -p "$PACK/bin" "$PACK/lib" "$PACK/data" "$PACK/peers"
  for b in "${bins[@]}"; do cp "$B/$b" "$PACK/bin/"; done
  cp "$B"/libhogstream_*.so "$PACK/bin/"
  # Every shared library the binaries load, except glibc's and the compiler's own (the device's
  # are newer) and CUDA's (the device has its own toolkit and PyTorch's cuDNN; ours are 1 GiB).
  for b in "$PACK"/bin/*; do ldd "$b"; done | awk '$3 ~ /^\// {print $3}' | sort -u |
    grep -v -E '/(libc|libm|libdl|librt|libpthread|ld-linux[^/]*|libstdc\+\+|libgcc_s|libcuda|libcudart|libcublas|libcublasLt|libcudnn[^/]*|libnvrtc[^/]*)\.so' |
    grep -v "^$(readlink -f "$B")/" | while read -r lib; do cp -L "$lib" "$PACK/lib/"; done
  tar -C "$PACK" -cJf "$PACK/libs.tar.xz" lib bin
  rm -rf "$PACK/lib" "$PACK/bin"
  # `ip` and `bc` for stage 8's namespaces (the device image has neither), with their libraries.
  mkdir -p "$PACK/tools"
  local t
  for t in /usr/sbin/ip /usr/bin/bc; do
    cp "$t" "$PACK/tools/"
    ldd "$t" | awk '$3 ~ /^\// {print $3}' | grep -v -E '/(libc|ld-linux[^/]*)\.so' | while read -r lib; do cp -L "$lib" "$PACK/tools/"; done
  done
  cp /usr/share/datasets/fashion-mnist/*.gz "$PACK/data/"
  cp ../shared/peers/torch_peer.py "$PACK/peers/"
  cp ../shared/compat/caffe/models/bvlc_reference_caffenet/train_val.prototxt "$PACK/peers/caffenet.prototxt"
  readlink -f "$B" >"$PACK/build_dir"
  echo "$ROOT" >"$PACK/source_dir"
  git rev-parse --short HEAD >"$PACK/commit"
  du -sh "$PACK"
  local kib; kib=$(du -sk "$PACK" | cut -f1)
  (( kib < 60 * 1024 )) || die ".devpack is ${kib} KiB: over what a device call carries"
  echo "packed $(cat "$PACK/commit"): now run bench/gpu.sh device on the device, carrying .devpack"
}

# ------------------------------------------------------------------ device side
OUTDIR=${OUT:-$ROOT/out/gpu}
REPORT=$OUTDIR/gpu_report.txt
SUMMARY=()
say() { echo "$*"; }
summary() { SUMMARY+=("$*"); echo "== $*"; }
median() { sort -g | awk '{v[NR]=$1} END {if (NR) print v[int((NR+1)/2)]; else print "-"}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (a+0 > 0 && b+0 > 0) printf "%.2f", a/b; else print "-"}'; }
peer_rate() { sed -n 's/^RESULT //p' | python3 -c 'import json,sys; print(json.load(sys.stdin)["median_images_per_s"])' 2>/dev/null || echo -; }
last_rate() { sed -n 's/.*Progress: .* iterations, \([0-9]*\) img\/s.*/\1/p' "$1" | tail -1; }

unpack() {
  [[ -f $PACK/libs.tar.xz ]] || die "no .devpack here: run 'bench/gpu.sh pack' on the project machine and carry .devpack"
  local dest=/tmp/hsdev
  rm -rf "$dest"; mkdir -p "$dest"
  tar -C "$dest" -xJf "$PACK/libs.tar.xz" 2>/dev/null ||
    python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$PACK/libs.tar.xz" "$dest" ||
    die "cannot unpack $PACK/libs.tar.xz"
  BIN=$dest/bin
  # The test binary names the sources and the other programs by their paths here: put the
  # checkout and the build there.
  local src built; src=$(cat "$PACK/source_dir"); built=$(cat "$PACK/build_dir")
  if [[ ! -e $src ]]; then mkdir -p "$(dirname "$src")"; ln -s "$ROOT" "$src"; fi
  if [[ ! -e $built ]]; then mkdir -p "$(dirname "$built")"; ln -s "$BIN" "$built"; fi
  local cuda_dirs
  cuda_dirs=$(python3 - <<'EOF' 2>/dev/null
import glob, os, site
dirs = set()
for base in site.getsitepackages() + ["/usr/local/cuda/lib64", "/usr/local/cuda/lib"]:
    for pat in ("nvidia/*/lib", "nvidia/cu*/lib", ""):
        for d in glob.glob(os.path.join(base, pat)):
            if glob.glob(os.path.join(d, "libcud*.so*")) or glob.glob(os.path.join(d, "libcublas*.so*")):
                dirs.add(d)
print(":".join(sorted(dirs)))
EOF
)
  # Only our programs see the carried libraries (python3 and its torch keep the machine's).
  HSLIB=$dest/lib:$BIN:$cuda_dirs
  local missing; missing=$(for b in "$BIN"/*; do LD_LIBRARY_PATH=$HSLIB ldd "$b"; done | grep "not found" | sort -u)
  [[ -z $missing ]] || { echo "libraries not found:"; echo "$missing"; }
  mkdir -p data/fashion-mnist
  for s in train t10k; do
    local out=data/fashion-mnist/$([[ $s == train ]] && echo train || echo test)_lmdb
    [[ -d $out ]] || hs hogstream convert mnist "$PACK/data/$s-images-idx3-ubyte.gz" \
      "$PACK/data/$s-labels-idx1-ubyte.gz" "$out" >/dev/null
  done
}

# solver ITERS TEST_INTERVAL MODE > file: configs/lenet with overrides
lenet_solver() {
  grep -v -E '^(test_interval|max_iter|snapshot|snapshot_prefix|display|solver_mode):' configs/lenet/solver.prototxt
  printf 'max_iter: %d\ntest_interval: %d\ndisplay: 100\nsnapshot: 0\nsnapshot_after_train: false\n' "$1" "$2"
  printf 'snapshot_prefix: "/tmp/hsdev/lenet"\nsolver_mode: %s\n' "$3"
  [[ $2 -gt $1 ]] && echo "test_initialization: false"
  true
}

stage1() {
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  $PY -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name(0))'
  echo "cores: $(nproc); commit $(cat "$PACK/commit")"
}

stage2() {
  hs hogstream_tests --gtest_filter='*Gpu*:*GPU*' 2>&1 | tee "$OUTDIR/gpu_tests.log" | tail -25
  # The GPU math called by name has a binary of its own (it alone links the GPU engine).
  hs hogstream_gpu_tests 2>&1 | tee -a "$OUTDIR/gpu_tests.log" | tail -8
  local g; g=$(grep -E '^\[  (PASSED|FAILED|SKIPPED) +\] [0-9]+ tests?' "$OUTDIR/gpu_tests.log" | tr -s ' \n' ' ')
  summary "GPU tests: $g"
  [[ ${FULL:-0} == 1 ]] || return 0
  timeout 500 env LD_LIBRARY_PATH="$HSLIB" "$BIN/hogstream_tests" --gtest_brief=1 >"$OUTDIR/all_tests.log" 2>&1
  summary "whole suite (exit $?): $(grep -E '^\[  (PASSED|FAILED) ' "$OUTDIR/all_tests.log" | tr '\n' ' ')"
  grep -E '^\[  FAILED  \] [A-Za-z]' "$OUTDIR/all_tests.log" | head -40
}

stage3() {
  hs gpu_copy_bench 256 5 | tee "$OUTDIR/copy.txt"
  summary "pinned copy rate: $(awk 'NR > 2 {printf "%s %s: %s/%s GB/s; ", $1, $2, $3, $4}' "$OUTDIR/copy.txt")"
  hs gpu_segment_bench 256 2 | tee "$OUTDIR/segment.txt"
  summary "GPU segment rate (weights GB/s, against the copy rate above): $(awk 'NR > 2 {printf "%s %s: %s; ", $1, $2, $4}' "$OUTDIR/segment.txt")"
}

# speed_solver NET_FILE ITERS DISPLAY > file: a GPU training solver for speed runs
speed_solver() {
  printf 'net: "%s"\nbase_lr: 0.001\nmomentum: 0.9\nweight_decay: 0.0005\nlr_policy: "fixed"\n' "$1"
  printf 'max_iter: %d\ndisplay: %d\nsnapshot: 0\nsnapshot_after_train: false\n' "$2" "$3"
  printf 'snapshot_prefix: "/tmp/hsdev/speed"\nsolver_mode: GPU\n'
}
# img/s between the first and the last Progress line of a log (leaves out the start-up)
progress_rate() {
  sed -n 's/.*Progress: \([0-9]*\)\/[0-9]* iterations, \([0-9]*\) img\/s.*/\1 \2/p' "$1" |
    awk -v b="$2" 'NR == 1 {i1 = $1; t1 = $1 * b / $2} {i2 = $1; t2 = $1 * b / $2}
                   END {if (NR > 1 && t2 > t1) printf "%.0f", (i2 - i1) * b / (t2 - t1); else print "-"}'
}

stage4() {
  local peer=$PACK/peers/torch_peer.py
  declare -A model=([lenet]=configs/lenet/lenet_train_test.prototxt
    [cifar]=configs/cifar10/quick_train_test.prototxt [caffenet]=$PACK/peers/caffenet.prototxt)
  declare -A shape=([lenet]=64,1,28,28 [cifar]=100,3,32,32 [caffenet]=256,3,227,227)
  declare -A batch=([lenet]=64 [cifar]=100 [caffenet]=256)
  declare -A iters=([lenet]=2000 [cifar]=1000 [caffenet]=60)
  declare -A display=([lenet]=200 [cifar]=100 [caffenet]=10)
  for net in lenet cifar caffenet; do
    local extra=(); [[ $net == lenet ]] && extra=(--data-dir "$PACK/data")
    local t; t=$($PY "$peer" --device cuda --mode "$net" "${extra[@]}" --checkpoints '' 2>"$OUTDIR/peer_$net.err" | peer_rate)
    # Training img/s: `hogstream train` on the net with constant DummyData input, solver_mode GPU.
    python3 bench/dummy_data_net.py "${model[$net]}" "${shape[$net]}" >/tmp/hsdev/$net.prototxt
    speed_solver /tmp/hsdev/$net.prototxt "${iters[$net]}" "${display[$net]}" >/tmp/hsdev/${net}_solver.prototxt
    timeout 300 env LD_LIBRARY_PATH="$HSLIB" "$BIN/hogstream" train --solver=/tmp/hsdev/${net}_solver.prototxt \
      2>"$OUTDIR/train_$net.log"
    local ips; ips=$(progress_rate "$OUTDIR/train_$net.log" "${batch[$net]}")
    [[ $ips == - ]] && tail -2 "$OUTDIR/train_$net.log"
    # Forward+backward per batch and per layer (where the time goes).
    hs hogstream time --gpu=0 --model="${model[$net]}" --input="data:${shape[$net]}" \
      --iterations=$(( ${iters[$net]} / 10 )) >"$OUTDIR/time_$net.txt" 2>&1
    local ms; ms=$(sed -n 's/^Median Forward-Backward: \([0-9.]*\) ms.*/\1/p' "$OUTDIR/time_$net.txt")
    # The same with cuDNN's heuristic algorithm choice instead of timed ones.
    HS_GPU_CONV_SEARCH=0 hs hogstream time --gpu=0 --model="${model[$net]}" --input="data:${shape[$net]}" \
      --iterations=$(( ${iters[$net]} / 10 )) >"$OUTDIR/time_heur_$net.txt" 2>&1
    local hms; hms=$(sed -n 's/^Median Forward-Backward: \([0-9.]*\) ms.*/\1/p' "$OUTDIR/time_heur_$net.txt")
    summary "$net batch ${batch[$net]}: hogstream train $ips img/s (fwd+bwd ${ms:--} ms; ${hms:--} ms with heuristic algorithms); torch cuda $t img/s; ratio $(ratio "$ips" "$t") (goal >= 1.0)"
  done
}

# gpus_run NAME SOLVERS|train ITERS [TEST_INTERVAL [FLAGS...]]: LeNet on Fashion-MNIST, the
# last test accuracy
gpus_run() {
  local name=$1 solvers=$2 iters=$3 interval=${4:-$(( $3 / 2 ))}
  local flags=("${@:5}")
  lenet_solver "$iters" "$interval" GPU >/tmp/hsdev/${name}_solver.prototxt
  local log=$OUTDIR/run_$name.log
  if [[ $solvers == train ]]; then
    timeout 300 env LD_LIBRARY_PATH="$HSLIB" "$BIN/hogstream" train --solver=/tmp/hsdev/${name}_solver.prototxt 2>"$log"
  else
    timeout 300 env LD_LIBRARY_PATH="$HSLIB" "$BIN/gpus.bin" /tmp/hsdev/${name}_solver.prototxt "$solvers" \
      "${flags[@]}" 2>"$log"
  fi
  local rc=$?
  local acc; acc=$(sed -n 's/.*Test net output #0: accuracy = \([0-9.]*\).*/\1/p' "$log" | tail -1)
  local loss; loss=$(sed -n 's/.*Iteration [0-9]*, loss = \([-0-9.naif]*\).*/\1/p' "$log" | tr '\n' ' ' | cut -c1-200)
  summary "$name ($solvers, LeNet $iters it): exit $rc, accuracy ${acc:--}; losses: $loss"
}

stage5() {
  gpus_run one_gpu train 3000          # one GPU solver, no segment
  gpus_run gpus_0_0 0:0 3000           # one GPU solver on its device copy + GPU segment
  gpus_run gpus_0_1 0:1 3000           # one GPU solver and one CPU solver
  gpus_run gpus_0_0_0 0:0:0 ${GPUS_ITERS:-10000}  # two solvers on GPU 0 (goal >= 0.895 at 10 000)
  gpus_run final_test_only 0:0:0 3000 3000  # the only test is the final one, on the master
}

# Private GPU copies' stability: gpus.bin LeNet 3 000 it, the only test at the end, ROUNDS runs
# per setting PAUSE:LEAD of --sweep_pause_us and --copy_lead ("default": neither given), for
# each SOLVERS spec in COPIES.
stage7() {
  local r setting solvers
  for solvers in ${COPIES:-0:0:0}; do
    for setting in ${SETTINGS:-default 2000:0 0:0 2000:1 0:2}; do
      local flags=() tag=default
      if [[ $setting != default ]]; then
        flags=(--sweep_pause_us="${setting%:*}" --copy_lead="${setting#*:}")
        tag=p${setting%:*}_l${setting#*:}
      fi
      for ((r = 1; r <= ${ROUNDS:-4}; ++r)); do
        gpus_run "copies_${tag}_r$r" "$solvers" 3000 3000 "${flags[@]}" >/dev/null
        echo "$solvers $setting: $(echo "${SUMMARY[-1]}" | sed 's/losses: .* \([^ ]*\) *$/last loss \1/')" |
          tee -a "$OUTDIR/copies.txt"
        grep 'Progress:' "$OUTDIR/run_copies_${tag}_r$r.log" | tail -1 | sed 's/.*iterations, //'
        grep 'Segments:' "$OUTDIR/run_copies_${tag}_r$r.log" | tail -1 | cut -c 60-300
      done
    done
  done
}

# Scale-out on the device's cores (issue 25): N machines = namespaces, each held to SO_SHARE
# (1) core by its own cgroup (bench/scaleout.sh, RUNS_ONLY), LeNet SO_ITER (6 000) global
# iterations, for each N in SO_COUNTS ("1 4 8") with the default aggregation and with each of
# SO_AGGREGATES ("share"): time to 0.89, final accuracy, wall, staleness, bytes, diverged.
stage8() {
  local tool
  for tool in ip bc; do  # the packed ones where the machine has none
    command -v $tool >/dev/null && continue
    [[ -x $PACK/tools/$tool ]] || { summary "scale-out: no '$tool' on this machine nor in .devpack"; return 1; }
    mkdir -p /tmp/hsdev/tools
    printf '#!/bin/sh\nLD_LIBRARY_PATH=%s${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} exec %s "$@"\n' "$PACK/tools" "$PACK/tools/$tool" >/tmp/hsdev/tools/$tool
    chmod +x /tmp/hsdev/tools/$tool
    export PATH=/tmp/hsdev/tools:$PATH
  done
  ip netns add hs_probe_$$ 2>/dev/null && ip netns del hs_probe_$$ || { summary "scale-out: no network namespaces here"; return 1; }
  local a n line
  for n in ${SO_COUNTS:-1 4 8}; do
    for a in default ${SO_AGGREGATES:-share}; do
      [[ $n == 1 && $a != default ]] && continue
      local extra=""; [[ $a != default ]] && extra="--aggregate=$a"
      line=$(LD_LIBRARY_PATH=$HSLIB BUILD_DIR=$BIN COUNTS=$n RUNS_ONLY=1 ROUNDS=1 PEER=0 ITER=${SO_ITER:-6000} MODE=mcast \
        SHARE=${SO_SHARE:-1} EXTRA="$extra" OUT=$OUTDIR/so_${a}_$n timeout 200 bench/scaleout.sh lenet 2>&1 | tail -1)
      summary "scale-out $a, $line"
    done
  done
  tar -C "$OUTDIR" -czf "$OUTDIR/scaleout_logs.tgz" $(cd "$OUTDIR" && ls -d so_* 2>/dev/null) && rm -rf "$OUTDIR"/so_*
}

stage6() {
  local peer=$PACK/peers/torch_peer.py
  lenet_solver 3000 100000 CPU >/tmp/hsdev/cpu_solver.prototxt
  lenet_solver 6000 100000 CPU >/tmp/hsdev/cpu16_solver.prototxt
  local r
  for ((r = 1; r <= ${ROUNDS:-3}; ++r)); do
    echo "torch1 $($PY "$peer" --mode lenet --threads 1 --data-dir "$PACK/data" --checkpoints '' 2>/dev/null | peer_rate)" >>"$OUTDIR/cpu.txt"
    OMP_NUM_THREADS=1 hs hogwild.bin /tmp/hsdev/cpu_solver.prototxt 1 2>/tmp/hsdev/c1.log
    echo "hog1 $(last_rate /tmp/hsdev/c1.log)" >>"$OUTDIR/cpu.txt"
    echo "torch16 $($PY "$peer" --mode hogwild --procs 16 --data-dir "$PACK/data" --checkpoints '' --warmup 50 --window-iters 300 2>/dev/null | peer_rate)" >>"$OUTDIR/cpu.txt"
    OMP_NUM_THREADS=1 hs hogwild.bin /tmp/hsdev/cpu16_solver.prototxt 16 2>/tmp/hsdev/c16.log
    echo "hog16 $(last_rate /tmp/hsdev/c16.log)" >>"$OUTDIR/cpu.txt"
    tail -4 "$OUTDIR/cpu.txt"
  done
  local k; declare -A m
  for k in torch1 hog1 torch16 hog16; do m[$k]=$(awk -v k=$k '$1 == k {print $2}' "$OUTDIR/cpu.txt" | median); done
  summary "CPU LeNet 1 thread: hogstream ${m[hog1]} img/s, torch ${m[torch1]} img/s, ratio $(ratio "${m[hog1]}" "${m[torch1]}")"
  summary "CPU LeNet 16 Hogwild: hogstream ${m[hog16]} img/s, torch ${m[torch16]} img/s, ratio $(ratio "${m[hog16]}" "${m[torch16]}")"
}

device() {
  mkdir -p "$OUTDIR"
  unpack
  local s
  for s in ${STAGES:-1 2 3 4 5 6}; do
    echo; echo "---- stage $s ($(date +%T))"
    "stage$s" || summary "stage $s ended with exit $?"
  done
  echo; echo "---- summary"
  printf '%s\n' "${SUMMARY[@]}"
  # A device call brings back at most 8 files: the logs travel as one archive.
  (cd "$OUTDIR" && tar czf logs.tgz --exclude=gpu_report.txt --exclude=logs.tgz -- * && \
    find . -maxdepth 1 -type f ! -name logs.tgz ! -name gpu_report.txt -delete)
}

case $MODE in
  pack) pack ;;
  device) mkdir -p "$OUTDIR"; device 2>&1 | tee "$REPORT" ;;
  *) die "usage: bench/gpu.sh pack | device   (see the comment at the top)" ;;
esac
