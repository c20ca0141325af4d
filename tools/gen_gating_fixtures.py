#!/usr/bin/python3
"""Generates the PyTorch fixtures of dlrun's sequence ops (embedding,
positional_encoding) under tests/fixtures/sequence/ and of its gating ops
(highway, spatial_gating, graph_conv) under tests/fixtures/gating/.

Each case is a directory that tests/fixtures.sh runs through `dlrun infer`:
model.yaml, model.safetensors (its default weights; none for parameterless
models), in.npy (every model input back to back, in `inputs:` order; token
ids as '<i8'), out.npy (the expected outputs), and optionally `args` (extra
dlrun infer arguments) and `rtol`.

References run in float64 (nn.Embedding, and the formulas of
man/dlrun-model.5 written with torch functions for the ops PyTorch lacks) on
float32-representable weights and inputs, then round to float32. Seeds are
fixed per case name: re-running gives the same bytes.
Run with Debian's python3-torch: /usr/bin/python3 tools/gen_gating_fixtures.py
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

CASES = []


def case(family, name, model, inputs, params, ref, args=None, rtol=None):
    """model: the YAML text; inputs: name -> (shape, kind) with kind 'f'
    (N(0, 1) floats), ('ids', lo, hi) or ('adj', weighted); params: key ->
    shape, or key -> (shape, 'const', value); ref(inputs, params) -> list of
    float64 outputs."""
    CASES.append(dict(family=family, name=name, model=model, inputs=inputs,
                      params=params, ref=ref, args=args, rtol=rtol))


def gen(name):
    g = torch.Generator()
    g.manual_seed(zlib.crc32(name.encode("ascii")))
    return g


def f32(t):
    """float64 tensor of float32-representable values"""
    return t.to(torch.float32).to(torch.float64)


# ---- references ----

def ref_embedding(key, num, pad=None):
    def ref(x, p):
        w = p[key + "weight"]
        ids = x[0]
        ok = (ids >= 0) & (ids < num)
        emb = nn.Embedding(num, w.shape[1], padding_idx=pad).double()
        with torch.no_grad():
            emb.weight.copy_(w)
            y = emb(torch.where(ok, ids, torch.zeros_like(ids)))
        # dlrun: an id out of range looks up a zero vector
        return [y * ok.unsqueeze(-1).double()]
    return ref


def sinusoid(T, D, base):
    t = torch.arange(T, dtype=torch.float64).unsqueeze(1)
    d = torch.arange(D, dtype=torch.float64)
    expo = (d - d % 2) / D
    a = t / torch.pow(torch.tensor(float(base), dtype=torch.float64), expo)
    return torch.where(d.long() % 2 == 0, torch.sin(a), torch.cos(a))


ACTS = {
    "relu": F.relu, "tanh": torch.tanh, "sigmoid": torch.sigmoid,
    "gelu": F.gelu, "silu": F.silu, "identity": lambda v: v,
}


def highway(x, p, key, act):
    h = ACTS[act](F.linear(x, p[key + "transform.weight"],
                           p[key + "transform.bias"]))
    t = torch.sigmoid(F.linear(x, p[key + "gate.weight"], p[key + "gate.bias"]))
    return h * t + x * (1 - t)


def spatial_gating(z, p, key, norm):
    c = z.shape[-1] // 2
    z1, z2 = z[..., :c], z[..., c:]
    if norm:
        z2 = F.layer_norm(z2, (c,), p[key + "norm.weight"], p[key + "norm.bias"],
                          eps=1e-5)
    f = torch.matmul(p[key + "weight"], z2) + p[key + "bias"].unsqueeze(-1)
    return z1 * f


def graph_conv(x, a, p, key, bias=True):
    V = a.shape[-1]
    b = a + torch.eye(V, dtype=torch.float64)
    s = b.sum(-1).pow(-0.5)
    ahat = s.unsqueeze(-1) * b * s.unsqueeze(-2)
    y = ahat @ (x @ p[key + "weight"].t())
    if bias:
        y = y + p[key + "bias"]
    return y


# ---- sequence cases ----

def seq_cases():
    m = """inputs:
  ids: {shape: [6], dtype: int}
layers:
  - embedding: {num_embeddings: 7, embedding_dim: 5}
"""
    case("sequence", "embedding_b1", m, {"ids": ([1, 6], ("ids", 0, 7))},
         {"0.weight": [7, 5]}, ref_embedding("0.", 7))

    m = """inputs:
  ids: {shape: [4], dtype: int}
layers:
  - name: emb
    embedding: {num_embeddings: 10, embedding_dim: 3, padding_idx: 0}
"""
    case("sequence", "embedding_padding", m, {"ids": ([3, 4], ("ids", 0, 4, 0))},
         {"emb.weight": ([10, 3], "padrow", 0)},
         ref_embedding("emb.", 10, 0), args="--batch-size 2")

    m = """inputs:
  ids: {shape: [3, 2], dtype: int}
layers:
  - embedding: {num_embeddings: 5, embedding_dim: 4, padding_idx: -2}
