#!/usr/bin/python3
"""PyTorch references for transformer_encoder_layer and
transformer_decoder_layer: tests/fixtures/transformer/<case>/ with
model.yaml, model.safetensors, in.npy and out.npy, as tests/fixtures.sh
expects. The reference is nn.TransformerEncoderLayer /
nn.TransformerDecoderLayer (batch_first=True) in eval mode, in float64 on
float32 values, with a causal self-attention mask where the case has
`causal: true`; layer-norm parameters are drawn at random so they matter.
Byte-stable.

Run with Debian's python3-torch: /usr/bin/python3 tools/gen_transformer_fixtures.py
"""

import collections
import os
import sys

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dltools  # noqa: E402

TOP = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

# name, decoder, T, S, D, heads, ff, activation, norm_first, causal, eps, batch, layers, args
CASES = [
    ("encoder", False, 5, 0, 8, 2, 16, "relu", False, False, 1e-5, 3, 1, ""),
    ("encoder_b1_gelu_causal", False, 6, 0, 6, 3, 10, "gelu", False, True, 1e-5, 1, 1, ""),
    ("encoder_norm_first", False, 4, 0, 8, 4, 12, "relu", True, False, 1e-3, 2, 1, ""),
    ("encoder_stack_bs2", False, 5, 0, 4, 1, 8, "gelu", True, True, 1e-5, 5, 2, "--batch-size 2"),
    ("decoder", True, 4, 6, 8, 2, 16, "relu", False, False, 1e-5, 3, 1, ""),
    ("decoder_causal_b1", True, 5, 3, 6, 2, 12, "gelu", False, True, 1e-5, 1, 1, ""),
    ("decoder_norm_first", True, 3, 5, 8, 4, 16, "relu", True, True, 1e-4, 2, 1, "--batch-size 1"),
]


def f32(m):
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(p.float().double())
    return m


def layer_yaml(case, name_line):
    (name, dec, T, S, D, H, F, act, pre, causal, eps, B, L, args) = case
    kind = "transformer_decoder_layer" if dec else "transformer_encoder_layer"
    hp = "{nhead: %d, dim_feedforward: %d" % (H, F)
    if act != "relu":
        hp += ", activation: %s" % act
    if pre:
        hp += ", norm_first: true"
    if causal:
        hp += ", causal: true"
    if eps != 1e-5:
        hp += ", layer_norm_eps: %g" % eps
    hp += "}"
    return "%s%s: %s\n" % (name_line, kind, hp)


def main():
    for ci, case in enumerate(CASES):
        (name, dec, T, S, D, H, F, act, pre, causal, eps, B, L, args) = case
        torch.manual_seed(500 + ci)
        cls = nn.TransformerDecoderLayer if dec else nn.TransformerEncoderLayer
        layers = [cls(D, H, F, dropout=0.1, activation=act, layer_norm_eps=eps,
                      batch_first=True, norm_first=pre).double().eval() for _ in range(L)]
        g = torch.Generator().manual_seed(600 + ci)
        for m in layers:
            f32(m)
            with torch.no_grad():
                for k, p in m.named_parameters():
                    if k.startswith("norm"):
                        p.copy_((p + 0.3 * torch.randn(p.shape, generator=g, dtype=torch.float64)).float().double())
        x = torch.randn(B, T, D, generator=g, dtype=torch.float64).float().double()
        mem = torch.randn(B, S, D, generator=g, dtype=torch.float64).float().double() if dec else None
        mask = torch.triu(torch.ones(T, T, dtype=torch.bool), 1) if causal else None
        with torch.no_grad():
            y = x
            for m in layers:
                y = m(y, mem, tgt_mask=mask) if dec else m(y, src_mask=mask)
        state = collections.OrderedDict()
        for li, m in enumerate(layers):
            scope = ("1.%d.0" % li) if L > 1 else "layer"
            for k, v in m.state_dict().items():
                state["%s.%s" % (scope, k)] = v.float().numpy()
        d = os.path.join(TOP, "tests", "fixtures", "transformer", name)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "model.yaml"), "w") as f:
            f.write("# %s (tools/gen_transformer_fixtures.py)\ninputs:\n  x: {shape: [%d, %d]}\n" % (name, T, D))
            if dec:
                f.write("  memory: {shape: [%d, %d]}\n" % (S, D))
            f.write("layers:\n")
            if L > 1:
                f.write("  - identity\n  - repeat:\n      times: %d\n      body:\n        - " % L)
                f.write(layer_yaml(case, ""))
            else:
                f.write("  - name: layer\n")
                if dec:
                    f.write("    in: [x, memory]\n")
                f.write(layer_yaml(case, "    "))
        dltools.write_safetensors(os.path.join(d, "model.safetensors"), state)
        arrays = [x.float().numpy()] + ([mem.float().numpy()] if dec else [])
        dltools.write_npys(os.path.join(d, "in.npy"), arrays)
        dltools.write_npys(os.path.join(d, "out.npy"), [y.float().numpy()])
        if args:
            with open(os.path.join(d, "args"), "w") as f:
                f.write(args + "\n")
        print(d)


if __name__ == "__main__":
    main()
