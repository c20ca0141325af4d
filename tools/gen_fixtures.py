#!/usr/bin/python3
"""Generates tests/fixtures/core/: PyTorch references for dlrun's core ops.

Each case directory holds model.yaml, model.safetensors (when the model has
parameters), in.npy (every model input, back to back in the order of
`inputs:`), out.npy (every output, in the order of `outputs:`) and optionally
`args` (extra `dlrun infer` arguments). tests/fixtures.sh runs them.

The reference is a PyTorch module built from nested nn.Sequential and small
modules whose state_dict keys are the dlrun parameter names, run in float64
on float32-representable inputs and weights, then rounded to float32. Each
case is also run through a small functional interpreter of the YAML
(`interpret`), and the two must agree, so a case whose module does not say
what its YAML says fails here rather than in the test suite.

Seeds are fixed per case name: re-running gives the same bytes.
Run with Debian's python3-torch: /usr/bin/python3 tools/gen_fixtures.py
"""

import argparse
import collections
import os
import shutil
import sys
import textwrap
import zlib

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dltools  # noqa: E402

# variant tag -> (batch size, extra dlrun infer arguments)
VARIANTS = {
    "": (3, None),
    "b1": (1, None),
    "bs2": (5, "--batch-size 2"),
    "b0": (0, None),
}

CASES = []


def case(name, variants=("", "b1")):
    def register(fn):
        CASES.append((name, variants, fn))
        return fn
    return register


class Gen:
    """Inputs for one case: float32 values held as float64 tensors."""

    def __init__(self, seed, n):
        self.g = torch.Generator().manual_seed(seed)
        self.n = n

    def randn(self, *shape, scale=1.0):
        x = torch.randn(shape, generator=self.g, dtype=torch.float32) * scale
        return x.float().double()

    def away(self, *shape, lo=0.5, hi=2.0):
        """Values with lo <= |v| <= hi, for divisors."""
        mag = torch.rand(shape, generator=self.g, dtype=torch.float32)
        sign = torch.randint(0, 2, shape, generator=self.g) * 2 - 1
        return (lo + (hi - lo) * mag).mul(sign).float().double()


def Y(text):
    return textwrap.dedent(text).lstrip("\n")


# ---- small modules for the reference ----

class Fn(nn.Module):
    """A parameterless op as a module."""

    def __init__(self, f):
        super().__init__()
        self.f = f

    def forward(self, *xs):
        return self.f(*xs)


def S(*items):
    """nn.Sequential; an item is a module (scope: its index) or (name, module)."""
    od = collections.OrderedDict()
    for i, it in enumerate(items):
        if isinstance(it, tuple):
            od[it[0]] = it[1]
        else:
            od[str(i)] = it
    return nn.Sequential(od)


class Residual(nn.Sequential):
    """y = x + body(x); the body's entries are this module's children."""

    def forward(self, x):
        return x + super().forward(x)


class ResidualShortcut(nn.Module):
    """y = shortcut(x) + body(x); body entries by index, shortcut as `shortcut`."""

    def __init__(self, body, shortcut):
        super().__init__()
        self.nbody = len(body)
        for i, m in enumerate(body):
            self.add_module(str(i), m)
        self.shortcut = shortcut

    def forward(self, x):
        y = x
        for i in range(self.nbody):
            y = self._modules[str(i)](y)
        return self.shortcut(x) + y


def lin(i, o, bias=True):
    return nn.Linear(i, o, bias=bias)


# ---- the cases ----
# Each returns (model.yaml text, list of inputs, reference module).

X35 = "inputs:\n  x: {shape: [3, 5]}\nlayers:\n"


@case("linear_bias", ("", "b1", "bs2", "b0"))
def _(g):
    return Y("""
        inputs:
          x: {shape: [6]}
        layers:
          - linear: {out_features: 4}
        """), [g.randn(g.n, 6)], S(lin(6, 4))


@case("linear_nobias")
def _(g):
    return Y("""
        inputs:
          x: {shape: [7]}
        layers:
          - linear: {in_features: 7, out_features: 5, bias: false}
        """), [g.randn(g.n, 7)], S(lin(7, 5, False))


@case("linear_3d", ("", "b1", "bs2"))
def _(g):
    return Y("""
        inputs:
          x: {shape: [4, 5]}
        layers:
          - linear: {out_features: 3}
        """), [g.randn(g.n, 4, 5)], S(lin(5, 3))


@case("linear_4d")
def _(g):
    return Y("""
        inputs:
          x: {shape: [2, 3, 5]}
        layers:
          - linear: {out_features: 2}
          - linear: {out_features: 3, bias: false}
        """), [g.randn(g.n, 2, 3, 5)], S(lin(5, 2), lin(2, 3, False))


