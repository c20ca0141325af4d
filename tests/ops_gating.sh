#!/bin/sh
# Bad models of the sequence and gating ops (tests/bad/models/sequence_*.yaml
# and gating_*.yaml): `dlrun infer` exits 2 with exactly one 'dlrun: ' line
# naming FILE:LINE:COL and what is wrong, writes nothing on stdout and
# creates no output file. Prints TAP.
#
# Environment: see tests/lib.sh.

# shellcheck source=tests/lib.sh
. "${srcdir:-$(dirname "$0")/..}/tests/lib.sh"

models=$srcdir/tests/bad/models

# t_bad and bad_model: tests/lib.sh

: >"$tmp/unused.safetensors"
npy_f4 '(1, 4)' 1 2 3 4 >"$tmp/x4.npy"
# a sequence of 6 positions, for a model whose length is symbolic
# shellcheck disable=SC2046 # 24 zeros
npy_f4 '(1, 6, 4)' $(i=0; while [ $i -lt 24 ]; do echo 0; i=$((i + 1)); done) \
	>"$tmp/t6.npy"

bad_model sequence_pe_too_long.yaml "$tmp/x4.npy" 4:27: "positional_encoding" \
	"6 positions but max_len is 5"
bad_model sequence_pe_too_long_symbolic.yaml "$tmp/t6.npy" 4:42: \
	"positional_encoding" "6 positions but max_len is 5"
bad_model sequence_pe_learned_no_max_len.yaml "$tmp/x4.npy" 5:27: \
	"positional_encoding" "learned needs max_len"
bad_model sequence_embedding_no_dim.yaml "$tmp/x4.npy" 4:5: "embedding" \
	"missing hyperparameter 'embedding_dim'"
bad_model sequence_embedding_padding_idx.yaml "$tmp/x4.npy" 4:54: "embedding" \
	"padding_idx is 5"
bad_model gating_spatial_odd.yaml "$tmp/x4.npy" 4:5: "spatial_gating" \
	"5 channels" "even"
bad_model gating_graph_conv_adj.yaml "$tmp/x4.npy" 6:5: "graph_conv" \
	"adjacency input has shape [1, 4, 3]" "[1, 4, 4]"

# dlrun init zeroes embedding's padding_idx row, as nn.Embedding does: the
# padding id then reads as zeros through `dlrun infer`
t_padding_init() {
	cat >"$tmp/emb.yaml" <<'YAML'
inputs:
  t: {shape: [2], dtype: int}
layers:
  - embedding: {num_embeddings: 5, embedding_dim: 3, padding_idx: -2}
YAML
	run_dlrun init "$tmp/emb.yaml" -o "$tmp/emb.safetensors" --seed 4
	expect_rc 0
	# ids 3 (the padding row) and 1, as text rows
	printf '3 1\n' >"$tmp/ids.txt"
	run_dlrun infer "$tmp/emb.yaml" -w "$tmp/emb.safetensors" --format text \
		-i "$tmp/ids.txt"
	expect_rc 0
	set -- $(cat "$tmp/stdout")
	[ $# -eq 6 ] || fail "6 values expected, got: $*"
	for _v in "$1" "$2" "$3"; do
		[ "$_v" = 0 ] || fail "the padding row is $1 $2 $3, not zeros"
	done
	[ "$4 $5 $6" != "0 0 0" ] || fail "row 1 is zeros too"
	return 0
}
check "init: embedding's padding_idx row is zeros" t_padding_init

done_testing
exit 0
