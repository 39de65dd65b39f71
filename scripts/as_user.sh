#!/usr/bin/env bash
# Runs the transport tests again as an ordinary user (uid/gid 65534, no capabilities), as users
# without root run hogstream: UDP and in-process transports must pass, raw Ethernet tests skip
# with their message (no CAP_NET_RAW), namespace tests skip (not root). ctest runs this after the
# root run (scripts/test.sh); run by hand: scripts/as_user.sh build/hogstream_tests
#
# Exit 77 (ctest: skipped) when not root: there is no other user to become.
set -euo pipefail
tests=${1:?usage: as_user.sh PATH/TO/hogstream_tests [gtest filter]}
filter=${2:-'*Transport*:*Udp*:*Raw*:*Verbs*:*Frame*:*Fault*:*Inproc*:*Segment*:*LinkBench*'}
if [[ $(id -u) -ne 0 ]]; then
  echo "as_user.sh: already an ordinary user; the normal run covers it (skipped)"
  exit 77
fi
tests=$(readlink -f "$tests")
# The user must reach the binary and its libraries: every folder up to them traversable.
dir=$(dirname "$tests")
while [[ $dir != / ]]; do
  if ! setpriv --reuid=65534 --regid=65534 --clear-groups test -x "$dir"; then
    echo "as_user.sh: uid 65534 cannot enter $dir (skipped)"
    exit 77
  fi
  dir=$(dirname "$dir")
done
work=$(mktemp -d)
chmod 777 "$work"
trap 'rm -rf "$work"' EXIT
cd "$work"
exec setpriv --reuid=65534 --regid=65534 --clear-groups --inh-caps=-all --bounding-set=-all \
  env HOME="$work" TMPDIR="$work" "$tests" --gtest_filter="$filter"
