#!/bin/sh
# Chapter 6 measurements (a benchmark, never a test): what a bounded KV
# cache costs in quality, against the full cache, on one long greedy
# generation.
#
#   scripts/bench-ch06.sh            build/ch06-window on the default model (stories260K)
#   options (environment): BUILD=build  MODEL=path  TOKENIZER=path
#            PROMPT="Once upon a time"  STEPS=480 (new tokens)
#            BUDGETS="32 64 128" (positions a sequence may hold: N + S + H)
#            SINKS=4  BLOCK=16  THREADS=1  FREE=1 (0: skip the free-running runs)
#            OUT=build/bench (ch06.md and ch06.json go there)
#
# 1. The full cache generates STEPS tokens greedily with --ignore-eos
#    (--kv-tokens full.tok): the reference continuation.
# 2. For every budget B and policy (a window of B, a window of B - SINKS
#    with SINKS sinks, H2O with a window of B/2, SINKS sinks and
#    B/2 - SINKS heavy hitters: each holds B positions at most),
#    - teacher-forced (--kv-force full.tok): the perplexity of the full
#      cache's continuation under the bounded cache, and the share of steps
#      whose greedy token is the full cache's;
#    - free-running (FREE=1): its own greedy tokens against the full
#      cache's: the share equal position by position, and the first step
#      that differs.
#    The KV held is the peak of one sequence in a decode step: positions x
#    bytes per token, and blocks x bytes per block (what the pool lends).
set -eu

BUILD=${BUILD:-build}
PROMPT=${PROMPT:-Once upon a time}
STEPS=${STEPS:-480}
BUDGETS=${BUDGETS:-32 64 128}
SINKS=${SINKS:-4}
BLOCK=${BLOCK:-16}
THREADS=${THREADS:-1}
FREE=${FREE:-1}
OUT=${OUT:-$BUILD/bench}
mkdir -p "$OUT"
TMP=$OUT/ch06-work
mkdir -p "$TMP"

model_args=""
[ -n "${MODEL:-}" ] && model_args="--model $MODEL"
[ -n "${TOKENIZER:-}" ] && model_args="$model_args --tokenizer $TOKENIZER"

printf '# %d new tokens of one prompt\n%d\t%s\n' "$STEPS" "$STEPS" "$PROMPT" > "$TMP/request.tsv"
prog="$BUILD/ch06-window $model_args --requests $TMP/request.tsv --block-size $BLOCK --threads $THREADS --ignore-eos --quiet"

json_number() { sed -n "s/^ *\"$2\": \\([-0-9.e+]*\\),\\{0,1\\}$/\\1/p" "$1" | head -1; }

# Share of positions where two token files agree, and the first that differs (0: none).
agreement() {
    awk 'NR == FNR { for (i = 1; i <= NF; i++) a[i] = $i; n = NF; next }
         { m = 0; first = 0
           for (i = 1; i <= n; i++) { if ($i == a[i]) m++; else if (!first) first = i }
           printf "%.4f %d\n", m / n, first }' "$1" "$2"
}

start=$(date +%s)
$prog --kv-tokens "$TMP/full.tok" --json "$TMP/full.json"
$prog --kv-force "$TMP/full.tok" --json "$TMP/full-forced.json"
full_ppl=$(json_number "$TMP/full-forced.json" forced_perplexity)
full_pos=$(json_number "$TMP/full.json" window_peak_positions)
full_bytes=$(json_number "$TMP/full.json" window_peak_kv_bytes)
bpt=$(json_number "$TMP/full.json" window_peak_kv_position_bytes)
bpt=$((bpt / full_pos))

md=$OUT/ch06.md
{
    echo "# Chapter 6 measurements: a bounded KV cache against the full cache"
    echo
    echo "One greedy generation of $STEPS new tokens after \"$PROMPT\" (--ignore-eos), block size $BLOCK;"
    echo "the full cache held $full_pos positions ($full_bytes B in blocks, $bpt B per position);"
    echo "teacher-forced perplexity of its own continuation: $full_ppl."
    echo
    echo "| budget B | policy | N | S | H | peak positions | peak KV (positions) | peak KV (blocks) | perplexity (forced) | greedy = full (forced) | greedy = full (free run) | first difference |"
    echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
} > "$md"
json=$OUT/ch06.json
printf '{\n  "steps": %s, "block_size": %s, "full_positions": %s, "full_kv_bytes": %s, "full_perplexity": %s,\n  "runs": [' \
    "$STEPS" "$BLOCK" "$full_pos" "$full_bytes" "$full_ppl" > "$json"
sep=""
for b in $BUDGETS; do
    half=$((b / 2))
    for policy in window sinks h2o; do
        case $policy in
            window) n=$b; s=0; h=0; opts="--kv-window $n" ;;
            sinks) n=$((b - SINKS)); s=$SINKS; h=0; opts="--kv-window $n --kv-sinks $s" ;;
            h2o) n=$half; s=$SINKS; h=$((b - half - SINKS)); opts="--kv-window $n --kv-sinks $s --kv-evict h2o --kv-heavy $h" ;;
        esac
        tag=$policy-$b
        $prog $opts --kv-force "$TMP/full.tok" --json "$TMP/$tag-forced.json"
        f=$TMP/$tag-forced.json
        ppl=$(json_number "$f" forced_perplexity)
        agree=$(json_number "$f" forced_agreement)
        pos=$(json_number "$f" window_peak_positions)
        kvpos=$(json_number "$f" window_peak_kv_position_bytes)
        kvblk=$(json_number "$f" window_peak_kv_bytes)
        free="-"; first="-"
        if [ "$FREE" = 1 ]; then
            $prog $opts --kv-tokens "$TMP/$tag.tok"
            set -- $(agreement "$TMP/full.tok" "$TMP/$tag.tok")
            free=$1; first=$2
        fi
        echo "| $b | $policy | $n | $s | $h | $pos | $kvpos | $kvblk | $ppl | $agree | $free | $first |" >> "$md"
        printf '%s\n    {"budget": %s, "policy": "%s", "window": %s, "sinks": %s, "heavy": %s, "peak_positions": %s, "peak_kv_position_bytes": %s, "peak_kv_block_bytes": %s, "forced_perplexity": %s, "forced_agreement": %s, "free_agreement": "%s", "first_difference": "%s"}' \
            "$sep" "$b" "$policy" "$n" "$s" "$h" "$pos" "$kvpos" "$kvblk" "$ppl" "$agree" "$free" "$first" >> "$json"
        sep=","
    done
done
printf '\n  ]\n}\n' >> "$json"
{
    echo
    echo "Produced by: \`BUILD=$BUILD STEPS=$STEPS BUDGETS=\"$BUDGETS\" SINKS=$SINKS BLOCK=$BLOCK THREADS=$THREADS FREE=$FREE scripts/bench-ch06.sh\`${MODEL:+ with MODEL=$MODEL} in $(( $(date +%s) - start )) s."
} >> "$md"
cat "$md"