@case("identity")
def _(g):
    return X35 + "  - identity\n", [g.randn(g.n, 3, 5)], S(nn.Identity())


@case("dropout")
def _(g):
    return X35 + "  - dropout: {p: 0.3}\n  - dropout\n", [g.randn(g.n, 3, 5)], \
        S(nn.Dropout(0.3), nn.Dropout())


@case("flatten")
def _(g):
    return Y("""
        inputs:
          x: {shape: [2, 3, 4]}
        layers:
          - flatten
        """), [g.randn(g.n, 2, 3, 4)], S(nn.Flatten())


@case("flatten_start2")
def _(g):
    return Y("""
        inputs:
          x: {shape: [2, 3, 4]}
        layers:
          - flatten: {start_dim: 2}
        """), [g.randn(g.n, 2, 3, 4)], S(nn.Flatten(2))


@case("flatten_range", ("", "b1", "bs2"))
def _(g):
    return Y("""
        inputs:
          x: {shape: [2, 3, 4, 5]}
        layers:
          - flatten: {start_dim: 2, end_dim: 3}
        """), [g.randn(g.n, 2, 3, 4, 5)], S(nn.Flatten(2, 3))


@case("flatten_neg")
def _(g):
    return Y("""
        inputs:
          x: {shape: [2, 3, 4, 5]}
        layers:
          - flatten: {start_dim: -3, end_dim: -2}
        """), [g.randn(g.n, 2, 3, 4, 5)], S(nn.Flatten(-3, -2))


@case("reshape")
def _(g):
    return Y("""
        inputs:
          x: {shape: [12]}
        layers:
          - reshape: {shape: [3, 4]}
        """), [g.randn(g.n, 12)], S(Fn(lambda x: x.reshape(x.shape[0], 3, 4)))


@case("reshape_neg1", ("", "b1", "bs2"))
def _(g):
    return Y("""
        inputs:
          x: {shape: [2, 3, 4]}
        layers:
          - reshape: {shape: [-1, 2, 3]}
        """), [g.randn(g.n, 2, 3, 4)], \
        S(Fn(lambda x: x.reshape(x.shape[0], -1, 2, 3)))


@case("permute", ("", "b1", "bs2"))
def _(g):
    return Y("""
        inputs:
          x: {shape: [2, 3, 4]}
        layers:
          - permute: {dims: [0, 3, 1, 2]}
        """), [g.randn(g.n, 2, 3, 4)], S(Fn(lambda x: x.permute(0, 3, 1, 2)))


@case("permute_linear")
def _(g):
    return Y("""
        inputs:
          x: {shape: [3, 4]}
        layers:
          - permute: {dims: [0, 2, 1]}
          - linear: {out_features: 2}
        """), [g.randn(g.n, 3, 4)], \
        S(Fn(lambda x: x.permute(0, 2, 1)), lin(3, 2))


@case("transpose")
def _(g):
    return Y("""
        inputs:
          x: {shape: [3, 4]}
        layers:
          - transpose: {dim0: 1, dim1: 2}
        """), [g.randn(g.n, 3, 4)], S(Fn(lambda x: x.transpose(1, 2)))


@case("transpose_neg")
def _(g):
    return Y("""
        inputs:
          x: {shape: [2, 3, 4]}
        layers:
          - transpose: {dim0: -1, dim1: -3}
        """), [g.randn(g.n, 2, 3, 4)], S(Fn(lambda x: x.transpose(-1, -3)))


@case("slice_negstart")
def _(g):
    return Y("""
        inputs:
          x: {shape: [7]}
        layers:
          - slice: {dim: 1, start: -3}
        """), [g.randn(g.n, 7)], S(Fn(lambda x: x[:, -3:]))


@case("slice_step2", ("", "b1", "bs2"))
def _(g):
    return Y("""
        inputs:
          x: {shape: [3, 9]}
        layers:
          - slice: {dim: -1, start: 1, end: 100, step: 2}
        """), [g.randn(g.n, 3, 9)], S(Fn(lambda x: x[..., 1:100:2]))


@case("slice_step3")
def _(g):
    return Y("""
        inputs:
          x: {shape: [10, 2]}
        layers:
          - slice: {dim: 1, start: -20, end: -1, step: 3}
        """), [g.randn(g.n, 10, 2)], S(Fn(lambda x: x[:, -20:-1:3]))


@case("slice_negend")
def _(g):
    return Y("""
        inputs:
          x: {shape: [2, 6, 3]}
        layers:
          - slice: {dim: -2, start: 1, end: -2}
        """), [g.randn(g.n, 2, 6, 3)], S(Fn(lambda x: x[:, :, 1:-2, :]))


@case("mean")
def _(g):
    return Y("""
        inputs:
          x: {shape: [4, 5]}
        layers:
          - mean: {dim: 1}
        """), [g.randn(g.n, 4, 5)], S(Fn(lambda x: x.mean(1)))


