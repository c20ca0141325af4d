#!/bin/sh
# `dlrun train` and `dlrun gradcheck`, printing TAP:
#
# - parity with PyTorch: every case under tests/data/train_parity/<case>/
#   (made by tools/gen_train_parity.py, and tools/gen_multi_train_parity.py
#   for models with several inputs, whose data.npz holds one array per
#   input) is trained with each args_<S> file's flags; the weights must
#   match expected_<S>.safetensors tensor by tensor, `dlrun infer` of the
#   trained model on probe.npy must match expected_probe_<S>.npy, and the
#   logged epoch losses expected_losses_<S>.txt when it exists, all within
#   1e-5 relative (infinity norm);
# - models with several inputs and outputs: --data - with two inputs,
#   .npz errors naming the array, --loss-output, val_accuracy only for
#   classification losses;
# - gradcheck passes on every parity model and on tests/data/gradcheck/*.yaml
#   (every core op with a backward, non-default hyperparameters);
# - a run killed with SIGKILL after a checkpoint and resumed ends with the
#   same bytes as an uninterrupted run;
# - a non-finite loss: exit 1, a message naming the op, files left alone;
# - bad training inputs: exit 2, one 'dlrun: ' line, nothing written;
# - --log JSON lines, the model's train: defaults and flags over them;
#   mixture_of_experts' balance_loss in the log, its gate noise from --seed.
#
# Environment: see tests/lib.sh; NPYCMP (tests/npycmp) is needed.

. "${srcdir:-$(dirname "$0")/..}/tests/lib.sh"

parity=$srcdir/tests/data/train_parity
gcdir=$srcdir/tests/data/gradcheck
digits=$srcdir/models/data/digits.npz

if [ -z "$NPYCMP" ]; then
	for _c in "$(dirname "$DLRUN")/../tests/npycmp" ./tests/npycmp \
		../tests/npycmp; do
		if [ -x "$_c" ]; then
			NPYCMP=$_c
			break
		fi
	done
fi
if [ -z "$NPYCMP" ] || [ ! -x "$NPYCMP" ]; then
	echo "Bail out! NPYCMP is not set and tests/npycmp was not found"
	exit 1
fi
if [ ! -d "$parity" ]; then
	echo "Bail out! no $parity (make it with tools/gen_train_parity.py)"
	exit 1
fi

# shellcheck source=tests/st_lib.sh
. "$srcdir/tests/st_lib.sh"

# ---- parity with PyTorch ----

# parity CASE_DIR SETTING
parity() {
	_d=$1
	rm -f "$tmp/out.safetensors" "$tmp/probe_out.npy" "$tmp/parity.log"
	# a model with several inputs: data.npz holds one array per input
	# and y (tools/gen_multi_train_parity.py)
	if [ -f "$_d/data.npz" ]; then
		set -- "$1" "$2" --data "$_d/data.npz"
	else
		set -- "$1" "$2" --data "$_d/x.npy" --labels "$_d/y.npy"
	fi
	_s=$2
	shift 2
	# the args file's flags are split into words on purpose
	# shellcheck disable=SC2046
	run_dlrun train "$_d/model.yaml" -w "$_d/init.safetensors" \
		"$@" $(cat "$_d/args_$_s") --log "$tmp/parity.log" \
		-o "$tmp/out.safetensors" -q
	expect_rc 0 || return 1
	set -- "$_d" "$_s"
	# the logged mean loss of each epoch (of each step, for one batch an
	# epoch) against PyTorch's, within 1e-5 relative
	if [ -f "$_d/expected_losses_$2.txt" ]; then
		sed -n 's/.*"loss" *: *\([-+0-9.eE]*\).*/\1/p' "$tmp/parity.log" \
			>"$tmp/losses"
		if ! awk 'NR == FNR { e[FNR] = $1; n = FNR; next }
			{ m = FNR; d = $1 - e[FNR]; if (d < 0) d = -d
			  a = e[FNR] < 0 ? -e[FNR] : e[FNR]
			  if (d > 1e-5 * a) { bad = 1; print "epoch " FNR ": " $1 \
				", PyTorch " e[FNR] } }
			END { if (m != n) { print m " losses logged, expected " n; bad = 1 }
			      exit bad }' "$_d/expected_losses_$2.txt" "$tmp/losses" \
			>"$tmp/cmp" 2>&1; then
			fail "the logged losses differ from PyTorch's:"
			sed 's/^/  /' "$tmp/cmp" >>"$tmp/diag"
			return 1
		fi
	fi
	[ -f "$tmp/out.safetensors" ] || {
		fail "no output file"
		return 1
	}
	same_tensors "$tmp/out.safetensors" "$_d/expected_$2.safetensors"
	_w=$?
	_cmd=$last_cmd
	run_dlrun infer "$_d/model.yaml" -w "$tmp/out.safetensors" \
		<"$_d/probe.npy"
	expect_rc 0 || return 1
	if ! "$NPYCMP" "$tmp/stdout" "$_d/expected_probe_$2.npy" 1e-5 \
		>"$tmp/cmp" 2>&1; then
		fail "the trained model's output on probe.npy differs from PyTorch's:"
		sed 's/^/  /' "$tmp/cmp" >>"$tmp/diag"
	fi
	last_cmd=$_cmd
	return $_w
}

