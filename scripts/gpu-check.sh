#!/usr/bin/env bash
# scripts/gpu-check.sh RESULTS_DIR: everything about the CUDA path that
# needs a GPU, as one prepared run of at most GPU_CHECK_SECONDS (460).
#
# Prepare it first on a machine with apt (scripts/gpu-prepare.sh): Check
# and PCRE2 as .debs and a copy of the shared model files, with the device
# tool's carry list. Then, on the GPU machine, from the checkout's root:
#
#     scripts/gpu-check.sh "$OUT"          # command timeout: 560 s
#
# It assumes nothing of the machine but bash, make, a C compiler and the
# CUDA toolkit, and finds what it needs:
#   - nvcc on PATH, else in /usr/local/cuda/bin, else the newest
#     /usr/local/cuda-*/bin, through symbolic links (the Makefile does the
#     same);
#   - the GPU with nvidia-smi (on PATH or in /usr/local/nvidia/bin), else
#     by its device node /dev/nvidia0 (the programs then name it);
#   - Check and PCRE2 with pkg-config or the compiler, else unpacked from
#     .debs/ and linked statically; without Check the test suites are
#     skipped, without PCRE2 the programs are built without it (PCRE2=0:
#     only byte-level BPE models are refused);
#   - cuBLAS in the toolkit, the loader's cache or a versioned
#     libcublas.so.N elsewhere (Python's nvidia-cublas);
#   - compute-sanitizer on PATH, in the toolkit, or under /opt.
#
# Steps, in this order (what matters most first), each its own time limit,
# every one cut to what is left before the deadline:
#   1. build: `make all`, warnings as errors; if that fails, once more
#      without -Werror (WERROR=0), which the summary reports; then the
#      registers and spills of the attention kernels (cuobjdump);
#   2. the kernels: build/kernel-check in four parts (paged attention,
#      attention, the elementwise kernels, matmul): every version against
#      its CPU reference, then timed with the L2 cleared before each call,
#      against the device-to-device copy bandwidth measured in the same
#      run; paged against contiguous version for version (kernels.md);
#   3. batched decode of a stories110M-shaped model (build/decode-bench),
#      chapter 3's contiguous store beside chapter 4's paged one, in f32 and
#      f16, then bf16, f16 weights over f32 K/V and without a CUDA graph,
#      against the copy bandwidth (decode.md);
#   4. the test binary (needs Check), then each GPU test suite as a step of
#      its own: every kernel version against its CPU reference, the device
#      forward pass and stores, chapters 2 to 4 against the CPU;
#   5. the chapters as programs: chapter 1 on the CPU and the GPU printing
#      the same text, chapters 2 to 4 on the GPU, 3 and 4 side by side, a
#      stories110M-shaped chapter 1 (chapters.md);
#   6. compute-sanitizer last (memcheck on every chapter and kernel,
#      racecheck on the attention kernels).
#
# It works in a scratch folder and copies into RESULTS_DIR only
# summary.md (every step: status, time, notes), kernels.md, decode.md,
# chapters.md and logs.tar.gz (every log and JSON report), after every step
# and from an EXIT trap (so also when it is stopped), plus gpu-check.log,
# its own output, written as it goes: at most 6 files, fewer than the 8 the
# GPU machine returns. A step that runs past its limit is TIMEOUT: it is
# reported as such, and the numbers gathered before it stand.
#
# Exit status: 0 every step passed; 1 a step failed; 3 nothing failed but a
# step timed out or was skipped for the deadline; 2 no GPU.
#
# Variables: CUDA_ARCHS (90), GPU_CHECK_SECONDS (460), JOBS (all cores),
# GPU_CHECK_LIMIT_<step> (a step's limit in seconds, '-' as '_').
# For the dry run under the CPU emulator (scripts/gpu-check-dry-run.sh, in
# make emu-check): GPU_CHECK_EMULATED=1 (no GPU looked for, small sizes, a
# stand-in for compute-sanitizer), GPU_CHECK_BUILD (build folder),
# GPU_CHECK_MAKE (more make variables), GPU_CHECK_SUITES,
# GPU_CHECK_PROBE_TIMEOUT=1 (one step that must time out).
set -uo pipefail

