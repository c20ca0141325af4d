#!/usr/bin/python3
"""Generates the PyTorch fixtures of dlrun's round-3 ops: where, the
comparisons eq, ne, lt, le, gt, ge, logical_not, logical_and, logical_or,
expand (and expand_as), tile, triu, tril, topk and upsample's size_of.

Two sets, both made from the same references:

tests/fixtures/round3/<case>/ (tests/fixtures.sh runs them through `dlrun
infer`): model.yaml, model.safetensors (its weights; none for parameterless
models), in.npy (every model input back to back, in `inputs:` order),
out.npy (the expected outputs back to back, in `outputs:` order) and
optionally `args` (extra dlrun infer arguments). Among them a nanoGPT-style
causal mask built from data: tril of a ones parameter, eq with 0, where to
-inf, fed to attention's float mask input.

tests/data/round3/ (tests/check_round3.c): one op per case, forward and
backward against PyTorch's autograd. cases.txt has one line per case,
NAME|OP|INPUTS|OUTPUTS|HYPERPARAMETERS; each case has NAME.x<i>.npy (the
inputs), NAME.gy<k>.npy (dL/d output k), NAME.y<k>.npy (the outputs) and
NAME.gx<i>.npy (dL/d input i; zeros where the op passes no gradient).

tests/data/train_parity/causal_mask/ (tests/train.sh): the causal-mask
model trained by PyTorch with SGD, in the format of
tools/gen_train_parity.py: model.yaml, init.safetensors, x.npy, y.npy,
args_sgd3, expected_sgd3.safetensors, probe.npy and
expected_probe_sgd3.npy. The mask's parameters get no gradient (bias, zero)
or a zero one (neginf), so they keep their values, -inf included.

References run in float64 on float32-representable values, then round to
float32. Comparison inputs are small integers, so that ties and equalities
occur; topk's inputs are distinct (PyTorch's order among tied elements is
unspecified). Seeds are fixed per case name: re-running gives the same
bytes.
Run with Debian's python3-torch: /usr/bin/python3 tools/gen_round3_fixtures.py
"""

import argparse
import os
import shutil
import sys
import zlib

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dltools  # noqa: E402

FAMILY = "round3"
CASES = []   # CLI cases: tests/fixtures/round3
UNITS = []   # single-op cases with gradients: tests/data/round3


def gen(name):
    g = torch.Generator()
    g.manual_seed(zlib.crc32((FAMILY + "/" + name).encode("ascii")))
    return g


def f32(t):
    """float64 tensor of float32-representable values"""
    return t.to(torch.float32).to(torch.float64)


def make(shape, kind, g):
    """kind: 'f' N(0, 1); 'int' integers in [-2, 2]; 'bool' 0/1;
    'logic' values in {0, 1, -2, 0.5}; 'distinct' a permutation spaced
    1/4 apart; 'distinct_nan' the same with one NaN per row"""
    n = int(np.prod(shape))
    if kind == "f":
        x = torch.randn(shape, generator=g, dtype=torch.float64)
    elif kind == "int":
        x = torch.randint(-2, 3, shape, generator=g).to(torch.float64)
    elif kind == "bool":
        x = torch.randint(0, 2, shape, generator=g).to(torch.float64)
    elif kind == "logic":
        vals = torch.tensor([0.0, 1.0, -2.0, 0.5, 0.0], dtype=torch.float64)
        x = vals[torch.randint(0, 5, shape, generator=g)]
    else:
        x = (torch.randperm(n, generator=g).to(torch.float64) - n / 2) / 4
        x = x.reshape(shape)
        if kind == "distinct_nan":
            last = x.reshape(-1, shape[-1])
            for r in range(last.shape[0]):
                last[r, (r * 3) % shape[-1]] = float("nan")
    return f32(x)


def ylist(v):
    return "[" + ", ".join(str(e) for e in v) + "]"


