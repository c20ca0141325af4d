#!/bin/sh
# `dlrun plot`, printing TAP: the loss curves of --log files as SVG (a
# well-formed document with axes, ticks, a legend, validation dashed; per
# step when the log has --log-every lines, else per epoch; one colour a
# run for several logs), to stdout or atomically to -o; bad logs: exit 2,
# one 'dlrun: ' line naming FILE:LINE, nothing written.
#
# Environment: see tests/lib.sh.

. "${srcdir:-$(dirname "$0")/..}/tests/lib.sh"

# two small logs as dlrun train --log writes them: per epoch, and with
# per-step lines (--log-every)
cat >"$tmp/a.jsonl" <<'EOF'
{"epoch":1,"step":10,"loss":1.2,"lr":0.01,"val_loss":1.0,"val_accuracy":0.5}
{"epoch":2,"step":20,"loss":0.8,"lr":0.01,"val_loss":0.9,"val_accuracy":0.625}
{"epoch":3,"step":30,"loss":0.5,"lr":0.01,"val_loss":0.95,"val_accuracy":0.75}
EOF
cat >"$tmp/b.jsonl" <<'EOF'
{"epoch":1,"batch":5,"step":5,"loss":2.0,"lr":0.1}
{"epoch":1,"batch":10,"step":10,"loss":1.5,"lr":0.1}
{"epoch":1,"step":10,"loss":1.7,"lr":0.1}
{"epoch":2,"batch":5,"step":15,"loss":null,"lr":0.1}
{"epoch":2,"batch":10,"step":20,"loss":1.1,"lr":0.1}
{"epoch":2,"step":20,"loss":1.2,"lr":0.1}
EOF

# well_formed FILE: an SVG document (xmllint when installed)
well_formed() {
	head -c 40 "$1" | grep -q '^<?xml' || fail "$1 does not start with <?xml"
	grep -q '<svg xmlns="http://www.w3.org/2000/svg"' "$1" || fail "$1 has no <svg>"
	tail -n 1 "$1" | grep -q '^</svg>$' || fail "$1 does not end with </svg>"
	if command -v xmllint >/dev/null 2>&1; then
		xmllint --noout "$1" 2>"$tmp/xmllint" ||
			fail "xmllint: $(head -n 3 "$tmp/xmllint")"
	fi
	return 0
}

t_help() {
	run_dlrun plot --help
	expect_rc 0
	expect_stdout_has "usage: dlrun plot"
}
check "plot --help" t_help

t_one() {
	run_dlrun plot "$tmp/a.jsonl" -o "$tmp/a.svg"
	expect_rc 0 || return 1
	[ -s "$tmp/stdout" ] && fail "stdout is not empty with -o"
	well_formed "$tmp/a.svg"
	# the two panels, the x axis in epochs, the legend's three series
	for _w in '>loss</text>' '>accuracy</text>' '>epoch</text>' '>val_loss</text>' \
		'>val_accuracy</text>' 'stroke-dasharray'; do
		grep -qF -e "$_w" "$tmp/a.svg" || fail "no '$_w' in the picture"
	done
	# loss, val_loss, val_accuracy: one polyline each
	_n=$(grep -c '<polyline' "$tmp/a.svg")
	[ "$_n" = 3 ] || fail "$_n polylines, expected 3"
	# ticks on the accuracy axis: 0.50 .. 0.75 in steps of 0.05
	grep -qF '>0.60</text>' "$tmp/a.svg" || fail "no 0.60 tick"
	return 0
}
check "plot a log: panels, axes, legend, validation dashed" t_one

t_stdout() {
	run_dlrun plot "$tmp/a.jsonl"
	expect_rc 0 || return 1
	cmp "$tmp/stdout" "$tmp/a.svg" >/dev/null ||
		fail "stdout differs from the -o file"
	# the same input gives the same bytes
	run_dlrun plot - -o "$tmp/a2.svg" <"$tmp/a.jsonl"
	expect_rc 0
	grep -q '<title>stdin</title>' "$tmp/a2.svg" || fail "'-' is not named stdin"
}
check "plot without -o: the SVG on stdout; '-' reads stdin" t_stdout

