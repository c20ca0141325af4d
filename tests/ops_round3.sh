#!/bin/sh
# The round-3 ops of the model format (where, eq, ne, lt, le, gt, ge,
# logical_not, logical_and, logical_or, expand, tile, triu, tril, topk and
# upsample's size_of): `dlrun ops` lists them with their hyperparameters and
# defaults; bad models (tests/bad/models/round3_*.yaml) make `dlrun infer`
# exit 2 with exactly one 'dlrun: ' line naming FILE:LINE:COL and what is
# wrong, nothing on stdout and no output file; a nanoGPT-style causal mask
# built from data (tril of a ones parameter, eq with 0, where to -inf, into
# attention's float mask) trains, its mask parameters untouched. Their
# values are checked against PyTorch by tests/fixtures/round3
# (tests/fixtures.sh) and, trained, tests/data/train_parity/causal_mask
# (tests/train.sh), their gradients by tests/data/round3
# (tests/check_round3.c) and tests/data/gradcheck/round3_*.yaml
# (tests/train.sh). Prints TAP.
#
# Environment: see tests/lib.sh.

# shellcheck source=tests/lib.sh
. "${srcdir:-$(dirname "$0")/..}/tests/lib.sh"

models=$srcdir/tests/bad/models

# ---- dlrun ops ----

# t_ops_line LINE: `dlrun ops` prints LINE as one of its lines
t_ops_line() {
	run_dlrun ops
	expect_rc 0
	grep -x -F -e "$1" "$tmp/stdout" >/dev/null ||
		fail "dlrun ops has no line '$1'"
	return 0
}
for l in where eq ne lt le gt ge logical_not logical_and logical_or \
	"expand shape=none" "tile repeats" "triu diagonal=0" "tril diagonal=0" \
	"topk k dim=-1 largest=true sorted=true" \
	"upsample scale_factor=none mode=nearest align_corners=false size_of=none"; do
	check "dlrun ops lists '$l'" t_ops_line "$l"
done

# ---- bad models ----

# t_bad and bad_model: tests/lib.sh

bad_model round3_where_bcast.yaml 7:5: "where: input 1 has shape [1, 4] and input 2 has shape [1, 2, 2]" \
	"do not broadcast"
bad_model round3_where_inputs.yaml 5:5: "where: takes 3 inputs, got 2"
bad_model round3_lt_bcast.yaml 7:5: "lt: input 1 has shape [1, 4]" "do not broadcast"
bad_model round3_eq_inputs.yaml 10:5: "eq: takes 2 inputs, got 3"
bad_model round3_topk_k.yaml 4:12: "topk: k 5 is larger than dimension 1 of the input [1, 4] (size 4)"
bad_model round3_topk_batch_dim.yaml 4:18: "topk: dim 0 is the batch dimension"
bad_model round3_topk_output.yaml 6:9: "'t.2': 't' has 2 outputs"
bad_model round3_tril_diagonal_type.yaml 5:22: "tril: diagonal must be a decimal integer, got '0.5'"
bad_model round3_triu_rank.yaml 4:5: "triu: expects an input [N, ..., R, C]" "got [1, 4]"
bad_model round3_expand_size.yaml 4:14: "expand: cannot expand the input [1, 4] to [1, 3, 2]" \
	"neither 1 nor 2"
bad_model round3_expand_new_wild.yaml 4:14: "expand: shape[0] is -1, but that dimension is new"
bad_model round3_expand_none.yaml 4:5: "expand: needs shape: [...] or a second input"
bad_model round3_tile_short.yaml 5:12: "tile: repeats has 1 values but the input [1, 2, 2] has 2"
bad_model round3_tile_negative.yaml 4:22: "tile: repeats must not be negative"
bad_model round3_upsample_both.yaml 6:33: "upsample: needs exactly one of scale_factor and size_of"
bad_model round3_upsample_size_of_undefined.yaml 6:25: \
	"upsample: size_of 'imgg' is not defined before this entry; did you mean 'img'?"
bad_model round3_upsample_size_of_list.yaml 5:25: \
	"upsample: size_of must be the name of an input or an earlier entry"
bad_model round3_upsample_size_of_rank.yaml 6:16: \
	"upsample: size_of names an entry of shape [1, 4], but the input is [1, 1, 2, 2]"

# ---- training through a mask built from data ----

# A causal self-attention whose mask is nanoGPT's: the lower triangle of a
# ones parameter, compared with 0, turned into -inf by where. Its weights
# (tests/fixtures/round3/causal_mask, checked against PyTorch there) train
# with Adam: the loss goes down and stays finite, and the mask's own
# parameters, which get no gradient through eq, keep their values.
t_train_causal() {
	_d=$srcdir/tests/fixtures/round3/causal_mask
	sed 's/^outputs: \[y, z\]$/outputs: [y]/' "$_d/model.yaml" >"$tmp/causal.yaml"
	_vals="0 0.25 0.5 1 1.5 2 -0.25 -0.5 -1 -1.5 -2 3"
	# shellcheck disable=SC2046,SC2086 # 8 samples of [5, 4], twice
	npy_f4 '(8, 5, 4)' $(echo $_vals | awk '{ for (i = 0; i < 160; i++)
		print $((i * 7) % NF + 1) }') >"$tmp/cx.npy"
	# shellcheck disable=SC2046,SC2086
	npy_f4 '(8, 5, 4)' $(echo $_vals | awk '{ for (i = 0; i < 160; i++)
		print $((i * 5 + 3) % NF + 1) }') >"$tmp/cy.npy"
	run_dlrun train "$tmp/causal.yaml" -w "$_d/model.safetensors" \
		--data "$tmp/cx.npy" --labels "$tmp/cy.npy" --loss mse \
		--optimizer adam --lr 0.01 --epochs 20 --batch-size 4 --no-shuffle \
		--log "$tmp/log.jsonl" -o "$tmp/causal.safetensors" -q
	expect_rc 0
	[ -s "$tmp/causal.safetensors" ] || fail "no trained weights written"
	_first=$(sed -n '1s/.*"loss":\([^,}]*\).*/\1/p' "$tmp/log.jsonl")
	_last=$(sed -n '$s/.*"loss":\([^,}]*\).*/\1/p' "$tmp/log.jsonl")
	awk -v a="$_first" -v b="$_last" 'BEGIN { exit !(b < a && b == b + 0) }' ||
		fail "the loss did not go down: first $_first, last $_last"
	# the mask's output is the same with the trained weights
	# shellcheck disable=SC2046,SC2086
	npy_f4 '(1, 5, 4)' $(echo $_vals | awk '{ for (i = 0; i < 20; i++)
		print $((i * 3) % NF + 1) }') >"$tmp/probe.npy"
	sed 's/^outputs: \[y, z\]$/outputs: [mask]/' "$_d/model.yaml" >"$tmp/mask.yaml"
	run_dlrun infer "$tmp/mask.yaml" -w "$tmp/causal.safetensors" <"$tmp/probe.npy"
	expect_rc 0
	cp "$tmp/stdout" "$tmp/mask_trained.npy"
	run_dlrun infer "$tmp/mask.yaml" -w "$_d/model.safetensors" <"$tmp/probe.npy"
	expect_rc 0
	same_bytes "$tmp/stdout" "$tmp/mask_trained.npy"
	return 0
}
check "train: a causal mask built from data (tril, eq, where -inf) into attention" \
	t_train_causal

done_testing
exit 0
