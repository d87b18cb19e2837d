#!/bin/sh
# kvlab benchmarks: `make bench`. Timings, not tests: they depend on the
# machine and on what else it is doing, so every figure is repeated and
# reported with its spread, and nothing here can fail a build.
#
#   scripts/bench.sh                  every section
#   scripts/bench.sh ch01_vs_ch02     only the sections named
#
# Each section writes build/bench/SECTION.md (a Markdown table with the
# command that produced it) and build/bench/SECTION.json; report.md joins
# the Markdown of the sections that ran. To add a section, write a function
# section_NAME that does the same and add NAME to SECTIONS.
#
# Variables:
#   BUILD=build        where the programs are (and bench/ goes)
#   RUNS=5             repetitions of every measurement
#   THREADS=1          --threads for kvlab programs (1: stable, comparable with llama2.c's run)
#   MODEL, TOKENIZER   the checkpoint (default: stories260K.bin + tok512.bin from models/ or ../shared/models/)
#   LLAMA2C_RUN=PATH   llama2.c's `run` built with gcc -O3, to compare single-stream decode speed with
set -eu

BUILD=${BUILD:-build}
RUNS=${RUNS:-5}
THREADS=${THREADS:-1}
OUT=$BUILD/bench
TMP=$OUT/tmp
SECTIONS="ch01_vs_ch02 llama2c"

mkdir -p "$OUT" "$TMP"

say() { printf '%s\n' "$*" >&2; }

find_model() {
    if [ -n "${MODEL:-}" ]; then
        TOKENIZER=${TOKENIZER:-$(dirname "$MODEL")/tok512.bin}
        return 0
    fi
    for dir in models ../shared/models; do
        if [ -r "$dir/stories260K.bin" ] && [ -r "$dir/tok512.bin" ]; then
            MODEL=$dir/stories260K.bin
            TOKENIZER=$dir/tok512.bin
            return 0
        fi
    done
    return 1
}

# Seconds on a clock with nanoseconds (GNU date), for timing whole processes.
now() { date +%s.%N; }

# step_seconds["T"] of a run report, in milliseconds, or nothing.
step_ms() {
    awk -v t="\"$2\":" '
        /"step_seconds"/ { inside = 1; next }
        inside && /}/ { inside = 0 }
        inside && $1 == t { v = $2; sub(/,$/, "", v); printf "%.6f\n", v * 1000 }' "$1"
}

# A number member of a run report ("tokens_per_s", ...).
json_number() {
    awk -v k="\"$2\":" '$1 == k { v = $2; sub(/,$/, "", v); print v + 0; exit }' "$1"
}

# Reads numbers, one a line; prints "median min max" (or "- - -" for none).
stats() {
    sort -n | awk '{ v[NR] = $1 }
        END {
            if (NR == 0) { print "- - -"; exit }
            m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
            printf "%.4f %.4f %.4f\n", m, v[1], v[NR]
        }'
}

# ------------------------------------------------------------ chapter 1 vs chapter 2

