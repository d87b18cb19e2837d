#!/usr/bin/env bash
# scripts/gpu-check.sh RESULTS_DIR: everything about the CUDA path that
# needs a GPU, as one prepared run of at most about 8 minutes.
#
#   1. build with nvcc for the GPU at hand (sm_90 by default)
#   2. the test suites, GPU suites included (cuda_kernels, cuda_forward)
#   3. build/kernel-check: every kernel version validated, then timed
#   4. build/decode-bench: batch-64 decode of a stories110M-shaped model
#      against the device's copy bandwidth, in several precisions
#   5. compute-sanitizer (memcheck, racecheck) on short runs of the programs:
#      chapter 1, chapter 2 growing its cache, chapter 3 moving regions and
#      requeueing, chapter 4 preempting and copying forked blocks on write
#   6. chapter 1 on the CPU and on the GPU: stories260K (or its synthetic
#      twin when no model files are around)
#   7. chapters 2 to 4 on the GPU, short; then chapters 3 and 4 on the GPU on
#      the same mixed requests (data/requests-mixed.tsv) and budget, side by
#      side (RESULTS_DIR/chapters.md)
#   8. chapter 1 on a stories110M-shaped model, CPU and GPU
#
# It writes RESULTS_DIR/summary.md (a Markdown table: each step, its status,
# time and key numbers), RESULTS_DIR/kernels.md, RESULTS_DIR/decode.md,
# RESULTS_DIR/chapters.md and RESULTS_DIR/logs/*.log. Every step has its own time limit and the whole
# run a deadline (GPU_CHECK_SECONDS, default 460): steps that would start
# too late are marked skipped. Exit status: 0 when every step passed, 1 when
# one failed, 2 when there is no GPU (after writing what it could).
#
# It needs no network and no ../shared (models fall back to synthetic
# ones). The test suites need the Check library: if pkg-config does not
# find it, the script looks for Debian packages in .debs/ (fetch them
# beforehand on a machine with apt: mkdir -p .debs && cd .debs &&
# apt-get download check libsubunit-dev libsubunit0; .debs/ is git-ignored,
# so name it in the device tool's carry list) and unpacks them locally;
# without either, the suites are skipped (kernel-check still validates every
# kernel).
#
# Variables: CUDA_ARCHS (default 90), GPU_CHECK_SECONDS, JOBS (make -j).
set -u

if [ $# -ne 1 ]; then
    echo "usage: scripts/gpu-check.sh RESULTS_DIR" >&2
    exit 1
fi
cd "$(dirname "$0")/.." || exit 1
ROOT=$(pwd)
OUT=$1
mkdir -p "$OUT/logs" || exit 1
OUT=$(cd "$OUT" && pwd)
START=$(date +%s)
DEADLINE=$((START + ${GPU_CHECK_SECONDS:-460}))
ARCHS=${CUDA_ARCHS:-90}
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 4)}
BUILD=build/gpu-check
SUMMARY=$OUT/summary.md
FAILED=0

export PATH="$PATH:/usr/local/cuda/bin"

# ------------------------------------------------------------ reporting

{
    echo "# kvlab GPU check"
    echo
    echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "- commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (with local changes)')"
    echo "- host: $(uname -srm), $(nproc 2>/dev/null || echo '?') CPUs"
    echo "- nvcc: $(nvcc --version 2>/dev/null | grep -o 'release [0-9.]*' || echo 'not found')"
} > "$SUMMARY"

table_started=0
record() { # step, status, seconds, note
    if [ $table_started -eq 0 ]; then
        printf '\n| step | status | time | notes |\n|---|---|---|---|\n' >> "$SUMMARY"
        table_started=1
    fi
    printf '| %s | %s | %ss | %s |\n' "$1" "$2" "$3" "$4" >> "$SUMMARY"
    printf 'gpu-check: %-28s %-10s %4ss  %s\n' "$1" "$2" "$3" "$4"
}

