#!/bin/sh
# Replays the fuzz seed corpora (tests/fuzz/corpus/<target>/) and the inputs
# that once crashed, hung or leaked (tests/fuzz/regress/<target>/) through
# the normal dlrun binary, printing TAP: each ends within its time with
# status 0, 1 or 2 (never a signal, never a sanitizer's or valgrind's
# report), and a failure is one 'dlrun: ' line.
#
# Environment: see tests/lib.sh.

# shellcheck source=tests/lib.sh
. "${srcdir:-$(dirname "$0")/..}/tests/lib.sh"

fz=$srcdir/tests/fuzz
d=$tmp/fz
mkdir "$d"
# the small model of tests/fuzz/fuzz_infer.c
cat >"$d/m.yaml" <<'YAML'
inputs: {x: {shape: [2, 6]}}
layers:
  - conv1d: {out_channels: 3, kernel_size: 3, padding: 1}
  - flatten
  - linear: {out_features: 4}
  - softmax: {dim: -1}
YAML
"$DLRUN" init "$d/m.yaml" -o "$d/m.safetensors" >/dev/null 2>&1 ||
	echo "Bail out! dlrun init failed"
cat >"$d/img.yaml" <<'YAML'
inputs: {x: {shape: [3, 8, 8]}}
data: {image: [resize: [8, 8], to_float: {}]}
layers: [flatten]
YAML
cat >"$d/any.yaml" <<'YAML'
inputs: {x: {shape: [N]}}
layers:
  - relu
YAML
# tables (tests/fuzz/fuzz_csv.c) of any number of features
cat >"$d/table.yaml" <<'YAML'
inputs: {x: {shape: [F]}}
layers:
  - linear: {out_features: 2}
YAML
# the vocabulary of tests/fuzz/fuzz_vocab.c
cat >"$d/vocab.yaml" <<'YAML'
inputs: {idx: {shape: [T], dtype: int}}
vocab: ["\n", " ", a, b, c, ab, abc, ca, "é", "€", "é€", "\t", x]
layers: [embedding: {num_embeddings: 13, embedding_dim: 2}, linear: {out_features: 13}]
YAML

# clean: the last run ended by itself with 0, 1 or 2, and a failure said
# one line
clean() {
	case $rc in
	0) ;;
	1 | 2) expect_one_error_line ;;
	*) fail "exit code $rc (a signal, a timeout or a sanitizer)" ;;
	esac
}

# run_dlrun within $answer_timeout seconds: a hang fails as exit 124
run_bounded() {
	last_cmd="dlrun $*"
	# shellcheck disable=SC2046 # dlrun_cmd's words are the prefix
	timeout "$answer_timeout" $(dlrun_cmd) "$DLRUN" "$@" >"$tmp/stdout" 2>"$tmp/stderr"
	rc=$?
}

# replay TARGET FILE
replay() {
	case $1 in
	model) run_bounded summary "$2" ;;
	npy) run_bounded infer "$d/any.yaml" -o "$d/out.npy" <"$2" ;;
	text) run_bounded infer "$d/m.yaml" --format text -o "$d/out.txt" <"$2" ;;
	safetensors) run_bounded infer "$d/m.yaml" -w "$2" -o "$d/out.npy" </dev/null ;;
	npz) run_bounded train "$d/m.yaml" --data "$2" --epochs 1 -q -o "$d/out.safetensors" ;;
	onnx) run_bounded import "$2" -o "$d/onnx/m.yaml" ;;
	csv) run_bounded train "$d/table.yaml" --data "$2" --epochs 1 -q -o "$d/out.safetensors" ;;
	vocab) run_bounded train "$d/vocab.yaml" --data "$2" --context 2 --epochs 1 -q \
		-o "$d/out.safetensors" ;;
	image) run_bounded infer "$d/img.yaml" "$2" -o "$d/out.npy" ;;
	infer)
		if [ "$(head -c 1 "$2" | od -An -tu1 | tr -d ' ')" = 147 ]; then
			run_bounded infer "$d/m.yaml" --batch-size 3 -o "$d/out.npy" <"$2"
		else
			run_bounded infer "$d/m.yaml" --format text --batch-size 3 \
				-o "$d/out.txt" <"$2"
		fi ;;
	esac
	clean
}

# dlrun import, into a directory of its own (when built with ONNX import)
mkdir "$d/onnx"
onnx=
if "$DLRUN" --version 2>/dev/null | grep -F 'onnx import: yes' >/dev/null; then
	onnx=onnx
fi

for target in model npy text safetensors npz infer onnx csv vocab image; do
	for f in "$fz/corpus/$target"/* "$fz/regress/$target"/*; do
		[ -f "$f" ] || continue
		if [ "$target" = onnx ] && [ -z "$onnx" ]; then
			skip "$target: ${f#"$fz"/}" "dlrun was built without ONNX import"
			continue
		fi
		check "$target: ${f#"$fz"/}" replay "$target" "$f"
	done
done
done_testing