# Time per step at context lengths t, chapter 1 (recompute everything)
# against chapter 2 (KV cache). "Sara" runs stories260K to its seq_len of
# 512 without stopping; the last step that runs has t = 511 (it predicts
# token 512), so that is the column for "t = 512".
section_ch01_vs_ch02() {
    prompt="Sara"
    t_list="64 256 511"
    name=ch01-vs-ch02
    if find_model; then model_args="--model $MODEL --tokenizer $TOKENIZER"; else
        say "bench: stories260K not found; the programs use their synthetic default model"
        model_args=""
        MODEL="(synthetic stories260K)"
    fi
    for ch in ch01-naive ch02-kvcache; do
        [ -x "$BUILD/$ch" ] || { say "bench: $BUILD/$ch is missing; run make first"; return 1; }
    done
    i=1
    while [ "$i" -le "$RUNS" ]; do
        for ch in ch01-naive ch02-kvcache; do
            say "bench: $ch run $i of $RUNS"
            # shellcheck disable=SC2086
            "$BUILD/$ch" $model_args --prompt "$prompt" --steps 1000 --threads "$THREADS" --quiet \
                --json "$TMP/$ch-$i.json" > "$TMP/$ch-$i.txt"
        done
        cmp -s "$TMP/ch01-naive-$i.txt" "$TMP/ch02-kvcache-$i.txt" || say "bench: WARNING: chapters 1 and 2 printed different text"
        i=$((i + 1))
    done

    md=$OUT/$name.md
    json=$OUT/$name.json
    {
        echo "## Chapter 1 (recompute) vs chapter 2 (KV cache): time per step as t grows"
        echo
        echo "Model $MODEL, prompt \"$prompt\" (runs to seq_len), greedy, --threads $THREADS, $RUNS runs each."
        echo "Median ms per step (min - max over the runs); ratio = chapter 1 / chapter 2, per run."
        echo
        echo "| t | ch01-naive ms/step | ch02-kvcache ms/step | ratio ch01/ch02 |"
        echo "|---:|---|---|---|"
    } > "$md"
    printf '{\n  "model": "%s",\n  "prompt": "%s",\n  "threads": %s,\n  "runs": %s,\n  "t": {' \
        "$MODEL" "$prompt" "$THREADS" "$RUNS" > "$json"
    sep=""
    for t in $t_list; do
        r1=$(i=1; while [ "$i" -le "$RUNS" ]; do step_ms "$TMP/ch01-naive-$i.json" "$t"; i=$((i + 1)); done | stats)
        r2=$(i=1; while [ "$i" -le "$RUNS" ]; do step_ms "$TMP/ch02-kvcache-$i.json" "$t"; i=$((i + 1)); done | stats)
        rr=$(i=1; while [ "$i" -le "$RUNS" ]; do
                a=$(step_ms "$TMP/ch01-naive-$i.json" "$t"); b=$(step_ms "$TMP/ch02-kvcache-$i.json" "$t")
                [ -n "$a" ] && [ -n "$b" ] && awk -v a="$a" -v b="$b" 'BEGIN { printf "%.4f\n", a / b }'
                i=$((i + 1))
             done | stats)
        # shellcheck disable=SC2086 # each holds "median min max": split on purpose
        set -- $r1 $r2 $rr
        echo "| $t | $1 ($2 - $3) | $4 ($5 - $6) | $7 ($8 - $9) |" >> "$md"
        printf '%s\n    "%s": {"ch01_ms": [%s, %s, %s], "ch02_ms": [%s, %s, %s], "ratio": [%s, %s, %s]}' \
            "$sep" "$t" "$1" "$2" "$3" "$4" "$5" "$6" "$7" "$8" "$9" | sed 's/\([[ ]\)-\([],]\)/\1null\2/g' >> "$json"
        sep=","
    done
    printf '\n  },\n  "note": "each triple is [median, min, max]"\n}\n' >> "$json"
    {
        echo
        echo "Produced by: \`RUNS=$RUNS THREADS=$THREADS scripts/bench.sh ch01_vs_ch02\` (each run:"
        echo "\`$BUILD/ch0N-... $model_args --prompt \"$prompt\" --steps 1000 --threads $THREADS --json FILE\`, step_seconds)."
        echo
    } >> "$md"
}

# ------------------------------------------------------------ chapter 2 vs llama2.c

