#!/bin/sh
# `make fuzz`: runs libFuzzer targets from build/fuzz/, each for FUZZ_SECONDS,
# FUZZ_JOBS of them at a time, and prints one summary line per target.
#
#   FUZZ_SECONDS=60 FUZZ_JOBS=1 scripts/fuzz.sh fuzz_requests fuzz_numbers ...
#
# Each target starts from its seed corpus tests/fuzz/corpus/NAME/ (read
# only) and puts what it discovers in build/fuzz/work/NAME/. Any crash,
# leak, timeout, out-of-memory or sanitizer report fails the run; the
# reproducer (the input that failed, in hex) and the command that replays
# it are printed, and the input is kept in build/fuzz/artifacts/NAME/.
set -eu
FUZZ_BUILD=${FUZZ_BUILD:-build/fuzz}
FUZZ_SECONDS=${FUZZ_SECONDS:-60}
FUZZ_JOBS=${FUZZ_JOBS:-1}
[ "$#" -gt 0 ] || { echo "fuzz: no targets given" >&2; exit 1; }

# One target; writes its log to build/fuzz/logs/NAME.log and a summary line
# to build/fuzz/logs/NAME.result.
run_one() {
    name=$1
    bin=$FUZZ_BUILD/$name
    seeds=tests/fuzz/corpus/${name#fuzz_}
    work=$FUZZ_BUILD/work/$name
    artifacts=$FUZZ_BUILD/artifacts/$name
    log=$FUZZ_BUILD/logs/$name.log
    [ -x "$bin" ] || { echo "fuzz: $bin is missing (make fuzz-build)" >&2; return 1; }
    [ -d "$seeds" ] || { echo "fuzz: $name has no seed corpus $seeds" >&2; return 1; }
    rm -rf "$work" "$artifacts"
    mkdir -p "$work" "$artifacts" "$FUZZ_BUILD/logs"
    # -timeout: an input that takes longer than 10 s is a hang; -rss_limit_mb:
    # one that needs more than 2 GiB is a failure to bound an allocation.
    status=0
    ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 UBSAN_OPTIONS=print_stacktrace=1 \
        "$bin" -max_total_time="$FUZZ_SECONDS" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
        -artifact_prefix="$artifacts/" "$work" "$seeds" > "$log" 2>&1 || status=$?
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
    corpus=$(find "$work" "$seeds" -type f | wc -l)
    if [ "$status" -eq 0 ]; then
        echo "$name: ok: ${execs:-?} executions in ${FUZZ_SECONDS} s, corpus $corpus inputs" > "$FUZZ_BUILD/logs/$name.result"
        return 0
    fi
    {
        echo "$name: FAILED (exit $status) after ${execs:-?} executions; the fuzzer's report:"
        grep -v '^#[0-9]' "$log" | tail -n 60
        for f in "$artifacts"/*; do
            [ -f "$f" ] || continue
            echo "reproducer $f ($(wc -c < "$f") bytes):"
            od -A x -t x1z -v "$f" | head -n 64
            echo "replay: $bin $f"
        done
    } > "$FUZZ_BUILD/logs/$name.result"
    return 1
}

mkdir -p "$FUZZ_BUILD/logs"
rm -f "$FUZZ_BUILD"/logs/*.result
failed=0
running=0
pids=""
for name in "$@"; do
    run_one "$name" &
    pids="$pids $!"
    running=$((running + 1))
    if [ "$running" -ge "$FUZZ_JOBS" ]; then
        for pid in $pids; do wait "$pid" || failed=1; done
        pids=""
        running=0
    fi
done
for pid in $pids; do wait "$pid" || failed=1; done

for name in "$@"; do
    cat "$FUZZ_BUILD/logs/$name.result" 2>/dev/null || { echo "$name: no result" ; failed=1; }
done
if [ "$failed" -ne 0 ]; then
    echo "fuzz: FAILED (logs in $FUZZ_BUILD/logs/)" >&2
    exit 1
fi
echo "fuzz: $# targets, ${FUZZ_SECONDS} s each, nothing found"
