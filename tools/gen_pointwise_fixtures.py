#!/usr/bin/python3
"""Generates the PyTorch fixtures of dlrun's pointwise ops under
tests/fixtures/pointwise/: the activations relu6, hardswish, hardsigmoid,
elu, selu, mish; the elementwise exp, log, sqrt, abs, neg, clamp, scale;
positional_encoding's mode: concat (and its dim); graph_conv on [N, ..., V,
F] features.

Each case is a directory that tests/fixtures.sh runs through `dlrun infer`:
model.yaml, model.safetensors (its default weights; none for parameterless
models), in.npy (every model input back to back, in `inputs:` order),
out.npy (the expected outputs), and optionally `args` (extra dlrun infer
arguments) and `rtol`.

References run in float64 (PyTorch's modules and functions, and the formulas
of man/dlrun-model.5 written with torch functions where PyTorch has no
module) on float32-representable weights and inputs, then round to float32.
Seeds are fixed per case name: re-running gives the same bytes.
Run with Debian's python3-torch: /usr/bin/python3 tools/gen_pointwise_fixtures.py
"""

import argparse
import os
import shutil
import sys
import zlib

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dltools  # noqa: E402

FAMILY = "pointwise"
CASES = []


def case(name, model, inputs, ref, params=None, args=None, rtol=None):
    """model: the YAML text; inputs: name -> (shape, kind), kind one of
    ('normal', scale), ('pos', lo, hi) (uniform in [lo, hi)), ('fixed',
    values) (the values cycled over the shape), ('adj', weighted); params:
    key -> shape (U(-1, 1)); ref(inputs, params) -> list of float64
    outputs."""
    CASES.append(dict(name=name, model=model, inputs=inputs, ref=ref,
                      params=params or {}, args=args, rtol=rtol))


def gen(name):
    g = torch.Generator()
    g.manual_seed(zlib.crc32((FAMILY + "/" + name).encode("ascii")))
    return g


def f32(t):
    """float64 tensor of float32-representable values"""
    return t.to(torch.float32).to(torch.float64)


def ylist(v):
    return "[" + ", ".join(str(e) for e in v) + "]"


def one_op(per, line):
    """A model of one op on one input x of per-sample shape per."""
    return "inputs:\n  x: {shape: %s}\nlayers:\n  - %s\n" % (ylist(per), line)


# batch variants: tag -> (batch size, dlrun infer arguments)
VARIANTS = {"": (3, None), "b1": (1, None), "bs2": (5, "--batch-size 2")}


def unary(name, line, fn, per=(3, 5), kind=("normal", 3.0),
          variants=("", "b1")):
    """One case per variant of the op written as `line`, reference fn."""
    for v in variants:
        n, args = VARIANTS[v]
        case(name + ("_" + v if v else ""), one_op(per, line),
             {"x": ([n] + list(per), kind)},
             (lambda f: lambda x, p: [f(x[0])])(fn), args=args)


# Values at and around the kinks and domain edges, mixed into the random
# inputs of the activations: relu6 0 and 6, hardswish / hardsigmoid -3 and
# 3, elu 0, mish's large |x| (exp overflows in float32 above 88.7).
EDGES = [0.0, 6.0, -3.0, 3.0, -6.0, 2.5, -0.5, 1e-3, -1e-3, 100.0, -100.0,
         20.0, -20.0, 7.25, -7.25]


# ---- activations ----

def activation_cases():
    unary("relu6", "relu6", nn.ReLU6(), per=(3, 5), kind=("normal", 5.0),
          variants=("", "b1", "bs2"))
    unary("relu6_edges", "relu6", nn.ReLU6(), per=(15,),
          kind=("fixed", EDGES), variants=("b1",))
    unary("hardswish", "hardswish", nn.Hardswish(), per=(7,),
          kind=("normal", 4.0), variants=("", "b1", "bs2"))
    unary("hardswish_edges", "hardswish: {}", nn.Hardswish(), per=(3, 5),
          kind=("fixed", EDGES), variants=("b1",))
    unary("hardsigmoid", "hardsigmoid", nn.Hardsigmoid(), per=(2, 3, 5),
          kind=("normal", 4.0))
    unary("hardsigmoid_edges", "hardsigmoid", nn.Hardsigmoid(), per=(15,),
          kind=("fixed", EDGES), variants=("b1",))
    unary("elu", "elu", nn.ELU(), per=(3, 5), variants=("", "b1", "bs2"))
    unary("elu_alpha", "elu: {alpha: 0.5}", nn.ELU(alpha=0.5), per=(9,))
    unary("elu_alpha_large", "elu: {alpha: 2.75}", nn.ELU(alpha=2.75),
          per=(5, 3))
    unary("elu_edges", "elu: {alpha: 1.5}", nn.ELU(alpha=1.5), per=(15,),
          kind=("fixed", EDGES), variants=("b1",))
    unary("selu", "selu", nn.SELU(), per=(3, 5), variants=("", "b1", "bs2"))
    unary("selu_edges", "selu", nn.SELU(), per=(15,), kind=("fixed", EDGES),
          variants=("b1",))
    unary("mish", "mish", nn.Mish(), per=(7, 3), variants=("", "b1", "bs2"))
    unary("mish_edges", "mish", nn.Mish(), per=(15,), kind=("fixed", EDGES),
          variants=("", "b1"))