@case("mean_dims", ("", "b1", "bs2"))
def _(g):
    return Y("""
        inputs:
          x: {shape: [3, 4, 5]}
        layers:
          - mean: {dim: [1, 3]}
        """), [g.randn(g.n, 3, 4, 5)], S(Fn(lambda x: x.mean((1, 3))))


@case("mean_keepdim")
def _(g):
    return Y("""
        inputs:
          x: {shape: [3, 4, 5]}
        layers:
          - mean: {dim: [2, -1], keepdim: true}
        """), [g.randn(g.n, 3, 4, 5)], \
        S(Fn(lambda x: x.mean((2, -1), keepdim=True)))


@case("mean_neg")
def _(g):
    return Y("""
        inputs:
          x: {shape: [3, 4, 5]}
        layers:
          - mean: {dim: -2, keepdim: false}
        """), [g.randn(g.n, 3, 4, 5)], S(Fn(lambda x: x.mean(-2)))


@case("pad")
def _(g):
    return Y("""
        inputs:
          x: {shape: [3, 4]}
        layers:
          - pad: {padding: [1, 2]}
        """), [g.randn(g.n, 3, 4)], S(Fn(lambda x: F.pad(x, (1, 2))))


@case("pad_value", ("", "b1", "bs2"))
def _(g):
    return Y("""
        inputs:
          x: {shape: [2, 3, 4]}
        layers:
          - pad: {padding: [1, 1, 2, 0], value: 0.5}
        """), [g.randn(g.n, 2, 3, 4)], \
        S(Fn(lambda x: F.pad(x, (1, 1, 2, 0), value=0.5)))


@case("pad_3dims")
def _(g):
    return Y("""
        inputs:
          x: {shape: [2, 3, 4]}
        layers:
          - pad: {padding: [0, 1, 1, 0, 2, 1], value: -1.5}
        """), [g.randn(g.n, 2, 3, 4)], \
        S(Fn(lambda x: F.pad(x, (0, 1, 1, 0, 2, 1), value=-1.5)))


@case("pad_crop")
def _(g):
    return Y("""
        inputs:
          x: {shape: [3, 5]}
        layers:
          - pad: {padding: [-1, 2, 1, -1]}
        """), [g.randn(g.n, 3, 5)], S(Fn(lambda x: F.pad(x, (-1, 2, 1, -1))))


@case("add")
def _(g):
    return Y("""
        inputs:
          a: {shape: [4, 3]}
          b: {shape: [4, 3]}
        layers:
          - in: [a, b]
            add: {}
        """), [g.randn(g.n, 4, 3), g.randn(g.n, 4, 3)], Fn(lambda a, b: a + b)


@case("add3", ("", "b1", "bs2"))
def _(g):
    return Y("""
        inputs:
          a: {shape: [4, 3]}
          b: {shape: [4, 3]}
          c: {shape: [4, 3]}
        layers:
          - in: [a, b, c]
            add: {}
        """), [g.randn(g.n, 4, 3) for _ in range(3)], \
        Fn(lambda a, b, c: a + b + c)


@case("mul3")
def _(g):
    return Y("""
        inputs:
          a: {shape: [2, 5]}
          b: {shape: [2, 5]}
          c: {shape: [2, 5]}
        layers:
          - in: [a, b, c]
            mul: {}
        """), [g.randn(g.n, 2, 5) for _ in range(3)], \
        Fn(lambda a, b, c: a * b * c)


@case("sub")
def _(g):
    return Y("""
        inputs:
          a: {shape: [6]}
          b: {shape: [6]}
        layers:
          - in: [a, b]
            sub: {}
        """), [g.randn(g.n, 6), g.randn(g.n, 6)], Fn(lambda a, b: a - b)


@case("sub_reversed")
def _(g):
    # operand order follows `in:`, not the order of `inputs:`
    return Y("""
        inputs:
          a: {shape: [6]}
          b: {shape: [6]}
        layers:
          - in: [b, a]
            sub: {}
        """), [g.randn(g.n, 6), g.randn(g.n, 6)], Fn(lambda a, b: b - a)


@case("div")
def _(g):
    return Y("""
        inputs:
          a: {shape: [2, 3]}
          b: {shape: [2, 3]}
        layers:
          - in: [a, b]
            div: {}
        """), [g.randn(g.n, 2, 3), g.away(g.n, 2, 3)], Fn(lambda a, b: a / b)


@case("mul_bcast_chw", ("", "b1", "bs2"))
def _(g):
    # [N, C, H, W] * [N, C, 1, 1]
    return Y("""
        inputs:
          x: {shape: [3, 4, 5]}
          s: {shape: [3, 1, 1]}
        layers:
          - in: [x, s]
            mul: {}
        """), [g.randn(g.n, 3, 4, 5), g.randn(g.n, 3, 1, 1)], \
        Fn(lambda x, s: x * s)


