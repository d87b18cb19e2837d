#!/bin/sh
# Chapter 5 measurements (a benchmark, never a test): what prefix caching
# saves on each workload, --prefix-cache off against hash and radix.
#
#   scripts/bench-ch05.sh                 build/ch05-prefix on the default model
#   options (environment): BUILD=build  MODEL=path  TOKENIZER=path
#            REPEATS=5  THREADS=1  OUT=build/bench (where ch05.md and the JSON reports go)
#
# Prefill positions, hits and evictions are exact (the same in every run).
# Times are not: the three caches run alternately, REPEATS rounds, and each
# time is given as the median (min-max) of its rounds; the ratio to off is
# taken within each round, then its median.
set -eu

BUILD=${BUILD:-build}
REPEATS=${REPEATS:-5}
THREADS=${THREADS:-1}
OUT=${OUT:-$BUILD/bench}
mkdir -p "$OUT"
md=$OUT/ch05.md

model_args=""
[ -n "${MODEL:-}" ] && model_args="--model $MODEL"
[ -n "${TOKENIZER:-}" ] && model_args="$model_args --tokenizer $TOKENIZER"

[ -x "$BUILD/ch05-prefix" ] || { echo "bench-ch05: $BUILD/ch05-prefix is missing; run make first" >&2; exit 1; }

jget() { awk -v k="\"$1\":" '$1 == k { v = $2; sub(/,$/, "", v); print v; exit }' "$2"; }

# run NAME ARGS...: one run, its report in $OUT/NAME.json.
run() {
    name=$1; shift
    # shellcheck disable=SC2086
    "$BUILD/ch05-prefix" $model_args --threads "$THREADS" --quiet --json "$OUT/$name.json" "$@" \
        2>"$OUT/$name.log" || { echo "bench-ch05: ch05-prefix $* failed:" >&2; cat "$OUT/$name.log" >&2; exit 1; }
}

# median (min-max) of the numbers on stdin, scaled by $1, printed with format $2.
spread() {
    sort -g | awk -v s="$1" -v f="$2" '{ v[NR] = $1 * s }
        END { m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
              printf f " (" f "-" f ")", m, v[1], v[NR] }'
}

pct() { awk -v x="$1" 'BEGIN { printf "%.1f%%", 100 * x }'; }

{
echo "# Chapter 5 measurements"
echo
echo "Threads $THREADS; every request of a file arrives at step 0; default KV budget (8 full-length requests)"
echo "unless said. Times: median (min-max) of $REPEATS rounds, the three caches alternating within a round;"
echo "\"x off\" is the median of the per-round ratios. Command: \`scripts/bench-ch05.sh\`."
echo
} >"$md"

# ------------------------------------------------------------ each workload
workload() {
    title=$1; file=$2; shift 2
    for m in off hash radix; do : >"$OUT/$m.total"; : >"$OUT/$m.ttft"; done
    : >"$OUT/ratio.hash.total"; : >"$OUT/ratio.radix.total"; : >"$OUT/ratio.hash.ttft"; : >"$OUT/ratio.radix.ttft"
    i=0
    while [ "$i" -lt "$REPEATS" ]; do
        for m in off hash radix; do
            run "w-$m" --requests "$file" --prefix-cache "$m" "$@"
            jget elapsed_s "$OUT/w-$m.json" >>"$OUT/$m.total"
            jget time_to_first_token_mean_s "$OUT/w-$m.json" >>"$OUT/$m.ttft"
        done
        for m in hash radix; do
            for k in total ttft; do
                awk -v a="$(tail -1 "$OUT/$m.$k")" -v b="$(tail -1 "$OUT/off.$k")" 'BEGIN { print a / b }' \
                    >>"$OUT/ratio.$m.$k"
            done
        done
        i=$((i + 1))
    done
    {
    echo "## $title"
    echo
    echo "\`build/ch05-prefix --requests $file${*:+ $*} --prefix-cache off|hash|radix\`"
    echo
    echo "| cache | prefill positions needed | computed | saved | hit rate | evictions | preemptions | first token, mean ms | x off | total s | x off |"
    echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    off_computed=$(jget prefill_tokens_computed "$OUT/w-off.json")
    for m in off hash radix; do
        j=$OUT/w-$m.json
        computed=$(jget prefill_tokens_computed "$j")
        saved=$(awk -v a="$computed" -v b="$off_computed" 'BEGIN { printf "%.1f%%", 100 * (1 - a / b) }')
        if [ "$m" = off ]; then rt="1"; rs="1"; else
            rt=$(spread 1 "%.2f" <"$OUT/ratio.$m.ttft"); rs=$(spread 1 "%.2f" <"$OUT/ratio.$m.total"); fi
        printf '| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n' "$m" \
            "$(jget prefix_cache_query_tokens "$j")" "$computed" "$saved" "$(pct "$(jget prefix_cache_hit_rate "$j")")" \
            "$(jget prefix_cache_evictions "$j")" "$(jget preemptions "$j")" \
            "$(spread 1000 "%.0f" <"$OUT/$m.ttft")" "$rt" "$(spread 1 "%.3f" <"$OUT/$m.total")" "$rs"
    done
    echo
    } >>"$md"
}

workload "Shared prefix (data/requests-shared-prefix.tsv)" data/requests-shared-prefix.tsv
workload "Shared prefix, tight budget (640 KiB: 32 blocks)" data/requests-shared-prefix.tsv --kv-budget 640KiB
workload "Multi-turn conversations (data/requests-multi-turn.tsv)" data/requests-multi-turn.tsv
workload "Mixed requests (data/requests-mixed.tsv)" data/requests-mixed.tsv

# ------------------------------------------------------------ hit rate against block size
{
echo "## Hit rate against block size (hash; radix gives the same hits)"
echo
echo "\`build/ch05-prefix --requests FILE --block-size N\`: share of the prefill positions found cached."
echo
echo "| block size | shared prefix | multi-turn | mixed |"
echo "|---:|---:|---:|---:|"
} >>"$md"
for bs in 1 2 4 8 16 32 64 128 256; do
    row="| $bs |"
    for f in shared-prefix multi-turn mixed; do
        run "bs-$f-$bs" --requests "data/requests-$f.tsv" --block-size "$bs"
        row="$row $(pct "$(jget prefix_cache_hit_rate "$OUT/bs-$f-$bs.json")") |"
    done
    echo "$row" >>"$md"
done

cat "$md"
echo "bench-ch05: wrote $md" >&2