# run_step NAME LIMIT_SECONDS NOTE_COMMAND -- COMMAND...: runs COMMAND with
# its output in logs/NAME.log, at most LIMIT seconds (less if the deadline
# is nearer); NOTE_COMMAND (run after, with the log as $1) prints the notes.
run_step() {
    local name=$1 limit=$2 note_cmd=$3
    shift 4
    local left=$((DEADLINE - $(date +%s)))
    if [ "$left" -lt 15 ]; then
        record "$name" "skipped" 0 "no time left before the deadline"
        return 0
    fi
    [ "$limit" -gt "$left" ] && limit=$left
    local log="$OUT/logs/$name.log" t0 rc status
    t0=$(date +%s)
    # bash -c, so that COMMAND may be one of the exported functions below
    timeout --kill-after=5 "$limit" bash -c '"$@"' step "$@" > "$log" 2>&1
    rc=$?
    # On this machine a device was found: a program that skips for want of
    # one has not done its job.
    if [ $rc -eq 0 ] && grep -q 'SKIP: no CUDA device' "$log"; then
        rc=1
    fi
    case $rc in
        0) status="ok" ;;
        124 | 137) status="TIMEOUT" ;;
        *) status="FAIL ($rc)" ;;
    esac
    [ $rc -ne 0 ] && FAILED=1
    local note
    note=$($note_cmd "$log" 2>/dev/null | tr '\n|' '; ' | cut -c1-300)
    [ -z "$note" ] && note=$(tail -n 1 "$log" | tr '|' ';' | cut -c1-300)
    record "$name" "$status" $(($(date +%s) - t0)) "$note"
    return $rc
}

last_line() { tail -n 1 "$1"; }
build_note() { echo "CUDA_ARCHS=$ARCHS, Check: $CHECK_MODE, $(grep -c ' -c ' "$1") compilations"; }
no_note() { :; }
tests_note() {
    grep -E '^[0-9]+%: Checks' "$1" | tail -n 1
    local skips
    skips=$(grep -c '^SKIP' "$1")
    echo "$skips SKIP lines"
    grep -m 3 -E 'no CUDA device|:F:|:E:' "$1"
}
sanitizer_note() { grep -m 2 -E 'ERROR SUMMARY|not supported|Device not supported|error' "$1"; }
bench_note() { grep -E 'decode step|reaches' "$1"; }
chapter_note() { grep -E 'tokens generated|model ' "$1" | sed 's/^ *//'; }
serving_note() { grep -E 'completed,|tokens generated|moves copied|preemptions  |copy-on-write' "$1" | sed 's/^ *//'; }

# ------------------------------------------------------------- is there a GPU?

GPU=$(timeout 20 nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -n 1)
if [ -z "$GPU" ]; then
    echo "- GPU: none (nvidia-smi found no device)" >> "$SUMMARY"
    record "detect GPU" "NO GPU" $(($(date +%s) - START)) "nothing was run; run this on a machine with an NVIDIA GPU"
    echo "gpu-check: no GPU on this machine; wrote $SUMMARY" >&2
    exit 2
fi
echo "- GPU: $GPU" >> "$SUMMARY"
nvidia-smi > "$OUT/logs/nvidia-smi.log" 2>&1

# -------------------------------------------------------------- Check library

