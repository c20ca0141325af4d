#!/bin/sh
# The loader's model-format features against PyTorch (fixtures made by
# tools/gen_share_parity.py under tests/data/loader and
# tests/data/train_parity/{gpt_tied,shared_repeat}), printing TAP:
# - tied parameters (share:): a state_dict with both tied keys loads and
#   gives PyTorch's output; unequal copies fail naming both keys; files
#   dlrun writes (init, train -o, checkpoints) hold the tensor once; summary
#   counts it once;
# - shared repeats: the keys of copies 1 and up are unexpected (PyTorch's
#   state_dict with every copy's keys loads with --ignore-extra); the use:
#   form equals the body form;
# - digit names and `_` in in: lists, against PyTorch;
# - weights errors list every missing and unexpected key at once; nanoGPT's
#   attn.bias buffers fail, and pass with ignore_keys: or --ignore-extra
#   (counted in one stderr line), on every verb that reads weights.
# (The training parity of the tied and shared models runs in tests/train.sh;
# the bad models of these features in tests/bad_inputs.sh.)
#
# Environment: see tests/lib.sh; NPYCMP (tests/npycmp) is needed.

# shellcheck source=tests/lib.sh
. "${srcdir:-$(dirname "$0")/..}/tests/lib.sh"

L=$srcdir/tests/data/loader
P=$srcdir/tests/data/train_parity
NPYCMP=${NPYCMP:-./tests/npycmp}
if [ ! -x "$NPYCMP" ]; then
	echo "Bail out! NPYCMP=$NPYCMP is not an executable"
	exit 1
fi
if [ ! -f "$L/keys.yaml" ] || [ ! -f "$P/gpt_tied/model.yaml" ]; then
	echo "Bail out! no fixtures (make them with tools/gen_share_parity.py)"
	exit 1
fi

# same_npy GOT EXPECTED: within 1e-5 relative
same_npy() {
	if ! "$NPYCMP" "$1" "$2" 1e-5 >"$tmp/cmp" 2>&1; then
		fail "output differs from PyTorch's:"
		sed 's/^/  /' "$tmp/cmp" >>"$tmp/diag"
		return 1
	fi
}

# keys_of FILE: the tensor names of a safetensors file, one a line, sorted
keys_of() {
	_hl=$(od -An -tu4 -N4 "$1" | tr -d ' ')
	# shellcheck disable=SC2020 # two characters to newlines, on purpose
	tail -c +9 "$1" | head -c "$_hl" | tr ',{' '\n\n' |
		sed -n 's/^"\([^"]*\)":$/\1/p' | grep -v '^__metadata__$' | sort
}

# infer_ok MODEL WEIGHTS INPUT EXPECTED [FLAGS...]
infer_ok() {
	_m=$1 _w=$2 _x=$3 _e=$4
	shift 4
	run_dlrun infer "$_m" -w "$_w" "$@" <"$_x"
	expect_rc 0 || return 1
	cp "$tmp/stdout" "$tmp/got.npy"
	same_npy "$tmp/got.npy" "$_e"
}

# infer_bad MODEL WEIGHTS INPUT NEEDLE...: exit 2, one error line holding
# every NEEDLE
infer_bad() {
	_m=$1 _w=$2 _x=$3
	shift 3
	run_dlrun infer "$_m" -w "$_w" <"$_x"
	expect_rc 2 || return 1
	expect_one_error_line || return 1
	for _n in "$@"; do
		grep -F -e "$_n" "$tmp/stderr" >/dev/null ||
			fail "the error line does not contain '$_n'"
	done
	[ -s "$tmp/stdout" ] && fail "stdout is not empty"
	return 0
}

# ---- share: ----

gpt=$P/gpt_tied/model.yaml
check "share: the file holds wte.weight alone (PyTorch's output)" \
	infer_ok "$gpt" "$P/gpt_tied/init.safetensors" "$P/gpt_tied/probe.npy" \
	"$L/gpt_tied_probe_init.npy"
check "share: PyTorch's state_dict with both tied keys loads" \
	infer_ok "$gpt" "$L/gpt_tied_both.safetensors" "$P/gpt_tied/probe.npy" \
	"$L/gpt_tied_probe_init.npy"
