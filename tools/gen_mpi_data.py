#!/usr/bin/python3
"""Data for tests/mpi.sh (deterministic; run from the top directory):

tests/data/mpi/tokens.npz      61 token sequences of 8 ids < 16 (x) and their
                               next tokens (y) for gpt-tiny.yaml: a fixed
                               rule, next = 3 prev + 1 mod 16, 10% noise
tests/data/mpi/shard-0.npz,    digits 0-99 and 100-199 of models/data/digits.npz,
tests/data/mpi/shard-1.npz     one file per process (--data 'shard-{rank}.npz')
tests/data/mpi/interleaved.npz the same 200 samples in the order one process
                               sees them with --no-shuffle and a global batch
                               of 20: ten of shard 0, then ten of shard 1, ...
"""
import numpy as np

out = "tests/data/mpi/"
rng = np.random.default_rng(12)
n = 61
x = np.zeros((n, 9), dtype=np.int64)
x[:, 0] = rng.integers(0, 16, n)
for t in range(1, 9):
    x[:, t] = (x[:, t - 1] * 3 + 1) % 16
    flip = rng.random(n) < 0.1
    x[flip, t] = rng.integers(0, 16, flip.sum())
np.savez(out + "tokens.npz", x=x[:, :8].astype(np.int64), y=x[:, 1:].astype(np.int64))

d = np.load("models/data/digits.npz")
dx, dy = d["x"][:200].astype(np.float32), d["y"][:200].astype(np.int64)
np.savez(out + "shard-0.npz", x=dx[:100], y=dy[:100])
np.savez(out + "shard-1.npz", x=dx[100:], y=dy[100:])
order = np.concatenate([np.r_[k * 10:k * 10 + 10, 100 + k * 10:100 + k * 10 + 10]
                        for k in range(10)])
np.savez(out + "interleaved.npz", x=dx[order], y=dy[order])
