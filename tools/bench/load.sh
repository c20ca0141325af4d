#!/bin/sh
# Threads under load (issue 7): each row runs at the default thread count
# and at --threads 1, on an idle machine and with a CPU hog pinned to one
# core, and prints the times (median of R runs) and their ratio as a
# Markdown table. Rows: digits-cnn training (2 epochs), LeNet-5 and U-Net
# inference on a stream of S batch-1 arrays.
#
# Usage: tools/bench/load.sh [-r RUNS] [-s STREAM] [DLRUN]   (from the top
# of a built tree; DLRUN defaults to ./src/dlrun)
set -eu
runs=5
stream=200
while getopts r:s: o; do
	case $o in
	r) runs=$OPTARG ;;
	s) stream=$OPTARG ;;
	*) exit 2 ;;
	esac
done
shift $((OPTIND - 1))
dlrun=${1:-./src/dlrun}
ncpu=$(nproc)
tmp=$(mktemp -d)
hog=
cleanup() {
	[ -n "$hog" ] && kill "$hog" 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT

# a stream of $stream copies of one input array
repeat() {
	i=0
	while [ $i -lt "$stream" ]; do
		cat "$1"
		i=$((i + 1))
	done
}
repeat models/lenet5-input.npy >"$tmp/lenet.npy"
repeat models/unet-small-input.npy >"$tmp/unet.npy"

# ms CMD...: wall milliseconds of one run
ms() {
	s=$(date +%s%N)
	"$@" >/dev/null 2>&1
	e=$(date +%s%N)
	echo $(((e - s) / 1000000))
}

# median R CMD...: median of R runs, in ms
median() {
	r=$1
	shift
	i=0
	while [ $i -lt "$r" ]; do
		ms "$@"
		i=$((i + 1))
	done | sort -n | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'
}

row() {
	name=$1
	shift
	d=$(median "$runs" "$@")
	one=$(median "$runs" "$@" --threads 1)
	printf '| %s | %s | %s | %s |\n' "$name" "$d" "$one" \
		"$(awk -v a="$d" -v b="$one" 'BEGIN {printf "%.2f", a / b}')"
}

rows() {
	row "digits-cnn train, 2 epochs" "$dlrun" train models/digits-cnn.yaml \
		--data models/data/digits.npz --epochs 2 -o "$tmp/w.safetensors"
	row "lenet5 infer, $stream x batch 1" sh -c "\"\$0\" infer models/lenet5.yaml \"\$@\" <$tmp/lenet.npy" "$dlrun"
	row "unet-small infer, $stream x batch 1" sh -c "\"\$0\" infer models/unet-small.yaml \"\$@\" <$tmp/unet.npy" "$dlrun"
}

header() {
	echo
	echo "$1"
	echo
	echo "| row | default threads ($ncpu), ms | --threads 1, ms | ratio |"
	echo "| --- | ---: | ---: | ---: |"
}

echo "load benchmark: $(date -u +%Y-%m-%d), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $ncpu CPUs, median of $runs runs"
header "Idle machine:"
rows
taskset -c $((ncpu - 1)) sh -c 'while :; do :; done' &
hog=$!
sleep 0.5
header "A CPU hog pinned to CPU $((ncpu - 1)):"
rows
