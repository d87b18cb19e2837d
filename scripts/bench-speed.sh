# kvlab benchmarks: the speed sections of scripts/bench.sh, which sources
# this file (it is not run on its own). Each figure stands beside the
# physical limit that bounds it on this machine, measured in the same run:
#
#   limits         build/machine-limits: streaming read bandwidth and vector
#                  FMA throughput, on 1 and 2 threads
#   single_stream  chapter 2 on each model shape, tokens/s against the
#                  bandwidth-bound ceiling, and against llama2.c's run.c built
#                  as its README recommends (gcc -Ofast -march=native), in
#                  alternating runs
#   batched        chapter 4 on data/requests-mixed.tsv, GFLOP/s of its
#                  matmuls against the FMA peak
#
# Uses bench.sh's helpers (say, now, json_number, stats, find_model,
# find_smollm2) and its variables (BUILD, OUT, FINAL, TMP), and these:
#
#   ROUNDS=3         rounds of single_stream and batched (each runs every program once, alternating)
#   STEPS=128        new tokens on the stories42M/110M shapes and SmolLM2
#   STEPS_15M=1000   new tokens on stories15M (1000: to the end of its 256-token context)
#   STEPS_260K=256   new tokens on stories260K
#   SHAPES_DIR=DIR   where stories15M.bin, stories42M.bin, stories110M.bin are, each with
#                    NAME-tok.bin or tokenizer.bin beside it (default: models/, then ../shared/models/);
#                    a shape that is absent is skipped with a note
#   LLAMA2C=PATH     a llama2.c checkout (or its run.c): run.c is built into $BUILD/bench/llama2c/
#                    with `gcc -Ofast -march=native run.c -lm -o run` (and -fopenmp: runomp)
#   LIMIT_PASSES=7   passes of build/machine-limits
#   BATCH_THREADS=1  thread counts of the batched section ("1 2" adds 2 threads: on a busy
#                    2-core machine a 2-thread run of chapter 4 can take minutes)
#
# What it costs (2-core machine, main's kernels of 2026-12-01, at a load
# average of 6, every shape and LLAMA2C): limits about 10 s,
# single_stream about 17 minutes (the 2-thread runs most of it), batched
# about 6 minutes. ROUNDS=1 STEPS=32 cuts both to a fraction.

ROUNDS=${ROUNDS:-3}
STEPS=${STEPS:-128}
STEPS_15M=${STEPS_15M:-1000}
STEPS_260K=${STEPS_260K:-256}
LIMIT_PASSES=${LIMIT_PASSES:-7}
BATCH_THREADS=${BATCH_THREADS:-1}
SPEED_PROMPT="Once upon a time"

# ------------------------------------------------------------ the limits

# The file of build/machine-limits --threads N, measured once per run of
# bench.sh (every section of the run compares against the same figures).
limits_file() {
    f=$TMP/limits-$1.txt
    if [ ! -s "$f" ]; then
        [ -x "$BUILD/machine-limits" ] || { say "bench: $BUILD/machine-limits is missing; run make first"; return 1; }
        say "bench: measuring this machine's read bandwidth and FMA peak on $1 thread(s)"
        "$BUILD/machine-limits" --threads "$1" --passes "$LIMIT_PASSES" > "$f.part"
        mv -f "$f.part" "$f"
    fi
    echo "$f"
}

# One figure of the limits on N threads: limit N read_gb_s_best.
limit() {
    f=$(limits_file "$1") || return 1
    awk -v k="$2" '$1 == k { print $2 }' "$f"
}

# The thread counts measured: 1, and 2 where there are two cores.
limit_threads() {
    if [ "$(nproc)" -ge 2 ]; then echo "1 2"; else echo 1; fi
}

