#!/usr/bin/env bash
# scripts/emu-check.sh (make emu-check): the CUDA path run on the CPU, with
# the emulator in ../shared/tools/cuda-emu standing in for the GPU (see its
# README: one fiber per GPU thread, real barriers and warp shuffles, a fake
# CUDA runtime that checks launches, copies and graph captures, a fake
# cuBLAS that checks leading dimensions and workspaces).
#
#   1. builds the emulator's runtime into $EMU_BUILD/cuda-emu (never beside
#      the emulator: ../shared is read-only in CI);
#   2. builds kvlab against it into $EMU_BUILD (CUDA forced on, kernels
#      through scripts/emu-nvcc.sh);
#   3. build/emu/kernel-check --quick --no-time: every version of every
#      kernel on the small shapes, paged attention v3 against chapter 4's
#      CPU PagedAttention among them (EMU_FULL=1: every case, the full
#      shapes too: many minutes on 2 cores);
#   4. the GPU test suites (cuda_kernels cuda_forward cuda_chapters
#      serving_device device_cli); a GPU test that skips for want of a
#      device fails here, since the emulator is one; then device_cli again
#      with the emulator reporting no device;
#   5. scripts/gpu-check.sh, the script of the first GPU run, as a dry run
#      with the emulator as its device: small sizes, one step forced to
#      time out, then once stopped after 25 s; it must leave at most 8
#      files, the summary and the tables (scripts/gpu-check-dry-run.sh).
#
# A pass is necessary, not sufficient: timing, races hidden by the fixed
# order of the fibers, misaligned loads and tensor-core rounding are not
# emulated (book/appendix-kernels.md). SKIP when the emulator or the CUDA
# headers are absent. Variables: EMU_DIR, EMU_BUILD (build/emu), JOBS,
# CUDA_HOME (/usr/local/cuda), EMU_FULL, EMU_BUILD_ONLY=1 (stop after step
# 2: programs to run or step through with gdb).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
EMU_DIR=${EMU_DIR:-../shared/tools/cuda-emu}
EMU_BUILD=${EMU_BUILD:-build/emu}
JOBS=${JOBS:-2}
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
START=$(date +%s)

if [ ! -x "$EMU_DIR/build.sh" ]; then
    echo "emu-check: SKIP: no CPU emulator in $EMU_DIR (it comes with ../shared)"
    exit 0
fi
if [ ! -f "$CUDA_HOME/include/cuda_runtime_api.h" ]; then
    echo "emu-check: SKIP: no CUDA headers in $CUDA_HOME/include (the emulator compiles the kernels against them)"
    exit 0
fi
# The emulator rewrites the launch syntax with a Python script and compiles with g++.
scripts/deps.sh python3 g++

step_start=0
begin() { step_start=$(date +%s); echo "emu-check: $1"; }
done_step() { echo "emu-check: $1 ($(($(date +%s) - step_start)) s)"; }

# ------------------------------------------------------------ the runtime
RT=$ROOT/$EMU_BUILD/cuda-emu
begin "building the emulator's runtime into $RT"
if [ ! -f "$RT/lib64/libcudart_static.a" ] || [ -n "$(find "$EMU_DIR/" -type f -newer "$RT/lib64/libcudart_static.a")" ]; then
    CUDA_HOME=$CUDA_HOME "$EMU_DIR/build.sh" "$RT" > /dev/null
fi
done_step "runtime ready"

# ------------------------------------------------------------ kvlab on it
# -rdynamic: the fake libcublas.so, loaded with dlopen, calls back into the
# emulated runtime linked into each program.
export EMU_NVCC=$RT/bin/nvcc EMU_TMP=$ROOT/$EMU_BUILD/tmp
EMU_MAKE=(BUILD="$EMU_BUILD" CUDA_BUILD="$EMU_BUILD/cuda" CUDA=1 CUDA_ARCHS=90 NVCC="$ROOT/scripts/emu-nvcc.sh"
          CUDA_HOME="$CUDA_HOME" CUDA_LIBDIR="$RT/lib64" LDLIBS=-rdynamic)
begin "building kvlab against the emulator into $EMU_BUILD/"
make --no-print-directory -j"$JOBS" "${EMU_MAKE[@]}" all "$EMU_BUILD/test-kvlab"
done_step "built"
if [ -n "${EMU_BUILD_ONLY:-}" ]; then
    echo "emu-check: built only (EMU_BUILD_ONLY): the programs in $EMU_BUILD/ run on the emulator, e.g."
    echo "  gdb --args $EMU_BUILD/kernel-check --quick --no-time --kernel rmsnorm"
    exit 0
fi

# ------------------------------------------------------------ the kernels
if [ -n "${EMU_FULL:-}" ]; then kc_args=(--no-time); else kc_args=(--quick --no-time); fi
begin "$EMU_BUILD/kernel-check ${kc_args[*]}"
KC_LOG=$EMU_BUILD/kernel-check.log
if ! "$EMU_BUILD/kernel-check" "${kc_args[@]}" > "$KC_LOG" 2>&1; then
    grep -E 'FAIL|error' "$KC_LOG" | head -n 20 >&2 || true
    tail -n 3 "$KC_LOG" >&2
    echo "emu-check: kernel-check failed under the emulator (whole log: $KC_LOG)" >&2
    exit 1
fi
tail -n 1 "$KC_LOG"
done_step "kernel-check passed"

# ------------------------------------------------------------ the GPU suites
SUITES=(cuda_kernels cuda_forward cuda_chapters serving_device device_cli)
SUITES_LOG=$EMU_BUILD/gpu-suites.log
begin "the GPU test suites: ${SUITES[*]}"
if ! KVLAB_BUILD=$EMU_BUILD "$EMU_BUILD/test-kvlab" "${SUITES[@]}" 2>&1 | tee "$SUITES_LOG"; then
    echo "emu-check: the GPU suites failed under the emulator" >&2
    exit 1
fi
if grep -q 'no CUDA device' "$SUITES_LOG"; then
    echo "emu-check: a GPU test skipped for want of a device, but the emulator is one (see $SUITES_LOG)" >&2
    exit 1
fi
echo "emu-check: and with the emulator reporting no device (EMU_NO_DEVICE=1):"
EMU_NO_DEVICE=1 KVLAB_BUILD=$EMU_BUILD "$EMU_BUILD/test-kvlab" device_cli
done_step "the GPU suites passed"

# ------------------------------------------------------------ gpu-check.sh, dry
begin "scripts/gpu-check.sh as a dry run, the emulator as its device"
scripts/gpu-check-dry-run.sh "$EMU_BUILD" "${EMU_MAKE[@]}"
done_step "the dry run left what the GPU machine can return"

echo "emu-check: passed in $(($(date +%s) - START)) s"
