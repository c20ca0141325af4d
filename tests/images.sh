#!/bin/sh
# Images (src/io/image.c, src/io/imgproc.c, src/train/image_data.c), on
# the fixtures of tools/gen_image_fixtures.py (tests/data/images):
#   - PNG (gray, RGB, RGBA, palette with tRNS, 16-bit) and JPEG pixels equal
#     torchvision.io.read_image's (16-bit: round(v * 255 / 65535));
#   - each data: step against torchvision's transform on a uint8 tensor:
#     resize within 1/255 of Resize(antialias=True) (and
#     RandomResizedCrop's center-crop fallback), crops, flip,
#     grayscale and normalize exact;
#   - an ImageFolder (and the same as a PATH LABEL list) trained 2 epochs
#     gives the bytes of the same run from the equivalent .npz, and random
#     augmentation gives the same weights at 1 and 2 threads and when
#     resumed from a checkpoint;
#   - infer --top 3 and --json on files;
#   - bad input: truncated PNG, corrupt JPEG, empty class folder, wrong
#     shape, an image on stdin, bad data: steps: exit 2, one line naming
#     the file, nothing written.
# Prints TAP.
#
# Environment: see tests/lib.sh.

# shellcheck source=tests/lib.sh
. "${srcdir:-$(dirname "$0")/..}/tests/lib.sh"

d=$srcdir/tests/data/images

if ! "$DLRUN" --version | grep -q 'PNG: yes, JPEG: yes'; then
	echo "1..0 # SKIP dlrun was built without PNG or JPEG support"
	exit 0
fi

expect_rc() {
	[ "$rc" = "$1" ] || fail "exit code $rc, expected $1"
}

# model SHAPE STEPS: a flatten model of input SHAPE with data: image: STEPS
model() {
	printf 'inputs: {x: {shape: [%s]}}\ndata: {image: [%s]}\nlayers: [flatten]\n' \
		"$1" "$2" >"$tmp/m.yaml"
}

# t_same FILE SHAPE STEPS EXPECTED RTOL
t_same() {
	model "$2" "$3"
	run_dlrun infer "$tmp/m.yaml" "$d/$1" -o "$tmp/out.npy"
	expect_rc 0 || return 1
	"$NPYCMP" "$tmp/out.npy" "$d/$4.npy" "$5" >"$tmp/cmp" ||
		fail "$1 [$3]: $(cat "$tmp/cmp")"
}

for f in "gray.png 1,7,5 gray" "rgb.png 3,5,6 rgb" "rgba.png 3,4,6 rgba" \
	"palette.png 3,6,5 palette" "rgb16.png 3,3,4 rgb16" "photo.jpg 3,13,17 photo" \
	"gray.jpg 1,7,5 gray_jpg" "gray.png 3,7,5 gray_rgb"; do
	# shellcheck disable=SC2086
	set -- $f
	check "decode $1 as torchvision.io.read_image" t_same "$1" "$2" "" "$3" 0
done

steps() {
	while IFS='|' read -r shape st exp tol; do
		check "step $exp" t_same big.png "$shape" "$st" "$exp" "$tol"
	done
}
norm='normalize: {mean: [0.485, 0.456, 0.406], std: [0.229, 0.224, 0.225]}'
steps <<EOF
3,16,21|resize: 16, to_float: {}|resize16|0.004
3,45,20|resize: [45, 20], to_float: {}|resize_45x20|0.004
3,11,11|center_crop: 11, to_float: {}|crop11|0
3,9,14|center_crop: [9, 14], to_float: {}|crop9x14|0
3,33,44|center_crop: [33, 44], to_float: {}|crop33x44|0
3,30,40|horizontal_flip: 1.0, to_float: {}|flip|0
3,10,20|random_resized_crop: {size: [10, 20], scale: [1, 1], ratio: [2, 2]}, to_float: {}|rrc_fallback|0.004
1,30,40|grayscale: {}, to_float: {}|gray_step|0
3,30,40|to_float: {}, $norm|normalize|0
3,16,16|resize: 20, center_crop: 16, to_float: {}, $norm|full|0.02
EOF

cat >"$tmp/f.yaml" <<'EOF'
inputs: {x: {shape: [1, 6, 6]}}
data: {image: [to_float: {}]}
layers:
  - flatten
  - linear: {out_features: 3}
EOF

