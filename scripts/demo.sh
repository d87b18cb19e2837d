#!/bin/sh
# `make demo`: every chapter of kvlab on the same requests, side by side.
#
#   scripts/demo.sh [demo options]      (build/demo --help lists them)
#
# Runs build/demo (chapters 1-5 in one process, on the default model and
# data/requests-demo.tsv unless told otherwise), prints its table (also
# kept in build/demo-out/table.md), and draws KV memory reserved vs used over
# the steps, one panel per chapter, into build/demo-out/kv-timeline.png and
# .svg with gnuplot (scripts/demo-plot.gp), and writes the interactive page
# build/demo-out/index.html (build/demo-page). Progress goes to stderr.
set -eu
BUILD=${BUILD:-build}
OUT=$BUILD/demo-out
# In a handout (no solutions/) the chapters run on the student's files in
# exercises/: the demo runs once every lab it shows is written, and until
# then says which are not (a file that still calls LAB_TODO is not).
if ! ls -d solutions/ch[0-9][0-9] > /dev/null 2>&1; then
    unfinished=""
    for lab in 1 2 3 4 5; do
        todo=$(grep -l 'LAB_TODO(' exercises/ch0$lab/*.c 2> /dev/null | sed 's|.*/||' | tr '\n' ' ')
        [ -z "$todo" ] || unfinished="$unfinished  lab $lab: ${todo% }
"
    done
    if [ -n "$unfinished" ]; then
        echo "make demo runs chapters 1 to 5 side by side on your code in exercises/, so it needs labs 1 to 5"
        echo "written. These files still call LAB_TODO:"
        printf '%s' "$unfinished"
        echo "Finish them (make lab CH=n grades each). Meanwhile each chapter's program runs on what you wrote:"
        echo "build/ch01-naive, build/ch02-kvcache, ... (--help for their options); book/side-by-side.md"
        echo "shows the demo's output."
        exit 0
    fi
fi
for tool in demo demo-page; do
    [ -x "$BUILD/$tool" ] || { echo "demo: $BUILD/$tool is missing; run make first" >&2; exit 1; }
done
command -v gnuplot > /dev/null || { echo "demo: gnuplot is missing (Debian: apt-get install gnuplot-nox)" >&2; exit 1; }
mkdir -p "$OUT"
# Every file is written under a temporary name in $OUT and renamed into
# place once complete (as the programs do, common/base/outfile.h): a run
# that fails leaves the previous table and plots as they were.
tmp_table="$OUT/.table.md.tmp-$$"
trap 'rm -f "$tmp_table" "$OUT/.kv-timeline.png.tmp-$$" "$OUT/.kv-timeline.svg.tmp-$$"' EXIT
trap 'exit 130' INT TERM HUP
status=0
"$BUILD/demo" --out "$OUT" "$@" > "$tmp_table" || status=$?
cat "$tmp_table"
[ "$status" -eq 0 ] || exit "$status"
sync "$tmp_table"
mv -f "$tmp_table" "$OUT/table.md"
for fmt in png svg; do
    tmp="$OUT/.kv-timeline.$fmt.tmp-$$"
    gnuplot -e "data='$OUT/kv-timeline.tsv'; out='$tmp'; fmt='$fmt'" scripts/demo-plot.gp
    sync "$tmp"
    mv -f "$tmp" "$OUT/kv-timeline.$fmt"
done
# The page: the traces of chapters 3 and 4 that build/demo wrote (the
# table's budget, and the tight one where chapter 4 preempts when it ran),
# in one self-contained file (tools/demo-page.html, build/demo-page).
traces="$OUT/trace-ch03.jsonl $OUT/trace-ch04.jsonl"
[ -f "$OUT/trace-tight-ch03.jsonl" ] && traces="$traces $OUT/trace-tight-ch03.jsonl $OUT/trace-tight-ch04.jsonl"
# shellcheck disable=SC2086
"$BUILD/demo-page" --out "$OUT/index.html" $traces
echo
echo "plot: $OUT/kv-timeline.png and $OUT/kv-timeline.svg (KV reserved vs used over the steps, per chapter)"
echo "page: $OUT/index.html (chapters 3 and 4 step by step; open it from disk in a browser)"
