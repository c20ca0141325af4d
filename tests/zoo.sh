#!/bin/sh
# The model zoo (models/zoo/, written by tools/gen_zoo.py), printing TAP.
# For every models/zoo/NAME.yaml:
# - `dlrun infer` on NAME-input.npy gives NAME-expected.npy (PyTorch's
#   output, within 1e-5 relative; for the relu selection networks the
#   formula where(c, a, b), bit for bit: npycmp tolerance 0 and cmp; so
#   are tests/data/relu_select/*, the same for other n and C);
# - one training step (`--loss mse`, the expected output as labels,
#   starting from fresh weights) runs, logs its loss and writes weights;
# - `dlrun draw` gives NAME.svg byte for byte (the pictures are current;
#   `make images` re-draws them).
# Under DLRUN_VALGRIND=yes infer and train run under valgrind (about 80
# runs of a second or two each), draw does not.
#
# Environment: see tests/lib.sh; NPYCMP (tests/npycmp) is needed.

# shellcheck source=tests/lib.sh
. "${srcdir:-$(dirname "$0")/..}/tests/lib.sh"

zoo=$srcdir/models/zoo

if [ -z "$NPYCMP" ]; then
	echo "1..0 # SKIP NPYCMP (tests/npycmp) is not built"
	exit 0
fi

# t_infer NAME RTOL [DIR]
t_infer() {
	_d=${3:-$zoo}
	run_dlrun infer "$_d/$1.yaml" <"$_d/$1-input.npy"
	expect_rc 0 || return 1
	"$NPYCMP" "$tmp/stdout" "$_d/$1-expected.npy" "$2" >"$tmp/cmp" 2>&1 ||
		fail "$(cat "$tmp/cmp")"
	if [ "$2" = 0 ]; then
		cmp -s "$tmp/stdout" "$_d/$1-expected.npy" ||
			fail "equal values but not the same bytes as $1-expected.npy"
	fi
	return 0
}

# t_train NAME: one step of mse training from fresh weights (dlrun init
# semantics, so the loss against the expected output is not 0) runs,
# logs a loss and writes weights
t_train() {
	cat "$zoo/$1-input.npy" "$zoo/$1-expected.npy" >"$tmp/data.npy"
	run_dlrun train "$zoo/$1.yaml" --data - --loss mse --seed 1 \
		--epochs 1 --batch-size 1024 --no-shuffle --no-progress \
		--log "$tmp/log.jsonl" -o "$tmp/trained.safetensors" <"$tmp/data.npy"
	expect_rc 0 || return 1
	[ -s "$tmp/trained.safetensors" ] || fail "no weights written"
	grep '"loss":[0-9]' "$tmp/log.jsonl" >/dev/null ||
		fail "no loss in the log: $(cat "$tmp/log.jsonl")"
	return 0
}

# t_draw NAME: the committed picture is what dlrun draws now (never under
# valgrind: the bytes are the same, and tests/draw.sh runs draw under it)
t_draw() {
	# shellcheck disable=SC2034 # last_cmd and rc are read by check
	last_cmd="dlrun draw $zoo/$1.yaml -o $tmp/pic.svg"
	"$DLRUN" draw "$zoo/$1.yaml" -o "$tmp/pic.svg" >"$tmp/stdout" 2>"$tmp/stderr"
	rc=$?
	expect_rc 0 || return 1
	cmp -s "$tmp/pic.svg" "$zoo/$1.svg" ||
		fail "models/zoo/$1.svg is not current: run 'make images'"
	return 0
}

n=0
for y in "$zoo"/*.yaml; do
	name=$(basename "$y" .yaml)
	case $name in
	relu-select*) tol=0 how="where(c, a, b) bit for bit" ;;
	*) tol=1e-5 how="PyTorch within 1e-5" ;;
	esac
	check "zoo/$name matches $how" t_infer "$name" "$tol"
	check "zoo/$name trains one step" t_train "$name"
	check "zoo/$name.svg is current" t_draw "$name"
	n=$((n + 1))
done

# the relu selection for more n and C (powers of two, 2^-10 to 2^20) and
# each form, on grids of multiples of C 2^-23 with |a|, |b| < C
rs=$srcdir/tests/data/relu_select
for y in "$rs"/*.yaml; do
	name=$(basename "$y" .yaml)
	check "relu selection $name is where(c, a, b) bit for bit" \
		t_infer "$name" 0 "$rs"
done

# the table of models/zoo/README.md lists every model
t_readme() {
	for y in "$zoo"/*.yaml; do
		grep -F "[$(basename "$y")]" "$zoo/README.md" >/dev/null ||
			fail "models/zoo/README.md does not list $(basename "$y")"
	done
	[ "$n" -ge 36 ] || fail "only $n zoo models"
	return 0
}
check "models/zoo/README.md lists all $n models" t_readme

done_testing
