#!/bin/sh
# Generates exercises/chNN/* from solutions/chNN/* by the LAB markers,
# exercises/cuda/*.cu from solutions/cuda/*.cu the same way, and the bug
# hunts, exercises/bughunt/NAME/*, from solutions/bughunt/NAME/* by the BUG
# markers.
#
#   scripts/make-exercises.sh            regenerate exercises/ (make exercises)
#   scripts/make-exercises.sh --check    fail if exercises/ differs from what
#                                        would be generated (make check-exercises)
#   scripts/make-exercises.sh --list     the names of all regions
#   options: --force (overwrite even what looks like lab work),
#            --only NAME (stub only that region, keep the others solved),
#            --solutions DIR, --exercises DIR (default solutions, exercises)
#
# A region a student writes is marked in the solution like this:
#
#       // LAB BEGIN(ch01.attend): one line telling the student what to write
#       ... solution code (dropped) ...
#       // LAB STUB:
#       // stub code, commented out in the solution (uncommented here)
#       // LAB_TODO("what is missing");
#       // LAB END
#
# The BEGIN line becomes `// TODO(lab ch01.attend): ...`, the solution is
# dropped, the stub lines lose their `// `, and everything outside the
# regions is copied verbatim under a header that says where it came from.
# Malformed markers (a BEGIN without STUB or END, nested regions, a stray
# END, a stub without LAB_TODO, a misspelt marker) are reported as
# FILE:LINE: message, and nothing is written.
#
# A bug hunt hands out a working component with one planted bug. The
# solution holds the fixed code, and the bug beside it:
#
#       // BUG BEGIN(bughunt.name): what the bug is (maintainers only)
#       ... the fixed code (dropped) ...
#       // BUG PLANTED:
#       // the buggy code, commented out in the solution (uncommented here)
#       // BUG END
#
# The exercise gets the buggy code and no trace of a marker: the student
# finds the bug from its symptoms (make lab CH=bughunt). --only NAME plants
# only that bug (and stubs no LAB region); --only chNN.x plants none.
set -eu

usage() { sed -n '2,11s/^# \{0,1\}//p' "$0"; }

mode=write force=0 only= explicit_dirs=0
solutions=solutions exercises=exercises
while [ $# -gt 0 ]; do
    case $1 in
    --check) mode=check ;;
    --force) force=1 ;;
    --list) mode=list ;;
    --only) only=${2:?--only needs a region name}; shift ;;
    --solutions) solutions=${2:?--solutions needs a folder}; explicit_dirs=1; shift ;;
    --exercises) exercises=${2:?--exercises needs a folder}; explicit_dirs=1; shift ;;
    -h | --help) usage; exit 0 ;;
    *) echo "make-exercises: unknown option '$1' (try --help)" >&2; exit 1 ;;
    esac
    shift
done

# Default folders are relative to the project root.
[ "$explicit_dirs" -eq 1 ] || cd "$(dirname "$0")/.."

# A handout has exercises/ and no solutions/: generating from nothing would
# wipe a student's work.
if ! ls -d "$solutions"/ch[0-9][0-9] >/dev/null 2>&1; then
    echo "make-exercises: no $solutions/chNN/ here (a handout has none): nothing to generate exercises from" >&2
    exit 1
fi

if [ "$mode" = list ]; then
    cat "$solutions"/ch[0-9][0-9]/*.[ch] "$solutions"/cuda/*.cu "$solutions"/bughunt/*/*.[ch] 2>/dev/null |
        sed -n -e "s/^[ \t]*\/\/ LAB BEGIN(\(ch[0-9][0-9]\.[a-z0-9_]*\)): .*/\1/p" \
            -e "s/^[ \t]*\/\/ LAB BEGIN(\(cuda\.[a-z0-9_]*\)): .*/\1/p" \
            -e "s/^[ \t]*\/\/ BUG BEGIN(\(bughunt\.[a-z0-9_]*\)): .*/\1/p"
    exit 0
fi
if [ -n "$only" ] && ! "$0" --list --solutions "$solutions" | grep -qx "$only"; then
    echo "make-exercises: no region named '$only' (see --list)" >&2
    exit 1
fi

