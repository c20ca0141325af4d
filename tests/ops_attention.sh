#!/bin/sh
# The attention ops (attention, multihead_attention) on bad models, printing
# TAP: each case (tests/bad/models/attention_*.yaml) must exit 2 with
# exactly one 'dlrun: ' line on stderr naming FILE:LINE:COL, nothing on
# stdout and no output file. Also: `dlrun ops` lists both with their
# defaults, and `dlrun init` weights run, with kdim / vdim, dconv and
# relative positions. The PyTorch references are tests/fixtures/attention
# (tools/gen_attention_fixtures.py, run by tests/fixtures.sh); the gradients
# are checked by tests/train.sh on tests/data/gradcheck/attention_*.yaml.
#
# Environment: see tests/lib.sh.

# shellcheck source=tests/lib.sh
. "${srcdir:-$(dirname "$0")/..}/tests/lib.sh"

models=$srcdir/tests/bad/models

npy_f4 '(1, 5, 6)' 1 2 3 0.5 -1 0 -2 1 0.25 1 -0.5 3 0 2 -1 \
	1 2 3 0.5 -1 0 -2 1 0.25 1 -0.5 3 0 2 -1 >"$tmp/x.npy"
: >"$tmp/empty.safetensors"
mkdir "$tmp/out"

# t_bad FILE LOC NEEDLE: `dlrun infer FILE -o OUT` fails to load with exit 2,
# one error line with FILE:LOC and NEEDLE, no stdout and no OUT
t_bad() {
	run_dlrun infer "$models/$1" -w "$tmp/empty.safetensors" \
		-o "$tmp/out/y.npy" <"$tmp/x.npy"
	expect_rc 2
	expect_one_error_line
	expect_stderr_has "$1:$2"
	expect_stderr_has "$3"
	[ -s "$tmp/stdout" ] && fail "stdout is not empty"
	only_files "$tmp/out"
	return 0
}

bad() {
	check "model $1: $2 $3" t_bad "$@"
}

bad attention_heads.yaml 4:27: "num_heads 4 does not divide embed_dim 6"
bad attention_additive_size.yaml 4:17: "the additive score needs attention_size"
bad attention_relpos_dot.yaml 4:29: "relative_positions applies to the scaled_dot score only"
bad attention_batch_first.yaml 4:41: "batch_first must be true"
bad attention_kv_length.yaml 7:5: "keys [1, 4, 6] and values [1, 3, 6] have different lengths"
bad attention_qk_size.yaml 6:5: "a dot-product score needs equal ones"
bad attention_fixed_summary.yaml 5:7: "fixed_summary is 3 but a fixed block has only 2 cells"
bad attention_rank.yaml 4:5: "attention needs sequences [N, T, D]"
bad attention_embed_dim.yaml 4:41: "embed_dim is 8 but the queries have 6 features"

# `dlrun ops` prints the defaults the man page documents
t_ops() {
	run_dlrun ops
	expect_rc 0
	expect_stdout_has "attention score=scaled_dot attention_size=none causal=false window=none dilation=1 global_tokens=0 random_keys=0 seed=0 stride=none fixed=none fixed_summary=1 relative_positions=0"
	expect_stdout_has "multihead_attention embed_dim=inferred num_heads dropout=0.0 bias=true kdim=inferred vdim=inferred batch_first=true dconv=0 causal=false window=none"
}
check "dlrun ops lists attention and multihead_attention" t_ops

# fresh weights (dlrun init) for a model with every kind of parameter run,
# and the output has the documented shape [N, T, E]
t_init() {
	cat >"$tmp/m.yaml" <<-YAML
	inputs:
	  x: {shape: [5, 6]}
	  k: {shape: [7, 3]}
	layers:
	  - name: a
	    in: [x, k, k]
	    multihead_attention: {num_heads: 2, dconv: 3, relative_positions: 2, causal: true}
	  - attention: {score: additive, attention_size: 4, window: 1}
	  - attention: {score: bilinear, stride: 2}
	  - attention: {relative_positions: 1, fixed: 2}
	  - multihead_attention: {num_heads: 3, random_keys: 2, global_tokens: 1}
	YAML
	run_dlrun init "$tmp/m.yaml" -o "$tmp/m.safetensors"
	expect_rc 0 || return 1
	printf '%s\n' '1 2 3 0.5 -1 0 -2 1 0.25 1 -0.5 3 0 2 -1 1 2 3 0.5 -1 0 -2 1 0.25 1 -0.5 3 0 2 -1' \
		'0 1 0 2 0 3 0 -1 0 -2 0 1 1 1 1 0 1 0 2 0 3 0 -1 0 -2 0 1 1 1 1' \
		>"$tmp/x.txt"
	printf '%s\n' '1 2 3 0.5 -1 0 -2 1 0.25 1 -0.5 3 0 2 -1 1 2 3 0.5 -1 0' \
		'0 1 0 2 0 3 0 -1 0 -2 0 1 1 1 1 0 1 0 2 0 3' >"$tmp/k.txt"
	run_dlrun infer "$tmp/m.yaml" -w "$tmp/m.safetensors" --format text \
		-i "x=$tmp/x.txt" -i "k=$tmp/k.txt"
	expect_rc 0 || return 1
	cols=$(awk '{ print NF }' "$tmp/stdout" | sort -u)
	[ "$cols" = 30 ] || fail "rows have $cols values, expected 30"
	[ "$(wc -l <"$tmp/stdout")" -eq 2 ] || fail "expected 2 rows"
}
check "dlrun init, then infer attention and multihead_attention" t_init

# `window` alone runs banded, in O(T * window) time and memory: 100000
# steps would need 40 GB as a T x T score matrix
t_long() {
	cat >"$tmp/long.yaml" <<-YAML
	inputs:
	  x: {shape: [100000, 4]}
	layers:
	  - multihead_attention: {num_heads: 2, window: 3, causal: true}
	  - attention: {window: 2, dilation: 3}
	YAML
	awk 'BEGIN { for (i = 0; i < 400000; i++)
		printf "%s%d", (i ? " " : ""), i % 7 - 3; print "" }' >"$tmp/long.txt"
	run_dlrun init "$tmp/long.yaml" -o "$tmp/long.safetensors"
	expect_rc 0 || return 1
	run_dlrun infer "$tmp/long.yaml" -w "$tmp/long.safetensors" \
		--format text <"$tmp/long.txt"
	expect_rc 0 || return 1
	cols=$(awk '{ print NF }' "$tmp/stdout")
	[ "$cols" = 400000 ] || fail "the row has $cols values, expected 400000"
}
check "window alone: 100000 steps without a T x T matrix" t_long

done_testing
