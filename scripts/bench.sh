#!/bin/sh
# kvlab benchmarks: `make bench`. Timings, not tests: they depend on the
# machine and on what else it is doing, so every figure is repeated and
# reported with its spread, and nothing here can fail a build.
#
#   scripts/bench.sh                  every section
#   scripts/bench.sh ch01_vs_ch02     only the sections named
#
# Sections: limits, single_stream and batched (scripts/bench-speed.sh:
# this machine's read bandwidth and FMA peak, measured in the same run;
# chapter 2's tokens/s on every model shape against the bandwidth-bound
# ceiling and against llama2.c's run.c built with -Ofast -march=native;
# chapter 4's GFLOP/s on the mixed requests against the FMA peak),
# ch01_vs_ch02 (time per step as t grows), ch03_vs_ch04 (each reservation
# policy, and two with continuous batching, against paging:
# throughput and concurrency at one budget, three request files, three
# model sizes), ch03_policies (scripts/bench-ch03.sh: chapter 3's memory
# table at a tight budget), ch04_paged (scripts/bench-ch04.sh: chapter 4's
# targets, block sizes, preemption, forks), ch05_prefix
# (scripts/bench-ch05.sh: prefix caching off, hash and radix on each
# workload, hit rate against block size), ch06_window (scripts/bench-ch06.sh:
# sliding window, sinks and H2O against the full cache on stories260K, and
# on SmolLM2 when it is there: 2,000 tokens, the plot in ch06-window.svg),
# ch07_speculative (scripts/bench-ch07.sh: speculative decoding against
# chapter 4, alternating runs, on SmolLM2 when it is there, else stories260K:
# acceptance, tokens per step, passes per token, tok/s and its ratio),
# latency (scripts/bench-latency.sh: TTFT, TPOT and goodput of chapters 3,
# 4, 5 and 4 with chunked prefill against the Poisson arrival rate, under
# the cost model's clock, on stories260K and on SmolLM2 when it is there;
# each chapter's knee; the plots latency.svg and latency-smollm2.svg),
# attention (PagedAttention
# against contiguous attention, three head widths), smollm2 (the real
# SmolLM2-135M-Instruct GGUF file: chapter 2 decode and prompt speed on 1
# and 2 threads, chapter 4's batched throughput, the weights as stored and
# dequantized to f32, and llama.cpp's llama-bench on the same file when
# LLAMACPP_BENCH is set).
#
# Each section writes build/bench/SECTION.md (a Markdown table with the
# command that produced it) and build/bench/SECTION.json; report.md joins
# the Markdown of the sections that ran and report.json their JSON. To add
# a section, write a function section_NAME that does the same and add NAME
# to SECTIONS.
#
# Timings run on one thread (THREADS=1) unless a section says otherwise
# (single_stream and smollm2 run 1 and 2, batched BATCH_THREADS): on a small shared
# machine OpenMP's waiting threads spin and turn other work's noise into ours.
#
# What it costs: the three speed sections, with every model shape and
# LLAMA2C, took 24 minutes on the 2-core build machine at a load average
# of 6 (most of it the 2-thread runs); the others about 4 minutes on a
# quiet machine. Run only the sections you want (scripts/bench.sh limits
# single_stream), or shorten with ROUNDS=1 STEPS=32 RUNS=2.
#
# Variables:
#   BUILD=build        where the programs are (and bench/ goes)
#   RUNS=5             repetitions of every measurement (stories260K)
#   RUNS_15M=3         repetitions on the synthetic stories15M shape
#   RUNS_110M=2        repetitions on the synthetic stories110M shape (short requests only)
#   THREADS=1          --threads for kvlab programs (1: stable)
#   MODEL, TOKENIZER   the checkpoint (default: stories260K.bin + tok512.bin from models/ or ../shared/models/)
#   SMOLLM2=FILE       the SmolLM2 GGUF file (default: models/ or ../shared/models/SmolLM2-135M-Instruct.Q4_1.gguf)
#   RUNS_SMOLLM2=5     repetitions on it (every program once per round, alternating)
#   LLAMACPP_BENCH=PATH  llama.cpp's llama-bench, to compare with on the same file (-n 64 -p 0; -p 64 -n 0)
#   ROUNDS, STEPS, STEPS_15M, STEPS_260K, SHAPES_DIR, LLAMA2C, LIMIT_PASSES
#                      the speed sections' (scripts/bench-speed.sh says what each does)
set -eu

BUILD=${BUILD:-build}
RUNS=${RUNS:-5}
RUNS_15M=${RUNS_15M:-3}
RUNS_110M=${RUNS_110M:-2}
THREADS=${THREADS:-1}
OUT=$BUILD/bench
FINAL=$OUT # where the results go; a section writes into a staging folder (see main)
TMP=$OUT/tmp
RUNS_SMOLLM2=${RUNS_SMOLLM2:-5}
SECTIONS="limits single_stream batched ch01_vs_ch02 ch03_vs_ch04 ch03_policies ch04_paged ch05_prefix ch06_window ch07_speculative latency attention smollm2"

