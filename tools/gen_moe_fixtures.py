#!/usr/bin/python3
"""PyTorch references for mixture_of_experts (model-format.md, "Gating and
mixtures"): tests/fixtures/moe/<case>/ with model.yaml, model.safetensors,
in.npy and out.npy, as tests/fixtures.sh expects. The reference routes each
token vector to the k largest gate logits (x W_g^T), softmaxes those k
logits, and sums the experts' outputs weighted by them, in float64 on
float32 values. Gate weights are drawn at random (dlrun init's zeros would
tie every logit). Byte-stable.

Run with Debian's python3-torch: /usr/bin/python3 tools/gen_moe_fixtures.py
"""

import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dltools  # noqa: E402

TOP = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

CASES = [
    # name, per-sample shape, batch, experts, k, hidden, out, body activation, args
    ("moe_k2", [5, 6], 3, 4, 2, 8, 3, "relu", ""),
    ("moe_k1_b1", [4, 6], 1, 3, 1, 5, 6, "tanh", ""),
    ("moe_k3_2d", [6], 4, 5, 3, 7, 2, "gelu", ""),
    ("moe_bs2", [3, 4], 5, 4, 2, 6, 4, "silu", "--batch-size 2"),
]

ACT = {"relu": torch.relu, "tanh": torch.tanh, "silu": torch.nn.functional.silu,
       "gelu": torch.nn.functional.gelu}


def f32(t):
    return t.float().double()


def main():
    for ci, (name, shape, batch, E, k, H, O, act, args) in enumerate(CASES):
        g = torch.Generator().manual_seed(1000 + ci)
        D = shape[-1]
        w = {"moe.gate.weight": f32(torch.randn(E, D, generator=g))}
        for e in range(E):
            w["moe.experts.%d.0.weight" % e] = f32(torch.randn(H, D, generator=g) / D ** 0.5)
            w["moe.experts.%d.0.bias" % e] = f32(torch.randn(H, generator=g) * 0.1)
            w["moe.experts.%d.2.weight" % e] = f32(torch.randn(O, H, generator=g) / H ** 0.5)
            w["moe.experts.%d.2.bias" % e] = f32(torch.randn(O, generator=g) * 0.1)
        x = f32(torch.randn([batch] + shape, generator=g))
        tokens = x.reshape(-1, D)
        logits = tokens @ w["moe.gate.weight"].T
        top, idx = logits.topk(k, dim=-1)
        assert (top[:, :-1] > top[:, 1:]).all() if k > 1 else True
        gates = torch.softmax(top, dim=-1)
        y = torch.zeros(tokens.shape[0], O, dtype=torch.float64)
        for e in range(E):
            h = ACT[act](tokens @ w["moe.experts.%d.0.weight" % e].T + w["moe.experts.%d.0.bias" % e])
            ye = h @ w["moe.experts.%d.2.weight" % e].T + w["moe.experts.%d.2.bias" % e]
            for s in range(k):
                sel = (idx[:, s] == e).double().unsqueeze(1)
                y += sel * gates[:, s:s + 1] * ye
        y = y.reshape([batch] + shape[:-1] + [O])
        d = os.path.join(TOP, "tests", "fixtures", "moe", name)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "model.yaml"), "w") as f:
            f.write("# %s: mixture_of_experts, %d experts, top %d (tools/gen_moe_fixtures.py)\n"
                    "inputs:\n  x: {shape: %s}\nlayers:\n  - name: moe\n"
                    "    mixture_of_experts:\n      num_experts: %d\n      k: %d\n"
                    "      expert:\n        - linear: {out_features: %d}\n        - %s\n"
                    "        - linear: {out_features: %d}\n"
                    % (name, E, k, shape, E, k, H, act, O))
        dltools.write_safetensors(os.path.join(d, "model.safetensors"),
                                  {key: v.numpy() for key, v in w.items()})
        dltools.write_npys(os.path.join(d, "in.npy"), [x.numpy()])
        dltools.write_npys(os.path.join(d, "out.npy"), [y.numpy()])
        if args:
            with open(os.path.join(d, "args"), "w") as f:
                f.write(args + "\n")
        print(d)


if __name__ == "__main__":
    main()
