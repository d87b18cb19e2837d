#!/usr/bin/env bash
# check-cycles: no call cycle between the files of one chapter (make check-layout).
#
#   scripts/check-cycles.sh NAME OBJ...
#
# OBJ are the objects of one chapter: its folder, its ext/ folder and its
# lab files. A file calls another when one of its undefined symbols is
# defined there (nm); the calls must form no cycle (tsort). A chapter's
# extensions call its core, and its core calls an extension only behind a
# guard (CONTRIBUTING.md, "Core and extensions"): a cycle means the core
# calls back into a file that calls it. Prints the files of a cycle and
# exits 1; exits 0 and prints nothing otherwise.
set -euo pipefail
name=$1
shift
declare -A home
for o in "$@"; do
    while read -r sym; do home[$sym]=$o; done < <(nm -g --defined-only "$o" | awk 'NF == 3 {print $3}')
done
edges=$(for o in "$@"; do
    for sym in $(nm -u "$o" | awk '{print $2}'); do
        t=${home[$sym]:-}
        if [ -n "$t" ] && [ "$t" != "$o" ]; then echo "$o $t"; fi
    done
done | sort -u)
[ -n "$edges" ] || exit 0
if ! loop=$(tsort <<<"$edges" 2>&1 >/dev/null); then
    echo "check-layout: $name: the files call each other in a cycle:" >&2
    grep -v 'input contains a loop' <<<"$loop" | sed 's/^tsort: /  /' >&2
    exit 1
fi
