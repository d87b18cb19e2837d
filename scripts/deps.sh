#!/bin/sh
# Installs the Debian packages kvlab needs that are missing, and says so.
#   scripts/deps.sh check pkg-config doxygen gnuplot-nox
set -eu
missing=""
for pkg in "$@"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing="$missing $pkg"
done
[ -z "$missing" ] && exit 0
echo "kvlab: installing missing Debian packages:$missing" >&2
if [ "$(id -u)" -eq 0 ]; then sudo=""; else sudo="sudo"; fi
$sudo apt-get update -qq >&2
# An install cut off earlier blocks every new one until dpkg finishes it.
$sudo env DEBIAN_FRONTEND=noninteractive dpkg --configure -a >&2
# shellcheck disable=SC2086
$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >&2
