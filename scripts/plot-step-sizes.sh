#!/bin/sh
# The figure of book/ch04-paged.md's section on token budgets: tokens per
# step over a run of chapter 4, whole prompts against a token budget.
#
#   scripts/plot-step-sizes.sh            # writes book/ch04-step-sizes.svg
#
# Both runs serve data/requests-mixed.tsv on the default model in a 640 KiB
# KV budget, where preempted requests keep coming back: with whole prompts
# (the default budget of max(seq_len, 2048) tokens; --preempt recompute
# only asks for the scheduler's report) each comes back as one large step
# that recomputes it, with --max-num-batched-tokens 32 in chunks of at most
# 32 tokens beside the decodes. The step sizes come from --json
# (step_tokens_timeline: step, tokens, of which prompt or recomputed); the
# plot is drawn by scripts/step-sizes.gp. BUILD names the build folder,
# OUT the SVG, BUDGET the second run's budget, KV the KV budget.
set -eu
BUILD=${BUILD:-build}
OUT=${OUT:-book/ch04-step-sizes.svg}
BUDGET=${BUDGET:-32}
KV=${KV:-640KiB}
command -v gnuplot > /dev/null || { echo "plot-step-sizes: gnuplot is missing (Debian: apt-get install gnuplot-nox)" >&2; exit 1; }
[ -x "$BUILD/ch04-paged" ] || { echo "plot-step-sizes: $BUILD/ch04-paged is missing (make first)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# [step, tokens, prompt tokens] triples, one per line, into "step tokens prompt".
timeline() {
    awk '/"step_tokens_timeline"/ { on = 1; next }
         on && /^ *\]/ { on = 0 }
         on { gsub(/[][,]/, " "); print $1, $2, $3 }' "$1"
}
"$BUILD/ch04-paged" --kv-budget "$KV" --preempt recompute --quiet --json "$tmp/whole.json"
"$BUILD/ch04-paged" --kv-budget "$KV" --max-num-batched-tokens "$BUDGET" --quiet --json "$tmp/budget.json"
timeline "$tmp/whole.json" > "$tmp/whole.tsv"
timeline "$tmp/budget.json" > "$tmp/budget.tsv"
gnuplot -e "whole='$tmp/whole.tsv'; chunked='$tmp/budget.tsv'; budget=$BUDGET; out='$OUT'" scripts/step-sizes.gp
echo "plot-step-sizes: $OUT ($(wc -l < "$tmp/whole.tsv") and $(wc -l < "$tmp/budget.tsv") steps)" >&2
