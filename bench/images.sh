#!/usr/bin/env bash
# Image files as training input, measured against the plain LMDB: Fashion-MNIST's training set
# written out as 60 000 gray PNG files (bench/idx_to_png.py), then LeNet trained from
#   plain     data/fashion-mnist/train_lmdb (raw Datums from `hogstream convert mnist`)
#   raw       `hogstream convert imageset --gray` of the PNGs (raw Datums)
#   encoded   `hogstream convert imageset --gray --encoded` (PNG Datums, decoded by the readers)
#   imagedata the ImageData layer on the PNG files and their list
# with SOLVERS Hogwild solvers, interleaved variant by variant in every round; the test net
# reads the plain test LMDB in all four. Prints each run's test accuracy and img/s, then the
# medians and each variant's img/s against plain's.
#
#   bench/images.sh        env: ITER=10000 SOLVERS=2 ROUNDS=2 OUT=out/images BUILD_DIR=build
set -euo pipefail
HS_ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$HS_ROOT"
ITER=${ITER:-10000}
SOLVERS=${SOLVERS:-2}
ROUNDS=${ROUNDS:-2}
OUT=${OUT:-out/images}
BUILD_DIR=${BUILD_DIR:-build}
HS=$BUILD_DIR/hogstream
DATA=/usr/share/datasets/fashion-mnist
[[ -x $HS ]] || { echo "images.sh: build $HS first (scripts/test.sh)"; exit 1; }
[[ -d data/fashion-mnist/train_lmdb ]] || { echo "images.sh: run scripts/demo.sh once (it converts Fashion-MNIST)"; exit 1; }
mkdir -p "$OUT"
source "$HS_ROOT/bench/frozen_build.sh"
hs_freeze_build  # a rebuild meanwhile cannot touch the sitting
HS=$BUILD_DIR/hogstream

if [[ ! -f $OUT/png/list.txt ]]; then
  /usr/bin/python3 bench/idx_to_png.py "$DATA/train-images-idx3-ubyte.gz" "$DATA/train-labels-idx1-ubyte.gz" "$OUT/png"
fi
for kind in raw encoded; do
  if [[ ! -d $OUT/$kind ]]; then
    flags=(--gray)
    [[ $kind == encoded ]] && flags+=(--encoded)
    t0=$(date +%s.%N)
    "$HS" convert imageset "$OUT/png" "$OUT/png/list.txt" "$OUT/$kind" "${flags[@]}"
    echo "convert imageset ($kind): $(echo "$(date +%s.%N) - $t0" | bc) s, $(du -sh "$OUT/$kind" | cut -f1)"
  fi
done

# The net of each variant: LeNet with its TRAIN Data layer replaced.
train_layer() {
  case $1 in
    plain) echo "data_param { source: \"data/fashion-mnist/train_lmdb\" batch_size: 64 backend: LMDB }" ;;
    raw|encoded) echo "data_param { source: \"$OUT/$1\" batch_size: 64 backend: LMDB }" ;;
    imagedata) echo "image_data_param { source: \"$OUT/png/list.txt\" root_folder: \"$OUT/png\" batch_size: 64 is_color: false }" ;;
  esac
}
for v in plain raw encoded imagedata; do
  type=Data
  [[ $v == imagedata ]] && type=ImageData
  awk -v layer="$(train_layer $v)" -v type="$type" '
    /^layer \{/ { n++ }
    n == 1 && /type: "Data"/ { sub(/"Data"/, "\"" type "\"") }
    n == 1 && /data_param \{/ { skip = 1; print "  " layer; next }
    skip && /^  \}/ { skip = 0; next }
    skip { next }
    { print }' configs/lenet/lenet_train_test.prototxt > "$OUT/net_$v.prototxt"
  sed -e "s|^net:.*|net: \"$OUT/net_$v.prototxt\"|" -e "s|^max_iter:.*|max_iter: $ITER|" \
      -e "s|^snapshot:.*|snapshot: 0|" -e "s|^snapshot_prefix:.*|snapshot_prefix: \"$OUT/snap_$v\"|" \
      configs/lenet/solver.prototxt > "$OUT/solver_$v.prototxt"
done

declare -A ips acc
for ((r = 1; r <= ROUNDS; ++r)); do
  for v in plain raw encoded imagedata; do
    log=$OUT/r$r.$v.log
    t0=$(date +%s.%N)
    "$HS" train --solver="$OUT/solver_$v.prototxt" --solvers="$SOLVERS" > "$log" 2>&1 || { echo "$v: failed, see $log"; tail -3 "$log"; exit 1; }
    wall=$(echo "$(date +%s.%N) - $t0" | bc)
    a=$(grep "Test net output #0: accuracy" "$log" | tail -1 | sed 's/.*accuracy = //')
    # Training throughput: the median of the Progress lines' img/s.
    rate=$(grep -oE "iterations, [0-9]+ img/s" "$log" | awk '{print $2}' | sort -n | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}')
    printf "round %d  %-9s  accuracy %s  %6s img/s  wall %.1f s\n" "$r" "$v" "$a" "$rate" "$wall"
    ips[$v]+="$rate "
    acc[$v]+="$a "
  done
done
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
base=$(echo "${ips[plain]}" | median)
echo "== $ROUNDS round(s), $ITER iterations, $SOLVERS solvers: median img/s (against plain) and accuracies"
for v in plain raw encoded imagedata; do
  m=$(echo "${ips[$v]}" | median)
  printf "%-9s  %6s img/s  %.2fx  accuracy %s\n" "$v" "$m" "$(echo "scale=4; $m / $base" | bc)" "${acc[$v]}"
done
