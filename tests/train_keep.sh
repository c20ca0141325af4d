#!/bin/sh
# `dlrun train`, choosing what to keep, printing TAP:
#
# - --keep-best writes the weights of the epoch with the best val_loss (or
#   --monitor val_accuracy): the same bytes as a run that stops there;
# - --early-stopping N (--min-delta D) ends the run N epochs after the best
#   one and says so; the weights are the stopped run's;
# - --lr-schedule plateau: the logged learning rates follow
#   ReduceLROnPlateau on the logged val_loss (tests/check_monitor.c holds
#   the parity with PyTorch's own lr sequence);
# - --log-every N: a line every N steps, the epoch lines unchanged;
# - the model's train: mapping sets them as the flags do;
# - {step}/{epoch} checkpoints, --keep-checkpoints K, and resuming: the
#   same bytes as an uninterrupted run (with the best epoch's state and the
#   plateau's in the checkpoint), flags that change the run refused by
#   name, --epochs may grow;
# - bad combinations: exit 2, one 'dlrun: ' line, nothing written.
#
# Environment: see tests/lib.sh.

. "${srcdir:-$(dirname "$0")/..}/tests/lib.sh"

model=$srcdir/models/digits-mlp.yaml
digits=$srcdir/models/data/digits.npz
noval=$srcdir/tests/data/train_parity/mlp

if [ ! -f "$digits" ]; then
	echo "1..0 # SKIP no $digits"
	exit 0
fi

# Reference runs (without the features under test) use run_plain: not
# under valgrind, which would take long over them. A run whose bytes are
# compared with a reference runs plainly too: under valgrind, whose CPU
# has no AVX-512, dlrun takes other kernels and other bits.

# the flags of every run here: few epochs of the digits MLP, one thread
base="--data $digits --lr 0.05 --threads 1 -q"

# epoch_values LOG KEY: KEY of each epoch line (not the --log-every
# lines, which carry "batch"), one a line
epoch_values() {
	grep -v '"batch"' "$1" | sed -n "s/.*\"$2\":\([^,}]*\).*/\1/p"
}

# best_epoch LOG KEY min|max: the first epoch with the best value
best_epoch() {
	epoch_values "$1" "$2" | awk -v mode="$3" '
		NR == 1 || (mode == "min" && $1 < b) || (mode == "max" && $1 > b) { b = $1; e = NR }
		END { print e }'
}

# ---- --keep-best ----

# t_keep_best MONITOR MODE: the kept weights are those of a run of as many
# epochs as the best one
t_keep_best() {
	_d=$tmp/kb_$1
	mkdir -p "$_d"
	# shellcheck disable=SC2086 # $base is a list of words
	run_plain train "$model" $base --epochs 6 --keep-best --monitor "$1" \
		--log "$_d/log" -o "$_d/best.safetensors"
	expect_rc 0 || return 1
	_e=$(best_epoch "$_d/log" "$1" "$2")
	[ "$_e" -lt 6 ] || fail "the best $1 is at the last epoch; the test needs another"
	# shellcheck disable=SC2086
	run_plain train "$model" $base --epochs "$_e" -o "$_d/ref.safetensors"
	expect_rc 0 || return 1
	same_bytes "$_d/best.safetensors" "$_d/ref.safetensors"
}
check "--keep-best: the weights of the epoch with the best val_loss" \
	t_keep_best val_loss min
check "--keep-best --monitor val_accuracy: the best val_accuracy's epoch" \
	t_keep_best val_accuracy max

# ---- --early-stopping ----

