#!/bin/sh
# Chapter 4 measurements (a benchmark, never a test): the paged allocator on
# the shipped mixed request file, against chapter 3's --reserve max at the
# same KV budget, and the block-size trade-off.
#
#   scripts/bench-ch04.sh                 build/ch04-paged on the default model
#   options (environment): BUILD=build  MODEL=path  TOKENIZER=path
#            REQUESTS=data/requests-mixed.tsv  REPEATS=3  THREADS=1
#            HEAD_DIM=64 (of the attention-only benchmark)
#            OUT=build/bench (where ch04.md and the JSON reports go)
#
# The budget is chapter 3's default: room for 8 requests of the model's full
# length (8 x seq_len x bytes per token). Chapter 3 with --reserve max holds
# floor(budget / (seq_len x bytes per token)) requests at once; when
# build/ch03-batching exists it is run too, otherwise that number is
# computed by hand and the table says so.
set -eu

BUILD=${BUILD:-build}
REQUESTS=${REQUESTS:-data/requests-mixed.tsv}
REPEATS=${REPEATS:-3}
THREADS=${THREADS:-1}
OUT=${OUT:-$BUILD/bench}
mkdir -p "$OUT"
# The table grows in a file beside ch04.md and replaces it only when
# complete (a rename): a failed run leaves the previous table whole.
final_md=$OUT/ch04.md
md=$OUT/.ch04.md.tmp

model_args=""
[ -n "${MODEL:-}" ] && model_args="--model $MODEL"
[ -n "${TOKENIZER:-}" ] && model_args="$model_args --tokenizer $TOKENIZER"

[ -x "$BUILD/ch04-paged" ] || { echo "bench-ch04: $BUILD/ch04-paged is missing; run make first" >&2; exit 1; }

# jget KEY FILE: the first number after "KEY": in a pretty-printed report.
jget() { awk -v k="\"$1\":" '$1 == k { v = $2; sub(/,$/, "", v); print v; exit }' "$2"; }

# run NAME ARGS...: one run of ch04-paged, its report in $OUT/NAME.json.
run() {
    name=$1; shift
    # shellcheck disable=SC2086
    "$BUILD/ch04-paged" $model_args --requests "$REQUESTS" --threads "$THREADS" --quiet \
        --json "$OUT/$name.json" "$@" 2>"$OUT/$name.log" || {
        echo "bench-ch04: ch04-paged $* failed:" >&2; cat "$OUT/$name.log" >&2; exit 1; }
}

# Best (largest), then the range, of the numbers on stdin, one per line:
# on a shared machine the best run is the least disturbed one.
spread() { sort -g | awk '{ v[NR] = $1 } END { printf "%.0f (%.0f-%.0f)", v[NR], v[1], v[NR] }'; }

pct() { awk -v x="$1" 'BEGIN { printf "%.1f%%", 100 * x }'; }

# ------------------------------------------------------------ the budget
run probe --block-size 16
per_token=$(jget kv_bytes_per_token "$OUT/probe.json")
seq_len=$(jget seq_len "$OUT/probe.json")
budget=$((8 * seq_len * per_token))
ch03_max=$((budget / (seq_len * per_token)))

{
echo "# Chapter 4 measurements"
echo
echo "Requests: \`$REQUESTS\`; KV budget $budget B (8 x $seq_len tokens x $per_token B, chapter 3's default);"
echo "threads $THREADS; tokens/s: best (range) of $REPEATS runs, wall time. Command: \`scripts/bench-ch04.sh\`."
echo
} >"$md"

# ------------------------------------------------------------ chapter 3 vs 4
run paged16 --block-size 16 --kv-budget "$budget"
util16=$(jget kv_utilization_avg "$OUT/paged16.json")
conc16=$(jget max_concurrent "$OUT/paged16.json")
if [ -x "$BUILD/ch03-batching" ]; then
    # shellcheck disable=SC2086
    "$BUILD/ch03-batching" $model_args --requests "$REQUESTS" --threads "$THREADS" --quiet --reserve max \
        --kv-budget "$budget" --json "$OUT/ch03-max.json" 2>"$OUT/ch03-max.log"
    ch03_conc=$(jget max_concurrent "$OUT/ch03-max.json")
    ch03_util=$(pct "$(jget kv_utilization_avg "$OUT/ch03-max.json")")
    ch03_src="measured (build/ch03-batching --reserve max)"