if [ $# -ne 1 ]; then
    echo "usage: scripts/gpu-check.sh RESULTS_DIR" >&2
    exit 1
fi
cd "$(dirname "$0")/.." || exit 1
ROOT=$(pwd)
mkdir -p "$1" || exit 1
RESULTS=$(cd "$1" && pwd)
START=$(date +%s)
DEADLINE=$((START + ${GPU_CHECK_SECONDS:-460}))
RESERVE=10 # seconds kept for publishing the results at the end
ARCHS=${CUDA_ARCHS:-90}
JOBS=${JOBS:-$(nproc 2> /dev/null || echo 4)}
BUILD=${GPU_CHECK_BUILD:-build/gpu-check}
read -r -a EXTRA_MAKE <<< "${GPU_CHECK_MAKE:-}"
EMULATED=${GPU_CHECK_EMULATED:-}
SUITES=${GPU_CHECK_SUITES:-cuda_kernels cuda_forward cuda_chapters serving_device device_cli}
OUTPUTS=(summary.md kernels.md decode.md chapters.md logs.tar.gz gpu-check.log)

WORK=$(mktemp -d "${TMPDIR:-/tmp}/kvlab-gpu-check.XXXXXX") || exit 1
LOGS=$WORK/logs
mkdir -p "$LOGS"
SUMMARY=$WORK/summary.md
NOTES=$WORK/notes.md # lines for the end of the summary
: > "$NOTES"
for f in "${OUTPUTS[@]}"; do rm -f "$RESULTS/$f"; done
# Everything this script prints also goes to RESULTS_DIR/gpu-check.log, as
# it goes. tee ignores TERM and INT, so that when a timeout signals the whole
# process group it still copies what the EXIT trap prints.
exec > >(trap '' TERM INT; exec tee -a "$RESULTS/gpu-check.log") 2>&1

export ROOT WORK LOGS BUILD

# ------------------------------------------------------------ results

# Copies the results into RESULTS_DIR: each file through a temporary name,
# so that a run stopped mid-copy leaves the previous version whole.
publish() {
    local f
    for f in summary.md kernels.md decode.md chapters.md; do
        [ -f "$WORK/$f" ] && cp "$WORK/$f" "$RESULTS/.$f.part" && mv -f "$RESULTS/.$f.part" "$RESULTS/$f"
    done
    tar -czf "$RESULTS/.logs.tar.gz.part" -C "$WORK" logs 2> /dev/null &&
        mv -f "$RESULTS/.logs.tar.gz.part" "$RESULTS/logs.tar.gz"
    rm -f "$RESULTS"/.*.part
}

FAILED=0 INCOMPLETE=0 STEP_PID= STOPPED=
finish() {
    local rc=$?
    trap - EXIT TERM INT
    trap '' PIPE # whatever happened to stdout, publish the results
    if [ -n "$STEP_PID" ]; then # stopped in the middle of a step: timeout passes it on to the step
        kill -TERM "$STEP_PID" 2> /dev/null
        record "${STEP_NAME:-?}" "STOPPED" $(($(date +%s) - STEP_T0)) "the run was stopped (signal) during this step"
    fi
    local result
    if [ "$rc" -eq 2 ]; then
        result="NO GPU: nothing was run"
    elif [ -n "$STOPPED" ]; then
        result="STOPPED by a signal after $(($(date +%s) - START)) s; the steps above stand"
        rc=3
        [ $FAILED -ne 0 ] && rc=1
    elif [ $FAILED -ne 0 ]; then
        result="FAIL: $FAILED step(s) failed"
        rc=1
    elif [ $INCOMPLETE -ne 0 ]; then
        result="INCOMPLETE: nothing failed; $INCOMPLETE step(s) timed out or were skipped for the deadline"
        rc=3
    else
        result="PASS: every step passed"
    fi
    # a kernel-check part that was stopped left the rows it had written
    declare -F join_kernel_tables > /dev/null && join_kernel_tables
    {
        if [ -s "$NOTES" ]; then
            echo
            cat "$NOTES"
        fi
        echo
        echo "Result: $result. Total: $(($(date +%s) - START)) s (deadline ${GPU_CHECK_SECONDS:-460} s)."
        echo "Tables: kernels.md, decode.md, chapters.md (those present); every log and JSON report: logs.tar.gz."
    } >> "$SUMMARY"
    publish
    rm -rf "$WORK"
    echo "gpu-check: $result; results in $RESULTS" >&2
    exit "$rc"
}
trap finish EXIT
trap 'STOPPED=1; exit 143' TERM
trap 'STOPPED=1; exit 130' INT

note() { echo "- $*" >> "$NOTES"; }

table_started=0
record() { # step, status, seconds, note
    if [ $table_started -eq 0 ]; then
        printf '\n| step | status | time | notes |\n|---|---|---|---|\n' >> "$SUMMARY"
        table_started=1
    fi
    printf '| %s | %s | %ss | %s |\n' "$1" "$2" "$3" "$4" >> "$SUMMARY"
    printf 'gpu-check: %-26s %-12s %4ss  %s\n' "$1" "$2" "$3" "$4"
}

# A step's limit: its own (or GPU_CHECK_LIMIT_<name> with - as _), never
# past the deadline less the reserve for publishing.
limit_for() {
    local name=$1 limit=$2 var left
    var="GPU_CHECK_LIMIT_${name//-/_}"
    limit=${!var:-$limit}
    left=$((DEADLINE - RESERVE - $(date +%s)))
    [ "$limit" -gt "$left" ] && limit=$left
    echo "$limit"
}

# run_step NAME LIMIT NOTE_FUNCTION -- COMMAND...: runs COMMAND with its
# output in logs/NAME.log for at most LIMIT seconds (less when the deadline
# is nearer); NOTE_FUNCTION (given the log) prints the notes. The command
# runs in the background and the script waits for it, so that a signal to
# the script is handled at once (bash would hold a trap until a foreground
# command ends); the EXIT trap then stops the step. Returns 0 (ok), 1
# (failed), 3 (timed out or skipped). STEP_SOFT=1: a failure is recorded
# as such but not counted (a step that is retried).
run_step() {
    local name=$1 limit note_cmd=$3 rc status note
    limit=$(limit_for "$1" "$2")
    shift 4
    if [ "$limit" -lt 5 ]; then
        record "$name" "skipped" 0 "no time left before the deadline"
        INCOMPLETE=$((INCOMPLETE + 1))
        return 3
    fi
    local log="$LOGS/$name.log"
    STEP_NAME=$name STEP_T0=$(date +%s)
    # bash -c, so that COMMAND may be one of the exported functions below
    timeout --kill-after=5 "$limit" bash -c '"$@"' step "$@" > "$log" 2>&1 &
    STEP_PID=$!
    wait "$STEP_PID"
    rc=$?
    STEP_PID=
    # A device is present: a program that skips for want of one has not done its job.
    if [ $rc -eq 0 ] && grep -q 'no CUDA device' "$log"; then
        rc=1
    fi
    case $rc in
        0) status="ok" ;;
        124 | 137) status="TIMEOUT (${limit}s)"; INCOMPLETE=$((INCOMPLETE + 1)) ;;
        *)
            status="FAIL ($rc)"
            if [ -n "${STEP_SOFT:-}" ]; then status="FAIL ($rc), retried"; else FAILED=$((FAILED + 1)); fi
            ;;
    esac
    note=$($note_cmd "$log" 2> /dev/null | tr '\n|' '; ' | cut -c1-300)
    [ -z "$note" ] && note=$(tail -n 1 "$log" | tr '|' ';' | cut -c1-300)
    record "$name" "$status" $(($(date +%s) - STEP_T0)) "$note"
    publish
    case $rc in 0) return 0 ;; 124 | 137) return 3 ;; *) return 1 ;; esac
}

