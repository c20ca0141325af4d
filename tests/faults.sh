#!/bin/sh
# Faults during `dlrun train` and `dlrun infer`, printing TAP: a checkpoint
# that cannot be written (a file-size limit standing in for a full disk, a
# missing directory) leaves the previous checkpoint as it was and stops
# with one clear line; SIGINT and SIGTERM stop at the next step boundary
# after writing a checkpoint (exit 130 and 143); a second SIGINT ends the
# run at once with nothing half-written; a closed stdout ends `infer`
# quietly with exit 1.
#
# Environment: see tests/lib.sh.

# shellcheck source=tests/lib.sh
. "${srcdir:-$(dirname "$0")/..}/tests/lib.sh"

d=$tmp/faults
mkdir "$d"
cat >"$d/m.yaml" <<'YAML'
inputs: {x: {shape: [64]}}
layers:
  - linear: {out_features: 64}
  - relu
  - linear: {out_features: 4}
YAML
# 64 samples of zeros and their class ids (all 0)
{
	npy_header '<f4' '(64, 64)'
	head -c 16384 /dev/zero
} >"$d/x.npy"
{
	npy_header '<i8' '(64,)'
	head -c 512 /dev/zero
} >"$d/y.npy"
args="--data $d/x.npy --labels $d/y.npy --batch-size 8 --seed 3 -q"

# start_long NAME SIGNAL...: starts a long run with a checkpoint every 4
# steps, waits for its first checkpoint, sends each SIGNAL in turn, and
# leaves its exit status in rc
start_long() {
	_n=$1
	shift
	rm -rf "$d/$_n"
	mkdir "$d/$_n"
	# shellcheck disable=SC2046,SC2086
	$(dlrun_cmd) "$DLRUN" train "$d/m.yaml" $args --epochs 100000 \
		--checkpoint "$d/$_n/ck.safetensors" --checkpoint-every 4 \
		-o "$d/$_n/out.safetensors" >"$tmp/stdout" 2>"$tmp/stderr" &
	_pid=$!
	bg_pids="$bg_pids $_pid"
	last_cmd="dlrun train (long run, then kill $*)"
	_i=0
	while [ ! -f "$d/$_n/ck.safetensors" ] && kill -0 "$_pid" 2>/dev/null &&
		[ "$_i" -lt 3000 ]; do
		sleep 0.01
		_i=$((_i + 1))
	done
	for _s in "$@"; do
		kill -s "$_s" "$_pid" 2>/dev/null
	done
	# the run must end by itself within the answer timeout
	_i=0
	while kill -0 "$_pid" 2>/dev/null && [ "$_i" -lt $((answer_timeout * 10)) ]; do
		sleep 0.1
		_i=$((_i + 1))
	done
	kill -9 "$_pid" 2>/dev/null
	wait "$_pid"
	rc=$?
}

# usable CKPT: the checkpoint reads back (a resume whose run is already over
# loads it whole and writes the trained weights)
usable() {
	# shellcheck disable=SC2086
	"$DLRUN" train "$d/m.yaml" $args --epochs 1 --resume "$1" \
		-o "$tmp/resumed.safetensors" >/dev/null 2>"$tmp/usable.err" ||
		fail "$1 is not a usable checkpoint: $(cat "$tmp/usable.err")"
	rm -f "$tmp/resumed.safetensors"
}

t_signal() {
	start_long "$1" "$1"
	expect_rc "$2"
	expect_one_error_line
	expect_stderr_has "train: stopped by SIG$1 after step"
	expect_stderr_has "checkpoint written to $d/$1/ck.safetensors"
	usable "$d/$1/ck.safetensors"
	[ ! -e "$d/$1/out.safetensors" ] || fail "the output was written"
	_left=$(ls "$d/$1")
	[ "$_left" = ck.safetensors ] || fail "files left: $_left"
}

t_second_sigint() {
	start_long INT2 INT INT
	# the first SIGINT asks for a stop; the second ends the process by
	# the signal at once (130 as the shell reports it) or, when the first
	# was already acted upon, the run stopped with 130 by itself
	expect_rc 130
	usable "$d/INT2/ck.safetensors"
	[ ! -e "$d/INT2/out.safetensors" ] || fail "the output was written"
}