section_limits() {
    name=limits
    md=$OUT/$name.md
    json=$OUT/$name.json
    {
        echo "## This machine's limits: read bandwidth and FMA peak"
        echo
        echo "build/machine-limits: a streaming read of $(limit 1 read_mib) MiB (far larger than the caches) and"
        echo "independent chains of $(limit 1 isa) FMAs in registers, $LIMIT_PASSES passes each; best, median and"
        echo "worst pass. On N threads every thread reads its own slice and runs its own chains (totals)."
        echo "The other sections divide by the best pass: what the machine can do when nothing disturbs it."
        echo
        echo "| threads | read GB/s best | median | worst | FMA GFLOP/s best | median | worst |"
        echo "|---:|---:|---:|---:|---:|---:|---:|"
    } > "$md"
    printf '{\n  "isa": "%s",\n  "read_mib": %s,\n  "passes": %s,\n  "threads": {' \
        "$(limit 1 isa)" "$(limit 1 read_mib)" "$LIMIT_PASSES" > "$json"
    sep=""
    for t in $(limit_threads); do
        echo "| $t | $(limit "$t" read_gb_s_best) | $(limit "$t" read_gb_s_median) | $(limit "$t" read_gb_s_min) |" \
            "$(limit "$t" fma_gflop_s_best) | $(limit "$t" fma_gflop_s_median) | $(limit "$t" fma_gflop_s_min) |" >> "$md"
        printf '%s\n    "%s": {"read_gb_s": [%s, %s, %s], "fma_gflop_s": [%s, %s, %s]}' "$sep" "$t" \
            "$(limit "$t" read_gb_s_best)" "$(limit "$t" read_gb_s_median)" "$(limit "$t" read_gb_s_min)" \
            "$(limit "$t" fma_gflop_s_best)" "$(limit "$t" fma_gflop_s_median)" "$(limit "$t" fma_gflop_s_min)" >> "$json"
        sep=","
    done
    printf '\n  },\n  "note": "triples are [best, median, worst]"\n}\n' >> "$json"
    produced_by "LIMIT_PASSES=$LIMIT_PASSES scripts/bench.sh limits" \
        "each: \`$BUILD/machine-limits --threads N --passes $LIMIT_PASSES\`" >> "$md"
}

# ------------------------------------------------------------ the model shapes

# The tokenizer of a llama2.c checkpoint DIR/NAME.bin: DIR/NAME-tok.bin,
# DIR/tokenizer.bin or ../shared/models/tokenizer.bin.
shape_tokenizer() {
    for t in "${1%.bin}-tok.bin" "$(dirname "$1")/tokenizer.bin" ../shared/models/tokenizer.bin; do
        if [ -r "$t" ]; then echo "$t"; return 0; fi
    done
    return 1
}

# The shapes there are, one a line: "label|model|tokenizer|new tokens|threads".
# SmolLM2 has no tokenizer file (its GGUF file holds it): "-".
speed_shapes() {
    # shellcheck disable=SC2153 # MODEL and TOKENIZER: set by find_model
    if find_model; then echo "stories260K|$MODEL|$TOKENIZER|$STEPS_260K|1"; fi
    for shape in stories15M stories42M stories110M; do
        found=""
        for dir in ${SHAPES_DIR:-models ../shared/models}; do
            if [ -r "$dir/$shape.bin" ] && tok=$(shape_tokenizer "$dir/$shape.bin"); then
                found="$dir/$shape.bin|$tok"
                break
            fi
        done
        if [ -z "$found" ]; then
            say "bench: $shape.bin (with NAME-tok.bin or tokenizer.bin) not in ${SHAPES_DIR:-models ../shared/models}: skipped (make models, or SHAPES_DIR=DIR)"
            continue
        fi
        steps=$STEPS
        [ "$shape" = stories15M ] && steps=$STEPS_15M
        echo "$shape|$found|$steps|$(limit_threads)"
    done
    if find_smollm2; then echo "SmolLM2-135M Q4_1|$SMOLLM2|-|$STEPS|$(limit_threads)"; else
        say "bench: SmolLM2-135M-Instruct.Q4_1.gguf not found (make models, or SMOLLM2=FILE): skipped"
    fi
}

# --model FILE [--tokenizer FILE] of a shape line's model and tokenizer.
model_flags() {
    if [ "$2" = - ]; then echo "--model $1"; else echo "--model $1 --tokenizer $2"; fi
}