mkdir -p "$OUT" "$TMP"

say() { printf '%s\n' "$*" >&2; }

# The last lines of a section's Markdown: the command that produced it and,
# when given, what each of its runs was.
produced_by() { # COMMAND [EACH]
    echo
    if [ $# -gt 1 ]; then echo "Produced by: \`$1\` ($2)."; else echo "Produced by: \`$1\`."; fi
    echo
}

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
# against chapter 2 (KV cache). "Sara" runs stories260K to the end of its
# context without stopping: the last step has t = 512 tokens in context (it
# feeds position 511, seq_len - 1, and samples token 513, which ends the
# sequence as in llama2.c's run; see model_max_tokens()).
section_ch01_vs_ch02() {
    prompt="Sara"
    t_list="64 256 512"
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

# ------------------------------------------------------------ SmolLM2 vs llama.cpp

find_smollm2() {
    if [ -n "${SMOLLM2:-}" ]; then [ -r "$SMOLLM2" ]; return; fi
    for dir in models ../shared/models; do
        if [ -r "$dir/SmolLM2-135M-Instruct.Q4_1.gguf" ]; then
            SMOLLM2=$dir/SmolLM2-135M-Instruct.Q4_1.gguf
            return 0
        fi
    done
    return 1
}

# llama-bench's mean tokens/s (avg_ts) from its CSV output.
llamacpp_ts() {
    awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) { h = $i; gsub(/"/, "", h); if (h == "avg_ts") c = i }; next }
             c { v = $c; gsub(/"/, "", v); print v; exit }'
}

# Single-stream decode of 64 tokens from the one-token prompt "The" (what
# llama-bench -n 64 -p 0 measures: generation from an empty context),
# prompt processing of a 64-token prompt (llama-bench -p 64 -n 0), both on
# 1 and 2 threads, and chapter 4 on the mixed request file. One round runs
# every program once, alternating, so that a slow moment of the machine
# hits them alike; ratios are taken within a round.
section_smollm2() {
    name=smollm2
    if ! find_smollm2; then
        say "bench: smollm2: SmolLM2-135M-Instruct.Q4_1.gguf not found (make models, or SMOLLM2=FILE)"
        rm -f "$OUT/$name.md" "$OUT/$name.json"
        return 0
    fi
    if [ ! -x "$BUILD/ch02-kvcache" ] || [ ! -x "$BUILD/ch04-paged" ]; then say "bench: run make first"; return 1; fi
    pp_prompt="The$(i=1; while [ "$i" -lt 64 ]; do printf ' the'; i=$((i + 1)); done)" # 64 tokens
    : > "$TMP/rows"
    # label|program|threads: ch02 decode (JSON tokens_per_s: 64 tokens over the generation loop),
    # ch02 prompt (64 / step_seconds of the prompt step), ch04 (tokens_per_s of the serving loop).
    CASES="decode|ours|1
decode|ours|2
decode|ours-f32|1
prompt|ours|1
prompt|ours|2
serve|ours|1
serve|ours|2"
    if [ -n "${LLAMACPP_BENCH:-}" ]; then
        CASES="$CASES
decode|llama.cpp|1
decode|llama.cpp|2
prompt|llama.cpp|1
prompt|llama.cpp|2"
    else
        say "bench: smollm2: set LLAMACPP_BENCH=/path/to/llama-bench to compare with llama.cpp"
    fi
    i=1
    while [ "$i" -le "$RUNS_SMOLLM2" ]; do
        say "bench: smollm2 round $i of $RUNS_SMOLLM2"
        echo "$CASES" | while IFS='|' read -r what prog t; do
            tag=$what-$prog-$t
            case $what-$prog in
            decode-ours | decode-ours-f32)
                extra=""; [ "$prog" = ours-f32 ] && extra="--weight-dtype f32"
                # shellcheck disable=SC2086
                "$BUILD/ch02-kvcache" --model "$SMOLLM2" $extra --prompt "The" --steps 64 --threads "$t" --quiet \
                    --json "$TMP/$tag.json" > "$TMP/$tag.txt"
                json_number "$TMP/$tag.json" tokens_per_s >> "$TMP/$tag" ;;
            prompt-ours)
                "$BUILD/ch02-kvcache" --model "$SMOLLM2" --prompt "$pp_prompt" --steps 1 --threads "$t" --quiet \
                    --json "$TMP/$tag.json" > /dev/null
                ms=$(step_ms "$TMP/$tag.json" 64)
                awk -v ms="$ms" 'BEGIN { printf "%.2f\n", 64000 / ms }' >> "$TMP/$tag" ;;
            serve-ours)
                "$BUILD/ch04-paged" --model "$SMOLLM2" --requests data/requests-mixed.tsv --kv-budget 1GiB \
                    --threads "$t" --quiet \
                    --json "$TMP/$tag.json" > /dev/null
                json_number "$TMP/$tag.json" tokens_per_s >> "$TMP/$tag" ;;
            decode-llama.cpp)
                "$LLAMACPP_BENCH" -m "$SMOLLM2" -t "$t" -n 64 -p 0 -r 1 -o csv 2> /dev/null | llamacpp_ts >> "$TMP/$tag" ;;
            prompt-llama.cpp)
                "$LLAMACPP_BENCH" -m "$SMOLLM2" -t "$t" -n 0 -p 64 -r 1 -o csv 2> /dev/null | llamacpp_ts >> "$TMP/$tag" ;;
            esac
        done
        i=$((i + 1))
    done
    md=$OUT/$name.md
    json=$OUT/$name.json
    {
        echo "## SmolLM2-135M-Instruct (GGUF, Q4_1 + Q8_0) on the CPU, beside llama.cpp"
        echo
        echo "File $SMOLLM2, greedy, $RUNS_SMOLLM2 rounds (each runs every row once, in turn)."
        echo "decode: chapter 2, prompt \"The\" (one token), 64 new tokens, tokens/s of the generation loop;"
        echo "llama-bench -n 64 -p 0 (generation from an empty context). prompt: a 64-token prompt in one step"
        echo "(chapter 2's prompt step; llama-bench -p 64 -n 0). serve: chapter 4 on data/requests-mixed.tsv"
        echo "(batched, --kv-budget 1GiB), tokens/s of the serving loop. f32: --weight-dtype f32 (dequantized"
        echo "at load, 513 MiB of weights). x llama.cpp: ours / llama.cpp's of the same round, same threads and task"
        echo "(serve rows: against llama.cpp's single-stream decode)."
        echo
        echo "| task | program | threads | tokens/s median (min - max) | x llama.cpp median (min - max) |"
        echo "|---|---|---:|---|---|"
    } > "$md"
    printf '{\n  "model": "%s",\n  "runs": %s,\n  "note": "triples are [median, min, max]",\n  "rows": [' \
        "$SMOLLM2" "$RUNS_SMOLLM2" > "$json"
    sep=""
    echo "$CASES" | while IFS='|' read -r what prog t; do
        tag=$what-$prog-$t
        ref=$what-llama.cpp-$t
        [ "$what" = serve ] && ref=decode-llama.cpp-$t
        # shellcheck disable=SC2046
        set -- $(stats < "$TMP/$tag")
        if [ -r "$TMP/$ref" ] && [ "$prog" != llama.cpp ]; then
            # shellcheck disable=SC2046
            set -- "$@" $(paste "$TMP/$tag" "$TMP/$ref" | awk '{ printf "%.4f\n", $1 / $2 }' | stats)
        else
            set -- "$@" - - -
        fi
        vs="-"
        [ "$4" = - ] || vs=$(printf '%.2f (%.2f - %.2f)' "$4" "$5" "$6")
        printf '| %s | %s | %s | %.1f (%.1f - %.1f) | %s |\n' "$what" "$prog" "$t" "$1" "$2" "$3" "$vs" >> "$md"
        printf '%s\n    {"task": "%s", "program": "%s", "threads": %s, "tokens_per_s": [%s, %s, %s], "vs_llamacpp": [%s, %s, %s]}' \
            "$sep" "$what" "$prog" "$t" "$1" "$2" "$3" "$4" "$5" "$6" | sed 's/\([[ ]\)-\([],]\)/\1null\2/g' >> "$json"
        sep=","
    done
    printf '\n  ]\n}\n' >> "$json"
    {
        echo
        echo "Produced by: \`${LLAMACPP_BENCH:+LLAMACPP_BENCH=$LLAMACPP_BENCH }RUNS_SMOLLM2=$RUNS_SMOLLM2 scripts/bench.sh smollm2\`."
        echo
    } >> "$md"
}