# ---- elementwise ----

def elementwise_cases():
    unary("exp", "exp", torch.exp, per=(3, 5), kind=("normal", 2.0),
          variants=("", "b1", "bs2"))
    unary("exp_wide", "exp", torch.exp, per=(9,),
          kind=("fixed", [-80.0, -10.0, -1.0, 0.0, 0.5, 1.0, 10.0, 40.0,
                          80.0]), variants=("b1",))
    # log and sqrt on positive inputs, spanning several decades
    unary("log", "log", torch.log, per=(3, 5), kind=("pos", 0.01, 5.0),
          variants=("", "b1", "bs2"))
    unary("sqrt", "sqrt", torch.sqrt, per=(7,), kind=("pos", 0.0, 9.0),
          variants=("", "b1", "bs2"))
    # the domain's edges: log(0) = -inf, log(-1) = sqrt(-1) = NaN, sqrt(0) =
    # 0, as PyTorch (npycmp checks that NaN and Inf sit at the same places)
    unary("log_edges", "log", torch.log, per=(7,),
          kind=("fixed", [0.0, 1.0, 1e-30, 1e30, -1.0, 2.0, 0.5]),
          variants=("b1",))
    unary("sqrt_edges", "sqrt", torch.sqrt, per=(7,),
          kind=("fixed", [0.0, 1.0, 1e-30, 1e30, -1.0, 4.0, 0.25]),
          variants=("b1",))
    unary("abs", "abs", torch.abs, per=(3, 5), variants=("", "b1", "bs2"))
    unary("neg", "neg", torch.neg, per=(2, 3, 3), variants=("", "b1", "bs2"))
    unary("clamp_both", "clamp: {min: -0.5, max: 1.25}",
          lambda x: torch.clamp(x, -0.5, 1.25), per=(3, 5),
          variants=("", "b1", "bs2"))
    unary("clamp_min", "clamp: {min: 0.25}",
          lambda x: torch.clamp(x, min=0.25), per=(7,))
    unary("clamp_max", "clamp: {max: -0.75}",
          lambda x: torch.clamp(x, max=-0.75), per=(5, 3))
    unary("clamp_null_min", "clamp: {min: null, max: 2}",
          lambda x: torch.clamp(x, max=2.0), per=(5,), variants=("b1",))
    unary("clamp_equal", "clamp: {min: 1.5, max: 1.5}",
          lambda x: torch.clamp(x, 1.5, 1.5), per=(3,), variants=("b1",))
    unary("clamp_edges", "clamp: {min: -3, max: 6}",
          lambda x: torch.clamp(x, -3.0, 6.0), per=(15,),
          kind=("fixed", EDGES), variants=("b1",))
    unary("scale", "scale: {factor: 2.5, shift: -1}",
          lambda x: 2.5 * x - 1, per=(3, 5), variants=("", "b1", "bs2"))
    unary("scale_factor", "scale: {factor: -0.125}",
          lambda x: -0.125 * x, per=(7,))
    unary("scale_shift", "scale: {shift: 3}", lambda x: x + 3, per=(2, 5))
    unary("scale_default", "scale", lambda x: x, per=(3,), variants=("b1",))

    # a chain of them, as a model would use them: log(sqrt(|x|) + 1) etc.
    m = """inputs:
  x: {shape: [4, 3]}
layers:
  - abs
  - sqrt
  - scale: {shift: 1}
  - log
  - name: a
    neg: {}
  - name: b
    in: x
    exp: {}
  - in: [a, b]
    add: {}
  - clamp: {min: -1}
"""
    case("chain", m, {"x": ([3, 4, 3], ("normal", 1.0))},
         lambda x, p: [torch.clamp(-torch.log(torch.sqrt(x[0].abs()) + 1) +
                                   torch.exp(x[0]), min=-1)])


