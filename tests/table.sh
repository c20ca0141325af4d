#!/bin/sh
# Training on CSV tables (cli.md "Tables"), printing TAP:
# - a table trains as the same data in .npy files (tools/gen_table_fixtures.py):
#   the same weights, byte for byte, with the label last or named by --label
#   in the middle (spaces, CRLF and quoted fields read too); class names
#   become ids in sorted order, said once on stderr;
# - numeric labels stay numbers (class ids, or float targets for mse);
#   --val-data maps its class names with the training file's;
# - bad rows and flags: a missing field, a non-number, an unknown --label,
#   a label that is not a class id, an unknown validation class, an
#   unterminated quote, a feature count the model does not take: exit 2,
#   one line naming file:line:col, nothing written.
#
# Environment: see tests/lib.sh.

# shellcheck source=tests/lib.sh
. "${srcdir:-$(dirname "$0")/..}/tests/lib.sh"

D=$srcdir/tests/data/table
if [ ! -f "$D/beer.csv" ]; then
	echo "Bail out! no fixtures (make them with tools/gen_table_fixtures.py)"
	exit 1
fi
valgrind_every 3

t_parity() {
	cd "$tmp" || return 1
	run_dlrun train "$D/mlp.yaml" --data "$D/x.npy" --labels "$D/y.npy" --epochs 3 \
		--batch-size 8 -o npy.safetensors -q
	expect_rc 0 || return 1
	run_dlrun train "$D/mlp.yaml" --data "$D/beer.csv" --epochs 3 --batch-size 8 \
		-o csv.safetensors
	expect_rc 0 || return 1
	expect_stderr_has "beer.csv: classes of column 'kind': 0 ale, 1 lager, 2 stout"
	[ "$(grep -c 'classes of column' "$tmp/stderr")" -eq 1 ] ||
		fail "the classes are not said once"
	cmp -s csv.safetensors npy.safetensors ||
		fail "the CSV trains otherwise than the same data in .npy files"
	run_dlrun train "$D/mlp.yaml" --data "$D/beer_mid.csv" --label kind --epochs 3 \
		--batch-size 8 -o mid.safetensors -q
	expect_rc 0 || return 1
	cmp -s mid.safetensors npy.safetensors ||
		fail "--label kind (the second column) trains otherwise"
	cd - >/dev/null || return 1
}
check "a CSV table trains as the same data in .npy (label last, --label)" t_parity

t_numeric() {
	printf 'a,b,y\n0.5,1,0\n-1,2,2\n3,0.25,1\n1,1,2\n' >"$tmp/num.csv"
	sed 's/shape: \[4\]/shape: [2]/' "$D/mlp.yaml" >"$tmp/m2.yaml"
	cd "$tmp" || return 1
	run_dlrun train m2.yaml --data num.csv --epochs 2 --batch-size 2 -o n.safetensors
	expect_rc 0 || return 1
	grep -q 'classes of column' "$tmp/stderr" && fail "numeric labels were named as classes"
	# float targets for mse: one output
	sed 's/out_features: 3/out_features: 1/' m2.yaml >r.yaml
	run_dlrun train r.yaml --data num.csv --loss mse --epochs 2 --batch-size 2 \
		-o r.safetensors -q
	expect_rc 0
	cd - >/dev/null || return 1
}
check "numeric labels stay numbers (class ids; float targets for mse)" t_numeric

t_val_data() {
	head -n 1 "$D/beer.csv" >"$tmp/val.csv"
	grep -m 2 stout "$D/beer.csv" >>"$tmp/val.csv"
	grep -m 1 ale "$D/beer.csv" >>"$tmp/val.csv"
	cd "$tmp" || return 1
	run_dlrun train "$D/mlp.yaml" --data "$D/beer.csv" --val-data val.csv --epochs 1 \
		--log v.jsonl -o v.safetensors -q
	cd - >/dev/null || return 1
	expect_rc 0 || return 1
	grep -q '"val_accuracy":' "$tmp/v.jsonl" || fail "no validation in the log"
}
check "--val-data: a table whose classes map as the training file's" t_val_data

