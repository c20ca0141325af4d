#!/bin/sh
# The dlrun command line, printing TAP: --version and --help, unknown verbs
# and options, `ops`, `summary` (the exact parameter count of models/mlp.yaml),
# `init` (deterministic, refuses to overwrite), and `infer` as a filter:
# streams of arrays, --batch-size, -o, -i NAME=PATH, --format text, a zero-
# sample batch, and as a co-process answering each array before the next.
#
# Environment: see tests/lib.sh.

# shellcheck source=tests/lib.sh
. "${srcdir:-$(dirname "$0")/..}/tests/lib.sh"

cli=$srcdir/tests/data/cli
mlp=$srcdir/models/mlp.yaml

# vals N [START]: N values cycling through f4's table, from index START
vals() {
	awk -v n="$1" -v s="${2:-0}" 'BEGIN {
		split("1 -0.5 2 0.25 -1 1.5 0 -2 3 0.5 -0.25 4 -1.5 -3", t, " ")
		for (i = 0; i < n; i++)
			printf "%s%s", t[(s + i) % 14 + 1], (i + 1 < n ? " " : "\n")
	}'
}

# rows N D [START]: N text rows of D values
rows() {
	_rows_r=0
	while [ "$_rows_r" -lt "$1" ]; do
		vals "$2" $((${3:-0} + _rows_r * 5))
		_rows_r=$((_rows_r + 1))
	done
}

# npy_rows N D [START]: the same values as rows, as an [N, D] float32 .npy
npy_rows() {
	# word splitting of the values is intended
	# shellcheck disable=SC2046
	npy_f4 "($1, $2)" $(rows "$1" "$2" "$3")
}

# count_magic FILE: how many .npy magic strings FILE holds
count_magic() {
	LC_ALL=C grep -a -o 'NUMPY' "$1" | wc -l
}

# ---- version and help ----

t_version() {
	run_dlrun --version
	expect_rc 0
	grep -E '^dlrun [0-9]+\.[0-9]+' "$tmp/stdout" >/dev/null ||
		fail "stdout does not start with 'dlrun X.Y'"
	[ "$(wc -l <"$tmp/stdout")" -eq 1 ] || fail "more than one line"
	[ -s "$tmp/stderr" ] && fail "stderr is not empty"
	return 0
}
check "dlrun --version" t_version

t_help() {
	run_dlrun "$@"
	expect_rc 0
	grep '^usage: dlrun' "$tmp/stdout" >/dev/null ||
		fail "no 'usage: dlrun' on stdout"
	for _v in infer init summary ops; do
		grep -E "^ +$_v " "$tmp/stdout" >/dev/null ||
			fail "the verb list lacks $_v"
	done
	[ -s "$tmp/stderr" ] && fail "stderr is not empty"
	return 0
}
check "dlrun --help lists the verbs" t_help --help
check "dlrun -h lists the verbs" t_help -h

t_verb_help() {
	run_dlrun "$@"
	expect_rc 0
	grep "^usage: dlrun $1" "$tmp/stdout" >/dev/null ||
		fail "no 'usage: dlrun $1' on stdout"
	[ -s "$tmp/stderr" ] && fail "stderr is not empty"
	return 0
}
for v in infer init summary ops; do
	check "dlrun $v --help" t_verb_help "$v" --help
	check "dlrun $v -h" t_verb_help "$v" -h
done
# every verb that `dlrun --help` lists (later issues add verbs) has --help
t_every_verb_help() {
	run_dlrun --help
	_verbs=$(awk '/^verbs:/ { on = 1; next } on && /^  [a-z]/ { print $1 } on && /^$/ { on = 0 }' "$tmp/stdout")
	[ -n "$_verbs" ] || fail "no verbs: section in dlrun --help"
	for _v in $_verbs; do
		run_dlrun "$_v" --help
		[ "$rc" = 0 ] || fail "dlrun $_v --help exits $rc"
		grep "^usage: dlrun $_v" "$tmp/stdout" >/dev/null ||
			fail "dlrun $_v --help prints no 'usage: dlrun $_v' on stdout"
		[ -s "$tmp/stderr" ] && fail "dlrun $_v --help writes to stderr"
	done
	return 0
}
check "every verb that dlrun --help lists has --help" t_every_verb_help
# after an operand too, as getopt_long permutes (ops parses its own)
check "dlrun ops conv2d --help" t_verb_help ops conv2d --help

t_infer_help_options() {
	run_dlrun infer --help
	for _o in --weights --input --output --format --batch-size --threads; do
		expect_stdout_has "$_o"
	done
	return 0
}
check "dlrun infer --help names every option" t_infer_help_options

t_no_verb() {
	run_dlrun </dev/null
	expect_rc 2
	[ -s "$tmp/stdout" ] && fail "stdout is not empty"
	grep 'usage' "$tmp/stderr" >/dev/null || fail "no usage on stderr"
	return 0
}
check "dlrun without a verb: exit 2, usage on stderr" t_no_verb

# t_error NEEDLE... -- ARGS...: exit 2, one line 'dlrun: ...' with NEEDLEs
t_error() {
	_needles=
	while [ "$1" != -- ]; do
		_needles="$_needles$1
"
		shift
	done
	shift
	run_dlrun "$@" </dev/null
	expect_rc 2
	expect_error_line "$_needles"
	[ -s "$tmp/stdout" ] && fail "stdout is not empty"
	return 0
}
check "unknown verb with a suggestion" t_error "'infr'" "did you mean 'infer'" -- infr x.yaml
check "unknown verb 'sumary' with a suggestion" t_error "did you mean 'summary'" -- sumary
check "unknown verb without a near name" t_error "'zzzzzz'" -- zzzzzz
check "unknown option before the verb" t_error "--bogus" -- --bogus
for v in infer init summary; do
	check "dlrun $v: unknown option" t_error "option" "--bogus" -- "$v" --bogus "$cli/small.yaml"
