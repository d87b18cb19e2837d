#!/bin/sh
# Latency against load (a benchmark, never a test): chapters 3, 4 and 5,
# and chapter 4 with chunked prefill, at rising Poisson arrival rates,
# timed by the cost model (--clock model), so that every figure is the same
# on any machine and at any --threads: only the run time depends on the
# machine. Each run gives p50/p99 TTFT, p50/p99 TPOT and goodput (the
# requests per second that meet both objectives).
#
#   scripts/bench-latency.sh
#   options (environment): BUILD=build  OUT=build/bench  THREADS=1
#            RATES="10 25 ... 3200"   arrival rates (requests/s) on stories260K
#            COPIES=5                 the mixed file this many times over (100 requests)
#            SLO_TTFT=0.01 SLO_TPOT=0.002   the objectives on stories260K (seconds)
#            MACHINE=kvlab-cpu        the cost model's machine (--machine)
#            SMOLLM2=FILE             the SmolLM2 GGUF (default: models/ or ../shared/models/; none: skip it)
#            SMOLLM2_RATES="0.5 1 2 4 8"  SMOLLM2_BUDGET=720MiB
#            SMOLLM2_SLO_TTFT=1 SMOLLM2_SLO_TPOT=0.1
#
# Writes latency.md, latency.json, latency.tsv (one line a run) and, with
# gnuplot, latency.svg (and latency-smollm2.svg) into OUT.
#
# The knee of a chapter: the highest rate of the sweep up to which every
# rate has at least 90% of its requests meeting both objectives; above it
# the chapter's goodput falls behind the offered load.
#
# The copies of the mixed file begin with "Day K." (K = 1..COPIES), so
# that chapter 5's prefix cache finds no copy of an earlier copy's prompt:
# it shares only what the file itself shares.
#
# SmolLM2 (when the file is there) serves data/requests-short.tsv at a KV
# budget of 720 MiB: chapter 3's --reserve max holds 2 requests of the
# model's 8192 positions (360 MiB each), chapter 4 holds 16,384 positions,
# every request at once. Each of its runs computes the real model on the
# CPU (about 10 s of one core), so it sweeps fewer rates.
#
# What it costs: stories260K, 4 chapters x 9 rates, about 30 s; SmolLM2,
# 4 chapters x 5 rates, about 4 minutes on the 2-core build machine.
set -eu

BUILD=${BUILD:-build}
OUT=${OUT:-$BUILD/bench}
THREADS=${THREADS:-1}
RATES=${RATES:-"10 25 50 100 200 400 800 1600 3200"}
COPIES=${COPIES:-5}
SLO_TTFT=${SLO_TTFT:-0.01}
SLO_TPOT=${SLO_TPOT:-0.002}
MACHINE=${MACHINE:-kvlab-cpu}
SMOLLM2_RATES=${SMOLLM2_RATES:-"0.5 1 2 4 8"}
SMOLLM2_BUDGET=${SMOLLM2_BUDGET:-720MiB}
SMOLLM2_SLO_TTFT=${SMOLLM2_SLO_TTFT:-1}
SMOLLM2_SLO_TPOT=${SMOLLM2_SLO_TPOT:-0.1}
mkdir -p "$OUT"

for p in ch03-batching ch04-paged ch05-prefix; do
    [ -x "$BUILD/$p" ] || { echo "bench-latency: $BUILD/$p is missing; run make first" >&2; exit 1; }
done

if [ -z "${SMOLLM2:-}" ]; then
    for dir in models ../shared/models; do
        if [ -r "$dir/SmolLM2-135M-Instruct.Q4_1.gguf" ]; then SMOLLM2=$dir/SmolLM2-135M-Instruct.Q4_1.gguf; fi
    done
fi
[ "${SMOLLM2:-}" = none ] && SMOLLM2=""

# The chapters, one a line: label|program|options.
CHAPTERS="ch03|ch03-batching|
ch04|ch04-paged|
ch05|ch05-prefix|
ch04-chunked|ch04-paged|--max-num-batched-tokens 32"

