#!/bin/sh
# The row selection of tools/bench/run, printing TAP: its --list mode prints
# the rows (model, mode, batch, threads) that --quick, --models, --sizes,
# --modes and --thread-rows keep, one a line, and exits without preparing,
# checking or timing anything; a mode it does not know is a usage error.
# Skipped when $PYTHON (default /usr/bin/python3) lacks torch or numpy
# (the script lists the example models from tools/gen_example_models.py,
# which imports torch).
#
# Environment: see tests/lib.sh; PYTHON.

. "${srcdir:-$(dirname "$0")/..}/tests/lib.sh"

: "${PYTHON:=/usr/bin/python3}"
if [ ! -x "$PYTHON" ] || ! "$PYTHON" -c 'import torch, numpy' >/dev/null 2>&1; then
	echo "1..0 # SKIP $PYTHON lacks torch or numpy (Debian: python3-torch, python3-numpy)"
	exit 0
fi

tab=$(printf '\t')

# list EXPECTED ARGS...: tools/bench/run --list ARGS prints EXPECTED
list() {
	want=$1
	shift
	"$PYTHON" "$srcdir/tools/bench/run" --list "$@" >"$tmp/stdout" 2>"$tmp/stderr" ||
		fail "tools/bench/run --list $*: exit $? ($(head -c 300 "$tmp/stderr"))"
	printf '%s\n' "$want" >"$tmp/want"
	cmp -s "$tmp/want" "$tmp/stdout" ||
		fail "tools/bench/run --list $*: rows differ:$(diff "$tmp/want" "$tmp/stdout")"
}

t_one() {
	list "resnet18 64x64${tab}train${tab}32${tab}2" \
		--models resnet18 --sizes 64 --modes train --thread-rows 2
}
check "--models, --sizes, --modes train and --thread-rows keep one row" t_one

t_gpt2() {
	list "gpt2 (GPT-2 small shape)${tab}infer${tab}32${tab}1
gpt2 (GPT-2 small shape)${tab}train${tab}8${tab}1" \
		--models gpt2 --modes infer32,train --thread-rows 1
}
check "the GPT-2-shaped decoder: inference at 32, training at batch 8" t_gpt2

t_default_rows() {
	list "mlp${tab}infer${tab}1${tab}1
mlp${tab}infer${tab}1${tab}2
mlp${tab}infer${tab}32${tab}1
mlp${tab}infer${tab}32${tab}2
mlp${tab}train${tab}32${tab}1
mlp${tab}train${tab}32${tab}2" --models mlp
}
check "an example model's default rows: infer1, infer32, train at 1 and 2 threads" t_default_rows

t_quick() {
	"$PYTHON" "$srcdir/tools/bench/run" --list --quick --modes infer1 --thread-rows 1 \
		>"$tmp/stdout" 2>"$tmp/stderr" || fail "exit $?: $(head -c 300 "$tmp/stderr")"
	cut -f1 "$tmp/stdout" >"$tmp/models"
	printf '%s\n' "resnet18 64x64" "mobilenet_v2 64x64" mlp lenet5 resnet-block \
		mobilenet-block unet-small >"$tmp/want"
	cmp -s "$tmp/want" "$tmp/models" ||
		fail "--quick lists other models:$(diff "$tmp/want" "$tmp/models")"
}
check "--quick: the 64x64 torchvision models and the example models" t_quick

t_sizes() {
	list "mobilenet_v2 224x224${tab}infer${tab}1${tab}1
mobilenet_v2 64x64${tab}infer${tab}1${tab}1" \
		--models mobilenet_v2 --sizes 224,64 --modes infer1 --thread-rows 1
}
check "--sizes 224,64: one row per size, in that order" t_sizes

t_bad_mode() {
	"$PYTHON" "$srcdir/tools/bench/run" --list --modes infer2,train >"$tmp/stdout" 2>"$tmp/stderr"
	rc=$?
	[ "$rc" -eq 2 ] || fail "exit $rc, want 2 (a usage error)"
	grep -F -e "--modes: infer2" "$tmp/stderr" >/dev/null ||
		fail "stderr does not name the mode: $(cat "$tmp/stderr")"
	[ -s "$tmp/stdout" ] && fail "rows listed: $(cat "$tmp/stdout")"
	return 0
}
check "an unknown --modes value is a usage error (exit 2) naming it" t_bad_mode

done_testing