# ---- positional encoding with mode: concat ----

def sinusoid(T, D, base):
    t = torch.arange(T, dtype=torch.float64).unsqueeze(1)
    d = torch.arange(D, dtype=torch.float64)
    expo = (d - d % 2) / D
    a = t / torch.pow(torch.tensor(float(base), dtype=torch.float64), expo)
    return torch.where(d.long() % 2 == 0, torch.sin(a), torch.cos(a))


def concat_pe(x, pe):
    """[x, pe] along the last dimension, pe [T, E] repeated over the batch"""
    return torch.cat([x, pe.unsqueeze(0).expand(x.shape[0], -1, -1)], -1)


def posenc_cases():
    # the default dim: D channels more
    m = one_op((7, 5), "positional_encoding: {mode: concat}")
    case("posenc_concat", m, {"x": ([2, 7, 5], ("normal", 1.0))},
         lambda x, p: [concat_pe(x[0], sinusoid(7, 5, 10000))])
    m = one_op((6, 3), "positional_encoding: {mode: concat, dim: 4, base: 100}")
    case("posenc_concat_dim", m, {"x": ([3, 6, 3], ("normal", 1.0))},
         lambda x, p: [concat_pe(x[0], sinusoid(6, 4, 100))],
         args="--batch-size 2")
    m = one_op((5, 4), "positional_encoding: {mode: concat, dim: 7, max_len: 9}")
    case("posenc_concat_dim_odd_b1", m, {"x": ([1, 5, 4], ("normal", 1.0))},
         lambda x, p: [concat_pe(x[0], sinusoid(5, 7, 10000))])
    m = """inputs:
  x: {shape: [5, 2]}
layers:
  - name: pos
    positional_encoding: {kind: learned, max_len: 8, mode: concat, dim: 3}
  - linear: {out_features: 4}
"""
    case("posenc_concat_learned", m, {"x": ([3, 5, 2], ("normal", 1.0))},
         lambda x, p: [F.linear(concat_pe(x[0], p["pos.weight"][:5]),
                                p["1.weight"], p["1.bias"])],
         params={"pos.weight": [8, 3], "1.weight": [4, 5], "1.bias": [4]})
    m = one_op((4, 6), "positional_encoding: {kind: learned, max_len: 4, mode: concat}")
    case("posenc_concat_learned_default_dim_b1", m,
         {"x": ([1, 4, 6], ("normal", 1.0))},
         lambda x, p: [concat_pe(x[0], p["0.weight"])],
         params={"0.weight": [4, 6]})
    # mode: add with dim given equal to D is the same as without it
    m = one_op((3, 5), "positional_encoding: {mode: add, dim: 5}")
    case("posenc_add_dim", m, {"x": ([2, 3, 5], ("normal", 1.0))},
         lambda x, p: [x[0] + sinusoid(3, 5, 10000)])


# ---- graph_conv on [N, ..., V, F] ----

def graph_conv(x, a, p, key, bias=True):
    """x [N, ..., V, F], a [N or 1, V, V]: the slices between the batch and
    the nodes share their sample's graph"""
    V = a.shape[-1]
    b = a + torch.eye(V, dtype=torch.float64)
    s = b.sum(-1).pow(-0.5)
    ahat = s.unsqueeze(-1) * b * s.unsqueeze(-2)
    ahat = ahat.reshape([a.shape[0]] + [1] * (x.dim() - 3) + [V, V])
    y = ahat @ (x @ p[key + "weight"].t())
    if bias:
        y = y + p[key + "bias"]
    return y


