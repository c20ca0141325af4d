#!/bin/sh
# dlrun import, printing TAP:
# - each tests/data/onnx/NAME.onnx (torch.onnx.export of a small PyTorch
#   model, made by tools/gen_onnx_fixtures.py, or tools/gen_onnx_mask_fixtures.py
#   for the masks, selections, reductions and 3-D layers) imports, and `dlrun infer`
#   of the written model gives PyTorch's output NAME-expected.npy for
#   NAME-input.npy within 1e-4 relative;
# - bad ONNX files (tests/data/onnx/bad, and truncated, empty and non-ONNX
#   files made here: 23 in all) exit 2 with one line and write nothing;
# - -o and the default output path, --help.
# Every test is skipped when dlrun was built without ONNX import.
#
# Environment: see tests/lib.sh; NPYCMP (tests/npycmp) is needed.

. "${srcdir:-$(dirname "$0")/..}/tests/lib.sh"

data=$srcdir/tests/data/onnx
models="cnn residual separable mlp mlp_tanh block embed block14 tagger recurrent two_outputs encoder gpt
dense layer_scale class_token window_mask einsum
nanogpt_mask bert_mask se_expand data_masks topk pointnet conv3d"
bad="unknown_ops dynamic_dim init_size bad_attr unknown_attr reshape_batch
batch_arith transpose_batch erf_alone const_operand undefined_input old_opset no_op_type
attn_mask external_data no_outputs new_opset einsum_trace batch_merge"

"$DLRUN" --version 2>/dev/null | grep -F 'onnx import: yes' >/dev/null
built=$?
if [ "$built" -ne 0 ]; then
	for m in $models; do
		skip "import $m.onnx" "dlrun was built without ONNX import"
	done
	for b in $bad; do
		skip "bad $b.onnx" "dlrun was built without ONNX import"
	done
	run_dlrun import "$data/mlp.onnx" -o "$tmp/x.yaml"
	# still, the verb exists and explains itself
	[ "$rc" = 2 ] && grep -F 'without ONNX support' "$tmp/stderr" >/dev/null
	ok $? "import without ONNX support: exit 2 and says so"
	done_testing
	exit 0
fi

t_model() {
	mkdir -p "$tmp/$1"
	run_dlrun import "$data/$1.onnx" -o "$tmp/$1/model.yaml"
	expect_rc 0 || return 0
	[ -s "$tmp/$1/model.safetensors" ] || fail "no weights written beside the model"
	run_dlrun infer "$tmp/$1/model.yaml" <"$data/$1-input.npy"
	expect_rc 0 || return 0
	cp "$tmp/stdout" "$tmp/$1/out.npy"
	"$NPYCMP" "$tmp/$1/out.npy" "$data/$1-expected.npy" 1e-4 >"$tmp/cmp" 2>&1 ||
		fail "$(cat "$tmp/cmp")"
	return 0
}

for m in $models; do
	check "import $m.onnx: dlrun infer matches PyTorch within 1e-4" t_model "$m"
done

# Clip, HardSwish, HardSigmoid, Elu and scalar arithmetic map to ops that
# a dlrun built with the pointwise ops has (relu6, clamp, hardswish,
# hardsigmoid, elu, scale); the import itself works either way.
pointwise_ops=yes
for op in relu6 clamp hardswish hardsigmoid elu scale; do
	"$DLRUN" ops "$op" >/dev/null 2>&1 || pointwise_ops=no
done
if [ "$pointwise_ops" = yes ]; then
	check "import pointwise.onnx: dlrun infer matches PyTorch within 1e-4" t_model pointwise
else
	skip "import pointwise.onnx: dlrun infer matches PyTorch within 1e-4" \
		"this dlrun lacks relu6, clamp, hardswish, hardsigmoid, elu or scale"
fi
# InstanceNormalization maps to instance_norm1d/2d of the reductions' family
if "$DLRUN" ops instance_norm2d >/dev/null 2>&1 && "$DLRUN" ops instance_norm1d >/dev/null 2>&1; then
	check "import norms.onnx: dlrun infer matches PyTorch within 1e-4" t_model norms
else
	skip "import norms.onnx: dlrun infer matches PyTorch within 1e-4" \
		"this dlrun lacks instance_norm1d or instance_norm2d"