@case("add_bcast_td", ("", "b1", "bs2"))
def _(g):
    # [N, T, D] + [N, D]: per-sample shapes aligned from the right
    return Y("""
        inputs:
          x: {shape: [4, 5]}
          y: {shape: [5]}
        layers:
          - in: [x, y]
            add: {}
        """), [g.randn(g.n, 4, 5), g.randn(g.n, 5)], \
        Fn(lambda x, y: x + y.unsqueeze(1))


@case("sub_bcast")
def _(g):
    # [N, 4, 1] - [N, 3] -> [N, 4, 3]
    return Y("""
        inputs:
          a: {shape: [4, 1]}
          b: {shape: [3]}
        layers:
          - in: [a, b]
            sub: {}
        """), [g.randn(g.n, 4, 1), g.randn(g.n, 3)], \
        Fn(lambda a, b: a - b.unsqueeze(1))


@case("add_batch1", ("", "bs2"))
def _(g):
    # the second input has batch size 1 and is reused for every sample
    return Y("""
        inputs:
          a: {shape: [4]}
          b: {shape: [4]}
        layers:
          - in: [a, b]
            add: {}
        """), [g.randn(g.n, 4), g.randn(1, 4)], Fn(lambda a, b: a + b)


@case("div_batch1", ("", "bs2"))
def _(g):
    # the first input has batch size 1; per-sample [2, 3] / [3]
    return Y("""
        inputs:
          a: {shape: [2, 3]}
          b: {shape: [3]}
        layers:
          - in: [a, b]
            div: {}
        """), [g.randn(1, 2, 3), g.away(g.n, 3)], \
        Fn(lambda a, b: a / b.unsqueeze(1))


@case("concat", ("", "b1", "bs2"))
def _(g):
    return Y("""
        inputs:
          a: {shape: [2, 3]}
          b: {shape: [4, 3]}
        layers:
          - in: [a, b]
            concat: {}
        """), [g.randn(g.n, 2, 3), g.randn(g.n, 4, 3)], \
        Fn(lambda a, b: torch.cat([a, b], 1))


@case("concat_neg")
def _(g):
    return Y("""
        inputs:
          a: {shape: [3, 2]}
          b: {shape: [3, 5]}
        layers:
          - in: [a, b]
            concat: {dim: -1}
        """), [g.randn(g.n, 3, 2), g.randn(g.n, 3, 5)], \
        Fn(lambda a, b: torch.cat([a, b], -1))


@case("concat3")
def _(g):
    return Y("""
        inputs:
          a: {shape: [2, 1, 4]}
          b: {shape: [2, 3, 4]}
          c: {shape: [2, 2, 4]}
        layers:
          - in: [a, b, c]
            concat: {dim: 2}
        """), [g.randn(g.n, 2, 1, 4), g.randn(g.n, 2, 3, 4),
               g.randn(g.n, 2, 2, 4)], \
        Fn(lambda a, b, c: torch.cat([a, b, c], 2))


@case("matmul", ("", "b1", "bs2"))
def _(g):
    # [N, T, D] x [N, D, K]
    return Y("""
        inputs:
          a: {shape: [3, 4]}
          b: {shape: [4, 5]}
        layers:
          - in: [a, b]
            matmul: {}
        """), [g.randn(g.n, 3, 4), g.randn(g.n, 4, 5)], Fn(torch.matmul)


@case("matmul_bcast")
def _(g):
    # [N, 2, 3, 4] x [N, 1, 4, 5] -> [N, 2, 3, 5]
    return Y("""
        inputs:
          a: {shape: [2, 3, 4]}
          b: {shape: [1, 4, 5]}
        layers:
          - in: [a, b]
            matmul: {}
        """), [g.randn(g.n, 2, 3, 4), g.randn(g.n, 1, 4, 5)], Fn(torch.matmul)


@case("matmul_batch1", ("", "bs2"))
def _(g):
    # [1, 3, 4] x [N, 4, 2] -> [N, 3, 2]
    return Y("""
        inputs:
          a: {shape: [3, 4]}
          b: {shape: [4, 2]}
        layers:
          - in: [a, b]
            matmul: {}
        """), [g.randn(1, 3, 4), g.randn(g.n, 4, 2)], Fn(torch.matmul)


@case("matmul_self")
def _(g):
    # x x^T then softmax: the wiring of dot-product attention scores
    return Y("""
        inputs:
          x: {shape: [3, 4]}
        layers:
          - name: xt
            transpose: {dim0: 1, dim1: 2}
          - in: [x, xt]
            matmul: {}
          - softmax
        """), [g.randn(g.n, 3, 4)], \
        Fn(lambda x: torch.softmax(x @ x.transpose(1, 2), -1))


