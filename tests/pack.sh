#!/bin/sh
# Inference on packed weights (src/engine/xwt.h), on the fixture of
# tools/gen_pack_fixtures.py: a GPT-style model whose LM head is tied to
# its embedding, with a transformer layer and linears of 21, 32, 37 and
# 48 outputs.
#   - `dlrun infer` gives PyTorch's logits (1e-5) in chunks of 2, 3 and 7
#     samples: the tied weight is read as rows by the embedding of every
#     chunk after the LM head's product, so it must never be packed;
#   - the same with DLRUN_PACK=0 (OpenBLAS on the weights as rows);
#   - with AVX-512 (where the weights are packed), the same model untied
#     (its LM head a weight of its own, from `dlrun init`) gives the same
#     bits at every chunk size and at 1 and 2 threads: each product's
#     output is one chain of fused multiply-adds (the tied head runs on
#     OpenBLAS, whose bits change with the rows of a product).
# Prints TAP.
#
# Environment: see tests/lib.sh.

# shellcheck source=tests/lib.sh
. "${srcdir:-$(dirname "$0")/..}/tests/lib.sh"

d=$srcdir/tests/data/pack

t_pytorch() {
	run_dlrun infer "$d/tied.yaml" --batch-size "$1" -i "$d/x.npy" -o "$tmp/y$1.npy"
	expect_rc 0 || return 1
	"$NPYCMP" "$tmp/y$1.npy" "$d/y.npy" 1e-5 >"$tmp/cmp" ||
		fail "--batch-size $1: the logits differ from PyTorch's: $(cat "$tmp/cmp")"
}

t_unpacked() {
	run_dlrun_env DLRUN_PACK=0 infer "$d/tied.yaml" --batch-size 3 -i "$d/x.npy" \
		-o "$tmp/rows.npy"
	expect_rc 0 || return 1
	"$NPYCMP" "$tmp/rows.npy" "$d/y.npy" 1e-5 >"$tmp/cmp" ||
		fail "DLRUN_PACK=0: the logits differ from PyTorch's: $(cat "$tmp/cmp")"
}

t_bits() {
	grep -v 'share:' "$d/tied.yaml" >"$tmp/untied.yaml"
	run_plain init "$tmp/untied.yaml" -o "$tmp/untied.safetensors"
	expect_rc 0 || return 1
	for b in 1 2 7; do
		for th in 1 2; do
			run_plain infer "$tmp/untied.yaml" --batch-size $b --threads $th -i "$d/x.npy" \
				-o "$tmp/b$b-$th.npy"
			expect_rc 0 || return 1
			cmp -s "$tmp/b$b-$th.npy" "$tmp/b1-1.npy" ||
				{ fail "--batch-size $b --threads $th: other bits than --batch-size 1 --threads 1"; return 1; }
		done
	done
}

for b in 2 3 7; do
	check "tied LM head, packed weights, --batch-size $b: PyTorch's logits" t_pytorch $b
done
check "DLRUN_PACK=0: PyTorch's logits" t_unpacked
if grep -qw avx512f /proc/cpuinfo 2>/dev/null; then
	check "packed: the same bits at every chunk size and thread count" t_bits
else
	skip "packed: the same bits at every chunk size and thread count" "no AVX-512: nothing is packed"
fi

done_testing
