#!/usr/bin/python3
"""Fixtures for training on a text corpus (tests/text.sh), in tests/data/text:

- corpus.txt: a small text; char.yaml: a character model whose vocab has
  one token per character and the two-character token "th" (so encoding is
  by longest match);
- windows.npz: the windows dlrun train draws from corpus.txt with --seed 3,
  --context 8, for 2 epochs, as x (input ids) and y (labels), in the order
  they are drawn; training on it with --no-shuffle and the same batch size
  must give the same weights as training on the text.

The windows are drawn as nanoGPT's get_batch draws them:

    ix = torch.randint(len(data) - block_size, (batch_size,))
    x = torch.stack([data[i:i+block_size] for i in ix])
    y = torch.stack([data[i+1:i+1+block_size] for i in ix])

with torch's generator replaced by dlrun's (src/engine/rng.c: xoshiro256**
seeded through splitmix64; an integer below n by rejection of the top
UINT64_MAX % n values, then modulo), seeded per epoch e with
seed * 1000003 + e + 1, one draw per window, len(data) // block_size
windows an epoch. Python's integers reproduce it bit for bit below.
"""
import os
import sys

import numpy as np

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "text")
M64 = (1 << 64) - 1


class Rng:
    """dl_rng: xoshiro256** seeded through splitmix64."""

    def __init__(self, seed):
        x = seed & M64
        self.s = []
        for _ in range(4):
            x = (x + 0x9E3779B97F4A7C15) & M64
            z = x
            z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
            z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
            self.s.append(z ^ (z >> 31))

    @staticmethod
    def _rotl(x, k):
        return ((x << k) | (x >> (64 - k))) & M64

    def next(self):
        s = self.s
        result = (self._rotl((s[1] * 5) & M64, 7) * 9) & M64
        t = (s[1] << 17) & M64
        s[2] ^= s[0]
        s[3] ^= s[1]
        s[1] ^= s[2]
        s[0] ^= s[3]
        s[2] ^= t
        s[3] = self._rotl(s[3], 45)
        return result

    def below(self, n):
        limit = M64 - M64 % n
        while True:
            x = self.next()
            if x < limit:
                return x % n


def encode(text, vocab):
    """Longest match from the left, as dlrun's vocabulary encodes."""
    ids = {}
    for i, t in enumerate(vocab):
        ids.setdefault(t.encode(), i)
    longest = max(len(t.encode()) for t in vocab)
    b = text.encode()
    out, i = [], 0
    while i < len(b):
        for k in range(min(longest, len(b) - i), 0, -1):
            if b[i:i + k] in ids:
                out.append(ids[b[i:i + k]])
                i += k
                break
        else:
            raise ValueError("uncovered byte at %d" % i)
    return np.array(out, dtype=np.int64)


def get_batch(data, block_size, ix):
    x = np.stack([data[i:i + block_size] for i in ix])
    y = np.stack([data[i + 1:i + 1 + block_size] for i in ix])
    return x, y


def windows(data, block_size, seed, epochs):
    xs, ys = [], []
    n = len(data) // block_size
    for e in range(epochs):
        r = Rng(seed * 1000003 + e + 1)
        ix = [r.below(len(data) - block_size) for _ in range(n)]
        x, y = get_batch(data, block_size, ix)
        xs.append(x)
        ys.append(y)
    return np.concatenate(xs), np.concatenate(ys)


VOCAB = ["\n", " ", ".", "a", "e", "h", "i", "n", "o", "r", "s", "t", "é", "th"]

MODEL = """\
# A character model for tests/text.sh (made by tools/gen_text_fixtures.py):
# "th" is one token, so the text is encoded by longest match.
inputs: {idx: {shape: [T], dtype: int}}
vocab: ["\\n", " ", ".", a, e, h, i, n, o, r, s, t, "é", th]
layers:
  - embedding: {num_embeddings: 14, embedding_dim: 8}
  - positional_encoding: {kind: learned, max_len: 8}
  - linear: {out_features: 14}
"""


def main():
    os.makedirs(OUT, exist_ok=True)
    words = ["the", "then", "rite", "near", "other", "sheet", "née", "thin", "tea"]
    rng = Rng(7)
    lines = []
    for _ in range(24):
        lines.append(" ".join(words[rng.below(len(words))] for _ in range(5)) + ".")
    text = "\n".join(lines) + "\n"
    T = 8
    # cut to 64 windows an epoch: 4 batches of 16, so that two epochs of
    # the text are one epoch of windows.npz with the same batches
    while len(encode(text, VOCAB)) // T > 64:
        text = text[:-1]
    with open(os.path.join(OUT, "corpus.txt"), "w", encoding="utf-8") as f:
        f.write(text)
    with open(os.path.join(OUT, "char.yaml"), "w", encoding="utf-8") as f:
        f.write(MODEL)
    data = encode(text, VOCAB)
    if len(data) // T != 64:
        sys.exit("the text gives %d windows, not 64" % (len(data) // T))
    x, y = windows(data, T, 3, 2)
    np.savez(os.path.join(OUT, "windows.npz"), x=x, y=y)
    print("%d tokens, %d windows an epoch" % (len(data), len(data) // T))


if __name__ == "__main__":
    main()
