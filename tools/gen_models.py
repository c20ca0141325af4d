#!/usr/bin/python3
"""Writes the example model of the README's quick start: models/mlp.yaml,
its weights models/mlp.safetensors (PyTorch's default nn.Linear
initialisation after torch.manual_seed(0)), a batch of 3 samples
models/mlp-input.npy and PyTorch's output for it, models/mlp-expected.npy.
Prints PyTorch's parameter count. The output is byte-stable.
Run with Debian's python3-torch: /usr/bin/python3 tools/gen_models.py
"""

import collections
import os
import sys

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dltools  # noqa: E402

MLP_YAML = """\
# A small multilayer perceptron: 16 features in, 4 scores out.
# Weights: mlp.safetensors (the default path: this file's name with
# .safetensors), made by tools/gen_models.py.
name: mlp
inputs:
  x: {shape: [16]}
layers:
  - name: fc1
    linear: {out_features: 32}
  - relu
  - name: fc2
    linear: {out_features: 32}
  - gelu
  - linear: {out_features: 4}
"""


def mlp():
    torch.manual_seed(0)
    return nn.Sequential(collections.OrderedDict([
        ("fc1", nn.Linear(16, 32)),
        ("1", nn.ReLU()),
        ("fc2", nn.Linear(32, 32)),
        ("3", nn.GELU()),
        ("4", nn.Linear(32, 4)),
    ]))


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    out = os.path.normpath(os.path.join(here, "..", "models"))
    os.makedirs(out, exist_ok=True)

    model = mlp().eval()
    weights = model.state_dict()
    x = torch.randn(3, 16, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        # float64 on the float32 values: the exact answer, rounded once
        y = model.double()(x.double())

    with open(os.path.join(out, "mlp.yaml"), "w") as f:
        f.write(MLP_YAML)
    dltools.write_safetensors(os.path.join(out, "mlp.safetensors"), weights)
    dltools.write_npys(os.path.join(out, "mlp-input.npy"), [x])
    dltools.write_npys(os.path.join(out, "mlp-expected.npy"), [y])

    count = sum(p.numel() for p in mlp().parameters())
    print("models/mlp: %d parameters (%s)" % (count, ", ".join(
        "%s %s" % (k, list(v.shape)) for k, v in weights.items())))


if __name__ == "__main__":
    main()