# batch variants: tag -> (batch size, dlrun infer arguments)
VARIANTS = {"": (3, None), "b1": (1, None), "bs2": (5, "--batch-size 2")}


def case(name, model, inputs, ref, params=None, args=None):
    """model: YAML text; inputs: name -> (full shape, kind); params: key ->
    float64 tensor; ref(xs, params) -> list of outputs"""
    CASES.append(dict(name=name, model=model, inputs=inputs, ref=ref,
                      params=params or {}, args=args))


def unit(name, op, hps, inputs, ref, n_out=1):
    """One op on inputs [(full shape, kind)]; ref(*xs) -> outputs; the
    gradients come from autograd of sum(gy_k * y_k) over the float
    outputs (the indices of topk get a gy too, which must be ignored)."""
    UNITS.append(dict(name=name, op=op, hps=hps, inputs=inputs, ref=ref,
                      n_out=n_out))


def variants(name, model, inputs, ref, tags=("", "b1", "bs2"), params=None):
    """inputs: name -> (per-sample shape, kind)"""
    for v in tags:
        n, args = VARIANTS[v]
        case(name + ("_" + v if v else ""), model,
             {k: ([n] + list(s), kind) for k, (s, kind) in inputs.items()},
             ref, params=params, args=args)


def two_in(a, b, line, out=None):
    return ("inputs:\n  a: {shape: %s}\n  b: {shape: %s}\nlayers:\n"
            "  - in: [a, b]\n    %s\n" % (ylist(a), ylist(b), line))


def one_in(x, line):
    return "inputs:\n  x: {shape: %s}\nlayers:\n  - %s\n" % (ylist(x), line)


def as01(t):
    return t.to(torch.float64)


# ---- where, comparisons, logical ops ----

CMPS = {"eq": torch.eq, "ne": torch.ne, "lt": torch.lt, "le": torch.le,
        "gt": torch.gt, "ge": torch.ge, "logical_and": torch.logical_and,
        "logical_or": torch.logical_or}


def ps(*xs):
    """dlrun's broadcasting: batch dimensions match on their own, so a
    lower-rank input gets its size-1 dimensions after the batch"""
    nd = max(x.dim() for x in xs)
    return [x.reshape([x.shape[0]] + [1] * (nd - x.dim()) + list(x.shape[1:]))
            for x in xs]


def where_ref(c, a, b):
    c, a, b = ps(c, a, b)
    return torch.where(c != 0, a, b)


def compare_cases():
    m = ("inputs:\n  c: {shape: [3, 4]}\n  a: {shape: [3, 4]}\n"
         "  b: {shape: [4]}\nlayers:\n  - in: [c, a, b]\n    where: {}\n")
    variants("where_bcast_b", m, {"c": ([3, 4], "bool"), "a": ([3, 4], "f"),
                                  "b": ([4], "f")},
             lambda x, p: [where_ref(*x)])
    m = ("inputs:\n  c: {shape: [1, 5]}\n  a: {shape: [2, 1]}\n"
         "  b: {shape: [2, 5]}\nlayers:\n  - in: [c, a, b]\n    where: {}\n")
    variants("where_bcast_all", m, {"c": ([1, 5], "logic"),
                                    "a": ([2, 1], "f"), "b": ([2, 5], "f")},
             lambda x, p: [where_ref(*x)], tags=("", "b1"))
    for op, fn in CMPS.items():
        kind = "logic" if op.startswith("logical") else "int"
        variants(op, two_in([3, 5], [5], op + ": {}"),
                 {"a": ([3, 5], kind), "b": ([5], kind)},
                 (lambda f: lambda x, p: [as01(f(*ps(x[0], x[1])))])(fn),
                 tags=("", "b1") if op != "eq" else ("", "b1", "bs2"))
    variants("lt_bcast_both", two_in([2, 1, 3], [4, 1], "lt: {}"),
             {"a": ([2, 1, 3], "int"), "b": ([4, 1], "int")},
             lambda x, p: [as01(x[0] < x[1].unsqueeze(1))], tags=("",))
    variants("logical_not", one_in([3, 4], "logical_not"),
             {"x": ([3, 4], "logic")},
             lambda x, p: [as01(torch.logical_not(x[0]))])

    where_list = lambda *x: [where_ref(*x)]
    unit("where_bcast_b", "where", "", [([3, 3, 4], "bool"), ([3, 3, 4], "f"),
                                        ([3, 4], "f")], where_list)
    unit("where_bcast_all_b1", "where", "", [([1, 1, 5], "logic"),
                                             ([1, 2, 1], "f"),
                                             ([1, 2, 5], "f")], where_list)
    unit("where_bcast_ab", "where", "", [([2, 3, 1], "bool"), ([2, 1, 4], "f"),
                                         ([2, 3, 4], "f")], where_list)
    for op, fn in CMPS.items():
        kind = "logic" if op.startswith("logical") else "int"
        unit(op, op, "", [([3, 3, 5], kind), ([3, 5], kind)],
             (lambda f: lambda a, b: [as01(f(*ps(a, b)))])(fn))
    unit("logical_not", "logical_not", "", [([2, 3, 4], "logic")],
         lambda x: [as01(torch.logical_not(x))])


