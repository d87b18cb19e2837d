#!/bin/sh
# Checks of the handout (make check-handout).
#
#   scripts/check-handout.sh --leaks DIR   no answer in DIR: no line of one,
#                                          and no function that is one rewritten
#   scripts/check-handout.sh               make a handout in a scratch
#                                          folder and check it end to end
#
# The leak check has two parts. The near-copy check (scripts/near-copies.c,
# compiled here with cc) compares every function of DIR's C files with
# every answer, tokens normalised (identifiers renamed, comments and layout
# gone), and fails on any function 0.80 or more similar to one (the file
# says how similarity is measured); it first checks itself on a fixture
# that must fail (tests/mutants/near-copies/: chapter 5's radix tree as it
# was, its release, take and match the lab's answers renamed).
#
# The exact-line check: every line of every LAB region's solution (between LAB
# BEGIN and LAB STUB in solutions/), compared with comments and spacing
# taken away, must appear nowhere in the handout: not in the book, the
# exercises, the lab tests, the README. Two kinds of lines are left out as
# telling nothing: lines shorter than 16 characters (`return 0;`, `}`),
# and lines that the project's own code has anyway, outside the answers
# and the graded tests (common/, kernels/, chapters/, tools/, tests/ but
# tests/lab/): a solution that calls softmax(scores, n_pos) as
# attention_reference() does, or serving_admit(run, r) as chapter 4 does,
# gives nothing away; and lines that a region's stub has (the stub is in
# the handout by design: an answer that zeroes its output before it
# accumulates, as the stub zeroes it, gives nothing away either). The
# second kind is listed, for a reader to judge.
#
# The end-to-end check: the archive unpacked alone in an empty folder (no
# ../shared beside it), a git checkout of its own; there `make` builds;
# `make test` passes (the suites that need finished labs say SKIP); `make
# help` lists no maintainers' command; `make demo` says which labs it
# needs; `make lab CH=n` on the untouched exercises scores 0 for every
# chapter and writes build/lab/chNN/results.json (score 0, a visibility per
# test); a lab file that does not compile makes results.json say 0 and
# why; with every solutions/chNN/*.c copied into exercises/chNN/ (and the
# fixed bug hunts, and the CUDA lab's kernel: run on the CPU emulator of
# EMU_DIR, which a student gets beside the handout) every lab scores full
# marks.
set -eu
cd "$(dirname "$0")/.."

