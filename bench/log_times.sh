# Sourced by the bench scripts: figures read from Caffe-format logs.
# time_to_target LOG: seconds from the log's first line to its first test accuracy >= $TARGET
# whose outputs are all finite ("-" if never). final_accuracy LOG: the last test accuracy
# printed, "nan" where that test's outputs are not all finite.
TARGET=${TARGET:-0.89}
time_to_target() {
  # A test whose outputs hold a non-finite value does not count (with NaN scores, Caffe's
  # Accuracy layer finds no class above the label's and reports a high accuracy).
  awk -v target="$TARGET" '
    function secs(t,  a) { split(t, a, ":"); return a[1] * 3600 + a[2] * 60 + a[3] }
    function settle() { if (pend != "" && pend >= target && hit == "") hit = pend_t; pend = "" }
    /^[IWE][0-9][0-9][0-9][0-9] / { if (start == "") start = secs($2) }
    /Test net output #/ && tolower($0) ~ /nan|inf/ { pend = ""; next }
    /Test net output #0: accuracy = / { settle(); pend = $NF + 0; pend_t = secs($2); next }
    /Testing net|Iteration [0-9]+/ { settle() }
    END { settle(); if (hit == "") print "-"; else printf "%.1f\n", hit - start }' "$1"
}
final_accuracy() {
  # "nan" where the last test's outputs are not all finite (its accuracy means nothing then).
  awk '
    /Test net output #0: accuracy = / { acc = $NF; bad = 0 }
    /Test net output #/ && acc != "" && tolower($0) ~ /nan|inf/ { bad = 1 }
    END { if (acc != "") print (bad ? "nan" : acc) }' "$1"
}