ncases=0
for d in "$parity"/*/; do
	d=${d%/}
	[ -f "$d/init.safetensors" ] || continue
	uses_op "$d/model.yaml" || continue
	for a in "$d"/args_*; do
		[ -f "$a" ] || continue
		ncases=$((ncases + 1))
		s=${a##*/args_}
		check "parity ${d##*/} $s: $(cat "$a")" parity "$d" "$s"
	done
done
[ -n "${DLRUN_OP:-}" ] || [ "$ncases" -ge 12 ] || {
	ok 1 "at least 12 parity cases under $parity (found $ncases)"
}

# ---- gradcheck ----

gradcheck_ok() {
	run_dlrun gradcheck "$@"
	expect_rc 0
	[ -s "$tmp/stdout" ] || fail "gradcheck printed nothing"
	# with -w, each parameter row names a key of the file: a tied one
	# (share:, a shared repeat's later copies) is its owner's row, once
	_gc_w=
	while [ $# -gt 1 ]; do
		[ "$1" = -w ] && _gc_w=$2
		shift
	done
	[ -n "$_gc_w" ] || return 0
	for _gc_k in $(awk 'NR > 1 && $1 != "input" && $1 != "worst" { print $1 }' "$tmp/stdout"); do
		grep -F "\"$_gc_k\":" "$_gc_w" >/dev/null ||
			fail "gradcheck shows '$_gc_k', which is no key of $_gc_w"
	done
	return 0
}

# gradcheck evaluates a model hundreds of times: under valgrind (the
# README's test command) every 8th case runs, the others plainly, which took
# CI's valgrind pass from 520 s of gradcheck to about 70 on a 2-core guest.
# The sanitizer build of CI checks them all.
gc_check() {
	valgrind_every 8
	check "$@"
}

for d in "$parity"/*/; do
	d=${d%/}
	[ -f "$d/model.yaml" ] || continue
	uses_op "$d/model.yaml" || continue
	if [ -f "$d/init.safetensors" ]; then
		gc_check "gradcheck ${d##*/}" gradcheck_ok "$d/model.yaml" \
			-w "$d/init.safetensors"
	else
		gc_check "gradcheck ${d##*/} (fresh weights)" gradcheck_ok \
			"$d/model.yaml"
	fi
done
# the core ops, and convolution, pooling and normalisation (with batch
# norm in training mode)
for m in "$gcdir"/*.yaml "$srcdir"/tests/data/conv/gradcheck/*.yaml; do
	[ -f "$m" ] || continue
	uses_op "$m" || continue
	n=${m##*/}
	gc_check "gradcheck ${n%.yaml}" gradcheck_ok "$m"
	gc_check "gradcheck ${n%.yaml} --seed 5" gradcheck_ok "$m" --seed 5
done
# one op's cases only (tests/op.sh): the parity and gradient checks above
if [ -n "${DLRUN_OP:-}" ]; then
	[ "$tap_n" -gt 0 ] || skip "training parity and gradient checks" "no such model uses $DLRUN_OP"
	done_testing
	exit 0
fi

# mixture_of_experts and the transformer layers with their PyTorch
# fixtures' weights (dlrun init's zero gate ties every expert's logit, and a
# finite difference would then switch experts; the layers' norms are drawn
# at random there so that they matter)
for d in "$srcdir"/tests/fixtures/moe/*/ "$srcdir"/tests/fixtures/transformer/*/; do
	[ -f "$d/model.safetensors" ] || continue
	n=${d%/}
	n=${n##*/}
	gc_check "gradcheck $n" gradcheck_ok "$d/model.yaml" -w "$d/model.safetensors"
	gc_check "gradcheck $n --seed 5" gradcheck_ok "$d/model.yaml" \
		-w "$d/model.safetensors" --seed 5
done
DLRUN_VALGRIND=$_ve_want

# ---- resume after SIGKILL ----

resume=$parity/resume/model.yaml
# 4 epochs of batch 4 over 1437 samples (1440 steps), shuffled, with
# dropout, a checkpoint every 7 steps
resume_args="--data $digits --epochs 4 --batch-size 4 --optimizer adamw
--lr 0.002 --seed 11 --checkpoint-every 7 -q"

# now_ms: milliseconds since the epoch (0 where date has no %N)
now_ms() {
	_t=$(date +%s%N 2>/dev/null)
	case $_t in
	*N | '') echo 0 ;;
	*) echo $((_t / 1000000)) ;;
	esac
}

# kill_after_checkpoint DIR DELAY_MS: starts the run to be killed, waits
# for its first checkpoint, then DELAY_MS more, and kills it with SIGKILL
kill_after_checkpoint() {
	# shellcheck disable=SC2046,SC2086
	$(dlrun_cmd) "$DLRUN" train "$resume" $resume_args \
		--checkpoint "$1/ck.safetensors" -o "$1/killed.safetensors" \
		>"$1/killed.out" 2>"$1/killed.err" &
	_pid=$!
	bg_pids="$bg_pids $_pid"
	_i=0
	while [ ! -f "$1/ck.safetensors" ] && kill -0 "$_pid" 2>/dev/null &&
		[ "$_i" -lt 6000 ]; do
		sleep 0.01
		_i=$((_i + 1))
	done
	if [ "$2" -gt 0 ]; then
		sleep "$(($2 / 1000)).$(printf '%03d' $(($2 % 1000)))"
	fi
	kill -9 "$_pid" 2>/dev/null
	wait "$_pid" 2>/dev/null
	diag "killed $2ms after the first checkpoint (full run: $((_t1 - _t0))ms), exit $?"
}

