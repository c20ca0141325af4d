#!/bin/sh
# Runs every PyTorch fixture under tests/fixtures/*/* (made by
# tools/gen_fixtures.py) through `dlrun infer` and compares the output with
# npycmp; prints TAP. A case is a directory with model.yaml, in.npy, out.npy,
# optionally model.safetensors (the default weights path), `args` (extra
# dlrun infer arguments on one line) and `rtol` (default 1e-5).
#
# Environment: DLRUN (the binary), NPYCMP (tests/npycmp), srcdir (set by
# automake; defaults to this script's parent directory), DLRUN_VALGRIND=yes
# to run dlrun under valgrind, DLRUN_OP=OP to run only the cases whose
# model uses op OP (tests/op.sh).

: "${srcdir:=$(dirname "$0")/..}"
DLRUN=${DLRUN:-./src/dlrun}
NPYCMP=${NPYCMP:-./tests/npycmp}

if [ ! -x "$DLRUN" ]; then
	echo "Bail out! DLRUN=$DLRUN is not an executable"
	exit 1
fi
if [ ! -x "$NPYCMP" ]; then
	echo "Bail out! NPYCMP=$NPYCMP is not an executable"
	exit 1
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/dlrun-fixtures.XXXXXX") || {
	echo "Bail out! cannot make a temporary directory"
	exit 1
}
trap 'rm -rf "$tmp"' EXIT
trap 'exit 129' HUP
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 141' PIPE

if [ "$DLRUN_VALGRIND" = yes ]; then
	set -- valgrind --error-exitcode=99 --leak-check=full \
		--errors-for-leak-kinds=definite -q
else
	set --
fi

# wanted DIR: the case is run (DLRUN_OP unset, or its model uses that op
# as an entry's key)
wanted() {
	[ -f "$1/model.yaml" ] || return 1
	[ -z "${DLRUN_OP:-}" ] ||
		grep -qE "(^|[-{, ]) *${DLRUN_OP}(:|\$| *[,}])" "$1/model.yaml"
}

n=0
for d in "$srcdir"/tests/fixtures/*/*/; do
	wanted "$d" && n=$((n + 1))
done
if [ "$n" -eq 0 ] && [ -n "${DLRUN_OP:-}" ]; then
	echo "1..0 # SKIP no fixture uses $DLRUN_OP"
	exit 0
fi
if [ "$n" -eq 0 ]; then
	echo "1..1"
	echo "not ok 1 - no fixtures under $srcdir/tests/fixtures"
	exit 0
fi
echo "1..$n"

# diag FILE: up to 20 lines of FILE as TAP diagnostics
diag() {
	sed -n '1,20s/^/# /p' "$1"
}

i=0
for d in "$srcdir"/tests/fixtures/*/*/; do
	d=${d%/}
	wanted "$d" || continue
	i=$((i + 1))
	name=${d#"$srcdir"/tests/fixtures/}
	# Under valgrind, the batch-1 and --batch-size 2 variants of a case run
	# the same code as the case itself: they are left to the plain and the
	# sanitizer runs (CI runs both), which keeps CI's valgrind pass short.
	case "$*:$name" in
	valgrind*_b1 | valgrind*_bs2)
		echo "ok $i - $name # SKIP under valgrind (a variant of ${name%_*})"
		continue
		;;
	esac
	args=
	[ -f "$d/args" ] && args=$(cat "$d/args")
	cmd="dlrun infer $name/model.yaml${args:+ $args}"
	rtol=1e-5
	[ -f "$d/rtol" ] && rtol=$(cat "$d/rtol")
	rm -f "$tmp/got.npy" "$tmp/err" "$tmp/cmp"

	# $args is split into words on purpose
	# shellcheck disable=SC2086
	"$@" "$DLRUN" infer "$d/model.yaml" $args \
		<"$d/in.npy" >"$tmp/got.npy" 2>"$tmp/err"
	rc=$?
	if [ "$rc" -ne 0 ]; then
		echo "not ok $i - $name"
		if [ "$rc" -eq 99 ] && [ -n "$*" ]; then
			echo "# valgrind found errors (exit 99): $cmd"
		else
			echo "# $cmd exited $rc"
		fi
		diag "$tmp/err"
		continue
	fi
	if "$NPYCMP" "$tmp/got.npy" "$d/out.npy" "$rtol" >"$tmp/cmp" 2>&1; then
		echo "ok $i - $name"
	else
		echo "not ok $i - $name"
		diag "$tmp/cmp"
		[ -s "$tmp/err" ] && diag "$tmp/err"
	fi
done
exit 0
