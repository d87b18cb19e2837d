#!/usr/bin/env bash
# scripts/gpu-prepare.sh: prepares the first GPU run, on a machine with apt
# (the GPU machine has no network). From the checkout's root:
#
#   - downloads, as Debian packages into .debs/ (apt-get download), every
#     library the build needs that a bare CUDA image may lack: the Check
#     test library (check, libsubunit-dev, libsubunit0: the test suites)
#     and PCRE2 (libpcre2-dev: the GPT-2 pre-tokenizer in every program).
#     scripts/gpu-check.sh unpacks them there and links them statically
#     when the machine has none of its own (no dynamic library to carry);
#   - says which C library the static archives need at the least (the
#     newest glibc symbol version their objects reference), so that a GPU
#     image too old for them is known before the run;
#   - copies stories260K and its tokenizer from ../shared/models into
#     .gpu-shared/models/ (../shared does not travel to the GPU machine;
#     without them the GPU tests use a synthetic model of the same shape);
#   - prints the list to give the device tool as `carry` (both folders are
#     git-ignored, so they travel only when named), and the command to run.
#
# Nothing is installed. Run it again to refresh the packages.
set -euo pipefail
cd "$(dirname "$0")/.."

CHECK_PACKAGES=(check libsubunit-dev libsubunit0)
PCRE2_PACKAGES=(libpcre2-dev)
CARRY=()

fail() {
    echo "gpu-prepare: error: $*" >&2
    exit 1
}

command -v apt-get > /dev/null || fail "no apt-get on this machine"
rm -rf .debs
mkdir -p .debs
# (As root, apt-get warns that it downloads unsandboxed: harmless, not shown.)
if ! apt_log=$(cd .debs && apt-get download "${CHECK_PACKAGES[@]}" "${PCRE2_PACKAGES[@]}" 2>&1); then
    echo "$apt_log" >&2
    fail "apt-get download ${CHECK_PACKAGES[*]} ${PCRE2_PACKAGES[*]} failed (try: apt-get update)"
fi
for deb in .debs/*.deb; do
    dpkg-deb --info "$deb" > /dev/null || fail "$deb is not a Debian package"
done
# What gpu-check.sh links: each archive must be in its package.
needs=("check_*.deb:libcheck_pic.a" "libsubunit-dev_*.deb:libsubunit.a" "libpcre2-dev_*.deb:libpcre2-8.a"
       "libpcre2-dev_*.deb:pcre2.h")
for need in "${needs[@]}"; do
    deb=$(ls .debs/${need%%:*} 2> /dev/null | head -n 1)
    [ -n "$deb" ] || fail "no ${need%%:*} in .debs/"
    contents=$(dpkg-deb --contents "$deb")
    grep -q "/${need#*:}\$" <<< "$contents" || fail "$deb has no ${need#*:}"
done
echo "gpu-prepare: .debs/: $(cd .debs && ls | tr '\n' ' ')($(du -sh .debs | cut -f1))"

# The newest glibc symbol version the static archives reference: their
# undefined symbols resolve against the GPU machine's C library, which must
# be at least that. Read from this machine's libc, which they were built
# against (a Debian package of this release).
unpacked=$(mktemp -d)
trap 'rm -rf "$unpacked"' EXIT
for deb in .debs/*.deb; do dpkg-deb -x "$deb" "$unpacked"; done
libc=$(ldconfig -p 2> /dev/null | awk '$1 == "libc.so.6" { print $NF; exit }')
if [ -n "$libc" ] && command -v nm > /dev/null && command -v objdump > /dev/null; then
    undefined=$(find "$unpacked" -name 'libcheck_pic.a' -o -name 'libsubunit.a' -o -name 'libpcre2-8.a' |
        xargs nm -u 2> /dev/null | awk 'NF >= 2 { print $NF }' | sort -u)
    exported=$(objdump -T "$libc" | awk '$NF ~ /^[A-Za-z_]/ { print $(NF-1), $NF }')
    newest=$(awk 'NR == FNR { need[$1] = 1; next } ($2 in need) { print $1 }' <(echo "$undefined") \
        <(echo "$exported") | grep -o 'GLIBC_[0-9.]*' | sort -V | tail -n 1)
    echo "gpu-prepare: the static archives need ${newest:-no versioned} glibc symbols at the most (this machine: $(ldd --version 2> /dev/null | head -n 1 | grep -o '[0-9.]*$'))"
fi
CARRY+=(.debs)

MODEL_FILES=(stories260K.bin tok512.bin)
if [ -f ../shared/models/stories260K.bin ] && [ -f ../shared/models/tok512.bin ]; then
    rm -rf .gpu-shared
    mkdir -p .gpu-shared/models
    for f in "${MODEL_FILES[@]}"; do cp ../shared/models/"$f" .gpu-shared/models/; done
    echo "gpu-prepare: .gpu-shared/models/: ${MODEL_FILES[*]} ($(du -sh .gpu-shared | cut -f1))"
    CARRY+=(.gpu-shared)
else
    echo "gpu-prepare: no ../shared/models/stories260K.bin: the GPU run will use synthetic models"
fi

for path in "${CARRY[@]}"; do
    git check-ignore -q "$path" ||
        echo "gpu-prepare: warning: $path is not git-ignored; it would travel anyway, but should not be committed" >&2
done

carry=$(printf '"%s", ' "${CARRY[@]}")
echo "gpu-prepare: carry: [${carry%, }]"
echo "gpu-prepare: then run, on the GPU machine (timeout_s 560):  scripts/gpu-check.sh \"\$OUT\""