resume_after_kill() {
	_r=$tmp/resume
	rm -rf "$_r"
	mkdir "$_r"
	_t0=$(now_ms)
	# shellcheck disable=SC2086
	run_dlrun train "$resume" $resume_args \
		--checkpoint "$_r/ck_full.safetensors" -o "$_r/full.safetensors"
	_t1=$(now_ms)
	expect_rc 0 || return 1
	# the kill comes a random time into the run (within the first half of
	# an uninterrupted run's length) after the first checkpoint
	_span=$(((_t1 - _t0) / 2))
	_rand=$(od -An -tu2 -N2 /dev/urandom 2>/dev/null | tr -d ' ')
	_delay=$(((${_rand:-0} % 1000) * _span / 1000))
	# A loaded machine can starve this poller until the run is over; that
	# is no failure of dlrun, so try again (at most 3 times), killing at
	# once when the first checkpoint appears.
	_try=0
	while :; do
		_try=$((_try + 1))
		rm -f "$_r/ck.safetensors" "$_r/killed.safetensors"
		kill_after_checkpoint "$_r" "$_delay"
		[ -f "$_r/ck.safetensors" ] || {
			fail "no checkpoint written before the kill"
			return 1
		}
		[ -f "$_r/killed.safetensors" ] || break
		if [ "$_try" -ge 3 ]; then
			fail "the run ended before it was killed, $_try times: nothing to resume"
			return 1
		fi
		diag "the run ended before the kill; again, killing at the first checkpoint"
		_delay=0
	done
	# shellcheck disable=SC2086
	run_dlrun train "$resume" $resume_args \
		--checkpoint "$_r/ck.safetensors" --resume "$_r/ck.safetensors" \
		-o "$_r/resumed.safetensors"
	expect_rc 0 || return 1
	cmp "$_r/full.safetensors" "$_r/resumed.safetensors" >"$tmp/cmp" 2>&1 ||
		fail "resumed weights differ from the uninterrupted run's: $(cat "$tmp/cmp")"
}

if [ -f "$digits" ]; then
	check "resume after SIGKILL gives the uninterrupted run's bytes" \
		resume_after_kill
	# and a second time, at another random point
	check "resume after SIGKILL (again, another kill point)" \
		resume_after_kill
else
	skip "resume after SIGKILL" "no $digits"
	skip "resume after SIGKILL (again)" "no $digits"
fi

# resuming twice from the same checkpoint gives the same bytes, and resuming
# from the last checkpoint of a finished run changes nothing
resume_repeat() {
	_r=$tmp/resume2
	rm -rf "$_r"
	mkdir "$_r"
	set -- "$parity/mlp/model.yaml" -w "$parity/mlp/init.safetensors" \
		--data "$parity/mlp/x.npy" --labels "$parity/mlp/y.npy" \
		--epochs 3 --batch-size 5 --seed 3 --checkpoint-every 4 -q
	run_dlrun train "$@" --checkpoint "$_r/ck.safetensors" \
		-o "$_r/full.safetensors"
	expect_rc 0 || return 1
	# 9 steps: the checkpoint at step 8 is the last
	cp "$_r/ck.safetensors" "$_r/ck8.safetensors"
	run_dlrun train "$@" --checkpoint "$_r/ck_a.safetensors" \
		--resume "$_r/ck8.safetensors" -o "$_r/a.safetensors"
	expect_rc 0 || return 1
	run_dlrun train "$@" --checkpoint "$_r/ck_b.safetensors" \
		--resume "$_r/ck8.safetensors" -o "$_r/b.safetensors"
	expect_rc 0 || return 1
	same_bytes "$_r/full.safetensors" "$_r/a.safetensors"
	same_bytes "$_r/a.safetensors" "$_r/b.safetensors"
}
check "resume from a checkpoint: same bytes, twice" resume_repeat

