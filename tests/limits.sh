#!/bin/sh
# Limits on the work a small file can ask for (issue 11), printing TAP:
# nested repeats and YAML aliases that expand past the entry limit, deep
# YAML nesting, a repeat count past its maximum, hyperparameters and input
# shapes too large to hold, a plan larger than --max-memory, and a planner
# fast enough for 100,000 entries. Each refusal is one 'dlrun: ' line that
# names the place and the maximum, and comes quickly.
#
# Environment: see tests/lib.sh.

# shellcheck source=tests/lib.sh
. "${srcdir:-$(dirname "$0")/..}/tests/lib.sh"

# elapsed ARGS...: runs dlrun ARGS (run_plain: the time is what these tests
# check), leaves its wall time in whole seconds in $secs.
elapsed() {
	_t0=$(date +%s)
	run_plain "$@"
	secs=$(($(date +%s) - _t0))
}

# refused NEEDLE... : the last run exited 2 with one error line holding
# every NEEDLE
refused() {
	expect_rc 2
	expect_one_error_line
	for _n in "$@"; do
		expect_stderr_has "$_n"
	done
}

t_nested_repeat() {
	cat >"$tmp/m.yaml" <<'YAML'
inputs: {x: {shape: [4]}}
layers:
  - repeat: {times: 1000, body: [{repeat: {times: 1000, body: [relu]}}]}
YAML
	elapsed summary "$tmp/m.yaml"
	refused "m.yaml:3:21:" "more than 250000 entries"
	[ "$secs" -le 5 ] || fail "took $secs s"
}

t_laughs() {
	{
		echo 'inputs: {x: {shape: [4]}}'
		echo 'layers:'
		echo '  - sequential: &a0 [relu, relu, relu, relu, relu, relu, relu, relu, relu, relu]'
		for i in 1 2 3 4 5 6 7 8; do
			p=$((i - 1))
			e="{sequential: *a$p}"
			echo "  - sequential: &a$i [$e, $e, $e, $e, $e, $e, $e, $e, $e, $e]"
		done
	} >"$tmp/m.yaml"
	elapsed summary "$tmp/m.yaml"
	# counted before anything is built: at the second copy of a4 in a5
	refused "m.yaml:8:42:" "more than 250000 entries"
	[ "$secs" -le 2 ] || fail "took $secs s"
}

t_laughs_blocks() {
	{
		echo 'inputs: {x: {shape: [4]}}'
		echo 'blocks:'
		echo '  b0: [relu, relu, relu, relu, relu, relu, relu, relu, relu, relu]'
		for i in 1 2 3 4 5 6 7 8; do
			e="{use: b$((i - 1))}"
			echo "  b$i: [$e, $e, $e, $e, $e, $e, $e, $e, $e, $e]"
		done
		echo 'layers:'
		echo '  - use: b8'
	} >"$tmp/m.yaml"
	elapsed summary "$tmp/m.yaml"
	refused "m.yaml:" "more than 250000 entries"
	[ "$secs" -le 2 ] || fail "took $secs s"
}

t_deep_yaml() {
	awk 'BEGIN { for (i = 0; i < 100000; i++) printf "["; print "" }' >"$tmp/m.yaml"
	elapsed summary "$tmp/m.yaml"
	refused "m.yaml:1:257:" "nested more than 256 deep"
	[ "$secs" -le 2 ] || fail "took $secs s"
}

t_repeat_times() {
	cat >"$tmp/m.yaml" <<'YAML'
inputs: {x: {shape: [4]}}
layers:
  - repeat: {times: 1000000, body: [relu]}
YAML
	run_dlrun summary "$tmp/m.yaml"
	refused "m.yaml:3:21:" "positive integer, at most 100000"
}

t_out_features() {
	cat >"$tmp/m.yaml" <<'YAML'
inputs: {x: {shape: [16]}}
layers:
  - linear: {out_features: 3000000000}
YAML
	run_dlrun summary "$tmp/m.yaml"
	refused "m.yaml:3:14:" "out_features 3000000000 is too large"
}

t_input_numel() {
	cat >"$tmp/m.yaml" <<'YAML'
inputs: {x: {shape: [100000, 100000, 100000, 100000]}}
layers:
  - relu
YAML
	run_dlrun summary "$tmp/m.yaml"
	refused "more than 2^40 elements" "m.yaml:1:"
}

t_dilation() {
	cat >"$tmp/m.yaml" <<'YAML'
inputs: {x: {shape: [1, 8, 8]}}
layers:
  - conv2d: {out_channels: 2, kernel_size: 3, dilation: 4000000000}
YAML
	run_dlrun summary "$tmp/m.yaml"
	refused "m.yaml:3:" "dilation 4000000000 is too large"
}

t_max_memory() {
	cat >"$tmp/m.yaml" <<'YAML'
inputs: {x: {shape: [64]}}
layers:
  - linear: {out_features: 64}
YAML
	run_dlrun init "$tmp/m.yaml" -o "$tmp/m.safetensors"
	expect_rc 0
	# a [1000, 64] float32 input: 250 KiB of activations for the output
	{
		npy_header '<f4' '(1000, 64)'
		head -c 256000 /dev/zero
	} >"$tmp/x.npy"
	run_dlrun infer "$tmp/m.yaml" --max-memory 100K -o "$tmp/y.npy" <"$tmp/x.npy"
	expect_rc 1
	expect_one_error_line
	expect_stderr_has "m.yaml: the plan needs"
	expect_stderr_has "--max-memory is 100.0 KiB"
	[ ! -e "$tmp/y.npy" ] || fail "an output file was written"
	run_dlrun infer "$tmp/m.yaml" --max-memory 10M -o "$tmp/y.npy" <"$tmp/x.npy"
	expect_rc 0
	run_dlrun infer "$tmp/m.yaml" --max-memory 10X <"$tmp/x.npy"
	refused "--max-memory takes a positive size"
}

t_default_max_memory() {
	cat >"$tmp/m.yaml" <<'YAML'
inputs: {x: {shape: [100000, 100000]}}
layers:
  - relu
YAML
	run_dlrun init "$tmp/m.yaml" -o "$tmp/m.safetensors"
	run_dlrun bench "$tmp/m.yaml" --iterations 1
	expect_rc 1
	expect_one_error_line
	expect_stderr_has "37.3 GiB activations"
	expect_stderr_has "the default --max-memory is"
	expect_stderr_has "of physical memory"
}

t_planner() {
	cat >"$tmp/m.yaml" <<'YAML'
inputs: {x: {shape: [4]}}
layers:
  - repeat: {times: 100000, body: [{linear: {out_features: 4}}]}
YAML
	elapsed summary "$tmp/m.yaml"
	expect_rc 0
	expect_stdout_has "planned memory:"
	expect_stdout_has "training step:"
	[ "$secs" -le 20 ] || fail "took $secs s"
}

check "nested repeats past the entry limit are refused at once" t_nested_repeat
check "an alias tree (billion laughs) is refused at once, at the entry limit" t_laughs
check "blocks using blocks (a billion entries) are refused at once" t_laughs_blocks
check "100,000 nested [ are refused fast" t_deep_yaml
check "repeat: times past 100000 names the maximum" t_repeat_times
check "linear out_features too large names the hyperparameter" t_out_features
check "an input of more than 2^40 elements says so" t_input_numel
check "conv2d with a huge dilation is refused" t_dilation
check "--max-memory refuses a larger plan with the figures" t_max_memory
check "the default --max-memory is a share of physical memory" t_default_max_memory
check "100,000 entries plan for inference and training" t_planner
done_testing