def act_case(name, line, module, scale=3.0, shape=(3, 5), variants=("", "b1")):
    ys = "inputs:\n  x: {shape: [%s]}\nlayers:\n  - %s\n" % (
        ", ".join(map(str, shape)), line)

    def fn(g):
        return ys, [g.randn(g.n, *shape, scale=scale)], S(module)
    case(name, variants)(fn)


act_case("relu", "relu", nn.ReLU())
act_case("leaky_relu", "leaky_relu: {negative_slope: 0.2}", nn.LeakyReLU(0.2))
act_case("leaky_relu_default", "leaky_relu", nn.LeakyReLU())
act_case("tanh", "tanh", nn.Tanh())
act_case("sigmoid", "sigmoid", nn.Sigmoid(), scale=6.0)
act_case("gelu", "gelu", nn.GELU(), variants=("", "b1", "bs2"))
act_case("gelu_none", "gelu: {approximate: none}", nn.GELU("none"))
act_case("gelu_tanh", "gelu: {approximate: tanh}", nn.GELU("tanh"))
# the branch-free erf's loops (src/engine/vmath.h): a row not a multiple of
# the vector width, values past its clamp at |x / sqrt 2| = 4
act_case("gelu_wide", "gelu", nn.GELU(), scale=4.0, shape=(7, 131))
act_case("silu", "silu", nn.SiLU())
# the branch-free exp's loops (dl_expf, src/engine/vmath.h): a row not a
# multiple of the vector width, values past its clamp at +-87
act_case("silu_wide", "silu", nn.SiLU(), scale=40.0, shape=(7, 131))
act_case("sigmoid_wide", "sigmoid", nn.Sigmoid(), scale=40.0, shape=(7, 131))
act_case("softplus", "softplus", nn.Softplus(), scale=10.0)
act_case("softplus_beta", "softplus: {beta: 2, threshold: 5}",
         nn.Softplus(beta=2, threshold=5))
act_case("relu_squared", "relu_squared", Fn(lambda x: F.relu(x) ** 2))
act_case("softmax", "softmax", nn.Softmax(-1), shape=(4, 5),
         variants=("", "b1", "bs2"))
act_case("softmax_dim1", "softmax: {dim: 1}", nn.Softmax(1), shape=(4, 5))
act_case("softmax_large", "softmax: {dim: -1}", nn.Softmax(-1), scale=500.0,
         shape=(3, 6))
act_case("log_softmax", "log_softmax", nn.LogSoftmax(-1), shape=(4, 5))
act_case("log_softmax_dim1", "log_softmax: {dim: 1}", nn.LogSoftmax(1),
         shape=(4, 5))
act_case("log_softmax_large", "log_softmax: {dim: 2}", nn.LogSoftmax(2),
         scale=500.0, shape=(3, 6))
# a dimension before the last, vectorised across blocks of 64 columns
# (src/ops/activation.c softmax_cols): a block and a tail of columns
act_case("softmax_dim1_wide", "softmax: {dim: 1}", nn.Softmax(1), scale=10.0,
         shape=(5, 70))
act_case("log_softmax_dim1_wide", "log_softmax: {dim: 1}", nn.LogSoftmax(1),
         scale=40.0, shape=(6, 3, 67))


# ---- wiring and composites ----

class Diamond(nn.Module):
    def __init__(self):
        super().__init__()
        self.h = lin(6, 5)
        self.add_module("4", lin(5, 2))

    def forward(self, x):
        h = self.h(x)
        return self._modules["4"](torch.relu(h) + torch.tanh(h) + h)


@case("diamond", ("", "b1", "bs2"))
def _(g):
    return Y("""
        name: diamond
        inputs:
          x: {shape: [6]}
        layers:
          - name: h
            linear: {out_features: 5}
          - name: a
            relu: {}
          - name: b
            in: h
            tanh: {}
          - name: s
            in: [a, b, h]
            add: {}
          - linear: {out_features: 2}
        """), [g.randn(g.n, 6)], Diamond()


@case("residual_list")
def _(g):
    return Y("""
        inputs:
          x: {shape: [5]}
        layers:
          - linear: {out_features: 6}
          - residual:
              - linear: {out_features: 8}
              - relu
              - linear: {out_features: 6}
          - tanh
        """), [g.randn(g.n, 5)], \
        S(lin(5, 6), Residual(lin(6, 8), nn.ReLU(), lin(8, 6)), nn.Tanh())