done
check "dlrun ops: unknown option" t_error "option" "--bogus" -- ops --bogus
check "dlrun infer: option missing its argument" t_error "batch-size" -- \
	infer "$cli/small.yaml" --batch-size

# ---- ops ----

core_ops="linear identity flatten reshape permute transpose slice mean pad add
sub mul div concat matmul relu leaky_relu tanh sigmoid gelu silu softplus
softmax log_softmax dropout"

t_ops_list() {
	run_dlrun ops
	expect_rc 0
	for _op in $core_ops; do
		grep -E "^$_op( |\$)" "$tmp/stdout" >/dev/null ||
			fail "'dlrun ops' does not list $_op"
	done
	grep -E '^linear .*out_features' "$tmp/stdout" >/dev/null ||
		fail "the linear line does not show out_features"
	grep -E '^leaky_relu .*negative_slope=0\.01' "$tmp/stdout" >/dev/null ||
		fail "the leaky_relu line does not show negative_slope=0.01"
	grep -E '^softmax .*dim=-1' "$tmp/stdout" >/dev/null ||
		fail "the softmax line does not show dim=-1"
	# cli.md's example line: the sizes that follow from the input come last
	grep -E '^conv2d out_channels kernel_size stride=1 padding=0 ' "$tmp/stdout" >/dev/null ||
		fail "the conv2d line does not start 'conv2d out_channels kernel_size stride=1 padding=0'"
	[ -s "$tmp/stderr" ] && fail "stderr is not empty"
	return 0
}
check "dlrun ops lists every core op with its defaults" t_ops_list

t_ops_linear() {
	run_dlrun ops linear
	expect_rc 0
	for _w in linear in_features out_features bias weight; do
		expect_stdout_has "$_w"
	done
	# its parameters and their shapes: weight [out_features, in_features]
	grep -E 'weight.*\[out_features, in_features\]' "$tmp/stdout" >/dev/null ||
		fail "no 'weight [out_features, in_features]' among the parameters"
	grep -E 'bias.*\[out_features\]' "$tmp/stdout" >/dev/null ||
		fail "no 'bias [out_features]' among the parameters"
	return 0
}
check "dlrun ops linear describes it, parameters with shapes" t_ops_linear
check "dlrun ops with an unknown op suggests one" t_error "'lnear'" "did you mean 'linear'" -- ops lnear

# ---- summary ----

# t_summary MODEL N: the table's total and the JSON's "params" are N
t_summary() {
	if [ ! -f "$1" ]; then
		fail "$1 does not exist"
		return 1
	fi
	run_dlrun summary "$1"
	expect_rc 0
	grep -E "^total parameters: +$2\$" "$tmp/stdout" >/dev/null ||
		fail "no line 'total parameters: $2'"
	return 0
}
t_summary_json() {
	[ -f "$1" ] || {
		fail "$1 does not exist"
		return 1
	}
	run_dlrun summary --json "$1"
	expect_rc 0
	grep -F "\"params\":$2," "$tmp/stdout" >/dev/null ||
		grep -F "\"params\":$2}" "$tmp/stdout" >/dev/null ||
		fail "no \"params\":$2"
	_j=$(cat "$tmp/stdout")
	case $_j in
	\{*\}) ;;
	*) fail "not one JSON object" ;;
	esac
	# balanced braces, brackets and quotes
	_o=$(printf '%s' "$_j" | tr -cd '{' | wc -c)
	_c=$(printf '%s' "$_j" | tr -cd '}' | wc -c)
	[ "$_o" -eq "$_c" ] || fail "$_o '{' but $_c '}'"
	_o=$(printf '%s' "$_j" | tr -cd '[' | wc -c)
	_c=$(printf '%s' "$_j" | tr -cd ']' | wc -c)
	[ "$_o" -eq "$_c" ] || fail "$_o '[' but $_c ']'"
	_q=$(printf '%s' "$_j" | tr -cd '"' | wc -c)
	[ $((_q % 2)) -eq 0 ] || fail "an odd number of '\"'"
	printf '%s' "$_j" | grep -E ',[]}]|[[{],|,,' >/dev/null &&
		fail "a stray comma"
	[ -s "$tmp/stderr" ] && fail "stderr is not empty"
	return 0
}
# 16*32+32 + 32*32+32 + 32*4+4, as torch's sum(p.numel()) reports
check "summary models/mlp.yaml: total parameters: 1732" t_summary "$mlp" 1732
check "summary --json models/mlp.yaml: \"params\":1732" t_summary_json "$mlp" 1732
# 4*8+8 + 8*3+3
check "summary tests/data/cli/small.yaml: total parameters: 67" t_summary "$cli/small.yaml" 67
check "summary --json small.yaml: \"params\":67" t_summary_json "$cli/small.yaml" 67

