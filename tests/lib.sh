# Shared helpers for the shell tests (tests/*.sh), sourced, POSIX sh: TAP
# output, a temporary directory removed on exit, run_dlrun (optionally under
# valgrind), and writers of small .npy and .safetensors files with printf, so
# the tests need nothing but sh, coreutils and the dlrun binary.
#
# Environment: DLRUN (the binary; make check sets it), NPYCMP (tests/npycmp,
# optional), srcdir (set by automake: the top source directory; defaults to
# the parent of the test script's directory), DLRUN_VALGRIND=yes to run dlrun
# under valgrind, TEST_VERBOSE=yes to show dlrun's stderr for passing tests.

: "${srcdir:=$(dirname "$0")/..}"
if [ -z "${DLRUN:-}" ]; then
	if [ -x ./src/dlrun ]; then DLRUN=./src/dlrun; else DLRUN=../src/dlrun; fi
fi
if [ -z "${NPYCMP:-}" ] && [ -x ./tests/npycmp ]; then NPYCMP=./tests/npycmp; fi
: "${NPYCMP:=}"
case $NPYCMP in /* | '') ;; *) NPYCMP=$(pwd)/$NPYCMP ;; esac
# absolute paths, so tests can run dlrun from inside the temporary directory
case $DLRUN in /*) ;; *) DLRUN=$(pwd)/$DLRUN ;; esac
srcdir=$(cd "$srcdir" && pwd) || {
	echo "Bail out! srcdir=$srcdir is not a directory"
	exit 1
}
: "${DLRUN_VALGRIND:=no}"

if [ ! -x "$DLRUN" ]; then
	echo "Bail out! DLRUN=$DLRUN is not an executable"
	exit 1
fi
if [ "$DLRUN_VALGRIND" = yes ] && ! command -v valgrind >/dev/null 2>&1; then
	echo "Bail out! DLRUN_VALGRIND=yes but valgrind is not installed"
	exit 1
fi

# ---- temporary directory and background processes ----

tmp=$(mktemp -d "${TMPDIR:-/tmp}/dlrun-test.XXXXXX") || {
	echo "Bail out! cannot make a temporary directory"
	exit 1
}
# pids of background processes this script started; killed on exit
bg_pids=
lib_cleanup() {
	for p in $bg_pids; do
		kill "$p" 2>/dev/null
	done
	rm -rf "$tmp"
}
trap lib_cleanup EXIT
trap 'exit 129' HUP
trap 'exit 130' INT
trap 'exit 143' TERM

# Seconds a co-process gets to answer (valgrind is slow).
# shellcheck disable=SC2034 # used by the scripts that source this file
if [ "$DLRUN_VALGRIND" = yes ]; then answer_timeout=60; else answer_timeout=10; fi

# ---- TAP ----

tap_n=0
tap_failed=0

# plan N: the plan up front (or call done_testing at the end instead)
plan() {
	echo "1..$1"
}

# done_testing: the plan at the end, for the number of tests run
done_testing() {
	echo "1..$tap_n"
}

# ok STATUS DESCRIPTION: reports test number tap_n + 1, passed when STATUS is 0
ok() {
	tap_n=$((tap_n + 1))
	if [ "$1" -eq 0 ]; then
		echo "ok $tap_n - $2"
	else
		tap_failed=$((tap_failed + 1))
		echo "not ok $tap_n - $2"
	fi
}

# skip DESCRIPTION REASON
skip() {
	tap_n=$((tap_n + 1))
	echo "ok $tap_n - $1 # SKIP $2"
}

# diag TEXT...: TAP diagnostics, one '# ' line per line of TEXT
diag() {
	printf '%s\n' "$*" | sed 's/^/# /'
}

# diag_file FILE [LINES]: the first LINES (default 20) lines of FILE as
# diagnostics, binary bytes shown as octal escapes
diag_file() {
	[ -s "$1" ] || return 0
	LC_ALL=C sed -n "1,${2:-20}p" "$1" | LC_ALL=C tr -c '[:print:]\t\n' '?' |
		sed 's/^/# /'
}

# Checks: a test is a shell function that returns 0 when it passes; it calls
# `fail MESSAGE` (which returns 1) to say what went wrong. check runs it and
# reports one TAP line, with the failure messages and the last dlrun run's
# command, exit code and stderr as diagnostics.

# fail MESSAGE: records why a test failed; returns 1
fail() {
	printf '%s\n' "$*" >>"$tmp/diag"
	return 1
}

# check DESCRIPTION FUNCTION [ARGS...]
check() {
	desc=$1
	shift
	: >"$tmp/diag"
	: >"$tmp/stdout"
	: >"$tmp/stderr"
	last_cmd=
	rc=
	if "$@" && [ ! -s "$tmp/diag" ]; then
		ok 0 "$desc"
		# TEST_VERBOSE=yes shows what dlrun said in passing tests too
		[ "${TEST_VERBOSE:-}" = yes ] && diag_file "$tmp/stderr" 5
	else
		ok 1 "$desc"
		sed 's/^/# /' "$tmp/diag"
		if [ -n "$last_cmd" ]; then
			diag "last command: $last_cmd"
			diag "exit code: $rc"
			[ "$rc" = 99 ] && [ "$DLRUN_VALGRIND" = yes ] &&
				diag "(99: valgrind found errors)"
			if [ -s "$tmp/stderr" ]; then
				diag "stderr:"
				diag_file "$tmp/stderr" 40
			fi
		fi
	fi
	return 0
}

# ---- running dlrun ----

# run_dlrun ARGS...: runs "$DLRUN" ARGS (under valgrind when DLRUN_VALGRIND
# is yes) with the caller's stdin; sets rc to its exit code and leaves its
# stdout and stderr in "$tmp/stdout" and "$tmp/stderr".
run_dlrun() {
	last_cmd="dlrun $*"
	if [ "$DLRUN_VALGRIND" = yes ]; then
		valgrind --error-exitcode=99 --leak-check=full \
			--errors-for-leak-kinds=definite --show-leak-kinds=definite -q \
			"$DLRUN" "$@" >"$tmp/stdout" 2>"$tmp/stderr"
	else
		"$DLRUN" "$@" >"$tmp/stdout" 2>"$tmp/stderr"
	fi
	rc=$?
	return 0
}

# run_dlrun_env NAME=VALUE ARGS...: run_dlrun with NAME=VALUE in dlrun's
# environment only (under valgrind too when DLRUN_VALGRIND is yes)
run_dlrun_env() {
	_rde_env=$1
	shift
	last_cmd="$_rde_env dlrun $*"
	# shellcheck disable=SC2046
	env "$_rde_env" $(dlrun_cmd) "$DLRUN" "$@" >"$tmp/stdout" 2>"$tmp/stderr"
	rc=$?
	return 0
}

# dlrun_cmd: prints the command prefix run_dlrun uses, for callers that
# must start dlrun themselves (background co-processes): `set -- $(dlrun_cmd)`
dlrun_cmd() {
	if [ "$DLRUN_VALGRIND" = yes ]; then
		echo valgrind --error-exitcode=99 --leak-check=full \
			--errors-for-leak-kinds=definite --show-leak-kinds=definite -q
	fi
}

# ---- plain runs: without valgrind ----

# run_plain ARGS...: run_dlrun without valgrind even when DLRUN_VALGRIND is
# yes, for runs whose time a test checks (valgrind's slowdown would be
# measured instead) or that evaluate a model hundreds of times (gradcheck);
# the sanitizer build of CI still checks their memory
run_plain() {
	_rp_keep=$DLRUN_VALGRIND
	DLRUN_VALGRIND=no
	run_dlrun "$@"
	DLRUN_VALGRIND=$_rp_keep
}

# plain_only WHAT: for a script that measures the dlrun process itself:
# under valgrind, or when dlrun is a sanitizer build (./configure
# --enable-sanitizers links libasan, whose shadow memory is resident too),
# prints a TAP plan that skips the script ("WHAT means nothing ...") and
# exits
plain_only() {
	if [ "$DLRUN_VALGRIND" = yes ]; then
		echo "1..0 # SKIP $1 means nothing under valgrind"
		exit 0
	fi
	if ldd "$DLRUN" 2>/dev/null | grep -q 'libasan'; then
		echo "1..0 # SKIP $1 means nothing in a sanitizer build"
		exit 0
	fi
}

# valgrind_every N: for a script with too many dlrun runs to take all under
# valgrind, or (N = 0) whose runs gain nothing from it: called before each
# case, it lets the 1st, N+1st, 2N+1st... case run under valgrind when
# DLRUN_VALGRIND is yes and the others plainly; N = 0, called once, runs the
# rest of the script plainly. The sanitizer build still checks them all.
_ve_want=$DLRUN_VALGRIND
_ve_n=0
valgrind_every() {
	_ve_n=$((_ve_n + 1))
	if [ "$1" -gt 0 ] && [ $(((_ve_n - 1) % $1)) = 0 ]; then
		DLRUN_VALGRIND=$_ve_want
	else
		DLRUN_VALGRIND=no
	fi
}

# uses_op FILE: FILE (a model) uses op $DLRUN_OP as an entry's key, or
# DLRUN_OP is unset (tests/op.sh runs one op's cases of the scripts)
uses_op() {
	[ -z "${DLRUN_OP:-}" ] ||
		grep -qE "(^|[-{, ]) *${DLRUN_OP}(:|\$| *[,}])" "$1"
}

# expect_rc N: the last run exited N
expect_rc() {
	[ "$rc" = "$1" ] || fail "exit code $rc, expected $1"
}

# expect_stdout_has STRING / expect_stderr_has STRING: a fixed string appears
expect_stdout_has() {
	grep -F -e "$1" "$tmp/stdout" >/dev/null ||
		fail "stdout does not contain '$1'"
}
expect_stderr_has() {
	grep -F -e "$1" "$tmp/stderr" >/dev/null ||
		fail "stderr does not contain '$1'"
}

# expect_one_error_line: stderr is exactly one line and it starts 'dlrun: '
expect_one_error_line() {
	n=$(wc -l <"$tmp/stderr")
	tail=$(tail -c 1 "$tmp/stderr" | od -An -c | tr -d ' ')
	if [ "$n" -ne 1 ] || [ "$tail" != '\n' ]; then
		fail "stderr has $n lines (or no final newline), expected exactly one"
	fi
	head -n 1 "$tmp/stderr" | grep '^dlrun: ' >/dev/null ||
		fail "stderr does not start with 'dlrun: '"
}

# expect_error_line NEEDLES: stderr is one 'dlrun: ' line holding each line
# of NEEDLES (one fixed string per line)
expect_error_line() {
	expect_one_error_line
	printf '%s' "$1" | while IFS= read -r _ee_n; do
		grep -F -e "$_ee_n" "$tmp/stderr" >/dev/null ||
			fail "the error line does not contain '$_ee_n'"
	done
}

# ---- writing small binary files ----

# le_bytes N COUNT: N as COUNT little-endian bytes (N < 2^31)
le_bytes() {
	_lb_n=$1
	_lb_i=0
	_lb_fmt=
	while [ "$_lb_i" -lt "$2" ]; do
		_lb_fmt="$_lb_fmt\\$(printf '%03o' $((_lb_n % 256)))"
		_lb_n=$((_lb_n / 256))
		_lb_i=$((_lb_i + 1))
	done
	# shellcheck disable=SC2059 # the format is the octal escapes
	printf "$_lb_fmt"
}

# f4 VALUE...: the float32 little-endian bytes of each VALUE, which must be
# one of the exactly representable values of the table below
f4() {
	for _f4_v in "$@"; do
		case $_f4_v in
		0) printf '\000\000\000\000' ;;
		0.25) printf '\000\000\200\076' ;;
		0.5) printf '\000\000\000\077' ;;
		1) printf '\000\000\200\077' ;;
		1.5) printf '\000\000\300\077' ;;
		2) printf '\000\000\000\100' ;;
		3) printf '\000\000\100\100' ;;
		4) printf '\000\000\200\100' ;;
		-0.25) printf '\000\000\200\276' ;;
		-0.5) printf '\000\000\000\277' ;;
		-1) printf '\000\000\200\277' ;;
		-1.5) printf '\000\000\300\277' ;;
		-2) printf '\000\000\000\300' ;;
		-3) printf '\000\000\100\300' ;;
		*)
			echo "f4: no bytes for $_f4_v" >&2
			return 1
			;;
		esac
	done
}

# spaces N: N spaces
spaces() {
	_sp_k=0
	while [ "$_sp_k" -lt "$1" ]; do
		printf ' '
		_sp_k=$((_sp_k + 1))
	done
}

# npy_header DESCR SHAPE [MAGIC]: a version 1.0 .npy header for an array of
# dtype DESCR ('<f4') and shape SHAPE (a Python tuple: '(2, 3)'), padded to
# 64 bytes as NumPy does; MAGIC replaces the 6 magic bytes (default
# \223NUMPY). The data follows it.
npy_header() {
	_nh_dict="{'descr': '$1', 'fortran_order': False, 'shape': $2, }"
	_nh_len=$((${#_nh_dict} + 1))
	_nh_pad=$(((64 - (10 + _nh_len) % 64) % 64))
	# shellcheck disable=SC2059 # the magic is given as octal escapes
	printf "${3:-\\223NUMPY}\\001\\000"
	le_bytes $((_nh_len + _nh_pad)) 2
	printf '%s%s\n' "$_nh_dict" "$(spaces "$_nh_pad")"
}

# npy_f4 SHAPE VALUE...: a float32 .npy array on stdout
npy_f4() {
	npy_header '<f4' "$1"
	shift
	f4 "$@"
}

# safetensors JSON: a safetensors header for JSON (padded with spaces to a
# multiple of 8 bytes, as the format recommends) on stdout; the data follows
safetensors_header() {
	_sh_pad=$(((8 - ${#1} % 8) % 8))
	le_bytes $((${#1} + _sh_pad)) 8
	printf '%s%s' "$1" "$(spaces "$_sh_pad")"
}

# same_bytes A B: the two files are byte-identical (fails with a message,
# and with npycmp's verdict on .npy files when NPYCMP is there)
same_bytes() {
	cmp "$1" "$2" >/dev/null 2>&1 && return 0
	fail "$1 and $2 differ"
	if [ -n "$NPYCMP" ] && [ -x "$NPYCMP" ] &&
		"$NPYCMP" "$1" "$2" 0 >"$tmp/npycmp.out" 2>&1; then :; fi
	[ -n "$NPYCMP" ] && [ -s "$tmp/npycmp.out" ] &&
		fail "npycmp $1 $2 0: $(head -n 3 "$tmp/npycmp.out")"
	rm -f "$tmp/npycmp.out"
	return 1
}

# note MESSAGE: a TAP diagnostic that does not fail the test
note() {
	printf '# %s\n' "$*"
}

# close_rows A B RTOL: two text outputs have the same rows and columns, and
# every value of A is within RTOL of B relative to the largest |value| of B
close_rows() {
	awk -v rtol="$3" '
		NR == FNR { n[FNR] = NF; for (i = 1; i <= NF; i++) { b[FNR, i] = $i
			v = $i < 0 ? -$i : $i; if (v > big) big = v }; rows = FNR; next }
		{ if (NF != n[FNR]) bad = 1
		  for (i = 1; i <= NF; i++) { d = $i - b[FNR, i]; if (d < 0) d = -d
			if (d > err) err = d } ; got = FNR }
		END { if (got != rows || bad || err > rtol * (big > 0 ? big : 1)) exit 1 }
	' "$2" "$1" || { fail "$1 and $2 differ by more than $3 relative"; return 1; }
}

# only_files DIR NAME...: DIR holds exactly the files NAME... (no temp files)
only_files() {
	_of_d=$1
	shift
	_of_want=$(for _of_f in "$@"; do echo "$_of_f"; done | LC_ALL=C sort)
	# shellcheck disable=SC2012 # our own temporary files: plain names
	_of_got=$(cd "$_of_d" && ls -A | LC_ALL=C sort)
	[ "$_of_got" = "$_of_want" ] ||
		fail "$_of_d holds [$(echo "$_of_got" | tr '\n' ' ')], expected [$(echo "$_of_want" | tr '\n' ' ')]"
}

# ---- bad models and inputs to `dlrun infer` ----

# t_bad STDIN NEEDLE... -- ARGS...: runs `dlrun infer ARGS -o $tmp/out/out.npy`
# (without the -o when no_o is yes) with STDIN as its standard input and its
# working directory in the empty $tmp/out; passes when it exits 2 with one
# 'dlrun: ' line holding each NEEDLE, nothing on stdout, and no file in
# $tmp/out (neither the output nor a temporary file)
t_bad() {
	_tb_stdin=$1
	shift
	_tb_needles=
	while [ $# -gt 0 ] && [ "$1" != -- ]; do
		_tb_needles="$_tb_needles$1
"
		shift
	done
	shift
	rm -rf "$tmp/out"
	mkdir "$tmp/out"
	cd "$tmp/out" || return 1
	if [ "${no_o:-}" = yes ]; then
		run_dlrun infer "$@" <"$_tb_stdin"
	else
		run_dlrun infer "$@" -o "$tmp/out/out.npy" <"$_tb_stdin"
	fi
	cd - >/dev/null || return 1
	expect_rc 2
	expect_error_line "$_tb_needles"
	[ -s "$tmp/stdout" ] && fail "stdout is not empty ($(wc -c <"$tmp/stdout") bytes)"
	only_files "$tmp/out"
	return 0
}

# bad_model FILE [STDIN] LINE:COL: NEEDLE...: checks that model FILE (under
# $models, by default tests/bad/models) fails to load in t_bad with an error
# naming FILE:LINE:COL: and each NEEDLE; STDIN (default: a [1, 4] float32
# array) is its input, and weights are not read
bad_model() {
	_bm_f=$1
	shift
	case $1 in
	[0-9]*:[0-9]*:)
		_bm_in=$tmp/x4.npy
		[ -f "$_bm_in" ] || npy_f4 '(1, 4)' 1 2 3 4 >"$_bm_in"
		;;
	*)
		_bm_in=$1
		shift
		;;
	esac
	_bm_loc=$1
	shift
	[ -f "$tmp/unused.safetensors" ] || : >"$tmp/unused.safetensors"
	check "model $_bm_f: $_bm_loc $*" t_bad "$_bm_in" "$_bm_f:$_bm_loc" "$@" -- \
		"${models:-$srcdir/tests/bad/models}/$_bm_f" -w "$tmp/unused.safetensors"
}