CHECK_MODE=pkg-config
CHECK_CFLAGS_LOCAL=
CHECK_LIBS_LOCAL=
if ! pkg-config --exists check 2>/dev/null; then
    if ls .debs/*.deb > /dev/null 2>&1; then
        PREFIX=$ROOT/$BUILD/check-prefix
        mkdir -p "$PREFIX"
        for deb in .debs/*.deb; do dpkg -x "$deb" "$PREFIX"; done
        LIBDIR=$(dirname "$(find "$PREFIX" -name 'libcheck*.a' | head -n 1)")
        CHECK_MODE=unpacked
        CHECK_CFLAGS_LOCAL="-I$PREFIX/usr/include"
        CHECK_LIBS_LOCAL="-L$LIBDIR -Wl,-Bstatic -lcheck_pic -lsubunit -Wl,-Bdynamic -lrt -lm -pthread"
    else
        CHECK_MODE=none
    fi
fi
export ROOT OUT BUILD ARCHS JOBS CHECK_MODE CHECK_CFLAGS_LOCAL CHECK_LIBS_LOCAL

# ---------------------------------------------------------------------- build

build() {
    make -j"$JOBS" BUILD=$BUILD CUDA=1 CUDA_ARCHS="$ARCHS" all || return 1
    case $CHECK_MODE in
        pkg-config) make -j"$JOBS" BUILD=$BUILD CUDA=1 CUDA_ARCHS="$ARCHS" $BUILD/test-kvlab ;;
        unpacked) make -j"$JOBS" BUILD=$BUILD CUDA=1 CUDA_ARCHS="$ARCHS" CHECK_CFLAGS="$CHECK_CFLAGS_LOCAL" \
                      CHECK_LIBS="$CHECK_LIBS_LOCAL" $BUILD/test-kvlab ;;
        none) echo "no Check library: the test suites will be skipped" ;;
    esac
}
export -f build
if ! run_step build 240 build_note -- build; then
    echo "gpu-check: the build failed; see $OUT/logs/build.log" >&2
    exit 1
fi

# ---------------------------------------------------------------------- tests

if [ -x $BUILD/test-kvlab ]; then
    # A device is present: a GPU test that skips for want of one is a failure.
    gpu_tests() {
        KVLAB_BUILD=$BUILD $BUILD/test-kvlab || return 1
        ! grep -q 'no CUDA device' "$OUT/logs/tests.log"
    }
    export -f gpu_tests
    run_step tests 180 tests_note -- gpu_tests
else
    record tests "skipped" 0 "no Check library (see the top of scripts/gpu-check.sh); kernel-check below still validates every kernel"
fi

# --------------------------------------------------------------- kernel-check

run_step kernel-check 150 last_line -- $BUILD/kernel-check --markdown "$OUT/kernels.md"

# --------------------------------------------------------------- decode-bench

{
    echo "Batched decode, $GPU"
    echo
    echo "| model | weights | K/V | shape | device step | tokens/s | bytes moved / time | copy bandwidth | fraction | goal (>= 0.5) |"
    echo "|---|---|---|---|---|---|---|---|---|---|"
} > "$OUT/decode.md"
for precision in "f32 f32" "f16 f16" "bf16 bf16" "f16 f32"; do
    set -- $precision
    run_step "decode-w$1-kv$2" 60 bench_note -- $BUILD/decode-bench --preset stories110M --batch 64 --context 512 \
        --steps 20 --weight-dtype "$1" --kv-dtype "$2" --markdown "$OUT/decode.md"
done
run_step decode-no-graph 60 bench_note -- $BUILD/decode-bench --preset stories110M --batch 64 --context 512 \
    --steps 20 --weight-dtype f16 --kv-dtype f16 --no-graph --markdown "$OUT/decode.md"

# ------------------------------------------------------------ compute-sanitizer

SYNTH=$ROOT/$BUILD/models
mkdir -p "$SYNTH"
# Six short requests. With stories260K (or its synthetic twin) and the
# budgets below, chapter 3 moves regions and requeues requests, and
# chapter 4 preempts and copies forked blocks on write (checked on the CPU
# when this was written).
SHORT_REQS=$ROOT/$BUILD/gpu-check-requests.tsv
printf '%s\t%s\n' 24 'Once upon a time' 16 'The cat sat on the mat' 32 'Tom had a red ball' \
    20 'One day, a little bird' 28 'The sun was hot' 16 'Lily found a shiny stone' > "$SHORT_REQS"
CH03_SHORT=(--requests "$SHORT_REQS" --reserve grow --max-batch 4 --kv-budget 96KiB)
CH04_SHORT=(--requests "$SHORT_REQS" --block-size 8 --n 2 --temperature 0.8 --kv-budget 80KiB --watermark 0)
if command -v compute-sanitizer > /dev/null; then
    run_step memcheck-ch01 90 sanitizer_note -- compute-sanitizer --tool memcheck --error-exitcode 3 \
        $BUILD/ch01-naive --device cuda --steps 8 --kv-dtype f16 --quiet
    run_step memcheck-ch02 60 sanitizer_note -- compute-sanitizer --tool memcheck --error-exitcode 3 \
        $BUILD/ch02-kvcache --device cuda --steps 40 --kv-alloc grow --kv-dtype f16 --quiet
    run_step memcheck-ch03 90 sanitizer_note -- compute-sanitizer --tool memcheck --error-exitcode 3 \
        $BUILD/ch03-batching --device cuda "${CH03_SHORT[@]}" --quiet
    run_step memcheck-ch04 90 sanitizer_note -- compute-sanitizer --tool memcheck --error-exitcode 3 \
        $BUILD/ch04-paged --device cuda "${CH04_SHORT[@]}" --quiet
    run_step memcheck-kernels 120 sanitizer_note -- compute-sanitizer --tool memcheck --error-exitcode 3 \
        $BUILD/kernel-check --quick --no-time
    run_step racecheck-attention 90 sanitizer_note -- compute-sanitizer --tool racecheck --error-exitcode 3 \
        $BUILD/kernel-check --quick --no-time --kernel attention
    run_step racecheck-paged 90 sanitizer_note -- compute-sanitizer --tool racecheck --error-exitcode 3 \
        $BUILD/kernel-check --quick --no-time --kernel paged_attention
else
    record compute-sanitizer "skipped" 0 "compute-sanitizer is not on PATH"
fi

# ------------------------------------------------------------------ chapter 1

# stories260K from models/ or ../shared/models when present; otherwise the
# programs fall back to a synthetic model of that shape by themselves.
chapter_run() { # label, then arguments
    local label=$1
    shift
    $BUILD/ch01-naive "$@" --json "$OUT/logs/$label.json" > "$OUT/logs/$label.txt"
}
export -f chapter_run
run_step ch01-260K-cpu 60 chapter_note -- chapter_run ch01-260K-cpu --steps 128 && cpu_ok=1 || cpu_ok=0
run_step ch01-260K-cuda 60 chapter_note -- chapter_run ch01-260K-cuda --steps 128 --device cuda && cuda_ok=1 || cuda_ok=0
if [ $cpu_ok -eq 1 ] && [ $cuda_ok -eq 1 ]; then
    if cmp -s "$OUT/logs/ch01-260K-cpu.txt" "$OUT/logs/ch01-260K-cuda.txt"; then
        record ch01-260K-same-text "ok" 0 "CPU and GPU printed the same text"
    else
        record ch01-260K-same-text "differs" 0 "allowed after a near-tie; the cuda_forward tests check tokens up to it"
    fi
fi

# ------------------------------------------------------------- chapters 2 to 4

# The GPU tests compare these programs with the CPU token by token; here
# they run once more on the GPU for their tables and times. Then chapters 3
# and 4 serve the same mixed requests under the same (default) budget.
program_run() { # label, program, then arguments; stdout, --json and --out go to logs/
    local label=$1 program=$2
    shift 2
    local out=()
    [ "$program" != ch02-kvcache ] && out=(--out "$OUT/logs/$label.jsonl")
    $BUILD/$program "$@" --json "$OUT/logs/$label.json" ${out[@]+"${out[@]}"} > "$OUT/logs/$label.txt"
}
export -f program_run
run_step ch02-260K-cuda 60 chapter_note -- program_run ch02-260K-cuda ch02-kvcache --steps 128 --kv-alloc grow \
    --device cuda
run_step ch03-short-cuda 60 serving_note -- program_run ch03-short-cuda ch03-batching "${CH03_SHORT[@]}" --device cuda
run_step ch04-short-cuda 60 serving_note -- program_run ch04-short-cuda ch04-paged "${CH04_SHORT[@]}" --device cuda
mixed_ok=1
for ch in ch03-batching ch04-paged; do
    run_step "$ch-mixed-cuda" 90 serving_note -- program_run "$ch-mixed-cuda" $ch --requests data/requests-mixed.tsv \
        --device cuda || mixed_ok=0
done

# A JSON report's number for a key (the first occurrence).
json_value() { grep -m 1 "\"$2\":" "$1" | sed 's/.*: *//; s/,$//'; }
# Requests whose tokens are the same in two --out files.
same_requests() {
    paste -d '\n' <(grep -o '"tokens":\[[^]]*\]' "$1") <(grep -o '"tokens":\[[^]]*\]' "$2") |
        awk 'NR % 2 { x = $0; next } $0 == x { n++ } END { print n + 0 }'
}
mixed_table() {
    local ch label j
    echo "Chapters 3 and 4 on data/requests-mixed.tsv, default KV budget, $GPU"
    echo
    echo "| program | requests | at most running | steps | tokens/s | KV utilization (avg) | KV peak reserved (B) |"
    echo "|---|---|---|---|---|---|---|"
    for ch in ch03-batching ch04-paged; do
        label=$ch-mixed-cuda
        j=$OUT/logs/$label.json
        printf '| %s | %s | %s | %s | %.0f | %.1f%% | %s |\n' "$ch" "$(json_value "$j" requests_completed)" \
            "$(json_value "$j" max_concurrent)" "$(json_value "$j" steps)" "$(json_value "$j" tokens_per_s)" \
            "$(awk -v u="$(json_value "$j" kv_utilization_avg)" 'BEGIN { print 100 * u }')" \
            "$(json_value "$j" kv_peak_reserved_bytes)"
    done
    echo
    echo "Requests with the same tokens in both: $(same_requests "$OUT/logs/ch03-batching-mixed-cuda.jsonl" \
        "$OUT/logs/ch04-paged-mixed-cuda.jsonl") of $(grep -c . "$OUT/logs/ch04-paged-mixed-cuda.jsonl")" \
        "(the attention kernels differ, contiguous and paged: greedy tokens may part after a near-tie)."
}
if [ $mixed_ok -eq 1 ]; then
    mixed_table > "$OUT/chapters.md"
    record ch04-vs-ch03-mixed "ok" 0 "$(awk -F' *[|] *' '/^[|] ch0/ { printf "%s: %s running at most, %s steps, %s tokens/s; ", $2, $4, $5, $6 }' \
        "$OUT/chapters.md")see chapters.md"