# each copy of a repeat labelled by its scope; every column aligned for
# long names, long op names and long shapes
t_summary_repeat() {
	cat >"$tmp/rep.yaml" <<'YAML'
inputs: {x: {shape: [6]}}
blocks:
  unit: [{name: proj, linear: {out_features: 6}}]
layers:
  - reshape: {shape: [1, 6]}
  - transformer_encoder_layer: {d_model: 6, nhead: 2, dim_feedforward: 8}
  - reshape: {shape: [6]}
  - name: blocks
    repeat:
      times: 2
      body:
        - {name: fc, linear: {out_features: 6}}
        - relu
  - name: shared
    repeat: {times: 2, use: unit}
  - {name: a_rather_long_entry_name_for_the_output_projection, linear: {out_features: 24}}
  - {name: re, reshape: {shape: [2, 1, 3, 1, 2, 1, 2]}}
  - {name: ln, layer_norm: {normalized_shape: 2}}
YAML
	run_dlrun summary "$tmp/rep.yaml"
	expect_rc 0
	for _l in blocks.0.fc blocks.0.1 blocks.1.fc blocks.1.1 shared.0.proj shared.1.proj; do
		grep -E "^ +$_l +" "$tmp/stdout" >/dev/null || fail "no row labelled $_l"
	done
	# the table: header and rows up to the blank line; the last column is
	# right-aligned, so every line has one length, and each column starts
	# where its header does
	sed '/^$/q' "$tmp/stdout" | sed '$d' >"$tmp/table"
	awk 'NR == 1 { n = length($0); op = index($0, "  op ") + 2; sh = index($0, "output shape")
	             next }
	     length($0) != n { print "line " NR " is " length($0) " wide, the header " n; bad = 1 }
	     substr($0, op - 1, 1) != " " || substr($0, op, 1) == " " { print "op column off on line " NR; bad = 1 }
	     substr($0, sh - 1, 1) != " " || substr($0, sh, 1) != "[" { print "shape column off on line " NR; bad = 1 }
	     END { exit bad }' "$tmp/table" >"$tmp/align" ||
		fail "$(head -n 3 "$tmp/align")"
	return 0
}
check "summary: repeat copies labelled by scope, columns aligned" t_summary_repeat

# t_summary_bytes YAML ARGS -- KEY:VALUE...: `summary --json ARGS` on a
# model of one entry (YAML, written to a file) prints each "KEY":VALUE
t_summary_bytes() {
	printf '%s\n' "$1" >"$tmp/one.yaml"
	shift
	_args=
	while [ "$1" != -- ]; do
		_args="$_args $1"
		shift
	done
	shift
	# shellcheck disable=SC2086
	run_dlrun summary --json "$tmp/one.yaml" $_args
	expect_rc 0 || return 1
	for _kv in "$@"; do
		grep -E "\"${_kv%%:*}\":${_kv#*:}[,}]" "$tmp/stdout" >/dev/null ||
			fail "no \"${_kv%%:*}\":${_kv#*:} in $(grep -o "\"${_kv%%:*}\":[0-9]*" "$tmp/stdout")"
	done
	return 0
}
# By hand, batch 2, float32 (4 bytes), arena buffers rounded up to 64 bytes:
# - a 1x1 conv2d from 3 to 4 channels on [3, 5, 5]: its workspace is one
#   private weight gradient (4 * 3 floats = 48 bytes) per thread, so 48 at
#   -t 1 and 96 at -t 2; the input 2*3*5*5 floats = 600 bytes; training,
#   the output (2*4*5*5 floats = 800 -> 832 bytes) and its gradient live at
#   once: 2 * 832 = 1664, nothing saved for backward.
# - layer_norm on [3, 5]: workspace and saved state are a mean and a rstd
#   per row, 2 * 2*3 floats = 48 bytes; the input 2*3*5 floats = 120 bytes;
#   training, output and gradient 2 * (120 -> 128) plus the saved 48 -> 64:
#   320.
pw_yaml='inputs: {x: {shape: [3, 5, 5]}}
layers: [conv2d: {out_channels: 4, kernel_size: 1}]'
ln_yaml='inputs: {x: {shape: [3, 5]}}
layers: [layer_norm]'
check "summary --json: 1x1 conv2d's workspace_bytes 48, input_bytes 600, training_bytes 1664 (-t 1)" \
	t_summary_bytes "$pw_yaml" -b 2 -t 1 -- workspace_bytes:48 input_bytes:600 training_bytes:1664
check "summary --json: 1x1 conv2d's workspace_bytes 96 at -t 2 (one slot per thread)" \
	t_summary_bytes "$pw_yaml" -b 2 -t 2 -- workspace_bytes:96 input_bytes:600 training_bytes:1664
check "summary --json: layer_norm's workspace_bytes 48, input_bytes 120, training_bytes 320" \
	t_summary_bytes "$ln_yaml" -b 2 -t 2 -- workspace_bytes:48 input_bytes:120 training_bytes:320

# ---- bench ----

t_bench() {
	run_dlrun bench "$mlp" --batch-size 4 --iterations 5 --threads 1
	expect_rc 0
	grep -E '^start-up and loading: [0-9.]+ ms$' "$tmp/stdout" >/dev/null ||
		fail "no start-up line"
	grep -E '^per iteration: median [0-9.]+ ms, min [0-9.]+ ms, max [0-9.]+ ms$' \
		"$tmp/stdout" >/dev/null || fail "no per-iteration line"
	# one row per entry of models/mlp.yaml, with its share
	for _e in fc1 fc2; do
		grep -E "^$_e +linear +[0-9.]+ +[0-9.]+%$" "$tmp/stdout" >/dev/null ||
			fail "no row for entry $_e"
	done
	return 0
}
t_bench_json() {
	run_dlrun bench "$mlp" --json --train -b 3 -k 4
	expect_rc 0
	for _k in '"model":"mlp"' '"batch":3' '"iterations":4' '"train":true' \
		'"startup_ms":' '"median_ms":' '"min_ms":' '"max_ms":' \
		'"entries":[{"scope":"fc1","op":"linear","median_ms":' '"share":'; do
		grep -F "$_k" "$tmp/stdout" >/dev/null || fail "no $_k in $(cat "$tmp/stdout")"
	done
	[ "$(wc -l <"$tmp/stdout")" -eq 1 ] || fail "not one line"
	return 0
}
check "bench models/mlp.yaml: start-up, median, one row per entry" t_bench
check "bench --json --train: the object of cli.md" t_bench_json

