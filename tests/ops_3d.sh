#!/bin/sh
# The 3-D ops (conv3d, conv_transpose3d, max_pool3d, avg_pool3d,
# adaptive_avg_pool3d, batch_norm3d) through the binary: bad models
# (tests/bad/models/ops3d_*.yaml) make `dlrun infer` exit 2 with one
# 'dlrun: ' line naming FILE:LINE:COL and what is wrong; `dlrun ops` lists
# them; `dlrun gradcheck` passes on a small network of all six; a network
# trains on tests/data/ops3d/train_*.npy (tools/gen_3d_fixtures.py) and
# its weights then run through `dlrun infer`. Their PyTorch parity is in
# tests/fixtures/ops3d (tests/fixtures.sh) and tests/data/ops3d
# (tests/check_conv.c). Prints TAP.
#
# Environment: see tests/lib.sh.

# shellcheck source=tests/lib.sh
. "${srcdir:-$(dirname "$0")/..}/tests/lib.sh"

data=$srcdir/tests/data/ops3d

: >"$tmp/unused.safetensors"
# vals N: N values that f4 can write
vals() {
	awk -v n="$1" 'BEGIN { split("1 -0.5 2 0 -3 1.5", a, " ")
		for (i = 0; i < n; i++) printf "%s ", a[i % 6 + 1] }'
}
# shellcheck disable=SC2046 # the values are words on purpose
npy_f4 '(1, 2, 4, 5)' $(vals 40) >"$tmp/x4d.npy"
# shellcheck disable=SC2046
npy_f4 '(1, 2, 5, 5)' $(vals 50) >"$tmp/x255.npy"
# shellcheck disable=SC2046
npy_f4 '(1, 2, 4, 5, 5)' $(vals 200) >"$tmp/x5d.npy"
# shellcheck disable=SC2046
npy_f4 '(1, 3, 4, 5, 5)' $(vals 300) >"$tmp/x3c.npy"
# shellcheck disable=SC2046
npy_f4 '(1, 2, 3, 3, 3)' $(vals 54) >"$tmp/x333.npy"

# t_bad and bad_model: tests/lib.sh
bad_model ops3d_conv3d_rank4.yaml "$tmp/x4d.npy" 4:5: \
	"conv3d: expects a [N, C, D, H, W] input, got [1, 2, 4, 5]"
bad_model ops3d_conv3d_kernel.yaml "$tmp/x5d.npy" 4:31: \
	"conv3d: kernel_size 3x8x3 is larger than the padded input 4x7x5"
bad_model ops3d_conv3d_groups.yaml "$tmp/x3c.npy" 4:47: \
	"conv3d: groups 2 does not divide in_channels 3"
bad_model ops3d_conv3d_pairs.yaml "$tmp/x5d.npy" 7:7: \
	"conv3d: padding has 2 [before, after] pairs; give 3"
bad_model ops3d_conv_transpose3d_outpad.yaml "$tmp/x333.npy" 4:76: \
	"conv_transpose3d: output_padding 1 must be smaller than the stride (1)"
bad_model ops3d_conv_transpose3d_same.yaml "$tmp/x333.npy" 4:57: \
	"conv_transpose3d: transposed convolutions take no 'same' or 'valid' padding"
bad_model ops3d_max_pool3d_kernel.yaml "$tmp/x5d.npy" 4:18: \
	"max_pool3d: kernel_size 3 with dilation spans 5 cells, more than the padded input 4x5x5"
bad_model ops3d_avg_pool3d_rank.yaml "$tmp/x255.npy" 4:5: \
	"avg_pool3d: expects a [N, C, D, H, W] input, got [1, 2, 5, 5]"
bad_model ops3d_adaptive_avg_pool3d_size.yaml "$tmp/x5d.npy" 4:27: \
	"adaptive_avg_pool3d: output_size has 2 values; give one, or 3"
bad_model ops3d_batch_norm3d_rank.yaml "$tmp/x255.npy" 4:5: \
	"batch_norm3d: expects a [N, C, D, H, W] input, got [1, 2, 5, 5]"

