#!/bin/sh
# Data-parallel training over MPI, printing TAP: `mpirun -np 2` and `-np 3`
# end with the weights of one process (same global batch, seed and steps)
# within 1e-5 for the digits MLP, a smooth digits CNN with --sync-batch-norm
# (batch-norm running statistics too; tests/data/mpi/digits-cnn-smooth.yaml
# says why smooth), a tiny causal transformer and a
# mixture_of_experts with noisy gating and balance_loss; the
# CNN with per-process batch norm trains; one data file per process; a
# checkpoint written by 2 processes resumes with 3; a global batch that does
# not divide among 3 gives shares of unequal size; with one file per process
# a global batch that does not divide, a missing shard and a rank killed with SIGKILL end every
# process with a non-zero status (the killed one within 30 s, its last
# checkpoint intact). Skipped when dlrun is built without MPI or mpirun is
# missing.
#
# Environment: see tests/lib.sh; NPYCMP (tests/npycmp) is needed; MPIRUN
# (default mpirun).

. "${srcdir:-$(dirname "$0")/..}/tests/lib.sh"

: "${MPIRUN:=mpirun}"
models=$srcdir/models
digits=$models/data/digits.npz
data=$srcdir/tests/data/mpi
# the one-process runs here are references (train.sh runs that path under
# valgrind); LeakSanitizer would report Open MPI's own allocations at exit
valgrind_every 0
ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0
export ASAN_OPTIONS
# we run as root in CI; Open MPI refuses that unless told
OMPI_ALLOW_RUN_AS_ROOT=1
OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_ALLOW_RUN_AS_ROOT OMPI_ALLOW_RUN_AS_ROOT_CONFIRM OMPI_MCA_rmaps_base_oversubscribe

if ! "$DLRUN" --version | grep -F 'MPI: yes' >/dev/null; then
	echo "1..0 # SKIP dlrun is built without MPI (./configure --with-mpi)"
	exit 0
fi
if ! command -v "$MPIRUN" >/dev/null 2>&1; then
	echo "1..0 # SKIP no $MPIRUN (Debian: openmpi-bin)"
	exit 0
fi
if [ -z "$NPYCMP" ]; then
	for _c in "$(dirname "$DLRUN")/../tests/npycmp" ./tests/npycmp; do
		[ -x "$_c" ] && NPYCMP=$_c && break
	done
fi
if [ -z "$NPYCMP" ] || [ ! -x "$NPYCMP" ]; then
	echo "Bail out! NPYCMP is not set and tests/npycmp was not found"
	exit 1
fi

# shellcheck source=tests/st_lib.sh
. "$srcdir/tests/st_lib.sh"

# mpi NP ARGS...: `mpirun -np NP dlrun ARGS` from $tmp; sets rc, stdout
# and stderr as run_dlrun does
mpi() {
	_np=$1
	shift
	last_cmd="mpirun -np $_np dlrun $*"
	(cd "$tmp" && "$MPIRUN" --oversubscribe -np "$_np" "$DLRUN" "$@") \
		>"$tmp/stdout" 2>"$tmp/stderr"
	rc=$?
	return 0
}

# ---- the same weights as one process ----

# parity NAME NP MODEL ARGS...: one process and NP processes, same flags
parity() {
	_n=$1 _np=$2
	shift 2
	[ -s "$tmp/$_n.one.st" ] || {
		run_dlrun train "$@" -o "$tmp/$_n.one.st"
		expect_rc 0 || return 1
	}
	mpi "$_np" train "$@" -o "$tmp/$_n.np$_np.st" --log "$tmp/$_n.np$_np.jsonl"
	expect_rc 0 || return 1
	same_tensors "$tmp/$_n.np$_np.st" "$tmp/$_n.one.st" "the one-process run's"
}

mlp="$models/digits-mlp.yaml --data $digits --epochs 1 --batch-size 30 --threads 1 -q"
# SGD: under Adam a gradient that is 0 but for rounding (a bias before batch
# norm, attention's key bias) moves by lr, and the rounding of a different
# summation order decides in which direction
cnn_flags="--data $digits --epochs 1 --batch-size 30 --threads 1 -q
	--optimizer sgd --lr 0.05 --momentum 0.9"
cnn="$models/digits-cnn.yaml $cnn_flags"
# parity needs a smooth model: with relu and max-pool the rounding of the
# two summation orders sets off finite jumps (see the model's comment)
cnn_smooth="$data/digits-cnn-smooth.yaml $cnn_flags"
gpt="$data/gpt-tiny.yaml --data $data/tokens.npz --epochs 3 --batch-size 6 --threads 1 -q
	--optimizer sgd --lr 0.1 --momentum 0.9"