# bad_table NEEDLE... -- ARGS: dlrun train ARGS -o out.safetensors in an
# empty directory: exit 2, one error line with each NEEDLE, nothing written
bad_table() {
	_bt_n=
	while [ "$1" != -- ]; do
		_bt_n="$_bt_n$1
"
		shift
	done
	shift
	rm -rf "$tmp/out"
	mkdir "$tmp/out"
	cd "$tmp/out" || return 1
	run_dlrun train "$@" -o out.safetensors -q
	cd - >/dev/null || return 1
	expect_rc 2
	expect_error_line "$_bt_n"
	only_files "$tmp/out"
}

t_missing_field() {
	printf 'a,b,c,d,kind\n1,2,3,4,ale\n1,2,3,lager\n' >"$tmp/miss.csv"
	bad_table "miss.csv:3:12: the row has 4 fields but the header 5" \
		"no value for column 'kind'" -- "$D/mlp.yaml" --data "$tmp/miss.csv"
}
check "a row with a missing field: file:line:col" t_missing_field

t_not_number() {
	printf 'a,b,c,d,kind\n1,2,3,4,ale\n1,2,x3,4,lager\n' >"$tmp/nan.csv"
	bad_table "nan.csv:3:5: 'x3' in column 'c' is not a number" -- \
		"$D/mlp.yaml" --data "$tmp/nan.csv"
}
check "a feature that is not a number: file:line:col" t_not_number

t_empty_field() {
	printf 'a,b,c,d,kind\n1,2,,4,ale\n' >"$tmp/empty.csv"
	bad_table "empty.csv:2:5: no value for column 'c'" -- \
		"$D/mlp.yaml" --data "$tmp/empty.csv"
}
check "an empty feature field: file:line:col" t_empty_field

t_extra_field() {
	printf 'a,b,c,d,kind\n1,2,3,4,ale,9\n' >"$tmp/extra.csv"
	bad_table "extra.csv:2:13: the row has 6 fields but the header 5" -- \
		"$D/mlp.yaml" --data "$tmp/extra.csv"
}
check "a row with a field too many" t_extra_field

t_bad_label() {
	bad_table "--label 'knd' is not a column of $D/beer.csv; did you mean 'kind'?" -- \
		"$D/mlp.yaml" --data "$D/beer.csv" --label knd
}
check "an unknown --label, with a suggestion" t_bad_label

t_not_id() {
	printf 'a,b,c,d,y\n1,2,3,4,0\n1,2,3,4,1.5\n' >"$tmp/frac.csv"
	bad_table "frac.csv:3:9: label '1.5' is not a class id" -- \
		"$D/mlp.yaml" --data "$tmp/frac.csv"
}
check "a numeric label that is not a class id" t_not_id

t_val_class() {
	printf 'colour,bitterness,sweetness,body,kind\n1,2,3,4,porter\n' >"$tmp/vbad.csv"
	bad_table "vbad.csv:2:9: class 'porter' is not one of the training data's 3" -- \
		"$D/mlp.yaml" --data "$D/beer.csv" --val-data "$tmp/vbad.csv"
}
check "a validation class the training data has not" t_val_class

t_quote() {
	printf 'a,b,c,d,kind\n1,2,3,4,"ale\n' >"$tmp/quote.csv"
	bad_table "quote.csv:2:9: a quoted field that does not end on its line" -- \
		"$D/mlp.yaml" --data "$tmp/quote.csv"
}
check "an unterminated quote" t_quote

t_features() {
	printf 'a,b,kind\n1,2,ale\n3,4,stout\n' >"$tmp/two.csv"
	bad_table "two.csv: 2 feature columns, but the model's input 'x'" -- \
		"$D/mlp.yaml" --data "$tmp/two.csv"
}
check "a table with other features than the model takes" t_features

t_no_rows() {
	printf 'a,b,c,d,kind\n' >"$tmp/header.csv"
	bad_table "header.csv: a header and no rows" -- "$D/mlp.yaml" --data "$tmp/header.csv"
}
check "a header and no rows" t_no_rows

t_label_not_csv() {
	bad_table "--label names a column of a CSV table" "a .npy array" -- \
		"$D/mlp.yaml" --data "$D/x.npy" --labels "$D/y.npy" --label kind
}
check "--label without a CSV table" t_label_not_csv

done_testing
