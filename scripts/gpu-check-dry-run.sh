#!/usr/bin/env bash
# scripts/gpu-check-dry-run.sh EMU_BUILD MAKE_VARIABLES...: runs
# scripts/gpu-check.sh with the CPU emulator standing in for the GPU (the
# build folder and make variables of scripts/emu-check.sh, which calls
# this), and checks what it leaves for the GPU machine to return:
#
#   1. a whole run, small sizes, with one step that must time out: exit
#      status 3 (nothing failed, something timed out), that step reported
#      TIMEOUT, the steps after it run, no FAIL; kernels.md joined from
#      kernel-check's four parts (paged v3 among them, the per-version
#      paged/contiguous ratios, how it timed), decode.md with chapter 3's
#      contiguous and chapter 4's paged store;
#   2. a run stopped by a signal after 25 s (as the device tool's time
#      limit would): the EXIT trap still publishes the summary, and the
#      kernel rows written before it was stopped.
#
# Each time the results folder must hold at most 8 files, at most 2
# folders down, each under 16 MiB, named in letters, digits, '.', '_' and
# '-' (what the GPU machine returns), among them summary.md, and after the
# whole run the three tables and logs.tar.gz.
set -euo pipefail
cd "$(dirname "$0")/.."
EMU_BUILD=$1
shift
OUT=$EMU_BUILD/gpu-check-dry
STOPPED_OUT=$EMU_BUILD/gpu-check-stopped

fail() {
    echo "gpu-check dry run: FAIL: $*" >&2
    exit 1
}

# What the GPU machine would return from RESULTS_DIR: checked, then listed.
check_returnable() {
    local dir=$1 n
    n=$(find "$dir" -type f | wc -l)
    [ "$n" -le 8 ] || fail "$dir holds $n files; the GPU machine returns 8"
    [ -z "$(find "$dir" -mindepth 3 -type f)" ] || fail "$dir has files more than 2 folders down"
    [ -z "$(find "$dir" -type f -size +16M)" ] || fail "$dir has a file over 16 MiB"
    [ -z "$(find "$dir" -mindepth 1 -name '*[^A-Za-z0-9._-]*')" ] || fail "$dir has a name with other characters"
    [ -s "$dir/summary.md" ] || fail "no summary.md in $dir"
    echo "gpu-check dry run: $dir holds $n files:"
    (cd "$dir" && find . -type f -printf '  %P (%s bytes)\n' | sort)
}

export GPU_CHECK_EMULATED=1 GPU_CHECK_BUILD=$EMU_BUILD GPU_CHECK_MAKE="$*"
export GPU_CHECK_SUITES=cuda_kernels GPU_CHECK_PROBE_TIMEOUT=1

# ------------------------------------------------------------ 1. a whole run
rm -rf "$OUT"
rc=0
GPU_CHECK_SECONDS=400 scripts/gpu-check.sh "$OUT" > "$EMU_BUILD/gpu-check-dry.log" 2>&1 || rc=$?
grep '^gpu-check:' "$EMU_BUILD/gpu-check-dry.log" || true
[ "$rc" -eq 3 ] || fail "exit status $rc, not 3 (one step timed out, none failed); see $EMU_BUILD/gpu-check-dry.log"
check_returnable "$OUT"
for f in kernels.md decode.md chapters.md logs.tar.gz gpu-check.log; do
    [ -s "$OUT/$f" ] || fail "no $f in $OUT"
done
grep -q '^| timeout-probe | TIMEOUT' "$OUT/summary.md" || fail "the timeout probe is not reported as TIMEOUT"
! grep -q '| FAIL' "$OUT/summary.md" || fail "a step failed: $(grep '| FAIL' "$OUT/summary.md")"
grep -q '^Result: INCOMPLETE' "$OUT/summary.md" || fail "summary.md does not end with the INCOMPLETE result"
grep -q '^| racecheck-paged | ok' "$OUT/summary.md" || fail "the last step did not run after the timeout"
grep -q '^| ch04-paged | ' "$OUT/chapters.md" || fail "chapters.md has no chapter 4 row"
grep -q '^| stories260K | GPU' "$OUT/chapters.md" || fail "chapters.md has no chapter 1 GPU row"
[ "$(grep -c '^| stories260K |' "$OUT/decode.md")" -eq 7 ] || fail "decode.md does not have 7 rows"
grep -q '^| stories260K | f32 | f32 | paged, blocks of 16 (PagedAttention v3 ' "$OUT/decode.md" ||
    fail "decode.md has no row of chapter 4's paged store with PagedAttention v3"
grep -q '^| stories260K | f32 | f32 | contiguous (attention v3 ' "$OUT/decode.md" ||
    fail "decode.md has no row of the contiguous store"
for part in paged attention elementwise matmul; do # kernel-check in four parts, one table
    grep -q "^| kernels-$part | ok" "$OUT/summary.md" || fail "kernel-check's $part part did not pass"
done
for k in paged_attention attention rmsnorm block_copy matmul; do
    grep -q "^| $k | " "$OUT/kernels.md" || fail "kernels.md has no $k row"
done
grep -q '^| paged_attention | .* | v3 gqa-tiles | .* | ok | ' "$OUT/kernels.md" || fail "kernels.md has no passing paged v3"
grep -q '^| paged/contiguous | .* | paged v2 / contig. v4 (split) |' "$OUT/kernels.md" ||
    fail "kernels.md has no split-against-split ratio"
grep -q '^Timing: median of 1 call, each alone after ' "$OUT/kernels.md" || fail "kernels.md does not say how it timed"
listing=$(tar -tzf "$OUT/logs.tar.gz")
grep -qx 'logs/suite-cuda_kernels.log' <<< "$listing" || fail "logs.tar.gz has no logs/suite-cuda_kernels.log"

# ------------------------------------------------------------ 2. stopped
rm -rf "$STOPPED_OUT"
rc=0
timeout -s TERM 25 scripts/gpu-check.sh "$STOPPED_OUT" > "$EMU_BUILD/gpu-check-stopped.log" 2>&1 || rc=$?
[ "$rc" -eq 124 ] || fail "the stopped run ended with $rc, not 124 (stopped by timeout)"
check_returnable "$STOPPED_OUT"
grep -q '^Result: STOPPED' "$STOPPED_OUT/summary.md" || fail "the stopped run's summary does not say it was stopped"
grep -q '| STOPPED |' "$STOPPED_OUT/summary.md" || fail "the step that was running is not reported STOPPED"
grep -q '^| paged_attention | ' "$STOPPED_OUT/kernels.md" ||
    fail "the stopped run did not return the kernel rows written before it was stopped"
echo "gpu-check dry run: passed (a whole run with a timeout, and a run stopped after 25 s)"
