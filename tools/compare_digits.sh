#!/bin/sh
# Trains models/digits-mlp.yaml with dlrun and the same architecture with
# PyTorch, from the same initial weights, with the same optimizer, learning
# rate, batch size and epochs; checks that `dlrun infer` with the trained
# weights reproduces dlrun's reported accuracy; prints both accuracies.
# Usage: tools/compare_digits.sh [DLRUN]   (run from the source tree)
set -eu
dlrun=${1:-./src/dlrun}
py=/usr/bin/python3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$dlrun" init models/digits-mlp.yaml -o "$tmp/init.safetensors" --seed 0
start=$(date +%s.%N)
"$dlrun" train models/digits-mlp.yaml -w "$tmp/init.safetensors" \
	--data models/data/digits.npz -o "$tmp/trained.safetensors" \
	--log "$tmp/log.jsonl" --no-progress --threads 2
end=$(date +%s.%N)
reported=$(tail -n 1 "$tmp/log.jsonl" | sed 's/.*"val_accuracy":\([0-9.e-]*\).*/\1/')

# dlrun infer on the validation images with the trained weights
"$py" -c 'import numpy as np, sys; np.save(sys.argv[1], np.load("models/data/digits.npz")["x_val"])' "$tmp/xv.npy"
"$dlrun" infer models/digits-mlp.yaml -w "$tmp/trained.safetensors" < "$tmp/xv.npy" > "$tmp/logits.npy"
inferred=$("$py" -c 'import numpy as np, sys
y = np.load("models/data/digits.npz")["y_val"]
print((np.load(sys.argv[1]).argmax(1) == y).mean())' "$tmp/logits.npy")

torch=$("$py" tools/train_digits_torch.py --init "$tmp/init.safetensors" \
	--optimizer adam --lr 0.003 --batch-size 32 --epochs 20 --threads 2 | \
	sed -n 's/^val_accuracy //p')

echo "dlrun train:  val_accuracy $reported ($(echo "$end - $start" | bc) s)"
echo "dlrun infer:  val_accuracy $inferred (trained weights on x_val)"
echo "pytorch:      val_accuracy $torch"