t_steps_and_runs() {
	run_dlrun plot "$tmp/a.jsonl" "$tmp/b.jsonl" -o "$tmp/ab.svg"
	expect_rc 0 || return 1
	well_formed "$tmp/ab.svg"
	grep -qF '>step</text>' "$tmp/ab.svg" || fail "a log with step lines: x is not steps"
	for _w in a.jsonl b.jsonl '>training</text>' '>validation</text>'; do
		grep -qF -e "$_w" "$tmp/ab.svg" || fail "no '$_w' in the legend"
	done
	# b's steps 5 and 10 joined, step 15 (null) breaks the line, step 20
	# alone: a dot
	grep -q '<circle' "$tmp/ab.svg" || fail "no dot for a lone point"
	grep -q '#d62728' "$tmp/ab.svg" || fail "the second run has no colour of its own"
	return 0
}
check "plot two logs: one colour a run; per-step lines give steps" t_steps_and_runs

# t_bad NEEDLES -- ARGS: exit 2, one line, the -o file left as it was
t_bad() {
	_needles=
	while [ "$1" != -- ]; do
		_needles="$_needles$1
"
		shift
	done
	shift
	echo old >"$tmp/keep.svg"
	run_dlrun plot "$@" -o "$tmp/keep.svg"
	expect_rc 2
	expect_error_line "$_needles"
	[ "$(cat "$tmp/keep.svg")" = old ] || fail "the output file was changed"
	return 0
}
printf '%s\n' '{"epoch":1,"step":1,"loss":1.0}' '{"epoch":2,"step":2,"loss":' >"$tmp/cut.jsonl"
check "a malformed line: exit 2 naming FILE:LINE" t_bad "cut.jsonl:2:" -- "$tmp/cut.jsonl"
printf '%s\n' '{"epoch":1,"step":1,"loss":"x"}' >"$tmp/str.jsonl"
check "a loss that is not a number: exit 2" t_bad "str.jsonl:1:" '"loss"' -- "$tmp/str.jsonl"
printf '%s\n' '[1, 2]' >"$tmp/arr.jsonl"
check "a line that is not an object: exit 2" t_bad "arr.jsonl:1:" -- "$tmp/arr.jsonl"
printf '%s\n' '{"loss":1}' >"$tmp/nostep.jsonl"
check "a line without epoch and step: exit 2" t_bad "nostep.jsonl:1:" -- "$tmp/nostep.jsonl"
: >"$tmp/empty.jsonl"
check "an empty log: exit 2" t_bad "empty.jsonl" "no log lines" -- "$tmp/empty.jsonl"
check "a missing log: exit 2" t_bad "nosuch.jsonl" -- "$tmp/nosuch.jsonl"
check "a good and a bad log: exit 2, nothing written" t_bad "cut.jsonl:2:" -- \
	"$tmp/a.jsonl" "$tmp/cut.jsonl"

t_no_args() {
	run_dlrun plot
	expect_rc 2
	expect_error_line "no log file"
	run_dlrun plot --bogus "$tmp/a.jsonl"
	expect_rc 2
	expect_one_error_line
}
check "plot without a log, or with an unknown option: exit 2" t_no_args

# a real run's log, with --log-every
t_real() {
	_m=$srcdir/models/digits-mlp.yaml
	_d=$srcdir/models/data/digits.npz
	[ -f "$_d" ] || return 0
	run_dlrun train "$_m" --data "$_d" --epochs 2 --threads 1 -q --log-every 15 \
		--log "$tmp/real.jsonl" -o "$tmp/real.safetensors"
	expect_rc 0 || return 1
	run_dlrun plot "$tmp/real.jsonl" -o "$tmp/real.svg"
	expect_rc 0 || return 1
	well_formed "$tmp/real.svg"
	grep -qF '>step</text>' "$tmp/real.svg" || fail "not per step"
}
check "plot of a dlrun train --log-every log" t_real

done_testing