# ---- -t/--threads: every verb that computes ----

# threads_args VERB: the rest of a quick run of VERB
threads_args() {
	case $1 in
	infer) echo "$mlp" ;;
	train) echo "$srcdir/models/digits-mlp.yaml --data $srcdir/models/data/digits.npz --epochs 1 -o $tmp/thr.safetensors" ;;
	bench) echo "$mlp --iterations 2" ;;
	gradcheck) echo "$cli/small.yaml --samples 2" ;;
	summary) echo "$mlp" ;;
	esac
}
t_threads() {
	run_dlrun "$1" --help
	grep -E -e '-t, --threads N|--threads N' "$tmp/stdout" >/dev/null ||
		fail "dlrun $1 --help does not name -t/--threads"
	for _o in -t --threads; do
		# word splitting of the arguments is intended
		# shellcheck disable=SC2046
		run_dlrun "$1" "$_o" 1 $(threads_args "$1") <"$srcdir/models/mlp-input.npy"
		expect_rc 0
	done
	# shellcheck disable=SC2046
	run_dlrun "$1" -t 0 $(threads_args "$1") </dev/null
	expect_rc 2
	expect_one_error_line
	expect_stderr_has "$1: --threads takes an integer from 1 to 1024, got '0'"
	return 0
}
for v in infer train bench gradcheck summary; do
	check "dlrun $v takes -t/--threads N and says so in --help" t_threads "$v"
done

# ---- init ----

t_init_seed() {
	run_dlrun init "$cli/small.yaml" -o "$tmp/s1a.safetensors" --seed 1
	expect_rc 0
	run_dlrun init "$cli/small.yaml" -o "$tmp/s1b.safetensors" --seed 1
	expect_rc 0
	run_dlrun init "$cli/small.yaml" --seed 2 -o "$tmp/s2.safetensors"
	expect_rc 0
	same_bytes "$tmp/s1a.safetensors" "$tmp/s1b.safetensors"
	cmp "$tmp/s1a.safetensors" "$tmp/s2.safetensors" >/dev/null 2>&1 &&
		fail "seeds 1 and 2 give the same bytes"
	return 0
}
check "init: the same seed twice gives the same bytes, another seed others" t_init_seed

t_init_default_seed() {
	run_dlrun init "$cli/small.yaml" -o "$tmp/d1.safetensors"
	run_dlrun init "$cli/small.yaml" -o "$tmp/d2.safetensors"
	run_dlrun init "$cli/small.yaml" -o "$tmp/d0.safetensors" --seed 0
	expect_rc 0
	same_bytes "$tmp/d1.safetensors" "$tmp/d2.safetensors"
	same_bytes "$tmp/d1.safetensors" "$tmp/d0.safetensors"
	return 0
}
check "init: the default seed is 0 and deterministic" t_init_default_seed

t_init_default_path() {
	mkdir "$tmp/init" && cp "$cli/small.yaml" "$tmp/init/m.yaml" || return 1
	run_dlrun init "$tmp/init/m.yaml" --seed 3
	expect_rc 0
	[ -f "$tmp/init/m.safetensors" ] || fail "init did not write m.safetensors"
	cp "$tmp/init/m.safetensors" "$tmp/m3.safetensors"
	run_dlrun init "$tmp/init/m.yaml" --seed 4
	expect_rc 2
	expect_one_error_line
	expect_stderr_has "m.safetensors"
	same_bytes "$tmp/init/m.safetensors" "$tmp/m3.safetensors"
	run_dlrun init "$tmp/init/m.yaml" --seed 4 --force
	expect_rc 0
	cmp "$tmp/init/m.safetensors" "$tmp/m3.safetensors" >/dev/null &&
		fail "--force did not replace the file"
	run_dlrun init "$tmp/init/m.yaml" --seed 3 -o "$tmp/init/m.safetensors"
	expect_rc 0
	same_bytes "$tmp/init/m.safetensors" "$tmp/m3.safetensors"
	only_files "$tmp/init" m.yaml m.safetensors
	return 0
}
check "init: writes the default path once, then needs -o or --force" t_init_default_path

t_init_usable() {
	run_dlrun init "$cli/small.yaml" -o "$tmp/u.safetensors"
	run_dlrun summary "$cli/small.yaml" -w "$tmp/u.safetensors"
	expect_rc 0
	return 0
}
check "init: summary -w accepts the file init wrote" t_init_usable

