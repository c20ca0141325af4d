#!/bin/sh
# The attention ops (attention, multihead_attention) on bad models, printing
# TAP: each case (tests/bad/models/attention_*.yaml) must exit 2 with
# exactly one 'dlrun: ' line on stderr naming FILE:LINE:COL, nothing on
# stdout and no output file. Also: `dlrun ops` lists both with their
# defaults, and `dlrun init` weights run, with kdim / vdim, dconv and
# relative positions; every sparse pattern's planned memory grows as T k
# (dlrun summary at T = 2048 and 4096), also through the transformer layers'
# patterns, and long sparse unions run; dense attention at T = 16384 plans
# no T x T scores (the flash path; tests/check_attention.c compares it with
# the materialised path); attention dropout is the identity at inference. The PyTorch references are
# tests/fixtures/attention and tests/fixtures/attention_opts
# (tools/gen_attention_fixtures.py, tools/gen_attention_opts_fixtures.py,
# run by tests/fixtures.sh); the gradients are checked by tests/train.sh on
# tests/data/gradcheck/attention_*.yaml.
#
# Environment: see tests/lib.sh.

# shellcheck source=tests/lib.sh
. "${srcdir:-$(dirname "$0")/..}/tests/lib.sh"

models=$srcdir/tests/bad/models

npy_f4 '(1, 5, 6)' 1 2 3 0.5 -1 0 -2 1 0.25 1 -0.5 3 0 2 -1 \
	1 2 3 0.5 -1 0 -2 1 0.25 1 -0.5 3 0 2 -1 >"$tmp/x.npy"