# ---- expand, tile, triu, tril, topk ----

def per_sample_expand(x, shape):
    """x [N, *s] to [N, *shape]: new dimensions in front of s"""
    k = x.dim() - 1
    full = [x.shape[0]] + [x.shape[1 + i - (len(shape) - k)]
                           if e == -1 else e for i, e in enumerate(shape)]
    return x.reshape([x.shape[0]] + [1] * (len(shape) - k) +
                     list(x.shape[1:])).expand(full)


def per_sample_tile(x, reps):
    return x.repeat([1] + list(reps)) if len(reps) == x.dim() - 1 else \
        x.reshape([x.shape[0]] + [1] * (len(reps) - x.dim() + 1) +
                  list(x.shape[1:])).repeat([1] + list(reps))


def topk_ref(k, dim=-1, largest=True, sort=True):
    def f(x):
        v, i = torch.topk(x, k, dim=dim, largest=largest, sorted=True)
        if not sort:
            i, order = torch.sort(i, dim=dim)
            v = torch.gather(v, dim, order)
        return [v, i.to(torch.float64)]
    return f


def expand_cases():
    variants("expand_keep", one_in([1, 4], "expand: {shape: [3, -1]}"),
             {"x": ([1, 4], "f")},
             lambda x, p: [per_sample_expand(x[0], [3, -1])])
    variants("expand_new_dims", one_in([3], "expand: {shape: [2, 5, 3]}"),
             {"x": ([3], "f")},
             lambda x, p: [per_sample_expand(x[0], [2, 5, 3])], tags=("", "b1"))
    m = ("inputs:\n  x: {shape: [2, 1, 3]}\n  like: {shape: [2, 4, 3]}\n"
         "layers:\n  - in: [x, like]\n    expand: {}\n")
    variants("expand_as", m, {"x": ([2, 1, 3], "f"), "like": ([2, 4, 3], "f")},
             lambda x, p: [x[0].expand_as(x[1])])
    variants("tile", one_in([2, 3], "tile: {repeats: [2, 1]}"),
             {"x": ([2, 3], "f")},
             lambda x, p: [per_sample_tile(x[0], [2, 1])])
    variants("tile_more_dims", one_in([2, 3], "tile: {repeats: [2, 1, 3]}"),
             {"x": ([2, 3], "f")},
             lambda x, p: [per_sample_tile(x[0], [2, 1, 3])], tags=("", "b1"))
    for op, fn in (("triu", torch.triu), ("tril", torch.tril)):
        variants(op, one_in([4, 5], op), {"x": ([4, 5], "f")},
                 (lambda f: lambda x, p: [f(x[0])])(fn))
        variants(op + "_diag1", one_in([2, 3, 3], op + ": {diagonal: 1}"),
                 {"x": ([2, 3, 3], "f")},
                 (lambda f: lambda x, p: [f(x[0], 1)])(fn), tags=("", "b1"))
        variants(op + "_diag_neg", one_in([5, 3], op + ": {diagonal: -2}"),
                 {"x": ([5, 3], "f")},
                 (lambda f: lambda x, p: [f(x[0], -2)])(fn), tags=("",))
    tk = ("inputs:\n  x: {shape: %s}\noutputs: [t.0, t.1]\nlayers:\n"
          "  - name: t\n    topk: %s\n")
    variants("topk", tk % ("[3, 7]", "{k: 3}"), {"x": ([3, 7], "distinct")},
             lambda x, p: topk_ref(3)(x[0]))
    variants("topk_dim1_smallest", tk % ("[5, 4]", "{k: 2, dim: 1, largest: false}"),
             {"x": ([5, 4], "distinct")},
             lambda x, p: topk_ref(2, 1, False)(x[0]), tags=("", "b1"))
    variants("topk_unsorted", tk % ("[2, 9]", "{k: 4, sorted: false}"),
             {"x": ([2, 9], "distinct")},
             lambda x, p: topk_ref(4, sort=False)(x[0]), tags=("",))
    variants("topk_nan", tk % ("[6]", "{k: 6}"), {"x": ([6], "distinct_nan")},
             lambda x, p: topk_ref(6)(x[0]), tags=("b1",))
    # the indices feed another op: values * (indices + 1)
    m = ("inputs:\n  x: {shape: [3, 6]}\nlayers:\n  - name: t\n"
         "    topk: {k: 2, dim: -1}\n  - in: t.1\n    scale: {shift: 1}\n"
         "  - in: [t, _]\n    mul: {}\n")
    variants("topk_indices_used", m, {"x": ([3, 6], "distinct")},
             lambda x, p: [(lambda v, i: v * (i + 1))(*topk_ref(2)(x[0]))],
             tags=("",))

    unit("expand_keep", "expand", "shape: [3, -1]", [([2, 1, 4], "f")],
         lambda x: [per_sample_expand(x, [3, -1])])
    unit("expand_new_dims_b1", "expand", "shape: [2, 5, 3]", [([1, 3], "f")],
         lambda x: [per_sample_expand(x, [2, 5, 3])])
    unit("expand_as", "expand", "", [([3, 2, 1, 3], "f"), ([3, 2, 4, 3], "f")],
         lambda x, like: [x.expand_as(like)])
    unit("expand_same", "expand", "shape: [-1, 4]", [([2, 3, 4], "f")],
         lambda x: [per_sample_expand(x, [-1, 4])])
    unit("tile", "tile", "repeats: [2, 1]", [([3, 2, 3], "f")],
         lambda x: [per_sample_tile(x, [2, 1])])
    unit("tile_more_dims", "tile", "repeats: [2, 1, 3]", [([2, 2, 3], "f")],
         lambda x: [per_sample_tile(x, [2, 1, 3])])
    for op, fn in (("triu", torch.triu), ("tril", torch.tril)):
        unit(op, op, "", [([2, 4, 5], "f")], (lambda f: lambda x: [f(x)])(fn))
        unit(op + "_diag1", op, "diagonal: 1", [([2, 2, 3, 3], "f")],
             (lambda f: lambda x: [f(x, 1)])(fn))
        unit(op + "_diag_neg", op, "diagonal: -2", [([1, 5, 3], "f")],
             (lambda f: lambda x: [f(x, -2)])(fn))
    unit("topk", "topk", "k: 3", [([3, 3, 7], "distinct")], topk_ref(3), 2)
    unit("topk_dim1_smallest", "topk", "k: 2, dim: 1, largest: false",
         [([2, 5, 4], "distinct")], topk_ref(2, 1, False), 2)
    unit("topk_unsorted", "topk", "k: 4, sorted: false",
         [([2, 2, 9], "distinct")], topk_ref(4, sort=False), 2)
    unit("topk_full_b1", "topk", "k: 5, dim: -2",
         [([1, 5, 2], "distinct")], topk_ref(5, -2), 2)