# cli.md's `dlrun init MODEL -o WEIGHTS` on a model with a symbolic size
# ([T, 4]): its parameters do not depend on T, so no --input-shape is
# needed (the weights are those of any T); a spatial_gating's [T, T] weight
# does, and that is said
t_init_symbolic() {
	printf 'inputs:\n  x: {shape: [T, 4]}\nlayers:\n  - linear: {out_features: 3}\n' \
		>"$tmp/sym.yaml"
	run_dlrun init "$tmp/sym.yaml" -o "$tmp/sym1.safetensors"
	expect_rc 0 || return 1
	run_dlrun init "$tmp/sym.yaml" -o "$tmp/sym2.safetensors" --input-shape x=5,4
	expect_rc 0
	same_bytes "$tmp/sym1.safetensors" "$tmp/sym2.safetensors"
	printf 'inputs:\n  x: {shape: [T, 4]}\nlayers:\n  - spatial_gating\n' >"$tmp/sg.yaml"
	run_dlrun init "$tmp/sg.yaml" -o "$tmp/sg.safetensors"
	expect_rc 2
	expect_error_line "the symbolic size T: give it with --input-shape x=
the parameters' shapes depend on it"
}
check "init: a symbolic size needs --input-shape only when parameters depend on it" t_init_symbolic

# ---- infer ----

# The models the infer tests run: models/mlp.yaml (16 -> 4) with its
# committed weights, and tests/data/cli/small.yaml (4 -> 3) with weights
# made by init here.
"$DLRUN" init "$cli/small.yaml" -o "$tmp/small.safetensors" --seed 7 \
	>/dev/null 2>&1 || echo "# dlrun init small.yaml failed"

# use_model NAME: sets M (model), MW (weights), D (input size), O (output size)
use_model() {
	case $1 in
	mlp) M=$mlp MW=$srcdir/models/mlp.safetensors D=16 O=4 ;;
	small) M=$cli/small.yaml MW=$tmp/small.safetensors D=4 O=3 ;;
	esac
	npy_rows 1 "$D" 0 >"$tmp/one.npy"
	npy_rows 7 "$D" 3 >"$tmp/seven.npy"
}

t_stream() {
	run_dlrun infer "$M" -w "$MW" <"$tmp/one.npy"
	expect_rc 0
	cp "$tmp/stdout" "$tmp/one.out"
	[ "$(count_magic "$tmp/one.out")" -eq 1 ] || fail "one array in, not one out"
	head -c 6 "$tmp/one.out" | od -An -c | grep -F '223   N   U   M   P   Y' >/dev/null ||
		fail "the output does not start with the .npy magic"
	grep -a -F "'shape': (1, $O)" "$tmp/one.out" >/dev/null ||
		fail "the output's shape is not (1, $O)"
	cat "$tmp/one.npy" "$tmp/one.npy" >"$tmp/two.npy"
	run_dlrun infer "$M" -w "$MW" <"$tmp/two.npy"
	expect_rc 0
	[ "$(count_magic "$tmp/stdout")" -eq 2 ] ||
		fail "two arrays in, $(count_magic "$tmp/stdout") out"
	cat "$tmp/one.out" "$tmp/one.out" >"$tmp/two.expected"
	same_bytes "$tmp/stdout" "$tmp/two.expected"
	return 0
}

t_stream_expected() {
	cat "$srcdir/models/mlp-expected.npy" "$srcdir/models/mlp-expected.npy" \
		>"$tmp/mlp2.expected"
	cat "$srcdir/models/mlp-input.npy" "$srcdir/models/mlp-input.npy" \
		>"$tmp/mlp2.in"
	run_dlrun infer "$mlp" <"$tmp/mlp2.in"
	expect_rc 0
	"$NPYCMP" "$tmp/stdout" "$tmp/mlp2.expected" >"$tmp/cmp" 2>&1 ||
		fail "npycmp: $(cat "$tmp/cmp")"
	return 0
}

# cli.md: '-' as a path means stdin or stdout: the weights (-w -, the
# inputs then from -i files, as stdin is taken) and train's --log
t_dash_paths() {
	run_dlrun init "$mlp" -o -
	expect_rc 0 || return 1
	cp "$tmp/stdout" "$tmp/dash.safetensors"
	run_dlrun infer "$mlp" -w - -i "$srcdir/models/mlp-input.npy" <"$tmp/dash.safetensors"
	expect_rc 0 || return 1
	"$NPYCMP" "$tmp/stdout" "$srcdir/models/mlp-expected.npy" >/dev/null 2>&1 &&
		fail "init's fresh weights gave the trained model's outputs"
	[ "$(count_magic "$tmp/stdout")" -eq 1 ] || fail "not one array out"
	run_dlrun infer "$mlp" -w - <"$srcdir/models/mlp-input.npy"
	expect_rc 2
	expect_error_line "-w - reads the weights from stdin"
	p=$srcdir/tests/data/train_parity/mlp
	run_dlrun train "$p/model.yaml" -w "$p/init.safetensors" --data "$p/x.npy" \
		--labels "$p/y.npy" --epochs 2 -q -o "$tmp/dash.safetensors" --log -
	expect_rc 0
	[ "$(grep -c '^{"epoch":' "$tmp/stdout")" -eq 2 ] || fail "no 2 JSON lines on stdout"
	[ -e ./- ] && fail "a file named - was written"
	return 0
}
check "'-' is stdin for -w and stdout for --log" t_dash_paths

