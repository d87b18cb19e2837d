#!/bin/sh
# `make test-browser`: the page of `make demo` (tools/demo-page.html) in a
# real browser, Debian's chromium, headless. No Python, no Node: chromium
# loads the page with ?test=1 (the page replays every step of every run,
# then writes what it drew into <pre id="kvlab-test">) and --dump-dom
# prints the DOM; this script compares that with what the programs print.
#
#   1. chapters 3 and 4 run on data/requests-mixed.tsv at 640KiB (where
#      chapter 4 preempts) with --trace; build/demo-page makes a page of
#      the two traces;
#   2. the page must report no script error, draw every frame, and set
#      data-ready="1" on <html>;
#   3. at the first step where chapter 4 preempts (read from the trace),
#      the cells the page drew (read back from the SVG) must be the block
#      tables and regions that the programs print with --show-tables at
#      that step, and the page's events there must name every request
#      the trace says was preempted;
#   4. a page of a tampered trace (one block of a table changed) must fail
#      check 3: the comparison can tell;
#   5. build/demo-out/index.html (make demo's own page) must load without
#      a script error; a screenshot of it goes to build/test-browser/.
set -eu
BUILD=${BUILD:-build}
OUT=$BUILD/test-browser
REQS=data/requests-mixed.tsv
BUDGET=640KiB
for p in ch03-batching ch04-paged demo-page; do
    [ -x "$BUILD/$p" ] || { echo "test-browser: $BUILD/$p is missing; run make first" >&2; exit 1; }
done
command -v chromium > /dev/null || { echo "test-browser: chromium is missing (Debian: apt-get install chromium)" >&2; exit 1; }
rm -rf "$OUT"
mkdir -p "$OUT"
fail() { echo "test-browser: FAIL: $*" >&2; exit 1; }

# chromium refuses to run as root without --no-sandbox (CI runs as root).
sandbox=""
[ "$(id -u)" -eq 0 ] && sandbox="--no-sandbox"
browse() { # browse URL ARGS...: chromium headless on a file:// URL
    url=$1; shift
    # shellcheck disable=SC2086
    timeout 180 chromium --headless $sandbox --disable-gpu --no-first-run --hide-scrollbars \
        --user-data-dir="$OUT/profile" --virtual-time-budget=20000 "$@" "$url" 2>> "$OUT/chromium.log"
}
abs() { echo "$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"; }

# 1. the runs and their page
for p in ch03-batching ch04-paged; do
    "$BUILD/$p" --requests "$REQS" --kv-budget $BUDGET --quiet --trace "$OUT/$p.jsonl" 2> "$OUT/$p.log" ||
        fail "$p did not run (see $OUT/$p.log)"
done
# The first step whose line has a preemption, and who was preempted.
line=$(grep -m1 '\["preempt",' "$OUT/ch04-paged.jsonl") || fail "chapter 4 never preempts at $BUDGET: nothing to check"
step=$(echo "$line" | sed 's/^{"step":\([0-9]*\),.*/\1/')
preempted=$(echo "$line" | grep -o '\["preempt",[0-9]*\]' | sed 's/.*,\([0-9]*\)\]/\1/')
echo "test-browser: chapter 4 first preempts at step $step (request index $(echo $preempted))"
# The same runs again, printing the tables at that step: the trace must not change.
for p in ch03-batching ch04-paged; do
    "$BUILD/$p" --requests "$REQS" --kv-budget $BUDGET --quiet --trace "$OUT/$p.again.jsonl" --show-tables "$step" \
        2> "$OUT/$p.tables" || fail "$p --show-tables $step did not run"
    cmp -s "$OUT/$p.jsonl" "$OUT/$p.again.jsonl" || fail "$p: --show-tables changed the trace"
done
# --show-tables' lines in the page's form: "request ID: B0 B1 ..." (chapter 4),
# "request ID: START LEN FILLED" (chapter 3).
sed -n 's/^  \(request [0-9]*\): .* table \[\(.*\)\].*/\1: \2/p' "$OUT/ch04-paged.tables" |
    sed 's/([^)]*)//g; s/,//g' > "$OUT/ch04-paged.expected"
sed -n 's/^  \(request [0-9]*\): .* region \[\([0-9]*\), [0-9]*) of \([0-9]*\) positions, \([0-9]*\) filled.*/\1: \2 \3 \4/p' \
    "$OUT/ch03-batching.tables" > "$OUT/ch03-batching.expected"
[ -s "$OUT/ch04-paged.expected" ] || fail "ch04-paged --show-tables $step printed no block table"
"$BUILD/demo-page" --out "$OUT/page.html" "$OUT/ch03-batching.jsonl" "$OUT/ch04-paged.jsonl"

