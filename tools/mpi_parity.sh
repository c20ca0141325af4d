#!/bin/sh
# How far `mpirun -np NP dlrun train` ends from one process, seed by seed:
# the figures behind tests/data/mpi/digits-cnn-smooth.yaml and dlrun(1)'s
# data-parallel section. Trains MODEL for one epoch of the digits with
# tests/mpi.sh's flags (SGD, lr 0.05, momentum 0.9, batch 30, one thread,
# --sync-batch-norm) once in one process and once in NP, and prints the
# largest relative gap (inf norm, per tensor) between the two weight files.
#
# Usage (from the source tree, dlrun built with MPI):
#   tools/mpi_parity.sh [-d DLRUN] [-m MODEL] [-n NP] [-l LR] SEED...
#   tools/mpi_parity.sh 0 1 2 3 4 5
#   tools/mpi_parity.sh -m tests/data/mpi/digits-cnn-smooth.yaml -n 3 0 1 2
set -eu
dlrun=./src/dlrun
model=models/digits-cnn.yaml
np=2
lr=0.05
while getopts d:m:n:l: o; do
	case $o in
	d) dlrun=$OPTARG ;;
	m) model=$OPTARG ;;
	n) np=$OPTARG ;;
	l) lr=$OPTARG ;;
	*) exit 2 ;;
	esac
done
shift $((OPTIND - 1))
[ $# -gt 0 ] || { echo "usage: $0 [-d DLRUN] [-m MODEL] [-n NP] [-l LR] SEED..." >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_ALLOW_RUN_AS_ROOT OMPI_ALLOW_RUN_AS_ROOT_CONFIRM

for seed in "$@"; do
	set -- "$model" --data models/data/digits.npz --epochs 1 --batch-size 30 \
		--threads 1 -q --optimizer sgd --lr "$lr" --momentum 0.9 \
		--sync-batch-norm --seed "$seed"
	"$dlrun" train "$@" -o "$tmp/one.st"
	mpirun --oversubscribe -np "$np" "$dlrun" train "$@" -o "$tmp/np.st"
	/usr/bin/python3 - "$tmp/one.st" "$tmp/np.st" "$seed" "$np" <<'EOF'
import sys
import numpy as np
sys.path.insert(0, "tools")
from dltools import read_safetensors

a, b = read_safetensors(sys.argv[1]), read_safetensors(sys.argv[2])
gap, name = max((float(np.abs(a[k] - b[k]).max() / max(np.abs(a[k]).max(), 1e-30)), k)
                for k in a)
print(f"seed {sys.argv[3]}, {sys.argv[4]} processes: {gap:.2e} ({name})"
      + ("  over 1e-5" if gap > 1e-5 else ""))
EOF
done