# ---- upsample {size_of} ----

def upsample_cases():
    m = ("inputs:\n  x: {shape: [2, 3, 4]}\n  y: {shape: [1, 7, 5]}\n"
         "layers:\n  - upsample: {size_of: y, mode: %s}\n")
    for mode in ("nearest", "bilinear"):
        variants("upsample_size_of_" + mode, m % mode,
                 {"x": ([2, 3, 4], "f"), "y": ([1, 7, 5], "f")},
                 (lambda md: lambda x, p: [F.interpolate(
                     x[0], size=x[1].shape[-2:], mode=md)])(mode),
                 tags=("", "b1") if mode == "bilinear" else ("",))
    # an entry, not an input: the skip of a U-Net's decoder
    m = ("inputs:\n  x: {shape: [2, 6, 5]}\nlayers:\n  - name: skip\n"
         "    identity: {}\n  - max_pool2d: {kernel_size: 2}\n"
         "  - upsample: {size_of: skip, mode: bilinear, align_corners: true}\n"
         "  - in: [_, skip]\n    add: {}\n")
    variants("upsample_size_of_entry", m, {"x": ([2, 6, 5], "f")},
             lambda x, p: [F.interpolate(F.max_pool2d(x[0], 2), size=(6, 5),
                                         mode="bilinear", align_corners=True)
                           + x[0]])
    m = ("inputs:\n  x: {shape: [2, 3]}\n  y: {shape: [1, 8]}\n"
         "layers:\n  - upsample: {size_of: y, mode: linear}\n")
    variants("upsample_size_of_linear", m, {"x": ([2, 3], "f"),
                                            "y": ([1, 8], "f")},
             lambda x, p: [F.interpolate(x[0], size=8, mode="linear")],
             tags=("",))
    # nearest down and up at once (7 -> 3, 4 -> 9)
    m = ("inputs:\n  x: {shape: [1, 7, 4]}\n  y: {shape: [2, 3, 9]}\n"
         "layers:\n  - upsample: {size_of: y}\n")
    variants("upsample_size_of_mixed", m, {"x": ([1, 7, 4], "f"),
                                           "y": ([2, 3, 9], "f")},
             lambda x, p: [F.interpolate(x[0], size=(3, 9))], tags=("",))

    unit("upsample_size_of_bilinear", "upsample", "size_of: y, mode: bilinear",
         [([2, 2, 3, 4], "f"), ([2, 1, 7, 5], "f")],
         lambda x, y: [F.interpolate(x, size=y.shape[-2:], mode="bilinear")])
    unit("upsample_size_of_nearest", "upsample", "size_of: y",
         [([1, 2, 7, 4], "f"), ([1, 1, 3, 9], "f")],
         lambda x, y: [F.interpolate(x, size=y.shape[-2:])])