last_line() { tail -n 1 "$1"; }
no_note() { :; }
build_note() { echo "$(grep -cE '^  (CC|NVCC) ' "$1") compilations; $(grep -m 1 -E 'error|Error' "$1")"; }
tests_note() {
    grep -E '^[0-9]+%: Checks' "$1" | tail -n 1
    echo "$(grep -c '^SKIP' "$1") SKIP lines"
    grep -m 3 -E 'no CUDA device|:F:|:E:' "$1"
}
sanitizer_note() { grep -m 2 -E 'ERROR SUMMARY|not supported|^kernel-check: [0-9]|: error|Error' "$1"; }
kernels_note() { grep -E '^kernel-check: [0-9]|^kernel-check: SKIP|: error' "$1" | tail -n 2; }
bench_note() { grep -E 'K/V store|decode step|reaches|SKIP|error' "$1"; }
chapter_note() { grep -E 'tokens generated|model |error' "$1" | sed 's/^ *//'; }
serving_note() { grep -E 'completed,|tokens generated|moves copied|preemptions  |copy-on-write|error' "$1" | sed 's/^ *//'; }

# ------------------------------------------------------------- the tools

# nvcc: on PATH, else the toolkit's usual homes; followed through links to
# the toolkit it belongs to (whose folder holds the headers and libraries).
find_nvcc() {
    local n
    n=$(command -v nvcc 2> /dev/null || ls /usr/local/cuda/bin/nvcc 2> /dev/null ||
        ls -d /usr/local/cuda-*/bin/nvcc 2> /dev/null | sort -V | tail -n 1)
    [ -n "$n" ] || return 1
    NVCC_FOUND=$n
    NVCC_REAL=$(readlink -f "$n")
    CUDA_HOME_FOUND=${NVCC_REAL%/bin/nvcc}
    [ -f "$CUDA_HOME_FOUND/include/cuda_runtime_api.h" ] || CUDA_HOME_FOUND=/usr/local/cuda
    # nvcc run through a link in another folder looks for its own tools
    # (cicc) beside the link: put its real folder first
    PATH="$(dirname "$NVCC_REAL"):$PATH"
}

find_nvidia_smi() {
    command -v nvidia-smi 2> /dev/null && return 0
    local d
    for d in /usr/local/nvidia/bin /usr/bin /usr/local/bin; do
        [ -x "$d/nvidia-smi" ] && echo "$d/nvidia-smi" && return 0
    done
    return 1
}

# compute-sanitizer: on PATH, in the toolkit (bin/ or its own folder),
# else anywhere under /opt (Nsight installs).
find_sanitizer() {
    command -v compute-sanitizer 2> /dev/null && return 0
    local c
    for c in "${CUDA_HOME_FOUND:-/usr/local/cuda}"/bin/compute-sanitizer \
        "${CUDA_HOME_FOUND:-/usr/local/cuda}"/compute-sanitizer/compute-sanitizer \
        /usr/local/cuda*/bin/compute-sanitizer /usr/local/cuda*/compute-sanitizer/compute-sanitizer; do
        [ -x "$c" ] && echo "$c" && return 0
    done
    c=$(find /opt -maxdepth 6 -name compute-sanitizer -type f -perm -u+x 2> /dev/null | sort | tail -n 1)
    [ -n "$c" ] && echo "$c"
}

NVCC_FOUND= NVCC_REAL= CUDA_HOME_FOUND=
find_nvcc
export PATH

{
    echo "# kvlab GPU check"
    echo
    echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "- commit: $(git rev-parse --short HEAD 2> /dev/null || echo unknown)$(git diff --quiet 2> /dev/null || echo ' (with local changes)')"
    echo "- host: $(uname -srm), $(nproc 2> /dev/null || echo '?') CPUs, $(ldd --version 2> /dev/null | head -n 1 | sed 's/^ldd //')"
    echo "- compiler: $(${CC:-gcc} --version 2> /dev/null | head -n 1 || echo 'not found')"
    if [ -n "$NVCC_FOUND" ]; then
        echo "- nvcc: $(nvcc --version 2> /dev/null | grep -o 'release [0-9.]*' || echo '?') ($NVCC_FOUND -> $NVCC_REAL; toolkit $CUDA_HOME_FOUND)"
    else
        echo "- nvcc: not found (looked on PATH, in /usr/local/cuda/bin and /usr/local/cuda-*/bin)"
    fi
} > "$SUMMARY"