# ------------------------------------------------------------ chapter 3 vs chapter 4

# A synthetic checkpoint of a TinyStories shape, written once into
# $OUT/models (deterministic: the same bytes every time). Prints
# "--model FILE --tokenizer FILE".
synth_model_args() {
    preset=$1
    dir=$FINAL/models
    mkdir -p "$dir"
    if [ ! -r "$dir/$preset.bin" ] || [ ! -r "$dir/$preset-tok.bin" ]; then
        say "bench: writing a synthetic $preset into $dir"
        "$BUILD/synth-model" --preset "$preset" --out "$dir/$preset.bin" --tokenizer-out "$dir/$preset-tok.bin" >&2
    fi
    echo "--model $dir/$preset.bin --tokenizer $dir/$preset-tok.bin"
}

# The strategies compared, as "label|program and options". orca-*: chapter 3
# with continuous batching (Orca's iteration-level scheduling, the same
# reservations).
STRATEGIES="ch03 max|ch03-batching --reserve max
ch03 request|ch03-batching --reserve request
ch03 pow2|ch03-batching --reserve pow2
ch03 grow|ch03-batching --reserve grow
ch03 orca-max|ch03-batching --batching continuous --reserve max
ch03 orca-request|ch03-batching --batching continuous --reserve request
ch04 paged/16|ch04-paged --block-size 16"