# One normalized line per answer line: TEXT<TAB>REGION<TAB>FILE:LINE.
NORMALIZE='
function norm(s) {
    gsub(/\/\*[^*]*\*\//, "", s)
    sub(/\/\/.*$/, "", s)
    gsub(/[ \t\r]+/, " ", s)
    sub(/^ /, "", s)
    sub(/ $/, "", s)
    return s
}'

# One normalized line per stub line (between LAB STUB and LAB END, with the
# comment marker taken off): what the exercises hand out anyway.
# A bug hunt hands out its planted lines (between BUG PLANTED and BUG END)
# the same way, and the whole component outside the fix: a line of the fix
# that the component has elsewhere (a call it makes anyway) tells nothing.
stub_lines() {
    for f in solutions/ch[0-9][0-9]/*.c solutions/cuda/*.cu solutions/bughunt/*/*.c; do
        [ -f "$f" ] || continue
        awk -v bughunt="$(case $f in solutions/bughunt/*) echo 1 ;; *) echo 0 ;; esac)" "$NORMALIZE"'
            /^[ \t]*\/\/ BUG BEGIN\(/ { fix = 1; next }
            /^[ \t]*\/\/ (LAB STUB:|BUG PLANTED:)/ { stub = 1; fix = 0; next }
            /^[ \t]*\/\/ (LAB|BUG) END/ { stub = 0; next }
            stub { line = $0; sub(/^[ \t]*\/\/ ?/, "", line); print norm(line); next }
            bughunt && !fix { print norm($0) }
        ' "$f"
    done
}

# A bug hunt's fix (between BUG BEGIN and BUG PLANTED) is an answer too.
answer_lines() {
    for f in solutions/ch[0-9][0-9]/*.c solutions/cuda/*.cu solutions/bughunt/*/*.c; do
        [ -f "$f" ] || continue
        awk "$NORMALIZE"'
            /^[ \t]*\/\/ (LAB|BUG) BEGIN\(/ { region = $0; sub(/^.*BEGIN\(/, "", region); sub(/\).*$/, "", region); inside = 1; next }
            /^[ \t]*\/\/ (LAB STUB:|BUG PLANTED:)/ { inside = 0; next }
            inside { t = norm($0); if (length(t) >= 16) printf "%s\t%s\t%s:%d\n", t, region, FILENAME, FNR }
        ' "$f"
    done
}

# The near-copy check on DIR's C files, after its self-test.
near_copies() {
    dir=$1 tmp=$2
    ${CC:-cc} -O2 -std=c11 -o "$tmp/near-copies" scripts/near-copies.c || {
        echo "check-handout: scripts/near-copies.c does not build" >&2; return 1; }
    "$tmp/near-copies" --show 0 --expect-flagged radix_release,radix_take,radix_match solutions \
        tests/mutants/near-copies/radix_tree-before-27.c >"$tmp/self-test" 2>&1 || {
        cat "$tmp/self-test" >&2; echo "check-handout: the near-copy check does not catch its fixture" >&2; return 1; }
    find "$dir" -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) -print | sort >"$tmp/c-files"
    # shellcheck disable=SC2046
    (cd "$dir" && "$tmp/near-copies" --show 5 "$OLDPWD/solutions" $(sed "s|^$dir/||" "$tmp/c-files")) ||
        { echo "check-handout: near-copies of answers in $dir (above)" >&2; return 1; }
}

leaks() {
    dir=$1
    tmp=$(mktemp -d "${TMPDIR:-/tmp}/kvlab-leaks.XXXXXX")
    near_copies "$dir" "$tmp" || { rm -rf "$tmp"; exit 1; }
    answer_lines >"$tmp/answers"
    [ -s "$tmp/answers" ] || { echo "check-handout: no LAB region found in solutions/" >&2; rm -rf "$tmp"; exit 1; }
    # Lines of the project's own code, outside the answers and the graded tests.
    find common kernels chapters tools tests -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) \
        ! -path 'tests/lab/*' ! -path 'tests/mutants/*' -print |
        xargs awk "$NORMALIZE"'{ print norm($0) }' >"$tmp/given.code"
    stub_lines | cat "$tmp/given.code" - | sort -u >"$tmp/given"
    # Every text file of the handout, line by line.
    find "$dir" -type f -print | while IFS= read -r f; do
        case $(file -b --mime-encoding "$f" 2>/dev/null || echo us-ascii) in
        binary) continue ;;
        esac
        awk "$NORMALIZE"'{ t = norm($0); if (length(t) >= 16) printf "%s\t%s:%d\n", t, FILENAME, FNR }' "$f"
    done >"$tmp/lines"
    awk -F '\t' -v given="$tmp/given" -v lines="$tmp/lines" -v shared="$tmp/shared" '
        BEGIN { while ((getline g < given) > 0) in_library[g] = 1 }
        FILENAME != lines {
            if ($1 in in_library) { printf "  %s (%s, %s)\n", $1, $2, $3 > shared; next }
            answer[$1] = $2 " (" $3 ")"
            next
        }
        $1 in answer { printf "%s: a line of the answer to %s: %s\n", $2, answer[$1], $1; found++ }
        END { exit found > 0 }
    ' "$tmp/answers" "$tmp/lines" >"$tmp/found" || {
        cat "$tmp/found" >&2
        echo "check-handout: $(wc -l <"$tmp/found") lines of answers in $dir (above)" >&2
        rm -rf "$tmp"
        exit 1
    }
    n=$(cut -f1 "$tmp/answers" | sort -u | wc -l)
    echo "check-handout: none of the $n answer lines of solutions/ is in $dir"
    if [ -s "$tmp/shared" ]; then
        echo "check-handout: left out, since the project's own code or the stubs have them too:"
        sort -u "$tmp/shared"
    fi
    rm -rf "$tmp"
}

