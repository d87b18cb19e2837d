#!/usr/bin/env bash
# scripts/gpu-check-bare.sh RESULTS_DIR: runs scripts/gpu-check.sh in its
# real (not emulated) mode on a machine without a GPU, as if on a bare
# CUDA image, to see that it builds and publishes there:
#
#   - Check and PCRE2 are hidden: their headers, static and development
#     libraries and pkg-config files vanish under overlay mounts in a
#     private mount namespace (nothing changes outside it, and nothing is
#     uninstalled), so gpu-check must use the .debs/ of
#     scripts/gpu-prepare.sh;
#   - nvcc is reached only through a symbolic link in a folder of its own,
#     with the toolkit's bin/ off PATH and CUDA_HOME unset;
#   - a stand-in nvidia-smi names an NVIDIA H200 (there is none: every
#     program that opens the device then fails, and says so).
#
# It checks first that the hiding worked (no pkg-config check or
# libpcre2-8, no pcre2.h or check.h for the compiler). Everything after the
# build fails on such a machine; what this shows is that the build
# succeeds and that the summary is published, within the deadline, or when
# stopped (run it under `timeout -s TERM 25`). The variables of
# gpu-check.sh pass through (GPU_CHECK_SECONDS, GPU_CHECK_LIMIT_build: a
# 2-core machine needs more than the GPU machine's 240 s for the build).
# Needs root (unshare, mount) and an overlay file system; not part of CI.
set -euo pipefail
if [ $# -ne 1 ]; then
    echo "usage: scripts/gpu-check-bare.sh RESULTS_DIR" >&2
    exit 1
fi
cd "$(dirname "$0")/.."
[ "$(id -u)" -eq 0 ] || { echo "gpu-check-bare: error: needs root (unshare -m, overlay mounts)" >&2; exit 1; }
ls .debs/*.deb > /dev/null 2>&1 || { echo "gpu-check-bare: error: no .debs/: run scripts/gpu-prepare.sh" >&2; exit 1; }
NVCC=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc) || { echo "gpu-check-bare: error: no nvcc" >&2; exit 1; }
mkdir -p "$1"
RESULTS=$(cd "$1" && pwd)
MULTIARCH=$(gcc -print-multiarch 2> /dev/null || echo x86_64-linux-gnu)
SCRATCH=$(mktemp -d "${TMPDIR:-/tmp}/kvlab-bare.XXXXXX")
trap 'rm -rf "$SCRATCH"' EXIT

# The stand-ins: nvidia-smi, and nvcc as a link.
mkdir -p "$SCRATCH/bin"
cat > "$SCRATCH/bin/nvidia-smi" << 'EOF'
#!/bin/sh
# A stand-in: this machine has no GPU.
case "$*" in
    *--query-gpu*) echo "NVIDIA H200, 143771 MiB, 580.159.04 (stand-in)" ;;
    *-L*) echo "GPU 0: NVIDIA H200 (stand-in)" ;;
    *) echo "a stand-in nvidia-smi (scripts/gpu-check-bare.sh): there is no GPU here" ;;
esac
EOF
chmod +x "$SCRATCH/bin/nvidia-smi"
ln -s "$NVCC" "$SCRATCH/bin/nvcc"

# What hides Check and PCRE2: names to white out under /usr/include and
# the library folder.
HIDE_INCLUDE="pcre2.h pcre2posix.h check.h check_stdint.h"
HIDE_LIB="libpcre2-8.so libpcre2-8.a libpcre2-16.so libpcre2-16.a libpcre2-32.so libpcre2-32.a
          libpcre2-posix.so libpcre2-posix.a libcheck.a libcheck_pic.a libcheck.so libsubunit.a libsubunit.so
          pkgconfig/check.pc pkgconfig/libpcre2-8.pc pkgconfig/libpcre2-16.pc pkgconfig/libpcre2-32.pc
          pkgconfig/libpcre2-posix.pc pkgconfig/libsubunit.pc"
PATH_BARE="$SCRATCH/bin:$(echo "$PATH" | tr ':' '\n' | grep -v -e cuda -e '^$' | paste -sd: -)"

export SCRATCH MULTIARCH HIDE_INCLUDE HIDE_LIB PATH_BARE RESULTS
exec unshare --mount --propagation private bash -c '
set -e
hide() { # folder, names: an overlay on the folder with a whiteout for each name
    local dir=$1 up=$SCRATCH/up$(echo "$1" | tr / _) work=$SCRATCH/work$(echo "$1" | tr / _)
    shift
    mkdir -p "$up" "$work"
    for name in "$@"; do
        mkdir -p "$up/$(dirname "$name")"
        mknod "$up/$name" c 0 0
    done
    mount -t overlay overlay -o "lowerdir=$dir,upperdir=$up,workdir=$work" "$dir"
}
hide /usr/include $HIDE_INCLUDE
hide /usr/lib/$MULTIARCH $HIDE_LIB
export PATH=$PATH_BARE
unset CUDA_HOME
! pkg-config --exists check 2> /dev/null || { echo "gpu-check-bare: Check is still visible" >&2; exit 1; }
! pkg-config --exists libpcre2-8 2> /dev/null || { echo "gpu-check-bare: PCRE2 is still visible" >&2; exit 1; }
for h in pcre2.h check.h; do
    ! echo "#include <$h>" | gcc -E -x c - > /dev/null 2>&1 || { echo "gpu-check-bare: $h is still visible" >&2; exit 1; }
done
echo "gpu-check-bare: Check and PCRE2 hidden; nvcc: $(command -v nvcc) -> $(readlink -f "$(command -v nvcc)"); nvidia-smi: $(command -v nvidia-smi)"
exec scripts/gpu-check.sh "$RESULTS"
'
