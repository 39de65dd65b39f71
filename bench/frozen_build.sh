# Sourced by the long bench scripts: they run on a private copy of BUILD_DIR's programs and
# libraries, so that a rebuild while a sitting runs cannot change or break it halfway (a
# relinked libhogstream_core.so under running processes did: "undefined symbol" at the next
# start). hs_freeze_build sets BUILD_DIR to the copy, LD_LIBRARY_PATH to find its libraries
# (our programs' RUNPATH names the build directory, and LD_LIBRARY_PATH is searched first),
# and removes the copy when the script exits (after the script's own EXIT trap, if any).
hs_freeze_build() {
  local to f
  to=$(mktemp -d /tmp/hogstream-bench-bin.XXXXXX)
  for f in "$BUILD_DIR"/hogstream "$BUILD_DIR"/hogwild.bin "$BUILD_DIR"/gpus.bin "$BUILD_DIR"/raw.bin "$BUILD_DIR"/*.so; do
    [[ -e $f ]] && cp -p "$f" "$to/"
  done
  export LD_LIBRARY_PATH="$to${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  BUILD_DIR=$to
  local previous
  previous=$(trap -p EXIT | sed -E "s/^trap -- '(.*)' EXIT$/\1/")
  # shellcheck disable=SC2064
  trap "${previous:+$previous; }rm -rf '$to'" EXIT
}
