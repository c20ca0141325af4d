#!/bin/sh
# dlrun generate and the step function: every stepped position's logits
# equal the last row of a full forward (tests/step_test.c, through the
# library, on GPT, transformer layers with sparse patterns, Primer, the
# recurrent layers and an encoder-decoder); greedy ids equal PyTorch's
# (tools/gen_generate_fixtures.py); a batch of prompts decodes as each
# prompt alone; sampling is seeded; beams; the bad inputs of the contract;
# Ctrl-C. Prints TAP.
#
# Environment: see tests/lib.sh; STEP_TEST (tests/step_test).

# shellcheck source=tests/lib.sh
. "${srcdir:-$(dirname "$0")/..}/tests/lib.sh"

: "${STEP_TEST:=./tests/step_test}"
: "${SAMPLE:=./examples/sample}"
case $STEP_TEST in /*) ;; *) STEP_TEST=$(pwd)/$STEP_TEST ;; esac
case $SAMPLE in /*) ;; *) SAMPLE=$(pwd)/$SAMPLE ;; esac
g=$srcdir/tests/data/generate

# weights for the models that have none committed (dlrun init)
for m in char-gpt sinusoid-encoder primer rnn-lm seq2seq bad-noncausal bad-bilstm \
	bad-mean bad-vocab; do
	"$DLRUN" init "$g/$m.yaml" -o "$tmp/$m.safetensors" --seed 5 >/dev/null 2>&1 ||
		echo "Bail out! dlrun init $m failed"
done

run_step() {
	if [ "$DLRUN_VALGRIND" = yes ]; then
		valgrind --error-exitcode=99 --leak-check=full \
			--errors-for-leak-kinds=definite --show-leak-kinds=definite -q \
			"$STEP_TEST" "$@" >"$tmp/stdout" 2>"$tmp/stderr"
	else
		"$STEP_TEST" "$@" >"$tmp/stdout" 2>"$tmp/stderr"
	fi
	rc=$?
}

# step_same MODEL VOCAB STEPS ROWS [MAXLEN]
step_same() {
	run_step "$g/$1.yaml" "$tmp/$1.safetensors" "$2" "$3" "$4" ${5:+"$5"}
	expect_rc 0
	expect_stdout_has "worst relative difference"
}
t_step_gpt() { step_same char-gpt 16 20 3 32; }
check "stepped logits = full forward: GPT, learned positions, 3 sequences, one restarted" t_step_gpt
t_step_enc() { step_same sinusoid-encoder 11 18 3; }
check "stepped logits = full forward: encoder layers (window), attention (stride), relative keys and values, fixed + global" t_step_enc
t_step_primer() { step_same primer 9 16 2 40; }
check "stepped logits = full forward: Primer's dconv attention" t_step_primer
t_step_rnn() { step_same rnn-lm 13 16 3; }
check "stepped logits = full forward: lstm (2 layers), gru (both resets), rnn" t_step_rnn
t_step_s2s() { step_same seq2seq 10 10 2; }
check "stepped logits = full forward: attention_decoder (lstm) and decoder cross attention on a GRU memory" t_step_s2s

# greedy ids against PyTorch: lines "PROMPT [| SOURCE] || NEW"
torch_same() {
	while IFS= read -r line; do
		case $line in *' | '*) prompt=${line%% | *}; rest=${line#* | }; src=${rest%% || *} ;;
		*) prompt=${line%% || *}; src= ;; esac
		want=${line#* || }
		n=$(echo "$want" | wc -w)
		if [ -n "$src" ]; then
			run_dlrun generate "$g/$1.yaml" --prompt-ids "$prompt" --source "$src" -n "$n" --greedy
		else
			run_dlrun generate "$g/$1.yaml" --prompt-ids "$prompt" -n "$n" --greedy
		fi
		expect_rc 0
		got=$(cat "$tmp/stdout")
		[ "$got" = "$want" ] || fail "prompt '$prompt': got '$got', PyTorch '$want'"
	done <"$g/$1.expected"
}
t_torch_gpt() { torch_same gpt-torch; }
check "greedy ids = PyTorch's: nanoGPT-style GPT, context cropped at its block of 12" t_torch_gpt
t_torch_lstm() { torch_same lstm-torch; }
check "greedy ids = PyTorch's: LSTM language model" t_torch_lstm
t_torch_s2s() { torch_same bahdanau-torch; }
check "greedy ids = PyTorch's: Bahdanau encoder-decoder, --source ids" t_torch_s2s

t_batch() {
	printf '2 3 4\n5\n1 9 9 3 7 0\n' >"$tmp/prompts"
	run_dlrun generate "$g/gpt-torch.yaml" --prompt-format ids -n 20 --greedy <"$tmp/prompts"
	expect_rc 0
	sed 's/.* || //' "$g/gpt-torch.expected" >"$tmp/want"
	cmp -s "$tmp/stdout" "$tmp/want" || fail "a batch of 3 prompts of different lengths decodes otherwise than each alone"
}
check "a batch of prompts of different lengths (stdin) = each prompt alone" t_batch

t_text() {
	run_dlrun generate "$g/char-gpt.yaml" -w "$tmp/char-gpt.safetensors" --prompt "abc" -n 12 --greedy
	expect_rc 0
	[ "$(wc -c <"$tmp/stdout")" -ge 2 ] || fail "no text"
	run_dlrun generate "$g/char-gpt.yaml" -w "$tmp/char-gpt.safetensors" --prompt "abc" -n 12 --greedy --format jsonl
	expect_rc 0
	expect_stdout_has '"prompt_ids":[2,3,4],"ids":['
	expect_stdout_has '"stop":"length"}'
	expect_stdout_has '"logprobs":['
}
check "text in and out through the vocab; --format jsonl" t_text

t_seed() {
	run_plain generate "$g/char-gpt.yaml" -w "$tmp/char-gpt.safetensors" --prompt "ab" -n 30 \
		--temperature 1.5 --top-k 8 --seed 7 --format ids --threads 1
	cp "$tmp/stdout" "$tmp/a"
	run_plain generate "$g/char-gpt.yaml" -w "$tmp/char-gpt.safetensors" --prompt "ab" -n 30 \
		--temperature 1.5 --top-k 8 --seed 7 --format ids --threads 2
	cmp -s "$tmp/a" "$tmp/stdout" || fail "the same seed gave other tokens at 2 threads"
	run_plain generate "$g/char-gpt.yaml" -w "$tmp/char-gpt.safetensors" --prompt "ab" -n 30 \
		--temperature 1.5 --top-k 8 --seed 8 --format ids --threads 1
	cmp -s "$tmp/a" "$tmp/stdout" && fail "seeds 7 and 8 gave the same 30 tokens"
	run_plain generate "$g/char-gpt.yaml" -w "$tmp/char-gpt.safetensors" --prompt "ab" -n 30 --greedy --format ids
	cp "$tmp/stdout" "$tmp/greedy"
	run_plain generate "$g/char-gpt.yaml" -w "$tmp/char-gpt.safetensors" --prompt "ab" -n 30 --top-k 1 --seed 3 --format ids
	cmp -s "$tmp/greedy" "$tmp/stdout" || fail "--top-k 1 is not greedy"
	run_plain generate "$g/char-gpt.yaml" -w "$tmp/char-gpt.safetensors" --prompt "ab" -n 30 --top-p 0.000001 --seed 3 --format ids
	cmp -s "$tmp/greedy" "$tmp/stdout" || fail "--top-p 1e-6 is not greedy"
	return 0
}
check "sampling: the same --seed gives the same tokens at 1 and 2 threads; top-k 1 and a tiny top-p are greedy" t_seed

t_beams() {
	run_dlrun generate "$g/gpt-torch.yaml" --prompt-ids "2 3 4" -n 6 --beams 3 --format jsonl
	expect_rc 0
	expect_stdout_has '"ids":['
	run_dlrun generate "$g/gpt-torch.yaml" --prompt-ids "2 3 4" -n 1 --beams 4 --format ids
	expect_rc 0
	[ "$(cat "$tmp/stdout")" = 13 ] || fail "one step of beam search is not the greedy token: $(cat "$tmp/stdout")"
	# with length_penalty 0 the best beam's log-probability is at least greedy's
	run_plain generate "$g/gpt-torch.yaml" --prompt-ids "2 3 4" -n 8 --greedy --format jsonl
	greedy=$(sed 's/.*"logprobs":\[\([^]]*\)\].*/\1/' "$tmp/stdout" | tr ',' '\n' | awk '{s+=$1} END {printf "%.6f", s}')
	run_plain generate "$g/gpt-torch.yaml" --prompt-ids "2 3 4" -n 8 --beams 4 --length-penalty 0 --format jsonl
	beam=$(sed 's/.*"logprobs":\[\([^]]*\)\].*/\1/' "$tmp/stdout" | tr ',' '\n' | awk '{s+=$1} END {printf "%.6f", s}')
	awk -v b="$beam" -v g="$greedy" 'BEGIN {exit !(b >= g - 1e-5)}' ||
		fail "beam search's best ($beam) is below greedy's ($greedy)"
}
check "--beams: one step is greedy; the best of 4 beams scores at least the greedy sequence" t_beams