@case("residual_shortcut", ("", "b1", "bs2"))
def _(g):
    return Y("""
        inputs:
          x: {shape: [3, 4]}
        layers:
          - name: proj
            residual:
              body:
                - linear: {out_features: 6}
                - relu
                - linear: {out_features: 6}
              shortcut:
                - linear: {out_features: 6, bias: false}
          - relu
        """), [g.randn(g.n, 3, 4)], \
        S(("proj", ResidualShortcut([lin(4, 6), nn.ReLU(), lin(6, 6)],
                                    S(lin(4, 6, False)))), nn.ReLU())


@case("repeat_body")
def _(g):
    return Y("""
        inputs:
          x: {shape: [4]}
        layers:
          - linear: {out_features: 5}
          - repeat:
              times: 3
              body:
                - linear: {out_features: 5}
                - relu
          - linear: {out_features: 2}
        """), [g.randn(g.n, 4)], \
        S(lin(4, 5), S(*[S(lin(5, 5), nn.ReLU()) for _ in range(3)]),
          lin(5, 2))


@case("repeat_use", ("", "b1", "bs2"))
def _(g):
    return Y("""
        inputs:
          x: {shape: [4]}
        blocks:
          mlp:
            - linear: {out_features: 4}
            - tanh
        layers:
          - name: body
            repeat: {times: 2, use: mlp}
          - use: mlp
          - linear: {out_features: 3, bias: false}
        """), [g.randn(g.n, 4)], \
        S(("body", S(S(lin(4, 4), nn.Tanh()), S(lin(4, 4), nn.Tanh()))),
          S(lin(4, 4), nn.Tanh()), lin(4, 3, False))


@case("sequential")
def _(g):
    return Y("""
        inputs:
          x: {shape: [2, 5]}
        layers:
          - name: enc
            sequential:
              - linear: {out_features: 4}
              - silu
              - name: out
                linear: {out_features: 3}
          - flatten
        """), [g.randn(g.n, 2, 5)], \
        S(("enc", S(lin(5, 4), nn.SiLU(), ("out", lin(4, 3)))), nn.Flatten())


class GatedResidual(nn.Module):
    """x + ff(x) * sigmoid(stem): a residual whose body reads an outer name."""

    def __init__(self):
        super().__init__()
        self.ff = S(lin(6, 8), nn.GELU(), lin(8, 6))

    def forward(self, x, stem):
        return x + self.ff(x) * torch.sigmoid(stem)


class NestedCopy(nn.Module):
    def __init__(self):
        super().__init__()
        self.add_module("0", GatedResidual())

    def forward(self, x, stem):
        return torch.relu(self._modules["0"](x, stem))


