#!/bin/sh
# make handout: what an instructor hands out. Writes DIR/kvlab-handout/ and
# DIR/kvlab-handout.tar.gz (DIR: dist/ by default, or the first argument):
# the project as this working tree has it (the files git tracks, and new
# ones it does not ignore), without what holds the answers or is the
# maintainers' only:
#
#   solutions/         the answers (exercises/ has the same files, cut out)
#   tests/mutants/     wrong answers, written as edits of the right ones
#   tests/lab/hidden/  an instructor's hidden lab tests, if any
#   .ci/, scripts/make-handout.sh, scripts/check-handout.sh,
#   scripts/check-mutants.sh, scripts/near-copies.c   the maintainers'
#                      checks, which need solutions/
#   book/instructors.md, CONTRIBUTING.md, README.md   for instructors and
#                      maintainers; the handout's README.md is
#                      scripts/handout/README.md, written for students
#
# and written for students: in the book's pages, what lies between the
# lines "<!-- maintainers -->" and "<!-- /maintainers -->" is left out, and
# in every page and source file "solutions/chNN/" reads "exercises/chNN/"
# (and so do solutions/cuda/ and solutions/bughunt/)
# (the function a student writes is in that file of theirs). Then it
# checks that no answer is left anywhere in it, as a line or as a function
# rewritten (scripts/check-handout.sh --leaks), and that no page or source
# file names solutions/.
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
        -e '^scripts/make-handout\.sh$' -e '^scripts/check-handout\.sh$' -e '^scripts/check-mutants\.sh$' \
        -e '^scripts/near-copies\.c$' -e '^scripts/handout/' -e '^book/instructors\.md$' \
        -e '^CONTRIBUTING\.md$' -e '^README\.md$' |
    while IFS= read -r f; do
        [ -f "$f" ] || continue # deleted in the working tree
        mkdir -p "$dest/$(dirname "$f")"
        cp -p "$f" "$dest/$f"
    done
cp scripts/handout/README.md "$dest/README.md"
# For students: the maintainers' passages out of the book, the answers'
# folder named as theirs everywhere.
find "$dest" -type f \( -name '*.md' -o -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) -print |
    while IFS= read -r f; do
        awk '/^<!-- maintainers -->$/ { skip = 1; next } /^<!-- \/maintainers -->$/ { skip = 0; next } !skip' "$f" |
            sed -e 's|solutions/\(ch[0-9][0-9]\)/|exercises/\1/|g' -e 's#solutions/\(cuda\|bughunt\)/#exercises/\1/#g' >"$f.tmp"
        touch -r "$f" "$f.tmp"
        mv "$f.tmp" "$f"
    done
named=$(cd "$dest" && grep -rln 'solutions/' README.md book chapters common tools tests kernels exercises 2>/dev/null || true)
if [ -n "$named" ]; then
    echo "make handout: these files still name solutions/ (rephrase, or wrap a book passage in <!-- maintainers -->):" >&2
    (cd "$dest" && grep -rn 'solutions/' $named) >&2
    exit 1
fi
scripts/check-handout.sh --leaks "$dest"
tar -czf "$out/$name.tar.gz" -C "$out" "$name"
echo "make handout: $dest/ and $out/$name.tar.gz ($(find "$dest" -type f | wc -l) files, no solutions/)"
