#!/bin/sh
# Bad inputs to `dlrun infer`, printing TAP: malformed or wrong models
# (tests/bad/models/*.yaml), weights, .npy and text inputs, and command lines.
# Each case asserts exit code 2, exactly one line on stderr starting
# 'dlrun: ' that says where (FILE:LINE:COL: for a model, the tensor for
# weights, the file for inputs), nothing on stdout, and that the output file
# named with -o was not created (nor any temporary file beside it or in the
# working directory).
#
# Environment: see tests/lib.sh.

# shellcheck source=tests/lib.sh
. "${srcdir:-$(dirname "$0")/..}/tests/lib.sh"

bad=$srcdir/tests/bad
models=$bad/models

# t_bad and bad_model: tests/lib.sh

# Inputs every case can use.
npy_f4 '(1, 4)' 1 2 3 4 >"$tmp/x4.npy"
npy_f4 '(1, 3)' 1 2 3 >"$tmp/x3.npy"
npy_f4 '(1, 2)' 1 -1 >"$tmp/x2.npy"
: >"$tmp/unused.safetensors"

# ---- models: YAML ----

bad_model unclosed_bracket.yaml 4:1: "malformed YAML"
bad_model bad_indent.yaml 6:6: "malformed YAML"
bad_model tab.yaml 2:1: "malformed YAML"
# layer_norm without its colon: the error is at its own line, however the
# hyperparameters below or beside it are written
bad_model layer_norm_no_colon.yaml 7:5: "'layer_norm' is missing its colon" \
	"write 'layer_norm:'"
bad_model layer_norm_no_colon_same_indent.yaml 5:5: "'layer_norm' is missing its colon"
bad_model layer_norm_no_colon_flow_below.yaml 5:5: "'layer_norm' is missing its colon"
bad_model layer_norm_no_colon_named.yaml 6:5: "'layer_norm' is missing its colon"
bad_model layer_norm_semicolon.yaml 5:5: "'layer_norm' is missing its colon"
bad_model layer_norm_no_colon_flow.yaml 5:5: "unknown op 'layer_norm {normalized_shape'" \
	"'layer_norm' is missing its colon; write 'layer_norm: {...}'"
bad_model layer_norm_no_colon_words.yaml 5:5: "'layer_norm' is missing its colon"

# An empty file has no position; 1:1 or none are both fine.
t_empty() {
	t_bad "$tmp/x4.npy" empty.yaml -- "$models/empty.yaml" \
		-w "$tmp/unused.safetensors"
	grep -E 'empty\.yaml(:1:1)?: ' "$tmp/stderr" >/dev/null ||
		fail "the error does not name empty.yaml"
	return 0
}
check "model empty.yaml: names the file" t_empty

bad_model top_list.yaml 1:1:
bad_model duplicate_key.yaml 5:1: "'layers'"
bad_model two_documents.yaml 7:1: "a second YAML document"

# ---- models: keys, ops and hyperparameters ----

# convolutions and pools (the vision issue's three)
bad_model conv_kernel_too_large.yaml 5:31: "conv2d" "kernel_size 3 is larger than the padded input 2x2"
bad_model conv_groups.yaml 5:47: "conv2d" "groups 2 does not divide"
bad_model conv_rank.yaml 4:5: "max_pool2d" "[N, C, H, W]"

# mixture_of_experts: k above num_experts; an error inside an expert's body
bad_model moe_k.yaml 6:7: "mixture_of_experts" "k 3 is more than num_experts 2"
bad_model moe_expert_error.yaml 7:20: "linear" "did you mean 'out_features'"
# noisy_gating and balance_loss: a boolean, a number >= 0
bad_model moe_balance_negative.yaml 7:21: "mixture_of_experts" "balance_loss must not be negative"
bad_model moe_noisy_not_bool.yaml 6:21: "mixture_of_experts" "noisy_gating must be true or false"

# transformer layers
bad_model transformer_nhead.yaml 4:33: "transformer_encoder_layer" "nhead 4 does not divide d_model 6"
bad_model transformer_batch_first.yaml 4:43: "batch_first is accepted only as true"
bad_model transformer_memory.yaml 6:5: "transformer_decoder_layer" "memory [1, 3, 5] does not fit"
bad_model transformer_d_model.yaml 4:43: "d_model is 8 but the input has 6 features"

