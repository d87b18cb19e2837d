#!/bin/sh
# make lab, when the lab does not build: a fresh results.json (Gradescope's
# format) with score 0 and the compiler's messages, so that an autograder
# never shows the results of an earlier build.
#
#   scripts/lab-build-failed.sh RESULTS TITLE BUILD_LOG
#
# The log's compile and link lines ("  CC file.c") are left out; the rest is
# kept up to 12,000 bytes (the first errors are the ones to read). The file
# is written under a temporary name and renamed into place.
set -eu
results=$1 title=$2 log=$3
tmp="$results.tmp-$$"
trap 'rm -f "$tmp"' EXIT INT TERM
# JSON string escaping: backslash, quote, tab, and every other control
# character (a compiler's colours, a stray byte) as a space.
escape() {
    awk 'BEGIN { ORS = "" }
    {
        gsub(/\\/, "\\\\"); gsub(/"/, "\\\""); gsub(/\t/, "\\t"); gsub(/\r/, "")
        gsub(/[\001-\037\177]/, " ")
        print $0 "\\n"
    }'
}
message=$(grep -v '^  \(CC\|LD\) ' "$log" | head -c 12000 | escape)
heading=$(printf '%s\n%s\n\n' "$title" "Score: 0: your code does not build; the compiler's messages:" | escape)
printf '{\n  "score": 0,\n  "output": "%s%s",\n  "tests": []\n}\n' "$heading" "$message" > "$tmp"
mv -f "$tmp" "$results"
echo "make lab: $results says score 0 and why" >&2
