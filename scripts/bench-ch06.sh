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
#            TEMPERATURE=0 SEED=1 (the reference's sampling; 0 = greedy)
#            OUT=build/bench (ch06.md, ch06.json and, with gnuplot, the plot ch06.svg go there)
#
# 1. The full cache generates STEPS tokens with --ignore-eos
#    (--kv-tokens full.tok): the reference continuation. Greedy by
#    default; TEMPERATURE > 0 samples it (with SEED), for a model whose
#    greedy text falls into a loop that any window predicts (SmolLM2's
#    does after about 250 tokens).
# 2. For every budget B and policy (a window of B, a window of B - SINKS
#    with SINKS sinks, H2O with a window of B/2, SINKS sinks and
#    B/2 - SINKS heavy hitters: each holds B positions at most),
#    - teacher-forced (--kv-force full.tok): the perplexity of the full
#      cache's continuation under the bounded cache, and the share of steps
#      whose greedy token (--kv-argmax) is the one the full cache, forced
#      through the same text, chose;
#    - free-running (FREE=1): its own tokens (sampled as the reference
#      was) against the full cache's: the share equal position by
#      position, and the first step that differs.
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
TEMPERATURE=${TEMPERATURE:-0}
SEED=${SEED:-1}
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

sampling="--temperature $TEMPERATURE --seed $SEED"
start=$(date +%s)
$prog $sampling --kv-tokens "$TMP/full.tok" --json "$TMP/full.json"
$prog --kv-force "$TMP/full.tok" --kv-argmax "$TMP/full.best" --json "$TMP/full-forced.json"
full_ppl=$(json_number "$TMP/full-forced.json" forced_perplexity)
full_pos=$(json_number "$TMP/full.json" window_peak_positions)
full_bytes=$(json_number "$TMP/full.json" window_peak_kv_bytes)
bpt=$(json_number "$TMP/full.json" window_peak_kv_position_bytes)
bpt=$((bpt / full_pos))

md=$OUT/ch06.md
{
    echo "# Chapter 6 measurements: a bounded KV cache against the full cache"
    echo
    if [ "$TEMPERATURE" = 0 ]; then
        echo "One greedy generation of $STEPS new tokens after \"$PROMPT\" (--ignore-eos), block size $BLOCK;"
    else
        echo "One generation of $STEPS new tokens after \"$PROMPT\", sampled at temperature $TEMPERATURE (seed $SEED, --ignore-eos), block size $BLOCK;"
    fi
    echo "the full cache held $full_pos positions ($full_bytes B in blocks, $bpt B per position);"
    echo "teacher-forced perplexity of its own continuation: $full_ppl."
    echo
    echo "| budget B | policy | N | S | H | peak positions | peak KV (positions) | peak KV (blocks) | perplexity (forced) | greedy = full (forced) | tokens = full (free run) | first difference |"
    echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
} > "$md"
json=$OUT/ch06.json
printf '{\n  "steps": %s, "temperature": %s, "seed": %s, "block_size": %s, "full_positions": %s, "full_kv_bytes": %s, "full_perplexity": %s,\n  "runs": [' \
    "$STEPS" "$TEMPERATURE" "$SEED" "$BLOCK" "$full_pos" "$full_bytes" "$full_ppl" > "$json"
sep=""
plot_data=$TMP/runs.tsv # budget policy MiB perplexity agreement%: the plot's data
: > "$plot_data"
for b in $BUDGETS; do
    half=$((b / 2))
    for policy in window sinks h2o; do
        case $policy in
            window) n=$b; s=0; h=0; opts="--kv-window $n" ;;
            sinks) n=$((b - SINKS)); s=$SINKS; h=0; opts="--kv-window $n --kv-sinks $s" ;;
            h2o) n=$half; s=$SINKS; h=$((b - half - SINKS)); opts="--kv-window $n --kv-sinks $s --kv-evict h2o --kv-heavy $h" ;;
        esac
        tag=$policy-$b
        $prog $opts --kv-force "$TMP/full.tok" --kv-argmax "$TMP/$tag.best" --json "$TMP/$tag-forced.json"
        f=$TMP/$tag-forced.json
        ppl=$(json_number "$f" forced_perplexity)
        set -- $(agreement "$TMP/full.best" "$TMP/$tag.best")
        agree=$1
        pos=$(json_number "$f" window_peak_positions)
        kvpos=$(json_number "$f" window_peak_kv_position_bytes)
        kvblk=$(json_number "$f" window_peak_kv_bytes)
        free="-"; first="-"
        if [ "$FREE" = 1 ]; then
            $prog $opts $sampling --kv-tokens "$TMP/$tag.tok"
            set -- $(agreement "$TMP/full.tok" "$TMP/$tag.tok")
            free=$1; first=$2
        fi
        echo "| $b | $policy | $n | $s | $h | $pos | $kvpos | $kvblk | $ppl | $agree | $free | $first |" >> "$md"
        awk -v b="$b" -v p="$policy" -v kv="$kvpos" -v ppl="$ppl" -v a="$agree" \
            'BEGIN { printf "%s %s %.4f %s %.2f\n", b, p, kv / 1048576, ppl, 100 * a }' >> "$plot_data"
        printf '%s\n    {"budget": %s, "policy": "%s", "window": %s, "sinks": %s, "heavy": %s, "peak_positions": %s, "peak_kv_position_bytes": %s, "peak_kv_block_bytes": %s, "forced_perplexity": %s, "forced_agreement": %s, "free_agreement": "%s", "first_difference": "%s"}' \
            "$sep" "$b" "$policy" "$n" "$s" "$h" "$pos" "$kvpos" "$kvblk" "$ppl" "$agree" "$free" "$first" >> "$json"
        sep=","
    done
done
printf '\n  ]\n}\n' >> "$json"

# The plot (when gnuplot is installed): agreement and perplexity against
# the KV held, one line per policy, the full cache dashed.
if command -v gnuplot > /dev/null 2>&1; then
    name=$(basename "${MODEL:-stories260K}")
    name=${name%%.*}
    full_mib=$(awk -v n="$full_pos" -v b="$bpt" 'BEGIN { printf "%.2f", n * b / 1048576 }')
    sort -k2,2 -k1,1n "$plot_data" > "$plot_data.sorted"
    gnuplot -e "data='$plot_data.sorted'; full_mib=$full_mib; full_ppl=$full_ppl; name='$name'; out='$OUT/ch06.svg'" \
        "$(dirname "$0")/window-quality.gp"
fi
{
    echo
    echo "Produced by: \`BUILD=$BUILD STEPS=$STEPS BUDGETS=\"$BUDGETS\" SINKS=$SINKS BLOCK=$BLOCK THREADS=$THREADS FREE=$FREE TEMPERATURE=$TEMPERATURE SEED=$SEED scripts/bench-ch06.sh\`${MODEL:+ with MODEL=$MODEL} in $(( $(date +%s) - start )) s."
} >> "$md"
cat "$md"
