# Sourced by the bench scripts: figures read from Caffe-format logs.
# time_to_target LOG: seconds from the log's first line to its first test accuracy >= $TARGET
# ("-" if never). final_accuracy LOG: the last test accuracy printed.
TARGET=${TARGET:-0.89}
time_to_target() {
  awk -v target="$TARGET" '
    function secs(t,  a) { split(t, a, ":"); return a[1] * 3600 + a[2] * 60 + a[3] }
    /^[IWE][0-9][0-9][0-9][0-9] / { if (start == "") start = secs($2) }
    /Test net output #0: accuracy = / {
      v = $NF + 0
      if (v >= target && hit == "") hit = secs($2)
    }
    END { if (hit == "") print "-"; else printf "%.1f\n", hit - start }' "$1"
}
final_accuracy() {
  grep "Test net output #0: accuracy" "$1" | tail -1 | sed 's/.*accuracy = //'
}
