#!/bin/sh
# tests/op.sh OP: everything the suite holds about one op, in seconds, for
# whoever changes that op: `dlrun ops OP`, its PyTorch fixtures
# (tests/fixtures.sh's cases whose model uses it), its training parity
# cases and gradient checks (tests/train.sh's), and the bad models of
# tests/bad/models that use it (exit 2, one line naming the file). Run it
# from the build directory: `sh tests/op.sh relu6`. Prints TAP. The whole
# suite (make check) runs all of these cases anyway; this is not in it.
#
# Environment: see tests/lib.sh.

. "${srcdir:-$(dirname "$0")/..}/tests/lib.sh"

op=${1:-}
if [ -z "$op" ] || [ $# -ne 1 ]; then
	echo "usage: tests/op.sh OP (an op of 'dlrun ops')" >&2
	exit 2
fi
if ! "$DLRUN" ops "$op" >/dev/null 2>&1; then
	echo "tests/op.sh: '$op' is not an op of 'dlrun ops'" >&2
	exit 2
fi
DLRUN_OP=$op
export DLRUN DLRUN_OP srcdir
: "${NPYCMP:=$(pwd)/tests/npycmp}"
# npycmp compares the outputs; `make check` builds it, a fresh build has
# not yet
if [ ! -x "$NPYCMP" ] && ! make -s tests/npycmp >/dev/null 2>&1; then
	echo "Bail out! $NPYCMP is not built: run 'make tests/npycmp' in the build directory"
	exit 1
fi
export NPYCMP

t_ops() {
	run_dlrun ops "$op"
	expect_rc 0
	expect_stdout_has "$op"
}
check "dlrun ops $op" t_ops

# sub SCRIPT: runs another TAP script of the suite on this op's cases and
# fails when any of them does; the counts go into the diagnostics
sub() {
	sh "$srcdir/tests/$1" >"$tmp/sub.tap" 2>&1
	_n=$(grep -c '^ok ' "$tmp/sub.tap")
	_s=$(grep -c '^ok .*# SKIP' "$tmp/sub.tap")
	_f=$(grep -c '^not ok ' "$tmp/sub.tap")
	diag "tests/$1: $_n passed ($_s skipped), $_f failed"
	if [ "$_f" -ne 0 ] || grep -q '^Bail out' "$tmp/sub.tap"; then
		grep -A6 -e '^not ok ' -e '^Bail out' "$tmp/sub.tap" | head -40 >>"$tmp/diag"
		fail "tests/$1 failed on $op's cases"
	fi
	return 0
}
t_fixtures() { sub fixtures.sh; }
check "$op: PyTorch fixtures (tests/fixtures.sh)" t_fixtures
t_train() { sub train.sh; }
check "$op: training parity and gradient checks (tests/train.sh)" t_train

# the bad models that use the op: refused with exit 2, one line naming the file
npy_f4 '(1, 4)' 1 2 3 4 >"$tmp/x4.npy"
: >"$tmp/unused.safetensors"
nbad=0
for m in "$srcdir"/tests/bad/models/*.yaml; do
	[ -f "$m" ] && uses_op "$m" || continue
	nbad=$((nbad + 1))
	t_bad_one() {
		run_dlrun infer "$1" -w "$tmp/unused.safetensors" <"$tmp/x4.npy"
		expect_rc 2
		expect_one_error_line
		expect_stderr_has "${1##*/}"
	}
	check "$op: bad model ${m##*/}" t_bad_one "$m"
done
[ "$nbad" -gt 0 ] || skip "$op: bad models" "none of tests/bad/models uses $op"

done_testing
