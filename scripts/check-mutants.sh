#!/bin/sh
# The mutation check (make check-mutants): every mutant of tests/mutants/
# (format in tests/mutants/README.md), applied one at a time to a copy of
# solutions/, must make its lab (a chapter's, the bug hunts', the CUDA
# lab's: chNN.txt, bughunt.txt, cuda.txt) score below full marks, and the
# first failing test (the lab's tests run small cases first, whole runs
# last) must name the function that holds the bug in its output.
#
#   scripts/check-mutants.sh [NAME...]   all mutants, or only those named
#
# Environment: BUILD (default build), MAKE (default make), and what the
# Makefile takes (CUDA, OPT). It builds in $BUILD/mutants/ and keeps that
# folder, so that a mutant costs one compiled object, one link and one lab
# run: the mutated file is compiled, and when it is put back its object
# from the pristine build is put back too.
set -eu
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
MAKE=${MAKE:-make}
work=$BUILD/mutants
src=$work/src              # the lab folder under test: $src/chNN/
lab_build=$work/build      # its build folder
pristine=$work/pristine    # objects of the unmutated files
tmp=$(mktemp -d "${TMPDIR:-/tmp}/kvlab-mutants.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM
only="$*"
start=$(date +%s)

die() { echo "check-mutants: $*" >&2; exit 2; }

# Splits tests/mutants/chNN.txt into $tmp/chNN/K.{meta,orig,new}, K = 1, 2...
split_mutants() {
    awk -v dir="$2" -v source="$1" '
    function fail(msg) { printf "%s:%d: %s\n", source, FNR, msg > "/dev/stderr"; bad = 1; exit 1 }
    /^@@ / {
        if (state != 0) fail("a mutant begins before the last one ended (>>>>)")
        if (NF != 4) fail("expected \"@@ NAME FILE FUNCTION\"")
        k++; printf "%s %s %s %d\n", $2, $3, $4, FNR > (dir "/" k ".meta")
        printf "" > (dir "/" k ".orig"); printf "" > (dir "/" k ".new")
        state = 1; next
    }
    state == 1 && /^#/ { next }
    state == 1 && /^<<<<$/ { state = 2; next }
    state == 1 { fail("expected <<<< after the @@ line (and # comments)") }
    state == 2 && /^====$/ { state = 3; next }
    state == 2 { print > (dir "/" k ".orig"); next }
    state == 3 && /^>>>>$/ { state = 0; next }
    state == 3 { print > (dir "/" k ".new"); next }
    /^#/ || /^[ \t]*$/ { next }
    { fail("text outside a mutant") }
    END { if (!bad && state != 0) { FNR = 0; fail("the last mutant is not closed with >>>>") } }
    ' "$1"
}

# apply FILE ORIG NEW: replaces the one occurrence of ORIG's lines in FILE.
apply() {
    awk -v origfile="$2" -v newfile="$3" '
    BEGIN {
        while ((getline line < origfile) > 0) orig = orig line "\n"
        while ((getline line < newfile) > 0) repl = repl line "\n"
    }
    { text = text $0 "\n" }
    END {
        if (orig == "") exit 3
        whole = "\n" text; want = "\n" orig; n = 0; rest = whole
        while ((i = index(rest, want)) > 0) { n++; rest = substr(rest, i + 1) }
        if (n != 1) exit 3 + (n > 1)
        i = index(whole, want)
        printf "%s", substr(whole, 2, i - 1) repl substr(whole, i + length(want))
    }' "$1"
}

# Builds the lab binary of lab $1 (chNN, bughunt or cuda) from $src.
build_lab() {
    case $1 in ch*) lab_only=${1#ch}; lab_only=${lab_only#0} ;; *) lab_only=$1 ;; esac
    $MAKE --no-print-directory BUILD="$lab_build" LAB="$src" LAB_ONLY="$lab_only" "$lab_build/lab-$1" \
        >"$tmp/build.log" 2>&1
}

total=0 caught=0 failed=0
printf '%-38s %-28s %s\n' "mutant" "function" "caught by (failing tests, in the lab's order; * = names the function)"
for list in tests/mutants/ch[0-9][0-9].txt tests/mutants/bughunt.txt tests/mutants/cuda.txt; do
    [ -f "$list" ] || continue
    ch=$(basename "$list" .txt)
    [ -d "solutions/$ch" ] || die "$list: solutions/$ch/ is missing"
    if [ "$ch" = cuda ] && [ -z "${CUDA_LAB_MODE:-}" ]; then
        echo "check-mutants: SKIP $list: ${CUDA_LAB_NONE:-no GPU and no CPU emulator for the CUDA lab}"
        continue
    fi
    mkdir -p "$tmp/$ch" "$src/$ch" "$pristine/$ch"
    split_mutants "$list" "$tmp/$ch" || die "$list: malformed (see above)"
    # The pristine copy, with the solutions' times, so that nothing rebuilds
    # that need not; the lab must give full marks before any mutant. A lab
    # file may be in a folder of its own (solutions/bughunt/NAME/FILE.c).
    rm -rf "${src:?}/$ch"
    cp -pR "solutions/$ch" "$src/$ch"
    rm -f "$lab_build/lab-$ch"
    build_lab "$ch" || { cat "$tmp/build.log" >&2; die "$ch: the solutions do not build in $lab_build"; }
    KVLAB_BUILD="$lab_build" "$lab_build/lab-$ch" --expect full >"$tmp/pristine.txt" 2>&1 ||
        { cat "$tmp/pristine.txt" >&2; die "$ch: the solutions do not get full marks"; }
    objdir=$lab_build/obj/$src/$ch
    rm -rf "${pristine:?}/$ch"
    cp -pR "$objdir" "$pristine/$ch"
    n_mutants=$(ls "$tmp/$ch"/*.meta | wc -l)
    i=0
    while [ "$i" -lt "$n_mutants" ]; do
        i=$((i + 1))
        k=$tmp/$ch/$i
        meta=$k.meta
        read -r name file func line <"$meta"
        if [ -n "$only" ] && ! echo " $only " | grep -q " $name "; then continue; fi
        total=$((total + 1))
        [ -f "solutions/$ch/$file" ] || die "$list:$line: $name: no file solutions/$ch/$file"
        rc=0
        apply "solutions/$ch/$file" "$k.orig" "$k.new" >"$tmp/mutated.c" || rc=$?
        case $rc in
        0) ;;
        3) die "$list:$line: $name: its original text is not in solutions/$ch/$file" ;;
        *) die "$list:$line: $name: its original text is in solutions/$ch/$file more than once" ;;
        esac
        cp "$tmp/mutated.c" "$src/$ch/$file"
        if ! build_lab "$ch"; then
            cat "$tmp/build.log" >&2
            die "$list:$line: $name: the mutated $file does not build"
        fi
        KVLAB_BUILD="$lab_build" "$lab_build/lab-$ch" >"$work/$name.txt" 2>&1 || true
        # Put the pristine file and its object back (the object is newer).
        cp -p "solutions/$ch/$file" "$src/$ch/$file"
        cp -p "$pristine/$ch/${file%.*}.o" "$objdir/${file%.*}.o"
        score=$(sed -n 's/^Score: //p' "$work/$name.txt")
        # Each failing test's block: its FAIL line and the indented lines under it.
        tests=$(awk -v func_name="$func" '
            /^(PASS|FAIL|SKIP|Score:)/ { if (t != "") print t (named ? "*" : ""); t = ""; named = 0 }
            /^FAIL / { t = $2; next }
            t != "" && index($0, func_name) { named = 1 }
            END { if (t != "") print t (named ? "*" : "") }' "$work/$name.txt" | tr '\n' ' ')
        verdict=
        case $score in
        "") verdict="NOT RUN (no score; see $work/$name.txt)" ;;
        */*) [ "${score%/*}" -lt "${score#*/}" ] || verdict="SURVIVED ($score)" ;;
        esac
        first=${tests%% *}
        if [ -z "$verdict" ] && [ "${first%\*}" = "$first" ]; then
            verdict="CAUGHT BUT NOT NAMED: the first failing test, ${first:-none}, does not name $func()"
        fi
        if [ -z "$verdict" ]; then
            caught=$((caught + 1))
            printf '%-38s %-28s %s (%s)\n' "$name" "$func" "$tests" "$score"
        else
            failed=$((failed + 1))
            printf '%-38s %-28s %s %s\n' "$name" "$func" "$verdict" "$tests"
        fi
    done
    rm -f "$lab_build/lab-$ch" # it was linked with the last mutant
done
elapsed=$(( $(date +%s) - start ))
echo "check-mutants: $caught of $total mutants caught and named, in ${elapsed} s (outputs in $work/)"
[ "$failed" -eq 0 ] && [ "$total" -gt 0 ]
