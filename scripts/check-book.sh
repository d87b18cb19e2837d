#!/usr/bin/env bash
# check-book: run every command the book quotes in a checked block and check
# the figures it quotes (make check-book).
#
#   scripts/check-book.sh [PAGE.md ...]     default: every book/*.md
#   scripts/check-book.sh --self-test       the checker on pages made to fail, skip or pass
#
# A checked block is a fenced ```sh block with at least one marker line:
#
#   # expect: TEXT     TEXT must appear, as it is, in the block's output
#                      (stdout and stderr together); one figure per line
#   # needs: PATH      print SKIP, and run nothing, when PATH does not exist
#                      (a model in ../shared/models, a program not on main yet)
#   # status: N        the exit status the block must end with (default 0)
#
# The markers are shell comments, so a reader can paste the block as it is.
# The block runs from the repository root, with bash -e -o pipefail, under a
# time limit (BOOK_TIMEOUT seconds, default 300: the slowest block, a kvsim
# calibration, takes about a minute alone and nearly three on a loaded machine). Once a page has one checked
# block, every ```sh block of that page must be checked: a page never quotes
# a command that nothing runs. Pages without checked blocks are left alone.
#
# Exit status: 0 when every checked block ran and printed its figures, 1
# otherwise (each failure says page:line, the figure, and the output's tail).
set -uo pipefail
cd "$(dirname "$0")/.."

# --self-test: the checker on small pages of its own, each with the outcome
# it must give (a wrong figure, a wrong status, a block without figures on a
# checked page and a block past its time limit must fail; a missing need
# must skip; a page without checked blocks is left alone).
self_test() {
    local dir status=0
    dir=$(mktemp -d "${TMPDIR:-/tmp}/check-book-self.XXXXXX")
    fence='```'
    page() { printf '%s\n' "# $1" "" "${fence}sh" "${@:3}" "$fence" > "$dir/$2.md"; }
    page good good 'echo "figure 42"' '# expect: figure 42'
    page wrong-figure wrong-figure 'echo "figure 42"' '# expect: figure 43'
    page skipped skipped '# needs: /nonexistent/kvlab-model' 'false' '# expect: never'
    page status status 'echo "refused"; exit 3' '# status: 3' '# expect: refused'
    page wrong-status wrong-status 'echo "refused"; exit 3' '# expect: refused'
    page slow slow 'sleep 5' '# expect: never'
    page unmarked unmarked 'false'
    page half-marked half-marked 'echo "figure 42"' '# expect: figure 42'
    printf '%s\n' '' "${fence}sh" 'echo "no figure"' "$fence" >> "$dir/half-marked.md"
    expect_outcome() { # PAGE STATUS TEXT
        local out rc
        out=$(BOOK_TIMEOUT=2 bash "$0" "$dir/$1.md" 2>&1); rc=$?
        if [ "$rc" != "$2" ] || ! grep -qF -- "$3" <<<"$out"; then
            echo "check-book: self-test FAIL: $1.md: exit status $rc (wanted $2), output:" >&2
            sed 's/^/    /' <<<"$out" >&2
            status=1
        fi
    }
    expect_outcome good 0 "1 blocks run, 1 figures checked, 0 skipped, 0 failed"
    expect_outcome wrong-figure 1 "the output has no 'figure 43'"
    expect_outcome skipped 0 "SKIP $dir/skipped.md:3: /nonexistent/kvlab-model is absent"
    expect_outcome status 0 "1 blocks run, 1 figures checked, 0 skipped, 0 failed"
    expect_outcome wrong-status 1 "exit status 3, the page says 0"
    expect_outcome slow 1 "still running after 2 s"
    expect_outcome unmarked 0 "0 blocks run, 0 figures checked, 0 skipped, 0 failed"
    expect_outcome half-marked 1 "a \`\`\`sh block without '# expect:' on a checked page"
    rm -rf "$dir"
    [ "$status" = 0 ] && echo "check-book: self-test: 8 pages, each with the outcome it must give"
    return "$status"
}
if [ "${1:-}" = --self-test ]; then
    self_test
    exit
fi