t_batch_size() {
	run_dlrun infer "$M" -w "$MW" <"$tmp/seven.npy"
	expect_rc 0
	cp "$tmp/stdout" "$tmp/seven.out"
	grep -a -F "'shape': (7, $O)" "$tmp/seven.out" >/dev/null ||
		fail "the output's shape is not (7, $O)"
	# The same numbers as one piece, to float32 rounding: OpenBLAS may sum
	# a row's products in another order when a call has another number of
	# rows, so the last bit can differ (dlrun-infer(1), --batch-size).
	for _b in 1 2 3 7 100; do
		run_dlrun infer "$M" -w "$MW" --batch-size "$_b" <"$tmp/seven.npy"
		expect_rc 0
		"$NPYCMP" "$tmp/stdout" "$tmp/seven.out" 1e-6 >"$tmp/cmp" 2>&1 ||
			fail "--batch-size $_b gives other numbers than one piece: $(cat "$tmp/cmp")"
		cmp "$tmp/stdout" "$tmp/seven.out" >/dev/null 2>&1 ||
			note "--batch-size $_b: equal to 1e-6, not to the bit"
	done
	# a chunk size that is the whole array is the same call: the same bytes
	run_dlrun infer "$M" -w "$MW" --batch-size 7 <"$tmp/seven.npy"
	same_bytes "$tmp/stdout" "$tmp/seven.out"
	run_dlrun infer "$M" -w "$MW" -b 3 <"$tmp/seven.npy"
	expect_rc 0
	return 0
}

# --batch-size reads a large array chunk by chunk from its stream; one
# that breaks off in a later chunk still writes nothing
t_batch_truncated() {
	_n=$(wc -c <"$tmp/seven.npy")
	head -c $((_n - 10)) "$tmp/seven.npy" >"$tmp/seven_cut.npy"
	run_dlrun infer "$M" -w "$MW" --batch-size 2 <"$tmp/seven_cut.npy"
	expect_rc 2
	[ -s "$tmp/stdout" ] && fail "output written for a truncated array"
	grep -F "truncated" "$tmp/stderr" >/dev/null || fail "the error does not say truncated"
	return 0
}

t_output_file() {
	rm -rf "$tmp/o"
	mkdir "$tmp/o"
	run_dlrun infer "$M" -w "$MW" <"$tmp/seven.npy"
	cp "$tmp/stdout" "$tmp/seven.out"
	run_dlrun infer "$M" -w "$MW" -o "$tmp/o/y.npy" <"$tmp/seven.npy"
	expect_rc 0
	[ -s "$tmp/stdout" ] && fail "stdout is not empty with -o"
	same_bytes "$tmp/o/y.npy" "$tmp/seven.out"
	only_files "$tmp/o" y.npy
	# replaces an existing file
	echo old >"$tmp/o/y.npy"
	run_dlrun infer "$M" -w "$MW" --output "$tmp/o/y.npy" <"$tmp/seven.npy"
	expect_rc 0
	same_bytes "$tmp/o/y.npy" "$tmp/seven.out"
	only_files "$tmp/o" y.npy
	# '-' is stdout, -i PATH and -i - read the input
	run_dlrun infer "$M" -w "$MW" -o - -i - <"$tmp/seven.npy"
	expect_rc 0
	same_bytes "$tmp/stdout" "$tmp/seven.out"
	run_dlrun infer "$M" -w "$MW" -i "$tmp/seven.npy" </dev/null
	expect_rc 0
	same_bytes "$tmp/stdout" "$tmp/seven.out"
	return 0
}

t_failed_run_keeps_file() {
	rm -rf "$tmp/o"
	mkdir "$tmp/o"
	echo old >"$tmp/o/y.npy"
	# a good array, then a truncated one: the run fails after the first step
	{
		cat "$tmp/one.npy"
		npy_header '<f4' "(2, $D)"
		f4 1 2
	} >"$tmp/half.npy"
	run_dlrun infer "$M" -w "$MW" -o "$tmp/o/y.npy" <"$tmp/half.npy"
	expect_rc 2
	expect_one_error_line
	[ "$(cat "$tmp/o/y.npy")" = old ] || fail "the failed run changed y.npy"
	only_files "$tmp/o" y.npy
	return 0
}

t_zero_samples() {
	npy_header '<f4' "(0, $D)" >"$tmp/zero.npy"
	run_dlrun infer "$M" -w "$MW" <"$tmp/zero.npy"
	expect_rc 0
	grep -a -F "'shape': (0, $O)" "$tmp/stdout" >/dev/null ||
		fail "the output's shape is not (0, $O)"
	[ "$(wc -c <"$tmp/stdout")" -eq 128 ] ||
		fail "the output has $(wc -c <"$tmp/stdout") bytes, expected a 128-byte header and no data"
	# a zero-sample array in a stream
	cat "$tmp/one.npy" "$tmp/zero.npy" "$tmp/one.npy" >"$tmp/z3.npy"
	run_dlrun infer "$M" -w "$MW" <"$tmp/z3.npy"
	expect_rc 0
	[ "$(count_magic "$tmp/stdout")" -eq 3 ] || fail "three arrays in, not three out"
	run_dlrun infer "$M" -w "$MW" --format text </dev/null
	expect_rc 0
	[ -s "$tmp/stdout" ] && fail "no text rows in, but output"
	printf '# only a comment\n\n' >"$tmp/empty.txt"
	run_dlrun infer "$M" -w "$MW" --format text -i "$tmp/empty.txt"
	expect_rc 0
	[ -s "$tmp/stdout" ] && fail "no text rows in, but output"
	return 0
}