# the gate noise is drawn as one process would, and the balance loss's
# importance and load are sums over every process's tokens
moed=$srcdir/tests/data/train_parity/moe_noisy_balance
moe="$moed/model.yaml -w $moed/init.safetensors --data $moed/x.npy --labels $moed/y.npy
	--loss mse --epochs 2 --batch-size 4 --optimizer sgd --lr 0.1 --momentum 0.9
	--seed 3 --threads 1 -q"

# shellcheck disable=SC2086 # the flag lists split on purpose
{
check "digits MLP, 2 processes: the weights of one (Adam, last batch 14 + 13)" parity mlp 2 $mlp
check "digits MLP, 3 processes: the weights of one" parity mlp 3 $mlp
check "smooth digits CNN --sync-batch-norm, 2 processes: weights and running statistics of one" \
	parity cnn 2 $cnn_smooth --sync-batch-norm
check "smooth digits CNN --sync-batch-norm, 3 processes: weights and running statistics of one" \
	parity cnn 3 $cnn_smooth --sync-batch-norm
check "tiny causal transformer, 2 processes (ranks without samples in the last batch)" \
	parity gpt 2 $gpt
check "tiny causal transformer, 3 processes" parity gpt 3 $gpt
check "mixture_of_experts, noisy gating and balance_loss, 2 processes: the weights of one" \
	parity moe 2 $moe
check "mixture_of_experts, 4 processes (two without samples in the last batch)" \
	parity moe 4 $moe
}

# per-process batch norm (as DistributedDataParallel without SyncBatchNorm):
# each process normalises by its shard's statistics, so the weights are not
# one process's; it trains, and rank 0 alone logs
t_cnn_local_bn() {
	# shellcheck disable=SC2086
	mpi 2 train $cnn -o "$tmp/cnn.local.st" --log "$tmp/cnn.local.jsonl"
	expect_rc 0 || return 1
	[ "$(wc -l <"$tmp/cnn.local.jsonl")" -eq 1 ] ||
		fail "the log has $(wc -l <"$tmp/cnn.local.jsonl") lines, expected 1 (rank 0 alone)"
	grep -E '"val_accuracy": *0\.(8|9)' "$tmp/cnn.local.jsonl" >/dev/null ||
		fail "val_accuracy below 0.8 after an epoch: $(cat "$tmp/cnn.local.jsonl")"
	grep -F 'epoch' "$tmp/stderr" >/dev/null && fail "progress printed with -q"
	return 0
}
check "digits CNN, per-process batch norm, 2 processes: trains, one log" t_cnn_local_bn

# ---- data ----

t_shards() {
	_f="$models/digits-mlp.yaml --epochs 2 --batch-size 20 --no-shuffle --threads 1 -q"
	# shellcheck disable=SC2086
	run_dlrun train $_f --data "$data/interleaved.npz" -o "$tmp/inter.one.st"
	expect_rc 0 || return 1
	# shellcheck disable=SC2086
	mpi 2 train $_f --data "$data/shard-{rank}.npz" -o "$tmp/inter.np2.st"
	expect_rc 0 || return 1
	same_tensors "$tmp/inter.np2.st" "$tmp/inter.one.st" "the one-process run's"
}
check "--data 'shard-{rank}.npz': one file per process, ten samples of each per batch" t_shards

t_missing_shard() {
	mpi 3 train "$models/digits-mlp.yaml" --data "$data/shard-{rank}.npz" \
		--batch-size 30 --threads 1 -q -o "$tmp/never.st"
	[ "$rc" -ne 0 ] || fail "exit code 0 with no shard-2.npz"
	grep -E '^dlrun: rank 2: .*shard-2\.npz' "$tmp/stderr" >/dev/null ||
		fail "no 'dlrun: rank 2: ...shard-2.npz' line"
	[ -e "$tmp/never.st" ] && fail "-o written"
	return 0
}
check "a missing shard: every process exits non-zero, one line names rank 2" t_missing_shard

# one file per process: each reads batch / k samples of its own
t_batch() {
	mpi 2 train "$models/digits-mlp.yaml" --data "$data/shard-{rank}.npz" --batch-size 31 -q \
		-o "$tmp/never.st"
	expect_rc 2
	expect_stderr_has "dlrun: rank 0: train: --batch-size 31 (the global batch) does not divide among 2 processes, each reading its own file; 30 or 32 would"
	[ "$(grep -c '^dlrun: ' "$tmp/stderr")" -eq 1 ] ||
		fail "not exactly one 'dlrun: ' line (rank 0 alone says what every rank found)"
	[ -e "$tmp/never.st" ] && fail "-o written"
	return 0
}
check "--batch-size 31 with 2 files of 2 processes: exit 2, naming 30 and 32" t_batch
# cli.md: each rank takes its shard of every global batch, and the result
# is one process's with the same global --batch-size: any size, so 32 among
# 3 processes is shares of 11, 11 and 10, weighted by their samples
# shellcheck disable=SC2086
check "digits MLP, --batch-size 32 among 3 processes: the weights of one" \
	parity mlp32 3 $(echo $mlp | sed 's/--batch-size 30/--batch-size 32/')

