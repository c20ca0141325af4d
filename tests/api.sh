#!/bin/sh
# libdlrun through its public header (tests/api_test.c, linked against the
# shared library): the same numbers as `dlrun infer`, two models on two
# threads, errors as values, a training step, output shapes and
# dlrun_set_threads(m, 0); under valgrind with
# DLRUN_VALGRIND=yes. Also builds examples/embed.c and runs it. Prints TAP.
#
# Environment: see tests/lib.sh; API_TEST and EMBED (the built programs).

# shellcheck source=tests/lib.sh
. "${srcdir:-$(dirname "$0")/..}/tests/lib.sh"

: "${API_TEST:=./tests/api_test}"
: "${EMBED:=./examples/embed}"
case $API_TEST in /*) ;; *) API_TEST=$(pwd)/$API_TEST ;; esac
case $EMBED in /*) ;; *) EMBED=$(pwd)/$EMBED ;; esac
m=$srcdir/models

# run_api ARGS...: runs api_test (under valgrind when asked)
run_api() {
	if [ "$DLRUN_VALGRIND" = yes ]; then
		valgrind --error-exitcode=99 --leak-check=full \
			--errors-for-leak-kinds=definite --show-leak-kinds=definite -q \
			"$API_TEST" "$@" >"$tmp/stdout" 2>"$tmp/stderr"
	else
		"$API_TEST" "$@" >"$tmp/stdout" 2>"$tmp/stderr"
	fi
	rc=$?
	return 0
}

t_same_as_infer() {
	run_api run "$m/mlp.yaml" "$m/mlp-input.txt"
	expect_rc 0
	cp "$tmp/stdout" "$tmp/api.txt"
	run_dlrun infer --format text "$m/mlp.yaml" <"$m/mlp-input.txt"
	expect_rc 0
	cmp -s "$tmp/api.txt" "$tmp/stdout" || fail "dlrun_run and dlrun infer differ"
}
check "dlrun_run gives dlrun infer's numbers (mlp)" t_same_as_infer

t_threads() {
	run_api threads "$m/mlp.yaml" "$m/lenet5.yaml"
	expect_rc 0
}
check "two models open at once, each on its own thread" t_threads

t_errors() {
	run_api errors "$m/mlp.yaml"
	expect_rc 0
	[ "$(grep -c '^error: ' "$tmp/stdout")" -eq 7 ] || fail "not every error came back"
}
check "bad paths, shapes, counts and calls are errors with messages" t_errors

t_train() {
	run_api train "$m/mlp.yaml" "$tmp/trained.safetensors"
	expect_rc 0
	[ -s "$tmp/trained.safetensors" ] || fail "no weights written"
	run_dlrun infer -w "$tmp/trained.safetensors" "$m/mlp.yaml" <"$m/mlp-input.npy"
	expect_rc 0
}
check "training steps lower the loss; saved weights load in dlrun" t_train

# api_test train's two SGD steps (lr 0.5, one batch of 4) against dlrun
# train's on the same batch, unshuffled: the same weights bit for bit (dlrun
# train's file carries metadata: resaved through the API to compare bytes)
t_train_as_cli() {
	run_api batch "$tmp/x.npy" "$tmp/y.npy"
	expect_rc 0
	run_api train "$m/mlp.yaml" "$tmp/api.safetensors"
	expect_rc 0
	run_dlrun train "$m/mlp.yaml" -w "$m/mlp.safetensors" --data "$tmp/x.npy" \
		--labels "$tmp/y.npy" --optimizer sgd --lr 0.5 --epochs 2 --batch-size 4 \
		--no-shuffle -o "$tmp/cli.safetensors" -q
	expect_rc 0
	run_api resave "$m/mlp.yaml" "$tmp/cli.safetensors" "$tmp/cli2.safetensors"
	expect_rc 0
	cmp -s "$tmp/api.safetensors" "$tmp/cli2.safetensors" ||
		fail "dlrun_train_step's weights differ from dlrun train's"
}
check "dlrun_train_step trains as dlrun train does, bit for bit (mlp, SGD, 2 steps)" t_train_as_cli

# dlrun_run packs the weights of linear layers in place (src/engine/xwt.h):
# a save after a run writes the rows, the bytes a save without a run
# writes, and a training step after a run starts from the rows too
t_run_then_save() {
	run_api runsave "$m/mlp.yaml" "$tmp/after_run.safetensors"
	expect_rc 0 || return 1
	run_api resave "$m/mlp.yaml" "$m/mlp.safetensors" "$tmp/plain.safetensors"
	expect_rc 0 || return 1
	cmp -s "$tmp/after_run.safetensors" "$tmp/plain.safetensors" ||
		fail "the weights saved after dlrun_run differ from the loaded ones"
}
check "dlrun_save_weights after dlrun_run writes the loaded weights" t_run_then_save

t_shapes() {
	cat >"$tmp/sym.yaml" <<'YAML'
inputs:
  x: {shape: [T, 4]}
layers:
  - linear: {out_features: 3}
YAML
	run_dlrun init "$tmp/sym.yaml" -o "$tmp/sym.safetensors" --input-shape x=5,4
	expect_rc 0
	run_api shapes "$m/mlp.yaml" "$tmp/sym.yaml"
	expect_rc 0
}
check "dlrun_output_shape before and after a run, fixed and symbolic; dlrun_set_threads(m, 0)" t_shapes

t_embed() {
	# as dlrun runs below (under valgrind when asked): the numbers are
	# compared byte for byte, and valgrind's CPU (no AVX-512) picks other
	# OpenBLAS kernels than an AVX-512 host does
	$(dlrun_cmd) "$EMBED" "$m/mlp.yaml" "$m/mlp-input.txt" >"$tmp/embed.txt" 2>"$tmp/stderr"
	rc=$?
	expect_rc 0
	run_dlrun infer --format text "$m/mlp.yaml" <"$m/mlp-input.txt"
	head -n 3 "$tmp/embed.txt" | cmp -s - "$tmp/stdout" || fail "examples/embed prints other numbers"
	grep -q '^loss ' "$tmp/embed.txt" || fail "examples/embed printed no loss"
}
check "examples/embed.c runs the quick-start MLP" t_embed

done_testing