# cli.md: a resumed run "ends with the same bytes as an uninterrupted run":
# its --log too. A checkpoint keeps the epoch's loss so far (the resumed
# epoch's line averages all its batches, not those after the resume) and
# the log's length (lines a run killed later wrote past it are cut); at an
# epoch's last batch the epoch's line is still to come. Here the killed
# run's log is the whole run's: the worst case, killed at the very end.
resume_log() {
	_r=$tmp/resume3
	rm -rf "$_r"
	mkdir "$_r"
	set -- "$parity/mlp/model.yaml" -w "$parity/mlp/init.safetensors" \
		--data "$parity/mlp/x.npy" --labels "$parity/mlp/y.npy" \
		--epochs 3 --batch-size 5 --seed 3 -q
	# 9 steps, 3 an epoch: step 8 is inside epoch 3, step 6 ends epoch 2
	for _k in 8 6; do
		run_dlrun train "$@" --checkpoint "$_r/ck$_k.safetensors" \
			--checkpoint-every "$_k" --log "$_r/full.log" -o "$_r/full.safetensors"
		expect_rc 0 || return 1
		cp "$_r/full.log" "$_r/killed$_k.log"
		run_dlrun train "$@" --resume "$_r/ck$_k.safetensors" \
			--log "$_r/killed$_k.log" -o "$_r/resumed$_k.safetensors"
		expect_rc 0 || return 1
		cmp "$_r/full.log" "$_r/killed$_k.log" >/dev/null 2>&1 ||
			fail "the log resumed at step $_k differs: $(diff "$_r/full.log" "$_r/killed$_k.log" | tr '\n' ' ')"
		same_bytes "$_r/full.safetensors" "$_r/resumed$_k.safetensors"
	done
}
check "resume: the --log ends as the uninterrupted run's (mid-epoch and epoch-end checkpoints)" resume_log

# ---- a non-finite loss ----

nonfinite() {
	_r=$tmp/nan
	rm -rf "$_r"
	mkdir "$_r"
	printf 'previous weights\n' >"$_r/out.safetensors"
	printf 'previous checkpoint\n' >"$_r/ck.safetensors"
	cp "$_r/out.safetensors" "$_r/out.before"
	cp "$_r/ck.safetensors" "$_r/ck.before"
	run_dlrun train "$parity/mlp/model.yaml" -w "$parity/mlp/init.safetensors" \
		--data "$parity/mlp/x.npy" --labels "$parity/mlp/y.npy" \
		--optimizer sgd --lr 1e6 --epochs 20 --batch-size 4 --no-shuffle \
		--checkpoint "$_r/ck.safetensors" --checkpoint-every 1000 \
		-o "$_r/out.safetensors" -q
	expect_rc 1
	expect_one_error_line
	expect_stderr_has non-finite
	grep -E 'linear|relu' "$tmp/stderr" >/dev/null ||
		fail "the message names no op of the model (linear, relu)"
	same_bytes "$_r/out.safetensors" "$_r/out.before"
	same_bytes "$_r/ck.safetensors" "$_r/ck.before"
	only_files "$_r" out.safetensors out.before ck.safetensors ck.before
}
check "a non-finite loss: exit 1, names the op, files unchanged" nonfinite

# ---- bad training inputs ----

bad=$parity/bad
mlpd=$parity/mlp

# refused DESC GREP_PATTERN ARGS...: dlrun train ARGS -o DIR/out.safetensors
# exits 2 with one 'dlrun: ' line matching the extended regular expression
# GREP_PATTERN (when not empty) and creates no file
refused() {
	_pat=$1
	shift
	_r=$tmp/bad
	rm -rf "$_r"
	mkdir "$_r"
	run_dlrun train "$@" -o "$_r/out.safetensors" -q
	expect_rc 2
	expect_one_error_line
	if [ -n "$_pat" ]; then
		grep -E -e "$_pat" "$tmp/stderr" >/dev/null ||
			fail "stderr does not match /$_pat/"
	fi
	only_files "$_r"
}

mlp_train() {
	echo "$mlpd/model.yaml -w $mlpd/init.safetensors --data $mlpd/x.npy"
}

# shellcheck disable=SC2046
{
	check "bad: a label out of range (4 of 4 classes)" refused '4' \
		$(mlp_train) --labels "$bad/y_range.npy"
	check "bad: a negative label" refused '-1' \
		$(mlp_train) --labels "$bad/y_negative.npy"
	check "bad: x has 12 samples, y 11" refused '11|12' \
		$(mlp_train) --labels "$bad/y_short.npy"
	check "bad: float labels for cross_entropy" refused '' \
		$(mlp_train) --labels "$bad/y_float.npy"
	check "bad: float labels for nll" refused '' \
		"$parity/log_softmax_nll/model.yaml" --data "$parity/log_softmax_nll/x.npy" \
		--labels "$bad/y_float.npy" --loss nll
	check "bad: integer targets for mse" refused '' \
		"$parity/mse/model.yaml" --data "$parity/mse/x.npy" \
		--labels "$bad/t_int.npy" --loss mse
	check "bad: integer x for a float model input" refused '' \
		"$mlpd/model.yaml" --data "$bad/x_int.npy" --labels "$mlpd/y.npy"
	# the message says where: the labels file
	check "bad: [N, 3] output, [N, 2] class labels (cross_entropy)" \
		refused 'y_2col\.npy' \
		"$parity/residual_mlp/model.yaml" --data "$parity/residual_mlp/x.npy" \
		--labels "$bad/y_2col.npy"
	check "bad: [N, 3] output, [N, 2] targets (mse)" refused 't_2col\.npy' \
		"$parity/mse/model.yaml" --data "$parity/mse/x.npy" \
		--labels "$bad/t_2col.npy" --loss mse
	check "bad: [N, 2] output, [N, 3] targets (bce_with_logits)" \
		refused 'mse/y\.npy' \
		"$parity/bce/model.yaml" --data "$parity/bce/x.npy" \
		--labels "$parity/mse/y.npy" --loss bce_with_logits
	check "bad: unknown --optimizer (did you mean)" refused \
		"did you mean.*sgd" $(mlp_train) --labels "$mlpd/y.npy" \
		--optimizer sdg
	check "bad: unknown --loss" refused 'cross_entropi' \
		$(mlp_train) --labels "$mlpd/y.npy" --loss cross_entropi
	check "bad: --betas 0.9" refused 'betas' \
		$(mlp_train) --labels "$mlpd/y.npy" --optimizer adamw --betas 0.9
	check "bad: --betas 0.9,x" refused 'betas' \
		$(mlp_train) --labels "$mlpd/y.npy" --optimizer adamw --betas 0.9,x
	check "bad: --betas 0.9,0.99,0.5" refused 'betas' \
		$(mlp_train) --labels "$mlpd/y.npy" --optimizer adamw \
		--betas 0.9,0.99,0.5
	check "bad: --checkpoint without --checkpoint-every" refused \
		'checkpoint-every' $(mlp_train) --labels "$mlpd/y.npy" \
		--checkpoint "$tmp/ck.safetensors"
	check "bad: --data file missing" refused 'nonexistent' \
		"$mlpd/model.yaml" --data "$tmp/nonexistent.npy" --labels "$mlpd/y.npy"
	check "bad: --labels missing with an .npy --data" refused 'labels' \
		$(mlp_train)
}