t_early_stopping() {
	_d=$tmp/es
	mkdir -p "$_d"
	# shellcheck disable=SC2086
	run_plain train "$model" $base --epochs 20 --early-stopping 2 \
		--log "$_d/log" -o "$_d/es.safetensors"
	expect_rc 0 || return 1
	_best=$(best_epoch "$_d/log" val_loss min)
	_last=$(epoch_values "$_d/log" epoch | tail -n 1)
	[ "$_last" -eq $((_best + 2)) ] ||
		fail "stopped after epoch $_last, the best was $_best (expected $((_best + 2)))"
	expect_stderr_has "early stopping at epoch $_last: val_loss has not improved"
	expect_stderr_has "best"
	grep 'dlrun: ' "$tmp/stderr" >/dev/null &&
		fail "an early stop is not an error, but stderr has a 'dlrun: ' line"
	# the weights are the stopped run's (no --keep-best)
	# shellcheck disable=SC2086
	run_plain train "$model" $base --epochs "$_last" -o "$_d/ref.safetensors"
	same_bytes "$_d/es.safetensors" "$_d/ref.safetensors"
}
check "--early-stopping 2: ends 2 epochs after the best, and says so" t_early_stopping

# a --min-delta larger than any change: only the first epoch improves
t_min_delta() {
	# shellcheck disable=SC2086
	run_dlrun train "$model" $base --epochs 10 --early-stopping 1 --min-delta 100 \
		--log "$tmp/md.log" -o "$tmp/md.safetensors"
	expect_rc 0 || return 1
	_n=$(epoch_values "$tmp/md.log" epoch | tail -n 1)
	[ "$_n" = 2 ] || fail "stopped after epoch $_n, expected 2"
	expect_stderr_has "early stopping at epoch 2"
}
check "--min-delta: smaller improvements do not count" t_min_delta

# ---- --lr-schedule plateau ----

# The logged lr of each epoch against ReduceLROnPlateau(mode min, factor,
# patience, threshold 1e-4 rel, cooldown 0, min_lr 0) stepped on the
# logged val_loss of the epochs before it.
t_plateau() {
	# shellcheck disable=SC2086
	run_dlrun train "$model" $base --epochs 12 --lr-schedule plateau --patience 1 \
		--factor 0.5 --log "$tmp/pl.log" -o "$tmp/pl.safetensors"
	expect_rc 0 || return 1
	epoch_values "$tmp/pl.log" val_loss >"$tmp/pl.v"
	epoch_values "$tmp/pl.log" lr >"$tmp/pl.lr"
	paste "$tmp/pl.v" "$tmp/pl.lr" | awk '
		BEGIN { lr = 0.05; best = 1e308; bad = 0; cuts = 0 }
		{
			d = $2 - lr; if (d < 0) d = -d
			if (d > 1e-12 * lr) { printf "epoch %d: lr %s, expected %.17g\n", NR, $2, lr; err = 1 }
			if ($1 < best * (1 - 1e-4)) { best = $1; bad = 0 } else bad++
			if (bad > 1) { n = lr * 0.5; if (lr - n > 1e-8) { lr = n; cuts++ } bad = 0 }
		}
		END { if (cuts == 0) { print "the learning rate was never lowered"; err = 1 }
		      exit err }' >"$tmp/pl.out" ||
		fail "$(cat "$tmp/pl.out")"
}
check "--lr-schedule plateau: the logged lr follows ReduceLROnPlateau" t_plateau

# ---- --log-every ----

t_log_every() {
	# shellcheck disable=SC2086
	run_plain train "$model" $base --epochs 2 --log "$tmp/le0.log" -o "$tmp/le0.st"
	# shellcheck disable=SC2086
	run_plain train "$model" $base --epochs 2 --log-every 10 --log "$tmp/le.log" \
		-o "$tmp/le.st"
	expect_rc 0 || return 1
	# 1437 samples in batches of 32: 45 steps an epoch, 90 in all
	_n=$(grep -c '"batch"' "$tmp/le.log")
	[ "$_n" = 9 ] || fail "$_n step lines, expected 9 (every 10 of 90 steps)"
	grep -v '"batch"' "$tmp/le.log" | cmp - "$tmp/le0.log" >/dev/null ||
		fail "the epoch lines differ from a run without --log-every"
	grep -q '^{"epoch":1,"batch":10,"step":10,"loss":[0-9.e-]*,"lr":0.05}$' "$tmp/le.log" ||
		fail "no step line for step 10: $(head -n 1 "$tmp/le.log")"
	grep -q '^{"epoch":2,"batch":5,"step":50,' "$tmp/le.log" ||
		fail "no step line for step 50 (epoch 2, batch 5)"
	same_bytes "$tmp/le.st" "$tmp/le0.st"
}
check "--log-every 10: a line every 10 steps, epoch lines unchanged" t_log_every