check "share, parameter: batch 1 (--batch-size 1) gives the same output" \
	infer_ok "$gpt" "$P/gpt_tied/init.safetensors" "$P/gpt_tied/probe.npy" \
	"$L/gpt_tied_probe_init.npy" --batch-size 1
check "share: unequal tied copies fail naming both keys" \
	infer_bad "$gpt" "$L/gpt_tied_unequal.safetensors" "$P/gpt_tied/probe.npy" \
	"gpt_tied_unequal.safetensors" "'wte.weight'" "'lm_head.weight'" "differ"

t_written_once() {
	run_dlrun init "$gpt" -o "$tmp/init.safetensors" --seed 3
	expect_rc 0 || return 1
	keys_of "$tmp/init.safetensors" >"$tmp/keys"
	grep -x 'wte.weight' "$tmp/keys" >/dev/null || fail "init: no wte.weight"
	grep -x 'lm_head.weight' "$tmp/keys" >/dev/null &&
		fail "init wrote the tied lm_head.weight"
	grep -x 'pos' "$tmp/keys" >/dev/null || fail "init: no 'pos' (parameter)"
	run_dlrun train "$gpt" -w "$tmp/init.safetensors" \
		--data "$P/gpt_tied/x.npy" --labels "$P/gpt_tied/y.npy" --epochs 2 \
		--batch-size 3 --checkpoint "$tmp/ck.safetensors" \
		--checkpoint-every 1 -o "$tmp/out.safetensors" -q
	expect_rc 0 || return 1
	for f in ck out; do
		keys_of "$tmp/$f.safetensors" >"$tmp/keys"
		grep -x 'wte.weight' "$tmp/keys" >/dev/null || fail "$f: no wte.weight"
		grep -x 'lm_head.weight' "$tmp/keys" >/dev/null &&
			fail "$f wrote the tied lm_head.weight"
	done
	# a resumed run reads its own checkpoint back
	run_dlrun train "$gpt" -w "$tmp/init.safetensors" \
		--data "$P/gpt_tied/x.npy" --labels "$P/gpt_tied/y.npy" --epochs 2 \
		--batch-size 3 --resume "$tmp/ck.safetensors" \
		-o "$tmp/out2.safetensors" -q
	expect_rc 0 || return 1
	cmp -s "$tmp/out.safetensors" "$tmp/out2.safetensors" ||
		fail "the resumed run ends with other bytes"
	return 0
}
check "share: init, train -o and checkpoints hold the tied tensor once" \
	t_written_once

t_summary_once() {
	run_dlrun summary "$gpt" --json
	expect_rc 0 || return 1
	# wte 13*8 + pos 5*8 + block 16 + 144 + 136 + ln_f 16; lm_head adds none
	grep -F '"params": 456' "$tmp/stdout" >/dev/null ||
		grep -F '"params":456' "$tmp/stdout" >/dev/null ||
		fail "summary does not count 456 parameters: $(cat "$tmp/stdout")"
}
check "share: summary counts the tied tensor once" t_summary_once

# ---- shared repeat ----

rep=$P/shared_repeat
t_repeat_full() {
	run_dlrun infer "$rep/model.yaml" -w "$rep/init.safetensors" <"$rep/probe.npy"
	expect_rc 0 || return 1
	cp "$tmp/stdout" "$tmp/a.npy"
	# copies 1 and 2 have no keys of their own (model-format: the keys of
	# copy 0): PyTorch's state_dict with every copy's keys is refused,
	# naming them, and loads with --ignore-extra
	run_dlrun infer "$rep/model.yaml" -w "$L/shared_repeat_full.safetensors" \
		<"$rep/probe.npy"
	expect_rc 2 || return 1
	expect_one_error_line
	expect_stderr_has "4 unexpected keys ('1.1.0.0.bias', '1.1.0.0.weight', '1.2.0.0.bias', '1.2.0.0.weight')"
	[ -s "$tmp/stdout" ] && fail "output written"
	run_dlrun infer "$rep/model.yaml" -w "$L/shared_repeat_full.safetensors" \
		--ignore-extra <"$rep/probe.npy"
	expect_rc 0 || return 1
	cp "$tmp/stdout" "$tmp/b.npy"
	same_npy "$tmp/b.npy" "$tmp/a.npy"
}
check "repeat shared: copy 1's keys are unexpected (PyTorch's whole state_dict loads with --ignore-extra)" \
	t_repeat_full