# a model file with a bad train: key, and with a bad train: value
cat >"$tmp/badkey.yaml" <<'EOF'
inputs:
  x: {shape: [8]}
layers:
  - linear: {out_features: 4}
train:
  epochs: 1
  learning_rate: 0.1
EOF
cat >"$tmp/badval.yaml" <<'EOF'
inputs:
  x: {shape: [8]}
layers:
  - linear: {out_features: 4}
train:
  batch_size: 4
  epochs: two
EOF
check "bad: an unknown train: key (line:col)" refused \
	'badkey\.yaml:7:3.*learning_rate' "$tmp/badkey.yaml" \
	--data "$mlpd/x.npy" --labels "$mlpd/y.npy"
check "bad: a bad train: value (line:col)" refused 'badval\.yaml:7:' \
	"$tmp/badval.yaml" --data "$mlpd/x.npy" --labels "$mlpd/y.npy"

# ---- models with several inputs and outputs ----

gcn=$parity/gcn

# --data -: per step one array per input (x, adj), then y; two steps of
# stream.npy hold the samples of data.npz, so the run is the same
stream_two_inputs() {
	# shellcheck disable=SC2046
	run_dlrun train "$gcn/model.yaml" -w "$gcn/init.safetensors" \
		--data "$gcn/data.npz" $(cat "$gcn/args_sgd") -q \
		-o "$tmp/gcn_npz.safetensors"
	expect_rc 0 || return 1
	# shellcheck disable=SC2046
	run_dlrun train "$gcn/model.yaml" -w "$gcn/init.safetensors" \
		--data - $(cat "$gcn/args_sgd") -q \
		-o "$tmp/gcn_stream.safetensors" <"$gcn/stream.npy"
	expect_rc 0 || return 1
	same_bytes "$tmp/gcn_npz.safetensors" "$tmp/gcn_stream.safetensors"
}
check "--data - with two inputs (x, adj, y per step): as the .npz" \
	stream_two_inputs

# an input array of one sample serves every sample (graph_conv's shared
# adjacency; infer broadcasts a batch-1 input likewise): the same bytes as
# that adjacency repeated per sample, also with --val-split
adj_broadcast() {
	for _f in adj1 adj_rep; do
		# shellcheck disable=SC2046
		run_dlrun train "$gcn/model.yaml" -w "$gcn/init.safetensors" \
			--data "$gcn/$_f.npz" $(cat "$gcn/args_adam") -q --val-split 0.34 \
			-o "$tmp/gcn_$_f.safetensors"
		expect_rc 0 || return 1
	done
	same_bytes "$tmp/gcn_adj1.safetensors" "$tmp/gcn_adj_rep.safetensors"
}
check "train: an input of one sample (adj [1, 5, 5]) serves every sample" adj_broadcast

refused_stdin() {
	_in=$1
	shift
	refused "$@" <"$_in"
}

check "bad: .npz without the input adj (named, with its shape)" \
	refused "no array 'adj'.*adj \[5, 5\]" \
	"$gcn/model.yaml" --data "$bad/gcn_no_adj.npz"
check "bad: .npz with an array the model does not take (named)" \
	refused "'adjacency'" "$gcn/model.yaml" --data "$bad/gcn_misnamed.npz"
check "bad: .npz adj of the wrong per-sample shape (both shapes)" \
	refused "adj.*\[4, 4\].*\[5, 5\]" \
	"$gcn/model.yaml" --data "$bad/gcn_adj_shape.npz"
check "bad: .npz adj with 5 samples, x with 6" refused "adj.* 5 .* 6" \
	"$gcn/model.yaml" --data "$bad/gcn_short.npz"
check "bad: .npz without the labels y" refused "'y'" \
	"$gcn/model.yaml" --data "$bad/gcn_no_y.npz"
