#!/bin/sh
# Bad models of the reductions, adaptive max pools, group and instance
# norms and drop_path (tests/bad/models/reduce_*.yaml): `dlrun infer` exits
# 2 with exactly one 'dlrun: ' line naming FILE:LINE:COL and what is wrong,
# writes nothing on stdout and creates no output file. Then a model with
# argmax trains (its backward passes no gradient), and drop_path is the
# identity through `dlrun infer`. Prints TAP.
#
# Environment: see tests/lib.sh.

# shellcheck source=tests/lib.sh
. "${srcdir:-$(dirname "$0")/..}/tests/lib.sh"

models=$srcdir/tests/bad/models

# t_bad and bad_model: tests/lib.sh

: >"$tmp/unused.safetensors"
# vals N: N values that f4 can write
vals() {
	awk -v n="$1" 'BEGIN { split("1 -0.5 2 0 -3 1.5", a, " ")
		for (i = 0; i < n; i++) printf "%s ", a[i % 6 + 1] }'
}
# shellcheck disable=SC2046 # the values are words on purpose
npy_f4 '(1, 3, 4)' $(vals 12) >"$tmp/x34.npy"
npy_f4 '(1, 4)' 1 2 3 4 >"$tmp/x4.npy"
# shellcheck disable=SC2046
npy_f4 '(1, 3, 8)' $(vals 24) >"$tmp/x38.npy"
# shellcheck disable=SC2046
npy_f4 '(1, 6, 5)' $(vals 30) >"$tmp/x65.npy"
# shellcheck disable=SC2046
npy_f4 '(1, 2, 3, 4)' $(vals 24) >"$tmp/x234.npy"

bad_model reduce_sum_batch_dim.yaml "$tmp/x34.npy" 4:11: "sum: dim 0 is the batch dimension"
bad_model reduce_max_batch_neg.yaml "$tmp/x34.npy" 4:11: "max: dim -3 is the batch dimension"
bad_model reduce_min_out_of_range.yaml "$tmp/x34.npy" 4:11: "min: dim 3 is out of range" \
	"-3 to 2"
bad_model reduce_sum_no_dim.yaml "$tmp/x34.npy" 5:5: "sum: missing hyperparameter 'dim'"
bad_model reduce_argmax_list.yaml "$tmp/x34.npy" 4:19: "argmax: dim must be a decimal integer"
bad_model reduce_group_norm_groups.yaml "$tmp/x65.npy" 4:18: \
	"group_norm: num_groups 4 does not divide the input's 6 channels"
bad_model reduce_instance_norm_rank.yaml "$tmp/x38.npy" 5:5: \
	"instance_norm2d: expects a [N, C, H, W] input, got [1, 3, 8]"
bad_model reduce_instance_norm1d_rank.yaml "$tmp/x234.npy" 4:5: \
	"instance_norm1d: expects a [N, C, L] input, got [1, 2, 3, 4]" \
	"instance_norm2d takes [N, C, H, W]"
bad_model reduce_adaptive_max_rank.yaml "$tmp/x38.npy" 4:5: \
	"adaptive_max_pool2d: expects a [N, C, H, W] input, got [1, 3, 8]"
bad_model reduce_drop_path_p.yaml "$tmp/x4.npy" 4:17: "drop_path: p is 1.5" \
	"between 0 and 1"

# A classifier that also outputs its argmax trains: argmax passes no
# gradient, and the loss reads the logits.
t_train_argmax() {
	cat >"$tmp/am.yaml" <<'YAML'
inputs:
  x: {shape: [4]}
outputs: [logits, pick]
layers:
  - linear: {out_features: 8}
  - drop_path: {p: 0.25}
  - relu
  - name: logits
    linear: {out_features: 3}
  - name: pick
    argmax: {dim: 1}
YAML
	run_dlrun gradcheck "$tmp/am.yaml"
	expect_rc 0
	return 0
}
check "gradcheck: a model with argmax and drop_path" t_train_argmax

# Stochastic depth on a residual branch trains on the digits: the last
# epoch's validation accuracy is above 85%, and the same seed gives the
# same weights (the draws come from the run's RNG stream).
t_train_drop_path() {
	cat >"$tmp/dp.yaml" <<'YAML'
inputs:
  x: {shape: [64]}
layers:
  - linear: {out_features: 32}
  - relu
  - residual: [linear: {out_features: 32}, relu, drop_path: {p: 0.3}]
  - linear: {out_features: 10}
YAML
	for _run in 1 2; do
		run_dlrun train "$tmp/dp.yaml" --data "$srcdir/models/data/digits.npz" \
			--epochs 5 --seed 1 --optimizer adam --lr 0.003 \
			-o "$tmp/dp$_run.safetensors" --log "$tmp/dp$_run.jsonl"
		expect_rc 0
	done
	same_bytes "$tmp/dp1.safetensors" "$tmp/dp2.safetensors"
	_acc=$(tail -n 1 "$tmp/dp1.jsonl" | sed -n 's/.*"val_accuracy":\([0-9.]*\).*/\1/p')
	[ -n "$_acc" ] || fail "no val_accuracy in the log: $(tail -n 1 "$tmp/dp1.jsonl")"
	awk -v a="$_acc" 'BEGIN { exit !(a > 0.85) }' ||
		fail "validation accuracy $_acc, expected above 0.85"
	return 0
}
check "train: drop_path on a residual branch learns the digits, reproducibly" \
	t_train_drop_path

done_testing
exit 0
