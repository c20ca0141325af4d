#!/usr/bin/python3
"""Writes the example CNNs of models/: for each NAME in lenet5,
resnet-block, mobilenet-block and unet-small,

  models/NAME.yaml            the model description
  models/NAME.safetensors     its weights (PyTorch's default initialisation
                              after torch.manual_seed, batch-norm affine
                              parameters and running statistics then drawn
                              at random so that they matter)
  models/NAME-input.npy       a batch of 2 inputs
  models/NAME-expected.npy    PyTorch's output for them (eval mode)

The PyTorch reference of each is a module whose state_dict keys are the
dlrun parameter names (model-format.md section 5), run in float64 on the
float32 values and rounded once. `dlrun infer models/NAME.yaml <
models/NAME-input.npy` should reproduce NAME-expected.npy within 1e-4
relative. The output is byte-stable.

Run with Debian's python3-torch: /usr/bin/python3 tools/gen_example_models.py
"""

import collections
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dltools  # noqa: E402

MODELS = {}


def model(name, yaml_text, shape):
    def register(fn):
        MODELS[name] = (yaml_text, shape, fn)
        return fn
    return register


def seq(*mods):
    """nn.Sequential with keys "0", "1", ... like a dlrun list."""
    return nn.Sequential(collections.OrderedDict(
        (str(i), m) for i, m in enumerate(mods)))


# ---- LeNet-5 ----

LENET5 = """\
# LeNet-5 (LeCun et al., 1998) with ReLU and max pooling: a 28x28 gray
# image in, 10 class scores out. Weights: lenet5.safetensors, made with
# models/lenet5-input.npy and lenet5-expected.npy by
# tools/gen_example_models.py.
#   dlrun infer models/lenet5.yaml < models/lenet5-input.npy
name: lenet5
inputs:
  image: {shape: [1, 28, 28]}
layers:
  - name: c1
    conv2d: {out_channels: 6, kernel_size: 5, padding: 2}
  - relu
  - max_pool2d: {kernel_size: 2}
  - name: c3
    conv2d: {out_channels: 16, kernel_size: 5}
  - relu
  - max_pool2d: {kernel_size: 2}
  - flatten
  - name: f5
    linear: {out_features: 120}
  - relu
  - name: f6
    linear: {out_features: 84}
  - relu
  - name: output
    linear: {out_features: 10}
"""


@model("lenet5", LENET5, [1, 28, 28])
def lenet5():
    return nn.Sequential(collections.OrderedDict([
        ("c1", nn.Conv2d(1, 6, 5, padding=2)), ("1", nn.ReLU()),
        ("2", nn.MaxPool2d(2)),
        ("c3", nn.Conv2d(6, 16, 5)), ("4", nn.ReLU()), ("5", nn.MaxPool2d(2)),
        ("6", nn.Flatten()),
        ("f5", nn.Linear(16 * 5 * 5, 120)), ("8", nn.ReLU()),
        ("f6", nn.Linear(120, 84)), ("10", nn.ReLU()),
        ("output", nn.Linear(84, 10)),
    ]))


# ---- ResNet basic block ----

RESNET_BLOCK = """\
# A ResNet basic block (He et al., 2016) that halves the resolution and
# doubles the channels, so its shortcut is a projection: a strided 1x1
# convolution with batch norm. Then a second block with the identity
# shortcut. Weights: resnet-block.safetensors (tools/gen_example_models.py).
#   dlrun infer models/resnet-block.yaml < models/resnet-block-input.npy
name: resnet-block
inputs:
  x: {shape: [16, 16, 16]}
layers:
  - residual:
      body:
        - conv2d: {out_channels: 32, kernel_size: 3, stride: 2, padding: 1, bias: false}
        - batch_norm2d
        - relu
        - conv2d: {out_channels: 32, kernel_size: 3, padding: 1, bias: false}
        - batch_norm2d
      shortcut:
        - conv2d: {out_channels: 32, kernel_size: 1, stride: 2, bias: false}
        - batch_norm2d
  - relu
  - residual:
      - conv2d: {out_channels: 32, kernel_size: 3, padding: 1, bias: false}
      - batch_norm2d
      - relu
      - conv2d: {out_channels: 32, kernel_size: 3, padding: 1, bias: false}
      - batch_norm2d
  - relu
"""