# ---- a nanoGPT-style causal mask built from data ----

CAUSAL_T, CAUSAL_D = 5, 4


def causal_cases():
    """q, k, v projections of x; mask = where(tril(ones) == 0, -inf, 0)
    from the parameter bias (nanoGPT's buffer), added to the scores by
    attention's float mask input; the same through matmul, where and
    softmax written out. The 0 that eq compares with is a parameter (eq
    passes it no gradient); where's 0 branch is 0 * masked, no parameter,
    so that training leaves the mask as it is."""
    T, D = CAUSAL_T, CAUSAL_D
    m = """inputs:
  x: {shape: [%d, %d]}
outputs: [y, z]
layers:
  - name: bias
    parameter: {shape: [%d, %d]}
  - name: zero
    parameter: {shape: [1]}
  - name: neginf
    parameter: {shape: [1]}
  - name: lower
    in: bias
    tril: {}
  - name: masked
    in: [lower, zero]
    eq: {}
  - name: zeros
    scale: {factor: 0}
  - name: mask
    in: [masked, neginf, zeros]
    where: {}
  - name: q
    in: x
    linear: {out_features: %d}
  - name: k
    in: x
    linear: {out_features: %d}
  - name: v
    in: x
    linear: {out_features: %d}
  - name: y
    in: [q, k, v, mask]
    attention: {}
  - name: kt
    in: k
    transpose: {dim0: 1, dim1: 2}
  - in: [q, kt]
    matmul: {}
  - name: scores
    scale: {factor: 0.5}
  - name: att
    in: [masked, neginf, scores]
    where: {}
  - softmax: {dim: -1}
  - name: z
    in: [_, v]
    matmul: {}
""" % (T, D, T, T, D, D, D)

    def ref(x, p):
        x = x[0]
        q = F.linear(x, p["q.weight"], p["q.bias"])
        k = F.linear(x, p["k.weight"], p["k.bias"])
        v = F.linear(x, p["v.weight"], p["v.bias"])
        masked = torch.tril(p["bias"]) == 0
        mask = torch.where(masked, p["neginf"], torch.zeros(T, T))
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask) \
            if hasattr(F, "scaled_dot_product_attention") else \
            torch.softmax(q @ k.transpose(1, 2) / D ** 0.5 + mask, -1) @ v
        att = (q @ k.transpose(1, 2)) * 0.5
        att = att.masked_fill(masked, float("-inf"))
        z = torch.softmax(att, -1) @ v
        return [y, z]

    g = gen("causal_params")
    params = {"bias": torch.ones(T, T, dtype=torch.float64),
              "zero": torch.zeros(1, dtype=torch.float64),
              "neginf": torch.full((1,), float("-inf"), dtype=torch.float64)}
    for nm in ("q", "k", "v"):
        params[nm + ".weight"] = f32(torch.rand(D, D, generator=g,
                                                dtype=torch.float64) - 0.5)
        params[nm + ".bias"] = f32(torch.rand(D, generator=g,
                                              dtype=torch.float64) - 0.5)
    variants("causal_mask", m, {"x": ([T, D], "f")}, ref, params=params)
    return m, ref, params