# One model: every request file, RUNS rounds; in each round every strategy
# runs once, back to back, so that a slow moment of the machine hits them
# alike, and each one's tokens/s is divided by chapter 3 max's of the same
# round. Appends rows to $md and objects to $json.
ch03_vs_ch04_model() {
    label=$1 model_args=$2 files=$3 runs=$4
    for file in $files; do
        fname=$(basename "$file")
        i=1
        while [ "$i" -le "$runs" ]; do
            say "bench: ch03_vs_ch04: $label, $fname, round $i of $runs"
            echo "$STRATEGIES" | while IFS='|' read -r name prog; do
                tag=$(echo "$name" | tr ' /' '__')
                # shellcheck disable=SC2086
                "$BUILD"/$prog $model_args --requests "$file" --threads "$THREADS" --quiet \
                    --json "$TMP/s-$tag-$i.json" > /dev/null 2> "$TMP/s-$tag.err" ||
                    { say "bench: $prog failed: $(tail -n 1 "$TMP/s-$tag.err")"; exit 1; }
            done
            i=$((i + 1))
        done
        echo "$STRATEGIES" | while IFS='|' read -r name prog; do
            tag=$(echo "$name" | tr ' /' '__')
            j=$TMP/s-$tag-1.json
            tps=$(i=1; while [ "$i" -le "$runs" ]; do json_number "$TMP/s-$tag-$i.json" tokens_per_s; i=$((i + 1)); done | stats)
            ratio=$(i=1; while [ "$i" -le "$runs" ]; do
                        awk -v a="$(json_number "$TMP/s-$tag-$i.json" tokens_per_s)" \
                            -v b="$(json_number "$TMP/s-ch03_max-$i.json" tokens_per_s)" 'BEGIN { printf "%.4f\n", a / b }'
                        i=$((i + 1))
                    done | stats)
            # shellcheck disable=SC2086 # "median min max" twice: split on purpose
            set -- $tps $ratio
            conc=$(json_number "$j" max_concurrent)
            util=$(json_number "$j" kv_utilization_avg)
            steps=$(json_number "$j" steps)
            toks=$(json_number "$j" tokens_generated)
            pre=$(json_number "$j" preemptions)
            req=$(json_number "$j" requeues)
            moved=${pre:-$req}
            printf '| %s | %s | %s | %s | %.1f%% | %s | %s | %.0f (%.0f - %.0f) | %.2f (%.2f - %.2f) |\n' \
                "$label" "$fname" "$name" "$conc" "$(awk -v x="$util" 'BEGIN { print 100 * x }')" "$steps" \
                "${moved:-0}" "$1" "$2" "$3" "$4" "$5" "$6" >> "$md"
            printf '%s\n    {"model": "%s", "requests": "%s", "strategy": "%s", "max_concurrent": %s, "kv_utilization_avg": %s, "steps": %s, "tokens_generated": %s, "preemptions": %s, "tokens_per_s": [%s, %s, %s], "vs_ch03_max": [%s, %s, %s]}' \
                "$(cat "$TMP/sep")" "$label" "$fname" "$name" "$conc" "$util" "$steps" "$toks" "${moved:-0}" \
                "$1" "$2" "$3" "$4" "$5" "$6" >> "$json"
            echo "," > "$TMP/sep"
        done
    done
}

