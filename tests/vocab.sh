#!/bin/sh
# The model's `vocab:` key (dlrun-model(5) section 1), printing TAP: each
# form loads (bytes, a list, a file with escapes relative to the model
# file, the mapping form with eos/bos), and each bad vocabulary is one
# error line with its file:line:col and exit 2. (Encoding, longest match
# and UTF-8 are tested at C level in tests/check_vocab.c.)
#
# Environment: see tests/lib.sh.

# shellcheck source=tests/lib.sh
. "${srcdir:-$(dirname "$0")/..}/tests/lib.sh"

mkdir "$tmp/m"
# model V VOCAB [SHAPE]: a character model with V logits and the given
# vocab: value in $tmp/m/m.yaml; SHAPE (default T) its token input's length
model() {
	cat >"$tmp/m/m.yaml" <<EOF
inputs: {idx: {shape: [${3:-T}], dtype: int}}
vocab: $2
layers:
  - embedding: {num_embeddings: $1, embedding_dim: 4}
  - linear: {out_features: $1}
EOF
}

# loads: dlrun summary accepts the model (run from elsewhere, so a
# vocab file is found relative to the model file)
loads() {
	cd "$tmp" || return 1
	run_dlrun summary "$tmp/m/m.yaml" --input-shape idx=4
	cd - >/dev/null || return 1
	expect_rc 0
}

# refused LINE:COL: NEEDLE...: dlrun summary exits 2 with one error line
# naming LINE:COL (of the model file, or with the file's name in it)
# and each NEEDLE
refused() {
	_r_where=$1
	shift
	_r_n="$_r_where"
	for _r in "$@"; do
		_r_n="$_r_n
$_r"
	done
	cd "$tmp" || return 1
	run_dlrun summary "$tmp/m/m.yaml" --input-shape idx=4
	cd - >/dev/null || return 1
	expect_rc 2
	expect_error_line "$_r_n"
}

t_bytes() { model 256 bytes && loads; }
t_list() { model 4 '["\n", " ", a, b]' && loads; }
t_file() {
	printf 'a\n\\n\n\\t\n\\\\\nab\n' >"$tmp/m/vocab.txt"
	model 5 '{file: vocab.txt}' && loads
}
t_mapping() {
	model 3 '{tokens: [a, b, c], eos: 2, bos: 0}' && loads || return 1
	model 256 '{bytes: true, eos: 0}' && loads || return 1
	printf 'x\ny\n' >"$tmp/m/v2.txt"
	model 2 '{file: v2.txt, bos: 1}' && loads
}
check "vocab: bytes" t_bytes
check "vocab: a list of strings" t_list
check "vocab: {file: ...} relative to the model, with escapes" t_file
check "vocab: the mapping form with eos and bos" t_mapping

t_bad_escape() {
	printf 'a\nb\\qc\n' >"$tmp/m/vocab.txt"
	model 3 '{file: vocab.txt}'
	refused "m/vocab.txt:2:2:" "unknown escape '\\q'"
}
t_empty_line() {
	printf 'a\n\nb\n' >"$tmp/m/vocab.txt"
	model 3 '{file: vocab.txt}'
	refused "m/vocab.txt:2:1:" "an empty line"
}
t_missing_file() {
	rm -f "$tmp/m/vocab.txt"
	model 3 '{file: vocab.txt}'
	refused "m.yaml:2:15:" "vocab: cannot open the vocabulary file" "vocab.txt"
}
t_eos_range() {
	model 3 '{tokens: [a, b, c], eos: 3}'
	refused "m.yaml:2:33:" "eos: 3 is outside the vocabulary (ids 0 to 2)"
}
t_bos_range() {
	model 256 '{bytes: true, bos: -1}'
	refused "m.yaml:2:27:" "bos: -1 is outside the vocabulary"
}
t_wrong_size() {
	model 5 '[a, b, c]' 8
	refused "m.yaml:2:8:" "vocab: 3 tokens, but the logits" "have 5 on their last dimension"
}
t_unknown_key() {
	model 3 '{tokens: [a, b, c], eso: 1}'
	refused "m.yaml:2:28:" "unknown key 'eso'; did you mean 'eos'?"
}
t_bad_scalar() {
	model 3 'chars'
	refused "m.yaml:2:8:" "vocab: is bytes, a list of tokens, or a mapping"
}
t_empty_token() {
	model 3 '[a, "", c]'
	refused "m.yaml:2:12:" "token 1 is empty"
}
t_two_forms() {
	model 256 '{bytes: true, tokens: [a]}'
	refused "m.yaml:2:8:" "give one of tokens:"
}
check "a bad escape in the vocabulary file: file:line:col" t_bad_escape
check "an empty line in the vocabulary file" t_empty_line
check "a missing vocabulary file" t_missing_file
check "eos out of range" t_eos_range
check "bos out of range" t_bos_range
check "the vocabulary's size differs from the logits'" t_wrong_size
check "an unknown key of the mapping form" t_unknown_key
check "a scalar other than bytes" t_bad_scalar
check "an empty token" t_empty_token
check "two forms at once" t_two_forms

done_testing