fi
t_pointwise_yaml() {
	mkdir -p "$tmp/pw"
	run_dlrun import "$data/pointwise.onnx" -o "$tmp/pw/model.yaml"
	expect_rc 0
	for want in 'relu6: {}' 'clamp: {min: -1.5, max: 0.75}' 'hardswish: {}' \
		'hardsigmoid: {}' 'elu: {alpha: 0.5}' 'scale: {factor: 4.0}' 'scale: {shift: -2.0}'; do
		grep -F -e "$want" "$tmp/pw/model.yaml" >/dev/null || fail "no '$want' in the model"
	done
	return 0
}
check "import pointwise.onnx: Clip as relu6 and clamp, scalar arithmetic as scale" t_pointwise_yaml

# torchvision's patterns: DenseNet's and Inception's wide concatenations,
# ConvNeXt's layer scale (a constant operand as a parameter entry), ViT's
# class token expanded to the batch (a parameter entry)
t_torchvision_patterns() {
	grep -F -e 'in: [x, relu, relu_1, relu_2, relu_3, relu_4]' "$tmp/dense/model.yaml" >/dev/null ||
		fail "dense: the concatenation of six not one concat entry"
	y=$tmp/layer_scale/model.yaml
	grep -F -e 'parameter: {shape: [4, 1, 1]}' "$y" >/dev/null ||
		fail "layer_scale: the [4, 1, 1] scale is not a parameter entry"
	grep -F -e 'in: [gamma, ' "$y" >/dev/null ||
		fail "layer_scale: the scale's entry is not named after the PyTorch parameter"
	[ "$(grep -c -e 'parameter: {shape: \[5\]}' "$y")" = 2 ] ||
		fail "layer_scale: table and abs(table) + 1 (folded) not two parameter entries"
	grep -F -e 'parameter: {shape: [1, 6]}' "$tmp/class_token/model.yaml" >/dev/null ||
		fail "class_token: the expanded token is not a parameter entry"
	grep -a -F -e '"gamma"' "$tmp/layer_scale/model.safetensors" >/dev/null ||
		fail "layer_scale: a parameter entry's key is not its scope alone"
	y=$tmp/window_mask/model.yaml
	grep -F -e 'pad: {padding: [0, 2, 0, 1]}' "$y" >/dev/null ||
		fail "window_mask: the pads computed with Mod and reversed by a Slice of step -1 not folded"
	grep -F -e 'parameter: {shape: [6, 9]}' "$y" >/dev/null ||
		fail "window_mask: the mask built by ScatterND not folded into one parameter entry"
	[ "$(grep -c -e '^  - name:' "$y")" = 4 ] ||
		fail "window_mask: not 4 entries (conv, pad, the mask, add)"
	y=$tmp/einsum/model.yaml
	[ "$(grep -c -e 'matmul: {}' "$y")" = 3 ] && [ "$(grep -c -e 'permute: {dims: \[0, 1, 3, 2\]}' "$y")" = 2 ] ||
		fail "einsum: not three matmul entries and two permutes of the last two dimensions"
	return 0
}
check "torchvision patterns: six-way concat, layer scale and class token as parameter entries, Swin's shape arithmetic folded, MaxViT's Einsum as matmul" t_torchvision_patterns