# The whole transformation, one file at a time. States: 0 outside a region,
# 1 in the solution part, 2 in the stub part.
AWK_PROGRAM='
function fail(msg) {
    printf "%s:%d: %s\n", source, FNR, msg > "/dev/stderr"
    failed = 1
    exit 1
}
BEGIN {
    state = 0
    printf "/* GENERATED from %s by scripts/make-exercises.sh.\n", source
    printf " * Students: this is your copy. Write the regions marked TODO(lab ...),\n"
    printf " * then run `make lab CH=%s`. Maintainers: edit the solution instead and\n", lab_name
    printf " * run `make exercises`; CI checks that the two agree. */\n"
}
# Anything that looks like a marker must be exactly one.
/^[ \t]*\/\/[ \t]*LAB[ \t]*(BEGIN|STUB|END)/ {
    if ($0 ~ /^[ \t]*\/\/ LAB BEGIN\((ch[0-9][0-9]|cuda)\.[a-z0-9_]+\): [^ \t]/) {
        if (state != 0)
            fail("LAB BEGIN inside the region " id " opened at line " begin_line " (regions do not nest; close it with LAB STUB: and LAB END first)")
        indent = $0; sub(/\/\/.*$/, "", indent)
        rest = $0; sub(/^[ \t]*\/\/ LAB BEGIN\(/, "", rest)
        id = rest; sub(/\).*$/, "", id)
        text = rest; sub(/^[^)]*\): /, "", text)
        if (substr(id, 1, length(chapter) + 1) != chapter ".")
            fail("region " id " belongs to " (id ~ /^ch/ ? "chapter " : "") substr(id, 1, index(id, ".") - 1) ", but this file is in " chapter)
        if (id in seen)
            fail("region " id " is already defined at line " seen[id])
        seen[id] = FNR
        begin_line = FNR
        has_todo = 0
        keep_solution = (only != "" && id != only)
        if (!keep_solution)
            print indent "// TODO(lab " id "): " text
        state = 1
        next
    }
    if ($0 ~ /^[ \t]*\/\/ LAB STUB:[ \t]*$/) {
        if (state == 0)
            fail("LAB STUB: outside a region (no LAB BEGIN before it)")
        if (state == 2)
            fail("second LAB STUB: in region " id " (opened at line " begin_line ")")
        state = 2
        next
    }
    if ($0 ~ /^[ \t]*\/\/ LAB END[ \t]*$/) {
        if (state == 0)
            fail("LAB END without a LAB BEGIN")
        if (state == 1)
            fail("LAB END of region " id " (opened at line " begin_line ") without a LAB STUB: (the stub is what the student starts from)")
        if (!has_todo)
            fail("the stub of region " id " (opened at line " begin_line ") has no LAB_TODO(\"...\") line")
        state = 0
        next
    }
    fail("malformed LAB marker; the forms are \"// LAB BEGIN(chNN.name): what to write\", \"// LAB STUB:\" and \"// LAB END\"")
}
state == 1 { if (keep_solution) print; next }
state == 2 {
    if ($0 ~ /^[ \t]*$/) { if (!keep_solution) print; next }
    if ($0 !~ /^[ \t]*\/\//)
        fail("stub line of region " id " is not a // comment (stub code is commented out in the solution)")
    line = $0
    sub(/\/\/ ?/, "", line)
    if (line ~ /LAB_TODO\(/)
        has_todo = 1
    if (!keep_solution)
        print line
    next
}
{ print }
END {
    if (!failed && state != 0) {
        FNR = begin_line
        fail("region " id " is never closed: LAB BEGIN needs a LAB STUB: and a LAB END")
    }
}
'

# A bug hunt's file: the fixed code out, the planted bug in, no marker left.
# States: 0 outside a region, 1 in the fix, 2 in the planted bug.
BUG_PROGRAM='
function fail(msg) {
    printf "%s:%d: %s\n", source, FNR, msg > "/dev/stderr"
    failed = 1
    exit 1
}
BEGIN {
    state = 0
    printf "/* Bug hunt %s: this component has one planted bug. `make lab CH=bughunt`\n", hunt
    printf " * shows its symptom; find the bug and fix it. GENERATED by\n"
    printf " * scripts/make-exercises.sh (maintainers: edit the fixed copy and run\n"
    printf " * `make exercises`; CI checks that the two agree). */\n"
}
/^[ \t]*\/\/[ \t]*BUG[ \t]*(BEGIN|PLANTED|END)/ {
    if ($0 ~ /^[ \t]*\/\/ BUG BEGIN\(bughunt\.[a-z0-9_]+\): [^ \t]/) {
        if (state != 0)
            fail("BUG BEGIN inside the region " id " opened at line " begin_line " (regions do not nest)")
        id = $0; sub(/^[ \t]*\/\/ BUG BEGIN\(/, "", id); sub(/\).*$/, "", id)
        if (id != "bughunt." hunt)
            fail("region " id " is in the folder of bughunt." hunt)
        begin_line = FNR
        keep_fix = (only != "" && id != only)
        state = 1
        next
    }
    if ($0 ~ /^[ \t]*\/\/ BUG PLANTED:[ \t]*$/) {
        if (state != 1)
            fail("BUG PLANTED: outside a region, or twice in one")
        state = 2
        next
    }
    if ($0 ~ /^[ \t]*\/\/ BUG END[ \t]*$/) {
        if (state != 2)
            fail("BUG END without a BUG BEGIN and a BUG PLANTED:")
        state = 0
        next
    }
    fail("malformed BUG marker; the forms are \"// BUG BEGIN(bughunt.name): what the bug is\", \"// BUG PLANTED:\" and \"// BUG END\"")
}
state == 1 { if (keep_fix) print; next }
state == 2 {
    if ($0 ~ /^[ \t]*$/) { if (!keep_fix) print; next }
    if ($0 !~ /^[ \t]*\/\//)
        fail("planted line of region " id " is not a // comment (the bug is commented out in the fixed copy)")
    line = $0
    sub(/\/\/ ?/, "", line)
    if (!keep_fix)
        print line
    next
}
{ print }
END {
    if (!failed && state != 0) {
        FNR = begin_line
        fail("region " id " is never closed: BUG BEGIN needs a BUG PLANTED: and a BUG END")
    }
}
'

tmp=$(mktemp -d "${TMPDIR:-/tmp}/kvlab-exercises.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM

# Generate everything into $tmp first: nothing is written unless every
# file is well formed. Each lab is one folder of $tmp: chNN, cuda, bughunt.
status=0
for dir in "$solutions"/ch[0-9][0-9] "$solutions"/cuda; do
    [ -d "$dir" ] || continue
    chapter=$(basename "$dir")
    lab_name=${chapter#ch}
    lab_name=${lab_name#0}
    mkdir -p "$tmp/$chapter"
    for src in "$dir"/*.c "$dir"/*.h "$dir"/*.cu; do
        [ -f "$src" ] || continue
        awk -v source="$src" -v chapter="$chapter" -v only="$only" -v lab_name="$lab_name" \
            "$AWK_PROGRAM" "$src" >"$tmp/$chapter/$(basename "$src")" || status=1
    done
done
for dir in "$solutions"/bughunt/*/; do
    [ -d "$dir" ] || continue
    hunt=$(basename "$dir")
    mkdir -p "$tmp/bughunt/$hunt"
    for src in "$dir"*.c "$dir"*.h; do
        [ -f "$src" ] || continue
        awk -v source="$src" -v hunt="$hunt" -v only="$only" "$BUG_PROGRAM" "$src" \
            >"$tmp/bughunt/$hunt/$(basename "$src")" || status=1
    done
done
if [ "$status" -ne 0 ]; then
    echo "make-exercises: malformed LAB or BUG markers (see above); nothing written" >&2
    exit 1
fi

if [ "$mode" = check ]; then
    if [ ! -d "$exercises" ]; then
        echo "make-exercises: $exercises/ is missing; run 'make exercises' and commit the result" >&2
        exit 1
    fi
    if ! diff -ru "$exercises" "$tmp" >&2; then
        echo "make-exercises: $exercises/ is out of date with $solutions/; run 'make exercises' and commit the result" >&2
        exit 1
    fi
    echo "make-exercises: $exercises/ matches $solutions/"
    exit 0
fi

# A student who runs this by mistake must not lose their work: an exercise
# that differs from its committed version while its solution does not was
# edited by hand.
if [ "$force" -eq 0 ] && git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    for new in $(cd "$tmp" && find . -type f | sed 's|^\./||' | sed "s|^|$tmp/|"); do
        [ -f "$new" ] || continue
        rel=${new#"$tmp"/}
        if [ -f "$exercises/$rel" ] && ! cmp -s "$new" "$exercises/$rel" &&
            ! git diff --quiet HEAD -- "$exercises/$rel" 2>/dev/null &&
            git diff --quiet HEAD -- "$solutions/$rel" 2>/dev/null; then
            echo "make-exercises: $exercises/$rel has changes of its own (your lab work?); not overwriting it." >&2
            echo "make-exercises: commit or save it first, or force with 'make exercises FORCE=1'" >&2
            exit 1
        fi
    done
fi

for dir in "$tmp"/*; do
    [ -d "$dir" ] || continue
    chapter=$(basename "$dir")
    rm -rf "${exercises:?}/$chapter"
    mkdir -p "$exercises"
    cp -R "$dir" "$exercises/$chapter"
done
# Labs whose solutions are gone lose their exercises too.
for dir in "$exercises"/ch[0-9][0-9] "$exercises"/cuda "$exercises"/bughunt; do
    [ -d "$dir" ] || continue
    [ -d "$solutions/$(basename "$dir")" ] || rm -rf "$dir"
done
echo "make-exercises: wrote $exercises/ from $solutions/"