def graph_conv_cases():
    # time steps: [N, T, V, F], one graph per sample
    m = """inputs:
  x: {shape: [3, 4, 2]}
  adj: {shape: [4, 4]}
layers:
  - in: [x, adj]
    graph_conv: {out_features: 5}
"""
    case("graph_conv_time", m,
         {"x": ([2, 3, 4, 2], ("normal", 1.0)), "adj": ([2, 4, 4], ("adj", False))},
         lambda x, p: [graph_conv(x[0], x[1], p, "0.")],
         params={"0.weight": [5, 2], "0.bias": [5]})
    # batch-1 adjacency shared by every sample and time step
    m = """inputs:
  x: {shape: [5, 3, 3]}
  adj: {shape: [3, 3]}
layers:
  - name: gc
    in: [x, adj]
    graph_conv: {out_features: 2, bias: false}
"""
    case("graph_conv_time_shared_adj", m,
         {"x": ([3, 5, 3, 3], ("normal", 1.0)), "adj": ([1, 3, 3], ("adj", True))},
         lambda x, p: [graph_conv(x[0], x[1], p, "gc.", bias=False)],
         params={"gc.weight": [2, 3]}, args="--batch-size 2")
    # two leading dimensions, batch 1, two layers sharing the graph
    m = """inputs:
  x: {shape: [2, 3, 5, 4]}
  adj: {shape: [5, 5]}
layers:
  - name: g1
    in: [x, adj]
    graph_conv: {out_features: 3}
  - name: h
    tanh: {}
  - name: g2
    in: [h, adj]
    graph_conv: {out_features: 1}
"""
    case("graph_conv_5d_b1", m,
         {"x": ([1, 2, 3, 5, 4], ("normal", 1.0)), "adj": ([1, 5, 5], ("adj", True))},
         lambda x, p: [graph_conv(torch.tanh(graph_conv(x[0], x[1], p, "g1.")),
                                  x[1], p, "g2.")],
         params={"g1.weight": [3, 4], "g1.bias": [3], "g2.weight": [1, 3],
                 "g2.bias": [1]})
    m = """inputs:
  x: {shape: [1, 3, 2]}
  adj: {shape: [3, 3]}
layers:
  - in: [x, adj]
    graph_conv: {out_features: 3}
"""
    case("graph_conv_time_batches", m,
         {"x": ([4, 1, 3, 2], ("normal", 1.0)), "adj": ([4, 3, 3], ("adj", False))},
         lambda x, p: [graph_conv(x[0], x[1], p, "0.")],
         params={"0.weight": [3, 2], "0.bias": [3]}, args="--batch-size 3")


# ---- writing ----

def make_inputs(c, g):
    out = []
    for _, (shape, kind) in c["inputs"].items():
        if kind[0] == "normal":
            x = torch.randn(shape, generator=g, dtype=torch.float64) * kind[1]
        elif kind[0] == "pos":
            x = kind[1] + (kind[2] - kind[1]) * torch.rand(
                shape, generator=g, dtype=torch.float64)
        elif kind[0] == "fixed":
            vals = torch.tensor(kind[1], dtype=torch.float64)
            n = int(np.prod(shape))
            x = vals.repeat((n + len(vals) - 1) // len(vals))[:n].reshape(shape)
        else:
            a = (torch.rand(shape, generator=g, dtype=torch.float64) < 0.5)
            x = a.to(torch.float64)
            if kind[1]:
                x = x * (2 * torch.rand(shape, generator=g, dtype=torch.float64))
            else:
                x = torch.maximum(x, x.transpose(-1, -2))  # undirected
                x = x * (1 - torch.eye(shape[-1], dtype=torch.float64))
        out.append(f32(x))
    return out


def make_params(c, g):
    p = {}
    for key in sorted(c["params"]):
        p[key] = f32(torch.rand(c["params"][key], generator=g,
                                dtype=torch.float64) * 2 - 1)
    return p


def run_case(c, root):
    g = gen(c["name"])
    x = make_inputs(c, g)
    p = make_params(c, g)
    with torch.no_grad():
        ys = c["ref"](x, p)
    d = os.path.join(root, FAMILY, c["name"])
    os.makedirs(d)
    with open(os.path.join(d, "model.yaml"), "w") as f:
        f.write("# tools/gen_pointwise_fixtures.py: %s\n" % c["name"])
        f.write(c["model"])
    if p:
        dltools.write_safetensors(os.path.join(d, "model.safetensors"), p)
    dltools.write_npys(os.path.join(d, "in.npy"), x)
    dltools.write_npys(os.path.join(d, "out.npy"), ys)
    if c["args"]:
        with open(os.path.join(d, "args"), "w") as f:
            f.write(c["args"] + "\n")
    if c["rtol"]:
        with open(os.path.join(d, "rtol"), "w") as f:
            f.write(c["rtol"] + "\n")


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(here, "..", "tests",
                                                  "fixtures"),
                    help="the fixtures root (default: tests/fixtures)")
    args = ap.parse_args()
    torch.set_default_dtype(torch.float64)
    activation_cases()
    elementwise_cases()
    posenc_cases()
    graph_conv_cases()
    d = os.path.join(args.out, FAMILY)
    if os.path.isdir(d):
        shutil.rmtree(d)
    for c in CASES:
        run_case(c, args.out)
    print("%d cases under %s/%s" % (len(CASES), args.out, FAMILY))


if __name__ == "__main__":
    main()
