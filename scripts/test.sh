#!/usr/bin/env bash
# hogstream's set-up-build-test entry point (the README's test command; CI runs it).
#
#   scripts/test.sh                 install missing Debian packages, configure, build, run ctest
#   HOGSTREAM_CUDA=OFF scripts/test.sh   the CPU-only build, even where a CUDA toolkit exists
#   BUILD_DIR=build-x scripts/test.sh    another build folder (default: build)
#   scripts/test.sh -R Net          extra arguments go to ctest
#
# Idempotent: packages already present are not touched. Not root: prints the apt-get command
# to run and stops.
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$(pwd)
BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-$(nproc)}

PACKAGES=(
  cmake make g++ pkg-config ccache
  protobuf-compiler libprotobuf-dev   # schema
  libdnnl-dev                         # GEMM (oneDNN)
  liblmdb-dev zlib1g-dev libboost-dev # data: LMDB, gzipped IDX, lock-free queues
  libgoogle-glog-dev libgflags-dev    # Caffe-format logs
  libgtest-dev libgmock-dev libbenchmark-dev
  libibverbs-dev librdmacm-dev        # HOGSTREAM_VERBS
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  cmd="apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ${missing[*]}"
  if [[ $(id -u) -ne 0 ]]; then
    echo "hogstream needs these Debian packages; as root run:" >&2
    echo "  $cmd" >&2
    exit 1
  fi
  echo "== installing: ${missing[*]}"
  bash -c "$cmd" >/dev/null
fi

echo "== configure ($BUILD_DIR)"
mkdir -p "$BUILD_DIR"
if ! cmake -S "$ROOT" -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release \
    -DHOGSTREAM_CUDA="${HOGSTREAM_CUDA:-AUTO}" -DHOGSTREAM_VERBS="${HOGSTREAM_VERBS:-AUTO}" \
    >"$BUILD_DIR/configure.log" 2>&1; then
  cat "$BUILD_DIR/configure.log"
  exit 1
fi
grep -E "^-- hogstream" "$BUILD_DIR/configure.log"
echo "== build (-j$JOBS)"
cmake --build "$BUILD_DIR" -j "$JOBS"
echo "== test"
cd "$BUILD_DIR"
ctest --output-on-failure -j "$JOBS" "$@"
