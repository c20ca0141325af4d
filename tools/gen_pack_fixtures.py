#!/usr/bin/python3
"""Fixtures for inference on packed weights (src/engine/xwt.h), written to
tests/data/pack/ and run by tests/pack.sh:

  tied.yaml, tied.safetensors   a GPT-style model: token embedding `wte`
                                (37 tokens of width 32), learned positions,
                                one pre-norm causal transformer encoder
                                layer (4 heads, feed-forward 48, GELU), a
                                linear of 21 outputs and back, a final
                                layer norm and an LM head whose weight IS
                                wte.weight (`share:`). Odd sizes on
                                purpose: 37 and 21 rows are whole panels
                                of 16 plus a partial one; 32 and 48 are
                                whole panels only. The tied weight must
                                stay rows (the embedding reads them at the
                                next batch); every other weight is packed.
  x.npy                         7 sequences of 6 token ids (int64)
  y.npy                         PyTorch's logits [7, 6, 37]

float32, fixed seed, byte-stable (numpy-free writers of
tools/gen_train_parity.py).

Run: /usr/bin/python3 tools/gen_pack_fixtures.py
"""

import os
import sys
import textwrap

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_train_parity import f32, safetensors_bytes, npy_any, write  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
OUT = os.path.join(ROOT, "tests", "data", "pack")
V, T, D, H, FF, MID, N = 37, 6, 32, 4, 48, 21, 7

YAML = textwrap.dedent("""
    # tools/gen_pack_fixtures.py: a GPT-style model with an LM head tied
    # to its embedding, at sizes that are not multiples of 16
    inputs:
      idx: {shape: [6], dtype: int}
    layers:
      - name: wte
        embedding: {num_embeddings: 37, embedding_dim: 32}
      - name: wpe
        positional_encoding: {kind: learned, max_len: 6}
      - name: h
        transformer_encoder_layer: {nhead: 4, dim_feedforward: 48, dropout: 0.0,
                                    activation: gelu, norm_first: true, causal: true}
      - name: mid
        linear: {out_features: 21}
      - name: back
        linear: {out_features: 32}
      - name: ln_f
        layer_norm: {}
      - name: lm_head
        share: {weight: wte.weight}
        linear: {out_features: 37, bias: false}
    """).lstrip()


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(V, D)
        self.wpe = nn.Embedding(T, D)
        self.h = nn.TransformerEncoderLayer(D, H, FF, dropout=0.0, activation="gelu",
                                            batch_first=True, norm_first=True)
        self.mid = nn.Linear(D, MID)
        self.back = nn.Linear(MID, D)
        self.ln_f = nn.LayerNorm(D)
        self.lm_head = nn.Linear(D, V, bias=False)
        self.lm_head.weight = self.wte.weight

    def forward(self, idx):
        x = self.wte(idx) + self.wpe.weight[: idx.shape[1]]
        mask = torch.triu(torch.full((idx.shape[1], idx.shape[1]), float("-inf")), 1)
        x = self.h(x, src_mask=mask)
        x = self.back(self.mid(x))
        return self.lm_head(self.ln_f(x))


def main():
    torch.manual_seed(0)
    m = Model().eval()
    with torch.no_grad():
        for p in m.parameters():   # layer norms away from the identity
            p.add_(0.1 * torch.randn_like(p))
    idx = torch.randint(0, V, (N, T), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        y = m(idx)
    sd = {k: f32(v) for k, v in m.state_dict().items() if k != "lm_head.weight"}
    os.makedirs(OUT, exist_ok=True)
    write(os.path.join(OUT, "tied.yaml"), YAML.encode())
    write(os.path.join(OUT, "tied.safetensors"), safetensors_bytes(sd))
    write(os.path.join(OUT, "x.npy"), npy_any(idx))
    write(os.path.join(OUT, "y.npy"), npy_any(y))


if __name__ == "__main__":
    main()