t_repeat_use() {
	cat >"$tmp/use.yaml" <<'EOF'
inputs:
  x: {shape: [6]}
blocks:
  blk:
    - residual:
        - linear: {out_features: 8}
        - tanh
layers:
  - linear: {out_features: 8}
  - repeat: {times: 3, shared: true, use: blk}
  - linear: {out_features: 4}
EOF
	run_dlrun infer "$rep/model.yaml" -w "$rep/init.safetensors" <"$rep/probe.npy"
	expect_rc 0 || return 1
	cp "$tmp/stdout" "$tmp/a.npy"
	run_dlrun infer "$tmp/use.yaml" -w "$rep/init.safetensors" <"$rep/probe.npy"
	expect_rc 0 || return 1
	cp "$tmp/stdout" "$tmp/b.npy"
	same_npy "$tmp/b.npy" "$tmp/a.npy"
}
check "repeat shared: the use: form equals the body form" t_repeat_use

t_repeat_draw() {
	run_dlrun draw "$rep/model.yaml" -o "$tmp/r.svg"
	expect_rc 0 || return 1
	grep -F '×3, shared' "$tmp/r.svg" >/dev/null ||
		fail "the frame is not labelled '×3, shared'"
}
check "repeat shared: drawn as one frame 'x3, shared'" t_repeat_draw

# ---- names and `_` ----

check "digit names: PyTorch's index keys (layers.0, layers.3, 4)" \
	infer_ok "$L/digits.yaml" "$L/digits.safetensors" "$L/digits_x.npy" \
	"$L/digits_y.npy"
# a name is a PyTorch key segment: letters, digits, '_' and '-' in any
# order (a module named 1x1 is PyTorch's '1x1.weight'); dots are not
t_name_digit_first() {
	printf 'inputs:\n  x: {shape: [4]}\nlayers:\n  - name: 1x1\n    linear: {out_features: 2}\n' \
		>"$tmp/n.yaml"
	run_dlrun init "$tmp/n.yaml" -o "$tmp/n.safetensors"
	expect_rc 0 || return 1
	grep -F '"1x1.weight"' "$tmp/n.safetensors" >/dev/null ||
		fail "no key 1x1.weight in the written file"
	printf 'inputs:\n  x: {shape: [4]}\nlayers:\n  - name: a.b\n    relu: {}\n' >"$tmp/n.yaml"
	run_dlrun init "$tmp/n.yaml" -o "$tmp/n.safetensors"
	expect_rc 2
	expect_error_line "n.yaml:4:11: name must be"
}
check "names may start with a digit (1x1), not hold a dot" t_name_digit_first
check "_ in in: lists: the default input, against PyTorch" \
	infer_ok "$L/underscore.yaml" "$L/underscore.safetensors" \
	"$L/underscore_x.npy" "$L/underscore_y.npy"

# ---- weights errors and ignored keys ----

check "3 missing and 2 unexpected keys are listed at once" \
	infer_bad "$L/keys.yaml" "$L/keys.safetensors" "$L/underscore_x.npy" \
	"keys.safetensors" "3 missing keys" "'b.bias'" "'c.weight'" "'c.bias'" \
	"2 unexpected keys" "'b.bais'" "'d.weight'"

t_summary_table() {
	run_dlrun summary "$L/keys.yaml" -w "$L/keys.safetensors"
	expect_rc 2 || return 1
	expect_one_error_line || return 1
	grep -F "5 key problems" "$tmp/stdout" >/dev/null ||
		fail "no table of the 5 problems on stdout"
	for k in b.bias c.weight c.bias; do
		grep -E "^$k +missing +- +\[4\]" "$tmp/stdout" >/dev/null ||
			fail "no 'missing' row for $k"
	done
	grep -E '^d.weight +unexpected +\[2, 2\]' "$tmp/stdout" >/dev/null ||
		fail "no 'unexpected' row for d.weight"
	grep -E '^b.bais +unexpected' "$tmp/stdout" >/dev/null ||
		fail "no 'unexpected' row for b.bais"
	return 0
}
check "summary -w lists the key problems as a table" t_summary_table

