#!/usr/bin/env bash
# The main job: train LeNet on Fashion-MNIST from nothing.
#
#   scripts/demo.sh [--iterations=N]
#
# Installs what is missing (Debian's dataset-fashion-mnist included), builds hogstream,
# converts the dataset to LMDBs once (data/fashion-mnist/), trains configs/lenet/solver.prototxt
# (Caffe's LeNet recipe, 10 000 iterations) with snapshots under out/, and prints the final
# test accuracy. The training log, in Caffe's format, is kept in out/lenet_train.log, and its
# curves are drawn into out/lenet_curves.png (hogstream plot). While it trains, its live page is
# at the address printed first (HS_UI=[HOST:]PORT, default 127.0.0.1:8765; HS_UI=off: none).
set -euo pipefail
HS_ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$HS_ROOT"
source scripts/setup.sh
hs_ensure_packages dataset-fashion-mnist
hs_build hogstream

FM=/usr/share/datasets/fashion-mnist
DATA=data/fashion-mnist
mkdir -p "$DATA" out
for split in train t10k; do
  out=$DATA/$([[ $split == train ]] && echo train || echo test)_lmdb
  if [[ ! -d $out ]]; then
    echo "== converting Fashion-MNIST $split -> $out"
    "$BUILD_DIR/hogstream" convert mnist "$FM/$split-images-idx3-ubyte.gz" \
      "$FM/$split-labels-idx1-ubyte.gz" "$out"
  fi
done

UI=${HS_UI:-127.0.0.1:8765}
page=()
if [[ $UI != off ]]; then
  page=(--ui="$UI")
  echo "== watch it in a browser: http://$([[ $UI == *:* ]] && echo "$UI" || echo "127.0.0.1:$UI")/"
fi
echo "== training configs/lenet (log: out/lenet_train.log)"
"$BUILD_DIR/hogstream" train --solver=configs/lenet/solver.prototxt "${page[@]}" "$@" 2>&1 | tee out/lenet_train.log |
  grep --line-buffered -E "Iteration [0-9]+ \(|Test net output|Progress|Optimization|hogstream:"
acc=$(grep "Test net output #0: accuracy" out/lenet_train.log | tail -1 | sed 's/.*accuracy = //')
echo "final test accuracy: ${acc:-unknown}"
"$BUILD_DIR/hogstream" plot -o out/lenet_curves.png out/lenet_train.log > /dev/null
echo "curves (test accuracy, train and test loss): out/lenet_curves.png"