t_text_batch() {
	rows 7 "$D" 3 >"$tmp/seven.txt"
	run_dlrun infer "$M" -w "$MW" --format text <"$tmp/seven.txt"
	expect_rc 0
	cp "$tmp/stdout" "$tmp/seven.txt.out"
	[ "$(wc -l <"$tmp/seven.txt.out")" -eq 7 ] || fail "7 rows in, not 7 out"
	_bad=$(awk -v o="$O" 'NF != o' "$tmp/seven.txt.out")
	[ -z "$_bad" ] || fail "output rows without $O values: $_bad"
	for _b in 2 3 7 10; do
		run_dlrun infer "$M" -w "$MW" --format text --batch-size "$_b" <"$tmp/seven.txt"
		expect_rc 0
		close_rows "$tmp/stdout" "$tmp/seven.txt.out" 1e-6 ||
			fail "--format text --batch-size $_b gives other rows"
	done
	# comments, blank lines, tabs and commas
	{
		echo "# seven rows"
		echo
		sed -n 1,3p "$tmp/seven.txt" | tr ' ' ','
		echo "   "
		sed -n 4,7p "$tmp/seven.txt" | sed 's/ /\t/; s/$/ # row/'
	} >"$tmp/seven2.txt"
	run_dlrun infer "$M" -w "$MW" -f text -b 3 -i "$tmp/seven2.txt"
	expect_rc 0
	same_bytes "$tmp/stdout" "$tmp/seven.txt.out"
	return 0
}

# co-process: start dlrun infer with stdin and stdout on FIFOs, and write one
# sample, read its answer, three times over the same open pipes.
# t_coproc npy|text
t_coproc() {
	_fmt=$1
	rm -f "$tmp/cp_in" "$tmp/cp_out"
	mkfifo "$tmp/cp_in" "$tmp/cp_out" || {
		fail "mkfifo failed"
		return 1
	}
	for _i in 1 2 3; do
		npy_rows 1 "$D" $((_i * 4)) >"$tmp/cp$_i.npy"
		rows 1 "$D" $((_i * 4)) >"$tmp/cp$_i.text"
		run_dlrun infer "$M" -w "$MW" --format "$_fmt" <"$tmp/cp$_i.$_fmt"
		cp "$tmp/stdout" "$tmp/cp$_i.expected"
	done
	last_cmd="dlrun infer $M -w $MW --format $_fmt (co-process)"
	# word splitting of the valgrind prefix is intended
	# shellcheck disable=SC2046
	set -- $(dlrun_cmd) "$DLRUN" infer "$M" -w "$MW" --format "$_fmt"
	"$@" <"$tmp/cp_in" >"$tmp/cp_out" 2>"$tmp/stderr" &
	_pid=$!
	bg_pids="$bg_pids $_pid"
	exec 3>"$tmp/cp_in" 4<"$tmp/cp_out"
	for _i in 1 2 3; do
		cat "$tmp/cp$_i.$_fmt" >&3
		_n=$(wc -c <"$tmp/cp$_i.expected")
		if ! timeout "$answer_timeout" head -c "$_n" <&4 >"$tmp/cp$_i.got"; then
			fail "round $_i: no answer within ${answer_timeout}s"
			break
		fi
		cmp "$tmp/cp$_i.got" "$tmp/cp$_i.expected" >/dev/null 2>&1 ||
			fail "round $_i: the answer differs from a separate run's"
	done
	exec 3>&-
	# end of input: dlrun exits 0
	_k=0
	while kill -0 "$_pid" 2>/dev/null; do
		if [ "$_k" -ge $((answer_timeout * 10)) ]; then
			kill "$_pid"
			fail "dlrun did not exit at the end of its input"
			break
		fi
		sleep 0.1
		_k=$((_k + 1))
	done
	wait "$_pid"
	rc=$?
	bg_pids=
	# nothing more than the three answers
	cat <&4 >"$tmp/cp_rest"
	exec 4<&-
	[ -s "$tmp/cp_rest" ] && fail "more output after the three answers"
	expect_rc 0
	return 0
}

t_two_inputs() {
	_m=$cli/two_inputs.yaml
	run_dlrun init "$_m" -o "$tmp/two.safetensors" --seed 5
	expect_rc 0
	npy_rows 5 3 0 >"$tmp/a.npy"
	npy_rows 5 3 2 >"$tmp/b.npy"
	# in the order of inputs:, from stdin
	cat "$tmp/a.npy" "$tmp/b.npy" >"$tmp/ab.npy"
	run_dlrun infer "$_m" -w "$tmp/two.safetensors" <"$tmp/ab.npy"
	expect_rc 0
	cp "$tmp/stdout" "$tmp/ab.out"
	[ "$(count_magic "$tmp/ab.out")" -eq 1 ] || fail "two inputs, not one output"
	grep -a -F "'shape': (5, 2)" "$tmp/ab.out" >/dev/null ||
		fail "the output's shape is not (5, 2)"
	# named, in the other order
	run_dlrun infer "$_m" -w "$tmp/two.safetensors" \
		-i "b=$tmp/b.npy" -i "a=$tmp/a.npy" </dev/null
	expect_rc 0
	cmp "$tmp/stdout" "$tmp/ab.out" >/dev/null 2>&1 ||
		fail "-i b=B -i a=A differs from A and B on stdin"
	# unnamed -i bind in order
	run_dlrun infer "$_m" -w "$tmp/two.safetensors" \
		-i "$tmp/a.npy" -i "$tmp/b.npy" </dev/null
	expect_rc 0
	cmp "$tmp/stdout" "$tmp/ab.out" >/dev/null 2>&1 ||
		fail "-i A -i B differs from A and B on stdin"
	# swapped: a - b changes sign, so the output differs
	run_dlrun infer "$_m" -w "$tmp/two.safetensors" \
		-i "a=$tmp/b.npy" -i "b=$tmp/a.npy" </dev/null
	expect_rc 0
	cmp "$tmp/stdout" "$tmp/ab.out" >/dev/null 2>&1 &&
		fail "-i a=B -i b=A gives the same output as a=A b=B"
	# two steps in lock step
	cat "$tmp/a.npy" "$tmp/a.npy" >"$tmp/aa.npy"
	cat "$tmp/b.npy" "$tmp/b.npy" >"$tmp/bb.npy"
	run_dlrun infer "$_m" -w "$tmp/two.safetensors" \
		-i "a=$tmp/aa.npy" -i "b=$tmp/bb.npy" --batch-size 2 </dev/null
	expect_rc 0
	cat "$tmp/ab.out" "$tmp/ab.out" >"$tmp/ab2.out"
	cmp "$tmp/stdout" "$tmp/ab2.out" >/dev/null 2>&1 ||
		fail "two steps of named inputs differ from two separate answers"
	# text, one file per input
	rows 5 3 0 >"$tmp/a.txt"
	rows 5 3 2 >"$tmp/b.txt"
	run_dlrun infer "$_m" -w "$tmp/two.safetensors" --format text \
		-i "a=$tmp/a.txt" -i "b=$tmp/b.txt" </dev/null
	expect_rc 0
	[ "$(wc -l <"$tmp/stdout")" -eq 5 ] || fail "text: 5 rows in, not 5 out"
	return 0
}