# Whether a model's classifier is its embedding table (then a token reads
# the table whole, as the classifier, and the embedding row is part of it).
# llama2.c's legacy files say so by the sign of vocab_size (the 6th int32
# of the header), its version 1 files ("ak42") by the byte after their 7
# int32s; a GGUF file has an output.weight tensor when they differ (then
# its embedding table, quantized, is counted whole: an overestimate).
classifier_shared() {
    case $1 in
    *.gguf) ! LC_ALL=C grep -qaP '\x0d\x00{7}output\.weight' "$1" ;; # the name, after its uint64 length
    *)
        if [ "$(head -c 4 "$1")" = "24ka" ]; then
            [ "$(od -An -t u1 -j 36 -N 1 "$1" | tr -d ' ')" != 0 ]
        else
            [ "$(od -An -t d4 -j 20 -N 4 "$1" | tr -d ' ')" -gt 0 ]
        fi ;;
    esac
}

# Bytes one generated token reads, from a chapter 2 run report: every weight
# tensor once (weights_tensor_bytes: as stored, quantized blocks included),
# less the embedding table when the classifier is a separate matrix (then
# the embedding lookup reads one row of dim floats), plus the K/V of the
# positions the token attends to, on average prompt + new / 2 positions of
# kv_bytes_per_token (K and V of every layer).
bytes_per_token() { # MODEL JSON
    w=$(json_number "$2" weights_tensor_bytes)
    dim=$(json_number "$2" dim)
    vocab=$(json_number "$2" vocab_size)
    kv=$(json_number "$2" kv_bytes_per_token)
    p=$(json_number "$2" prompt_tokens)
    n=$(json_number "$2" tokens_generated)
    emb=0
    case $1 in *.gguf) ;; *) classifier_shared "$1" || emb=$((vocab * dim * 4 - dim * 4)) ;; esac
    awk -v w="$w" -v e="$emb" -v kv="$kv" -v p="$p" -v n="$n" 'BEGIN { printf "%.0f\n", w - e + kv * (p + n / 2) }'
}

# llama2.c's run and runomp, built from LLAMA2C (a checkout or its run.c)
# into $FINAL/llama2c/ exactly as its README recommends; rebuilt when run.c
# changes. Prints the folder, or fails with a line saying why.
build_llama2c() {
    src=$LLAMA2C
    [ -d "$src" ] && src=$src/run.c
    [ -r "$src" ] || { say "bench: LLAMA2C=$LLAMA2C: no run.c there"; return 1; }
    dir=$FINAL/llama2c
    mkdir -p "$dir"
    if ! cmp -s "$src" "$dir/run.c" || [ ! -x "$dir/run" ] || [ ! -x "$dir/runomp" ]; then
        cp "$src" "$dir/run.c"
        say "bench: building llama2.c in $dir: gcc -Ofast -march=native run.c -lm -o run (and -fopenmp: runomp)"
        (cd "$dir" && gcc -Ofast -march=native run.c -lm -o run && gcc -Ofast -march=native -fopenmp run.c -lm -o runomp) >&2 ||
            { say "bench: llama2.c did not build"; return 1; }
    fi
    echo "$dir"
}

# "median (min - max)" of a "median min max" triple, with FORMAT for each.
triple() { # FORMAT MEDIAN MIN MAX
    # shellcheck disable=SC2059 # the format is the caller's, on purpose
    if [ "$2" = - ]; then echo "-"; else printf "$1 ($1 - $1)" "$2" "$3" "$4"; fi
}

# Appends the numbers of A / B, line by line (two files of one number a line), to stats.
ratios() { paste "$1" "$2" | awk 'NF == 2 && $2 > 0 { printf "%.4f\n", $1 / $2 }' | stats; }

# ------------------------------------------------------------ single stream

