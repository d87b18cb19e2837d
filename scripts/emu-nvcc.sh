#!/usr/bin/env bash
# scripts/emu-nvcc.sh: the nvcc of `make emu-check` (scripts/emu-check.sh
# passes it as NVCC). It runs the CPU emulator's stand-in for nvcc
# ($EMU_NVCC, the emulator's bin/nvcc), which rewrites a .cu file and the
# headers beside it into a scratch folder and compiles them with g++, and
# then fixes the dependency file that compilation wrote: it names the
# scratch copies, which are gone by then, so the next make would stop at
# "No rule to make target". Scratch files go to $EMU_TMP (under build/)
# instead of /tmp.
set -u
: "${EMU_NVCC:?EMU_NVCC must name the nvcc of the emulator}" "${EMU_TMP:?EMU_TMP must name a scratch folder}"
if [ "${1:-}" = --version ]; then
    exec "$EMU_NVCC" --version
fi
args=("$@")
src= out=
while [ $# -gt 0 ]; do
    case $1 in
        -c) src=$2; shift 2 ;;
        -o) out=$2; shift 2 ;;
        *) shift ;;
    esac
done
mkdir -p "$EMU_TMP" || exit 1
TMPDIR=$EMU_TMP "$EMU_NVCC" "${args[@]}" || exit
dep=${out%.o}.d
if [ -n "$src" ] && [ -f "$dep" ]; then
    gen="$EMU_TMP/kvlab-emu-gen/[^/ ]*"
    sed -i -e "s#$gen/$(basename "$src" .cu)\.cpp#$src#g" -e "s#$gen/#$(dirname "$src")/#g" "$dep"
fi
