#!/usr/bin/python3
"""Generates the PyTorch fixtures of dlrun's fused inference epilogues
under tests/fixtures/fuse/ (src/engine/fuse.c): convolutions followed by
batch norm (folded at inference, non-trivial running statistics), relu,
relu6, silu, gelu and residual adds; a Winograd-sized 3x3 convolution; a
depthwise one; conv1d; linear + bias + gelu + residual; dropouts (the
identity at inference) inside chains and on their own; a pre-norm
transformer encoder layer, whose inner graph is fused. tests/fixtures.sh
runs them through `dlrun infer` (fused), tests/fuse.sh also with
DLRUN_FUSE=0 (unfused) and compares the two.

References: the PyTorch modules in eval() and float64 on float32 weights
and inputs, rounded to float32. Odd sizes; batch 1 and 3. Seeds are fixed
per case: re-running gives the same bytes.
Run with Debian's python3-torch: /usr/bin/python3 tools/gen_fuse_fixtures.py
"""

import os
import shutil
import sys
import zlib

import numpy as np
import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dltools  # noqa: E402

FAMILY = "fuse"
TOP = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def seeded(name):
    torch.manual_seed(zlib.crc32((FAMILY + "/" + name).encode("ascii")))


def f32(t):
    return t.detach().to(torch.float32).to(torch.float64)


def randomise_bn(m):
    with torch.no_grad():
        for mod in m.modules():
            if isinstance(mod, (nn.BatchNorm1d, nn.BatchNorm2d)):
                mod.running_mean.uniform_(-0.5, 0.5)
                mod.running_var.uniform_(0.3, 2.0)
                if mod.weight is not None:
                    mod.weight.uniform_(0.5, 1.5)
                    mod.bias.uniform_(-0.5, 0.5)


class Res(nn.Module):
    """y = post(body(x) + x)"""

    def __init__(self, body, post=None):
        super().__init__()
        self.body = body
        self.post = post

    def forward(self, x):
        y = self.body(x) + x
        return self.post(y) if self.post is not None else y