# the readable output: names from the PyTorch modules, patterns fused
t_readable() {
	y=$tmp/mlp/model.yaml
	grep -F -e '- name: fc1' "$y" >/dev/null || fail "no entry named fc1 (the module's name)"
	grep -F -e 'gelu: {}' "$y" >/dev/null || fail "Erf arithmetic not recognised as gelu"
	grep -F -e 'gelu: {approximate: tanh}' "$tmp/mlp_tanh/model.yaml" >/dev/null ||
		fail "tanh arithmetic not recognised as gelu with approximate: tanh"
	[ "$(grep -c -e '^  - name:' "$tmp/mlp_tanh/model.yaml")" = 4 ] ||
		fail "mlp_tanh: not 4 entries (linear, gelu, linear, sigmoid)"
	grep -F -e 'Erf' "$y" >/dev/null && fail "an Erf left in the model"
	grep -F -e 'silu: {}' "$tmp/separable/model.yaml" >/dev/null ||
		fail "x * sigmoid(x) not recognised as silu"
	grep -F -e 'embedding: {num_embeddings: 11, embedding_dim: 4}' "$tmp/embed/model.yaml" >/dev/null ||
		fail "Gather on a table not imported as embedding"
	grep -F -e 'dtype: int' "$tmp/embed/model.yaml" >/dev/null ||
		fail "integer input not declared dtype: int"
	# MatMul + Add fused into one linear named after the module
	[ "$(grep -c -e 'linear:' "$tmp/block/model.yaml")" = 4 ] ||
		fail "block: MatMul + Add not fused into 4 linear entries"
	grep -F -e '- name: qkv' "$tmp/block/model.yaml" >/dev/null || fail "block: no entry named qkv"
	# opset 14 writes layer norm out; it comes back as layer_norm
	[ "$(grep -c -e 'layer_norm: {normalized_shape: \[12\]}' "$tmp/block14/model.yaml")" = 2 ] ||
		fail "block14: decomposed layer norm not recognised"
	grep -e 'sqrt\|pow\|scale' "$tmp/block14/model.yaml" >/dev/null &&
		fail "block14: pieces of layer norm left in the model"
	# recurrent layers between the exporter's transposes: one entry each
	[ "$(grep -c -e 'lstm: {hidden_size: 8}' "$tmp/tagger/model.yaml")" = 2 ] ||
		fail "tagger: not two lstm entries"
	grep -e 'permute\|reshape' "$tmp/tagger/model.yaml" "$tmp/recurrent/model.yaml" >/dev/null &&
		fail "transposes around the recurrent layers left in the model"
	grep -F -e 'gru: {hidden_size: 6, bidirectional: true}' "$tmp/recurrent/model.yaml" >/dev/null ||
		fail "recurrent: no bidirectional gru"
	grep -F -e 'rnn: {hidden_size: 4, nonlinearity: relu}' "$tmp/recurrent/model.yaml" >/dev/null ||
		fail "recurrent: no rnn with relu"
	return 0
}
check "imported models are readable: module names, gelu, silu, linear, embedding, layer_norm, lstm, gru, rnn" t_readable

# nn.MultiheadAttention: the exporter's subgraph (transposes, the packed
# projection, slices, per-head reshapes, the scores, softmax, out_proj)
# is one multihead_attention entry; the causal attn_mask is causal: true
t_attention() {
	y=$tmp/encoder/model.yaml
	[ "$(grep -c -e 'multihead_attention: {num_heads: 3}$' "$y")" = 2 ] ||
		fail "encoder: not two multihead_attention entries with 3 heads"
	grep -e 'matmul\|softmax\|permute\|reshape\|slice' "$y" >/dev/null &&
		fail "encoder: pieces of the attention subgraph left in the model"
	[ "$(grep -c -e '^  - name:' "$y")" = 16 ] ||
		fail "encoder: not 16 entries (8 a layer)"
	grep -F -e '- name: enc_layers_0_self_attn' "$y" >/dev/null ||
		fail "encoder: the attention entry is not named after its module"
	y=$tmp/gpt/model.yaml
	[ "$(grep -c -e 'multihead_attention: {num_heads: 2, causal: true}$' "$y")" = 2 ] ||
		fail "gpt: the causal mask not recognised as causal: true"
	grep -F -e 'positional_encoding: {kind: learned, max_len: 7}' "$y" >/dev/null ||
		fail "gpt: wpe(arange(T)) added to the tokens is not a learned positional_encoding"
	grep -e 'matmul\|softmax\|permute\|reshape\|slice\|where' "$y" >/dev/null &&
		fail "gpt: pieces of the attention subgraph left in the model"
	return 0
}
check "nn.MultiheadAttention imported as multihead_attention (causal mask: causal: true)" t_attention

t_keys() {
	# the weights' keys are the entries' scopes: conv2.weight as in PyTorch
	run_dlrun summary "$tmp/cnn/model.yaml" -w "$tmp/cnn/model.safetensors"
	expect_rc 0
	grep -a -F '"fc.weight"' "$tmp/cnn/model.safetensors" >/dev/null ||
		fail "cnn: no key fc.weight (the PyTorch key)"
	grep -a -F '"bn2.running_var"' "$tmp/cnn/model.safetensors" >/dev/null ||
		fail "cnn: no key bn2.running_var"
	return 0
}
check "weights keep PyTorch's keys where the initializers have them" t_keys

t_bad() {
	mkdir -p "$tmp/bad_$1"
	run_dlrun import "$2" -o "$tmp/bad_$1/out.yaml"
	expect_rc 2
	expect_one_error_line
	[ -n "$3" ] && expect_stderr_has "$3"
	only_files "$tmp/bad_$1"
	return 0
}

check "bad unknown_ops.onnx: names the node and lists every unsupported op type" \
	t_bad unknown_ops "$data/bad/unknown_ops.onnx" \
	"node 'nms' (NonMaxSuppression)"
