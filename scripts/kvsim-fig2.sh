#!/bin/bash
# The PagedAttention paper's Fig. 2 and Fig. 13 by kvsim, over several seeds:
# mean (min - max) of every share and of the batched requests, as a Markdown
# table. The book page "Side by side" quotes it.
#
#   scripts/kvsim-fig2.sh                 # seeds 1..10 of --scenario paper-fig2
#   SEEDS=3 scripts/kvsim-fig2.sh --step-ms 40 --output lognormal:337.99:0.8
#
# Extra arguments go to build/kvsim after the scenario (later options win).
# One seed takes about 20 s of CPU (7,200 requests through four strategies).
set -eu
KVSIM=${KVSIM:-build/kvsim}
SEEDS=${SEEDS:-10}
[ -x "$KVSIM" ] || { echo "kvsim-fig2.sh: error: $KVSIM is not built (make $KVSIM)" >&2; exit 1; }
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
for seed in $(seq 1 "$SEEDS"); do
    if ! "$KVSIM" --scenario paper-fig2 "$@" --seed "$seed" >"$tmp.out" 2>"$tmp.err"; then
        echo "kvsim-fig2.sh: error: seed $seed: $(cat "$tmp.err")" >&2
        rm -f "$tmp.out" "$tmp.err"
        exit 1
    fi
    # The rows after "against the PagedAttention paper, by its method": the
    # paper's system, then "paper | kvsim" pairs; keep the kvsim values.
    awk -v seed="$seed" '
        /^against the PagedAttention paper, by its method/ { on = 1; next }
        on && /^  (Orca|vLLM)/ {
            name = ($1 == "vLLM") ? "vLLM" : $1 " " $2
            out = ""
            for (i = 1; i < NF; i++) if ($i == "|") out = out " " $(i + 1)
            print seed "\t" name "\t" out
        }' "$tmp.out" >>"$tmp"
    rm -f "$tmp.out" "$tmp.err"
done
echo "kvsim --scenario paper-fig2 $* over seeds 1..$SEEDS: mean (min - max)"
echo
echo "| system | token states % | reservation % | internal frag. % | external frag. & others % | batched requests |"
echo "|---|---:|---:|---:|---:|---:|"
awk -F'\t' '
    {
        n = split($3, v, " ")
        if (!($2 in count)) order[++systems] = $2
        count[$2]++
        for (i = 1; i <= n; i++) {
            k = $2 SUBSEP i
            sum[k] += v[i]
            if (!(k in lo) || v[i] < lo[k]) lo[k] = v[i]
            if (!(k in hi) || v[i] > hi[k]) hi[k] = v[i]
        }
    }
    END {
        for (s = 1; s <= systems; s++) {
            name = order[s]
            line = "| " name
            for (i = 1; i <= 5; i++) {
                k = name SUBSEP i
                fmt = i == 5 ? "%.2f (%.2f - %.2f)" : "%.1f (%.1f - %.1f)"
                line = line " | " sprintf(fmt, sum[k] / count[name], lo[k], hi[k])
            }
            print line " |"
        }
    }' "$tmp"