section_ch03_vs_ch04() {
    name=ch03-vs-ch04
    md=$OUT/$name.md
    json=$OUT/$name.json
    for p in ch03-batching ch04-paged synth-model; do
        [ -x "$BUILD/$p" ] || { say "bench: $BUILD/$p is missing; run make first"; return 1; }
    done
    files="data/requests-short.tsv data/requests-long.tsv data/requests-mixed.tsv"
    {
        echo "## Chapter 3 (each reservation policy) vs chapter 4 (paged): throughput and concurrency"
        echo
        echo "Every strategy at the same KV budget, the chapters' default: room for 8 requests of the model's full"
        echo "length (8 x seq_len x bytes per token). --threads $THREADS. tokens/s: generated tokens over the serving"
        echo "loop's wall time, median (min - max) over the rounds; x ch03 max: tokens/s over chapter 3 --reserve max's"
        echo "in the same round (all strategies run back to back in a round), median (min - max). KV util.: used /"
        echo "reserved averaged over steps. requeues/preempt.: chapter 3 grow's requeues, chapter 4's preemptions."
        echo "ch03 orca-*: chapter 3 with --batching continuous (a finished request frees its region at once, waiting"
        echo "ones join at every step, as in Orca), reservations as --reserve says."
        echo
        echo "| model | requests | strategy | max concurrent | KV util. | steps | requeues/preempt. | tokens/s | x ch03 max |"
        echo "|---|---|---|---:|---:|---:|---:|---|---|"
    } > "$md"
    printf '{\n  "threads": %s,\n  "budget": "8 x seq_len x bytes per token (the chapters default)",\n  "note": "triples are [median, min, max]",\n  "rows": [' "$THREADS" > "$json"
    : > "$TMP/sep"
    if find_model; then
        ch03_vs_ch04_model "stories260K" "--model $MODEL --tokenizer $TOKENIZER" "$files" "$RUNS"
    else
        say "bench: stories260K not found; the chapters' synthetic default stands in for it"
        ch03_vs_ch04_model "stories260K (synthetic)" "" "$files" "$RUNS"
    fi
    ch03_vs_ch04_model "stories15M (synthetic)" "$(synth_model_args stories15M)" "$files" "$RUNS_15M"
    ch03_vs_ch04_model "stories110M (synthetic)" "$(synth_model_args stories110M)" "data/requests-short.tsv" "$RUNS_110M"
    printf '\n  ]\n}\n' >> "$json"
    {
        echo
        echo "Synthetic models: \`build/synth-model --preset stories15M|stories110M\` (random weights of the real shapes;"
        echo "their requests stop at max_new_tokens or seq_len, rarely at EOS). stories110M runs only the short file."
        echo "Produced by: \`RUNS=$RUNS RUNS_15M=$RUNS_15M RUNS_110M=$RUNS_110M THREADS=$THREADS scripts/bench.sh ch03_vs_ch04\`."
        echo
    } >> "$md"
}

# ------------------------------------------------------------ the chapters' own scripts

# A chapter's own script, scripts/bench-chNN.sh ARGS..., run with its
# results in $TMP/chNN/ (REPEATS=$RUNS, THREADS=$THREADS); then its
# Markdown SRC, its title turned into the section's by the sed script SED
# and the command line added, becomes $OUT/DEST.
chapter_script() { # NN SRC DEST SED [ARGS...]
    nn=$1 src=$2 dest=$3 sed_script=$4
    shift 4
    mkdir -p "$TMP/ch$nn"
    OUT=$TMP/ch$nn BUILD=$BUILD THREADS=$THREADS REPEATS=$RUNS "scripts/bench-ch$nn.sh" "$@" > /dev/null
    {
        sed -e "$sed_script" "$TMP/ch$nn/$src"
        produced_by "REPEATS=$RUNS THREADS=$THREADS scripts/bench-ch$nn.sh${*:+ $*}" \
            "via \`scripts/bench.sh $(basename "$dest" .md | tr - _)\`"
    } > "$OUT/$dest"
}

# Chapter 3's memory table at a tight budget (the book's table).
section_ch03_policies() {
    chapter_script 03 ch03-policies.md ch03-policies.md "" --threads "$THREADS"
    # The table's rows as JSON: one object per row, the cells as strings.
    awk -F'|' 'BEGIN { printf "{\n  \"rows\": [" }
        /^\| [a-z]/ && !/requests \| batching/ {
            printf "%s\n    [", (n++ ? "," : "")
            for (i = 2; i < NF; i++) { v = $i; gsub(/^ +| +$/, "", v); printf "%s\"%s\"", (i > 2 ? ", " : ""), v }
            printf "]"
        }
        END { printf "\n  ],\n  \"columns\": [\"requests\", \"batching\", \"reserve\", \"max concurrent\", \"avg concurrent\", \"batches\", \"steps\", \"utilization (avg)\", \"token states\", \"reserved\", \"internal frag.\", \"external frag.\", \"held by finished\", \"requeues\", \"tokens/s\"]\n}\n" }' \
        "$TMP/ch03/ch03-policies.md" > "$OUT/ch03-policies.json"
}