# ------------------------------------------------------------- the device

GPU_NAME=
if [ -n "$EMULATED" ]; then
    GPU="the CPU emulator (a dry run: no GPU; times are not GPU times)"
else
    SMI=$(find_nvidia_smi)
    if [ -n "$SMI" ]; then
        GPU_NAME=$(timeout 20 "$SMI" --query-gpu=name,memory.total,driver_version --format=csv,noheader 2> /dev/null |
            head -n 1)
        timeout 20 "$SMI" > "$LOGS/nvidia-smi.log" 2>&1
    fi
    if [ -n "$GPU_NAME" ]; then
        GPU="$GPU_NAME (nvidia-smi: $SMI)"
    elif ls /dev/nvidia[0-9]* > /dev/null 2>&1; then
        GPU="the GPU at $(ls /dev/nvidia[0-9]* | head -n 1) (${SMI:-no nvidia-smi found}: no name; the programs name it)"
    else
        echo "- GPU: none (no nvidia-smi on PATH or in /usr/local/nvidia/bin, no /dev/nvidia0)" >> "$SUMMARY"
        record "detect GPU" "NO GPU" $(($(date +%s) - START)) "nothing was run; run this on a machine with an NVIDIA GPU"
        exit 2
    fi
fi
echo "- GPU: $GPU" >> "$SUMMARY"

# ------------------------------------------------------------- cuBLAS

# kernels/matmul.cu opens libcublas.so.N (N: the major version of the
# headers it was compiled with) from the folder the build names
# (CUBLAS_DIR), else wherever the dynamic loader finds it. Look in the
# toolkit first, then in the loader's cache, then in Python packages
# (nvidia-cublas wheels).
CUDA_HOME_GUESS=${CUDA_HOME:-${CUDA_HOME_FOUND:-/usr/local/cuda}}
CUBLAS_MAJOR=$(sed -n 's/^#define CUBLAS_VER_MAJOR *\([0-9][0-9]*\).*/\1/p' "$CUDA_HOME_GUESS/include/cublas_api.h" 2> /dev/null)
CUBLAS_DIR= CUBLAS_HOW="not found"
find_cublas() {
    local d lib=libcublas.so.${CUBLAS_MAJOR:-?}
    for d in "$CUDA_HOME_GUESS/lib64" "$CUDA_HOME_GUESS/lib" "$CUDA_HOME_GUESS/targets/$(uname -m)-linux/lib"; do
        if [ -e "$d/$lib" ]; then
            CUBLAS_DIR=$d CUBLAS_HOW="the toolkit, $d/$lib"
            return 0
        fi
    done
    d=$(ldconfig -p 2> /dev/null | awk -v lib="$lib" '$1 == lib { print $NF; exit }')
    if [ -n "$d" ]; then
        CUBLAS_DIR=$(dirname "$d") CUBLAS_HOW="the loader's cache (ldconfig), $d"
        return 0
    fi
    d=$(find /usr/local/lib /usr/lib /opt -maxdepth 8 -name "$lib" -path '*nvidia*' 2> /dev/null | head -n 1)
    if [ -n "$d" ]; then
        CUBLAS_DIR=$(dirname "$d") CUBLAS_HOW="a versioned $lib outside the toolkit, $d"
        return 0
    fi
    return 1
}
find_cublas
if [ -n "$EMULATED" ]; then
    CUBLAS_HOW="the emulator's fake cuBLAS (the real one: $CUBLAS_HOW)"
fi
echo "- cuBLAS: $CUBLAS_HOW" >> "$SUMMARY"

# ------------------------------------------------------ Check and PCRE2