t_stop() {
	run_dlrun generate "$g/gpt-torch.yaml" --prompt-ids "2 3 4" -n 20 --greedy --stop 15 --format jsonl
	expect_rc 0
	expect_stdout_has '"ids":[13,1,7,13,1],'
	expect_stdout_has '"stop":"stop"'
}
check "--stop ID ends decoding before that token" t_stop

t_verbose() {
	run_dlrun generate "$g/gpt-torch.yaml" --prompt-ids "2 3 4" -n 5 --greedy --verbose
	expect_rc 0
	expect_stderr_has "new tokens/s)"
	expect_stderr_has "prompt tokens/s"
}
check "--verbose reports tokens per second on stderr" t_verbose

# bad input: exit 2, one line naming the thing
bad() {
	run_dlrun generate "$@"
	expect_rc 2
	expect_one_error_line
}
t_bad_char() { bad "$g/char-gpt.yaml" -w "$tmp/char-gpt.safetensors" --prompt "abz"; expect_stderr_has "character 'z'"; }
check "a prompt character outside the vocabulary: exit 2 naming it" t_bad_char
t_bad_id() { bad "$g/char-gpt.yaml" -w "$tmp/char-gpt.safetensors" --prompt-ids "1 16"; expect_stderr_has "token id 16"; }
check "an id outside the vocabulary: exit 2" t_bad_id
t_bad_vocab() { bad "$g/bad-vocab.yaml" -w "$tmp/bad-vocab.safetensors" --prompt "ab"; expect_stderr_has "vocab"; }
check "a vocab whose size is not the logits' last dimension: exit 2" t_bad_vocab
t_bad_noncausal() { bad "$g/bad-noncausal.yaml" -w "$tmp/bad-noncausal.safetensors" --prompt-ids 1; expect_stderr_has "causal"; }
check "a non-causal attention over the tokens: exit 2 naming the entry" t_bad_noncausal
t_bad_bilstm() { bad "$g/bad-bilstm.yaml" -w "$tmp/bad-bilstm.safetensors" --prompt-ids 1; expect_stderr_has "bidirectional"; }
check "a bidirectional lstm: exit 2 naming the entry" t_bad_bilstm
t_bad_mean() { bad "$g/bad-mean.yaml" -w "$tmp/bad-mean.safetensors" --prompt-ids 1; expect_stderr_has "'avg'"; }
check "a mean over the tokens: exit 2 naming the entry" t_bad_mean
t_bad_fixed() { bad "$srcdir/models/zoo/gpt.yaml" --prompt-ids 1; expect_stderr_has "symbolic length"; }
check "a model without a symbolic token input: exit 2" t_bad_fixed
t_bad_topp() { bad "$g/gpt-torch.yaml" --prompt-ids 1 --top-p 1.5; expect_stderr_has "--top-p"; }
check "--top-p outside (0, 1]: exit 2" t_bad_topp
t_bad_beams() { bad "$g/gpt-torch.yaml" --prompt-ids 1 --beams 0; expect_stderr_has "--beams"; }
check "--beams 0: exit 2" t_bad_beams
t_bad_context() { bad "$g/gpt-torch.yaml" --prompt-ids 1 --context 13; expect_stderr_has "max_len"; }
check "--context past the learned positions: exit 2" t_bad_context

