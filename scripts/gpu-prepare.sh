#!/usr/bin/env bash
# scripts/gpu-prepare.sh: prepares the first GPU run, on a machine with apt
# (the GPU machine has no network). From the checkout's root:
#
#   - downloads the Check test library and what it needs (check,
#     libsubunit-dev, libsubunit0) as Debian packages into .debs/ with
#     apt-get download; scripts/gpu-check.sh unpacks them there when
#     pkg-config finds no Check;
#   - copies stories260K and its tokenizer from ../shared/models into
#     .gpu-shared/models/ (../shared does not travel to the GPU machine;
#     without them the GPU tests use a synthetic model of the same shape);
#   - prints the list to give the device tool as `carry` (both folders are
#     git-ignored, so they travel only when named), and the command to run.
#
# Nothing is installed. Run it again to refresh the packages.
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(check libsubunit-dev libsubunit0)
CARRY=()

command -v apt-get > /dev/null || { echo "gpu-prepare: error: no apt-get on this machine" >&2; exit 1; }
rm -rf .debs
mkdir -p .debs
# (As root, apt-get warns that it downloads unsandboxed: harmless, not shown.)
if ! apt_log=$(cd .debs && apt-get download "${PACKAGES[@]}" 2>&1); then
    echo "$apt_log" >&2
    echo "gpu-prepare: error: apt-get download ${PACKAGES[*]} failed (try: apt-get update)" >&2
    exit 1
fi
for deb in .debs/*.deb; do
    dpkg-deb --info "$deb" > /dev/null || { echo "gpu-prepare: error: $deb is not a Debian package" >&2; exit 1; }
done
contents=$(dpkg-deb --contents .debs/check_*.deb)
grep -q 'libcheck_pic\.a' <<< "$contents" ||
    { echo "gpu-prepare: error: the check package has no libcheck_pic.a" >&2; exit 1; }
echo "gpu-prepare: .debs/: $(cd .debs && ls | tr '\n' ' ')($(du -sh .debs | cut -f1))"
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