check "bad: an .npy --data for a model with two inputs" refused \
	'2 inputs.*x, adj' "$gcn/model.yaml" --data "$gcn/probe.npy" \
	--labels "$mlpd/y.npy"
check "bad: --data - ending inside a step (names the missing input)" \
	refused_stdin "$bad/gcn_stream_short.npy" "step 2.*'adj'" \
	"$gcn/model.yaml" --data -

# an .npz with <input>_val and y_val carries a validation set (int token
# inputs too); validation arrays for only some inputs are an error
val_two_inputs() {
	for _c in gcn gru_seq2seq; do
		rm -f "$tmp/val.log"
		run_dlrun train "$parity/$_c/model.yaml" \
			-w "$parity/$_c/init.safetensors" \
			--data "$parity/$_c/with_val.npz" --epochs 2 --batch-size 4 \
			--log "$tmp/val.log" -q -o "$tmp/val.safetensors"
		expect_rc 0 || return 1
		_n=$(grep -c '"val_loss" *:.*"val_accuracy" *:' "$tmp/val.log")
		[ "$_n" = 2 ] || fail "$_c: $_n log lines with val_loss and val_accuracy, expected 2"
	done
	return 0
}
check "validation from <input>_val and y_val (gcn, gru_seq2seq)" val_two_inputs
check "bad: .npz with x_val and y_val but no adj_val (named)" \
	refused "'adj_val'" "$gcn/model.yaml" --data "$bad/gcn_val_partial.npz"

# --loss-output: a model with two outputs (a: 3 classes, b: 4 classes)
# trained with the loss on b gives the bytes of the same model with b as
# its only output (a gets no gradient, and Adam leaves it as it was); the
# model's train: {loss_output: b} does the same
cat >"$tmp/two_out.yaml" <<'EOF'
inputs:
  x: {shape: [8]}
outputs: [a, b]
layers:
  - name: a
    linear: {out_features: 3}
  - name: h
    in: x
    linear: {out_features: 6}
  - relu
  - name: b
    linear: {out_features: 4}
EOF
sed 's/^outputs: \[a, b\]/outputs: [b]/' "$tmp/two_out.yaml" >"$tmp/one_out.yaml"
{
	cat "$tmp/two_out.yaml"
	printf 'train:\n  loss_output: b\n'
} >"$tmp/two_out_yaml.yaml"
sed 's/loss_output: b/loss_output: c/' "$tmp/two_out_yaml.yaml" \
	>"$tmp/two_out_bad.yaml"

loss_output() {
	run_dlrun init "$tmp/two_out.yaml" -o "$tmp/two_init.safetensors"
	expect_rc 0 || return 1
	set -- -w "$tmp/two_init.safetensors" --data "$mlpd/x.npy" \
		--labels "$mlpd/y.npy" --epochs 2 --batch-size 4 -q
	run_dlrun train "$tmp/one_out.yaml" "$@" -o "$tmp/one.safetensors"
	expect_rc 0 || return 1
	run_dlrun train "$tmp/two_out.yaml" "$@" --loss-output b \
		-o "$tmp/two.safetensors"
	expect_rc 0 || return 1
	same_bytes "$tmp/one.safetensors" "$tmp/two.safetensors"
	run_dlrun train "$tmp/two_out_yaml.yaml" "$@" \
		--output "$tmp/two_y.safetensors"
	expect_rc 0 || return 1
	same_bytes "$tmp/one.safetensors" "$tmp/two_y.safetensors"
}
check "--loss-output b (and train: {loss_output: b}): the loss on the second output" \
	loss_output
check "bad: --loss-output names no output (lists them)" refused \
	"'nope'.*a, b" "$tmp/two_out.yaml" --data "$mlpd/x.npy" \
	--labels "$mlpd/y.npy" --loss-output nope
check "bad: train: {loss_output: c} names no output (line:col)" refused \
	"two_out_bad\.yaml:[0-9]+:[0-9]+:.*loss_output.*'c'" \
	"$tmp/two_out_bad.yaml" --data "$mlpd/x.npy" --labels "$mlpd/y.npy"
# by default the loss is on the first output, a: 3 classes, labels up to 3
check "the default loss output is the first (a, 3 classes: label 3 refused)" \
	refused 'out of range for 3 classes' "$tmp/two_out.yaml" \
	--data "$mlpd/x.npy" --labels "$mlpd/y.npy"

