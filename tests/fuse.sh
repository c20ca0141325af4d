#!/bin/sh
# Fused inference epilogues (src/engine/fuse.c), also inside composite
# entries (a transformer layer's inner graph): for every fixture under
# tests/fixtures/fuse/ (tools/gen_fuse_fixtures.py; tests/fixtures.sh checks
# the fused output against PyTorch), `dlrun infer` gives the same numbers
# fused (the default) and unfused (DLRUN_FUSE=0), `dlrun bench --json` marks
# the entries an epilogue computed ("fused":true), and none with
# DLRUN_FUSE=0 or --train (training never fuses). Prints TAP.
#
# Environment: see tests/lib.sh.

# shellcheck source=tests/lib.sh
. "${srcdir:-$(dirname "$0")/..}/tests/lib.sh"

# fused entries per case: conv+bn+relu and conv+bn+add+relu; bn+relu6 and
# silu; bn+relu6 and bn+gelu; bn+gelu; gelu+add+relu; the dropout after
# the layer norm, gelu+dropout, dropout+add
expected() {
	case $1 in
	conv_bn_relu_res*) echo 5 ;;
	winograd_bn_relu6*) echo 3 ;;
	depthwise_bn*) echo 4 ;;
	conv1d_bn_gelu*) echo 2 ;;
	linear_gelu_res*) echo 3 ;;
	linear_dropout_res*) echo 5 ;;
	*) echo 0 ;;
	esac
}

# inner entries fused per case: a pre-norm encoder layer's dropout1,
# linear1's gelu+dropout, linear2's dropout2+add
expected_inside() {
	case $1 in
	encoder_layer*) echo 5 ;;
	*) echo 0 ;;
	esac
}

fused_count() {
	grep -o '"fused":true' "$tmp/stdout" | wc -l | tr -d ' '
}

inside_count() {
	n=$(grep -o '"fused_inside":[0-9]*' "$tmp/stdout" | cut -d: -f2)
	echo "${n:-0}"
}

t_same() {
	run_dlrun infer "$1/model.yaml" -i "$1/in.npy" -o "$tmp/fused.npy"
	expect_rc 0 || return 1
	# under valgrind too when the fused run was: valgrind's CPU has no
	# AVX-512, so on an AVX-512 host (without OPENBLAS_CORETYPE) OpenBLAS
	# and the kernels' clones would differ between the two runs, not the
	# fusion (1.3e-6 seen)
	run_dlrun_env DLRUN_FUSE=0 infer "$1/model.yaml" -i "$1/in.npy" -o "$tmp/plain.npy"
	expect_rc 0 || return 1
	"$NPYCMP" "$tmp/fused.npy" "$tmp/plain.npy" 1e-6 >"$tmp/cmp" ||
		fail "fused and unfused outputs differ: $(cat "$tmp/cmp")"
}

t_marked() {
	run_dlrun bench "$1/model.yaml" -k 1 --json
	expect_rc 0 || return 1
	[ "$(fused_count)" -eq "$2" ] ||
		fail "$(fused_count) entries fused, expected $2: $(cat "$tmp/stdout")"
	[ "$(inside_count)" -eq "$3" ] ||
		fail "$(inside_count) inner entries fused, expected $3: $(cat "$tmp/stdout")"
}

t_unmarked() {
	DLRUN_FUSE=0 "$DLRUN" bench "$1/model.yaml" -k 1 --json >"$tmp/stdout" 2>"$tmp/stderr"
	[ "$(fused_count)" -eq 0 ] || fail "DLRUN_FUSE=0: $(fused_count) entries fused"
	[ "$(inside_count)" -eq 0 ] || fail "DLRUN_FUSE=0: $(inside_count) inner entries fused"
	run_dlrun bench "$1/model.yaml" -k 1 --json --train
	expect_rc 0 || return 1
	[ "$(fused_count)" -eq 0 ] || fail "--train: $(fused_count) entries fused"
	[ "$(inside_count)" -eq 0 ] || fail "--train: $(inside_count) inner entries fused"
}

for d in "$srcdir"/tests/fixtures/fuse/*/; do
	d=${d%/}
	c=$(basename "$d")
	check "$c: fused and unfused infer agree (1e-6)" t_same "$d"
	check "$c: bench marks $(expected "$c") fused entries, $(expected_inside "$c") inside" \
		t_marked "$d" "$(expected "$c")" "$(expected_inside "$c")"
	check "$c: nothing fused with DLRUN_FUSE=0 or --train" t_unmarked "$d"
done

done_testing