t_text_identity() {
	printf '1 2.5 -3\n0.1 1e-3 7\n-0 3.4028235e38 1e-45\n' >"$tmp/id.txt"
	printf '1 2.5 -3\n0.100000001 0.00100000005 7\n-0 3.40282347e+38 1.40129846e-45\n' \
		>"$tmp/id.expected"
	run_dlrun infer "$cli/identity.yaml" --format text <"$tmp/id.txt"
	expect_rc 0
	same_bytes "$tmp/stdout" "$tmp/id.expected"
	run_dlrun infer "$cli/identity.yaml" --format text --batch-size 3 <"$tmp/id.txt"
	expect_rc 0
	same_bytes "$tmp/stdout" "$tmp/id.expected"
	# text out is text in again
	run_dlrun infer "$cli/identity.yaml" --format text <"$tmp/id.expected"
	expect_rc 0
	same_bytes "$tmp/stdout" "$tmp/id.expected"
	# npy through the identity keeps every byte of the data
	npy_rows 4 3 1 >"$tmp/id.npy"
	run_dlrun infer "$cli/identity.yaml" <"$tmp/id.npy"
	expect_rc 0
	[ "$(tail -c 48 "$tmp/stdout" | od -An -tx1)" = "$(tail -c 48 "$tmp/id.npy" | od -An -tx1)" ] ||
		fail "the identity changed the npy data"
	grep -a -F "'shape': (4, 3)" "$tmp/stdout" >/dev/null ||
		fail "the identity's output shape is not (4, 3)"
	return 0
}
check "text round trip through identity.yaml (%.9g)" t_text_identity
check "infer: two inputs by -i NAME=PATH, by order, and on stdin" t_two_inputs

# the other format than --format says: one line naming the flag that reads it
t_wrong_format() {
	run_dlrun infer "$mlp" --format text <"$srcdir/models/mlp-input.npy"
	expect_rc 2
	expect_one_error_line
	expect_stderr_has "stdin: a .npy array, not text"
	expect_stderr_has "leave out --format text"
	run_dlrun infer "$mlp" --format text -i "$srcdir/models/mlp-input.npy"
	expect_rc 2
	expect_one_error_line
	expect_stderr_has "mlp-input.npy: a .npy array, not text"
	run_dlrun infer "$mlp" <"$srcdir/models/mlp-input.txt"
	expect_rc 2
	expect_one_error_line
	expect_stderr_has "stdin: text, not a .npy array (it starts with '#'); --format text reads it"
	echo "1 2 3" >"$tmp/wf.txt"
	run_dlrun infer "$mlp" -i "$tmp/wf.txt"
	expect_rc 2
	expect_one_error_line
	expect_stderr_has "wf.txt: text, not a .npy array (it starts with '1'); --format text reads it"
	[ -s "$tmp/stdout" ] && fail "stdout is not empty"
	return 0
}
check "infer: .npy given to --format text, text given to .npy: the flag that reads it" t_wrong_format

for name in mlp small; do
	if [ "$name" = mlp ] && [ ! -f "$mlp" ]; then
		check "models/mlp.yaml exists" fail "$mlp does not exist"
		continue
	fi
	use_model "$name"
	check "$name: cat x.npy x.npy | dlrun infer gives two arrays" t_stream
	check "$name: --batch-size 1 2 3 7 100 give the bytes of one piece" t_batch_size
	check "$name: --batch-size on a truncated array writes nothing" t_batch_truncated
	check "$name: -o FILE writes the file, no temporary files left" t_output_file
	check "$name: a run failing midway leaves the -o file as it was" t_failed_run_keeps_file
	check "$name: zero-sample batches" t_zero_samples
	check "$name: --format text, with --batch-size, comments and separators" t_text_batch
	check "$name: co-process over FIFOs, npy, three rounds" t_coproc npy
	check "$name: co-process over FIFOs, text, three rounds" t_coproc text
done
if [ -f "$mlp" ] && [ -n "$NPYCMP" ] && [ -x "$NPYCMP" ]; then
	check "mlp: cat mlp-input.npy twice matches mlp-expected.npy twice (npycmp)" t_stream_expected
fi

done_testing
