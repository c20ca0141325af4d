#!/bin/sh
# The recurrent extras (rnn's sigmoid, output: state, attention_decoder) on
# bad models and fresh weights, printing TAP: each bad case
# (tests/bad/models/recurrent_*.yaml) must exit 2 with exactly one
# 'dlrun: ' line on stderr naming FILE:LINE:COL and nothing on stdout. The
# PyTorch references are tests/fixtures/recurrent (tests/fixtures.sh); the
# gradients are checked by tests/train.sh on
# tests/data/gradcheck/recurrent_*.yaml.
#
# Environment: see tests/lib.sh.

# shellcheck source=tests/lib.sh
. "${srcdir:-$(dirname "$0")/..}/tests/lib.sh"

models=$srcdir/tests/bad/models

: >"$tmp/none.npy"

# bad FILE LOC NEEDLE: `dlrun infer FILE` (no -o: no_o) on none.npy fails to
# load with exit 2, one error line with FILE:LOC and NEEDLE, and no output
# (bad_model and t_bad: tests/lib.sh)
no_o=yes
bad() {
	bad_model "$1" "$tmp/none.npy" "$2" "$3"
}

bad recurrent_dot_sizes.yaml 6:41: "the dot score compares the hidden state (hidden_size 5) with the memory's 6 features"
bad recurrent_size_dot.yaml 6:60: "attention_size applies to the additive score only"
bad recurrent_c0_gru.yaml 7:5: "a fourth input (c0) needs cell: lstm"
bad recurrent_h0_shape.yaml 7:5: "h0 has shape [1, 2, 5]; it must be [1, 5] ([N, hidden_size]) or [1, 1, 5]"
bad recurrent_memory_2d.yaml 6:5: "the memory has shape [1, 6]"
bad recurrent_one_input.yaml 4:5: "takes 2 to 4 inputs, got 1"
bad recurrent_cell_rnn.yaml 6:47: "cell must be one of gru|lstm"
# entries with two outputs (lstm's output: state): NAME.K in in: and outputs:
bad recurrent_output_index.yaml 8:20: "'enc.2': 'enc' has 2 outputs, 'enc' (or 'enc.0') to 'enc.1'"
bad recurrent_one_output_index.yaml 6:9: "'enc.1': 'enc' has one output; write 'enc'"
bad recurrent_outputs_index.yaml 3:11: "'enc.5': 'enc' has 2 outputs"
bad recurrent_body_two_outputs.yaml 8:9: "expert: the last entry has 2 outputs; a body gives one"

# `dlrun ops` prints the defaults the man page documents
t_ops() {
	run_dlrun ops
	expect_rc 0
	expect_stdout_has "attention_decoder cell=gru hidden_size score=additive attention_size=hidden_size output=sequence"
}
check "dlrun ops lists attention_decoder" t_ops

# fresh weights (dlrun init) for a decoder run, and each output has the
# documented shape: [N, T, H], [N, H] or [N, T, S] (T 3, S 4, H 5)
printf '%s\n' '1 2 0.5 -1 0 3' '0 1 0 2 0 -1' >"$tmp/tgt.txt"
printf '%s\n' '1 0 2 0 1 1 0 -1 2 2 0.5 0' '0 0 1 1 2 2 3 3 -1 -1 0 0' \
	>"$tmp/mem.txt"
t_init() {
	cat >"$tmp/m.yaml" <<-YAML
	inputs:
	  tgt: {shape: [3, 2]}
	  mem: {shape: [4, 3]}
	layers:
	  - in: [tgt, mem]
	    attention_decoder: {hidden_size: 5, cell: $1, output: $2}
	YAML
	run_dlrun init "$tmp/m.yaml" -o "$tmp/m.safetensors"
	expect_rc 0 || return 1
	run_dlrun infer "$tmp/m.yaml" -w "$tmp/m.safetensors" --format text \
		-i tgt="$tmp/tgt.txt" -i mem="$tmp/mem.txt"
	expect_rc 0 || return 1
	cols=$(awk '{ print NF }' "$tmp/stdout" | sort -u)
	[ "$cols" = "$3" ] || fail "rows have $cols values, expected $3"
	[ "$(wc -l <"$tmp/stdout")" -eq 2 ] || fail "expected 2 rows"
}
check "dlrun init, then infer a gru decoder's sequence" t_init gru sequence 15
check "dlrun init, then infer an lstm decoder's last state" t_init lstm last 5
check "dlrun init, then infer a decoder's attention weights" t_init gru attention 12