# The figures are those of the reference answers; a handout builds the
# chapters from the cut-out exercises, whose stubs print other numbers.
if [ $# = 0 ] && [ ! -d solutions ]; then
    echo "check-book: SKIP: no solutions/ here (a handout?): the book's figures come from the reference answers"
    exit 0
fi

timeout_s=${BOOK_TIMEOUT:-300}
if [ $# -gt 0 ]; then pages=("$@"); else pages=(book/*.md); fi

work=$(mktemp -d "${TMPDIR:-/tmp}/check-book.XXXXXX")
trap 'rm -rf "$work"' EXIT

# Splits one page into its ```sh blocks: WORK/N.sh (the commands),
# WORK/N.meta (the page line of the block, then one marker a line).
split_page() {
    awk -v dir="$1" -v page="$2" '
        function flush() { close(sh); close(meta) }
        !inside && /^[ \t]*```sh[ \t]*$/ {
            inside = 1; n++
            sh = dir "/" n ".sh"; meta = dir "/" n ".meta"
            printf "" > sh
            print "line " FNR > meta
            next
        }
        inside && /^[ \t]*```[ \t]*$/ { inside = 0; flush(); next }
        inside {
            line = $0
            sub(/^[ \t]+/, "", line)
            if (line ~ /^# (expect|needs|status):/) {
                print line > meta
            }
            print $0 > sh
        }
        END {
            if (inside) { printf "%s: a ```sh block opened at its end is never closed\n", page > "/dev/stderr"; exit 1 }
        }
    ' "$2"
}

# The value of marker NAME lines in META, one a line.
markers() { sed -n "s/^# $1: //p" "$2"; }

n_run=0 n_figures=0 n_skip=0 n_fail=0
fail() { echo "check-book: FAIL $1" >&2; n_fail=$((n_fail + 1)); }

for page in "${pages[@]}"; do
    dir="$work/$(basename "$page" .md)"
    mkdir -p "$dir"
    split_page "$dir" "$page" || { fail "$page: cannot read its blocks"; continue; }
    checked=0
    for meta in "$dir"/*.meta; do
        [ -e "$meta" ] || continue
        grep -q '^# expect: ' "$meta" && checked=1
    done
    [ "$checked" = 1 ] || continue

    n_blocks=$(ls "$dir" | grep -c '\.meta$')
    for ((n = 1; n <= n_blocks; n++)); do
        meta="$dir/$n.meta"
        at="$page:$(sed -n 's/^line //p' "$meta")"
        if ! grep -q '^# expect: ' "$meta"; then
            fail "$at: a \`\`\`sh block without '# expect:' on a checked page"
            continue
        fi
        missing=""
        while IFS= read -r need; do
            [ -e "$need" ] || { missing="$need"; break; }
        done < <(markers needs "$meta")
        if [ -n "$missing" ]; then
            echo "check-book: SKIP $at: $missing is absent"
            n_skip=$((n_skip + 1))
            continue
        fi
        want_status=$(markers status "$meta" | tail -n 1)
        want_status=${want_status:-0}
        out="$dir/$n.out"
        timeout "$timeout_s" bash -e -o pipefail "$dir/$n.sh" > "$out" 2>&1
        status=$?
        n_run=$((n_run + 1))
        if [ "$status" = 124 ]; then
            fail "$at: still running after ${timeout_s} s"
            continue
        fi
        bad=0
        if [ "$status" != "$want_status" ]; then
            fail "$at: exit status $status, the page says $want_status"
            bad=1
        fi
        while IFS= read -r figure; do
            n_figures=$((n_figures + 1))
            if ! grep -qF -- "$figure" "$out"; then
                fail "$at: the output has no '$figure'"
                bad=1
            fi
        done < <(markers expect "$meta")
        if [ "$bad" = 1 ]; then
            echo "check-book: the output of $at ends with:" >&2
            tail -n 15 "$out" | sed 's/^/    /' >&2
        else
            echo "check-book: ok   $at"
        fi
    done
done

echo "check-book: $n_run blocks run, $n_figures figures checked, $n_skip skipped, $n_fail failed"
[ "$n_fail" = 0 ]