# One round of one shape at one thread count: the read bandwidth of a
# buffer of the bytes a token reads (MIB, rounded up; best of 3 passes, to
# $TMP/ss-TAG-bw), chapter 2, then llama2.c (when built), each appending
# its own tokens/s and its wall ms to $TMP/ss-TAG-{ours,theirs}{,-wall}.
single_stream_round() { # TAG MODEL TOKENIZER STEPS THREADS N_RUN MIB
    tag=$1
    "$BUILD/machine-limits" --read-only --threads "$5" --mib "$7" --passes 3 |
        awk '$1 == "read_gb_s_best" { print $2 }' >> "$TMP/ss-$tag-bw"
    start=$(now)
    # shellcheck disable=SC2046 # model_flags: words on purpose
    "$BUILD/ch02-kvcache" $(model_flags "$2" "$3") --prompt "$SPEED_PROMPT" --steps "$4" --threads "$5" --quiet \
        --json "$TMP/ss.json" > "$TMP/ss-$tag-ours.txt"
    end=$(now)
    json_number "$TMP/ss.json" tokens_per_s >> "$TMP/ss-$tag-ours"
    awk -v a="$start" -v b="$end" 'BEGIN { printf "%.3f\n", (b - a) * 1000 }' >> "$TMP/ss-$tag-ours-wall"
    [ -n "$L2C_DIR" ] && [ "$3" != - ] || return 0
    prog=$L2C_DIR/run
    [ "$5" = 1 ] || prog=$L2C_DIR/runomp
    start=$(now)
    OMP_NUM_THREADS=$5 "$prog" "$2" -z "$3" -t 0 -n "$6" -i "$SPEED_PROMPT" > "$TMP/ss-$tag-theirs.txt" 2> "$TMP/ss.err"
    end=$(now)
    awk '/achieved tok\/s/ { print $3 }' "$TMP/ss.err" >> "$TMP/ss-$tag-theirs"
    awk -v a="$start" -v b="$end" 'BEGIN { printf "%.3f\n", (b - a) * 1000 }' >> "$TMP/ss-$tag-theirs-wall"
    cmp -s "$TMP/ss-$tag-ours.txt" "$TMP/ss-$tag-theirs.txt" || echo NO > "$TMP/ss-$tag-differs"
}