# lat FILE METRIC STAT: a figure of the run report's latency block.
lat() {
    awk -v m="\"$2\":" -v s="\"$3\":" '
        /"latency": \{/ { inside = 1 }
        inside && $1 == m { metric = ($2 == "{") }
        inside && $1 == s && (metric || s !~ /p50|p99/) { v = $2; sub(/,$/, "", v); print v + 0; exit }' "$1"
}

# sweep MODEL_NAME REQUESTS "RATES" SLO_TTFT SLO_TPOT MODEL_ARGS...: every
# chapter at every rate; one line a run in $OUT/latency.tsv.
sweep() {
    name=$1 reqs=$2 rates=$3 ttft=$4 tpot=$5
    shift 5
    echo "$CHAPTERS" | while IFS='|' read -r label prog extra; do
        for rate in $rates; do
            echo "bench-latency: $name $label at $rate requests/s" >&2
            j=$OUT/latency-run.json
            # shellcheck disable=SC2086 # the options split on purpose
            "$BUILD/$prog" "$@" --requests "$reqs" $extra --threads "$THREADS" --quiet --clock model \
                --machine "$MACHINE" --arrival-rate "$rate" --slo-ttft "$ttft" --slo-tpot "$tpot" \
                --json "$j" > /dev/null 2> "$OUT/latency-run.log" || {
                echo "bench-latency: $prog failed:" >&2; cat "$OUT/latency-run.log" >&2; exit 1; }
            printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$label" "$rate" \
                "$(lat "$j" ttft_s p50)" "$(lat "$j" ttft_s p99)" "$(lat "$j" tpot_s p50)" "$(lat "$j" tpot_s p99)" \
                "$(lat "$j" x goodput_requests_per_s)" "$(lat "$j" x requests_per_s)" \
                "$(lat "$j" x good_requests)" "$(lat "$j" x requests)" >> "$OUT/latency.tsv"
        done
    done
    rm -f "$OUT/latency-run.json" "$OUT/latency-run.log"
}

# knees MODEL_NAME: "label rate goodput" per chapter (rate "-" when even the
# lowest rate misses), from latency.tsv.
knees() {
    awk -F'\t' -v name="$1" '$1 == name {
            if (!($2 in knee)) { knee[$2] = "-"; good[$2] = 0; order[++n] = $2 }
            if (!failed[$2] && $10 >= 0.9 * $11) { knee[$2] = $3; good[$2] = $8 } else failed[$2] = 1
        }
        END { for (i = 1; i <= n; i++) print order[i], knee[order[i]], good[order[i]] }' "$OUT/latency.tsv"
}

# table MODEL_NAME: the Markdown rows of one model's sweep.
table() {
    awk -F'\t' -v name="$1" '$1 == name {
        printf "| %s | %s | %.4g | %.4g | %.4g | %.4g | %d of %d | %.4g |\n",
            $2, $3, $4 * 1000, $5 * 1000, $6 * 1000, $7 * 1000, $10, $11, $8 }' "$OUT/latency.tsv"
}

: > "$OUT/latency.tsv"
# The mixed file COPIES times over, each copy's prompts marked by its day.
mixed=$OUT/requests-mixed-x$COPIES.tsv
k=1
: > "$mixed"
while [ "$k" -le "$COPIES" ]; do
    awk -F'\t' -v k="$k" '!/^#/ && NF >= 2 { printf "%s\tDay %d. %s\n", $1, k, $2 }' data/requests-mixed.tsv >> "$mixed"
    k=$((k + 1))
done
sweep stories260K "$mixed" "$RATES" "$SLO_TTFT" "$SLO_TPOT"
[ -n "${SMOLLM2:-}" ] && sweep SmolLM2-135M data/requests-short.tsv "$SMOLLM2_RATES" "$SMOLLM2_SLO_TTFT" \
    "$SMOLLM2_SLO_TPOT" --model "$SMOLLM2" --kv-budget "$SMOLLM2_BUDGET"