# Unpacks the .debs of scripts/gpu-prepare.sh once (dpkg-deb, or ar and
# tar where dpkg is missing), into the build folder: the objects' recorded
# dependencies name these headers, and a path that changed from run to run
# would rebuild them every time.
DEBS_PREFIX=
unpack_debs() {
    [ -n "$DEBS_PREFIX" ] && return 0
    ls .debs/*.deb > /dev/null 2>&1 || return 1
    DEBS_PREFIX=$(mkdir -p "$BUILD" && cd "$BUILD" && pwd)/debs-prefix
    rm -rf "$DEBS_PREFIX"
    mkdir -p "$DEBS_PREFIX"
    local deb data
    for deb in .debs/*.deb; do
        if command -v dpkg-deb > /dev/null; then
            dpkg-deb -x "$deb" "$DEBS_PREFIX" || return 1
        else
            data=$(ar t "$deb" | grep '^data\.tar') || return 1
            ar p "$deb" "$data" | tar -x -a -f - -C "$DEBS_PREFIX" 2> /dev/null ||
                ar p "$deb" "$data" | tar -x --zstd -f - -C "$DEBS_PREFIX" || return 1
        fi
    done
    # the development packages' .so links point into runtime packages not
    # carried (the archives are linked statically): no dangling links left
    find "$DEBS_PREFIX" -xtype l -delete
}
debs_file() { find "$DEBS_PREFIX" -name "$1" | head -n 1; }

# Check: pkg-config's, or the .debs (unpacked, linked statically); without
# either the suites are skipped.
CHECK_MODE=pkg-config
CHECK_VARS=()
if ! pkg-config --exists check 2> /dev/null; then
    if unpack_debs && [ -n "$(debs_file libcheck_pic.a)" ]; then
        CHECK_MODE="unpacked from .debs/, linked statically"
        CHECK_VARS=(CHECK_CFLAGS="-I$DEBS_PREFIX/usr/include"
                    CHECK_LIBS="-L$(dirname "$(debs_file libcheck_pic.a)") -Wl,-Bstatic -lcheck_pic -lsubunit -Wl,-Bdynamic -lrt -lm -pthread")
    else
        CHECK_MODE="none (no pkg-config check, no .debs/: run scripts/gpu-prepare.sh first)"
    fi
fi
echo "- Check: $CHECK_MODE" >> "$SUMMARY"

# PCRE2: pkg-config's, or the compiler's own (a header and a library it
# finds), or the .debs (linked statically), or none: PCRE2=0.
pcre2_links() {
    printf '#define PCRE2_CODE_UNIT_WIDTH 8\n#include <pcre2.h>\nint main(void) { return pcre2_config(0, 0) < -100; }\n' |
        ${CC:-gcc} -x c - -x none -o "$WORK/pcre2-probe" "$@" 2> "$LOGS/pcre2-probe.log"
}
PCRE2_VARS=()
if pkg-config --exists libpcre2-8 2> /dev/null; then
    PCRE2_MODE=pkg-config
elif pcre2_links -lpcre2-8; then
    PCRE2_MODE="the compiler's (pcre2.h and -lpcre2-8)"
elif unpack_debs && [ -n "$(debs_file libpcre2-8.a)" ] &&
    pcre2_links -I"$DEBS_PREFIX/usr/include" "$(debs_file libpcre2-8.a)"; then
    PCRE2_MODE="unpacked from .debs/, linked statically"
    PCRE2_VARS=(PCRE2_CFLAGS="-I$DEBS_PREFIX/usr/include" PCRE2_LIBS="$(debs_file libpcre2-8.a)")
else
    PCRE2_MODE="none: built with PCRE2=0 (byte-level BPE models refused; no .debs/ with libpcre2-dev)"
    PCRE2_VARS=(PCRE2=0)
    note "PCRE2: none found and none carried: the programs were built without it (PCRE2=0)."
fi
echo "- PCRE2: $PCRE2_MODE" >> "$SUMMARY"

# ------------------------------------------------------------- models

# The shared model files, from ../shared/models or the copy that
# scripts/gpu-prepare.sh made in .gpu-shared/models (../shared does not
# travel to the GPU machine); without them, synthetic models of the same
# shape (the tests and the programs fall back by themselves).
MODELS=
for d in ../shared/models .gpu-shared/models; do
    if [ -f "$d/stories260K.bin" ] && [ -f "$d/tok512.bin" ]; then
        MODELS=$(cd "$d" && pwd)
        break
    fi
done
if [ -n "$MODELS" ]; then
    export KVLAB_SHARED_MODELS=$MODELS
    M260K=(--model "$MODELS/stories260K.bin" --tokenizer "$MODELS/tok512.bin")
    echo "- models: stories260K from $MODELS" >> "$SUMMARY"
else
    M260K=()
    echo "- models: synthetic (no stories260K in ../shared/models or .gpu-shared/models)" >> "$SUMMARY"
fi
publish

# ------------------------------------------------------------- sizes

if [ -n "$EMULATED" ]; then # the emulator is about a thousand times slower
    KC_ARGS=(--quick --repeats 1)
    DECODE=(--preset stories260K --batch 2 --context 8 --steps 2)
    STEPS_SHORT=8 STEPS_LONG=16 BIG_PRESET=stories260K BIG_STEPS_CPU=8 BIG_STEPS_GPU=8
    SANITIZER=emulated_sanitizer
else
    KC_ARGS=()
    DECODE=(--preset stories110M --batch 64 --context 512 --steps 20)
    STEPS_SHORT=24 STEPS_LONG=128 BIG_PRESET=stories110M BIG_STEPS_CPU=24 BIG_STEPS_GPU=128
    SANITIZER=$(find_sanitizer)
fi
# The emulator has no sanitizer: its stand-in drops the options and runs
# the program, so that the dry run goes through these steps too.
emulated_sanitizer() {
    while [ $# -gt 0 ] && [ "${1#--}" != "$1" ]; do shift 2; done
    "$@"
}
export -f emulated_sanitizer

# ---------------------------------------------------------------------- 1. build

MAKE_VARS=(BUILD="$BUILD" CUDA_BUILD="$BUILD/cuda" CUDA=1 CUDA_ARCHS="$ARCHS" ${CHECK_VARS[@]+"${CHECK_VARS[@]}"}
           ${PCRE2_VARS[@]+"${PCRE2_VARS[@]}"})
if [ -z "$EMULATED" ] && [ -n "$CUBLAS_DIR" ]; then
    MAKE_VARS+=(CUBLAS_DIR="$CUBLAS_DIR")
fi
MAKE_VARS+=(${EXTRA_MAKE[@]+"${EXTRA_MAKE[@]}"})
build() { make --no-print-directory -j"$JOBS" "$@"; }
export -f build
export JOBS
# Warnings as errors first, as CI builds; a compiler that warns where the
# tested ones do not gets one more try without -Werror, which is reported.
WERROR_VAR=()
STEP_SOFT=1 run_step build 240 build_note -- build "${MAKE_VARS[@]}" all
case $? in
    0) built=1 ;;
    1)
        WERROR_VAR=(WERROR=0)
        note "The build with -Werror failed ($(grep -m 1 'error' "$LOGS/build.log" | cut -c1-200)); the programs were built again with WERROR=0 (logs/build.log, logs/build-no-werror.log)."
        run_step build-no-werror 240 build_note -- build "${MAKE_VARS[@]}" WERROR=0 all && built=1 || built=0
        ;;
    *) built=0 ;; # timed out: no retry would end sooner
esac
if [ $built -eq 0 ]; then
    echo "gpu-check: the build did not finish; see logs/build*.log in $RESULTS/logs.tar.gz" >&2
    exit 1
fi

# The registers, stack and spills of the attention kernels as built
# (what their occupancy, and paged v3's split, rest on).
resources() {
    local obj
    for obj in "$@"; do
        echo "== $obj"
        cuobjdump --dump-resource-usage "$obj" | grep -E 'Function|REG:' | sed 's/^ *//' |
            { if command -v c++filt > /dev/null; then c++filt; else cat; fi; }
    done
}
resources_note() {
    echo "$(grep -c 'REG:' "$1") kernels; $(grep -c 'STACK:[1-9]' "$1") with a stack frame (spills); registers of paged v3: $(grep -A1 'paged_v3' "$1" | grep -o 'REG:[0-9]*' | sort -t: -k2 -n | sed -n '1p;$p' | tr '\n' ' ')"
}
if [ -z "$EMULATED" ] && command -v cuobjdump > /dev/null; then
    export -f resources
    run_step kernel-resources 30 resources_note -- resources "$BUILD/cuda/paged_attention.o" "$BUILD/cuda/attention.o"