else
    ch03_conc=$ch03_max
    ch03_util="not run"
    ch03_src="computed by hand: floor($budget / ($seq_len x $per_token)); build/ch03-batching absent"
fi
{
echo "## Chapter 3 (--reserve max) vs chapter 4 (block size 16), same budget"
echo
echo "| | max concurrent | KV utilization (avg over steps) |"
echo "|---|---:|---:|"
echo "| chapter 3, --reserve max | $ch03_conc | $ch03_util |"
echo "| chapter 4, block size 16 | $conc16 | $(pct "$util16") |"
echo
awk -v a="$conc16" -v b="$ch03_conc" -v u="$util16" 'BEGIN {
    printf "Concurrency ratio %.2fx (target >= 2x); utilization %.1f%% (target >= 95%%).\n", a / b, 100 * u }'
echo "Chapter 3's number: $ch03_src."
echo
} >>"$md"

# ------------------------------------------------------------ block sizes
{
echo "## Block size trade-off (same budget)"
echo
echo "| block size | blocks | KV util. avg | internal frag. | max concurrent | preemptions | block tables | tokens/s |"
echo "|---:|---:|---:|---:|---:|---:|---:|---:|"
} >>"$md"
for bs in 1 2 4 8 16 32 64 128 256; do
    : >"$OUT/tps-$bs.txt"
    i=0
    while [ "$i" -lt "$REPEATS" ]; do
        run "bs$bs" --block-size "$bs" --kv-budget "$budget"
        jget tokens_per_s "$OUT/bs$bs.json" >>"$OUT/tps-$bs.txt"
        i=$((i + 1))
    done
    j=$OUT/bs$bs.json
    printf '| %s | %s | %s | %s | %s | %s | %s B | %s |\n' "$bs" "$(jget blocks_total "$j")" \
        "$(pct "$(jget kv_utilization_avg "$j")")" "$(pct "$(jget internal_fragmentation "$j")")" \
        "$(jget max_concurrent "$j")" "$(jget preemptions "$j")" "$(jget block_table_bytes "$j")" \
        "$(spread <"$OUT/tps-$bs.txt")" >>"$md"
done

# ------------------------------------------------------------ tight budget, forks
quarter=$((budget / 8))
run tight --block-size 16 --kv-budget "$quarter"
run forks --block-size 16 --kv-budget "$budget" --n 4 --temperature 0.8
{
echo
echo "## Out of blocks and forks (block size 16)"
echo
echo "| run | max concurrent | preemptions | KV util. avg | blocks saved by sharing (peak) | copy-on-write copies |"
echo "|---|---:|---:|---:|---:|---:|"
for r in tight forks; do
    j=$OUT/$r.json
    case $r in tight) what="budget / 8 ($quarter B)" ;; forks) what="--n 4 --temperature 0.8" ;; esac
    printf '| %s | %s | %s | %s | %s | %s |\n' "$what" "$(jget max_concurrent "$j")" "$(jget preemptions "$j")" \
        "$(pct "$(jget kv_utilization_avg "$j")")" "$(jget blocks_saved_by_sharing "$j")" "$(jget cow_copies "$j")"
done
} >>"$md"

# ------------------------------------------------------------ attention alone
if [ -x "$BUILD/paged_attention_bench" ]; then
    {
    echo
    echo "## What the block table costs: attention alone"
    echo
    "$BUILD/paged_attention_bench" "${HEAD_DIM:-64}" 9
    } >>"$md"
fi

mv -f "$md" "$final_md"
md=$final_md
cat "$md"
echo "bench-ch04: wrote $md" >&2