# ---- the model's train: mapping ----

t_train_mapping() {
	sed 's/^train:$/train:\n  keep_best: true\n  early_stopping: 2\n  monitor: val_accuracy\n  log_every: 20/' \
		"$model" >"$tmp/mapped.yaml"
	grep -q keep_best "$tmp/mapped.yaml" || fail "could not write the model" || return 1
	# shellcheck disable=SC2086
	run_plain train "$tmp/mapped.yaml" $base --epochs 12 --log "$tmp/tm1.log" \
		-o "$tmp/tm1.st"
	expect_rc 0 || return 1
	# shellcheck disable=SC2086
	run_plain train "$model" $base --epochs 12 --keep-best --early-stopping 2 \
		--monitor val_accuracy --log-every 20 --log "$tmp/tm2.log" -o "$tmp/tm2.st"
	expect_rc 0 || return 1
	same_bytes "$tmp/tm1.st" "$tmp/tm2.st"
	cmp "$tmp/tm1.log" "$tmp/tm2.log" >/dev/null || fail "the logs differ"
	grep -q '"batch":20' "$tmp/tm1.log" || fail "log_every: 20 wrote no step line"
	# a bad value names the key where it is
	sed 's/^train:$/train:\n  monitor: val_acc/' "$model" >"$tmp/badmap.yaml"
	# shellcheck disable=SC2086
	run_dlrun train "$tmp/badmap.yaml" $base --keep-best -o "$tmp/badmap.st"
	expect_rc 2
	expect_error_line "badmap.yaml:
monitor: unknown value 'val_acc'"
	[ -e "$tmp/badmap.st" ] && fail "an output was written"
	return 0
}
check "the model's train: mapping: keep_best, early_stopping, monitor, log_every" \
	t_train_mapping

# ---- checkpoints: {step}, {epoch}, --keep-checkpoints, resume ----

t_ckpt_names() {
	_d=$tmp/ckn
	mkdir -p "$_d"
	# shellcheck disable=SC2086
	run_dlrun train "$model" $base --epochs 2 --checkpoint "$_d/ck-{epoch}-{step}.st" \
		--checkpoint-every 20 -o "$_d/out.st"
	expect_rc 0 || return 1
	_got=$(cd "$_d" && ls ck-* | tr '\n' ' ')
	[ "$_got" = "ck-1-20.st ck-1-40.st ck-2-60.st ck-2-80.st " ] ||
		fail "checkpoints: $_got"
	# --keep-checkpoints 2: the last two
	rm -f "$_d"/ck-*
	# shellcheck disable=SC2086
	run_dlrun train "$model" $base --epochs 2 --checkpoint "$_d/ck-{step}.st" \
		--checkpoint-every 20 --keep-checkpoints 2 -o "$_d/out.st"
	expect_rc 0 || return 1
	_got=$(cd "$_d" && ls ck-* | tr '\n' ' ')
	[ "$_got" = "ck-60.st ck-80.st " ] || fail "--keep-checkpoints 2 left: $_got"
	# {epoch} alone: one file an epoch, the last one of the epoch's
	rm -f "$_d"/ck-*
	# shellcheck disable=SC2086
	run_dlrun train "$model" $base --epochs 3 --checkpoint "$_d/ck-{epoch}.st" \
		--checkpoint-every 20 --keep-checkpoints 2 -o "$_d/out.st"
	_got=$(cd "$_d" && ls ck-* | tr '\n' ' ')
	[ "$_got" = "ck-2.st ck-3.st " ] || fail "{epoch} with --keep-checkpoints 2 left: $_got"
	return 0
}
check "--checkpoint 'ck-{epoch}-{step}.st', --keep-checkpoints K" t_ckpt_names