# val_accuracy exists only for classification losses: not for mse, in the
# log nor on the progress line; bce_with_logits has it
val_accuracy_mse() {
	_m=$parity/mse
	rm -f "$tmp/mse.log" "$tmp/bce.log"
	run_dlrun train "$_m/model.yaml" -w "$_m/init.safetensors" \
		--data "$_m/x.npy" --labels "$_m/y.npy" --loss mse --epochs 2 \
		--batch-size 4 --val-data "$_m/x.npy" --val-labels "$_m/y.npy" \
		--log "$tmp/mse.log" -o "$tmp/mse.safetensors"
	expect_rc 0 || return 1
	_n=$(grep -c '"val_loss" *:' "$tmp/mse.log")
	[ "$_n" = 2 ] || fail "$_n log lines with val_loss, expected 2"
	grep val_accuracy "$tmp/mse.log" >/dev/null &&
		fail "the log has val_accuracy for mse: $(head -n 1 "$tmp/mse.log")"
	_n=$(grep -c 'val_loss' "$tmp/stderr")
	[ "$_n" = 2 ] || fail "$_n progress lines with val_loss, expected 2"
	grep val_accuracy "$tmp/stderr" >/dev/null &&
		fail "the progress line has val_accuracy for mse: $(head -n 1 "$tmp/stderr")"
	_b=$parity/bce
	run_dlrun train "$_b/model.yaml" -w "$_b/init.safetensors" \
		--data "$_b/x.npy" --labels "$_b/y.npy" --loss bce_with_logits \
		--epochs 1 --val-data "$_b/x.npy" --val-labels "$_b/y.npy" \
		--log "$tmp/bce.log" -o "$tmp/bce.safetensors"
	expect_rc 0 || return 1
	grep '"val_accuracy" *:' "$tmp/bce.log" >/dev/null ||
		fail "no val_accuracy in the log for bce_with_logits"
	grep 'val_accuracy' "$tmp/stderr" >/dev/null ||
		fail "no val_accuracy on the progress line for bce_with_logits"
	return 0
}
check "val_accuracy: absent for mse (log and progress), present for bce" \
	val_accuracy_mse

# ---- --log and the model's train: defaults ----

# the mlp model with train: defaults: 2 epochs, batch 4 (3 steps an epoch)
{
	cat "$mlpd/model.yaml"
	printf 'train:\n  epochs: 2\n  batch_size: 4\n  lr: 0.05\n'
	printf '  optimizer: adam\n  betas: [0.8, 0.9]\n  shuffle: false\n'
} >"$tmp/deflt.yaml"

# log_ok LOG EPOCHS LASTSTEP LR: one JSON object per line, with the keys;
# EPOCHS epoch-end lines (with validation), the last at step LASTSTEP; lr LR
log_ok() {
	[ -s "$1" ] || {
		fail "no log written"
		return 1
	}
	diag_file "$1" 10 >"$tmp/logdiag"
	grep -v '^{.*}$' "$1" >/dev/null &&
		fail "a log line is not one JSON object: $(grep -v '^{.*}$' "$1" | head -n 1)"
	for _k in epoch step loss lr val_loss val_accuracy; do
		grep "\"$_k\" *:" "$1" >/dev/null || fail "no \"$_k\" key in the log"
	done
	_n=$(grep -c '"val_loss" *:' "$1")
	[ "$_n" = "$2" ] || fail "$_n lines with val_loss, expected $2 (one per epoch)"
	grep '"val_loss" *:' "$1" | grep -v '"val_accuracy" *:' >/dev/null &&
		fail "an epoch-end line has val_loss but no val_accuracy"
	# the numbers of the last line (key order free)
	_last=$(tail -n 1 "$1")
	_step=$(echo "$_last" | sed -n 's/.*"step" *: *\([0-9][0-9]*\).*/\1/p')
	[ "$_step" = "$3" ] || fail "the last line's step is '$_step', expected $3"
	_lr=$(echo "$_last" | sed -n 's/.*"lr" *: *\([-+0-9.eE]*\).*/\1/p')
	awk -v a="$_lr" -v b="$4" 'BEGIN { d = a - b; if (d < 0) d = -d
		exit !(a != "" && d <= 1e-9 * b) }' ||
		fail "the last line's lr is '$_lr', expected $4"
	if [ -s "$tmp/diag" ]; then
		echo "log:" >>"$tmp/diag"
		cat "$tmp/logdiag" >>"$tmp/diag"
	fi
}

log_defaults() {
	rm -f "$tmp/log"
	run_dlrun train "$tmp/deflt.yaml" -w "$mlpd/init.safetensors" \
		--data "$mlpd/x.npy" --labels "$mlpd/y.npy" \
		--val-data "$mlpd/x.npy" --val-labels "$mlpd/y.npy" \
		--log "$tmp/log" -o "$tmp/log.safetensors"
	expect_rc 0 || return 1
	log_ok "$tmp/log" 2 6 0.05
	# not a terminal: one plain progress line per epoch, no 'dlrun: '
	_n=$(grep -c . "$tmp/stderr")
	[ "$_n" = 2 ] || fail "stderr has $_n lines, expected one per epoch (2)"
	grep '^dlrun: ' "$tmp/stderr" >/dev/null &&
		fail "a progress line starts with 'dlrun: '"
	return 0
}
check "--log: the model's train: defaults (2 epochs, batch 4, lr 0.05)" \
	log_defaults

log_flags() {
	rm -f "$tmp/log"
	run_dlrun train "$tmp/deflt.yaml" -w "$mlpd/init.safetensors" \
		--data "$mlpd/x.npy" --labels "$mlpd/y.npy" \
		--val-data "$mlpd/x.npy" --val-labels "$mlpd/y.npy" \
		--epochs 3 --batch-size 6 --lr 0.02 -q \
		--log "$tmp/log" -o "$tmp/log.safetensors"
	expect_rc 0 || return 1
	log_ok "$tmp/log" 3 6 0.02
	[ -s "$tmp/stderr" ] && fail "-q: stderr is not empty"
	return 0
}
check "--log: flags override train: (3 epochs, batch 6, lr 0.02)" log_flags