# Single-stream decode against llama2.c's run.c (gcc -O3), the yardstick:
# same checkpoint, same prompt, same number of tokens, same output bytes.
# run's -n counts positions including the prompt: ours --steps S with a
# prompt of P tokens (BOS included) is its -n S + P - 1.
section_llama2c() {
    name=llama2c
    if [ -z "${LLAMA2C_RUN:-}" ]; then
        say "bench: llama2c: set LLAMA2C_RUN=/path/to/run (llama2.c's run.c built with gcc -O3) to compare"
        rm -f "$OUT/$name.md" "$OUT/$name.json"
        return 0
    fi
    find_model || { say "bench: llama2c needs stories260K (models/ or ../shared/models/)"; return 1; }
    md=$OUT/$name.md
    json=$OUT/$name.json
    {
        echo "## Single-stream decode: chapter 2 vs llama2.c run.c (-O3)"
        echo
        echo "Model $MODEL, greedy, $RUNS runs each; wall time of the whole process (load, prompt, generation)."
        echo "tokens/s = generated tokens / median wall time. Own figures: ours is JSON tokens_per_s"
        echo "(generated / generation loop); run's is its 'achieved tok/s' (positions after the first / ms timer)."
        echo
        echo "| prompt | new tokens | same text | program | wall ms median (min - max) | tokens/s (wall) | own tok/s median |"
        echo "|---|---:|---|---|---|---:|---:|"
    } > "$md"
    printf '{\n  "model": "%s",\n  "runs": %s,\n  "cases": [' "$MODEL" "$RUNS" > "$json"
    sep=""
    for case in "150|Once upon a time" "1000|Sara"; do
        steps=${case%%|*}
        prompt=${case#*|}
        "$BUILD/ch02-kvcache" --model "$MODEL" --tokenizer "$TOKENIZER" --prompt "$prompt" --steps "$steps" \
            --threads 1 --quiet --json "$TMP/probe.json" > "$TMP/ours.txt"
        n_prompt=$(json_number "$TMP/probe.json" prompt_tokens)
        n_new=$(json_number "$TMP/probe.json" tokens_generated)
        n_run=$((n_new + n_prompt - 1))
        "$LLAMA2C_RUN" "$MODEL" -z "$TOKENIZER" -t 0 -n "$n_run" -i "$prompt" > "$TMP/theirs.txt" 2> /dev/null
        if cmp -s "$TMP/ours.txt" "$TMP/theirs.txt"; then same=yes; else same=NO; fi
        for prog in "ch02-kvcache --threads 1" "ch02-kvcache" "run"; do
            : > "$TMP/wall"
            : > "$TMP/own"
            i=1
            while [ "$i" -le "$RUNS" ]; do
                start=$(now)
                if [ "$prog" = run ]; then
                    "$LLAMA2C_RUN" "$MODEL" -z "$TOKENIZER" -t 0 -n "$n_run" -i "$prompt" > /dev/null 2> "$TMP/run.err"
                    end=$(now)
                    awk '/achieved tok\/s/ { print $3 }' "$TMP/run.err" >> "$TMP/own"
                else
                    # shellcheck disable=SC2086
                    "$BUILD"/$prog --model "$MODEL" --tokenizer "$TOKENIZER" --prompt "$prompt" --steps "$steps" \
                        --quiet --json "$TMP/own.json" > /dev/null
                    end=$(now)
                    json_number "$TMP/own.json" tokens_per_s >> "$TMP/own"
                fi
                awk -v a="$start" -v b="$end" 'BEGIN { printf "%.4f\n", (b - a) * 1000 }' >> "$TMP/wall"
                i=$((i + 1))
            done
            # shellcheck disable=SC2046 # "median min max" twice: split on purpose
            set -- $(stats < "$TMP/wall") $(stats < "$TMP/own")
            tps=$(awk -v n="$n_new" -v ms="$1" 'BEGIN { printf "%.0f", n / (ms / 1000) }')
            label=$prog
            [ "$prog" = run ] && label="llama2.c run -n $n_run"
            echo "| $prompt | $n_new | $same | $label | $1 ($2 - $3) | $tps | $4 |" >> "$md"
            printf '%s\n    {"prompt": "%s", "new_tokens": %s, "same_text": "%s", "program": "%s", "wall_ms": [%s, %s, %s], "tokens_per_s_wall": %s, "own_tokens_per_s_median": %s}' \
                "$sep" "$prompt" "$n_new" "$same" "$label" "$1" "$2" "$3" "$tps" "$4" >> "$json"
            sep=","
        done
    done
    printf '\n  ]\n}\n' >> "$json"
    {
        echo
        echo "Produced by: \`LLAMA2C_RUN=$LLAMA2C_RUN RUNS=$RUNS scripts/bench.sh llama2c\`."
        echo
    } >> "$md"
}

# ------------------------------------------------------------ main

wanted=${*:-$SECTIONS}
for s in $wanted; do
    case " $SECTIONS " in
        *" $s "*) "section_$s" ;;
        *) say "bench: no section '$s' (sections: $SECTIONS)"; exit 1 ;;
    esac
done

{
    echo "# kvlab benchmarks"
    echo
    echo "$(uname -m), $(nproc) CPUs, $(date -u +%Y-%m-%d). Timings are noisy: compare medians, read the spread."
    echo
    for s in $SECTIONS; do
        f=$OUT/$(echo "$s" | tr _ -).md
        if [ -r "$f" ]; then cat "$f"; fi
    done
} > "$OUT/report.md"
rm -rf "$TMP"
say "bench: wrote $OUT/report.md"
cat "$OUT/report.md"