class Residual(nn.Module):
    """dlrun's residual: body entries as children "0", "1", ...; an
    optional projection `shortcut`."""

    def __init__(self, body, shortcut=None):
        super().__init__()
        for i, m in enumerate(body):
            self.add_module(str(i), m)
        self.n = len(body)
        if shortcut is not None:
            self.shortcut = shortcut

    def forward(self, x):
        y = x
        for i in range(self.n):
            y = getattr(self, str(i))(y)
        return y + (self.shortcut(x) if hasattr(self, "shortcut") else x)


@model("resnet-block", RESNET_BLOCK, [16, 16, 16])
def resnet_block():
    return seq(
        Residual([nn.Conv2d(16, 32, 3, stride=2, padding=1, bias=False),
                  nn.BatchNorm2d(32), nn.ReLU(),
                  nn.Conv2d(32, 32, 3, padding=1, bias=False),
                  nn.BatchNorm2d(32)],
                 seq(nn.Conv2d(16, 32, 1, stride=2, bias=False),
                     nn.BatchNorm2d(32))),
        nn.ReLU(),
        Residual([nn.Conv2d(32, 32, 3, padding=1, bias=False),
                  nn.BatchNorm2d(32), nn.ReLU(),
                  nn.Conv2d(32, 32, 3, padding=1, bias=False),
                  nn.BatchNorm2d(32)]),
        nn.ReLU())


# ---- MobileNet blocks ----

MOBILENET_BLOCK = """\
# MobileNet building blocks: a depthwise separable convolution (Howard et
# al., 2017: a 3x3 depthwise convolution, one filter per channel, then a
# 1x1 pointwise one) that downsamples, then an inverted residual block
# (Sandler et al., 2018: 1x1 expansion, 3x3 depthwise, 1x1 linear
# projection, identity shortcut). Weights: mobilenet-block.safetensors
# (tools/gen_example_models.py).
#   dlrun infer models/mobilenet-block.yaml < models/mobilenet-block-input.npy
name: mobilenet-block
inputs:
  x: {shape: [16, 24, 24]}
layers:
  - name: separable
    sequential:
      - conv2d: {out_channels: 16, kernel_size: 3, stride: 2, padding: 1, groups: 16, bias: false}
      - batch_norm2d
      - relu
      - conv2d: {out_channels: 32, kernel_size: 1, bias: false}
      - batch_norm2d
      - relu
  - name: inverted
    residual:
      - conv2d: {out_channels: 128, kernel_size: 1, bias: false}
      - batch_norm2d
      - relu
      - conv2d: {out_channels: 128, kernel_size: 3, padding: 1, groups: 128, bias: false}
      - batch_norm2d
      - relu
      - conv2d: {out_channels: 32, kernel_size: 1, bias: false}
      - batch_norm2d
  - adaptive_avg_pool2d: {output_size: 1}
  - flatten
  - name: classifier
    linear: {out_features: 10}
"""


@model("mobilenet-block", MOBILENET_BLOCK, [16, 24, 24])
def mobilenet_block():
    return nn.Sequential(collections.OrderedDict([
        ("separable", seq(
            nn.Conv2d(16, 16, 3, stride=2, padding=1, groups=16, bias=False),
            nn.BatchNorm2d(16), nn.ReLU(),
            nn.Conv2d(16, 32, 1, bias=False), nn.BatchNorm2d(32), nn.ReLU())),
        ("inverted", Residual([
            nn.Conv2d(32, 128, 1, bias=False), nn.BatchNorm2d(128), nn.ReLU(),
            nn.Conv2d(128, 128, 3, padding=1, groups=128, bias=False),
            nn.BatchNorm2d(128), nn.ReLU(),
            nn.Conv2d(128, 32, 1, bias=False), nn.BatchNorm2d(32)])),
        ("2", nn.AdaptiveAvgPool2d(1)),
        ("3", nn.Flatten()),
        ("classifier", nn.Linear(32, 10)),
    ]))


# ---- a small U-Net ----