"""
    case("sequence", "embedding_padding_neg_3d", m,
         {"ids": ([2, 3, 2], ("ids", 0, 5, 3))},
         {"0.weight": ([5, 4], "padrow", 3)}, ref_embedding("0.", 5, 3))

    # ids out of range are an error (issue 9): tests/rough.sh

    m = """inputs:
  x: {shape: [7, 6]}
layers:
  - positional_encoding: {}
"""
    case("sequence", "posenc_sinusoidal", m, {"x": ([2, 7, 6], "f")}, {},
         lambda x, p: [x[0] + sinusoid(7, 6, 10000)])

    m = """inputs:
  x: {shape: [9, 5]}
layers:
  - positional_encoding: {kind: sinusoidal, base: 100, max_len: 9}
"""
    case("sequence", "posenc_sinusoidal_odd_b1", m, {"x": ([1, 9, 5], "f")},
         {}, lambda x, p: [x[0] + sinusoid(9, 5, 100)])

    m = """inputs:
  x: {shape: [40, 8]}
layers:
  - positional_encoding: {base: 7.5}
"""
    case("sequence", "posenc_sinusoidal_long", m, {"x": ([2, 40, 8], "f")},
         {}, lambda x, p: [x[0] + sinusoid(40, 8, 7.5)])

    m = """inputs:
  x: {shape: [5, 3]}
layers:
  - name: pos
    positional_encoding: {kind: learned, max_len: 8}
"""
    case("sequence", "posenc_learned", m, {"x": ([3, 5, 3], "f")},
         {"pos.weight": [8, 3]},
         lambda x, p: [x[0] + p["pos.weight"][:5]], args="--batch-size 2")

    m = """inputs:
  ids: {shape: [T], dtype: int}
layers:
  - embedding: {num_embeddings: 11, embedding_dim: 4, padding_idx: 10}
  - positional_encoding: {kind: learned, max_len: 6}
  - positional_encoding: {}
"""
    def ref_emb_pe(x, p):
        (e,) = ref_embedding("0.", 11, 10)(x, p)
        e = e + p["1.weight"][:6]
        return [e + sinusoid(6, 4, 10000)]
    case("sequence", "embedding_posenc", m, {"ids": ([2, 6], ("ids", 0, 11, 10))},
         {"0.weight": ([11, 4], "padrow", 10), "1.weight": [6, 4]}, ref_emb_pe)


# ---- gating cases ----

def hw_params(key, D):
    return {key + "transform.weight": [D, D], key + "transform.bias": [D],
            key + "gate.weight": [D, D], key + "gate.bias": [D]}


def gating_cases():
    m = """inputs:
  x: {shape: [5]}
layers:
  - highway: {}
"""
    case("gating", "highway_relu", m, {"x": ([2, 5], "f")}, hw_params("0.", 5),
         lambda x, p: [highway(x[0], p, "0.", "relu")])

    for act, shape, args in (("tanh", [2, 3, 4], None),
                             ("gelu", [1, 7], None),
                             ("silu", [3, 2, 3], "--batch-size 2"),
                             ("sigmoid", [2, 6], None),
                             ("identity", [1, 3, 5], None)):
        per = shape[1:]
        m = """inputs:
  x: {shape: %s}
layers:
  - name: hw
    highway: {activation: %s}
""" % (dltools_list(per), act)
        case("gating", "highway_" + act, m, {"x": (shape, "f")},
             hw_params("hw.", per[-1]),
             (lambda a: lambda x, p: [highway(x[0], p, "hw.", a)])(act),
             args=args)

    m = """inputs:
  z: {shape: [5, 6]}
layers:
  - spatial_gating: {}
"""
    case("gating", "spatial_gating", m, {"z": ([2, 5, 6], "f")},
         {"0.weight": [5, 5], "0.bias": [5]},
         lambda x, p: [spatial_gating(x[0], p, "0.", False)])

    m = """inputs:
  z: {shape: [4, 10]}
layers:
  - name: sgu
    spatial_gating: {norm: true}
"""
    case("gating", "spatial_gating_norm_b1", m, {"z": ([1, 4, 10], "f")},
         {"sgu.weight": [4, 4], "sgu.bias": [4], "sgu.norm.weight": [5],
          "sgu.norm.bias": [5]},
         lambda x, p: [spatial_gating(x[0], p, "sgu.", True)])

    m = """inputs:
  z: {shape: [3, 2]}
layers:
  - linear: {out_features: 6}
  - spatial_gating: {norm: true}
"""
    case("gating", "spatial_gating_norm_bs", m, {"z": ([3, 3, 2], "f")},
         {"0.weight": [6, 2], "0.bias": [6], "1.weight": [3, 3],
          "1.bias": [3], "1.norm.weight": [3], "1.norm.bias": [3]},
         lambda x, p: [spatial_gating(
             F.linear(x[0], p["0.weight"], p["0.bias"]), p, "1.", True)],
         args="--batch-size 2")

    m = """inputs:
  x: {shape: [4, 3]}
  adj: {shape: [4, 4]}