fi

# ---------------------------------------------------------------------- 2. the kernels

# kernel-check in four parts, each with its own table (written row by
# row), joined into kernels.md after each part and at the end: a part that
# runs out of time keeps the rows it wrote.
KC_PARTS=(paged_attention attention rmsnorm,rope,swiglu,residual,embedding,convert,kv_write,block_copy matmul)
KC_NAMES=(kernels-paged kernels-attention kernels-elementwise kernels-matmul)
KC_LIMITS=(90 75 60 60)
join_kernel_tables() {
    local first=1 f
    ls "$WORK"/kernels-*.md > /dev/null 2>&1 || return 0
    for f in "${KC_NAMES[@]}"; do
        [ -f "$WORK/$f.md" ] || continue
        if [ $first -eq 1 ]; then
            cat "$WORK/$f.md"
            first=0
        else
            grep -E '^[|] [a-z]' "$WORK/$f.md" | grep -v '^| kernel | case'
        fi
    done > "$WORK/kernels.md"
}
for i in "${!KC_PARTS[@]}"; do
    run_step "${KC_NAMES[$i]}" "${KC_LIMITS[$i]}" kernels_note -- "$BUILD/kernel-check" \
        ${KC_ARGS[@]+"${KC_ARGS[@]}"} --kernel "${KC_PARTS[$i]}" --markdown "$WORK/${KC_NAMES[$i]}.md"
    join_kernel_tables
    publish
done

# ---------------------------------------------------------------------- 3. batched decode

{
    echo "Batched decode, $GPU"
    echo
    echo "Each row: a decode step of every sequence of the batch, bytes it must move (every weight once, every"
    echo "sequence's K/V up to its position) over its device time, against a device-to-device copy measured in the"
    echo "same run (bytes read and written). Contiguous: chapter 3's arena; paged: chapter 4's blocks."
    echo
    echo "| model | weights | K/V | store (attention kernel) | shape | device step | tokens/s | bytes moved / time | copy bandwidth | fraction | goal (>= 0.5) |"
    echo "|---|---|---|---|---|---|---|---|---|---|---|"
} > "$WORK/decode.md"
for run in "f32 f32 contiguous" "f32 f32 paged" "f16 f16 contiguous" "f16 f16 paged" "bf16 bf16 paged" \
    "f16 f32 contiguous" "f16 f16 paged --no-graph"; do
    set -- $run
    run_step "decode-w$1-kv$2-$3${4:+-no-graph}" 45 bench_note -- "$BUILD/decode-bench" "${DECODE[@]}" \
        --weight-dtype "$1" --kv-dtype "$2" --store "$3" ${4:+"$4"} --markdown "$WORK/decode.md"
done

# ---------------------------------------------------------------------- 4. the test suites

if [ "${CHECK_MODE%% *}" = none ]; then
    record build-tests "skipped" 0 "no Check library ($CHECK_MODE); kernel-check above validated every kernel"
elif run_step build-tests 120 build_note -- build "${MAKE_VARS[@]}" ${WERROR_VAR[@]+"${WERROR_VAR[@]}"} \
    "$BUILD/test-kvlab"; then
    gpu_suite() { KVLAB_BUILD=$BUILD "$BUILD/test-kvlab" "$1"; }
    export -f gpu_suite
    for suite in $SUITES; do
        case $suite in cuda_chapters) limit=120 ;; cuda_forward) limit=90 ;; *) limit=60 ;; esac
        run_step "suite-$suite" $limit tests_note -- gpu_suite "$suite"
    done
