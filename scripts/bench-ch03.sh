#!/bin/sh
# Chapter 3's reservation policies side by side, with static and continuous
# batching: KV utilization, where the reserved memory went, and concurrency,
# on the shipped request files, at one KV budget. A benchmark, not a test
# (tokens/s depends on the machine).
#
#   scripts/bench-ch03.sh                     build/ch03-batching, 2MiB, default model
#   BUDGET=4MiB scripts/bench-ch03.sh --model FILE --tokenizer FILE
#
# Variables: BUILD (default build), BUDGET (default 2MiB: 3.2 full-length
# requests of stories260K, whose K/V take 1,280 B per position), FILES
# (request files), BATCHING (default "static continuous"), OUT (folder for
# the Markdown copy, default $BUILD/bench). Extra arguments go to every run.
# Writes the table on stdout and to $OUT/ch03-policies.md.
set -eu
BUILD=${BUILD:-build}
BUDGET=${BUDGET:-2MiB}
FILES=${FILES:-"data/requests-short.tsv data/requests-long.tsv data/requests-mixed.tsv"}
BATCHING=${BATCHING:-"static continuous"}
OUT=${OUT:-$BUILD/bench}
program=$BUILD/ch03-batching
[ -x "$program" ] || { echo "bench-ch03: $program is missing; run make first" >&2; exit 1; }
mkdir -p "$OUT"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Prints the JSON report's numbers as "key value" lines (the report is
# pretty-printed: one key per line; the first occurrence of a key wins).
json_values() {
    awk '{
        if (match($0, /"[a-z_]+": *[-0-9.eE+"a-z]+/)) {
            kv = substr($0, RSTART, RLENGTH)
            key = kv; sub(/":.*/, "", key); sub(/"/, "", key)
            val = kv; sub(/^[^:]*: */, "", val); gsub(/"/, "", val)
            if (!(key in seen)) { seen[key] = 1; print key, val }
        }
    }' "$1"
}

pct() { awk -v x="$1" 'BEGIN { printf "%.1f%%", 100 * x }'; }

{
    echo "## Chapter 3: reservation policies at a KV budget of $BUDGET"
    echo
    echo "Command: \`$program --requests FILE --batching MODE --reserve POLICY --kv-budget $BUDGET $*\`"
    echo
    echo "| requests | batching | reserve | max concurrent | avg concurrent | batches | steps | utilization (avg) | token states | reserved | internal frag. | external frag. | held by finished | requeues | tokens/s |"
    echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
} > "$tmp/table.md"

for file in $FILES; do
    for mode in $BATCHING; do
        for policy in max request pow2 grow; do
            json="$tmp/report.json"
            if ! "$program" --requests "$file" --batching "$mode" --reserve "$policy" --kv-budget "$BUDGET" --quiet \
                --json "$json" "$@" 2> "$tmp/stderr" > /dev/null; then
                echo "| $(basename "$file") | $mode | $policy | failed: $(tail -n 1 "$tmp/stderr") |" >> "$tmp/table.md"
                continue
            fi
            json_values "$json" > "$tmp/values"
            v() { awk -v k="$1" '$1 == k { print $2 }' "$tmp/values"; }
            echo "| $(basename "$file") | $mode | $policy | $(v max_concurrent) |" \
                 "$(awk -v x="$(v avg_concurrent)" 'BEGIN { printf "%.1f", x }') | $(v batches) | $(v steps) |" \
                 "$(pct "$(v kv_utilization_avg)") | $(pct "$(v token_states)") | $(pct "$(v reserved)") |" \
                 "$(pct "$(v internal_fragmentation)") | $(pct "$(v external_fragmentation)") |" \
                 "$(pct "$(v kv_held_by_finished)") | $(v requeues) | $(awk -v x="$(v tokens_per_s)" 'BEGIN { printf "%.0f", x }') |" \
                 >> "$tmp/table.md"
        done
    done
done
# Copied beside, then renamed: never half a table in place of the old one.
cp "$tmp/table.md" "$OUT/.ch03-policies.md.tmp"
mv -f "$OUT/.ch03-policies.md.tmp" "$OUT/ch03-policies.md"
cat "$tmp/table.md"