# Chapter 6's sliding window, sinks and H2O against the full cache.
section_ch06_window() {
    chapter_script 06 ch06.md ch06-window.md 's/^# Chapter 6 measurements/## Chapter 6/'
    smollm2_json=null
    plot=$TMP/ch06/ch06.svg
    # The real model (book/ch06-window.md, "On the real model"): 2,000
    # tokens sampled at temperature 1.0, then every policy teacher-forced
    # through them at three budgets; 11 runs of 2,000 steps, about 10 to 25
    # minutes of one core (CH06_SMOLLM2_STEPS and CH06_SMOLLM2_BUDGETS
    # shorten it).
    if find_smollm2; then
        say "bench: ch06_window on SmolLM2 (11 runs of ${CH06_SMOLLM2_STEPS:-2000} steps)"
        mkdir -p "$TMP/ch06-smollm2"
        steps=${CH06_SMOLLM2_STEPS:-2000} budgets=${CH06_SMOLLM2_BUDGETS:-256 512 1024}
        smollm2_vars="MODEL=$SMOLLM2 STEPS=$steps BUDGETS=\"$budgets\" FREE=0 TEMPERATURE=1.0 SEED=1"
        OUT=$TMP/ch06-smollm2 BUILD=$BUILD THREADS=$THREADS MODEL=$SMOLLM2 STEPS=$steps BUDGETS="$budgets" \
            FREE=0 TEMPERATURE=1.0 SEED=1 scripts/bench-ch06.sh > /dev/null
        {
            sed -e 's/^# Chapter 6 measurements: \(.*\)/### SmolLM2-135M: \1/' "$TMP/ch06-smollm2/ch06.md"
            produced_by "$smollm2_vars THREADS=$THREADS scripts/bench-ch06.sh" "via \`scripts/bench.sh ch06_window\`"
        } >> "$OUT/ch06-window.md"
        smollm2_json=$(cat "$TMP/ch06-smollm2/ch06.json")
        plot=$TMP/ch06-smollm2/ch06.svg
    else
        say "bench: ch06_window: SmolLM2-135M-Instruct.Q4_1.gguf not found, stories260K only (make models, or SMOLLM2=FILE)"
    fi
    printf '{\n"stories260K": %s,\n"smollm2": %s\n}\n' "$(cat "$TMP/ch06/ch06.json")" "$smollm2_json" > "$OUT/ch06-window.json"
    if [ -e "$plot" ]; then cp "$plot" "$OUT/ch06-window.svg"; fi # the plot: SmolLM2's when it ran (gnuplot)
}

# Chapter 7's speculative decoding against chapter 4 (SmolLM2 when it is
# there: CH07_REPEATS rounds, default 3, of 2 workloads x (1 + 2 proposers x
# 3 k) runs, about 15 to 40 minutes of one core; stories260K otherwise).
section_ch07_speculative() {
    model=models/stories260K.bin
    if find_smollm2; then model=$SMOLLM2; fi
    say "bench: ch07_speculative on $(basename "$model")"
    mkdir -p "$TMP/ch07"
    vars="MODEL=$model REPEATS=${CH07_REPEATS:-3}"
    OUT=$TMP/ch07 BUILD=$BUILD THREADS=$THREADS MODEL=$model REPEATS=${CH07_REPEATS:-3} scripts/bench-ch07.sh > /dev/null
    {
        sed -e 's/^# Chapter 7 measurements/## Chapter 7/' "$TMP/ch07/ch07.md"
        produced_by "$vars THREADS=$THREADS scripts/bench-ch07.sh" "via \`scripts/bench.sh ch07_speculative\`"
    } > "$OUT/ch07-speculative.md"
    cp "$TMP/ch07/ch07.json" "$OUT/ch07-speculative.json"
}

# Chapter 4's targets, the block-size trade-off, running out of blocks and
# forks (the book's tables).
section_ch04_paged() {
    chapter_script 04 ch04.md ch04-paged.md \
        's/^## /### /; s/^# Chapter 4 measurements/## Chapter 4: paged KV, block sizes, preemption, forks/'
    {
        printf '{\n  "block_sizes": ['
        sep=""
        for bs in 1 2 4 8 16 32 64 128 256; do
            j=$TMP/ch04/bs$bs.json
            printf '%s\n    {"block_size": %s, "blocks_total": %s, "kv_utilization_avg": %s, "max_concurrent": %s, "preemptions": %s, "block_table_bytes": %s}' \
                "$sep" "$bs" "$(json_number "$j" blocks_total)" "$(json_number "$j" kv_utilization_avg)" \
                "$(json_number "$j" max_concurrent)" "$(json_number "$j" preemptions)" "$(json_number "$j" block_table_bytes)"
            sep=","
        done
        printf '\n  ],\n  "ch03_max": {"max_concurrent": %s, "kv_utilization_avg": %s},\n' \
            "$(json_number "$TMP/ch04/ch03-max.json" max_concurrent)" "$(json_number "$TMP/ch04/ch03-max.json" kv_utilization_avg)"
        printf '  "tight": {"max_concurrent": %s, "preemptions": %s},\n' \
            "$(json_number "$TMP/ch04/tight.json" max_concurrent)" "$(json_number "$TMP/ch04/tight.json" preemptions)"
        printf '  "forks": {"blocks_saved_by_sharing": %s, "cow_copies": %s}\n}\n' \
            "$(json_number "$TMP/ch04/forks.json" blocks_saved_by_sharing)" "$(json_number "$TMP/ch04/forks.json" cow_copies)"
    } > "$OUT/ch04-paged.json"
}