t_no_checkpoint() {
	rm -rf "$d/nock" "$d/nock.log"
	mkdir "$d/nock"
	# shellcheck disable=SC2046,SC2086
	$(dlrun_cmd) "$DLRUN" train "$d/m.yaml" $args --epochs 100000 \
		--log "$d/nock.log" -o "$d/nock/out.safetensors" \
		>"$tmp/stdout" 2>"$tmp/stderr" &
	_pid=$!
	bg_pids="$bg_pids $_pid"
	# the first logged epoch: the run (and its signal handler) has begun,
	# however slowly it started (valgrind)
	_n=0
	while [ ! -s "$d/nock.log" ] && [ $_n -lt 600 ]; do
		sleep 0.1
		_n=$((_n + 1))
	done
	kill -s TERM "$_pid"
	wait "$_pid"
	rc=$?
	expect_rc 143
	expect_one_error_line
	expect_stderr_has "stopped by SIGTERM"
	expect_stderr_has "nothing written"
	[ -z "$(ls "$d/nock")" ] || fail "files left: $(ls "$d/nock")"
}

t_file_size_limit() {
	rm -rf "$d/full"
	mkdir "$d/full"
	# shellcheck disable=SC2086
	run_dlrun train "$d/m.yaml" $args --epochs 1 \
		--checkpoint "$d/full/ck.safetensors" --checkpoint-every 4 \
		-o "$d/full/out.safetensors"
	expect_rc 0 || return 1
	cp "$d/full/ck.safetensors" "$d/before.safetensors"
	# a 16 KiB file-size limit: the checkpoint (about 50 KiB) cannot be
	# written, as on a full disk
	# shellcheck disable=SC2086
	(ulimit -f 32 && run_dlrun train "$d/m.yaml" $args --epochs 2 --seed 4 \
		--checkpoint "$d/full/ck.safetensors" --checkpoint-every 4 \
		-o "$d/full/out2.safetensors"; exit $rc)
	rc=$?
	expect_rc 1
	expect_one_error_line
	expect_stderr_has "$d/full/ck.safetensors"
	expect_stderr_has "File too large"
	cmp -s "$d/full/ck.safetensors" "$d/before.safetensors" ||
		fail "the previous checkpoint changed"
	_left=$(ls "$d/full" | tr '\n' ' ')
	[ "$_left" = "ck.safetensors out.safetensors " ] || fail "files left: $_left"
}

t_unwritable() {
	# shellcheck disable=SC2086
	run_dlrun train "$d/m.yaml" $args --epochs 1 \
		--checkpoint "$d/no/such/dir/ck.safetensors" --checkpoint-every 4 \
		-o "$d/out3.safetensors"
	[ "$rc" = 1 ] || [ "$rc" = 2 ] || fail "exit code $rc, expected 1 or 2"
	expect_one_error_line
	expect_stderr_has "$d/no/such/dir/ck.safetensors"
	[ ! -e "$d/out3.safetensors" ] || fail "the output was written"
}

t_sigpipe() {
	{
		npy_header '<f4' '(2000, 64)'
		head -c 512000 /dev/zero
	} >"$tmp/big.npy"
	run_dlrun init "$d/m.yaml" -o "$d/m.safetensors"
	for _i in 1 2 3 4 5 6 7 8 9 10; do cat "$tmp/big.npy"; done >"$tmp/many.npy"
	last_cmd="dlrun infer m.yaml < many.npy | head -c 10"
	rc=$( (
		"$DLRUN" infer "$d/m.yaml" <"$tmp/many.npy" 2>"$tmp/stderr"
		echo $? >"$tmp/rc"
	) | head -c 10 >/dev/null
	cat "$tmp/rc")
	expect_rc 1
	[ ! -s "$tmp/stderr" ] || fail "stderr is not empty"
}

check "SIGINT stops after a checkpoint with status 130" t_signal INT 130
check "SIGTERM stops after a checkpoint with status 143" t_signal TERM 143
check "a second SIGINT ends the run at once, nothing half-written" t_second_sigint
check "SIGTERM without --checkpoint says nothing was written" t_no_checkpoint
check "a checkpoint past a file-size limit keeps the previous one" t_file_size_limit
check "a checkpoint in a missing directory is one clear error" t_unwritable
check "a closed stdout ends infer quietly with status 1" t_sigpipe
done_testing