t_lib_ids() {
	run_step --bad-ids "$g/char-gpt.yaml" "$tmp/char-gpt.safetensors"
	expect_rc 0
	n=$(grep -c '^ok' "$tmp/stdout")
	[ "$n" = 8 ] || fail "$n of 8 refusals"
}
check "the library refuses ids 99, -1, 3.5 and NaN in dlrun_run and dlrun_train_step" t_lib_ids

t_example() {
	"$SAMPLE" "$g/gpt-torch.yaml" "2 3 4" 9 >"$tmp/stdout" 2>"$tmp/stderr"
	rc=$?
	expect_rc 0
	[ "$(wc -w <"$tmp/stdout")" = 9 ] || fail "examples/sample printed $(wc -w <"$tmp/stdout") ids, not 9"
	"$SAMPLE" "$g/gpt-torch.yaml" "2 3 4" 12 >"$tmp/stdout" 2>"$tmp/stderr"
	rc=$?
	expect_rc 1
	expect_stderr_has "more than the 12"
}
check "examples/sample.c samples through dlrun_step and stops at the model's 12 positions" t_example

t_readme() {
	[ -r /usr/share/common-licenses/GPL-3 ] || { skip "no /usr/share/common-licenses/GPL-3"; return 0; }
	run_plain train "$srcdir/models/char-gpt.yaml" --data /usr/share/common-licenses/GPL-3 \
		--epochs 1 --val-split 0.1 --keep-best -o "$tmp/cg.safetensors"
	expect_rc 0
	run_plain generate "$srcdir/models/char-gpt.yaml" -w "$tmp/cg.safetensors" --prompt "The GNU" \
		-n 40 --temperature 0.8 --top-k 20 --format jsonl
	expect_rc 0
	expect_stdout_has '"text":"'
	[ "$(grep -o '"ids":\[[^]]*\]' "$tmp/stdout" | tr ',' '\n' | wc -l)" = 40 ] || fail "not 40 new ids"
}
check "README's example: the character GPT trains on a licence text and samples" t_readme

t_sigint() {
	[ "$DLRUN_VALGRIND" = yes ] && return 0
	"$DLRUN" generate "$g/char-gpt.yaml" -w "$tmp/char-gpt.safetensors" --prompt "ab" \
		-n 100000000 --context 32 >"$tmp/out" 2>"$tmp/err" &
	pid=$!
	bg_pids="$bg_pids $pid"
	i=0
	while [ ! -s "$tmp/out" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
	kill -INT "$pid"
	wait "$pid"
	rc=$?
	expect_rc 130
	[ -s "$tmp/out" ] || fail "nothing was printed before Ctrl-C"
	[ "$(tail -c 1 "$tmp/out" | od -An -c | tr -d ' ')" = '\n' ] || fail "the output does not end with a newline"
	grep -q 'interrupted' "$tmp/err" || fail "no word on stderr"
}
check "Ctrl-C ends streamed output with what was printed flushed, exit 130" t_sigint

done_testing
