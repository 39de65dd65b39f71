#!/usr/bin/env bash
# Every net and solver prototxt of BVLC Caffe's examples/ and models/, tried with hogstream:
# a solver is parsed (and upgraded if old) and its net found; a net is built in TRAIN and TEST
# (`hogstream describe`). One row each: built, or the first line of the reason it was not.
# A net whose data files (LMDBs, lists, HDF5) are not here is built again with its data tops
# given as inputs of the data's shape (`--input`), and says so: the data, not the format.
#
#   bench/caffe_catalogue.sh CAFFE_TREE     a checkout of BVLC/caffe, or a bare git directory
#   env: BUILD_DIR=build
set -uo pipefail
HS_ROOT=$(cd "$(dirname "$0")/.." && pwd)
HS=$HS_ROOT/${BUILD_DIR:-build}/hogstream
SRC=${1:?usage: bench/caffe_catalogue.sh CAFFE_TREE (a checkout or a bare git directory)}
[[ -x $HS ]] || { echo "caffe_catalogue.sh: build $HS first"; exit 1; }
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
if [[ -d $SRC/examples ]]; then
  (cd "$SRC" && find examples models -name '*.prototxt' | while read -r f; do mkdir -p "$WORK/$(dirname "$f")"; cp "$f" "$WORK/$f"; done)
else  # a git directory: the prototxts of its HEAD
  git --git-dir="$SRC" ls-tree -r --name-only HEAD | grep -E '^(examples|models)/.*\.prototxt$' | while read -r f; do
    mkdir -p "$WORK/$(dirname "$f")"
    git --git-dir="$SRC" show "HEAD:$f" > "$WORK/$f"
  done
fi
cd "$WORK"
# The shapes of each example's data, for the nets whose data files are not here.
stand_in() {
  case $1 in
    examples/mnist/mnist_autoencoder.prototxt) echo "--input=data:100,1,28,28" ;;
    examples/mnist/*) echo "--input=data:64,1,28,28 --input=label:64" ;;
    examples/cifar10/*) echo "--input=data:100,3,32,32 --input=label:100" ;;
    examples/siamese/*) echo "--input=pair_data:64,2,28,28 --input=sim:64" ;;
    examples/hdf5_classification/*) echo "--input=data:10,4 --input=label:10" ;;
    models/bvlc_googlenet/*) echo "--input=data:32,3,224,224 --input=label:32" ;;
    *) echo "--input=data:10,3,227,227 --input=label:10" ;;
  esac
}
first_error() { grep -E "^hogstream: " | head -1 | sed 's/^hogstream: //' | cut -c1-150; }
built=0 data=0 refused=0 solvers=0
while read -r f; do
  if grep -qE '^(base_lr|lr_policy|solver_type|net|train_net|net_param|train_net_param|max_iter):' "$f" ||
     grep -qE '^(net_param|train_net_param) *\{' "$f"; then
    out=$("$HS" upgrade "$f" /dev/null 2>&1); rc=$?
    net=$(grep -oE '^\s*(net|train_net): *"[^"]*"' "$f" | head -1 | sed 's/.*"\(.*\)"/\1/')
    if ((rc != 0)); then printf "%-62s solver  refused: %s\n" "$f" "$(echo "$out" | first_error)"; ((refused++))
    elif [[ -n $net && ! -f $net ]]; then printf "%-62s solver  parsed; its net %s is not in the tree\n" "$f" "$net"; ((solvers++))
    else printf "%-62s solver  parsed%s\n" "$f" "$(echo "$out" | grep -q 'upgraded' && echo ' (upgraded)')"; ((solvers++)); fi
    continue
  fi
  status="built" reason=""
  # A net whose layers are picked by stage (as its solver's test_state does) is built with the first.
  stage=$(grep -oE 'stage: *"[^"]*"' "$f" | head -1 | sed 's/.*"\(.*\)"/\1/')
  phase_flags() { [[ $1 == TEST && -n $stage ]] && echo "--stage=$stage"; }
  for phase in TRAIN TEST; do
    # shellcheck disable=SC2046
    out=$("$HS" describe --model="$f" --phase=$phase $(phase_flags $phase) 2>&1); rc=$?
    if ((rc != 0)); then
      reason="$phase: $(echo "$out" | first_error)"
      if echo "$reason" | grep -qE "cannot open (LMDB|LevelDB|image list|the HDF5 file list|window file)|mean_file|cannot open '.*(binaryproto|\.txt)"; then status="needs its data"; else status="refused"; fi
      break
    fi
  done
  if [[ $status == "needs its data" ]]; then
    status="built with stand-in inputs" reason2=""
    for phase in TRAIN TEST; do
      # shellcheck disable=SC2046
      out=$("$HS" describe --model="$f" --phase=$phase $(phase_flags $phase) $(stand_in "$f") 2>&1) || { status="refused"; reason2="$phase: $(echo "$out" | first_error)"; break; }
    done
    reason="${reason2:-its data files are not here: $(echo "$reason" | grep -oE "(LMDB|LevelDB|image list|HDF5 file list|window file) '[^']*'")}"
  fi
  case $status in built) ((built++)) ;; "built with stand-in inputs") ((data++)) ;; *) ((refused++)) ;; esac
  printf "%-62s net     %s%s\n" "$f" "$status" "${reason:+ ($reason)}"
done < <(find examples models -name '*.prototxt' | sort)
echo "== nets built in both phases: $built, and $data more with stand-in inputs for data files not here; solvers parsed: $solvers; refused: $refused"