# train: defaults give the same weights as the same flags
defaults_equal_flags() {
	run_dlrun train "$tmp/deflt.yaml" -w "$mlpd/init.safetensors" \
		--data "$mlpd/x.npy" --labels "$mlpd/y.npy" -q \
		-o "$tmp/by_yaml.safetensors"
	expect_rc 0 || return 1
	run_dlrun train "$mlpd/model.yaml" -w "$mlpd/init.safetensors" \
		--data "$mlpd/x.npy" --labels "$mlpd/y.npy" -q \
		--epochs 2 --batch-size 4 --lr 0.05 --optimizer adam \
		--betas 0.8,0.9 --no-shuffle -o "$tmp/by_flags.safetensors"
	expect_rc 0 || return 1
	same_bytes "$tmp/by_yaml.safetensors" "$tmp/by_flags.safetensors"
}
check "train: defaults and the same flags give the same weights" \
	defaults_equal_flags

# ---- mixture_of_experts' balance_loss in the log; its noise and --seed ----

moed=$parity/moe_noisy_balance

# a balance_loss model: "balance_loss" in the progress line and in every
# JSON line, a number no larger than the loss it is part of; none for a
# model without one (the mlp log of log_flags)
log_balance() {
	rm -f "$tmp/log"
	run_dlrun train "$moed/model.yaml" -w "$moed/init.safetensors" \
		--data "$moed/x.npy" --labels "$moed/y.npy" --loss mse \
		--epochs 2 --batch-size 2 --log "$tmp/log" -o "$tmp/moe.safetensors"
	expect_rc 0 || return 1
	_n=$(grep -c '^epoch .* loss [0-9.]*  balance_loss [0-9.]' "$tmp/stderr")
	[ "$_n" = 2 ] || fail "$_n progress lines with balance_loss, expected 2"
	_n=$(grep -c '^{.*"balance_loss" *: *[0-9].*}$' "$tmp/log")
	[ "$_n" = 2 ] || fail "$_n log lines with balance_loss, expected 2"
	sed -n 's/.*"loss" *: *\([-+0-9.eE]*\).*"balance_loss" *: *\([-+0-9.eE]*\).*/\1 \2/p' \
		"$tmp/log" | awk '{ if (!($2 > 0 && $2 < $1)) exit 1 }' ||
		fail "balance_loss is not a positive part of loss: $(head -n 1 "$tmp/log")"
	grep balance_loss "$tmp/mlp.log" >/dev/null 2>&1 &&
		fail "a model without balance_loss logs one"
	return 0
}
run_dlrun train "$mlpd/model.yaml" -w "$mlpd/init.safetensors" \
	--data "$mlpd/x.npy" --labels "$mlpd/y.npy" --epochs 1 -q \
	--log "$tmp/mlp.log" -o "$tmp/mlp.safetensors"
check "--log: balance_loss of a mixture_of_experts, in the text and JSON lines" \
	log_balance

# the gate noise comes from --seed: the same seed, the same bytes; another
# seed, other weights
moe_seed() {
	for _r in 1a 1b 2; do
		run_dlrun train "$moed/model.yaml" -w "$moed/init.safetensors" \
			--data "$moed/x.npy" --labels "$moed/y.npy" --loss mse \
			--epochs 1 --batch-size 6 --optimizer sgd --lr 0.1 \
			--seed "${_r%[ab]}" -q -o "$tmp/seed_$_r.safetensors"
		expect_rc 0 || return 1
	done
	same_bytes "$tmp/seed_1a.safetensors" "$tmp/seed_1b.safetensors" || return 1
	cmp -s "$tmp/seed_1a.safetensors" "$tmp/seed_2.safetensors" &&
		fail "--seed 1 and --seed 2 drew the same gate noise"
	return 0
}
check "noisy_gating: the noise follows --seed" moe_seed


# dropout p = 0 is the identity in training too and draws nothing: a model
# with a p = 0 dropout before a p = 0.3 one trains to the same bytes twice
# with one --seed, to the same bytes as the model without it, and to other
# bytes with another seed (the p = 0.3 dropout draws)
dropout_p0() {
	_d=$srcdir/tests/data/dropout_p0
	for _r in with_1a with_1b without_1 with_2; do
		_s=${_r##*_}
		run_dlrun train "$_d/${_r%_*}.yaml" --data "$digits" --epochs 1 \
			--batch-size 64 --seed "${_s%[ab]}" -q -o "$tmp/p0_$_r.safetensors"
		expect_rc 0 || return 1
	done
	same_bytes "$tmp/p0_with_1a.safetensors" "$tmp/p0_with_1b.safetensors" || return 1
	same_bytes "$tmp/p0_with_1a.safetensors" "$tmp/p0_without_1.safetensors" || return 1
	cmp -s "$tmp/p0_with_1a.safetensors" "$tmp/p0_with_2.safetensors" &&
		fail "--seed 1 and --seed 2 drew the same dropout masks"
	return 0
}
check "dropout p = 0 before p = 0.3: deterministic with --seed, no draws of its own" \
	dropout_p0

done_testing