if [ "${1:-}" = "--leaks" ]; then
    leaks "${2:?--leaks needs a folder}"
    exit 0
fi

# ------------------------------------------------------------ end to end
MAKE=${MAKE:-make}
scratch=$(mktemp -d "${TMPDIR:-/tmp}/kvlab-handout-check.XXXXXX")
trap 'rm -rf "$scratch"' EXIT INT TERM
fail() { echo "check-handout: FAIL: $*" >&2; exit 1; }
scripts/make-handout.sh "$scratch/dist" >/dev/null
# The archive unpacked alone in an empty folder, as a student gets it:
# nothing beside it (no ../shared), no copy of the models elsewhere.
unset KVLAB_SHARED_MODELS
mkdir "$scratch/student"
tar -xzf "$scratch/dist/kvlab-handout.tar.gz" -C "$scratch/student"
h=$scratch/student/kvlab-handout
[ "$(ls -A "$scratch/student")" = kvlab-handout ] || fail "the archive holds more than kvlab-handout/"
[ ! -e "$h/solutions" ] || fail "the handout has a solutions/ folder"
[ ! -e "$h/tests/mutants" ] || fail "the handout has tests/mutants/"
# Make it a git checkout of its own, as a student's would be, so that
# nothing falls back on this repository.
(cd "$h" && git init -q && git add -A && git -c user.name=check -c user.email=check@localhost commit -qm handout)
(cd "$h" && $MAKE -j2 CUDA=0 >"$scratch/make.log" 2>&1) || { tail -30 "$scratch/make.log" >&2; fail "make does not build"; }
echo "check-handout: make builds every program"
(cd "$h" && $MAKE -j2 CUDA=0 test >"$scratch/test.log" 2>&1) || { tail -30 "$scratch/test.log" >&2; fail "make test fails"; }
echo "check-handout: make test passes ($(grep -c '^SKIP suite' "$scratch/test.log") suites skipped for want of finished labs; $(grep -E '^[0-9]+%' "$scratch/test.log"))"
(cd "$h" && $MAKE help >"$scratch/help.log" 2>&1) || fail "make help fails"
! grep -Eq 'make (grade|exercises|handout|check-)' "$scratch/help.log" || fail "make help lists the maintainers' commands"
(cd "$h" && $MAKE CUDA=0 demo >"$scratch/demo.log" 2>&1) || { tail -20 "$scratch/demo.log" >&2; fail "make demo fails on the untouched exercises"; }
grep -q 'needs labs 1 to 5' "$scratch/demo.log" || { cat "$scratch/demo.log" >&2; fail "make demo does not say which labs it needs"; }
echo "check-handout: make help lists a student's commands; make demo says which labs it needs"

score_of() { sed -n 's/^Score: //p' "$1"; }
# The chapters' labs (by number), the bug hunts and the CUDA lab. The CUDA
# lab runs on the CPU emulator of this checkout's EMU_DIR (a student gets
# it beside the handout, or has a GPU); without one it is left out, and
# said so.
labs=$(ls tests/lab/ch[0-9][0-9].c tests/lab/bughunt.c tests/lab/cuda.c 2>/dev/null |
    sed -e 's|.*/ch\([0-9]*\)\.c|\1|' -e 's|.*/\([a-z]*\)\.c|\1|')