# t_resume NAME FLAGS...: a run resumed from a mid-run checkpoint ends
# with the uninterrupted run's bytes and log
t_resume() {
	_d=$tmp/res_$1
	shift
	mkdir -p "$_d"
	# shellcheck disable=SC2086
	run_dlrun train "$model" $base --epochs 8 "$@" --checkpoint "$_d/ck-{step}.st" \
		--checkpoint-every 70 --log "$_d/full.log" -o "$_d/full.st"
	expect_rc 0 || return 1
	[ -f "$_d/ck-210.st" ] || fail "no checkpoint at step 210" || return 1
	cp "$_d/full.log" "$_d/resumed.log"
	# shellcheck disable=SC2086
	run_dlrun train "$model" $base --epochs 8 "$@" --checkpoint "$_d/ck2-{step}.st" \
		--checkpoint-every 70 --resume "$_d/ck-210.st" --log "$_d/resumed.log" \
		-o "$_d/resumed.st"
	expect_rc 0 || return 1
	same_bytes "$_d/full.st" "$_d/resumed.st"
	cmp "$_d/full.log" "$_d/resumed.log" >/dev/null || fail "the logs differ"
	return 0
}
check "resume with --keep-best --early-stopping: the uninterrupted run's bytes" \
	t_resume kb --keep-best --early-stopping 3 --monitor val_accuracy
check "resume with --lr-schedule plateau, --log-every: the uninterrupted run's bytes" \
	t_resume pl --lr-schedule plateau --patience 0 --factor 0.5 --log-every 35

# t_resume_refused FLAG VALUE: resuming with it changed: exit 2 naming it
t_resume_refused() {
	_d=$tmp/ref
	if [ ! -f "$_d/ck-45.st" ]; then
		mkdir -p "$_d"
		# plainly: t_resume_grow continues from its checkpoints and
		# compares the bytes with a plain run
		# shellcheck disable=SC2086
		run_plain train "$model" $base --epochs 2 --checkpoint "$_d/ck-{step}.st" \
			--checkpoint-every 45 -o "$_d/full.st"
		expect_rc 0 || return 1
	fi
	rm -f "$_d/resumed.st"
	# shellcheck disable=SC2086
	run_dlrun train "$model" $base --epochs 2 --resume "$_d/ck-45.st" "$@" \
		-o "$_d/resumed.st"
	expect_rc 2
	expect_error_line "$1
differs from the run that wrote"
	[ -e "$_d/resumed.st" ] && fail "an output was written"
	return 0
}
check "resume with another --lr: refused, naming it" t_resume_refused --lr 0.01
check "resume with another --batch-size: refused" t_resume_refused --batch-size 16
check "resume with another --seed: refused" t_resume_refused --seed 5
check "resume with another --optimizer: refused" t_resume_refused --optimizer sgd
check "resume with another --momentum: refused" t_resume_refused --momentum 0.5
check "resume with another --lr-schedule: refused" t_resume_refused --lr-schedule step
check "resume with --keep-best added: refused" t_resume_refused --keep-best
check "resume with other data: refused" t_resume_refused --val-split 0.5

t_resume_model() {
	_d=$tmp/ref
	sed 's/out_features: 128/out_features: 128 # edited/' "$model" >"$tmp/edited.yaml"
	# shellcheck disable=SC2086
	run_dlrun train "$tmp/edited.yaml" $base --epochs 2 --resume "$_d/ck-45.st" \
		-o "$_d/resumed.st"
	expect_rc 2
	expect_error_line "model file differs"
}
check "resume with another model file: refused" t_resume_model

