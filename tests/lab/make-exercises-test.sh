#!/bin/sh
# Tests of scripts/make-exercises.sh on small made-up solutions: a good file
# becomes the expected exercise, and each kind of malformed marker is
# refused with FILE:LINE and exit status 1, writing nothing.
# Run by `make check-exercises`.
set -eu
cd "$(dirname "$0")/../.."
gen=scripts/make-exercises.sh
work=$(mktemp -d "${TMPDIR:-/tmp}/kvlab-gen-test.XXXXXX")
trap 'rm -rf "$work"' EXIT INT TERM
failures=0

fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }

# A solution folder holding one file ch01/x.c with the given text.
solution() {
    rm -rf "$work/sol" "$work/ex"
    mkdir -p "$work/sol/ch01"
    cat >"$work/sol/ch01/x.c"
}

# expect_error NAME LINE TEXT: the generator must fail, name x.c:LINE, say
# TEXT, and leave no exercises behind.
expect_error() {
    if "$gen" --solutions "$work/sol" --exercises "$work/ex" 2>"$work/err" >/dev/null; then
        fail "$1: accepted"
        return
    fi
    grep -q "ch01/x.c:$2: .*$3" "$work/err" || fail "$1: expected 'x.c:$2: ...$3', got: $(cat "$work/err")"
    [ ! -e "$work/ex" ] || fail "$1: wrote exercises despite the error"
}

solution <<'EOF'
int f(int a)
{
    // LAB BEGIN(ch01.f): return twice a
    return 2 * a;
    // LAB STUB:
    // (void)a;
    // LAB_TODO("twice a");
    // return 0;
    // LAB END
}
EOF
"$gen" --solutions "$work/sol" --exercises "$work/ex" >/dev/null || fail "good file: refused"
cat >"$work/want" <<'EOF'
int f(int a)
{
    // TODO(lab ch01.f): return twice a
    (void)a;
    LAB_TODO("twice a");
    return 0;
}
EOF
tail -n +5 "$work/ex/ch01/x.c" | diff -u "$work/want" - >&2 || fail "good file: unexpected exercise"
head -n 1 "$work/ex/ch01/x.c" | grep -q "GENERATED from .*sol/ch01/x.c" || fail "good file: no header naming the source"
"$gen" --check --solutions "$work/sol" --exercises "$work/ex" >/dev/null 2>&1 || fail "check: fresh exercises reported out of date"
echo "/* edited */" >>"$work/ex/ch01/x.c"
"$gen" --check --solutions "$work/sol" --exercises "$work/ex" >/dev/null 2>&1 && fail "check: an edited exercise passed"

solution <<'EOF'
    // LAB BEGIN(ch01.a): something
    x = 1;
    // LAB END
EOF
expect_error "BEGIN without STUB" 3 "without a LAB STUB"

solution <<'EOF'
    // LAB BEGIN(ch01.a): something
    x = 1;
    // LAB STUB:
    // LAB_TODO("x");
EOF
expect_error "BEGIN without END" 1 "never closed"

solution <<'EOF'
    // LAB BEGIN(ch01.a): outer
    // LAB BEGIN(ch01.b): inner
EOF
expect_error "nested BEGIN" 2 "do not nest"

solution <<'EOF'
    x = 1;
    // LAB END
EOF
expect_error "stray END" 2 "without a LAB BEGIN"

solution <<'EOF'
    // LAB STUB:
EOF
expect_error "stray STUB" 1 "outside a region"

solution <<'EOF'
    // LAB BEGIN ch01.a: no parentheses
EOF
expect_error "misspelt BEGIN" 1 "malformed LAB marker"

solution <<'EOF'
    // LAB BEGIN(ch01.a): something
    x = 1;
    // LAB STUB:
    // x = 0;
    // LAB END
EOF
expect_error "stub without LAB_TODO" 5 "no LAB_TODO"

solution <<'EOF'
    // LAB BEGIN(ch01.a): something
    // LAB STUB:
    x = 0;
    // LAB END
EOF
expect_error "uncommented stub line" 3 "not a // comment"

solution <<'EOF'
    // LAB BEGIN(ch02.a): something
EOF
expect_error "region of another chapter" 1 "belongs to chapter ch02"

solution <<'EOF'
    // LAB BEGIN(ch01.a): something
    // LAB STUB:
    // LAB_TODO("a");
    // LAB END
    // LAB BEGIN(ch01.a): again
EOF
expect_error "duplicate region" 5 "already defined"

# A bug hunt: the fix dropped, the planted bug uncommented, no marker left;
# --only another region keeps the fix.
rm -rf "$work/sol" "$work/ex"
mkdir -p "$work/sol/ch01" "$work/sol/bughunt/h"
printf 'int g(void) { return 1; }\n' >"$work/sol/ch01/y.c"
cat >"$work/sol/bughunt/h/z.c" <<'EOF2'
int f(int a)
{
    // BUG BEGIN(bughunt.h): off by one
    return a + 1;
    // BUG PLANTED:
    // return a;
    // BUG END
}
EOF2
"$gen" --solutions "$work/sol" --exercises "$work/ex" >/dev/null || fail "bug hunt: refused"
printf 'int f(int a)\n{\n    return a;\n}\n' >"$work/want"
tail -n +5 "$work/ex/bughunt/h/z.c" | diff -u "$work/want" - >&2 || fail "bug hunt: the bug is not planted alone"
! grep -q 'BUG\|solutions' "$work/ex/bughunt/h/z.c" || fail "bug hunt: a marker or the solutions' name is left in the exercise"
"$gen" --solutions "$work/sol" --exercises "$work/ex2" --only ch01.none >/dev/null 2>&1 && fail "--only: an unknown region accepted"
"$gen" --list --solutions "$work/sol" | grep -qx bughunt.h || fail "bug hunt: --list does not name bughunt.h"
printf '    // BUG BEGIN(bughunt.h): x\n    return 1;\n    // BUG END\n' >"$work/sol/bughunt/h/z.c"
"$gen" --solutions "$work/sol" --exercises "$work/ex3" 2>"$work/err" >/dev/null && fail "bug hunt: BEGIN without PLANTED accepted"
grep -q 'z.c:3: BUG END without' "$work/err" || fail "bug hunt: expected 'z.c:3: BUG END without...', got: $(cat "$work/err")"

if [ "$failures" -ne 0 ]; then
    echo "make-exercises-test: $failures failure(s)" >&2
    exit 1
fi
echo "make-exercises-test: all cases pass"
