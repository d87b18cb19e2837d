#!/usr/bin/env bash
# scripts/emu-nvcc.sh: the nvcc of `make emu-check` (scripts/emu-check.sh
# passes it as NVCC). It runs the CPU emulator's stand-in for nvcc
# ($EMU_NVCC, the emulator's bin/nvcc), which rewrites a .cu file and the
# headers beside it into a scratch folder and compiles them with g++, and
# then fixes the dependency file that compilation wrote: it names the
# scratch copies, which are gone by then, so the next make would stop at
# "No rule to make target". Scratch files go to $EMU_TMP (under build/)
# instead of /tmp. And it puts the rewritten copies back where the debug
# information says they are, so that gdb shows the source of a kernel it
# stops in (book/appendix-kernels.md: stepping through a kernel).
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
kept=${out%.o}.gen # names the folder of the copies kept for gdb
[ -f "$kept" ] && rm -rf "$(cat "$kept")" "$kept"
TMPDIR=$EMU_TMP "$EMU_NVCC" "${args[@]}" || exit
dep=${out%.o}.d
if [ -n "$src" ] && [ -f "$dep" ]; then
    name=$(basename "$src" .cu)
    gen=$(grep -o "$EMU_TMP/kvlab-emu-gen/[^/ ]*/$name\.cpp" "$dep" | head -n 1)
    sed -i -e "s#$EMU_TMP/kvlab-emu-gen/[^/ ]*/$name\.cpp#$src#g" \
        -e "s#$EMU_TMP/kvlab-emu-gen/[^/ ]*/#$(dirname "$src")/#g" "$dep"
    if [ -n "$gen" ]; then # the copies the debug information names, made again by the emulator's own rewrite
        transform=$(dirname "$(readlink -f "$EMU_NVCC")")/../transform.py
        dir=$(dirname "$gen")
        mkdir -p "$dir" && echo "$dir" > "$kept"
        for f in "$(dirname "$src")"/*.cuh "$(dirname "$src")"/*.h; do
            [ -e "$f" ] && python3 "$transform" "$f" > "$dir/$(basename "$f")"
        done
        python3 "$transform" "$src" > "$gen"
    fi
fi