# ------------------------------------------------------------ chapter 5

section_ch05_prefix() {
    chapter_script 05 ch05.md ch05-prefix.md \
        's/^## /### /; s/^# Chapter 5 measurements/## Chapter 5: prefix caching, off against hash and radix/'
    {
        printf '{\n  "block_sizes": ['
        sep=""
        for bs in 1 2 4 8 16 32 64 128 256; do
            printf '%s\n    {"block_size": %s, "hit_rate_shared_prefix": %s, "hit_rate_multi_turn": %s, "hit_rate_mixed": %s}' \
                "$sep" "$bs" "$(json_number "$TMP/ch05/bs-shared-prefix-$bs.json" prefix_cache_hit_rate)" \
                "$(json_number "$TMP/ch05/bs-multi-turn-$bs.json" prefix_cache_hit_rate)" \
                "$(json_number "$TMP/ch05/bs-mixed-$bs.json" prefix_cache_hit_rate)"
            sep=","
        done
        printf '\n  ]\n}\n'
    } > "$OUT/ch05-prefix.json"
}

# ------------------------------------------------------------ latency against load

# TTFT, TPOT and goodput against the arrival rate (scripts/bench-latency.sh:
# the cost model's clock, so its figures do not depend on the machine).
section_latency() {
    mkdir -p "$TMP/latency"
    smollm2=none
    if find_smollm2; then smollm2=$SMOLLM2; else
        say "bench: latency: SmolLM2-135M-Instruct.Q4_1.gguf not found, stories260K only (make models, or SMOLLM2=FILE)"
    fi
    OUT=$TMP/latency BUILD=$BUILD THREADS=$THREADS SMOLLM2=$smollm2 scripts/bench-latency.sh > /dev/null
    {
        cat "$TMP/latency/latency.md"
        produced_by "THREADS=$THREADS scripts/bench-latency.sh" "via \`scripts/bench.sh latency\`"
    } > "$OUT/latency.md"
    cp "$TMP/latency/latency.json" "$OUT/latency.json"
    for svg in latency.svg latency-smollm2.svg; do
        if [ -e "$TMP/latency/$svg" ]; then cp "$TMP/latency/$svg" "$OUT/$svg"; fi
    done
}

# ------------------------------------------------------------ attention alone