# bad FILE LOC NEEDLE: `dlrun infer FILE -o OUT` on x.npy fails to load with
# exit 2, one error line with FILE:LOC and NEEDLE, no stdout and no OUT
# (bad_model and t_bad: tests/lib.sh)
bad() {
	bad_model "$1" "$tmp/x.npy" "$2" "$3"
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
bad attention_mask_shape.yaml 7:5: "the attn_mask (input 4) has shape [1, 5, 6]; it must be [N, 5, 7]"
bad attention_kpm_shape.yaml 6:5: "the key_padding_mask (input 2) has shape [1, 4]; it must be [N, 5]"
bad attention_block_no_pattern.yaml 4:42: "block_size applies to the window, global_tokens and random_keys patterns"
bad attention_relv_no_relpos.yaml 5:7: "relative_values needs relative_positions"
bad attention_dropout.yaml 4:17: "dropout is 1.5; a probability is between 0 and 1"
bad attention_4d_heads.yaml 6:5: "have different numbers of heads"
bad attention_4d_mha.yaml 4:5: "attention needs sequences [N, T, D]"
bad attention_too_many.yaml 5:5: "5 inputs: attention takes q, k, v, an attn_mask [N, T, S] and a key_padding_mask [N, S]"
bad transformer_kpm_shape.yaml 8:5: "the key_padding_mask (input 3) has shape [1, 5]; it must be [N, 4] (one flag per memory step)"
bad transformer_dilation.yaml 5:54: "dilation applies to the window pattern; give window too"

# `dlrun ops` prints the defaults the man page documents
t_ops() {
	run_dlrun ops
	expect_rc 0
	expect_stdout_has "attention score=scaled_dot attention_size=none causal=false window=none dilation=1 global_tokens=0 random_keys=0 seed=0 stride=none fixed=none fixed_summary=1 relative_positions=0"
	expect_stdout_has "multihead_attention num_heads dropout=0.0 bias=true batch_first=true dconv=0 causal=false window=none"
	expect_stdout_has "relative_positions=0 block_size=none relative_values=false dropout=0.0"
	expect_stdout_has "relative_values=false embed_dim=inferred kdim=inferred vdim=inferred"
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

# `window` alone keeps key lists, O(T * window) time and memory: 100000
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

# every sparse pattern keeps key lists, O(T k) for k keys per query: the
# planned bytes (dlrun summary --json peak_bytes: weights, activations and
# scratch) of a model at T = 4096 are at most 2.1 times those at T = 2048
# (a T x T score matrix would make them 4 times), and far below one T x T
# matrix per head. Stride and fixed patterns of length l have k = 2 l + T / l
# keys per query, which grows with T: 2.6 times there.
peak_bytes() {
	sed -n 's/.*"peak_bytes":\([0-9]*\).*/\1/p' "$tmp/stdout"
}
# linear_peaks PREFIX RATIO: the summaries of $tmp/PREFIX2048.yaml and
# PREFIX4096.yaml plan peaks that grow at most RATIO/10 from T = 2048 to
# 4096, and no T x T matrix at 4096
linear_peaks() {
	for T in 2048 4096; do
		run_dlrun summary "$tmp/$1$T.yaml" --json
		expect_rc 0 || return 1
		eval "p$T=\$(peak_bytes)"
	done
	[ -n "$p2048" ] && [ -n "$p4096" ] || fail "no peak_bytes in the summary"
	# shellcheck disable=SC2154
	[ "$((p4096 * 10))" -le "$((p2048 * $2))" ] ||
		fail "peak bytes $p2048 at T=2048, $p4096 at T=4096: not linear"
	[ "$p4096" -lt $((4096 * 4096 * 4)) ] ||
		fail "peak bytes $p4096 at T=4096: a T x T matrix"
}
t_linear() {
	for T in 2048 4096; do
		cat >"$tmp/lin$T.yaml" <<-YAML
		inputs:
		  x: {shape: [$T, 8]}
		layers:
		  - name: h
		    linear: {out_features: 8}
		  - name: a1
		    in: h
		    multihead_attention: {num_heads: 2, $1}
		  - name: a2
		    in: h
		    attention: {$1}
		  - name: a3
		    in: h
		    attention: {dropout: 0.1, $1}
		  - in: [a1, a2, a3]
		    add: {}
		YAML
	done
	linear_peaks lin "$2"
}
for pat in "window: 3, dilation: 2" "window: 2, causal: true" \
	"global_tokens: 2, window: 1" "random_keys: 3, seed: 1" \
	"window: 1, block_size: 4" \
	"window: 0, global_tokens: 1, random_keys: 2, block_size: 8, causal: true" \
	"window: 2, relative_positions: 2, relative_values: true"; do
	check "memory linear in T: $pat" t_linear "$pat" 21
done
for pat in "stride: 64" "fixed: 64, fixed_summary: 1" \
	"window: 1, stride: 64, fixed: 64, global_tokens: 1, random_keys: 1, relative_positions: 2, relative_values: true"; do
	check "memory O(T (2 l + T / l)) in T: $pat" t_linear "$pat" 26
done

# the transformer layers pass their patterns to their self attention: the
# same O(T k) planned memory (encoder; decoder on a short memory)
t_linear_tf() {
	for T in 2048 4096; do
		cat >"$tmp/tf$T.yaml" <<-YAML
		inputs:
		  x: {shape: [$T, 8]}
		  m: {shape: [16, 8]}
		  pad: {shape: [$T], dtype: int}
		layers:
		  - name: e
		    in: [x, pad]
		    transformer_encoder_layer: {nhead: 2, dim_feedforward: 16, $1}
		  - name: d
		    in: [x, m]
		    transformer_decoder_layer: {nhead: 2, dim_feedforward: 16, $1}
		  - in: [e, d]
		    add: {}
		YAML
	done
	linear_peaks tf "$2"
}
for pat in "window: 2, global_tokens: 1" \
	"window: 1, global_tokens: 1, random_keys: 1, block_size: 8" \
	"window: 2, dilation: 2, causal: true"; do
	check "transformer layers, memory linear in T: $pat" t_linear_tf "$pat" 21
done

# dense attention at T = 16384 (d_model 256, 4 heads) takes the blocked
# online-softmax path: the plan holds no T x T scores (one per head would be
# 1 GiB each), and far less than 1 GiB in all
t_flash_plan() {
	cat >"$tmp/fl.yaml" <<-YAML
	inputs:
	  x: {shape: [16384, 256]}
	layers:
	  - multihead_attention: {num_heads: 4, causal: true}
	  - attention: {}
	YAML
	run_dlrun summary "$tmp/fl.yaml" --json
	expect_rc 0 || return 1
	p=$(peak_bytes)
	[ -n "$p" ] || fail "no peak_bytes in the summary"
	[ "$p" -lt $((256 * 1048576)) ] ||
		fail "peak bytes $p at T=16384: the scores are materialised"
	# 40000 steps: 1.6e9 score cells, refused when they were materialised
	cat >"$tmp/fl2.yaml" <<-YAML
	inputs:
	  x: {shape: [40000, 4]}
	layers:
	  - attention: {causal: true}
	YAML
	run_dlrun summary "$tmp/fl2.yaml" --json
	expect_rc 0 || return 1
	p=$(peak_bytes)
	[ -n "$p" ] && [ "$p" -lt $((64 * 1048576)) ] ||
		fail "peak bytes $p at T=40000"
}
check "dense attention at T = 16384 plans no T x T scores" t_flash_plan

# a union of patterns over blocks on 60000 steps, with a key padding mask:
# no T x T matrix (14 GB), in inference and in a training step
t_long_union() {
	cat >"$tmp/lu.yaml" <<-YAML
	inputs:
	  x: {shape: [60000, 4]}
	  pad: {shape: [60000], dtype: int}
	layers:
	  - in: [x, pad]
	    multihead_attention: {num_heads: 2, window: 1, global_tokens: 1, random_keys: 1, block_size: 8, stride: 300, causal: true}
	  - attention: {fixed: 50, relative_positions: 3, relative_values: true}
	YAML
	awk 'BEGIN { for (i = 0; i < 240000; i++)
		printf "%s%d", (i ? " " : ""), i % 7 - 3; print "" }' >"$tmp/lu.txt"
	awk 'BEGIN { for (i = 0; i < 60000; i++)
		printf "%s%d", (i ? " " : ""), i % 5 == 4; print "" }' >"$tmp/lp.txt"
	run_dlrun init "$tmp/lu.yaml" -o "$tmp/lu.safetensors"
	expect_rc 0 || return 1
	# plainly: under valgrind this one run took 130 s of CI's valgrind
	# pass; smaller fixtures take these patterns through valgrind, and the
	# sanitizer build of CI runs this one too
	run_plain infer "$tmp/lu.yaml" -w "$tmp/lu.safetensors" \
		--format text -i "x=$tmp/lu.txt" -i "pad=$tmp/lp.txt"
	expect_rc 0 || return 1
	cols=$(awk '{ print NF }' "$tmp/stdout")
	[ "$cols" = 240000 ] || fail "the row has $cols values, expected 240000"
}
check "sparse union over blocks: 60000 steps without a T x T matrix" t_long_union