bad_model unknown_top_key.yaml 3:1: "'layer'" "did you mean 'layers'"
bad_model missing_inputs.yaml 1:1: "inputs"
bad_model missing_layers.yaml 1:1: "layers"
bad_model input_unknown_key.yaml 2:7: "'shap'" "did you mean 'shape'"
bad_model input_dtype.yaml 2:26: "dtype"
bad_model zero_shape.yaml 2:18:
bad_model unknown_op.yaml 4:5: "'rleu'" "did you mean 'relu'"
bad_model unknown_hparam.yaml 4:14: "'out_feature'" "did you mean 'out_features'"
bad_model hparam_wrong_level.yaml 5:5: "out_features"
bad_model two_ops.yaml 5:5: "'relu'" "'tanh'"
bad_model type_string.yaml 4:28: "out_features" "ten"
bad_model type_float.yaml 4:28: "out_features" "1.5"
bad_model bool_yes.yaml 4:37: "bias"
bad_model octal.yaml 4:28: "out_features" "010"
bad_model hex.yaml 4:28: "out_features" "0x10"
bad_model negative_size.yaml 4:28: "out_features" "-3"
bad_model reshape_two_minus_one.yaml 4:15: "-1"
bad_model slice_step_zero.yaml 4:45: "step"
bad_model mean_no_dim.yaml 4:5: "dim"
bad_model softmax_dim_range.yaml 4:15: "dim"
bad_model transpose_batch.yaml 4:17: "dim0"

# ---- models: wiring, shapes and composites ----

bad_model undefined_in.yaml 5:13: "'nowhere'"
bad_model used_before_defined.yaml 4:13: "'later'"
bad_model duplicate_name.yaml 6:11: "'a'"
bad_model outputs_unknown.yaml 3:11: "'nope'"
bad_model shape_add.yaml 6:5: "[1, 4]" "[1, 5]"
bad_model linear_in_features.yaml 4:14: "in_features"
bad_model residual_size.yaml 4:5:
bad_model repeat_no_times.yaml 4:13: "times"
bad_model repeat_times_zero.yaml 4:21: "times"
bad_model unknown_block.yaml 6:10: "'mlp_blok'" "did you mean 'mlp_block'"
bad_model recursive_block.yaml 4:22: "'loop'"

# names, share:, shared repeats, parameter, ignore_keys (model-format.md
# sections 2 to 5)
bad_model name_digit_clash.yaml 4:11: "name '1' collides with entry 1" "'1.weight'"
bad_model name_underscore.yaml 4:11: "'_'"
bad_model share_unknown_key.yaml 6:21: "share" "'b.weight' is not a parameter of an earlier entry"
bad_model share_later.yaml 5:21: "share" "'b.weight'" "earlier"
bad_model share_shape.yaml 7:21: "share" "'a.weight' has shape [3, 4]" "[2, 3]"
bad_model share_no_param.yaml 6:13: "share" "'wieght'" "did you mean 'weight'"
bad_model share_composite.yaml 6:12: "share" "op entry"
bad_model repeat_shared_size.yaml 4:5: "repeat" "shared" "[3, 3]" "[3, 4]"
bad_model repeat_shared_bool.yaml 4:32: "shared"
bad_model parameter_in.yaml 5:9: "parameter takes no input"
bad_model parameter_no_shape.yaml 4:5: "parameter" "'shape'"
bad_model ignore_keys_type.yaml 1:14: "ignore_keys"

# ---- weights (model tests/bad/models/weights.yaml: 0.weight [2, 2],
# 0.bias [2]) ----

wmodel=$models/weights.yaml
W='"0.weight":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}'
B='"0.bias":{"dtype":"F32","shape":[2],"data_offsets":[16,24]}'

# st NAME JSON NBYTES: $tmp/NAME.safetensors with header JSON and NBYTES
# bytes of data (float 0.5s)
st() {
	{
		safetensors_header "$2"
		_k=0
		while [ "$_k" -lt "$3" ]; do
			printf '\000\000\000\077'
			_k=$((_k + 4))
		done | head -c "$3"
	} >"$tmp/$1.safetensors"
}

st good "{$W,$B}" 24
t_good_weights() {
	run_dlrun infer "$wmodel" -w "$tmp/good.safetensors" <"$tmp/x2.npy"
	expect_rc 0
	[ -s "$tmp/stdout" ] || fail "no output"
	return 0
}
check "control: the same model with well-formed weights runs" t_good_weights

# bad_weights NAME NEEDLE...: weights $tmp/NAME.safetensors are rejected with
# an error naming the file and each NEEDLE
bad_weights() {
	_n=$1
	shift
	check "weights $_n: $*" t_bad "$tmp/x2.npy" "$_n.safetensors" "$@" -- \
		"$wmodel" -w "$tmp/$_n.safetensors"
}

st missing_tensor "{$W}" 16
bad_weights missing_tensor "'0.bias'"
st extra_tensor \
	"{$W,$B,\"1.weight\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[24,32]}}" 32
bad_weights extra_tensor "'1.weight'"
st misspelled_tensor \
	"{$W,\"0.bais\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[16,24]}}" 24
