#!/bin/sh
# dlrun draw, printing TAP: the example models and tests/data/draw/*.yaml
# (residuals with and without a shortcut, repeats of a body and of a block,
# two inputs wired with in:, hyperparameters of every kind, a symbolic size)
# give well-formed SVG (a structural check here, xmllint too when it is
# installed) with the op names, the "xN" repeat labels, the non-default
# hyperparameters in blue and the shapes; -o writes the file whole and
# leaves no temporary file; bad models and options exit 2 with one line.
#
# Environment: see tests/lib.sh.

# shellcheck source=tests/lib.sh
. "${srcdir:-$(dirname "$0")/..}/tests/lib.sh"

data=$srcdir/tests/data/draw
models=$srcdir/models
times=$(printf '\303\227')   # U+00D7, the multiplication sign of "x3"

# well_formed FILE: FILE is one <svg> element whose tags nest and close,
# with no stray '<', '>' or '&' in its text (a cheap stand-in for an XML
# parser: dlrun writes no '>' inside attribute values)
well_formed() {
	awk '
		BEGIN { RS = "<"; depth = 0; roots = 0; bad = "" }
		NR == 1 { if ($0 ~ /[^ \t\r\n]/) bad = "text before the first tag"; next }
		{
			i = index($0, ">")
			if (!i) { bad = "a tag that does not close"; exit }
			tag = substr($0, 1, i - 1); text = substr($0, i + 1)
			if (index(text, ">")) { bad = "a stray > in text"; exit }
			t = text
			gsub(/&(amp|lt|gt|quot|apos|#[0-9]+|#x[0-9a-fA-F]+);/, "", t)
			if (index(t, "&")) { bad = "a bare & in text"; exit }
			if (depth == 0 && roots > 0 && text ~ /[^ \t\r\n]/) {
				bad = "text after the root element"; exit
			}
			if (tag ~ /^[?!]/) next
			if (tag ~ /^\//) {
				name = substr(tag, 2)
				if (depth == 0 || stack[depth] != name) {
					bad = "</" name "> closes <" stack[depth] ">"; exit
				}
				depth--
				next
			}
			split(tag, part, /[ \t\r\n\/]/)
			name = part[1]
			if (depth == 0) { roots++; if (roots == 1) root = name }
			if (tag !~ /\/$/) stack[++depth] = name
		}
		END {
			if (bad == "" && depth > 0) bad = "<" stack[depth] "> is never closed"
			if (bad == "" && roots != 1) bad = roots " root elements"
			if (bad == "" && root != "svg") bad = "the root is <" root ">, not <svg>"
			if (bad != "") { print bad; exit 1 }
		}
	' "$1" >"$tmp/wf" || {
		fail "$1 is not well-formed: $(cat "$tmp/wf")"
		return 1
	}
	tail -n 1 "$1" | grep '^</svg>$' >/dev/null || fail "$1 does not end with </svg>"
	return 0
}

# has FILE STRING...: each STRING appears in FILE
has() {
	_has_f=$1
	shift
	for _has_s in "$@"; do
		grep -F -e "$_has_s" "$_has_f" >/dev/null || fail "the drawing lacks '$_has_s'"
	done
	return 0
}

# lacks FILE STRING...: no STRING appears in FILE
lacks() {
	_lacks_f=$1
	shift
	for _lacks_s in "$@"; do
		grep -F -e "$_lacks_s" "$_lacks_f" >/dev/null && fail "the drawing has '$_lacks_s'"
	done
	return 0
}

# count FILE STRING: the lines of FILE holding STRING
count() {
	grep -c -F -e "$2" "$1"
}

# draws MODEL TEXT...: `dlrun draw MODEL` exits 0, prints a well-formed SVG
# and nothing on stderr, and the SVG holds each TEXT (as an element's text)
draws() {
	_dr_m=$1
	shift
	run_dlrun draw "$_dr_m"
	expect_rc 0
	[ -s "$tmp/stderr" ] && fail "stderr is not empty"
	well_formed "$tmp/stdout"
	for _dr_t in "$@"; do
		has "$tmp/stdout" ">$_dr_t<"
	done
	return 0
}

# ---- help and usage errors ----

t_help() {
	run_dlrun draw "$1"
	expect_rc 0
	grep '^usage: dlrun draw' "$tmp/stdout" >/dev/null ||
		fail "no 'usage: dlrun draw' on stdout"
	[ -s "$tmp/stderr" ] && fail "stderr is not empty"
	return 0
}
check "draw --help" t_help --help
check "draw -h" t_help -h

t_usage_error() {
	run_dlrun draw "$@"
	expect_rc 2
	expect_one_error_line
	[ -s "$tmp/stdout" ] && fail "stdout is not empty"
	return 0
}
check "draw without a model: exit 2, one line" t_usage_error
check "draw with an unknown option: exit 2, one line" t_usage_error --bogus "$models/mlp.yaml"
check "draw with two models: exit 2, one line" t_usage_error "$models/mlp.yaml" "$models/mlp.yaml"
check "draw -o without a value: exit 2, one line" t_usage_error "$models/mlp.yaml" -o
check "draw of a missing file: exit 2, one line" t_usage_error "$tmp/nothing.yaml"

# ---- the example models ----

t_mlp() {
	draws "$models/mlp.yaml" x output linear relu gelu 16 4 32
	has "$tmp/stdout" 'fill="blue"' 'out_features=32' 'out_features=4' '>fc1<' '>fc2<'
	# the three linear layers have parameters: the darker fill
	[ "$(count "$tmp/stdout" 'fill="#c4c4c4"')" -eq 3 ] ||
		fail "not three boxes with the darker fill"
	[ "$(count "$tmp/stdout" 'fill="#f4f4f4"')" -eq 2 ] ||
		fail "not two boxes with the light fill"
	return 0
}
check "draw models/mlp.yaml: boxes, names, fills, shapes" t_mlp

t_resnet() {
	draws "$models/resnet-block.yaml" conv2d batch_norm2d relu x output \
		"16${times}16${times}16" "32${times}8${times}8"
	has "$tmp/stdout" 'stride=2' 'bias=false'
	# two residuals: two circled plus signs, two branch dots
	[ "$(count "$tmp/stdout" 'r="9"')" -eq 2 ] || fail "not two circled plus signs"
	return 0
}
check "draw models/resnet-block.yaml: shortcut and skip" t_resnet

t_unet() {
	draws "$models/unet-small.yaml" conv2d conv_transpose2d concat image output \
		enc1 down1 down2 dec1 dec2 cat1 cat2
	# the in: wiring of cat1 and cat2 arrives from the left as paths
	[ "$(count "$tmp/stdout" '<path d=')" -ge 2 ] || fail "no side arrows"
	return 0
}
check "draw models/unet-small.yaml: named groups, in: arrows" t_unet

t_others() {
	draws "$models/lenet5.yaml" conv2d max_pool2d flatten linear
	draws "$models/mobilenet-block.yaml" conv2d adaptive_avg_pool2d inverted separable
	return 0
}
check "draw models/lenet5.yaml and mobilenet-block.yaml" t_others

# ---- tests/data/draw ----

t_residual() {
	draws "$data/residual.yaml" conv2d batch_norm2d relu tanh adaptive_avg_pool2d \
		flatten linear identity_block
	# three residuals (one inside another, one with a shortcut)
	[ "$(count "$tmp/stdout" 'r="9"')" -eq 3 ] || fail "not three circled plus signs"
	has "$tmp/stdout" 'out_channels=32' 'kernel_size=1, stride=2' "32${times}8${times}8"
	return 0
}
check "draw residuals with and without a shortcut" t_residual

t_repeat() {
	draws "$data/repeat.yaml" "${times}3, shared" "${times}2" layer_norm gelu stem head tokens
	# two dashed frames, and one copy of each body: two layer_norm boxes
	# (the repeated block and the used one), not four
	[ "$(count "$tmp/stdout" 'stroke-dasharray')" -eq 2 ] || fail "not two dashed frames"
	[ "$(count "$tmp/stdout" '>layer_norm<')" -eq 2 ] || fail "not two layer_norm boxes"
	[ "$(count "$tmp/stdout" '>relu<')" -eq 1 ] || fail "the repeat body is drawn more than once"
	has "$tmp/stdout" 'approximate=tanh' 'out_features=5' "12${times}5"
	# the shared one says so; the frames' tooltips spell cli.md's "x N"
	has "$tmp/stdout" '<title>x 3, shared</title>' '<title>x 2</title>'
	return 0
}
check "draw repeats of a body (shared) and of a block" t_repeat

t_inputs() {
	draws "$data/inputs.yaml" image meta logits features hidden meta_proj both mixed \
		concat sub sigmoid
	has "$tmp/stdout" '<ellipse' 'out_features=3'
	[ "$(count "$tmp/stdout" '<ellipse')" -eq 4 ] || fail "not four ovals (two inputs, two outputs)"
	return 0
}
check "draw two inputs, in: wiring and two outputs" t_inputs

t_hparams() {
	draws "$data/hparams.yaml" conv2d leaky_relu batch_norm2d max_pool2d dropout2d \
		linear gelu layer_norm softmax
	# every kind of value, in blue
	has "$tmp/stdout" 'fill="blue"' 'out_features=7' 'bias=false' 'negative_slope=0.2' \
		'kernel_size=[3, 5]' 'padding=same' 'padding=[[1, 2], [0, 1]]' \
		'padding=valid' 'ceil_mode=true' 'p=0.125' 'approximate=tanh' \
		'momentum=0.25' 'eps=0.001' 'dim=1'
	# values equal to their defaults are not drawn
	lacks "$tmp/stdout" 'stride=1' 'dilation=1' 'bias=true' 'eps=1e-05' 'eps=1e-5'
	# the model name is escaped in the title
	has "$tmp/stdout" '<title>hyper &lt;parameters&gt; &amp; &quot;quotes&quot;</title>'
	return 0
}
check "draw non-default hyperparameters, escaped text" t_hparams

t_symbolic() {
	draws "$data/symbolic.yaml" linear relu mean "T${times}8"
	lacks "$tmp/stdout" "${times}16<"
	run_dlrun draw "$data/symbolic.yaml" --input-shape seq=5,8
	expect_rc 0
	well_formed "$tmp/stdout"
	has "$tmp/stdout" ">5${times}16<"
	return 0
}
check "draw a symbolic model: no shapes, or those of --input-shape" t_symbolic

t_xmllint() {
	for _xm in "$models/mlp.yaml" "$models/resnet-block.yaml" \
		"$models/unet-small.yaml" "$data"/*.yaml; do
		case $_xm in */bad.yaml) continue ;; esac
		run_dlrun draw "$_xm"
		expect_rc 0
		xmllint --noout "$tmp/stdout" 2>"$tmp/xmllint" ||
			fail "xmllint rejects the drawing of $_xm: $(head -n 3 "$tmp/xmllint")"
	done
	return 0
}
if command -v xmllint >/dev/null 2>&1; then
	check "xmllint accepts every drawing" t_xmllint
else
	skip "xmllint accepts every drawing" "xmllint is not installed"
fi

# ---- output files ----

t_output_file() {
	rm -rf "$tmp/o"
	mkdir "$tmp/o"
	run_dlrun draw "$models/mlp.yaml"
	cp "$tmp/stdout" "$tmp/mlp.svg"
	run_dlrun draw "$models/mlp.yaml" -o "$tmp/o/mlp.svg"
	expect_rc 0
	[ -s "$tmp/stdout" ] && fail "stdout is not empty with -o"
	same_bytes "$tmp/o/mlp.svg" "$tmp/mlp.svg"
	only_files "$tmp/o" mlp.svg
	# replaces an existing file; --output is -o; '-' is stdout
	echo old >"$tmp/o/mlp.svg"
	run_dlrun draw --output "$tmp/o/mlp.svg" "$models/mlp.yaml"
	expect_rc 0
	same_bytes "$tmp/o/mlp.svg" "$tmp/mlp.svg"
	only_files "$tmp/o" mlp.svg
	run_dlrun draw "$models/mlp.yaml" -o -
	expect_rc 0
	same_bytes "$tmp/stdout" "$tmp/mlp.svg"
	return 0
}
check "draw -o FILE writes the file whole, no temporary files" t_output_file

t_bad_model() {
	rm -rf "$tmp/o"
	mkdir "$tmp/o"
	run_dlrun draw "$data/bad.yaml" -o "$tmp/o/bad.svg"
	expect_rc 2
	expect_one_error_line
	expect_stderr_has "bad.yaml:"
	only_files "$tmp/o"
	# an existing file stays as it was
	echo old >"$tmp/o/bad.svg"
	run_dlrun draw "$data/bad.yaml" -o "$tmp/o/bad.svg"
	expect_rc 2
	expect_one_error_line
	[ "$(cat "$tmp/o/bad.svg")" = old ] || fail "the failed run changed bad.svg"
	only_files "$tmp/o" bad.svg
	# and nothing on stdout without -o
	run_dlrun draw "$data/bad.yaml"
	expect_rc 2
	expect_one_error_line
	[ -s "$tmp/stdout" ] && fail "stdout is not empty"
	return 0
}
check "draw of a bad model: exit 2, one line, no output file" t_bad_model

t_output_dir() {
	run_dlrun draw "$models/mlp.yaml" -o "$tmp"
	expect_rc 2
	expect_one_error_line
	return 0
}
check "draw -o DIRECTORY: exit 2, one line" t_output_dir

done_testing