t_ops_list() {
	run_dlrun ops
	expect_rc 0
	for _l in \
		'conv3d out_channels kernel_size stride=1 padding=0 dilation=1 groups=1 bias=true' \
		'conv_transpose3d out_channels kernel_size stride=1 padding=0 dilation=1 groups=1 bias=true padding_mode=zeros output_padding=0' \
		'max_pool3d kernel_size stride=kernel_size padding=0 dilation=1 ceil_mode=false' \
		'avg_pool3d kernel_size stride=kernel_size padding=0 ceil_mode=false count_include_pad=true' \
		'adaptive_avg_pool3d output_size' \
		'batch_norm3d eps=1e-5 momentum=0.1 affine=true track_running_stats=true'; do
		grep -F "$_l" "$tmp/stdout" >/dev/null || fail "'dlrun ops' has no line '$_l'"
	done
	run_dlrun ops conv3d
	expect_rc 0
	grep -F 'weight [out_channels, in_channels/groups, kd, kh, kw]' "$tmp/stdout" >/dev/null ||
		fail "'dlrun ops conv3d' does not show the weight's shape"
	return 0
}
check "dlrun ops lists the 3-D ops with their defaults" t_ops_list

# Every op, non-default hyperparameters: padding pairs and 'same',
# stride, dilation, groups, output_padding, ceil_mode, count_include_pad.
cat >"$tmp/grad.yaml" <<'YAML'
inputs:
  x: {shape: [2, 4, 5, 4]}
layers:
  - conv3d: {out_channels: 3, kernel_size: [2, 3, 2], padding: [[1, 0], [1, 1], [0, 1]], stride: [1, 2, 1]}
  - batch_norm3d: {}
  - tanh
  - conv_transpose3d: {out_channels: 4, kernel_size: 2, stride: 2, padding: 1, output_padding: [1, 0, 1]}
  - conv3d: {out_channels: 2, kernel_size: 3, groups: 2, padding: same, dilation: [1, 2, 1]}
  - avg_pool3d: {kernel_size: 2, padding: 1, ceil_mode: true, count_include_pad: false}
  - max_pool3d: {kernel_size: [2, 1, 2], stride: 1}
  - adaptive_avg_pool3d: {output_size: [2, 1, 2]}
  - flatten: {}
  - linear: {out_features: 3}
YAML

t_gradcheck() {
	run_dlrun gradcheck "$tmp/grad.yaml" --seed 3
	expect_rc 0
	for _op in conv3d batch_norm3d conv_transpose3d; do
		grep -F "$_op" "$tmp/stdout" >/dev/null || fail "gradcheck does not report $_op"
	done
	return 0
}
check "gradcheck: a network of the 3-D ops" t_gradcheck

cat >"$tmp/train.yaml" <<'YAML'
inputs:
  x: {shape: [1, 4, 4, 4]}
layers:
  - conv3d: {out_channels: 4, kernel_size: 3, padding: 1}
  - batch_norm3d: {}
  - relu
  - max_pool3d: {kernel_size: 2}
  - conv_transpose3d: {out_channels: 2, kernel_size: 2, stride: 2}
  - avg_pool3d: {kernel_size: 2, stride: 1}
  - adaptive_avg_pool3d: {output_size: 1}
  - flatten: {}
  - linear: {out_features: 1}
YAML

# The regression of each volume's mean: the last epoch's loss is below a
# tenth of the first's, and the trained weights (with batch norm's running
# statistics) run through dlrun infer.
t_train() {
	run_dlrun train "$tmp/train.yaml" --data "$data/train_x.npy" \
		--labels "$data/train_y.npy" --loss mse --epochs 30 --batch-size 4 \
		--lr 0.01 --seed 1 -o "$tmp/trained.safetensors" --log "$tmp/train.jsonl"
	expect_rc 0
	_first=$(sed -n '1s/.*"loss":\([^,]*\),.*/\1/p' "$tmp/train.jsonl")
	_last=$(sed -n '$s/.*"loss":\([^,]*\),.*/\1/p' "$tmp/train.jsonl")
	awk -v a="$_first" -v b="$_last" 'BEGIN { exit !(a > 0 && b < a / 10) }' ||
		fail "loss went from '$_first' to '$_last'"
	run_dlrun infer "$tmp/train.yaml" -w "$tmp/trained.safetensors" <"$data/train_x.npy"
	expect_rc 0
	[ -s "$tmp/stdout" ] || fail "dlrun infer wrote nothing"
	return 0
}
check "train: a 3-D network learns, then infers with its running statistics" t_train

done_testing