fi

make_110m() { $BUILD/decode-bench --write-model stories110M "$SYNTH/stories110M.bin" "$SYNTH/tok32000.bin"; }
export SYNTH
export -f make_110m
if run_step write-110M-model 60 last_line -- make_110m; then
    M110=(--model "$SYNTH/stories110M.bin" --tokenizer "$SYNTH/tok32000.bin")
    run_step ch01-110M-cpu 90 chapter_note -- chapter_run ch01-110M-cpu "${M110[@]}" --steps 24
    run_step ch01-110M-cuda 90 chapter_note -- chapter_run ch01-110M-cuda "${M110[@]}" --steps 128 --device cuda
    run_step ch01-110M-cuda-f16 90 chapter_note -- chapter_run ch01-110M-cuda-f16 "${M110[@]}" --steps 128 \
        --device cuda --weight-dtype f16 --kv-dtype f16
fi

# -------------------------------------------------------------------- the end

echo >> "$SUMMARY"
echo "Total: $(($(date +%s) - START)) s. Kernel results: kernels.md; decode results: decode.md; chapters 3 and 4:" \
    "chapters.md; logs: logs/." >> "$SUMMARY"
echo "gpu-check: done in $(($(date +%s) - START)) s; results in $OUT" >&2
exit $FAILED