bad_weights misspelled_tensor "'0.bais'" "'0.bias'"
st misshaped_tensor \
	"{\"0.weight\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},\"0.bias\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[24,32]}}" 32
bad_weights misshaped_tensor "'0.weight'" "[2, 3]" "[2, 2]"
st int_tensor \
	"{$W,\"0.bias\":{\"dtype\":\"I32\",\"shape\":[2],\"data_offsets\":[16,24]}}" 24
bad_weights int_tensor "'0.bias'"
st size_mismatch \
	"{$W,\"0.bias\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[16,20]}}" 20
bad_weights size_mismatch "'0.bias'"
st truncated "{$W,$B}" 20
bad_weights truncated
st overlapping \
	"{$W,\"0.bias\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}" 16
bad_weights overlapping
{
	le_bytes 1000 8
	printf '{"0.weight":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}}'
} >"$tmp/header_beyond.safetensors"
bad_weights header_beyond
st not_json '{"0.weight": [oops' 0
bad_weights not_json
printf '\010\000\000' >"$tmp/short.safetensors"
bad_weights short

# the malformed files of tools/gen_io_fixtures.py, when they are there
for f in truncated header_beyond overlap; do
	if [ -f "$bad/$f.safetensors" ]; then
		check "weights tests/bad/$f.safetensors" t_bad "$tmp/x2.npy" \
			"$f.safetensors" -- "$wmodel" -w "$bad/$f.safetensors"
	fi
done

# ---- .npy inputs (model tests/bad/models/npy3.yaml: x [3], weights made
# by dlrun init) ----

nmodel=$models/npy3.yaml
nw=$tmp/npy3.safetensors
"$DLRUN" init "$nmodel" -o "$nw" >/dev/null 2>&1 ||
	echo "# dlrun init $nmodel failed; the .npy cases will fail"

t_good_npy() {
	run_dlrun infer "$nmodel" -w "$nw" -i "$tmp/x3.npy"
	expect_rc 0
	[ -s "$tmp/stdout" ] || fail "no output"
	return 0
}
check "control: npy3.yaml runs on a well-formed .npy" t_good_npy

# bad_npy FILE NEEDLE...: input FILE (given with -i) is rejected with an
# error naming it and each NEEDLE
bad_npy() {
	_p=$1
	shift
	check "npy ${_p##*/}: $*" t_bad /dev/null "${_p##*/}" "$@" -- \
		"$nmodel" -w "$nw" -i "$_p"
}

# committed files when they are there, else the same made here
if [ -f "$bad/bad_magic.npy" ]; then
	bad_npy "$bad/bad_magic.npy"
else
	{ npy_header '<f4' '(2, 3)' '\223NUMPZ'; f4 1 2 3 1 2 3; } >"$tmp/bad_magic.npy"
	bad_npy "$tmp/bad_magic.npy"
fi
if [ -f "$bad/bad_dtype.npy" ]; then
	bad_npy "$bad/bad_dtype.npy"
else
	{ npy_header '<c8' '(2,)'; f4 1 0 2 0; } >"$tmp/bad_dtype.npy"
	bad_npy "$tmp/bad_dtype.npy"
fi
if [ -f "$bad/truncated.npy" ]; then
	bad_npy "$bad/truncated.npy"
else
	{ npy_header '<f4' '(2, 3)'; f4 1 2; printf '\000\000'; } >"$tmp/truncated.npy"
	bad_npy "$tmp/truncated.npy"
fi
{ npy_header '<f4' '(2, 3)' '\223NUMPX'; f4 1 2 3 1 2 3; } >"$tmp/magic2.npy"
bad_npy "$tmp/magic2.npy"
{ npy_header '>f4' '(1, 3)'; f4 1 2 3; } >"$tmp/big_endian.npy"
bad_npy "$tmp/big_endian.npy"
{ npy_header '<f4' '(2, 3)'; f4 1 2 3 1 2; } >"$tmp/short_data.npy"
bad_npy "$tmp/short_data.npy"
{ npy_header '<i4' '(1, 3)'; le_bytes 1 4; le_bytes 2 4; le_bytes 3 4; } \
	>"$tmp/int_input.npy"
bad_npy "$tmp/int_input.npy"
# a wrong shape may name the model's input instead of the file
bad_shape() {
	_p=$1
	shift
	check "npy ${_p##*/}: $*" t_bad /dev/null "'x'" "$@" -- \
		"$nmodel" -w "$nw" -i "$_p"
}
npy_f4 '(1, 5)' 1 2 3 4 0 >"$tmp/wrong_shape.npy"
bad_shape "$tmp/wrong_shape.npy" "[1, 5]"
npy_f4 '(2, 3, 1)' 1 2 3 1 2 3 >"$tmp/wrong_rank.npy"
bad_shape "$tmp/wrong_rank.npy" "[2, 3, 1]"
{
	printf '\223NUMPY\001\000'
	le_bytes 54 2
	printf "{'descr': '<f4', 'fortran_order': False, }          \n"
	f4 1 2 3
} >"$tmp/no_shape.npy"
bad_npy "$tmp/no_shape.npy"
{
	printf '\223NUMPY\001\000'
	le_bytes 2000 2
	printf "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 3), }\n"
} >"$tmp/header_len.npy"
bad_npy "$tmp/header_len.npy"