# a key padding mask saved from a NumPy or torch bool array ('|b1') reads
# as the same 0/1 integers ('<i8'): the same output bytes; a float .npy
# for the int input is still refused
t_bool_mask() {
	cat >"$tmp/bm.yaml" <<-YAML
	inputs:
	  x: {shape: [3, 2]}
	  pad: {shape: [3], dtype: int}
	layers:
	  - in: [x, pad]
	    multihead_attention: {num_heads: 1}
	YAML
	run_dlrun init "$tmp/bm.yaml" -o "$tmp/bm.safetensors"
	expect_rc 0 || return 1
	npy_f4 '(2, 3, 2)' 1 -1 0.5 2 -2 0.25 3 1.5 -0.5 0 4 -3 >"$tmp/bmx.npy"
	{ npy_header '|b1' '(2, 3)'; printf '\000\000\001\000\001\001'; } >"$tmp/bmb.npy"
	{ npy_header '<i8' '(2, 3)'; le_bytes 0 8; le_bytes 0 8; le_bytes 1 8
	  le_bytes 0 8; le_bytes 1 8; le_bytes 1 8; } >"$tmp/bmi.npy"
	{ npy_header '<i8' '(2, 3)'; le_bytes 0 8; le_bytes 0 8; le_bytes 0 8
	  le_bytes 0 8; le_bytes 0 8; le_bytes 0 8; } >"$tmp/bm0.npy"
	run_dlrun infer "$tmp/bm.yaml" -w "$tmp/bm.safetensors" \
		-i "x=$tmp/bmx.npy" -i "pad=$tmp/bmb.npy"
	expect_rc 0 || return 1
	cp "$tmp/stdout" "$tmp/bm_bool.npy"
	run_dlrun infer "$tmp/bm.yaml" -w "$tmp/bm.safetensors" \
		-i "x=$tmp/bmx.npy" -i "pad=$tmp/bmi.npy"
	expect_rc 0 || return 1
	cmp -s "$tmp/stdout" "$tmp/bm_bool.npy" ||
		fail "the bool mask and the int64 mask gave different outputs"
	# the mask matters: no padding gives another output
	run_dlrun infer "$tmp/bm.yaml" -w "$tmp/bm.safetensors" \
		-i "x=$tmp/bmx.npy" -i "pad=$tmp/bm0.npy"
	expect_rc 0 || return 1
	cmp -s "$tmp/stdout" "$tmp/bm_bool.npy" &&
		fail "the mask made no difference: the test cannot fail"
	run_dlrun infer "$tmp/bm.yaml" -w "$tmp/bm.safetensors" \
		-i "x=$tmp/bmx.npy" -i "pad=$tmp/bmx.npy"
	expect_rc 2
}
check "a bool .npy ('|b1') key padding mask reads as 0/1" t_bool_mask

# attention dropout is the identity at inference
t_dropout_infer() {
	cat >"$tmp/d0.yaml" <<-YAML
	inputs:
	  x: {shape: [5, 6]}
	layers:
	  - attention: {causal: true}
	YAML
	sed 's/causal: true/causal: true, dropout: 0.5/' "$tmp/d0.yaml" >"$tmp/d1.yaml"
	run_dlrun infer "$tmp/d0.yaml" <"$tmp/x.npy"
	expect_rc 0 || return 1
	cp "$tmp/stdout" "$tmp/y0.txt"
	run_dlrun infer "$tmp/d1.yaml" <"$tmp/x.npy"
	expect_rc 0 || return 1
	cmp -s "$tmp/stdout" "$tmp/y0.txt" || fail "dropout changed the inference output"
}
check "attention dropout: identity at inference" t_dropout_infer

done_testing