# What the page drew for one program, from the dumped DOM's test block.
drawn() { # drawn DOM PROGRAM
    sed -n '/<pre id="kvlab-test"/,/<\/pre>/p' "$1" |
        awk -v p="PANEL $2 " 'index($0, "PANEL ") { on = index($0, p) > 0; next } on && /^request / { print }'
}
check_tables() { # check_tables DOM: 0 when the drawn cells are --show-tables' tables
    for p in ch03-batching ch04-paged; do
        drawn "$1" $p | sort > "$1.$p.drawn"
        sort "$OUT/$p.expected" | diff -u - "$1.$p.drawn" > "$1.$p.diff" || return 1
    done
}

# 2. and 3. the page of the runs
url="file://$(abs "$OUT/page.html")?test=1&step=$step"
browse "$url" --dump-dom > "$OUT/page.dom" || fail "chromium did not load $OUT/page.html (see $OUT/chromium.log)"
grep -q 'data-done="1"' "$OUT/page.dom" || fail "the page's test did not finish (see $OUT/page.dom)"
grep -q '^errors 0$' "$OUT/page.dom" || fail "script errors: $(grep '^error ' "$OUT/page.dom" | head -3)"
grep -q '<html[^>]*data-ready="1"' "$OUT/page.dom" || fail "no data-ready=\"1\" on <html>"
grep -q 'id="kv-pool"' "$OUT/page.dom" || fail "no element id=\"kv-pool\""
frames=$(sed -n 's/^frames \([0-9]*\)$/\1/p' "$OUT/page.dom")
steps3=$(grep -c '^{"step"' "$OUT/ch03-batching.jsonl")
steps4=$(grep -c '^{"step"' "$OUT/ch04-paged.jsonl")
most=$((steps3 > steps4 ? steps3 : steps4))
[ "$frames" = "$most" ] || fail "the page drew $frames frames, the traces have $most steps"
check_tables "$OUT/page.dom" || fail "the cells drawn at step $step are not --show-tables' ($(cat "$OUT"/page.dom.*.diff | head -20))"
said=$(grep "^first-preempt ch04-paged " "$OUT/page.dom") || fail "the page did not report chapter 4's first preemption"
echo "$said" | grep -q "^first-preempt ch04-paged step $step: " ||
    fail "the page puts chapter 4's first preemption elsewhere: $said"
for r in $preempted; do
    echo "$said" | grep -q "step $step: request $r preempted" || fail "the page does not say request $r is preempted at step $step: $said"
done
echo "test-browser: no script error; $frames frames; cells at step $step = --show-tables $step of both programs ($(wc -l < "$OUT/ch04-paged.expected") block tables, $(wc -l < "$OUT/ch03-batching.expected") regions); the page says: ${said#*: }"

# 4. a tampered trace must fail the same comparison
first_block=$(sed -n 's/^request [0-9]*: \([0-9]*\).*/\1/p' "$OUT/ch04-paged.expected" | head -1)
sed '2,$ s/"tables":{"\([0-9]*\)":\[0,\[\([0-9]*\)/"tables":{"\1":[0,[9\2/' "$OUT/ch04-paged.jsonl" > "$OUT/tampered.jsonl"
! cmp -s "$OUT/ch04-paged.jsonl" "$OUT/tampered.jsonl" || fail "could not tamper with the trace"
"$BUILD/demo-page" --out "$OUT/tampered.html" "$OUT/ch03-batching.jsonl" "$OUT/tampered.jsonl"
browse "file://$(abs "$OUT/tampered.html")?test=1&step=$step" --dump-dom > "$OUT/tampered.dom" ||
    fail "chromium did not load the tampered page"
if check_tables "$OUT/tampered.dom"; then fail "a tampered trace (block $first_block...) passed the comparison"; fi
echo "test-browser: a tampered trace fails the comparison, as it must"

# 5. make demo's page
demo_page=$BUILD/demo-out/index.html
[ -f "$demo_page" ] || BUILD=$BUILD scripts/demo.sh > "$OUT/demo.log" || fail "make demo failed (see $OUT/demo.log)"
browse "file://$(abs "$demo_page")?test=1" --dump-dom > "$OUT/demo.dom" || fail "chromium did not load $demo_page"
grep -q '^errors 0$' "$OUT/demo.dom" || fail "$demo_page: script errors: $(grep '^error ' "$OUT/demo.dom" | head -3)"
grep -q '<html[^>]*data-ready="1"' "$OUT/demo.dom" || fail "$demo_page: no data-ready=\"1\" on <html>"
browse "file://$(abs "$demo_page")?group=1&step=$step&select=$(echo $preempted | cut -d' ' -f1)" \
    --window-size=1300,1100 --screenshot="$OUT/demo-page.png" > /dev/null || fail "no screenshot"
[ "$(head -c 4 "$OUT/demo-page.png" | od -An -c | tr -d ' ')" = "211PNG" ] || fail "$OUT/demo-page.png is not a PNG"
echo "test-browser: $demo_page loads without a script error; screenshot $OUT/demo-page.png"
echo "test-browser: PASS"
