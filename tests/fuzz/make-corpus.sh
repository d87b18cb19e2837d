#!/bin/sh
# Makes the seed corpora of the fuzz targets in tests/fuzz/corpus/, from the
# project's own tools and files (run after `make`; the output is committed):
#
#   tests/fuzz/make-corpus.sh [BUILD]      (default build)
#
#   model/      tiny checkpoints from build/synth-model (legacy and ak42,
#               shared and unshared classifier, GQA), and truncations of them;
#               two GGUF models (from build/fuzz/make-seeds)
#   tokenizer/  a synthetic tokenizer (build/synth-model --tokenizer-out) with
#               prompts of data/ in front, in fuzz_tokenizer.c's layout
#   requests/   data/requests-*.tsv, a CRLF copy, comments and blank lines,
#               arrivals in seconds and in steps
#   numbers/    every number and size in the programs' --help texts, and a
#               few command lines built from them
#   chat/       chat templates: SmolLM2's and Qwen's layouts, escapes, none,
#               not ChatML, and small worst cases of the system message scan
#   gguf/, bpe/ GGUF models of every weight type and a byte-level BPE
#               tokenizer (build/fuzz/make-seeds, tests/fuzz/make-seeds.c,
#               with the project's GGUF writer); where the tree has no GGUF
#               code yet, the committed ones are kept
#
# The same build gives the same bytes: synth-model is deterministic.
set -eu
BUILD=${1:-build}
OUT=tests/fuzz/corpus
for tool in synth-model ch03-batching ch04-paged kvsim kvcalc; do
    [ -x "$BUILD/$tool" ] || { echo "make-corpus: $BUILD/$tool is missing; run make first" >&2; exit 1; }
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# ---------------------------------------------------------------- model
mkdir -p "$OUT/model" && rm -f "$OUT"/model/*.bin
tiny="--dim 8 --hidden-dim 16 --layers 1 --heads 2 --kv-heads 1 --vocab 8 --seq-len 4"
# shellcheck disable=SC2086
"$BUILD/synth-model" $tiny --out "$OUT/model/legacy-shared.bin" 2>/dev/null
# shellcheck disable=SC2086
"$BUILD/synth-model" $tiny --unshared-classifier --out "$OUT/model/legacy-unshared.bin" 2>/dev/null
# shellcheck disable=SC2086
"$BUILD/synth-model" $tiny --format ak42 --out "$OUT/model/ak42-shared.bin" 2>/dev/null
# shellcheck disable=SC2086
"$BUILD/synth-model" $tiny --format ak42 --unshared-classifier --out "$OUT/model/ak42-unshared.bin" 2>/dev/null
"$BUILD/synth-model" --dim 16 --hidden-dim 8 --layers 2 --heads 4 --kv-heads 2 --vocab 5 --seq-len 2 \
    --out "$OUT/model/legacy-gqa-2layers.bin" 2>/dev/null
head -c 28 "$OUT/model/legacy-shared.bin" > "$OUT/model/legacy-header-only.bin"
head -c 256 "$OUT/model/ak42-shared.bin" > "$OUT/model/ak42-header-only.bin"
size=$(wc -c < "$OUT/model/legacy-unshared.bin")
head -c $((size - 4)) "$OUT/model/legacy-unshared.bin" > "$OUT/model/legacy-truncated.bin"

# ---------------------------------------------------------------- tokenizer
# fuzz_tokenizer.c's layout: vocab_size - 1 as u16, text length as u16,
# the text, then the tokenizer file.
rm -rf "$OUT/tokenizer" && mkdir -p "$OUT/tokenizer"
"$BUILD/synth-model" --vocab 354 --out "$tmp/m.bin" --tokenizer-out "$tmp/tok354.bin" 2>/dev/null
"$BUILD/synth-model" --vocab 400 --out "$tmp/m.bin" --tokenizer-out "$tmp/tok400.bin" 2>/dev/null
u16() { printf "\\$(printf '%03o' $(($1 % 256)))\\$(printf '%03o' $(($1 / 256)))"; }
seed() { # name vocab text tokenizer-file
    { u16 $(($2 - 1)); u16 "$(printf '%s' "$3" | wc -c)"; printf '%s' "$3"; cat "$4"; } > "$OUT/tokenizer/$1"
}
seed empty-text 354 "" "$tmp/tok354.bin"
seed once-upon-a-time 354 "Once upon a time" "$tmp/tok354.bin"
seed merges 400 "the cat sat on the mat" "$tmp/tok400.bin"
seed utf8 400 "$(printf 'caf\303\251 \342\202\254 \360\237\230\200')" "$tmp/tok400.bin"
seed invalid-utf8 354 "$(printf 'a\377b\300\200c\355\240\200')" "$tmp/tok354.bin"
n=0
grep -hv '^#' data/requests-*.tsv | cut -f2 | head -n 6 | while IFS= read -r prompt; do
    n=$((n + 1))
    seed "prompt-$n" 400 "$prompt" "$tmp/tok400.bin"
done
size=$(wc -c < "$tmp/tok354.bin")
head -c $((size / 2)) "$tmp/tok354.bin" > "$tmp/half.bin"
seed truncated-file 354 "Hi" "$tmp/half.bin"

# ---------------------------------------------------------------- requests
rm -rf "$OUT/requests" && mkdir -p "$OUT/requests"
for f in data/requests-*.tsv; do
    cp "$f" "$OUT/requests/$(basename "$f")"
done
sed 's/$/\r/' data/requests-short.tsv > "$OUT/requests/crlf.tsv"
printf '# a comment\n\n   \n  # indented\n3\tThe cat\tsat\n' > "$OUT/requests/comments.tsv"
printf '1\tHi' > "$OUT/requests/no-final-newline.tsv"
printf '# arrivals in seconds\n@0s\t16\tOnce upon a time\n@0.25s\t8\tThe cat\n@1.5e0s\t4\tA dog\n' \
    > "$OUT/requests/arrivals-seconds.tsv"
printf '@0\t16\tOnce upon a time\n@3\t8\tThe cat\n@3\t4\tA dog\n' > "$OUT/requests/arrivals-steps.tsv"

# ---------------------------------------------------------------- numbers
rm -rf "$OUT/numbers" && mkdir -p "$OUT/numbers"
for tool in ch04-paged ch03-batching kvsim kvcalc synth-model; do
    "$BUILD/$tool" --help
done | tr -s ' \t(),;=' '\n' | grep '[0-9]' | grep -v '[^0-9a-zA-Z.:+-]' | sort -u | head -n 60 > "$tmp/words"
i=0
while IFS= read -r w; do
    i=$((i + 1))
    printf '%s' "$w" > "$OUT/numbers/help-$i"
done < "$tmp/words"
printf -- '--steps\0002\000--seed\00018446744073709551615' > "$OUT/numbers/argv-steps-seed"
printf -- '--kv-budget\0001.5GiB\000--block-size\00016\000--n\0004\000--temperature\0000.8' > "$OUT/numbers/argv-paged"
printf -- '--threads\0000\000--top-p\000.9\000--watermark\00050' > "$OUT/numbers/argv-threads"
printf -- '--top-k\00040\000--min-p\0000.05\000--repetition-penalty\0001.2\000--frequency-penalty\000-2\000--presence-penalty\0002' > "$OUT/numbers/argv-sampling"
# ---------------------------------------------------------------- chat
# Chat templates (fuzz_chat.c): SmolLM2's layout, Qwen's (a variable before
# the default), escapes, no system message, not ChatML, and a scan's worst
# cases in small.
rm -rf "$OUT/chat" && mkdir -p "$OUT/chat"
printf "%s" "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system
You are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>
' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}" \
    > "$OUT/chat/smollm2"
printf "%s" "{% if messages[0]['role'] == 'system' %}{{ '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}{% else %}{{ '<|im_start|>system\nYou are a helpful assistant<|im_end|>\n' }}{% endif %}" \
    > "$OUT/chat/qwen"
printf "%s" "{{ '<|im_start|>system\nIt\\'s a \\\"test\\\"\\t\\\\<|im_end|>\n' }}" > "$OUT/chat/escapes"
printf "%s" "{% for m in messages %}{{'<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>\n'}}{% endfor %}" \
    > "$OUT/chat/no-system"
printf "%s" "{{ '<|start_header_id|>' + role + '<|end_header_id|>' }}" > "$OUT/chat/not-chatml"
printf "%s" "<|im_start|>system
a<|im_start|>system\nb<|im_start|>system
c'<|im_start|>system\nd<|im_end|>" > "$OUT/chat/broken-then-good"
printf "%s" "<|im_end|><|im_start|>system\n<|im_start|>system
<|im_start|>system\n" > "$OUT/chat/no-end"

# ---------------------------------------------------------------- gguf, bpe
if [ -f common/model/gguf_write.c ]; then
    make --no-print-directory build/fuzz/make-seeds >/dev/null
    rm -rf "$OUT/gguf" "$OUT/bpe" && rm -f "$OUT"/model/*.gguf
    mkdir -p "$OUT/gguf" "$OUT/bpe"
    build/fuzz/make-seeds "$OUT"
else
    echo "make-corpus: no GGUF writer in this tree; the committed gguf/ and bpe/ seeds are kept" >&2
fi
echo "make-corpus: $(find "$OUT" -type f | wc -l) files in $OUT"
