#!/bin/sh
# Training on a text corpus (cli.md "Data from files"), printing TAP:
# - the windows dlrun draws for a seed are get_batch's: two epochs on
#   tests/data/text/corpus.txt give the same weights, byte for byte, as one
#   epoch in file order on windows.npz, the windows tools/gen_text_fixtures.py
#   draws with a get_batch reference (and another seed does not); a run
#   resumed from a checkpoint draws the same windows;
# - a character model trains a few epochs (the loss falls), with
#   --val-split and with --val-data;
# - bad input: a character outside the vocabulary (file:line:col and its
#   position), no --context for a symbolic length, --labels, a loss of
#   float targets, a model without a vocab, a text shorter than a window,
#   a vocabulary that is not the logits' size: exit 2, one line, nothing
#   written.
#
# Environment: see tests/lib.sh.

# shellcheck source=tests/lib.sh
. "${srcdir:-$(dirname "$0")/..}/tests/lib.sh"

D=$srcdir/tests/data/text
if [ ! -f "$D/windows.npz" ]; then
	echo "Bail out! no fixtures (make them with tools/gen_text_fixtures.py)"
	exit 1
fi
# training runs are many small steps: valgrind on the first of each kind
valgrind_every 3

t_windows() {
	cd "$tmp" || return 1
	run_dlrun train "$D/char.yaml" --data "$D/corpus.txt" --epochs 2 --batch-size 16 \
		--seed 3 -o text.safetensors -q
	expect_rc 0 || return 1
	run_dlrun train "$D/char.yaml" --data "$D/windows.npz" --no-shuffle --epochs 1 \
		--batch-size 16 --seed 3 -o npz.safetensors -q
	expect_rc 0 || return 1
	cmp -s text.safetensors npz.safetensors ||
		fail "the text's windows are not get_batch's (the weights differ)"
	# the same windows from another seed would not pass: the check bites
	run_dlrun train "$D/char.yaml" --data "$D/corpus.txt" --epochs 2 --batch-size 16 \
		--seed 4 -o other.safetensors -q
	expect_rc 0 || return 1
	cmp -s other.safetensors npz.safetensors &&
		fail "seed 4 gives the weights of seed 3's windows"
	cd - >/dev/null || return 1
}
check "text windows for --seed 3 equal get_batch's (tools/gen_text_fixtures.py)" t_windows

t_resume() {
	cd "$tmp" || return 1
	run_dlrun train "$D/char.yaml" --data "$D/corpus.txt" --epochs 2 --batch-size 16 \
		--seed 3 --checkpoint ck.safetensors --checkpoint-every 3 -o r.safetensors -q
	expect_rc 0 || return 1
	# the last checkpoint is step 6 of 8, in the second epoch
	run_dlrun train "$D/char.yaml" --data "$D/corpus.txt" --epochs 2 --batch-size 16 \
		--seed 3 --resume ck.safetensors -o resumed.safetensors -q
	expect_rc 0 || return 1
	cmp -s r.safetensors text.safetensors ||
		fail "a checkpointed run ends otherwise than a plain one"
	cmp -s resumed.safetensors text.safetensors ||
		fail "a run resumed at step 6 ends otherwise than an uninterrupted one"
	cd - >/dev/null || return 1
}
check "a text run resumed from a checkpoint ends as an uninterrupted one" t_resume

# first_last LOG KEY: the first and the last value of KEY in a JSON-lines log
first_last() {
	sed -n "s/.*\"$2\":\([^,}]*\).*/\1/p" "$1" | sed -n '1p;$p' | tr '\n' ' '
}

