#!/bin/sh
# make handout: what an instructor hands out. Writes DIR/kvlab-handout/ and
# DIR/kvlab-handout.tar.gz (DIR: dist/ by default, or the first argument):
# the project as this working tree has it (the files git tracks, and new
# ones it does not ignore), without what holds the answers:
#
#   solutions/         the answers (exercises/ has the same files, cut out)
#   tests/mutants/     wrong answers, written as edits of the right ones
#   tests/lab/hidden/  an instructor's hidden lab tests, if any
#   .ci/, scripts/make-handout.sh, scripts/check-handout.sh,
#   scripts/check-mutants.sh   the maintainers' checks, which need solutions/
#
# Then it checks that no line of any answer is left anywhere in it
# (scripts/check-handout.sh --leaks).
set -eu
cd "$(dirname "$0")/.."
out=${1:-dist}
name=kvlab-handout
dest=$out/$name

if [ ! -d solutions ]; then
    echo "make handout: there is no solutions/ here (is this a handout already?)" >&2
    exit 1
fi
# The exercises must be what the solutions make, or the handout would
# hand out stale stubs.
scripts/make-exercises.sh --check >/dev/null || {
    echo "make handout: exercises/ is out of date; run make exercises first" >&2
    exit 1
}
rm -rf "$dest" "$out/$name.tar.gz"
mkdir -p "$dest"
git ls-files --cached --others --exclude-standard |
    grep -v -e '^solutions/' -e '^tests/mutants/' -e '^tests/lab/hidden/' -e '^\.ci/' -e '^dist/' \
        -e '^scripts/make-handout\.sh$' -e '^scripts/check-handout\.sh$' -e '^scripts/check-mutants\.sh$' |
    while IFS= read -r f; do
        [ -f "$f" ] || continue # deleted in the working tree
        mkdir -p "$dest/$(dirname "$f")"
        cp -p "$f" "$dest/$f"
    done
scripts/check-handout.sh --leaks "$dest"
tar -czf "$out/$name.tar.gz" -C "$out" "$name"
echo "make handout: $dest/ and $out/$name.tar.gz ($(find "$dest" -type f | wc -l) files, no solutions/)"
