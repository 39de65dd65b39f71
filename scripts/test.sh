#!/usr/bin/env bash
# hogstream's set-up-build-test entry point (the README's test command; CI runs it).
#
#   scripts/test.sh                      install missing Debian packages, build, run ctest
#   HOGSTREAM_CUDA=OFF scripts/test.sh   the CPU-only build, even where a CUDA toolkit exists
#   BUILD_DIR=build-x scripts/test.sh    another build folder (default: build)
#   scripts/test.sh -R Net               extra arguments go to ctest
#   scripts/test.sh --sanitize           the CPU-only build with ASan + UBSan, in build-asan
#                                        (CI runs both)
#
# Idempotent: packages already present are not touched. Not root: prints the apt-get command
# to run and stops.
set -euo pipefail
HS_ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$HS_ROOT"
if [[ ${1:-} == --sanitize ]]; then
  shift
  export HOGSTREAM_SANITIZE=ON HOGSTREAM_CUDA=OFF HOGSTREAM_BENCH=OFF BUILD_DIR=${BUILD_DIR:-build-asan}
  # Leaks count too; a UB report stops the process, so the test that caused it fails.
  export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0:strict_string_checks=1}
  export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
  export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$HS_ROOT/scripts/lsan.supp:print_suppressions=0}
fi
source scripts/setup.sh
hs_ensure_packages
built_from=$(date +%s)
hs_build
tested_from=$(date +%s)
echo "== test"
cd "$BUILD_DIR"
rc=0
ctest --output-on-failure -j "$JOBS" "$@" || rc=$?
echo "== $BUILD_DIR: build $(( tested_from - built_from )) s, tests $(( $(date +%s) - tested_from )) s"
if (( rc != 0 )); then
  # The failures' own lines once more, last: a log read from its tail shows which assertion
  # failed and the seed that replays it, not only the failing tests' names.
  echo "== the failed assertions (from $BUILD_DIR/Testing/Temporary/LastTest.log)"
  grep -E -A8 ': Failure$' Testing/Temporary/LastTest.log | cut -c1-300 | head -n 150 || true
  echo "== in short: where each failed, and the seeds that replay them"
  grep -E ': Failure$|^\[  SEED    \]' Testing/Temporary/LastTest.log | cut -c1-300 | head -n 40 || true
fi
exit "$rc"