fi

if [ -n "${GPU_CHECK_PROBE_TIMEOUT:-}" ]; then # the dry run checks that a timeout is reported, not fatal
    run_step timeout-probe 5 no_note -- sleep 60
fi

# ---------------------------------------------------------------------- 5. the chapters

# Chapter 1 with stories260K (or its synthetic twin), on the CPU and the GPU.
chapter_run() { # label, program, then arguments; stdout, --json and --out go to logs/
    local label=$1 program=$2
    shift 2
    local out=()
    case $program in ch03-* | ch04-*) out=(--out "$LOGS/$label.jsonl") ;; esac
    "$BUILD/$program" "$@" --json "$LOGS/$label.json" ${out[@]+"${out[@]}"} > "$LOGS/$label.txt"
}
export -f chapter_run
run_step ch01-260K-cpu 60 chapter_note -- chapter_run ch01-260K-cpu ch01-naive ${M260K[@]+"${M260K[@]}"} \
    --steps $STEPS_LONG && cpu_ok=1 || cpu_ok=0
run_step ch01-260K-cuda 60 chapter_note -- chapter_run ch01-260K-cuda ch01-naive ${M260K[@]+"${M260K[@]}"} \
    --steps $STEPS_LONG --device cuda && cuda_ok=1 || cuda_ok=0
if [ $cpu_ok -eq 1 ] && [ $cuda_ok -eq 1 ]; then
    if cmp -s "$LOGS/ch01-260K-cpu.txt" "$LOGS/ch01-260K-cuda.txt"; then
        record ch01-260K-same-text "ok" 0 "CPU and GPU printed the same text"
    else
        record ch01-260K-same-text "differs" 0 "allowed after a near-tie; the cuda_forward tests check tokens up to it"
    fi
fi

# Six short requests. With stories260K (or its synthetic twin) and these
# budgets, chapter 3 moves regions and requeues requests, and chapter 4
# preempts and copies forked blocks on write (checked on the CPU).
SHORT_REQS=$WORK/short-requests.tsv
printf '%s\t%s\n' 24 'Once upon a time' 16 'The cat sat on the mat' 32 'Tom had a red ball' \
    20 'One day, a little bird' 28 'The sun was hot' 16 'Lily found a shiny stone' > "$SHORT_REQS"
CH03_SHORT=(--requests "$SHORT_REQS" --reserve grow --max-batch 4 --kv-budget 96KiB)
CH04_SHORT=(--requests "$SHORT_REQS" --block-size 8 --n 2 --temperature 0.8 --kv-budget 80KiB --watermark 0)
if [ -n "$EMULATED" ]; then
    MIXED=$SHORT_REQS MIXED_LABEL="six short requests (a dry run)"
else
    MIXED=data/requests-mixed.tsv MIXED_LABEL=data/requests-mixed.tsv
fi
run_step ch02-260K-cuda 60 chapter_note -- chapter_run ch02-260K-cuda ch02-kvcache ${M260K[@]+"${M260K[@]}"} \
    --steps $STEPS_LONG --kv-alloc grow --device cuda
run_step ch03-short-cuda 60 serving_note -- chapter_run ch03-short-cuda ch03-batching ${M260K[@]+"${M260K[@]}"} \
    "${CH03_SHORT[@]}" --device cuda
run_step ch04-short-cuda 60 serving_note -- chapter_run ch04-short-cuda ch04-paged ${M260K[@]+"${M260K[@]}"} \
    "${CH04_SHORT[@]}" --device cuda
mixed_ok=1
for ch in ch03-batching ch04-paged; do
    run_step "$ch-mixed-cuda" 90 serving_note -- chapter_run "$ch-mixed-cuda" $ch ${M260K[@]+"${M260K[@]}"} \
        --requests "$MIXED" --device cuda || mixed_ok=0
done

# A larger model, made here (synthetic weights of a real shape).
SYNTH=$WORK/models
mkdir -p "$SYNTH"
make_big_model() { "$BUILD/decode-bench" --write-model "$1" "$2/big.bin" "$2/big-tok.bin"; }
export -f make_big_model
if run_step "write-$BIG_PRESET" 60 last_line -- make_big_model "$BIG_PRESET" "$SYNTH"; then
    MBIG=(--model "$SYNTH/big.bin" --tokenizer "$SYNTH/big-tok.bin")
    run_step ch01-big-cpu 90 chapter_note -- chapter_run ch01-big-cpu ch01-naive "${MBIG[@]}" --steps $BIG_STEPS_CPU
    run_step ch01-big-cuda 90 chapter_note -- chapter_run ch01-big-cuda ch01-naive "${MBIG[@]}" \
        --steps $BIG_STEPS_GPU --device cuda
    run_step ch01-big-cuda-f16 90 chapter_note -- chapter_run ch01-big-cuda-f16 ch01-naive "${MBIG[@]}" \
        --steps $BIG_STEPS_GPU --device cuda --weight-dtype f16 --kv-dtype f16
fi