def write(name, yaml_text, make, shape, batch):
    """make: the module's constructor, called after seeding (so its
    initial weights, like the rest, depend on the case alone)"""
    seeded(name)
    module = make()
    randomise_bn(module)
    module = module.double().eval()
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(f32(p))
        x = f32(torch.randn([batch] + shape, dtype=torch.float64))
        y = module(x)
    d = os.path.join(TOP, "tests", "fixtures", FAMILY, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    with open(os.path.join(d, "model.yaml"), "w") as f:
        f.write(yaml_text)
    state = {k: v.detach().numpy().astype(np.float32) for k, v in module.state_dict().items()
             if not k.endswith("num_batches_tracked")}
    if state:
        dltools.write_safetensors(os.path.join(d, "model.safetensors"), state)
    np.save(os.path.join(d, "in.npy"), x.numpy().astype(np.float32))
    np.save(os.path.join(d, "out.npy"), y.numpy().astype(np.float32))
    with open(os.path.join(d, "rtol"), "w") as f:
        f.write("1e-5\n")


def conv_bn(c_in, c_out, k, act, **kw):
    return [nn.Conv2d(c_in, c_out, k, **kw), nn.BatchNorm2d(c_out, eps=1e-3)] + ([act] if act else [])


RES_YAML = """# conv2d (bias) + batch_norm2d + relu + conv2d + batch_norm2d + add + relu:
# one fused chain each (tools/gen_fuse_fixtures.py)
inputs:
  x: {shape: [6, 9, 7]}
layers:
  - name: block_in
    identity: {}
  - name: body
    sequential:
      - conv2d: {out_channels: 6, kernel_size: 3, padding: 1}
      - batch_norm2d: {eps: 0.001}
      - relu: {}
      - conv2d: {out_channels: 6, kernel_size: 3, padding: 1, bias: false}
      - batch_norm2d: {eps: 0.001}
  - in: [body, block_in]
    add: {}
  - relu: {}
"""


class ResTop(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(6, 6, 3, padding=1), nn.BatchNorm2d(6, eps=1e-3),
                                  nn.ReLU(), nn.Conv2d(6, 6, 3, padding=1, bias=False),
                                  nn.BatchNorm2d(6, eps=1e-3))

    def forward(self, x):
        return torch.relu(self.body(x) + x)


WINO_YAML = """# a 3x3 convolution of 17 -> 19 channels that runs as Winograd, batch
# norm folded, relu6 (tools/gen_fuse_fixtures.py)
inputs:
  x: {shape: [17, 11, 9]}
layers:
  - conv2d: {out_channels: 19, kernel_size: 3, padding: 1, bias: false}
  - batch_norm2d: {}
  - relu6: {}
  - conv2d: {out_channels: 19, kernel_size: 1}
  - silu: {}
"""

DW_YAML = """# mobilenet's depthwise 3x3 + batch norm + relu6, then a strided conv,
# batch norm and silu (tools/gen_fuse_fixtures.py)
inputs:
  x: {shape: [5, 13, 11]}
layers:
  - conv2d: {out_channels: 5, kernel_size: 3, padding: 1, groups: 5, bias: false}
  - batch_norm2d: {}
  - relu6: {}
  - conv2d: {out_channels: 7, kernel_size: 3, stride: 2, padding: 1}
  - batch_norm2d: {}
  - gelu: {approximate: tanh}
"""

CONV1D_YAML = """# conv1d + batch_norm1d + gelu (tools/gen_fuse_fixtures.py)
inputs:
  x: {shape: [4, 15]}
layers:
  - conv1d: {out_channels: 6, kernel_size: 3, padding: 2, dilation: 2}
  - batch_norm1d: {}
  - gelu: {}
"""

LINEAR_YAML = """# linear + bias + gelu + residual add (the chain's value second) + relu
# (tools/gen_fuse_fixtures.py)
inputs:
  x: {shape: [3, 13]}
layers:
  - name: block_in
    identity: {}
  - name: fc
    linear: {out_features: 13}
  - name: act
    gelu: {}
  - in: [block_in, act]
    add: {}
  - relu: {}
"""


class LinRes(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(13, 13)

    def forward(self, x):
        return torch.relu(x + nn.functional.gelu(self.fc(x)))


DROP_YAML = """# dropouts at inference: one after a layer norm (skipped on its own), one
# inside each linear's chain: linear + gelu + dropout, linear + dropout +
# residual add (tools/gen_fuse_fixtures.py)
inputs:
  x: {shape: [4, 13]}
layers:
  - name: block_in
    identity: {}
  - name: ln
    layer_norm: {}
  - dropout: {p: 0.2}
  - name: fc1
    linear: {out_features: 21}
  - gelu: {}
  - dropout: {p: 0.5}
  - name: fc2
    linear: {out_features: 13}
  - dropout: {p: 0.1}
  - in: [block_in, _]
    add: {}
"""


class DropRes(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln = nn.LayerNorm(13)
        self.fc1 = nn.Linear(13, 21)
        self.fc2 = nn.Linear(21, 13)
        self.drop = nn.Dropout(0.5)

    def forward(self, x):
        return x + self.drop(self.fc2(self.drop(nn.functional.gelu(self.fc1(self.drop(self.ln(x)))))))


ENC_YAML = """# a pre-norm causal encoder layer with gelu and dropout: its inner graph
# runs fused (dropout1 skipped, linear1 + gelu + dropout, linear2 +
# dropout2 + the residual add) (tools/gen_fuse_fixtures.py)
inputs:
  x: {shape: [7, 12]}
layers:
  - name: layer
    transformer_encoder_layer: {nhead: 3, dim_feedforward: 19, dropout: 0.1, activation: gelu,
                                norm_first: true, causal: true}
"""


class Enc(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(12, 3, 19, dropout=0.1, activation="gelu",
                                                batch_first=True, norm_first=True)

    def forward(self, x):
        mask = torch.triu(torch.full((7, 7), float("-inf"), dtype=x.dtype), diagonal=1)
        return self.layer(x, src_mask=mask)


def main():
    for batch, tag in ((3, ""), (1, "_b1")):
        write("conv_bn_relu_res" + tag, RES_YAML, ResTop, [6, 9, 7], batch)
        write("winograd_bn_relu6" + tag, WINO_YAML, lambda: nn.Sequential(
            nn.Conv2d(17, 19, 3, padding=1, bias=False), nn.BatchNorm2d(19), nn.ReLU6(),
            nn.Conv2d(19, 19, 1), nn.SiLU()), [17, 11, 9], batch)
        write("depthwise_bn" + tag, DW_YAML, lambda: nn.Sequential(
            nn.Conv2d(5, 5, 3, padding=1, groups=5, bias=False), nn.BatchNorm2d(5), nn.ReLU6(),
            nn.Conv2d(5, 7, 3, stride=2, padding=1), nn.BatchNorm2d(7),
            nn.GELU(approximate="tanh")), [5, 13, 11], batch)
        write("conv1d_bn_gelu" + tag, CONV1D_YAML, lambda: nn.Sequential(
            nn.Conv1d(4, 6, 3, padding=2, dilation=2), nn.BatchNorm1d(6), nn.GELU()),
            [4, 15], batch)
        write("linear_gelu_res" + tag, LINEAR_YAML, LinRes, [3, 13], batch)
        write("linear_dropout_res" + tag, DROP_YAML, DropRes, [4, 13], batch)
        write("encoder_layer" + tag, ENC_YAML, Enc, [7, 12], batch)


if __name__ == "__main__":
    main()
