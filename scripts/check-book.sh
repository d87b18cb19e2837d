#!/usr/bin/env bash
# check-book: run every command the book quotes in a checked block and check
# the figures it quotes (make check-book).
#
#   scripts/check-book.sh [PAGE.md ...]     default: every book/*.md
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
# time limit (BOOK_TIMEOUT seconds, default 120). Once a page has one checked
# block, every ```sh block of that page must be checked: a page never quotes
# a command that nothing runs. Pages without checked blocks are left alone.
#
# Exit status: 0 when every checked block ran and printed its figures, 1
# otherwise (each failure says page:line, the figure, and the output's tail).
set -uo pipefail
cd "$(dirname "$0")/.."

timeout_s=${BOOK_TIMEOUT:-120}
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
