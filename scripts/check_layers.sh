#!/usr/bin/env bash
# The layering of the tree, checked on its includes (a ctest, "layers"): each folder may include
# only from the folders below it. The link graph (CMakeLists.txt: one library per folder, shared
# ones linked with --no-undefined) refuses calls up the layers; this refuses an inline header
# pulled in from above, which the linker cannot see.
#
#   scripts/check_layers.sh [SOURCE_DIR]     exit 0: none points up; 1: each one is listed
set -euo pipefail
root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$root"

declare -A allowed=(
  [base]="base"
  [transport]="base transport"
  [core]="base core"
  [data]="base core data"
  [sync]="base core transport sync"
  [observe]="base core sync observe"
)

bad=0
for folder in "${!allowed[@]}"; do
  [[ -d $folder ]] || continue
  while IFS=: read -r file line text; do
    target=$(sed -E 's/.*#include "([a-z_]+)\/.*/\1/' <<<"$text")
    case " ${allowed[$folder]} " in
      *" $target "*) ;;
      *) echo "$file:$line: $folder/ may not include $target/ (allowed: ${allowed[$folder]}): $text"
         bad=1 ;;
    esac
  done < <(grep -rnE '^\s*#\s*include "[a-z_]+/' "$folder" --include='*.cpp' --include='*.hpp' \
             --include='*.cu' --include='*.cuh' --include='*.h' || true)
done
# Private headers: the group's counters are laid out for the group's own code and the /dev/shm
# region that holds them (and tests, which stand in for solvers); everything else goes through
# SharedGroup's named operations.
while IFS=: read -r file line text; do
  case $file in
    sync/group.cpp|sync/shm_region.cpp|sync/solver_group.hpp|test/*) ;;
    *) echo "$file:$line: sync/solver_group.hpp is the group's own (use SharedGroup's operations): $text"
       bad=1 ;;
  esac
done < <(grep -rn '#\s*include "sync/solver_group.hpp"' --include='*.cpp' --include='*.hpp' --include='*.cc' \
           --include='*.cu' base core data sync transport observe bin bench test 2>/dev/null || true)
if ((bad)); then
  echo "layers: includes point up the layers (see CMakeLists.txt, 'the libraries, one per folder'), or reach a private header"
  exit 1
fi
echo "layers: every include of base/ transport/ core/ data/ sync/ observe/ points down or sideways"