UNET_SMALL = """\
# A small U-Net (Ronneberger et al., 2015) for 2-class segmentation of a
# 32x32 RGB image: strided convolutions down, transposed convolutions up,
# and at each level the encoder's features concatenated to the decoder's
# by name. Weights: unet-small.safetensors (tools/gen_example_models.py).
#   dlrun infer models/unet-small.yaml < models/unet-small-input.npy
name: unet-small
inputs:
  image: {shape: [3, 32, 32]}
layers:
  - name: enc1
    sequential:
      - conv2d: {out_channels: 8, kernel_size: 3, padding: 1}
      - batch_norm2d
      - relu
  - name: down1
    sequential:
      - conv2d: {out_channels: 16, kernel_size: 3, stride: 2, padding: 1}
      - batch_norm2d
      - relu
  - name: down2
    sequential:
      - conv2d: {out_channels: 32, kernel_size: 3, stride: 2, padding: 1}
      - batch_norm2d
      - relu
  - name: up2
    conv_transpose2d: {out_channels: 16, kernel_size: 2, stride: 2}
  - name: cat2
    in: [up2, down1]
    concat: {dim: 1}
  - name: dec2
    sequential:
      - conv2d: {out_channels: 16, kernel_size: 3, padding: 1}
      - batch_norm2d
      - relu
  - name: up1
    conv_transpose2d: {out_channels: 8, kernel_size: 4, stride: 2, padding: 1}
  - name: cat1
    in: [up1, enc1]
    concat: {dim: 1}
  - name: dec1
    sequential:
      - conv2d: {out_channels: 8, kernel_size: 3, padding: 1}
      - relu
  - name: head
    conv2d: {out_channels: 2, kernel_size: 1}
"""


class UNetSmall(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc1 = seq(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU())
        self.down1 = seq(nn.Conv2d(8, 16, 3, stride=2, padding=1),
                         nn.BatchNorm2d(16), nn.ReLU())
        self.down2 = seq(nn.Conv2d(16, 32, 3, stride=2, padding=1),
                         nn.BatchNorm2d(32), nn.ReLU())
        self.up2 = nn.ConvTranspose2d(32, 16, 2, stride=2)
        self.dec2 = seq(nn.Conv2d(32, 16, 3, padding=1), nn.BatchNorm2d(16),
                        nn.ReLU())
        self.up1 = nn.ConvTranspose2d(16, 8, 4, stride=2, padding=1)
        self.dec1 = seq(nn.Conv2d(16, 8, 3, padding=1), nn.ReLU())
        self.head = nn.Conv2d(8, 2, 1)

    def forward(self, x):
        e1 = self.enc1(x)
        d1 = self.down1(e1)
        d2 = self.down2(d1)
        u2 = self.dec2(torch.cat([self.up2(d2), d1], 1))
        u1 = self.dec1(torch.cat([self.up1(u2), e1], 1))
        return self.head(u1)


@model("unet-small", UNET_SMALL, [3, 32, 32])
def unet_small():
    return UNetSmall()


def randomize_batch_norm(m, g):
    """Affine parameters and running statistics away from their defaults,
    so that the test sees them."""
    with torch.no_grad():
        for mod in m.modules():
            if isinstance(mod, nn.BatchNorm2d):
                C = mod.num_features
                mod.weight.copy_(torch.rand(C, generator=g) + 0.5)
                mod.bias.copy_(torch.rand(C, generator=g) - 0.5)
                mod.running_mean.copy_(torch.rand(C, generator=g) * 0.4 - 0.2)
                mod.running_var.copy_(torch.rand(C, generator=g) + 0.5)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    out = os.path.normpath(os.path.join(here, "..", "models"))
    os.makedirs(out, exist_ok=True)
    torch.set_num_threads(1)
    for i, (name, (text, shape, make)) in enumerate(MODELS.items()):
        torch.manual_seed(i)
        m = make().eval()
        randomize_batch_norm(m, torch.Generator().manual_seed(100 + i))
        # float32 values throughout: what the safetensors file holds
        state = {k: v.float() for k, v in m.state_dict().items()
                 if not k.endswith("num_batches_tracked")}
        m.load_state_dict(state, strict=False)
        x = torch.rand([2] + shape, generator=torch.Generator().manual_seed(200 + i))
        with torch.no_grad():
            # float64 on the float32 values: the exact answer, rounded once
            y = m.double()(x.double())
        with open(os.path.join(out, name + ".yaml"), "w") as f:
            f.write(text)
        dltools.write_safetensors(os.path.join(out, name + ".safetensors"), state)
        dltools.write_npys(os.path.join(out, name + "-input.npy"), [x])
        dltools.write_npys(os.path.join(out, name + "-expected.npy"), [y])
        count = sum(p.numel() for p in make().parameters())
        print("models/%s: %d parameters, output %s" % (name, count,
                                                      list(y.shape)))


if __name__ == "__main__":
    main()
