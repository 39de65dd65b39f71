# Sourced by scripts/test.sh and scripts/demo.sh: installs the Debian packages hogstream needs
# (only the missing ones) and configures + builds. Not meant to be run on its own.
#
#   hs_ensure_packages [EXTRA_PACKAGE...]
#   hs_build [TARGET...]          (BUILD_DIR, JOBS, HOGSTREAM_CUDA, HOGSTREAM_VERBS,
#                                  HOGSTREAM_SANITIZE from the env)

HS_PACKAGES=(
  cmake make g++ pkg-config ccache
  protobuf-compiler libprotobuf-dev   # schema
  libdnnl-dev                         # GEMM (oneDNN)
  liblmdb-dev zlib1g-dev libboost-dev # data: LMDB, gzipped IDX, lock-free queues
  libjpeg62-turbo-dev libpng-dev      # data: JPEG and PNG images
  libleveldb-dev libhdf5-dev          # data: LevelDB backend, HDF5Data / HDF5Output
  libgoogle-glog-dev libgflags-dev    # Caffe-format logs
  libcli11-dev                        # the programs' flags and --help
  nlohmann-json3-dev                  # JSON output (--stats_json, hogstream bench --json)
  libgtest-dev libgmock-dev libbenchmark-dev
  libibverbs-dev librdmacm-dev        # HOGSTREAM_VERBS
  libcairo2-dev                       # hogstream plot (PNG and SVG)
  prometheus-cpp-dev                  # --metrics (Prometheus pull endpoint)
  libxxhash-dev libsodium-dev         # transport frames: XXH3 checksum, keyed MAC (--job-key)
  openmpi-bin                         # tests: a job's ranks from a real mpirun
  python3-numpy python3-pil           # scripts/cifar10.sh (and its test): CIFAR-10 from PNG sprites
  dataset-fashion-mnist               # scripts/demo.sh, and the test that converts the real set
  prometheus chromium                 # tests: a real Prometheus scrapes a job; the page in a real browser
)

hs_ensure_packages() {
  local missing=() p
  for p in "${HS_PACKAGES[@]}" "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  ((${#missing[@]})) || return 0
  local cmd="apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ${missing[*]}"
  if [[ $(id -u) -ne 0 ]]; then
    echo "hogstream needs these Debian packages; as root run:" >&2
    echo "  $cmd" >&2
    exit 1
  fi
  echo "== installing: ${missing[*]}"
  bash -c "$cmd" >/dev/null
}

hs_build() {
  BUILD_DIR=${BUILD_DIR:-build}
  JOBS=${JOBS:-$(nproc)}
  echo "== configure ($BUILD_DIR)"
  mkdir -p "$BUILD_DIR"
  # Paths relative to the checkout in ccache's keys: a fresh clone elsewhere (CI) hits the cache.
  # (-g, as in the sanitizer build, would otherwise put the build folder itself in the key.)
  export CCACHE_BASEDIR="$HS_ROOT" CCACHE_NOHASHDIR=1
  if ! cmake -S "$HS_ROOT" -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release \
      -DHOGSTREAM_CUDA="${HOGSTREAM_CUDA:-AUTO}" -DHOGSTREAM_VERBS="${HOGSTREAM_VERBS:-AUTO}" \
      -DHOGSTREAM_SANITIZE="${HOGSTREAM_SANITIZE:-OFF}" -DHOGSTREAM_BENCH="${HOGSTREAM_BENCH:-ON}" \
      >"$BUILD_DIR/configure.log" 2>&1; then
    cat "$BUILD_DIR/configure.log"
    exit 1
  fi
  grep -E "^-- hogstream" "$BUILD_DIR/configure.log"
  echo "== build (-j$JOBS)"
  local targets=()
  for t in "$@"; do targets+=(--target "$t"); done
  cmake --build "$BUILD_DIR" -j "$JOBS" "${targets[@]}"
}