t_trains() {
	cd "$tmp" || return 1
	run_dlrun train "$D/char.yaml" --data "$D/corpus.txt" --epochs 6 --batch-size 8 \
		--lr 0.02 --val-split 0.2 --log run.jsonl -o c.safetensors -q
	cd - >/dev/null || return 1
	expect_rc 0 || return 1
	[ "$(wc -l <"$tmp/run.jsonl")" -eq 6 ] || fail "the log has not 6 epochs"
	# shellcheck disable=SC2046
	set -- $(first_last "$tmp/run.jsonl" loss) $(first_last "$tmp/run.jsonl" val_loss)
	[ $# -eq 4 ] || fail "no loss and val_loss in the log"
	awk -v a="$1" -v b="$2" -v c="$3" -v d="$4" \
		'BEGIN { exit !(b < a * 0.9 && d < c) }' ||
		fail "the loss did not fall: loss $1 -> $2, val_loss $3 -> $4"
}
check "a character model trains on a text (--val-split)" t_trains

t_val_data() {
	head -n 4 "$D/corpus.txt" >"$tmp/val.txt"
	cd "$tmp" || return 1
	run_dlrun train "$D/char.yaml" --data "$D/corpus.txt" --val-data val.txt \
		--epochs 1 --batch-size 16 --context 6 --log v.jsonl -o v.safetensors -q
	cd - >/dev/null || return 1
	expect_rc 0 || return 1
	grep -q '"val_loss":' "$tmp/v.jsonl" || fail "no val_loss in the log"
}
check "--val-data takes a text, --context a shorter window" t_val_data

# bad_text NEEDLE... -- ARGS: dlrun train ARGS -o out.safetensors in an
# empty directory exits 2 with one error line holding each NEEDLE and
# writes nothing
bad_text() {
	_bt_n=
	while [ "$1" != -- ]; do
		_bt_n="$_bt_n$1
"
		shift
	done
	shift
	rm -rf "$tmp/out"
	mkdir "$tmp/out"
	cd "$tmp/out" || return 1
	run_dlrun train "$@" -o out.safetensors -q
	cd - >/dev/null || return 1
	expect_rc 2
	expect_error_line "$_bt_n"
	only_files "$tmp/out"
}

t_uncovered() {
	printf 'the rat.\nthe ant, the cat\n' >"$tmp/bad.txt"
	bad_text "$tmp/bad.txt:2:8: character ',' (U+002C) at position 16" \
		"is not in the vocabulary of $D/char.yaml" -- \
		"$D/char.yaml" --data "$tmp/bad.txt" --context 2
}
check "a character outside the vocabulary: file:line:col and position" t_uncovered

cat >"$tmp/sym.yaml" <<'EOF'
inputs: {idx: {shape: [T], dtype: int}}
vocab: ["\n", " ", ".", a, e, h, i, n, o, r, s, t, "é", th]
layers:
  - embedding: {num_embeddings: 14, embedding_dim: 4}
  - linear: {out_features: 14}
EOF
t_no_context() {
	bad_text "give --context T" "'idx' has a symbolic length" -- \
		"$tmp/sym.yaml" --data "$D/corpus.txt"
}
check "a symbolic length without max_len needs --context" t_no_context

t_labels() {
	bad_text "its own labels" "--labels does not go with it" -- \
		"$D/char.yaml" --data "$D/corpus.txt" --labels "$D/corpus.txt"
}
check "--labels with a text corpus" t_labels

t_mse() {
	bad_text "--loss mse takes float targets" -- \
		"$D/char.yaml" --data "$D/corpus.txt" --loss mse
}
check "a loss of float targets on a text corpus" t_mse

t_no_vocab() {
	sed '/^vocab:/d' "$tmp/sym.yaml" >"$tmp/novocab.yaml"
	bad_text "corpus.txt: UTF-8 text, but the model has no vocab:" -- \
		"$tmp/novocab.yaml" --data "$D/corpus.txt" --context 4
}
check "a text for a model without a vocab" t_no_vocab

t_short() {
	printf 'the' >"$tmp/short.txt"
	bad_text "short.txt: 2 tokens; a corpus needs at least 9" -- \
		"$D/char.yaml" --data "$tmp/short.txt"
}
check "a text shorter than a window" t_short

t_vocab_size() {
	sed 's/out_features: 14/out_features: 15/' "$tmp/sym.yaml" >"$tmp/v15.yaml"
	bad_text "v15.yaml:2:8: vocab: 14 tokens, but the logits" "have 15" -- \
		"$tmp/v15.yaml" --data "$D/corpus.txt" --context 4
}
check "a vocabulary of another size than the logits (symbolic length)" t_vocab_size

t_val_split() {
	bad_text "--val-split 0.99 of 519 tokens leaves 5 for training" -- \
		"$D/char.yaml" --data "$D/corpus.txt" --val-split 0.99
}
check "--val-split that leaves no window" t_val_split

done_testing