check "nanoGPT's attn.bias buffers are refused by default" \
	infer_bad "$L/nanogpt.yaml" "$L/nanogpt.safetensors" "$L/nanogpt_x.npy" \
	"2 unexpected keys" "'h.0.attn.bias'" "'h.1.attn.bias'"

# ignored_ok VERB ARGS...: exit 0 and one stderr line counting 2 ignored keys
ignored_ok() {
	run_dlrun "$@" <"$L/nanogpt_x.npy"
	expect_rc 0 || return 1
	grep -F "ignored 2 keys of" "$tmp/stderr" >/dev/null ||
		fail "stderr does not count the 2 ignored keys"
	[ "$(grep -c 'dlrun: ' "$tmp/stderr")" -eq 1 ] ||
		fail "expected one 'dlrun: ' line on stderr"
	return 0
}

t_ignore_keys() {
	ignored_ok infer "$L/nanogpt_ignore.yaml" -w "$L/nanogpt.safetensors" ||
		return 1
	cp "$tmp/stdout" "$tmp/got.npy"
	same_npy "$tmp/got.npy" "$L/nanogpt_y.npy"
}
check "ignore_keys: ['h.*.attn.bias'] loads nanoGPT's keys" t_ignore_keys

t_ignore_extra() {
	ignored_ok infer "$L/nanogpt.yaml" -w "$L/nanogpt.safetensors" \
		--ignore-extra || return 1
	cp "$tmp/stdout" "$tmp/got.npy"
	same_npy "$tmp/got.npy" "$L/nanogpt_y.npy"
}
check "infer --ignore-extra loads nanoGPT's keys" t_ignore_extra

w=$L/nanogpt.safetensors
check "summary -w --ignore-extra" ignored_ok summary "$L/nanogpt.yaml" -w "$w" \
	--ignore-extra
check "gradcheck -w --ignore-extra" ignored_ok gradcheck "$L/nanogpt.yaml" \
	-w "$w" --ignore-extra
check "bench -w --ignore-extra" ignored_ok bench "$L/nanogpt.yaml" -w "$w" \
	--ignore-extra -k 2
t_train_ignore() {
	cat >"$tmp/tr.yaml" <<'EOF'
ignore_keys: ['*.attn.bias']
inputs:
  x: {shape: [4, 8]}
layers:
  - name: h
    sequential:
      - name: "0"
        sequential:
          - name: attn
            sequential:
              - name: c_proj
                linear: {out_features: 8}
EOF
	run_dlrun summary "$tmp/tr.yaml" -w "$w"
	expect_rc 2 || return 1
	grep -F "h.1.attn.c_proj.weight" "$tmp/stderr" >/dev/null ||
		fail "h.1's keys are not reported as unexpected"
	ignored_ok train "$L/nanogpt.yaml" -w "$w" --ignore-extra \
		--data "$L/nanogpt_x.npy" --labels "$L/nanogpt_x.npy" --loss mse \
		--epochs 1 -o "$tmp/t.safetensors" -q
}
check "train -w --ignore-extra; ignore_keys: names only what it matches" \
	t_train_ignore
# cli.md: the train: mapping gives defaults under the long option names
# with underscores: ignore_extra (and threads, max_memory, sync_batch_norm)
t_train_mapping_ignore() {
	cp "$L/nanogpt.yaml" "$tmp/tm.yaml"
	printf 'train: {ignore_extra: true, threads: 1, max_memory: 1G, sync_batch_norm: false}\n' \
		>>"$tmp/tm.yaml"
	ignored_ok train "$tmp/tm.yaml" -w "$w" \
		--data "$L/nanogpt_x.npy" --labels "$L/nanogpt_x.npy" --loss mse \
		--epochs 1 -o "$tmp/t.safetensors" -q
}
check "train: {ignore_extra: true, threads: 1, max_memory: 1G, ...}" \
	t_train_mapping_ignore

done_testing
