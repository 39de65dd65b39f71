#!/usr/bin/env bash
# hogstream's set-up-build-test entry point (the README's test command; CI runs it).
#
#   scripts/test.sh                      install missing Debian packages, build, run ctest
#   HOGSTREAM_CUDA=OFF scripts/test.sh   the CPU-only build, even where a CUDA toolkit exists
#   BUILD_DIR=build-x scripts/test.sh    another build folder (default: build)
#   scripts/test.sh -R Net               extra arguments go to ctest
#
# Idempotent: packages already present are not touched. Not root: prints the apt-get command
# to run and stops.
set -euo pipefail
HS_ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$HS_ROOT"
source scripts/setup.sh
hs_ensure_packages
hs_build
echo "== test"
cd "$BUILD_DIR"
ctest --output-on-failure -j "$JOBS" "$@"