emu_dir=$(cd "${EMU_DIR:-../shared/tools/cuda-emu}" 2>/dev/null && pwd || true)
if [ -z "$emu_dir" ] || [ ! -x "$emu_dir/build.sh" ] || [ ! -f "${CUDA_HOME:-/usr/local/cuda}/include/cuda_runtime_api.h" ]; then
    echo "check-handout: SKIP the CUDA lab: no CPU emulator (EMU_DIR) or no CUDA headers here"
    labs=$(echo "$labs" | grep -vx cuda)
fi
lab_name() { case $1 in [0-9]*) echo "${1#0}" ;; *) echo "$1" ;; esac; }
lab_dir() { case $1 in [0-9]*) echo "ch$1" ;; *) echo "$1" ;; esac; }
# Every lab untouched: 0 points, and a results.json that says so.
for nn in $labs; do
    id=$(lab_dir "$nn")
    (cd "$h" && $MAKE CUDA=0 EMU_DIR="$emu_dir" lab CH="$(lab_name "$nn")" >"$scratch/$id.untouched" 2>&1) ||
        { cat "$scratch/$id.untouched" >&2; fail "make lab CH=$(lab_name "$nn") does not run"; }
    s=$(score_of "$scratch/$id.untouched")
    [ -n "$s" ] && [ "${s%/*}" -eq 0 ] || { cat "$scratch/$id.untouched" >&2; fail "$id: the untouched exercises score ${s:-nothing}, not 0"; }
    results=$h/build/lab/$id/results.json
    [ -s "$results" ] && grep -q '"max_score"' "$results" && grep -q '"visibility": "visible"' "$results" ||
        fail "$id: no results.json with max_score and visibility in build/lab/$id/"
    grep -q '^  "score": 0,' "$results" || fail "$id: results.json does not give the score 0"
    echo "check-handout: $id untouched: $s, results.json says 0"
done
# A lab that does not compile: make lab fails, and results.json says 0 and why.
first=$(ls "$h"/exercises/ch01/*.c | head -1)
cp "$first" "$scratch/kept.c"
echo 'int this_does_not_compile = ;' >>"$first"
! (cd "$h" && $MAKE CUDA=0 lab CH=1 >"$scratch/broken.log" 2>&1) || fail "make lab CH=1 succeeds with a file that does not compile"
grep -q '^  "score": 0,' "$h/build/lab/ch01/results.json" && grep -q 'error' "$h/build/lab/ch01/results.json" ||
    fail "a lab that does not compile leaves no results.json with score 0 and the compiler's message"
cp "$scratch/kept.c" "$first"
echo "check-handout: a lab that does not compile writes results.json with score 0 and the compiler's message"
# Every lab with the answers: full marks.
for nn in $labs; do
    id=$(lab_dir "$nn")
    case $id in
    bughunt) for d in solutions/bughunt/*/; do cp "$d"*.c "$h/exercises/bughunt/$(basename "$d")/"; done ;;
    cuda) cp solutions/cuda/*.cu "$h/exercises/cuda/" ;;
    *) cp "solutions/$id"/*.c "$h/exercises/$id/" ;;
    esac
done
for nn in $labs; do
    id=$(lab_dir "$nn")
    (cd "$h" && $MAKE CUDA=0 EMU_DIR="$emu_dir" lab CH="$(lab_name "$nn")" >"$scratch/$id.solved" 2>&1) ||
        { cat "$scratch/$id.solved" >&2; fail "make lab CH=$(lab_name "$nn") does not run with the answers"; }
    f=$(score_of "$scratch/$id.solved")
    [ -n "$f" ] && [ "${f%/*}" -eq "${f#*/}" ] ||
        { cat "$scratch/$id.solved" >&2; fail "$id: with the answers of solutions/$id/ copied in, the score is ${f:-nothing}, not full marks"; }
    echo "check-handout: $id with the answers copied in: $f"
done
echo "check-handout: the handout is complete, alone in its folder, and holds no answer"
