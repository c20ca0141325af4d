#!/bin/sh
# Data-parallel training speed (issue 12): samples per second of `dlrun
# train` for the digits CNN and a small GPT (tools/bench/gpt-small.yaml,
# random tokens) at 1 and 2 processes of one thread each, and the time
# rank 0 spent in MPI_Allreduce, as a Markdown table. The rate is the
# training samples over the run's time less a run of 0 epochs (start-up,
# loading), median of R runs.
#
# Usage: tools/bench/mpi.sh [-r RUNS] [DLRUN]   (from the top of a tree
# built with MPI; DLRUN defaults to ./src/dlrun; needs /usr/bin/python3 with
# numpy for the token data)
set -eu
runs=3
while getopts r: o; do
	case $o in
	r) runs=$OPTARG ;;
	*) exit 2 ;;
	esac
done
shift $((OPTIND - 1))
dlrun=${1:-./src/dlrun}
case $dlrun in /*) ;; *) dlrun=$(pwd)/$dlrun ;; esac
top=$(pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

"$dlrun" --version | grep -F '(MPI: yes)' >/dev/null || {
	echo "mpi.sh: $dlrun is built without MPI" >&2
	exit 2
}
/usr/bin/python3 -c '
import numpy as np, sys
r = np.random.default_rng(0)
t = r.integers(0, 96, (1024, 65))
np.savez(sys.argv[1], x=t[:, :64], y=t[:, 1:])' "$tmp/tokens.npz"

now() { date +%s.%N; }

# run NP MODEL DATA EPOCHS BATCH: prints "seconds allreduce_seconds"
run() {
	_np=$1 _m=$2 _d=$3 _e=$4 _b=$5
	_t0=$(now)
	if [ "$_np" = 1 ]; then
		"$dlrun" train "$_m" --data "$_d" --epochs "$_e" --batch-size "$_b" --lr-schedule constant \
			--threads 1 --no-progress -o "$tmp/out.st" 2>"$tmp/err"
	else
		mpirun --oversubscribe -np "$_np" "$dlrun" train "$_m" --data "$_d" \
			--epochs "$_e" --batch-size "$_b" --lr-schedule constant --threads 1 -o "$tmp/out.st" \
			2>"$tmp/err" >/dev/null
	fi
	_t1=$(now)
	_ar=$(sed -n 's/^mpi: .*, \([0-9.]*\) s in MPI_Allreduce.*/\1/p' "$tmp/err")
	echo "$_t0 $_t1 ${_ar:-0}" | awk '{ printf "%.4f %.4f\n", $2 - $1, $3 }'
}

# median of the first column's lines on stdin (with its second column)
median() {
	sort -n | awk '{ a[NR] = $0 } END { print a[int((NR + 1) / 2)] }'
}

# row NAME MODEL DATA SAMPLES EPOCHS BATCH
row() {
	for np in 1 2; do
		base=$(for i in $(seq "$runs"); do run $np "$2" "$3" 0 "$6"; done | median)
		full=$(for i in $(seq "$runs"); do run $np "$2" "$3" "$5" "$6"; done | median)
		echo "$base $full" | awk -v name="$1" -v np=$np -v n="$4" -v e="$5" -v b="$6" '{
			t = $3 - $1; rate = n * e / t
			printf "| %s | %d | %d | %.2f | %.0f | %.3f | %.0f%% |\n",
				name, b, np, t, rate, $4, 100 * $4 / t }'
	done
}

echo "| model | global batch | processes | train s | samples/s | MPI_Allreduce s (rank 0) | share |"
echo "| --- | --- | --- | --- | --- | --- | --- |"
row digits-cnn "$top/models/digits-cnn.yaml" "$top/models/data/digits.npz" 1437 3 32
row gpt-small "$top/tools/bench/gpt-small.yaml" "$tmp/tokens.npz" 1024 2 32
