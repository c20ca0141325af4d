#!/bin/sh
# The recurrent ops (rnn, lstm, gru) on bad models, printing TAP: each case
# (tests/bad/models/rnn_*.yaml) must exit 2 with exactly one 'dlrun: ' line
# on stderr naming FILE:LINE:COL and nothing on stdout. Also: `dlrun ops`
# lists them, and `dlrun init` weights run. The PyTorch references are
# tests/fixtures/rnn (tests/fixtures.sh); the gradients are checked by
# tests/train.sh on tests/data/gradcheck/rnn_*.yaml.
#
# Environment: see tests/lib.sh.

# shellcheck source=tests/lib.sh
. "${srcdir:-$(dirname "$0")/..}/tests/lib.sh"

models=$srcdir/tests/bad/models

npy_f4 '(1, 5, 3)' 1 2 3 0.5 -1 0 -2 1 0.25 1 -0.5 3 0 2 -1 >"$tmp/x.npy"
# two samples as text, one line each
printf '%s\n' '1 2 3 0.5 -1 0 -2 1 0.25 1 -0.5 3 0 2 -1' \
	'0 1 0 2 0 3 0 -1 0 -2 0 1 1 1 1' >"$tmp/x.txt"

# bad FILE LOC NEEDLE: `dlrun infer FILE` (no -o: no_o) on x.npy fails to
# load with exit 2, one error line with FILE:LOC and NEEDLE, and no output
# (bad_model and t_bad: tests/lib.sh)
no_o=yes
bad() {
	bad_model "$1" "$tmp/x.npy" "$2" "$3"
}

bad rnn_no_hidden_size.yaml 4:5: "missing hyperparameter 'hidden_size'"
bad rnn_h0_shape.yaml 6:5: "h0 has shape [1, 1, 4]; it must be [1, 2, 4]"
bad rnn_2d_input.yaml 5:5: "rnn needs a sequence [N, T, features]"
bad rnn_output_first.yaml 6:15: "output must be one of sequence|last|state"
bad rnn_nonlinearity_gelu.yaml 4:41: "nonlinearity must be one of tanh|relu|sigmoid"
bad rnn_batch_first_false.yaml 4:28: "batch_first is false"
bad rnn_c0_on_gru.yaml 7:5: "gru: takes 1 to 2 inputs, got 3"
bad rnn_dropout_range.yaml 4:43: "dropout is 1.5"

# `dlrun ops` prints the defaults the man page documents (the sizes that
# follow from the input last)
t_ops() {
	run_dlrun ops
	expect_rc 0
	expect_stdout_has "rnn hidden_size num_layers=1 bias=true batch_first=true dropout=0 bidirectional=false output=sequence nonlinearity=tanh input_size=inferred"
	expect_stdout_has "lstm hidden_size num_layers=1 bias=true batch_first=true dropout=0 bidirectional=false output=sequence input_size=inferred"
	expect_stdout_has "gru hidden_size num_layers=1 bias=true batch_first=true dropout=0 bidirectional=false output=sequence linear_before_reset=true input_size=inferred"
}
check "dlrun ops lists rnn, lstm and gru" t_ops

# fresh weights (dlrun init) for a stacked bidirectional lstm run, and the
# output has the documented shape: [N, T, 2*H], or [N, 2*H] with output: last
t_init() {
	cat >"$tmp/m.yaml" <<-YAML
	inputs:
	  x: {shape: [5, 3]}
	layers:
	  - lstm: {hidden_size: 4, num_layers: 2, bidirectional: true, output: $1}
	YAML
	run_dlrun init "$tmp/m.yaml" -o "$tmp/m.safetensors"
	expect_rc 0 || return 1
	run_dlrun infer "$tmp/m.yaml" -w "$tmp/m.safetensors" --format text \
		<"$tmp/x.txt"
	expect_rc 0 || return 1
	cols=$(awk '{ print NF }' "$tmp/stdout" | sort -u)
	[ "$cols" = "$2" ] || fail "rows have $cols values, expected $2"
	[ "$(wc -l <"$tmp/stdout")" -eq 2 ] || fail "expected 2 rows"
}
check "dlrun init, then infer an lstm sequence" t_init sequence 40
check "dlrun init, then infer an lstm final state" t_init last 8

done_testing
