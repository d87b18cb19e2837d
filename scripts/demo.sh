#!/bin/sh
# `make demo`: every chapter of kvlab on the same requests, side by side.
#
#   scripts/demo.sh [demo options]      (build/demo --help lists them)
#
# Runs build/demo (chapters 1-5 in one process, on the default model and
# data/requests-mixed.tsv unless told otherwise), prints its table (also
# kept in build/demo-out/table.md), and draws KV memory reserved vs used over
# the steps, one panel per chapter, into build/demo-out/kv-timeline.png and
# .svg with gnuplot (scripts/demo-plot.gp). Progress goes to stderr.
set -eu
BUILD=${BUILD:-build}
OUT=$BUILD/demo-out
[ -x "$BUILD/demo" ] || { echo "demo: $BUILD/demo is missing; run make first" >&2; exit 1; }
command -v gnuplot > /dev/null || { echo "demo: gnuplot is missing (Debian: apt-get install gnuplot-nox)" >&2; exit 1; }
mkdir -p "$OUT"
status=0
"$BUILD/demo" --out "$OUT" "$@" > "$OUT/table.md" || status=$?
cat "$OUT/table.md"
[ "$status" -eq 0 ] || exit "$status"
for fmt in png svg; do
    gnuplot -e "data='$OUT/kv-timeline.tsv'; out='$OUT/kv-timeline.$fmt'; fmt='$fmt'" scripts/demo-plot.gp
done
echo
echo "plot: $OUT/kv-timeline.png and $OUT/kv-timeline.svg (KV reserved vs used over the steps, per chapter)"
