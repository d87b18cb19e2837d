#!/bin/bash
# Estimates the spread of the output lengths from the PagedAttention paper's
# own Fig. 2, the way --scenario paper-fig2 takes it (book page "Side by side", "The
# method").
#
# The paper gives the mean lengths but not their spread. Orca (Max) is the
# one bar that depends on the lengths alone: every request gets a 2,048-slot
# region, 7 of them fit, so its reservation share is 7 regions x the output
# still to come (on average half the output, weighted by how long each
# request runs: the mean of o^2 over the mean of o), its token states add the
# prompts, and its internal fragmentation is what is left of the 2,048. The
# script sweeps the outputs' spread, runs Orca (Max) alone over a
# few seeds, and prints, for each spread, the three shares against the
# paper's 20.4 / 13.3 / 57.3 and their squared error; the smallest error is
# the estimate. The other three systems are then predictions, not fits.
#
# FAMILY is the outputs' family: gamma (the scenario's; the spread is the
# coefficient of variation, CV), weibull (CV too) or lognormal (sigma).
#
#   scripts/kvsim-fig2-calibrate.sh                     # gamma, CV 0.70 .. 1.20 by 0.05, seeds 1..10
#   SPREADS="0.88 0.89 0.90 0.91 0.92 0.93" scripts/kvsim-fig2-calibrate.sh
#   FAMILY=lognormal SPREADS="0.85 0.86 0.87 0.88 0.89" scripts/kvsim-fig2-calibrate.sh
#
# Extra arguments go to build/kvsim after the scenario, as in kvsim-fig2.sh.
# One seed of Orca (Max) alone takes about 2 s; the defaults about 4 minutes.
set -eu
KVSIM=${KVSIM:-build/kvsim}
SEEDS=${SEEDS:-10}
FAMILY=${FAMILY:-gamma}
SPREADS=${SPREADS:-"0.70 0.75 0.80 0.85 0.90 0.95 1.00 1.05 1.10 1.15 1.20"}
case $FAMILY in
    lognormal) spread=sigma ;;
    gamma | weibull) spread=CV ;;
    *) echo "kvsim-fig2-calibrate.sh: error: FAMILY=$FAMILY: use gamma, weibull or lognormal" >&2; exit 1 ;;
esac
OUTPUT_MEAN=337.99
[ -x "$KVSIM" ] || { echo "kvsim-fig2-calibrate.sh: error: $KVSIM is not built (make $KVSIM)" >&2; exit 1; }
tmp=$(mktemp)
trap 'rm -f "$tmp" "$tmp.json" "$tmp.err" "$tmp.rows"' EXIT

# Orca (Max)'s token states, reservation and internal fragmentation (% of the
# pool) from one run's JSON: the three numbers after "orca-max" under "fig2".
max_shares() {
    awk '/"fig2": \{/ { on = 1 } on && /"orca-max": \{/ { want = 1 }
         want && /"(token_states|reservation|internal_fragmentation)_pct"/ && n < 3 {
             v = $2; sub(/,$/, "", v); printf "%s%s", (n ? " " : ""), v; n++ }
         END { print "" }' "$1"
}

echo "Orca (Max) of kvsim --scenario paper-fig2 $* by the spread of --output $FAMILY:$OUTPUT_MEAN:$spread,"
echo "means over seeds 1..$SEEDS;"
echo "squared error against the paper's Fig. 2 (token states 20.4, reservation 13.3, internal 57.3)"
echo
echo "| $spread | token states % | reservation % | internal frag. % | squared error |"
echo "|---:|---:|---:|---:|---:|"
for value in $SPREADS; do
    : >"$tmp"
    for seed in $(seq 1 "$SEEDS"); do
        if ! "$KVSIM" --scenario paper-fig2 "$@" --strategies orca-max --output "$FAMILY:$OUTPUT_MEAN:$value" \
                --seed "$seed" --json "$tmp.json" >/dev/null 2>"$tmp.err"; then
            echo "kvsim-fig2-calibrate.sh: error: $spread $value, seed $seed: $(cat "$tmp.err")" >&2
            exit 1
        fi
        max_shares "$tmp.json" >>"$tmp"
    done
    awk -v s="$value" '{ t += $1; r += $2; i += $3; n++ }
        END { t /= n; r /= n; i /= n
              printf "| %s | %.2f | %.2f | %.2f | %.3f |\n", s, t, r, i,
                     (t - 20.4) ^ 2 + (r - 13.3) ^ 2 + (i - 57.3) ^ 2 }' "$tmp"
done | tee "$tmp.rows"
echo
sort -t'|' -k6,6g "$tmp.rows" | head -1 | awk -F'|' -v spread="$spread" '{ gsub(/ /, "", $2); gsub(/ /, "", $6)
    print "estimate: " spread " " $2 " (squared error " $6 ")" }'
rm -f "$tmp.rows"