layers:
  - in: [x, adj]
    graph_conv: {out_features: 5}
"""
    case("gating", "graph_conv", m,
         {"x": ([2, 4, 3], "f"), "adj": ([2, 4, 4], ("adj", False))},
         {"0.weight": [5, 3], "0.bias": [5]},
         lambda x, p: [graph_conv(x[0], x[1], p, "0.")])

    m = """inputs:
  x: {shape: [5, 2]}
  adj: {shape: [5, 5]}
layers:
  - name: gc
    in: [x, adj]
    graph_conv: {out_features: 3, bias: false}
  - name: h
    relu: {}
  - name: gc2
    in: [h, adj]
    graph_conv: {out_features: 2}
"""
    def ref_gc2(x, p):
        h = F.relu(graph_conv(x[0], x[1], p, "gc.", bias=False))
        return [graph_conv(h, x[1], p, "gc2.")]
    case("gating", "graph_conv_weighted_b1", m,
         {"x": ([1, 5, 2], "f"), "adj": ([1, 5, 5], ("adj", True))},
         {"gc.weight": [3, 2], "gc2.weight": [2, 3], "gc2.bias": [2]},
         ref_gc2)

    m = """inputs:
  x: {shape: [3, 4]}
  adj: {shape: [3, 3]}
layers:
  - in: [x, adj]
    graph_conv: {out_features: 1}
"""
    case("gating", "graph_conv_bs", m,
         {"x": ([3, 3, 4], "f"), "adj": ([3, 3, 3], ("adj", True))},
         {"0.weight": [1, 4], "0.bias": [1]},
         lambda x, p: [graph_conv(x[0], x[1], p, "0.")], args="--batch-size 2")

    # one graph for every sample: adj of batch 1 is shared
    m = """inputs:
  x: {shape: [4, 2]}
  adj: {shape: [4, 4]}
layers:
  - in: [x, adj]
    graph_conv: {out_features: 3}
"""
    case("gating", "graph_conv_shared_adj", m,
         {"x": ([3, 4, 2], "f"), "adj": ([1, 4, 4], ("adj", False))},
         {"0.weight": [3, 2], "0.bias": [3]},
         lambda x, p: [graph_conv(x[0], x[1], p, "0.")])


def dltools_list(v):
    return "[" + ", ".join(str(e) for e in v) + "]"


# ---- writing ----

def make_inputs(c, g):
    out = []
    for _, (shape, kind) in c["inputs"].items():
        if kind == "f":
            out.append(f32(torch.randn(shape, generator=g, dtype=torch.float64)))
        elif kind[0] == "ids":
            ids = torch.randint(kind[1], kind[2], shape, generator=g)
            if len(kind) > 3:
                ids.view(-1)[::3] = kind[3]  # the padding id, for sure
            out.append(ids)
        else:
            a = (torch.rand(shape, generator=g, dtype=torch.float64) < 0.5)
            a = a.to(torch.float64)
            if kind[1]:
                a = a * f32(2 * torch.rand(shape, generator=g,
                                           dtype=torch.float64))
            else:
                a = torch.maximum(a, a.transpose(-1, -2))  # undirected
                a = a * (1 - torch.eye(shape[-1], dtype=torch.float64))
            out.append(a)
    return out


def make_params(c, g):
    p = {}
    for key in sorted(c["params"]):
        spec = c["params"][key]
        if isinstance(spec, tuple):
            shape, _, row = spec
            w = f32(torch.randn(shape, generator=g, dtype=torch.float64))
            w[row] = 0  # as nn.Embedding's padding_idx row
        else:
            w = f32(torch.rand(spec, generator=g, dtype=torch.float64) * 2 - 1)
        p[key] = w
    return p


def write_inputs(path, arrays):
    with open(path, "wb") as f:
        for a in arrays:
            if a.dtype == torch.int64:
                arr = np.ascontiguousarray(a.numpy(), dtype="<i8")
            else:
                arr = dltools.as_f32(a)
            np.lib.format.write_array(f, arr, version=(1, 0),
                                      allow_pickle=False)


def run_case(c, root):
    g = gen(c["family"] + "/" + c["name"])
    x = make_inputs(c, g)
    p = make_params(c, g)
    ys = c["ref"](x, p)
    d = os.path.join(root, c["family"], c["name"])
    os.makedirs(d)
    with open(os.path.join(d, "model.yaml"), "w") as f:
        f.write("# tools/gen_gating_fixtures.py: %s\n" % c["name"])
        f.write(c["model"])
    if p:
        dltools.write_safetensors(os.path.join(d, "model.safetensors"), p)
    write_inputs(os.path.join(d, "in.npy"), x)
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
    seq_cases()
    gating_cases()
    for fam in ("sequence", "gating"):
        d = os.path.join(args.out, fam)
        if os.path.isdir(d):
            shutil.rmtree(d)
    for c in CASES:
        run_case(c, args.out)
    print("%d cases under %s/{sequence,gating}" % (len(CASES), args.out))


if __name__ == "__main__":
    main()