def causal_parity(m, ref, params, root):
    """SGD on mse, 8 samples in batches of 4, 3 epochs, not shuffled, as
    `dlrun train ARGS` does, in float64; the model's first output only.
    Not Adam: the keys' bias has a zero gradient in exact arithmetic (a
    constant added to a query's scores), which Adam would turn from float32
    rounding noise into steps of lr."""
    name, setting = "causal_mask", "sgd3"
    args = "--loss mse --optimizer sgd --lr 0.5 --epochs 3 --batch-size 4 --no-shuffle"
    g = gen("train_parity/" + name)
    x = make([8, CAUSAL_T, CAUSAL_D], "f", g)
    y = make([8, CAUSAL_T, CAUSAL_D], "f", g)
    probe = make([3, CAUSAL_T, CAUSAL_D], "f", g)
    p = {k: v.clone().requires_grad_(True) for k, v in params.items()}
    opt = torch.optim.SGD([p[k] for k in sorted(p)], lr=0.5)
    for _ in range(3):
        for i in range(0, 8, 4):
            opt.zero_grad()
            loss = F.mse_loss(ref([x[i:i + 4]], p)[0], y[i:i + 4])
            loss.backward()
            opt.step()
    trained = {k: v.detach() for k, v in p.items()}
    with torch.no_grad():
        out = ref([probe], trained)[0]
    d = os.path.join(root, name)
    if os.path.isdir(d):
        shutil.rmtree(d)
    os.makedirs(d)
    with open(os.path.join(d, "model.yaml"), "w") as f:
        f.write("# tools/gen_round3_fixtures.py: a nanoGPT-style causal mask "
                "built from data\n")
        f.write(m.replace("outputs: [y, z]", "outputs: [y]"))
    dltools.write_safetensors(os.path.join(d, "init.safetensors"), params)
    dltools.write_safetensors(os.path.join(d, "expected_%s.safetensors" % setting),
                              trained)
    for nm, a in (("x", x), ("y", y), ("probe", probe),
                  ("expected_probe_" + setting, out)):
        dltools.write_npys(os.path.join(d, nm + ".npy"), [a])
    with open(os.path.join(d, "args_" + setting), "w") as f:
        f.write(args + "\n")