t_folder() {
	run_plain train "$tmp/f.yaml" --data "$d/folder" --epochs 2 --batch-size 4 --seed 3 \
		-o "$tmp/a.safetensors"
	expect_rc 0 || return 1
	run_plain train "$tmp/f.yaml" --data "$d/folder.npz" --epochs 2 --batch-size 4 --seed 3 \
		-o "$tmp/b.safetensors"
	expect_rc 0 || return 1
	cmp -s "$tmp/a.safetensors" "$tmp/b.safetensors" ||
		fail "the ImageFolder run's weights differ from the .npz run's"
	run_plain train "$tmp/f.yaml" --data "$d/folder.txt" --epochs 2 --batch-size 4 --seed 3 \
		--threads 1 -o "$tmp/c.safetensors"
	expect_rc 0 || return 1
	cmp -s "$tmp/a.safetensors" "$tmp/c.safetensors" ||
		fail "the list file's run differs from the folder's"
}
check "ImageFolder and list file train as the equivalent .npz" t_folder

t_float_loss() {
	sed 's/out_features: 3/out_features: 1/' "$tmp/f.yaml" >"$tmp/f1.yaml"
	for loss in mse bce_with_logits; do
		run_plain train "$tmp/f1.yaml" --data "$d/folder" --val-data "$d/folder" \
			--loss $loss --epochs 1 -o "$tmp/f1.safetensors"
		expect_rc 0 || return 1
	done
}
check "image folders' class ids serve as float targets (mse, bce_with_logits)" t_float_loss

t_augment() {
	sed 's/^data: .*/data: {image: [to_float: {}], train: [random_resized_crop: {size: 6, scale: [0.3, 1.0]}, horizontal_flip: 0.5, to_float: {}]}/' \
		"$tmp/f.yaml" >"$tmp/aug.yaml"
	for th in 1 2; do
		run_plain train "$tmp/aug.yaml" --data "$d/folder" --val-data "$d/folder" --epochs 2 \
			--batch-size 4 --seed 5 --threads $th -o "$tmp/aug$th.safetensors"
		expect_rc 0 || return 1
	done
	cmp -s "$tmp/aug1.safetensors" "$tmp/aug2.safetensors" ||
		fail "random augmentation differs between 1 and 2 threads"
	cmp -s "$tmp/aug1.safetensors" "$tmp/a.safetensors" &&
		fail "random augmentation changed nothing"
	# resumed from a checkpoint inside the last epoch: the same bytes
	run_plain train "$tmp/aug.yaml" --data "$d/folder" --epochs 3 --batch-size 4 --seed 2 \
		--checkpoint "$tmp/ck.safetensors" --checkpoint-every 4 -o "$tmp/full.safetensors"
	expect_rc 0 || return 1
	run_plain train "$tmp/aug.yaml" --data "$d/folder" --epochs 3 --batch-size 4 --seed 2 \
		--resume "$tmp/ck.safetensors" -o "$tmp/res.safetensors"
	expect_rc 0 || return 1
	cmp -s "$tmp/full.safetensors" "$tmp/res.safetensors" ||
		fail "a run resumed from its checkpoint differs from the uninterrupted one"
}
check "random augmentation: same weights at 1 and 2 threads, and resumed" t_augment

cat >"$tmp/top.yaml" <<EOF
inputs: {x: {shape: [3, 4, 4]}}
data: {image: [resize: 4, center_crop: 4, to_float: {}], classes: $d/top-classes.txt}
layers:
  - flatten
  - linear: {out_features: 5}
EOF

t_top() {
	cd "$d" || return 1
	run_dlrun infer "$tmp/top.yaml" -w top.safetensors rgb.png big.png --top 3
	cd - >/dev/null || return 1
	expect_rc 0 || return 1
	paste "$tmp/stdout" "$d/top3.txt" | awk -F '\t' '
		NF != 6 || $1 != $4 || $2 != $5 || ($3 - $6) > 2e-6 || ($6 - $3) > 2e-6 { bad = 1 }
		END { exit bad || NR != 6 }' ||
		fail "--top 3: $(cat "$tmp/stdout") expected $(cat "$d/top3.txt")"
}
check "infer --top 3: PATH<TAB>CLASS<TAB>PROB as torch.softmax and topk" t_top

t_json() {
	run_dlrun infer "$tmp/top.yaml" -w "$d/top.safetensors" "$d/rgb.png" --json --top 2
	expect_rc 0 || return 1
	grep -q '^{"file":".*rgb.png","top":\[{"class":"banana","id":1,"prob":0.3237[0-9]*},{"class":"cherry","id":2,"prob":0.1853[0-9]*}\]}$' \
		"$tmp/stdout" || fail "--json: $(cat "$tmp/stdout")"
}
check "infer --json: one object per file" t_json

# bad ARGS...: exit 2, one line on stderr matching $want, nothing written
bad() {
	rm -f "$tmp/out.npy"
	run_dlrun "$@"
	expect_rc 2 || return 1
	[ "$(wc -l <"$tmp/stderr")" -eq 1 ] || fail "not one line on stderr"
	grep -q -- "$want" "$tmp/stderr" || fail "stderr does not say '$want'"
	[ ! -e "$tmp/out.npy" ] || fail "an output was written"
}