t_nonfinite() {
	mpi 2 train "$models/digits-mlp.yaml" --data "$digits" --batch-size 30 --threads 1 -q \
		--optimizer sgd --lr 1e30 --checkpoint "$tmp/nan-ck.st" --checkpoint-every 1000 \
		-o "$tmp/never.st"
	expect_rc 1
	grep -E '^dlrun: rank [01]: .*non-finite' "$tmp/stderr" >/dev/null ||
		fail "no 'dlrun: rank R: ... non-finite' line"
	[ -e "$tmp/never.st" ] && fail "-o written"
	[ -e "$tmp/nan-ck.st" ] && fail "a checkpoint written"
	return 0
}
check "a loss that is not finite: exit 1, a line naming the rank" t_nonfinite

# ---- resume with another number of processes ----

t_resume() {
	_f="$models/digits-mlp.yaml --data $digits --epochs 2 --batch-size 30 --threads 1 -q"
	# shellcheck disable=SC2086
	run_dlrun train $_f -o "$tmp/full.st"
	expect_rc 0 || return 1
	# 96 steps: the checkpoint of step 50 is the last one
	# shellcheck disable=SC2086
	mpi 2 train $_f -o "$tmp/half.st" --checkpoint "$tmp/ck.st" --checkpoint-every 50
	expect_rc 0 || return 1
	# shellcheck disable=SC2086
	mpi 3 train $_f -o "$tmp/resumed.st" --resume "$tmp/ck.st"
	expect_rc 0 || return 1
	same_tensors "$tmp/resumed.st" "$tmp/full.st" "the one-process run's"
}
check "checkpoint of step 50 with 2 processes, resumed with 3: one process's weights" t_resume

# ---- a killed process ----

# pid of the rank R child of process P, or nothing
rank_pid() {
	for _p in $(ps -o pid= --ppid "$1"); do
		tr '\0' '\n' <"/proc/$_p/environ" 2>/dev/null |
			grep -x "OMPI_COMM_WORLD_RANK=$2" >/dev/null && echo "$_p" && return 0
	done
}

t_kill() {
	(cd "$tmp" && exec "$MPIRUN" --oversubscribe -np 3 "$DLRUN" train \
		"$models/digits-mlp.yaml" --data "$digits" --epochs 1000 --batch-size 30 \
		--threads 1 -q -o "$tmp/killed.st" --checkpoint "$tmp/kill-ck.st" \
		--checkpoint-every 20) >"$tmp/stdout" 2>"$tmp/stderr" &
	_job=$!
	bg_pids="$bg_pids $_job"
	last_cmd="mpirun -np 3 dlrun train ... --checkpoint kill-ck.st --checkpoint-every 20"
	_i=0
	while [ ! -s "$tmp/kill-ck.st" ] && [ $_i -lt 300 ]; do
		sleep 0.1
		_i=$((_i + 1))
	done
	[ -s "$tmp/kill-ck.st" ] || { fail "no checkpoint after 30 s"; return 1; }
	sleep 0.5
	_victim=$(rank_pid "$_job" 1)
	_others="$(rank_pid "$_job" 0) $(rank_pid "$_job" 2)"
	[ -n "$_victim" ] || { fail "rank 1 not found among mpirun's children"; return 1; }
	kill -KILL "$_victim"
	_t0=$(date +%s)
	while :; do
		_alive=
		for _p in $_job $_others; do
			# a zombie has ended
			[ -r "/proc/$_p/stat" ] && ! grep -q '^[0-9]* ([^)]*) Z' "/proc/$_p/stat" 2>/dev/null &&
				_alive="$_alive $_p"
		done
		[ -z "$_alive" ] && break
		[ $(($(date +%s) - _t0)) -gt 40 ] && break
		sleep 0.2
	done
	_dt=$(($(date +%s) - _t0))
	[ -z "$_alive" ] || fail "processes $_alive still run $_dt s after the kill"
	wait "$_job"
	rc=$?
	[ "$rc" -ne 0 ] || fail "mpirun exited 0"
	[ "$_dt" -le 30 ] || fail "the job took $_dt s to end after the kill"
	note "the job ended $_dt s after rank 1 was killed"
	[ -e "$tmp/killed.st" ] && fail "-o written"
	# intact: a full safetensors file that a resume reads (epochs 0: the
	# run ends at once and writes the checkpoint's weights)
	st_index "$tmp/kill-ck.st" >/dev/null || fail "the checkpoint is not safetensors"
	run_dlrun train "$models/digits-mlp.yaml" --data "$digits" --epochs 0 \
		--batch-size 30 -q --resume "$tmp/kill-ck.st" -o "$tmp/from-ck.st"
	expect_rc 0
}
check "rank 1 killed with SIGKILL: the others end non-zero within 30 s, checkpoint intact" t_kill

done_testing