# ---- writing ----

def run_case(c, root):
    g = gen(c["name"])
    x = [make(shape, kind, g) for shape, kind in c["inputs"].values()]
    p = c["params"]
    with torch.no_grad():
        ys = c["ref"](x, p)
    d = os.path.join(root, FAMILY, c["name"])
    os.makedirs(d)
    with open(os.path.join(d, "model.yaml"), "w") as f:
        f.write("# tools/gen_round3_fixtures.py: %s\n" % c["name"])
        f.write(c["model"])
    if p:
        dltools.write_safetensors(os.path.join(d, "model.safetensors"), p)
    dltools.write_npys(os.path.join(d, "in.npy"), x)
    dltools.write_npys(os.path.join(d, "out.npy"), ys)
    if c["args"]:
        with open(os.path.join(d, "args"), "w") as f:
            f.write(c["args"] + "\n")


def run_unit(u, data):
    g = gen("unit/" + u["name"])
    xs = [make(shape, kind, g).requires_grad_(True)
          for shape, kind in u["inputs"]]
    ys = u["ref"](*xs)
    gys = [f32(torch.randn(y.shape, generator=g, dtype=torch.float64))
           for y in ys]
    loss = sum((gy * y).sum() for gy, y in zip(gys, ys) if y.requires_grad)
    if isinstance(loss, torch.Tensor) and loss.requires_grad:
        loss.backward()
    save = lambda what, a: dltools.write_npys(
        os.path.join(data, "%s.%s.npy" % (u["name"], what)), [a])
    for i, x in enumerate(xs):
        save("x%d" % i, x.detach())
        save("gx%d" % i, x.grad if x.grad is not None else torch.zeros_like(x))
    for k, (y, gy) in enumerate(zip(ys, gys)):
        save("y%d" % k, y.detach())
        save("gy%d" % k, gy)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(here, "..", "tests"),
                    help="the tests directory (default: tests)")
    args = ap.parse_args()
    torch.set_default_dtype(torch.float64)
    compare_cases()
    expand_cases()
    upsample_cases()
    causal = causal_cases()
    root = os.path.join(args.out, "fixtures")
    data = os.path.join(args.out, "data", FAMILY)
    for d in (os.path.join(root, FAMILY), data):
        if os.path.isdir(d):
            shutil.rmtree(d)
    os.makedirs(data)
    for c in CASES:
        run_case(c, root)
    for u in UNITS:
        run_unit(u, data)
    causal_parity(*causal, os.path.join(args.out, "data", "train_parity"))
    with open(os.path.join(data, "cases.txt"), "w") as f:
        f.write("# NAME|OP|INPUTS|OUTPUTS|HYPERPARAMETERS: written by "
                "tools/gen_round3_fixtures.py\n")
        for u in UNITS:
            f.write("%s|%s|%d|%d|%s\n" % (u["name"], u["op"], len(u["inputs"]),
                                         u["n_out"], u["hps"]))
    print("%d cases under %s/%s, %d under %s" % (len(CASES), root, FAMILY,
                                                 len(UNITS), data))


if __name__ == "__main__":
    main()