# an lstm's output: state is two arrays when it is the model's output (by
# default named output and output.1), and NAME.1 alone is one; both are
# [N, num_layers*D, H]: 2*2*3 = 12 values per sample
printf '%s\n' '1 2 3 0.5 -1 0 -2 1 0.25 1 -0.5 3 0 2 -1' \
	'0 1 0 2 0 3 0 -1 0 -2 0 1 1 1 1' >"$tmp/x.txt"
t_state() {
	cat >"$tmp/s.yaml" <<-YAML
	inputs:
	  x: {shape: [5, 3]}
	$1
	layers:
	  - name: enc
	    lstm: {hidden_size: 3, num_layers: 2, bidirectional: true, output: state}
	YAML
	run_dlrun init "$tmp/s.yaml" -o "$tmp/s.safetensors"
	expect_rc 0 || return 1
	shift
	rm -f "$tmp"/o_*
	set -- "$@"
	args=
	for o in "$@"; do
		args="$args -o $o=$tmp/o_$o"
	done
	# $args is split into words on purpose
	# shellcheck disable=SC2086
	run_dlrun infer "$tmp/s.yaml" -w "$tmp/s.safetensors" --format text \
		-i "$tmp/x.txt" $args
	expect_rc 0 || return 1
	for o in "$@"; do
		[ "$(awk '{ print NF }' "$tmp/o_$o" | sort -u)" = 12 ] ||
			fail "output $o: rows do not have 12 values"
		[ "$(wc -l <"$tmp/o_$o")" -eq 2 ] || fail "output $o: expected 2 rows"
	done
	[ "$(find "$tmp" -name 'o_*' | wc -l)" -eq $# ] ||
		fail "expected $# output files"
}
check "an lstm's state as the default output: h_n and c_n" t_state '' \
	output output.1
check "outputs: [enc] of an lstm's state: h_n and c_n" t_state \
	'outputs: [enc]' enc enc.1
check "outputs: [enc.1] of an lstm's state: c_n alone" t_state \
	'outputs: [enc.1]' enc.1
# the default output is the last entry's (model-format section 1): -o
# takes that entry's name too
check "the default output by the last entry's name: -o enc=, -o enc.1=" t_state '' \
	enc enc.1

# -o NAME=PATH for an entry with two arrays, named alone: both arrays go
# to PATH, back to back as on stdout (s.yaml: the previous check's model)
t_state_one_file() {
	npy_f4 '(1, 5, 3)' 1 2 3 0.5 -1 0 -2 1 0.25 1 -0.5 3 0 2 -1 >"$tmp/x.npy" || return 1
	run_dlrun infer "$tmp/s.yaml" -w "$tmp/s.safetensors" <"$tmp/x.npy"
	expect_rc 0 || return 1
	cp "$tmp/stdout" "$tmp/both_stdout.npy"
	run_dlrun infer "$tmp/s.yaml" -w "$tmp/s.safetensors" -o "enc=$tmp/both.npy" <"$tmp/x.npy"
	expect_rc 0 || return 1
	[ -s "$tmp/stdout" ] && fail "enc.1 went to stdout"
	same_bytes "$tmp/both.npy" "$tmp/both_stdout.npy"
}
check "-o enc=PATH writes both arrays of an lstm's state there" t_state_one_file

# the contract's wiring as written: an encoder's [h_n, c_n] feed a
# decoder's in: [tgt, enc, enc.1] (h_n [N, 1, H] as a one-step memory, c_n
# as h0), and trains (gradcheck)
t_contract_wiring() {
	cat >"$tmp/w.yaml" <<-YAML
	inputs:
	  src: {shape: [6, 3]}
	  tgt: {shape: [4, 2]}
	layers:
	  - name: enc
	    in: src
	    lstm: {hidden_size: 3, output: state}
	  - in: [tgt, enc, enc.1]
	    attention_decoder: {hidden_size: 3, score: dot}
	YAML
	run_dlrun summary "$tmp/w.yaml"
	expect_rc 0 || return 1
	expect_stdout_has "[1, 4, 3]"
	run_dlrun gradcheck "$tmp/w.yaml"
	expect_rc 0
}
check "in: [tgt, enc, enc.1] from an lstm's state" t_contract_wiring

# summary shows both outputs of a two-output entry, and draw draws the
# encoder-decoder that reads them with NAME.1
t_summary_draw() {
	m=$srcdir/tests/data/gradcheck/recurrent_seq2seq.yaml
	run_dlrun summary "$m"
	expect_rc 0 || return 1
	expect_stdout_has "state  lstm                 [1, 1, 3], [1, 1, 3]"
	run_dlrun draw "$m" -o "$tmp/m.svg"
	expect_rc 0 || return 1
	grep -q '</svg>' "$tmp/m.svg" || fail "no SVG written"
}
check "summary and draw of an entry with two outputs" t_summary_draw

done_testing