# chapters.md: chapter 1's speed on the CPU and the GPU, chapters 3 and 4
# side by side; from the JSON reports of the runs above.
json_value() { grep -m 1 "\"$2\":" "$1" 2> /dev/null | sed 's/.*: *//; s/,$//'; }
same_requests() { # requests whose tokens are the same in two --out files
    paste -d '\n' <(grep -o '"tokens":\[[^]]*\]' "$1") <(grep -o '"tokens":\[[^]]*\]' "$2") |
        awk 'NR % 2 { x = $0; next } $0 == x { n++ } END { print n + 0 }'
}
chapter1_row() { # label, model, device
    local j=$LOGS/$1.json
    [ -f "$j" ] || return 0
    printf '| %s | %s | %s | %.2f | %.0f |\n' "$2" "$3" "$(json_value "$j" tokens_generated)" \
        "$(json_value "$j" elapsed_s)" "$(json_value "$j" tokens_per_s)"
}
write_chapters_table() {
    local ch j
    echo "Chapters on $GPU"
    echo
    echo "Chapter 1 (the whole sequence recomputed every step), greedy:"
    echo
    echo "| model | device | tokens | seconds | tokens/s |"
    echo "|---|---|---|---|---|"
    chapter1_row ch01-260K-cpu "stories260K" "CPU"
    chapter1_row ch01-260K-cuda "stories260K" "GPU, f32"
    chapter1_row ch01-big-cpu "$BIG_PRESET-shaped" "CPU"
    chapter1_row ch01-big-cuda "$BIG_PRESET-shaped" "GPU, f32"
    chapter1_row ch01-big-cuda-f16 "$BIG_PRESET-shaped" "GPU, f16 weights and K/V"
    [ $mixed_ok -eq 1 ] || return 0
    echo
    echo "Chapters 3 and 4 on $MIXED_LABEL, default KV budget:"
    echo
    echo "| program | requests | at most running | steps | tokens/s | KV utilization (avg) | KV peak reserved (B) |"
    echo "|---|---|---|---|---|---|---|"
    for ch in ch03-batching ch04-paged; do
        j=$LOGS/$ch-mixed-cuda.json
        printf '| %s | %s | %s | %s | %.0f | %.1f%% | %s |\n' "$ch" "$(json_value "$j" requests_completed)" \
            "$(json_value "$j" max_concurrent)" "$(json_value "$j" steps)" "$(json_value "$j" tokens_per_s)" \
            "$(awk -v u="$(json_value "$j" kv_utilization_avg)" 'BEGIN { print 100 * u }')" \
            "$(json_value "$j" kv_peak_reserved_bytes)"
    done
    echo
    echo "Requests with the same tokens in both: $(same_requests "$LOGS/ch03-batching-mixed-cuda.jsonl" \
        "$LOGS/ch04-paged-mixed-cuda.jsonl") of $(grep -c . "$LOGS/ch04-paged-mixed-cuda.jsonl")" \
        "(the attention kernels differ, contiguous and paged: greedy tokens may part after a near-tie)."
}
write_chapters_table > "$WORK/chapters.md"
if [ $mixed_ok -eq 1 ]; then
    record ch04-vs-ch03-mixed "ok" 0 "$(awk -F' *[|] *' '/^[|] ch0/ { printf "%s: %s running at most, %s steps, %s tokens/s; ", $2, $4, $5, $6 }' \
        "$WORK/chapters.md")see chapters.md"
fi
publish

# ---------------------------------------------------------------------- 6. compute-sanitizer

# Last, because the numbers above matter more, and each limited to what is
# left before the deadline; a sanitizer that runs out of time is TIMEOUT,
# not a failure.
if [ -n "$SANITIZER" ]; then
    echo "- compute-sanitizer: $SANITIZER" >> "$SUMMARY"
    san() { "$SANITIZER" --tool "$1" --error-exitcode 3 "${@:2}"; }
    export SANITIZER
    export -f san
    run_step memcheck-ch01 60 sanitizer_note -- san memcheck "$BUILD/ch01-naive" ${M260K[@]+"${M260K[@]}"} \
        --device cuda --steps 8 --kv-dtype f16 --quiet
    run_step memcheck-ch02 60 sanitizer_note -- san memcheck "$BUILD/ch02-kvcache" ${M260K[@]+"${M260K[@]}"} \
        --device cuda --steps 40 --kv-alloc grow --kv-dtype f16 --quiet
    run_step memcheck-ch03 60 sanitizer_note -- san memcheck "$BUILD/ch03-batching" ${M260K[@]+"${M260K[@]}"} \
        --device cuda "${CH03_SHORT[@]}" --quiet
    run_step memcheck-ch04 60 sanitizer_note -- san memcheck "$BUILD/ch04-paged" ${M260K[@]+"${M260K[@]}"} \
        --device cuda "${CH04_SHORT[@]}" --quiet
    run_step memcheck-kernels 90 sanitizer_note -- san memcheck "$BUILD/kernel-check" --quick --no-time
    run_step racecheck-attention 60 sanitizer_note -- san racecheck "$BUILD/kernel-check" --quick --no-time \
        --kernel attention
    run_step racecheck-paged 60 sanitizer_note -- san racecheck "$BUILD/kernel-check" --quick --no-time \
        --kernel paged_attention
else
    record compute-sanitizer "skipped" 0 "no compute-sanitizer on PATH, in the toolkit or under /opt"
fi

exit 0 # the EXIT trap writes the result and publishes