md=$OUT/latency.md
{
    echo "## Latency against load: chapters 3, 4 and 5, and 4 with chunked prefill"
    echo
    echo "Poisson arrivals (--arrival-rate, seed 1), times from the cost model (--clock model --machine $MACHINE):"
    echo "the same figures on any machine. ms: p50 and p99 over the requests; goodput: requests/s meeting both"
    echo "objectives; knee: the highest rate up to which every rate has 90% of its requests meeting both."
    echo "ch04-chunked: --max-num-batched-tokens 32. Chapter 3: its defaults (static batching, --reserve max)."
    echo
    echo "### stories260K: data/requests-mixed.tsv $COPIES times over ($(grep -c . "$mixed") requests), default KV budget"
    echo
    echo "Objectives: TTFT <= $SLO_TTFT s, TPOT <= $SLO_TPOT s. Knees: $(knees stories260K | awk '{ printf "%s%s %s", (NR > 1 ? ", " : ""), $1, $2 }') requests/s."
    echo
    echo "| chapter | rate/s | TTFT p50 ms | TTFT p99 ms | TPOT p50 ms | TPOT p99 ms | met both | goodput/s |"
    echo "|---|---:|---:|---:|---:|---:|---:|---:|"
    table stories260K
    if [ -n "${SMOLLM2:-}" ]; then
        echo
        echo "### SmolLM2-135M: data/requests-short.tsv, KV budget $SMOLLM2_BUDGET (chapter 3 holds 2 requests at once)"
        echo
        echo "The short prompts fit one step of 32 tokens and share no full block, so chunked prefill and chapter 5's"
        echo "prefix cache change nothing here: those rows repeat chapter 4's."
        echo
        echo "Objectives: TTFT <= $SMOLLM2_SLO_TTFT s, TPOT <= $SMOLLM2_SLO_TPOT s. Knees: $(knees SmolLM2-135M | awk '{ printf "%s%s %s", (NR > 1 ? ", " : ""), $1, $2 }') requests/s."
        echo
        echo "| chapter | rate/s | TTFT p50 ms | TTFT p99 ms | TPOT p50 ms | TPOT p99 ms | met both | goodput/s |"
        echo "|---|---:|---:|---:|---:|---:|---:|---:|"
        table SmolLM2-135M
    fi
} > "$md"

{
    printf '{\n  "machine": "%s",\n  "columns": ["model", "chapter", "rate", "ttft_p50_s", "ttft_p99_s", "tpot_p50_s", "tpot_p99_s", "goodput_requests_per_s", "requests_per_s", "good_requests", "requests"],\n  "runs": [' "$MACHINE"
    awk -F'\t' '{ printf "%s\n    [\"%s\", \"%s\", %s, %s, %s, %s, %s, %s, %s, %s, %s]", (NR > 1 ? "," : ""), $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11 }' "$OUT/latency.tsv"
    printf '\n  ],\n  "knees": {'
    { knees stories260K | sed 's/^/stories260K /'; [ -n "${SMOLLM2:-}" ] && knees SmolLM2-135M | sed 's/^/SmolLM2-135M /'; } |
        awk '{ v = ($3 == "-") ? "null" : $3; printf "%s\n    \"%s %s\": %s", (NR > 1 ? "," : ""), $1, $2, v }'
    printf '\n  }\n}\n'
} > "$OUT/latency.json"

# The plots: TTFT, TPOT (p50 solid, p99 dashed) and goodput against the
# rate, each chapter's knee a ring on its goodput line.
if command -v gnuplot > /dev/null 2>&1; then
    for name in stories260K SmolLM2-135M; do
        grep -q "^$name	" "$OUT/latency.tsv" || continue
        svg=$OUT/latency.svg
        [ "$name" = stories260K ] || svg=$OUT/latency-smollm2.svg
        knees "$name" > "$OUT/latency-knees.txt"
        awk -F'\t' -v name="$name" '$1 == name' "$OUT/latency.tsv" > "$OUT/latency-plot.tsv"
        gnuplot -e "data='$OUT/latency-plot.tsv'; knees='$OUT/latency-knees.txt'; name='$name'; out='$svg'" \
            scripts/latency-load.gp
    done
    rm -f "$OUT/latency-plot.tsv" "$OUT/latency-knees.txt"
else
    echo "bench-latency: gnuplot is missing: no plot (Debian: apt-get install gnuplot-nox)" >&2
fi
rm -f "$mixed"
cat "$md"
