#!/usr/bin/env bash
# `hogstream bench` between two network namespaces joined by a veth pair: the two "machines" of
# a link on one host. Per MTU (1500 and 9000 by default): raw Ethernet (AF_PACKET), UDP unicast
# and multicast, each with GSO on and off; every row is the segment's rate next to the raw blast
# rate of the same link in the same run (see bench/link_bench.hpp), medians of --repeat rounds.
#
#   bench/link_veth.sh [REPEAT=3] [SECONDS=1] [MTU...]     (root: creates and deletes namespaces)
#   JSON=1 bench/link_veth.sh ...                           JSON lines instead of tables
#   BATCHES=64 bench/link_veth.sh ...                       batch sizes to sweep (default 16,64)
#
# Traffic stays between the two namespaces; everything is removed on exit.
set -euo pipefail
HS_ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${HOGSTREAM:-$HS_ROOT/build/hogstream}
REPEAT=${1:-3}
SECS=${2:-1}
shift $(( $# > 2 ? 2 : $# ))
MTUS=("$@")
((${#MTUS[@]})) || MTUS=(1500 9000)
[[ $(id -u) -eq 0 ]] || { echo "link_veth.sh: needs root (ip netns add)" >&2; exit 1; }
[[ -x $BIN ]] || { echo "link_veth.sh: $BIN not built (scripts/test.sh builds it)" >&2; exit 1; }
A=hsb-a-$$ B=hsb-b-$$
cleanup() { ip netns del "$A" 2>/dev/null || true; ip netns del "$B" 2>/dev/null || true; }
trap cleanup EXIT
ip netns add "$A"
ip netns add "$B"
ip link add va netns "$A" type veth peer name vb netns "$B"
ip -n "$A" addr add 10.77.0.1/24 dev va
ip -n "$B" addr add 10.77.0.2/24 dev vb
for ns in "$A" "$B"; do
  ip -n "$ns" link set lo up
done
ip -n "$A" link set va up
ip -n "$B" link set vb up
# Multicast needs a route (network.md §2.3).
ip -n "$A" route add 224.0.0.0/4 dev va
ip -n "$B" route add 224.0.0.0/4 dev vb
json=()
[[ ${JSON:-0} == 1 ]] && json=(--json)
for mtu in "${MTUS[@]}"; do
  ip -n "$A" link set va mtu "$mtu"
  ip -n "$B" link set vb mtu "$mtu"
  # Chunks whose frame fits one Ethernet frame of this MTU (frame = chunk + 32 bytes of sync's
  # header + 40 of the frame's header and checksum, + 28 of IP/UDP for udp).
  if ((mtu >= 9000)); then chunks=4096,8192,8832; else chunks=1024,1392; fi
  common=(--loopback --netns="$A,$B" --chunk="$chunks" --batch="${BATCHES:-16,64}" --seconds="$SECS" --repeat="$REPEAT" "${json[@]}")
  echo "== MTU $mtu: raw Ethernet (AF_PACKET, ethertype 0x88b5)"
  "$BIN" bench --transport=raw --where=va,vb "${common[@]}"
  echo "== MTU $mtu: raw Ethernet, positions to a group MAC"
  "$BIN" bench --transport=raw --where=va,vb --multicast=03:00:5e:48:53:01 "${common[@]}"
  for gso in on off; do
    echo "== MTU $mtu: UDP unicast, GSO $gso"
    "$BIN" bench --transport=udp --where=10.77.0.1,10.77.0.2 --gso=$gso "${common[@]}"
    echo "== MTU $mtu: UDP multicast 239.77.0.1, GSO $gso"
    "$BIN" bench --transport=udp --where=10.77.0.1,10.77.0.2 --multicast=239.77.0.1 --gso=$gso "${common[@]}"
  done
done