section_single_stream() {
    name=single-stream
    md=$OUT/$name.md
    json=$OUT/$name.json
    [ -x "$BUILD/ch02-kvcache" ] || { say "bench: $BUILD/ch02-kvcache is missing; run make first"; return 1; }
    L2C_DIR=""
    if [ -n "${LLAMA2C:-}" ]; then
        L2C_DIR=$(build_llama2c) || L2C_DIR=""
    else
        say "bench: single_stream: no llama2.c to compare with: LLAMA2C=DIR names a checkout of"
        say "  https://github.com/karpathy/llama2.c (git clone it; kvlab never holds its code) or its run.c"
    fi
    {
        echo "## Single stream: chapter 2 against the bandwidth ceiling and llama2.c"
        echo
        echo "Chapter 2, prompt \"$SPEED_PROMPT\", greedy, $ROUNDS rounds; in each round every program runs once, in turn."
        echo "tokens/s: each program's own figure (chapter 2: tokens_per_s of its JSON, generated tokens over the"
        echo "generation loop; llama2.c: its 'achieved tok/s', positions after the first over its loop, a ms timer),"
        echo "median (min - max). Bytes per token: every weight tensor once as stored (the embedding table counts once:"
        echo "it is the classifier, and the embedding lookup reads one of its rows) plus the K/V of the average context"
        echo "(prompt + new / 2 positions). GB/s: \`build/machine-limits --read-only --mib M\` streaming a buffer of"
        echo "that many bytes (M rounded up, so a model that fits in a cache is read from it, as decoding reads it) on"
        echo "the same thread count, best pass of the rounds (each round measures it before running the programs)."
        echo "Ceiling: GB/s / bytes per token; % of ceiling: tokens/s median / ceiling. llama2.c: run.c built with \`gcc -Ofast"
        echo "-march=native\` (its README's recommendation; kvlab keeps -O3 and its exact bits), run on 1 thread,"
        echo "runomp (OpenMP) with OMP_NUM_THREADS on 2. time ratio: chapter 2's time per token / llama2.c's in the"
        echo "same round (its tokens/s / ours; below 1: chapter 2 is faster), median (min - max); wall: the same from"
        echo "the wall time of the whole processes. same text: both printed the same bytes in every round."
        echo
        echo "| model | new tokens | threads | MB read per token | GB/s | ceiling tokens/s | ch02 tokens/s | ch02 % of ceiling | llama2.c tokens/s | llama2.c % of ceiling | time ratio ch02/llama2.c | wall ratio | same text |"
        echo "|---|---:|---:|---:|---:|---:|---|---:|---|---:|---|---|---|"
    } > "$md"
    printf '{\n  "rounds": %s,\n  "prompt": "%s",\n  "llama2c": "%s",\n  "note": "triples are [median, min, max]",\n  "rows": [' \
        "$ROUNDS" "$SPEED_PROMPT" "${L2C_DIR:+gcc -Ofast -march=native}" > "$json"
    sep=""
    speed_shapes > "$TMP/shapes"
    while IFS='|' read -r label model tok steps threads; do
        # A probe: how many tokens the prompt and the answer are (llama2.c's
        # -n counts positions, the prompt's included: new + prompt - 1).
        # shellcheck disable=SC2046
        "$BUILD/ch02-kvcache" $(model_flags "$model" "$tok") --prompt "$SPEED_PROMPT" --steps "$steps" --threads 1 \
            --quiet --json "$TMP/probe.json" > /dev/null
        n_new=$(json_number "$TMP/probe.json" tokens_generated)
        n_run=$((n_new + $(json_number "$TMP/probe.json" prompt_tokens) - 1))
        bytes=$(bytes_per_token "$model" "$TMP/probe.json")
        mib=$(awk -v b="$bytes" 'BEGIN { m = b / 1048576; printf "%d\n", (m == int(m)) ? m : int(m) + 1 }')
        for t in $threads; do rm -f "$TMP"/ss-"$t"-*; done
        i=1
        while [ "$i" -le "$ROUNDS" ]; do
            for t in $threads; do
                say "bench: single_stream: $label, $t thread(s), round $i of $ROUNDS"
                single_stream_round "$t" "$model" "$tok" "$steps" "$t" "$n_run" "$mib"
            done
            i=$((i + 1))
        done
        for t in $threads; do
            bw=$(sort -n "$TMP/ss-$t-bw" | tail -n 1)
            ceiling=$(awk -v bw="$bw" -v b="$bytes" 'BEGIN { printf "%.2f\n", bw * 1e9 / b }')
            # shellcheck disable=SC2046 # "median min max" triples: split on purpose
            set -- $(stats < "$TMP/ss-$t-ours")
            ours="$1 $2 $3"
            ours_pct=$(awk -v x="$1" -v c="$ceiling" 'BEGIN { printf "%.0f%%", 100 * x / c }')
            theirs="- - -" theirs_pct="-" ratio="- - -" wall="- - -" same="-"
            if [ -s "$TMP/ss-$t-theirs" ]; then
                theirs=$(stats < "$TMP/ss-$t-theirs")
                theirs_pct=$(awk -v x="${theirs%% *}" -v c="$ceiling" 'BEGIN { printf "%.0f%%", 100 * x / c }')
                ratio=$(ratios "$TMP/ss-$t-theirs" "$TMP/ss-$t-ours")
                wall=$(ratios "$TMP/ss-$t-ours-wall" "$TMP/ss-$t-theirs-wall")
                if [ -e "$TMP/ss-$t-differs" ]; then same=NO; else same=yes; fi
            fi
            # shellcheck disable=SC2086
            printf '| %s | %s | %s | %.1f | %.1f | %.1f | %s | %s | %s | %s | %s | %s | %s |\n' "$label" "$n_new" "$t" \
                "$(awk -v b="$bytes" 'BEGIN { print b / 1e6 }')" "$bw" "$ceiling" "$(triple %.1f $ours)" "$ours_pct" \
                "$(triple %.1f $theirs)" "$theirs_pct" "$(triple %.2f $ratio)" "$(triple %.2f $wall)" "$same" >> "$md"
            # shellcheck disable=SC2086
            printf '%s\n    {"model": "%s", "file": "%s", "new_tokens": %s, "threads": %s, "bytes_per_token": %s, "read_gb_s": %s, "ceiling_tokens_per_s": %s, "ch02_tokens_per_s": [%s, %s, %s], "llama2c_tokens_per_s": [%s, %s, %s], "time_ratio": [%s, %s, %s], "wall_ratio": [%s, %s, %s], "same_text": "%s"}' \
                "$sep" "$label" "$model" "$n_new" "$t" "$bytes" "$bw" "$ceiling" $ours $theirs $ratio $wall "$same" |
                sed 's/\([[ ]\)-\([],]\)/\1null\2/g' >> "$json"
            sep=","
        done
    done < "$TMP/shapes"
    printf '\n  ]\n}\n' >> "$json"
    produced_by "${SHAPES_DIR:+SHAPES_DIR=$SHAPES_DIR }${LLAMA2C:+LLAMA2C=$LLAMA2C }ROUNDS=$ROUNDS STEPS=$STEPS STEPS_15M=$STEPS_15M scripts/bench.sh single_stream" \
        "each round: \`$BUILD/ch02-kvcache --model M --tokenizer T --prompt \"$SPEED_PROMPT\" --steps S --threads N --json F\`,
then \`OMP_NUM_THREADS=N run|runomp M -z T -t 0 -n S+prompt-1 -i \"$SPEED_PROMPT\"\`" >> "$md"
}

# ------------------------------------------------------------ batched

# Multiply-adds of the matmuls that one run of chapter 4 did, from its
# report (the model's shape) and its --out file (each request's prompt and
# answer): every token fed through the layers costs n_layers x (wq, wk, wv,
# wo, w1, w2, w3: dim x (2 dim + 2 kv_dim + 3 hidden_dim)), and every
# generated token one classifier row pass (vocab x dim). A request feeds its
# prompt and every answer token but the last. Not counted: attention
# (scores and values), norms, RoPE, SwiGLU, and the recomputation of
# preempted requests. Prints "multiply-adds tokens_fed".
batched_macs() { # JSON JSONL
    awk -v dim="$(json_number "$1" dim)" -v hid="$(json_number "$1" hidden_dim)" \
        -v layers="$(json_number "$1" n_layers)" -v heads="$(json_number "$1" n_heads)" \
        -v kvh="$(json_number "$1" n_kv_heads)" -v vocab="$(json_number "$1" vocab_size)" '
        function count(re,   s) {
            if (!match($0, re)) return 0
            s = substr($0, RSTART, RLENGTH); sub(/^[^[]*\[/, "", s); sub(/\]$/, "", s)
            return s == "" ? 0 : gsub(/,/, ",", s) + 1
        }
        { p = count("\"prompt_tokens\":\\[[^]]*\\]"); n = count(",\"tokens\":\\[[^]]*\\]")
          fed += p + (n > 0 ? n - 1 : 0); logits += n }
        END {
            kv = dim * kvh / heads
            per_token = layers * dim * (2 * dim + 2 * kv + 3 * hid)
            printf "%.0f %d\n", fed * per_token + logits * vocab * dim, fed
        }' "$2"
}

section_batched() {
    name=batched
    md=$OUT/$name.md
    json=$OUT/$name.json
    [ -x "$BUILD/ch04-paged" ] || { say "bench: $BUILD/ch04-paged is missing; run make first"; return 1; }
    file=data/requests-mixed.tsv
    {
        echo "## Batched: chapter 4 on the mixed requests against the FMA peak"
        echo
        echo "Chapter 4 (paged, block 16, the chapter's default budget; SmolLM2: --kv-budget 1GiB) on $file,"
        echo "$ROUNDS rounds. GFLOP/s: 2 x the multiply-adds of the matmuls / the serving loop's time (elapsed_s): every"
        echo "token fed (a prompt's tokens and every generated token but the last) costs n_layers x dim x (2 dim +"
        echo "2 kv_dim + 3 hidden_dim) multiply-adds and every generated token a classifier pass (vocab x dim); not"
        echo "counted: attention, norms, RoPE, SwiGLU, recomputed preempted tokens. FMA peak: the limits section's best"
        echo "pass on the same thread count. tokens per step: tokens fed / steps (how many share a pass over the weights)."
        echo "Median (min - max) over the rounds."
        echo
        echo "| model | threads | steps | tokens per step | preemptions | tokens/s | GFLOP/s | % of FMA peak |"
        echo "|---|---:|---:|---:|---:|---|---|---:|"
    } > "$md"
    printf '{\n  "requests": "%s",\n  "rounds": %s,\n  "note": "triples are [median, min, max]",\n  "rows": [' \
        "$file" "$ROUNDS" > "$json"
    sep=""
    speed_shapes > "$TMP/shapes"
    # shellcheck disable=SC2034 # steps and threads: the shape's, unused here
    while IFS='|' read -r label model tok steps threads; do
        threads=$BATCH_THREADS
        budget=""
        [ "$tok" = - ] && budget="--kv-budget 1GiB"
        for t in $threads; do rm -f "$TMP/bt-$t" "$TMP/bg-$t"; done
        i=1
        while [ "$i" -le "$ROUNDS" ]; do
            for t in $threads; do
                say "bench: batched: $label, $t thread(s), round $i of $ROUNDS"
                # shellcheck disable=SC2046,SC2086
                "$BUILD/ch04-paged" $(model_flags "$model" "$tok") --requests "$file" $budget --threads "$t" --quiet \
                    --json "$TMP/bt.json" --out "$TMP/bt.jsonl" > /dev/null
                json_number "$TMP/bt.json" tokens_per_s >> "$TMP/bt-$t"
                # shellcheck disable=SC2046
                set -- $(batched_macs "$TMP/bt.json" "$TMP/bt.jsonl")
                awk -v m="$1" -v s="$(json_number "$TMP/bt.json" elapsed_s)" 'BEGIN { printf "%.3f\n", 2 * m / s / 1e9 }' >> "$TMP/bg-$t"
                fed=$2
                cp "$TMP/bt.json" "$TMP/bt-$t.json"
            done
            i=$((i + 1))
        done
        for t in $threads; do
            steps_run=$(json_number "$TMP/bt-$t.json" steps)
            pre=$(json_number "$TMP/bt-$t.json" preemptions)
            per_step=$(awk -v f="$fed" -v s="$steps_run" 'BEGIN { printf "%.1f", f / s }')
            tps=$(stats < "$TMP/bt-$t")
            gf=$(stats < "$TMP/bg-$t")
            peak=$(limit "$t" fma_gflop_s_best)
            pct=$(awk -v g="${gf%% *}" -v p="$peak" 'BEGIN { printf "%.0f%%", 100 * g / p }')
            # shellcheck disable=SC2086
            printf '| %s | %s | %s | %s | %s | %s | %s | %s |\n' "$label" "$t" "$steps_run" "$per_step" "${pre:-0}" \
                "$(triple %.1f $tps)" "$(triple %.2f $gf)" "$pct" >> "$md"
            # shellcheck disable=SC2086
            printf '%s\n    {"model": "%s", "file": "%s", "threads": %s, "steps": %s, "tokens_fed": %s, "preemptions": %s, "tokens_per_s": [%s, %s, %s], "gflop_s": [%s, %s, %s], "fma_peak_gflop_s": %s}' \
                "$sep" "$label" "$model" "$t" "$steps_run" "$fed" "${pre:-0}" $tps $gf "$peak" >> "$json"
            sep=","
        done
    done < "$TMP/shapes"
    printf '\n  ]\n}\n' >> "$json"
    produced_by "${SHAPES_DIR:+SHAPES_DIR=$SHAPES_DIR }ROUNDS=$ROUNDS BATCH_THREADS=\"$BATCH_THREADS\" scripts/bench.sh batched" \
        "each: \`$BUILD/ch04-paged --model M --tokenizer T --requests $file --threads N --json F --out F.jsonl\`" >> "$md"
}