grep -F 'NonMaxSuppression, Size' "$tmp/stderr" >/dev/null
ok $? "bad unknown_ops.onnx: the list holds NonMaxSuppression and Size"
for b in $bad; do
	[ "$b" = unknown_ops ] && continue
	check "bad $b.onnx: exit 2, one line, nothing written" t_bad "$b" "$data/bad/$b.onnx" ""
done
check "bad attribute names node, op type and attribute" t_bad attr2 \
	"$data/bad/bad_attr.onnx" "node 'pool' (MaxPool): attribute 'storage_order'"
check "attention with a mask that is not causal: names the node and why" t_bad attn2 \
	"$data/bad/attn_mask.onnx" "node '/attn/MatMul' (MatMul): input '/attn/Transpose_output_0' is time major"
check "data in an external file is refused by name" t_bad ext2 \
	"$data/bad/external_data.onnx" "initializer 'w' keeps its data in an external file"
check "an Einsum other than a matrix product names the node and the equation" t_bad einsum2 \
	"$data/bad/einsum_trace.onnx" "node 'trace' (Einsum): equation 'bii->bi': dlrun import maps batched matrix products only"
check "the batch multiplied names the node and why" t_bad merge2 \
	"$data/bad/batch_merge.onnx" "node 'windows' (Mul): the batch size times 4: a shape that folds other dimensions into the batch"
check "a constant with a batch of its own names the node and why" t_bad const2 \
	"$data/bad/const_operand.onnx" "node 'mul' (Mul): constant operand 'k' of shape [2, 4, 3] does not broadcast over the batch"
check "an unnamed node is named by its place and its output" t_bad unnamed2 \
	"$data/bad/unnamed_node.onnx" "node 1, unnamed (Size, output 'y')"
check "initializer size mismatch names the initializer" t_bad size2 \
	"$data/bad/init_size.onnx" "initializer 'w' holds 44 bytes"

head -c 700 "$data/cnn.onnx" >"$tmp/truncated.onnx"
check "truncated ONNX file" t_bad truncated "$tmp/truncated.onnx" "not an ONNX model"
printf 'name: not onnx\nlayers: []\n' >"$tmp/text.onnx"
check "a text file" t_bad text "$tmp/text.onnx" "not an ONNX model"
: >"$tmp/empty.onnx"
check "an empty file" t_bad empty "$tmp/empty.onnx" "empty file"
check "a missing file" t_bad missing "$tmp/nonexistent.onnx" "nonexistent.onnx"

t_failed_keeps_old() {
	mkdir -p "$tmp/keep"
	echo old >"$tmp/keep/m.yaml"
	echo old >"$tmp/keep/m.safetensors"
	run_dlrun import "$data/bad/erf_alone.onnx" -o "$tmp/keep/m.yaml"
	expect_rc 2
	[ "$(cat "$tmp/keep/m.yaml")" = old ] || fail "the old model file was changed"
	[ "$(cat "$tmp/keep/m.safetensors")" = old ] || fail "the old weights were changed"
	only_files "$tmp/keep" m.yaml m.safetensors
	return 0
}
check "a failed import leaves existing files as they were" t_failed_keeps_old

t_default_out() {
	mkdir -p "$tmp/def"
	cp "$data/residual.onnx" "$tmp/def/res.onnx"
	run_dlrun import "$tmp/def/res.onnx"
	expect_rc 0
	only_files "$tmp/def" res.onnx res.yaml res.safetensors
	run_dlrun infer "$tmp/def/res.yaml" <"$data/residual-input.npy"
	expect_rc 0
	return 0
}
check "default output: MODEL.yaml and MODEL.safetensors beside the ONNX file" t_default_out

t_same_bytes() {
	mkdir -p "$tmp/again"
	run_dlrun import "$data/block.onnx" -o "$tmp/again/model.yaml"
	expect_rc 0
	same_bytes "$tmp/again/model.yaml" "$tmp/block/model.yaml"
	same_bytes "$tmp/again/model.safetensors" "$tmp/block/model.safetensors"
	return 0
}
check "import writes the same bytes twice" t_same_bytes

t_help() {
	run_dlrun import --help
	expect_rc 0
	expect_stdout_has "usage: dlrun import MODEL.onnx"
	run_dlrun import
	expect_rc 2
	expect_one_error_line
	run_dlrun import --bogus "$data/mlp.onnx"
	expect_rc 2
	expect_one_error_line
	return 0
}
check "import --help, no operand, unknown option" t_help

done_testing
