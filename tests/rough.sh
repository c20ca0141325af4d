#!/bin/sh
# Rough edges of issue 9: an out-of-range token id is an error naming the
# entry, the id and the vocabulary size (exit 1); --log numbers are written
# with the shortest representation that reads back to the same double;
# gradcheck passes on the U-Net, a GCN whose adjacency is an input, and an
# embedding with padding_idx (its row skipped and said so). Prints TAP.
#
# Environment: see tests/lib.sh.

# shellcheck source=tests/lib.sh
. "${srcdir:-$(dirname "$0")/..}/tests/lib.sh"

data=$srcdir/tests/data/rough

t_bad_id() {
	run_dlrun init "$data/embedding.yaml" -o "$tmp/emb.safetensors" --force
	expect_rc 0
	echo "1 2 7" >"$tmp/ids.txt"
	run_dlrun infer "$data/embedding.yaml" -w "$tmp/emb.safetensors" \
		--format text -i "$tmp/ids.txt"
	expect_rc 1
	expect_stderr_has "embedding 'tok': token id 7 of input 'ids' is out of range for its vocabulary of 5"
	expect_stderr_has "embedding.yaml:6:5:"
	echo "1 2 4" >"$tmp/ids.txt"
	run_dlrun infer "$data/embedding.yaml" -w "$tmp/emb.safetensors" \
		--format text -i "$tmp/ids.txt"
	expect_rc 0
}
check "infer: a token id past num_embeddings is an error naming the entry, id and size" t_bad_id

t_log_shortest() {
	run_dlrun train "$srcdir/models/digits-mlp.yaml" \
		--data "$srcdir/models/data/digits.npz" --epochs 1 --lr 0.003 \
		-o "$tmp/w.safetensors" --log "$tmp/log.jsonl"
	expect_rc 0
	grep -F '"lr":0.003' "$tmp/log.jsonl" >/dev/null ||
		fail "lr not written as 0.003: $(head -n 1 "$tmp/log.jsonl")"
	if grep -E '[0-9]\.[0-9]{17}' "$tmp/log.jsonl" >/dev/null; then
		fail "a number with 17 digits: $(head -n 1 "$tmp/log.jsonl")"
	fi
}
check "train --log: lr 0.003 written as 0.003" t_log_shortest

# gradcheck runs the model hundreds of times: valgrind would take most of
# CI's time for it, so it runs plain here (the sanitizer run covers it)
gc_ok() {
	_keep=$DLRUN_VALGRIND
	DLRUN_VALGRIND=no
	run_dlrun gradcheck "$@"
	DLRUN_VALGRIND=$_keep
	expect_rc 0
}
check "gradcheck: the U-Net (relu kinks found per element)" gc_ok "$srcdir/models/unet-small.yaml"
check "gradcheck: a GCN with its adjacency as an input" gc_ok \
	"$srcdir/tests/data/gradcheck/rough_gcn_adjacency.yaml"
t_gc_pad() {
	gc_ok "$srcdir/tests/data/gradcheck/rough_embedding_padding.yaml"
	expect_stdout_has "row 2 has no gradient by design, skipped"
}
check "gradcheck: embedding's padding_idx row skipped and said so" t_gc_pad

done_testing
exit 0
