#!/bin/sh
# Chapter 7 measurements (a benchmark, never a test): speculative decoding
# against chapter 4 on the same requests, greedy, so that both produce the
# same tokens (the tests prove it; this script checks it again per run).
#
#   scripts/bench-ch07.sh       build/ch07-speculative against build/ch04-paged
#   options (environment): BUILD=build  MODEL=path (default: SmolLM2 when
#            found, else stories260K)  CHAT=1 (--chat; default 1 for a GGUF)
#            REPEATS=3  KS="2 4 8"  PROPOSERS="ngram self:8"  THREADS=1
#            WORKLOADS="quote:data/requests-quote.tsv free:data/requests-free.tsv"
#            OUT=build/bench (ch07.md and ch07.json go there)
#
# For every workload the runs alternate: chapter 4, then every proposer at
# every k, REPEATS times over; the tokens/s of each speculative run is
# divided by the chapter-4 run of the same round, and the median and range
# of those ratios are reported with the acceptance rate, the tokens each
# speculating sequence emits per step, and the verifier passes per token.
set -eu

BUILD=${BUILD:-build}
REPEATS=${REPEATS:-3}
KS=${KS:-2 4 8}
PROPOSERS=${PROPOSERS:-ngram self:8}
THREADS=${THREADS:-1}
WORKLOADS=${WORKLOADS:-quote:data/requests-quote.tsv free:data/requests-free.tsv}
OUT=${OUT:-$BUILD/bench}
if [ -z "${MODEL:-}" ]; then
    for dir in models ../shared/models; do
        [ -r "$dir/SmolLM2-135M-Instruct.Q4_1.gguf" ] && MODEL=$dir/SmolLM2-135M-Instruct.Q4_1.gguf && break
    done
fi
MODEL=${MODEL:-models/stories260K.bin}
case $MODEL in *.gguf) CHAT=${CHAT:-1} ;; *) CHAT=${CHAT:-0} ;; esac
chat=""
[ "$CHAT" = 1 ] && chat="--chat"
TMP=$OUT/ch07-work
mkdir -p "$OUT" "$TMP"

json_number() { sed -n "s/^ *\"$2\": \\([-0-9.e+]*\\),\\{0,1\\}$/\\1/p" "$1" | head -1; }
tokens_of() { grep -o '"tokens":[^]]*' "$1"; }
# median and range of the numbers on stdin: "median [min-max]"
summary() { sort -g | awk '{ v[NR] = $1 } END { m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
                                               printf "%.2f [%.2f-%.2f]", m, v[1], v[NR] }'; }

run() { # NAME PROGRAM WORKLOAD-FILE ARGS...: one run, its JSON and --out in $TMP/NAME.*
    name=$1 prog=$2 reqs=$3
    shift 3
    "$BUILD/$prog" --model "$MODEL" $chat --requests "$reqs" --threads "$THREADS" --quiet \
        --json "$TMP/$name.json" --out "$TMP/$name.jsonl" "$@" 2> "$TMP/$name.err"
}

md=$OUT/ch07.md
json=$OUT/ch07.json
cpu=$(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -1)
{
    echo "# Chapter 7 measurements: speculative decoding against chapter 4"
    echo
    echo "Model $(basename "$MODEL")${chat:+ (--chat)}, greedy, block size 16, $THREADS thread(s), CPU: ${cpu:-unknown}."
    echo "Runs alternate (chapter 4, then every proposer and k), $REPEATS rounds; tok/s is the median [range] of the"
    echo "rounds, and \"vs ch04\" the median [range] of each round's ratio to chapter 4's run of the same round."
    echo
    echo "| workload | proposer | k | acceptance | tokens per speculating step | forward passes per token (whole batch) | tok/s | vs ch04 |"
    echo "|---|---|---|---|---|---|---|---|"
} > "$md"
printf '[\n' > "$json"
first=1
for w in $WORKLOADS; do
    wname=${w%%:*} reqs=${w#*:}
    rounds=$(seq 1 "$REPEATS")
    for r in $rounds; do
        run "$wname-ch04-$r" ch04-paged "$reqs"
        for p in $PROPOSERS; do
            for k in $KS; do
                run "$wname-$p-$k-$r" ch07-speculative "$reqs" --spec "$p" --spec-k "$k"
                if [ "$(tokens_of "$TMP/$wname-$p-$k-$r.jsonl")" != "$(tokens_of "$TMP/$wname-ch04-$r.jsonl")" ]; then
                    echo "bench-ch07: $wname, --spec $p --spec-k $k: tokens differ from chapter 4's" >&2
                    exit 1
                fi
            done
        done
    done
    base=$(for r in $rounds; do json_number "$TMP/$wname-ch04-$r.json" tokens_per_s; done | summary)
    steps=$(json_number "$TMP/$wname-ch04-1.json" steps)
    gen=$(json_number "$TMP/$wname-ch04-1.json" tokens_generated)
    passes=$(awk -v s="$steps" -v g="$gen" 'BEGIN { printf "%.3f", (g > 0 ? s / g : 0) }')
    echo "| $wname | none (chapter 4) | - | - | 1.00 | $passes | $base | 1.00 |" >> "$md"
    for p in $PROPOSERS; do
        for k in $KS; do
            f=$TMP/$wname-$p-$k-1.json
            acc=$(json_number "$f" spec_acceptance_rate)
            per=$(json_number "$f" spec_tokens_per_spec_step)
            fw=$(json_number "$f" spec_forward_steps)
            gen=$(json_number "$f" tokens_generated)
            passes=$(awk -v s="$fw" -v g="$gen" 'BEGIN { printf "%.3f", (g > 0 ? s / g : 0) }')
            tps=$(for r in $rounds; do json_number "$TMP/$wname-$p-$k-$r.json" tokens_per_s; done | summary)
            ratio=$(for r in $rounds; do
                awk -v a="$(json_number "$TMP/$wname-$p-$k-$r.json" tokens_per_s)" \
                    -v b="$(json_number "$TMP/$wname-ch04-$r.json" tokens_per_s)" 'BEGIN { printf "%.4f\n", a / b }'
            done | summary)
            printf '| %s | %s | %s | %.1f%% | %.2f | %s | %s | %s |\n' "$wname" "$p" "$k" \
                "$(awk -v a="$acc" 'BEGIN { print 100 * a }')" "$per" "$passes" "$tps" "$ratio" >> "$md"
            [ $first = 1 ] || printf ',\n' >> "$json"
            first=0
            printf '  {"workload": "%s", "proposer": "%s", "k": %s, "acceptance": %s, "tokens_per_spec_step": %s, "passes_per_token": %s, "tok_s": "%s", "vs_ch04": "%s"}' \
                "$wname" "$p" "$k" "$acc" "$per" "$passes" "$tps" "$ratio" >> "$json"
        done
    done
done
printf '\n]\n' >> "$json"
{
    echo
    echo "Speculation pays where the ratio is above 1: when a pass over k + 1 positions costs little more"
    echo "than a pass over one (the weights are read once) and enough proposals are accepted. On a CPU whose"
    echo "matrix products cost in proportion to the rows, each rejected proposal is paid in full."
} >> "$md"
cat "$md"