# a bad array on stdin: the error still is one line
t_stdin_magic() {
	{ npy_header '<f4' '(1, 3)' '\223NUMPZ'; f4 1 2 3; } >"$tmp/stdin_magic.npy"
	t_bad "$tmp/stdin_magic.npy" -- "$nmodel" -w "$nw"
}
check "npy with a wrong magic on stdin" t_stdin_magic

# the second array of a stream is bad: the first answer is not left in -o
t_second_bad() {
	cat "$tmp/x3.npy" "$tmp/wrong_shape.npy" >"$tmp/stream.npy"
	t_bad "$tmp/stream.npy" "'x'" "[1, 5]" -- "$nmodel" -w "$nw"
}
check "npy stream whose second array has the wrong shape: no -o file" t_second_bad

# ---- text inputs ----

# bad_text NAME CONTENT NEEDLE...: text input $tmp/NAME.txt is rejected
bad_text() {
	_n=$1
	printf '%s' "$2" >"$tmp/$_n.txt"
	shift 2
	check "text $_n.txt: $*" t_bad /dev/null "$_n.txt" "$@" -- \
		"$nmodel" -w "$nw" --format text -i "$tmp/$_n.txt"
}
bad_text unequal_rows '1 2 3
1 2
' "unequal_rows.txt:2"
bad_text not_a_number '1 2 3
1 two 3
' "not_a_number.txt:2"
bad_text wrong_width '1 2 3 4
1 2 3 4
' "wrong_width.txt:1"
bad_text unequal_in_step '1 2 3
4 5 6
7 8
' "unequal_in_step.txt:3"
# a long token is echoed cut, not whole
bad_text long_token "1 2 $(printf '%0300d' 7)x
" "long_token.txt:1:5" "'00000000000000000000000000000000...' is not a number"

# t_long_line: a 200 MB line of digits on stdin is refused at its first
# 66 KB, without reading it whole (the model's rows have 3 values)
t_long_line() {
	head -c 200000000 /dev/zero | tr '\0' '1' >"$tmp/long.txt" || return 1
	t_bad "$tmp/long.txt" "stdin:1:" "longer than" -- "$nmodel" -w "$nw" --format text
	rm -f "$tmp/long.txt"
}
check "text line of 200 MB: refused at the row size's limit" t_long_line

# ---- command lines ----

# bad_cli DESCRIPTION NEEDLE... -- ARGS...
bad_cli() {
	_d=$1
	shift
	check "command line: $_d" t_bad "$tmp/x3.npy" "$@"
}
bad_cli "unknown option" "--frobnicate" -- "$nmodel" -w "$nw" --frobnicate
bad_cli "missing model argument" -- -w "$nw"
bad_cli "two model arguments" -- "$nmodel" "$nmodel" -w "$nw"
bad_cli "--batch-size 0" "batch" -- "$nmodel" -w "$nw" --batch-size 0
bad_cli "--batch-size abc" "abc" -- "$nmodel" -w "$nw" --batch-size abc
bad_cli "--batch-size -1" "-1" -- "$nmodel" -w "$nw" --batch-size -1
bad_cli "--format xml" "xml" -- "$nmodel" -w "$nw" --format xml
bad_cli "--threads x" "threads" -- "$nmodel" -w "$nw" --threads x
bad_cli "missing weights file says how to make one" "dlrun init" -- "$nmodel"
bad_cli "-w names a missing file" "no_such.safetensors" -- \
	"$nmodel" -w "$tmp/no_such.safetensors"
bad_cli "missing model file" "no_such_model.yaml" -- \
	"$tmp/no_such_model.yaml" -w "$nw"
bad_cli "missing input file" "no_such_input.npy" -- \
	"$nmodel" -w "$nw" -i "$tmp/no_such_input.npy"
bad_cli "-i with an unknown input name" "'nope'" -- \
	"$nmodel" -w "$nw" -i "nope=$tmp/x3.npy"
# (dlrun runs in $tmp/out, so a file 'nope=y.npy' would show up there)
no_o=yes
bad_cli "-o with an unknown output name" "'nope'" -- \
	"$nmodel" -w "$nw" -o "nope=y.npy"
no_o=

done_testing