# --epochs may grow: the run continues as one of the larger length
t_resume_grow() {
	_d=$tmp/ref
	# shellcheck disable=SC2086
	run_plain train "$model" $base --epochs 3 --resume "$_d/ck-90.st" -o "$_d/grown.st"
	expect_rc 0 || return 1
	# shellcheck disable=SC2086
	run_plain train "$model" $base --epochs 3 -o "$_d/three.st"
	same_bytes "$_d/grown.st" "$_d/three.st"
	# but not with cosine, whose length it is
	# shellcheck disable=SC2086
	run_dlrun train "$model" $base --epochs 2 --lr-schedule cosine \
		--checkpoint "$_d/cos.st" --checkpoint-every 45 -o "$_d/cos_out.st"
	# shellcheck disable=SC2086
	run_dlrun train "$model" $base --epochs 3 --lr-schedule cosine --resume "$_d/cos.st" \
		-o "$_d/cos_grown.st"
	expect_rc 2
	expect_error_line "--epochs 3 differs"
}
check "resume with more --epochs: continues (not with cosine)" t_resume_grow

# ---- bad combinations ----

# t_bad_train NEEDLES -- FLAGS: exit 2, one line with the needles, no output
t_bad_train() {
	_needles=
	while [ "$1" != -- ]; do
		_needles="$_needles$1
"
		shift
	done
	shift
	rm -f "$tmp/bad.st"
	run_dlrun train "$@" -o "$tmp/bad.st"
	expect_rc 2
	expect_error_line "$_needles"
	[ -e "$tmp/bad.st" ] && fail "an output was written"
	return 0
}
check "--keep-best without validation data: exit 2" t_bad_train \
	"--keep-best monitors val_loss" "validation" -- "$noval/model.yaml" \
	--data "$noval/x.npy" --labels "$noval/y.npy" --keep-best -q
check "--early-stopping without validation data: exit 2" t_bad_train \
	"--early-stopping" "validation" -- "$noval/model.yaml" \
	--data "$noval/x.npy" --labels "$noval/y.npy" --early-stopping 2 -q
check "--lr-schedule plateau without validation data: exit 2" t_bad_train \
	"plateau" "validation" -- "$noval/model.yaml" \
	--data "$noval/x.npy" --labels "$noval/y.npy" --lr-schedule plateau -q
check "--monitor val_acc: exit 2" t_bad_train "--monitor" "val_acc" -- \
	"$model" $base --keep-best --monitor val_acc
check "--monitor val_accuracy with mse: exit 2" t_bad_train "val_accuracy" "mse" -- \
	"$srcdir/tests/data/train_parity/mse/model.yaml" --data "$srcdir/tests/data/train_parity/mse/x.npy" \
	--labels "$srcdir/tests/data/train_parity/mse/y.npy" --loss mse --val-split 0.25 \
	--keep-best --monitor val_accuracy -q
check "--factor 1: exit 2" t_bad_train "--factor" -- "$model" $base \
	--lr-schedule plateau --factor 1
check "--early-stopping 0: exit 2" t_bad_train "--early-stopping" -- "$model" $base \
	--early-stopping 0
check "--keep-checkpoints without {step}/{epoch}: exit 2" t_bad_train \
	"--keep-checkpoints" "{step}" -- "$model" $base --checkpoint "$tmp/ck.st" \
	--checkpoint-every 5 --keep-checkpoints 2
check "--log-every 0: exit 2" t_bad_train "--log-every" -- "$model" $base --log-every 0
check "--patience without the plateau schedule: exit 2" t_bad_train "--patience" \
	"--early-stopping N" -- "$model" $base --patience 3
check "--monitor without anything monitoring: exit 2" t_bad_train "--monitor" -- \
	"$model" $base --monitor val_accuracy
check "--log-every without --log: exit 2" t_bad_train "--log-every" "--log PATH" -- \
	"$model" $base --log-every 5

done_testing