class Nested(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = lin(5, 6)
        self.blocks = nn.ModuleList([NestedCopy(), NestedCopy()])
        self.add_module("2", lin(6, 3))

    def forward(self, x):
        stem = self.stem(x)
        y = stem
        for b in self.blocks:
            y = b(y, stem)
        return self._modules["2"](y)


@case("nested", ("", "b1", "bs2"))
def _(g):
    return Y("""
        inputs:
          x: {shape: [5]}
        layers:
          - name: stem
            linear: {out_features: 6}
          - name: blocks
            repeat:
              times: 2
              body:
                - residual:
                    - name: ff
                      sequential:
                        - linear: {out_features: 8}
                        - gelu
                        - linear: {out_features: 6}
                    - name: gate
                      in: stem
                      sigmoid: {}
                    - in: [ff, gate]
                      mul: {}
                - relu
          - linear: {out_features: 3}
        """), [g.randn(g.n, 5)], Nested()


class OuterNames(nn.Module):
    def __init__(self):
        super().__init__()
        self.h = lin(5, 5)
        self.add_module("1", S(("t", lin(5, 5))))

    def forward(self, x):
        h = self.h(x)
        t = self._modules["1"].t(h)
        return t + h + x


@case("outer_names")
def _(g):
    # a composite body wired to a name of the enclosing list and a model input
    return Y("""
        inputs:
          x: {shape: [5]}
        layers:
          - name: h
            linear: {out_features: 5}
          - sequential:
              - name: t
                linear: {out_features: 5}
              - in: [t, h, x]
                add: {}
        """), [g.randn(g.n, 5)], OuterNames()


class TwoOutputs(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = lin(4, 3)
        self.b = lin(4, 2)

    def forward(self, x):
        return self.b(x), self.a(x)


@case("two_outputs", ("", "b1", "bs2"))
def _(g):
    # outputs in the order of `outputs:`; the last entry is not an output
    return Y("""
        inputs:
          x: {shape: [4]}
        outputs: [b, a]
        layers:
          - name: a
            linear: {out_features: 3}
          - name: b
            in: x
            linear: {out_features: 2}
          - in: [a]
            relu: {}
        """), [g.randn(g.n, 4)], TwoOutputs()


class InputOrder(nn.Module):
    def __init__(self):
        super().__init__()
        self.p = lin(4, 4)

    def forward(self, seq, shift):
        return (self.p(seq) + shift.unsqueeze(1)).mean(1)


@case("input_order")
def _(g):
    # inputs are read in the order of `inputs:`, the first feeds the first entry
    return Y("""
        inputs:
          seq: {shape: [3, 4]}
          shift: {shape: [4]}
        layers:
          - name: p
            linear: {out_features: 4}
          - in: [p, shift]
            add: {}
          - mean: {dim: 1}
        """), [g.randn(g.n, 3, 4), g.randn(g.n, 4)], InputOrder()


@case("symbolic")
def _(g):
    return Y("""
        inputs:
          x: {shape: [T, 5]}
        layers:
          - linear: {out_features: 3}
          - softmax: {dim: 1}
        """), [g.randn(g.n, 4, 5)], S(lin(5, 3), nn.Softmax(1))


class ZeroBatch(nn.Module):
    def __init__(self):
        super().__init__()
        self.add_module("1", lin(4, 2))

    def forward(self, x, y):
        return torch.softmax(self._modules["1"](x + y.unsqueeze(1)), -1).mean(1)


@case("zero_batch", ("b0",))
def _(g):
    return Y("""
        inputs:
          x: {shape: [3, 4]}
          y: {shape: [4]}
        layers:
          - in: [x, y]
            add: {}
          - linear: {out_features: 2}
          - softmax
          - mean: {dim: 1}
        """), [g.randn(g.n, 3, 4), g.randn(g.n, 4)], ZeroBatch()


@case("json_model")
def _(g):
    # JSON is YAML too
    return ('{"inputs": {"x": {"shape": [3]}}, "layers": '
            '[{"linear": {"out_features": 2}}, "relu", '
            '{"name": "z", "linear": {"out_features": 3}}]}\n'), \
        [g.randn(g.n, 3)], S(lin(3, 2), nn.ReLU(), ("z", lin(2, 3)))


# ---- a functional interpreter of the YAML, to check the modules ----

def _per_sample_align(xs):
    """Insert unit dims after the batch so per-sample shapes align right."""
    r = max(x.dim() for x in xs)
    return [x.reshape(x.shape[:1] + (1,) * (r - x.dim()) + x.shape[1:])
            for x in xs]


def _listify(v):
    return v if isinstance(v, list) else [v]


def _op(op, hp, xs, W, pfx, used):
    x = xs[0]

    def param(name):
        used.add(pfx + name)
        return W[pfx + name]

    if op == "linear":
        w = param("weight")
        assert w.shape[0] == hp["out_features"]
        assert hp.get("in_features", x.shape[-1]) == x.shape[-1] == w.shape[1]
        return F.linear(x, w, param("bias") if hp.get("bias", True) else None)
    if op in ("identity", "dropout"):
        return x
    if op == "flatten":
        return torch.flatten(x, hp.get("start_dim", 1), hp.get("end_dim", -1))
    if op == "reshape":
        return x.reshape(x.shape[0], *hp["shape"])
    if op == "permute":
        assert hp["dims"][0] == 0
        return x.permute(*hp["dims"])
    if op == "transpose":
        return x.transpose(hp["dim0"], hp["dim1"])
    if op == "slice":
        idx = [slice(None)] * x.dim()
        idx[hp["dim"]] = slice(hp.get("start"), hp.get("end"),
                               hp.get("step", 1))
        return x[tuple(idx)]
    if op == "mean":
        return x.mean(tuple(_listify(hp["dim"])), keepdim=hp.get("keepdim", False))
    if op == "pad":
        return F.pad(x, tuple(hp["padding"]), value=hp.get("value", 0.0))
    if op in ("add", "mul", "sub", "div"):
        xs = _per_sample_align(xs)
        assert op in ("add", "mul") or len(xs) == 2
        y = xs[0]
        for z in xs[1:]:
            y = {"add": torch.add, "mul": torch.mul, "sub": torch.sub,
                 "div": torch.div}[op](y, z)
        return y
    if op == "concat":
        return torch.cat(xs, hp.get("dim", 1))
    if op == "matmul":
        assert len(xs) == 2 and xs[0].dim() == xs[1].dim()
        return torch.matmul(xs[0], xs[1])
    if op == "relu":
        return F.relu(x)
    if op == "leaky_relu":
        return F.leaky_relu(x, hp.get("negative_slope", 0.01))
    if op == "tanh":
        return torch.tanh(x)
    if op == "sigmoid":
        return torch.sigmoid(x)
    if op == "gelu":
        return F.gelu(x, approximate=hp.get("approximate", "none"))
    if op == "silu":
        return F.silu(x)
    if op == "softplus":
        return F.softplus(x, hp.get("beta", 1), hp.get("threshold", 20))
    if op == "relu_squared":
        return F.relu(x) ** 2
    if op == "softmax":
        return torch.softmax(x, hp.get("dim", -1))
    if op == "log_softmax":
        return torch.log_softmax(x, hp.get("dim", -1))
    raise ValueError("interpreter: unknown op " + op)


def _run_list(entries, x, env, pfx, doc, W, used):
    """Runs a list of entries on x; env is this list's own scope (a ChainMap
    child of the enclosing ones), where the list's named outputs go."""
    blocks = doc.get("blocks", {})
    for i, e in enumerate(entries):
        if isinstance(e, str):
            name, inn, op, hp = None, None, e, {}
        else:
            e = dict(e)
            name = e.pop("name", None)
            inn = e.pop("in", None)
            assert len(e) == 1, e
            op, hp = next(iter(e.items()))
            hp = {} if hp is None else hp
        scope = pfx + (name if name is not None else str(i)) + "."
        xs = [env[n] for n in _listify(inn)] if inn is not None else [x]

        def body(entries_, x_, pfx_):
            return _run_list(entries_, x_, env.new_child(), pfx_, doc, W, used)

        if op == "sequential":
            y = body(hp, xs[0], scope)
        elif op == "use":
            y = body(blocks[hp], xs[0], scope)
        elif op == "residual":
            if isinstance(hp, list):
                y = xs[0] + body(hp, xs[0], scope)
            else:
                y = (body(hp["shortcut"], xs[0], scope + "shortcut.")
                     + body(hp["body"], xs[0], scope))
        elif op == "repeat":
            entries_ = hp["body"] if "body" in hp else blocks[hp["use"]]
            y = xs[0]
            for k in range(hp["times"]):
                y = body(entries_, y, scope + "%d." % k)
        else:
            y = _op(op, hp, xs, W, scope, used)
        if name is not None:
            assert name not in env.maps[0], name
            env[name] = y
        x = y
    return x


def interpret(yaml_text, inputs, W):
    """The model's outputs and the set of parameter keys it read."""
    doc = yaml.safe_load(yaml_text)
    top = collections.ChainMap({}, dict(zip(doc["inputs"], inputs)))
    used = set()
    last = _run_list(doc["layers"], inputs[0], top, "", doc, W, used)
    outs = doc.get("outputs")
    return ([last] if outs is None else [top[n] for n in outs]), used


# ---- driver ----

def build(name, tag, fn):
    n, args = VARIANTS[tag]
    seed = zlib.crc32(name.encode())
    g = Gen(seed, n)
    torch.manual_seed(seed)
    text, inputs, module = fn(g)
    module = module.double().eval()
    with torch.no_grad():
        outs = module(*inputs)
    outs = list(outs) if isinstance(outs, tuple) else [outs]
    weights = {k: v for k, v in module.state_dict().items()}
    for k, v in weights.items():
        assert torch.equal(v.float().double(), v), k

    # check the module against the YAML's meaning, and the parameter keys
    with torch.no_grad():
        ref, used = interpret(text, inputs, weights)
    assert used == set(weights), (name, sorted(used), sorted(weights))
    assert len(ref) == len(outs), name
    for a, b in zip(ref, outs):
        assert a.shape == b.shape, (name, a.shape, b.shape)
        scale = max(1.0, float(b.abs().max())) if b.numel() else 1.0
        assert float((a - b).abs().max()) <= 1e-12 * scale if b.numel() else True, name
    doc = yaml.safe_load(text)
    assert list(doc["inputs"]) and len(doc["inputs"]) == len(inputs), name
    return text, inputs, weights, outs, args


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("-o", "--out", default=os.path.join(
        here, "..", "tests", "fixtures", "core"),
        help="output directory (default: tests/fixtures/core)")
    opts = ap.parse_args()
    torch.set_num_threads(1)

    out = os.path.normpath(opts.out)
    if os.path.isdir(out):
        shutil.rmtree(out)
    os.makedirs(out)
    names = []
    for name, variants, fn in CASES:
        for tag in variants:
            dname = name + ("_" + tag if tag else "")
            assert dname not in names, dname
            names.append(dname)
            text, inputs, weights, outs, args = build(name, tag, fn)
            d = os.path.join(out, dname)
            os.makedirs(d)
            with open(os.path.join(d, "model.yaml"), "w") as f:
                f.write(text)
            if weights:
                dltools.write_safetensors(os.path.join(d, "model.safetensors"),
                                          weights)
            dltools.write_npys(os.path.join(d, "in.npy"), inputs)
            dltools.write_npys(os.path.join(d, "out.npy"), outs)
            if args:
                with open(os.path.join(d, "args"), "w") as f:
                    f.write(args + "\n")
    print("%d cases in %s" % (len(names), out))


if __name__ == "__main__":
    main()
