#!/bin/sh
# The pointwise ops of the model format's "Also" list (relu6, hardswish,
# hardsigmoid, elu, selu, mish, exp, log, sqrt, abs, neg, clamp, scale),
# positional_encoding's mode: concat and graph_conv on [N, ..., V, F]:
# `dlrun ops` lists them with their hyperparameters and defaults; bad models
# (tests/bad/models/pointwise_*.yaml) make `dlrun infer` exit 2 with exactly
# one 'dlrun: ' line naming FILE:LINE:COL and what is wrong, nothing on
# stdout and no output file; a model of them trains. Their values are
# checked by tests/fixtures/pointwise (tests/fixtures.sh), their gradients
# by tests/data/gradcheck/pointwise_*.yaml (tests/train.sh). Prints TAP.
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
for l in relu6 hardswish hardsigmoid "elu alpha=1.0" selu mish exp log sqrt \
	abs neg "clamp min=none max=none" "scale factor=1 shift=0"; do
	check "dlrun ops lists '$l'" t_ops_line "$l"
done

t_ops_posenc() {
	run_dlrun ops
	expect_rc 0
	expect_stdout_has "positional_encoding kind=sinusoidal max_len=none base=10000 mode=add dim=inferred"
	run_dlrun ops positional_encoding
	expect_rc 0
	expect_stdout_has "mode=add (add|concat)"
	expect_stdout_has "weight [max_len, dim]"
}
check "dlrun ops: positional_encoding's mode and dim" t_ops_posenc

# ---- bad models ----

# t_bad and bad_model: tests/lib.sh

: >"$tmp/unused.safetensors"
npy_f4 '(1, 4)' 1 2 3 4 >"$tmp/x4.npy"

bad_model pointwise_clamp_min_gt_max.yaml 4:13: "clamp" \
	"min 2 is greater than max 1"
bad_model pointwise_clamp_no_bound.yaml 5:5: "clamp" "needs min, max or both"
bad_model pointwise_clamp_quoted.yaml 4:18: "clamp" "min is quoted ('0.5')"
bad_model pointwise_elu_unknown_hparam.yaml 4:11: "elu" \
	"unknown hyperparameter 'alhpa'; did you mean 'alpha'?"
bad_model pointwise_relu6_hparam.yaml 4:13: "relu6" \
	"unknown hyperparameter 'max_value'; relu6 takes none"
bad_model pointwise_scale_factor_type.yaml 4:21: "scale" \
	"factor must be a number, got 'two'"
bad_model pointwise_posenc_dim_add.yaml 4:38: "positional_encoding" \
	"dim is 3 but the input [1, 6, 4] has 4 channels" "mode: concat"
bad_model pointwise_posenc_mode.yaml 4:33: "positional_encoding" \
	"mode must be one of add|concat"
bad_model pointwise_posenc_dim_zero.yaml 4:46: "positional_encoding" \
	"dim must be positive"
bad_model pointwise_graph_conv_rank.yaml 6:5: "graph_conv" \
	"[N, V, F] or [N, ..., V, F]"
bad_model pointwise_graph_conv_adj_time.yaml 6:5: "graph_conv" \
	"adjacency input has shape [1, 5, 4, 4]" "[1, 4, 4]"

# ---- training ----

# A few steps of training through every new op lower the loss and keep it
# finite (the parameters before each op get their gradients through it).
t_train() {
	cat >"$tmp/pw.yaml" <<'YAML'
inputs:
  x: {shape: [3, 4]}
layers:
  - name: pe
    positional_encoding: {kind: learned, max_len: 3, mode: concat, dim: 2}
  - name: h
    linear: {out_features: 6}
  - name: a
    in: h
    mish: {}
  - name: b
    in: h
    hardswish: {}
  - name: c
    in: h
    elu: {alpha: 0.5}
  - name: d
    in: h
    clamp: {min: -1, max: 1}
  - name: e
    in: h
    selu: {}
  - name: s
    in: [a, b, c, d, e]
    add: {}
  - scale: {factor: 0.5, shift: 0.1}
  - flatten
  - linear: {out_features: 3}
YAML
	# 8 samples [3, 4] and float targets [3], mse, from values f4 can write
	_vals="0 0.25 0.5 1 1.5 2 3 -0.25 -0.5 -1 -1.5 -2 -3"
	# shellcheck disable=SC2046,SC2086 # 96 and 24 values
	npy_f4 '(8, 3, 4)' $(echo $_vals | awk '{ for (i = 0; i < 96; i++)
		print $((i * 7) % NF + 1) }') >"$tmp/px.npy"
	# shellcheck disable=SC2046,SC2086
	npy_f4 '(8, 3)' $(echo $_vals | awk '{ for (i = 0; i < 24; i++)
		print $((i * 5) % NF + 1) }') >"$tmp/py.npy"
	run_dlrun train "$tmp/pw.yaml" --data "$tmp/px.npy" --labels "$tmp/py.npy" \
		--loss mse --epochs 30 --batch-size 4 --lr 0.01 --no-shuffle \
		--log "$tmp/log.jsonl" -o "$tmp/pw.safetensors" -q
	expect_rc 0
	[ -s "$tmp/pw.safetensors" ] || fail "no trained weights written"
	_first=$(sed -n '1s/.*"loss":\([^,}]*\).*/\1/p' "$tmp/log.jsonl")
	_last=$(sed -n '$s/.*"loss":\([^,}]*\).*/\1/p' "$tmp/log.jsonl")
	awk -v a="$_first" -v b="$_last" 'BEGIN { exit !(b < a) }' ||
		fail "the loss did not go down: first $_first, last $_last"
	return 0
}
check "train: a model of the new ops lowers its loss" t_train

done_testing
exit 0