t_truncated() {
	head -c 200 "$d/big.png" >"$tmp/cut.png"
	model 3,30,40 "to_float: {}"
	want="cut.png: corrupt or truncated PNG"
	bad infer "$tmp/m.yaml" "$tmp/cut.png" -o "$tmp/out.npy"
}
check "a truncated PNG: exit 2 naming it" t_truncated

t_corrupt_jpeg() {
	n=$(wc -c <"$d/photo.jpg")
	head -c $((n / 2)) "$d/photo.jpg" >"$tmp/bad.jpg"
	model 3,13,17 "to_float: {}"
	want="bad.jpg: corrupt or truncated JPEG"
	bad infer "$tmp/m.yaml" "$tmp/bad.jpg" -o "$tmp/out.npy"
}
check "a truncated JPEG: exit 2 naming it" t_corrupt_jpeg

t_empty_class() {
	cp -r "$d/folder" "$tmp/folder"
	mkdir "$tmp/folder/dog"
	want="folder/dog: a class folder with no images"
	bad train "$tmp/f.yaml" --data "$tmp/folder" --epochs 1 -o "$tmp/out.npy"
}
check "an empty class folder: exit 2 naming it" t_empty_class

t_corrupt_in_folder() {
	rm -rf "$tmp/folder"
	cp -r "$d/folder" "$tmp/folder"
	head -c 60 "$d/folder/bee/1.png" >"$tmp/folder/bee/1.png"
	want="folder/bee/1.png: corrupt or truncated PNG"
	bad train "$tmp/f.yaml" --data "$tmp/folder" --epochs 1 -o "$tmp/out.npy"
}
check "a corrupt image in a class folder: exit 2 naming it" t_corrupt_in_folder

t_shape() {
	model 3,8,8 "resize: 8, to_float: {}"
	want="big.png: the data: pipeline gives \[3, 8, 10\]; the model input is \[3, 8, 8\]"
	bad infer "$tmp/m.yaml" "$d/big.png" -o "$tmp/out.npy" || return 1
	sed 's/shape: \[1, 6, 6\]/shape: [1, 5, 5]/' "$tmp/f.yaml" >"$tmp/f5.yaml"
	want="folder/ant/0.png: the data: pipeline gives \[1, 6, 6\]; the model input is \[1, 5, 5\]"
	bad train "$tmp/f5.yaml" --data "$d/folder" --epochs 1 -o "$tmp/out.npy"
}
check "a pipeline result of the wrong shape: exit 2 naming the file" t_shape

t_stdin() {
	model 3,30,40 "to_float: {}"
	want="stdin: a PNG image, not a .npy array; 'dlrun infer MODEL FILE...' reads image files"
	bad infer "$tmp/m.yaml" -o "$tmp/out.npy" <"$d/big.png" || return 1
	want="stdin: a JPEG image"
	bad infer "$tmp/m.yaml" -o "$tmp/out.npy" <"$d/photo.jpg"
}
check "an image on stdin says what it is and what reads it" t_stdin

t_one_image() {
	want="big.png: a single image; --data takes a folder"
	bad train "$tmp/f.yaml" --data "$d/big.png" -o "$tmp/out.npy"
}
check "train --data IMAGE says what --data takes" t_one_image

t_npy_operand() {
	model 3,30,40 "to_float: {}"
	want="full.npy: a .npy array, not an image; 'dlrun infer MODEL -i"
	bad infer "$tmp/m.yaml" "$d/full.npy" -o "$tmp/out.npy"
}
check "an .npy array as an image operand says what reads it" t_npy_operand

t_steps() {
	printf 'inputs: {x: {shape: [3, 4, 4]}}\ndata:\n  image: [resize: 4, centre_crop: 4]\nlayers: [flatten]\n' \
		>"$tmp/s.yaml"
	want="s.yaml:3:22: data: unknown step 'centre_crop'; did you mean 'center_crop'?"
	bad infer "$tmp/s.yaml" "$d/big.png" || return 1
	printf 'inputs: {x: {shape: [3, 4, 4]}}\ndata:\n  image: [normalize: {mean: [1, 2]}]\nlayers: [flatten]\n' \
		>"$tmp/s.yaml"
	want="s.yaml:3:22: normalize: needs both mean and std"
	bad infer "$tmp/s.yaml" "$d/big.png" || return 1
	printf 'inputs: {x: {shape: [3, 4, 4]}}\ndata:\n  image: [resize: -3]\nlayers: [flatten]\n' \
		>"$tmp/s.yaml"
	want="s.yaml:3:19: resize: size -3 is out of range"
	bad infer "$tmp/s.yaml" "$d/big.png"
}
check "bad data: steps name file:line:col" t_steps

done_testing