# PagedAttention against contiguous attention on the CPU, for the head
# widths of the three model shapes (stories260K: 8, stories15M: 48,
# stories110M: 64). Each run of build/paged_attention_bench keeps the best
# of 3 rounds per cell and states the ratio paged / contiguous measured in
# that run; the table gives the median (min - max) of those ratios over
# RUNS runs.
section_attention() {
    name=attention
    md=$OUT/$name.md
    json=$OUT/$name.json
    [ -x "$BUILD/paged_attention_bench" ] || { say "bench: $BUILD/paged_attention_bench is missing; run make first"; return 1; }
    {
        echo "## PagedAttention vs contiguous attention on the CPU"
        echo
        echo "One query head over n positions whose blocks are scattered in random order (4 KV heads); time per call"
        echo "through the block table / time of contiguous attention_reference over the same data, each measured in the"
        echo "same run (best of 3 rounds of thread CPU time); median (min - max) over $RUNS runs. Contiguous us/call:"
        echo "median. Every paged result is checked to be bitwise equal to the contiguous one."
        echo
        echo "| head_dim (model) | positions | contiguous us/call | bs 1 | bs 4 | bs 16 | bs 64 | bs 256 |"
        echo "|---|---:|---:|---|---|---|---|---|"
    } > "$md"
    printf '{\n  "runs": %s,\n  "note": "ratios paged/contiguous, [median, min, max]",\n  "rows": [' "$RUNS" > "$json"
    sep=""
    for hd_model in "8|stories260K" "48|stories15M" "64|stories110M"; do
        hd=${hd_model%%|*}
        model=${hd_model#*|}
        i=1
        while [ "$i" -le "$RUNS" ]; do
            say "bench: attention: head_dim $hd, run $i of $RUNS"
            "$BUILD/paged_attention_bench" "$hd" 3 > "$TMP/att-$hd-$i.txt"
            i=$((i + 1))
        done
        for n in 128 512 2048; do
            # "| n | block | us | ratio |" rows of every run: column 3 is the block size or "contiguous".
            cont=$(cat "$TMP"/att-"$hd"-*.txt | awk -F'|' -v n="$n" '$2 + 0 == n && $3 ~ /contiguous/ { print $4 + 0 }' | stats)
            row="| $hd ($model) | $n | $(printf '%.2f' "${cont%% *}") |"
            obj="{\"head_dim\": $hd, \"model\": \"$model\", \"positions\": $n, \"contiguous_us\": ${cont%% *}"
            for bs in 1 4 16 64 256; do
                r=$(cat "$TMP"/att-"$hd"-*.txt | awk -F'|' -v n="$n" -v b="$bs" '$2 + 0 == n && $3 + 0 == b && $3 !~ /contiguous/ { print $5 + 0 }' | stats)
                # shellcheck disable=SC2086
                set -- $r
                row="$row $(printf '%.2f (%.2f - %.2f)' "$1" "$2" "$3") |"
                obj="$obj, \"bs$bs\": [$1, $2, $3]"
            done
            echo "$row" >> "$md"
            printf '%s\n    %s}' "$sep" "$obj" >> "$json"
            sep=","
        done
    done
    printf '\n  ]\n}\n' >> "$json"
    {
        echo
        echo "Produced by: \`RUNS=$RUNS scripts/bench.sh attention\` (each run: \`$BUILD/paged_attention_bench HEAD_DIM 3\`)."
        echo
    } >> "$md"
}

# ------------------------------------------------------------ the speed sections

# limits, single_stream and batched live in their own file.
# shellcheck source=scripts/bench-speed.sh
. "$(dirname "$0")/bench-speed.sh"

# ------------------------------------------------------------ main

# A section writes its SECTION.md and SECTION.json into a staging folder
# beside the results; only once it has finished do they replace the old
# ones (mv within one file system is a rename). An interrupted or failed
# section leaves the previous results whole, never half a table; a section
# that skipped itself (no llama2.c, no SmolLM2) removes its old results.
# The joined report goes the same way.
staging() { # NAME: a fresh staging folder, printed
    rm -rf "$FINAL/.staging-$1"
    mkdir -p "$FINAL/.staging-$1"
    echo "$FINAL/.staging-$1"
}
publish() { # NAME STAGING
    base=$(echo "$1" | tr _ -)
    for ext in md json svg; do
        if [ -e "$2/$base.$ext" ]; then
            mv -f "$2/$base.$ext" "$FINAL/$base.$ext"
        else
            rm -f "$FINAL/$base.$ext"
        fi
    done
    for extra in "$2/$base"-*.svg; do # a section's further plots (latency-smollm2.svg)
        if [ -e "$extra" ]; then mv -f "$extra" "$FINAL/"; fi
    done
    rm -rf "$2"
}

# How busy the machine was: the 1-minute load average (runnable jobs,
# ours included) when the run started and when it ended.
load_average() { cut -d' ' -f1 /proc/loadavg 2>/dev/null || echo unknown; }
LOAD_START=$(load_average)

wanted=${*:-$SECTIONS}
for s in $wanted; do
    case " $SECTIONS " in
        *" $s "*)
            OUT=$(staging "$s")
            "section_$s"
            publish "$s" "$OUT"
            OUT=$FINAL ;;
        *) say "bench: no section '$s' (sections: $SECTIONS)"; exit 1 ;;
    esac
done

# The joined reports.
stage=$(staging report)
{
    echo "# kvlab benchmarks"
    echo
    echo "$(uname -m), $(nproc) CPUs, $(date -u +%Y-%m-%d), load average $LOAD_START when the run started and"
    echo "$(load_average) when it ended. Timings are noisy: compare medians, read the spread."
    echo "Every kvlab program ran with --threads $THREADS unless its section says otherwise: on a small shared"
    echo "machine OpenMP's idle threads spin and make every other measurement noisier."
    echo
    for s in $SECTIONS; do
        f=$FINAL/$(echo "$s" | tr _ -).md
        if [ -r "$f" ]; then cat "$f"; fi
    done
} > "$stage/report.md"
{
    printf '{\n  "machine": "%s, %s CPUs",\n  "date": "%s",\n  "load_average": [%s, %s],\n  "threads": %s,\n  "sections": {' \
        "$(uname -m)" "$(nproc)" "$(date -u +%Y-%m-%d)" "$LOAD_START" "$(load_average)" "$THREADS"
    sep=""
    for s in $SECTIONS; do
        f=$FINAL/$(echo "$s" | tr _ -).json
        if [ -r "$f" ]; then
            printf '%s\n    "%s": ' "$sep" "$s"
            awk 'NR > 1 { printf "\n    " } { printf "%s", $0 }' "$f"
            sep=","
        fi
    done
    printf '\n  }\n}\n'
} > "$stage/report.json"
publish report "$stage"
rm -rf "$TMP"
say "bench: wrote $FINAL/report.md"
cat "$FINAL/report.md"
