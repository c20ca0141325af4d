#!/usr/bin/python3
"""Generates the PyTorch fixtures of dlrun's reductions (sum, max, min,
argmax), adaptive max pools, group and instance norms and drop_path.

Two sets, both made from the same references:

tests/fixtures/reduce/<case>/ (tests/fixtures.sh runs them through `dlrun
infer`): model.yaml, model.safetensors (its default weights; none for
parameterless models), in.npy (the input), out.npy (the expected outputs,
back to back in `outputs:` order) and optionally `args` (extra dlrun infer
arguments).

tests/data/reduce/ (tests/check_conv.c reads it like tests/data/conv): one
op per case, forward and backward against PyTorch's autograd. cases.txt has
one line per case, NAME|OP|TRAIN|HYPERPARAMETERS; each case has NAME.x.npy
(input), NAME.p.PARAM.npy (parameters and buffers), NAME.gy.npy (dL/dy),
NAME.y.npy, NAME.gx.npy and NAME.g.PARAM.npy (the expected output and
gradients), and in training NAME.after.BUF.npy (running statistics after
the step). Cases
named *_ties hold tied extremes (their gradient is PyTorch's, but finite
differences are meaningless there); *_distinct inputs are spaced 2/numel
apart so that a finite-difference step never changes a winner.

References run in float64 on float32-representable values (torch.amax,
torch.amin, torch.argmax, nn.AdaptiveMaxPool1d/2d, and F.group_norm and F.instance_norm, which
nn.GroupNorm and nn.InstanceNorm1d/2d call), then round to float32. Seeds are fixed per case
name: re-running gives the same bytes.
Run with Debian's python3-torch: /usr/bin/python3 tools/gen_reduce_fixtures.py
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

FIXTURES = []   # CLI cases: tests/fixtures/reduce
UNITS = []      # single-op cases with gradients: tests/data/reduce


def yaml_value(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(yaml_value(e) for e in v) + "]"
    return str(v)


def yaml_hps(hp):
    return ", ".join("%s: %s" % (k, yaml_value(v)) for k, v in hp.items())


def rng_for(name):
    return np.random.Generator(np.random.PCG64(zlib.crc32(name.encode())))


def make_input(rng, shape, kind):
    """kind: 'f' U(-1, 2) (a non-zero mean for the norms); 'distinct' a
    permutation spaced 2/numel apart; 'ties' integers in [-1, 1] (many
    equal values)"""
    n = int(np.prod(shape))
    if kind == "distinct":
        x = (rng.permutation(n) - n / 2) * (2.0 / n)
    elif kind == "ties":
        x = rng.integers(-1, 2, size=n).astype(np.float64)
    else:
        x = rng.uniform(-1.0, 2.0, size=n)
    return x.astype(np.float32).reshape(shape)


# ---- references: op name, hyperparameters -> a function of (x, params) ----

def dims_of(hp):
    d = hp["dim"]
    return tuple(d) if isinstance(d, (list, tuple)) else d


def ref(op, hp):
    keep = hp.get("keepdim", False)
    if op == "sum":
        return lambda x, p: x.sum(dim=dims_of(hp), keepdim=keep)
    if op == "max":
        return lambda x, p: torch.amax(x, dim=dims_of(hp), keepdim=keep)
    if op == "min":
        return lambda x, p: torch.amin(x, dim=dims_of(hp), keepdim=keep)
    if op == "mean":
        return lambda x, p: x.mean(dim=dims_of(hp), keepdim=keep)
    if op == "argmax":
        return lambda x, p: torch.argmax(x, dim=hp["dim"],
                                         keepdim=keep).to(x.dtype)
    if op in ("adaptive_max_pool1d", "adaptive_max_pool2d"):
        o = hp["output_size"]
        m = (nn.AdaptiveMaxPool1d(o) if op.endswith("1d")
             else nn.AdaptiveMaxPool2d(tuple(o) if isinstance(o, list) else o))
        return lambda x, p: m(x)
    if op == "group_norm":
        # nn.GroupNorm's forward, with the parameters as given tensors
        return lambda x, p: F.group_norm(x, hp["num_groups"], p.get("weight"),
                                         p.get("bias"), hp.get("eps", 1e-5))
    if op in ("instance_norm1d", "instance_norm2d"):
        # nn.InstanceNorm1d/2d's forward (its defaults from a module), on
        # the given tensors; in training it updates p's running statistics
        # in place
        def f(x, p, train=False):
            m = (nn.InstanceNorm1d if op.endswith("1d") else nn.InstanceNorm2d)(
                x.shape[1], eps=hp.get("eps", 1e-5),
                momentum=hp.get("momentum", 0.1))
            track = hp.get("track_running_stats", m.track_running_stats)
            return F.instance_norm(x, p.get("running_mean"), p.get("running_var"),
                                   weight=p.get("weight"), bias=p.get("bias"),
                                   use_input_stats=train or not track,
                                   momentum=m.momentum, eps=m.eps)
        return f
    if op == "drop_path":
        return lambda x, p: x   # inference: the identity
    raise SystemExit("unknown op " + op)


def param_shapes(op, hp, x):
    C = x[1]
    if op == "group_norm" and hp.get("affine", True):
        return {"weight": [C], "bias": [C]}
    if op.startswith("instance_norm"):
        out = {}
        if hp.get("affine", False):
            out.update({"weight": [C], "bias": [C]})
        if hp.get("track_running_stats", False):
            out.update({"running_mean": [C], "running_var": [C]})
        return out
    return {}


BUFFERS = ("running_mean", "running_var")


def make_params(rng, shapes):
    """weight U(0.5, 1.5), running_var U(0.5, 2), others U(-1, 1)"""
    out = {}
    for k, s in sorted(shapes.items()):
        lo, hi = {"weight": (0.5, 1.5), "running_var": (0.5, 2.0)}.get(
            k, (-1.0, 1.0))
        out[k] = rng.uniform(lo, hi, size=s).astype(np.float32)
    return out


# ---- CLI fixtures: one op (or a small stack) through dlrun infer ----

def fixture(name, op, x, kind="f", args=None, **hp):
    FIXTURES.append(dict(name=name, op=op, x=x, kind=kind, args=args, hp=hp))


def unit(name, op, x, kind="f", train=False, **hp):
    UNITS.append(dict(name=name, op=op, x=x, kind=kind, train=train, hp=hp))


def both(name, op, x, kind="f", args=None, **hp):
    fixture(name, op, x, kind, args, **hp)
    unit(name, op, x, kind, **hp)


# sum
both("sum_last", "sum", [2, 3, 5], dim=-1)
both("sum_list_keepdim_b1", "sum", [1, 3, 4, 5], dim=[1, 3], keepdim=True)
fixture("sum_list_bs2", "sum", [3, 4, 3], args="--batch-size 2", dim=[2, 1])
fixture("sum_all_neg", "sum", [2, 3, 2, 3], dim=[-1, -2, -3])
# max and min (torch.amax, torch.amin)
both("max_dim1_distinct", "max", [2, 5, 3], "distinct", dim=1)
both("max_list_keepdim_distinct", "max", [3, 2, 4, 5], "distinct",
     dim=[-1, 2], keepdim=True)
fixture("max_b1", "max", [1, 7, 3], dim=-1)
fixture("max_bs2", "max", [3, 4, 5], args="--batch-size 2", dim=[1, 2])
both("max_ties", "max", [2, 4, 6], "ties", dim=[1, 2])
both("max_dim_ties", "max", [3, 5, 4], "ties", dim=-1, keepdim=True)
both("min_neg_keepdim_distinct", "min", [2, 4, 7], "distinct", dim=-2,
     keepdim=True)
both("min_list_b1_distinct", "min", [1, 3, 2, 5], "distinct", dim=[1, 2, 3])
both("min_ties", "min", [2, 3, 5], "ties", dim=[2])
# argmax (the first of ties)
both("argmax_last", "argmax", [2, 3, 7], dim=-1)
both("argmax_keepdim_b1", "argmax", [1, 4, 5], dim=1, keepdim=True)
both("argmax_ties", "argmax", [3, 6, 4], "ties", dim=1)
fixture("argmax_ties_mid", "argmax", [2, 3, 5, 4], "ties", dim=-2,
        keepdim=True)
# adaptive max pools, sizes that do not divide
both("amp1d_uneven_distinct", "adaptive_max_pool1d", [2, 3, 10], "distinct",
     output_size=4)
both("amp1d_b1_distinct", "adaptive_max_pool1d", [1, 2, 7], "distinct",
     output_size=3)
both("amp1d_up_distinct", "adaptive_max_pool1d", [2, 2, 5], "distinct",
     output_size=7)
fixture("amp1d_global_bs2", "adaptive_max_pool1d", [3, 2, 6],
        args="--batch-size 2", output_size=1)
both("amp2d_uneven_distinct", "adaptive_max_pool2d", [2, 3, 7, 9],
     "distinct", output_size=[3, 4])
both("amp2d_square_b1_distinct", "adaptive_max_pool2d", [1, 2, 5, 5],
     "distinct", output_size=2)
both("amp2d_up_distinct", "adaptive_max_pool2d", [2, 2, 3, 5], "distinct",
     output_size=[5, 2])
both("amp2d_ties", "adaptive_max_pool2d", [2, 2, 6, 5], "ties",
     output_size=[4, 3])
fixture("amp2d_global", "adaptive_max_pool2d", [2, 3, 4, 3], output_size=1)
# group norm
both("group_norm_1d", "group_norm", [2, 6, 5], num_groups=3)
both("group_norm_2d_eps_b1", "group_norm", [1, 4, 3, 3], num_groups=2,
     eps=1e-3)
both("group_norm_noaffine", "group_norm", [3, 6, 2, 2], num_groups=6,
     affine=False)
fixture("group_norm_noaffine_bs2", "group_norm", [3, 6, 2, 2],
        args="--batch-size 2", num_groups=6, affine=False)
fixture("group_norm_flat", "group_norm", [2, 8], num_groups=4, num_channels=8)
# (two values per group normalise to about -1 and 1 whatever they are:
# their input gradient is rounding noise, so the gradient case has more)
unit("group_norm_flat", "group_norm", [3, 12], num_groups=3, num_channels=12)
both("group_norm_3d_one_group", "group_norm", [2, 4, 2, 3, 2], num_groups=1)
# instance norms
both("instance_norm1d", "instance_norm1d", [2, 3, 7])
both("instance_norm1d_affine_b1", "instance_norm1d", [1, 4, 5], affine=True,
     eps=1e-3)
both("instance_norm2d", "instance_norm2d", [2, 3, 4, 5])
both("instance_norm2d_affine", "instance_norm2d", [3, 2, 3, 3], affine=True,
     momentum=0.2, num_features=2)
fixture("instance_norm2d_bs2", "instance_norm2d", [3, 2, 3, 3],
        args="--batch-size 2", track_running_stats=False)
# with running statistics: used at inference, updated in training
both("instance_norm1d_running", "instance_norm1d", [2, 3, 6],
     track_running_stats=True)
both("instance_norm2d_running_affine_b1", "instance_norm2d", [1, 2, 4, 3],
     track_running_stats=True, affine=True, eps=1e-3)
unit("instance_norm1d_running_train", "instance_norm1d", [3, 2, 5],
     train=True, track_running_stats=True, momentum=0.3)
unit("instance_norm2d_running_affine_train", "instance_norm2d", [2, 3, 3, 4],
     train=True, track_running_stats=True, affine=True)
# drop_path at inference: the identity
fixture("drop_path_infer", "drop_path", [2, 3, 4], p=0.3)
fixture("drop_path_infer_b1", "drop_path", [1, 5])


def model_yaml(c):
    per = c["x"][1:]
    hps = yaml_hps(c["hp"])
    return ("inputs:\n  x: {shape: %s}\nlayers:\n  - %s: {%s}\n"
            % (yaml_value(per), c["op"], hps))


def run_fixture(c, root):
    rng = rng_for("reduce/" + c["name"])
    x = make_input(rng, c["x"], c["kind"])
    params = make_params(rng, param_shapes(c["op"], c["hp"], c["x"]))
    tp = {k: torch.tensor(v, dtype=torch.float64) for k, v in params.items()}
    with torch.no_grad():
        y = ref(c["op"], c["hp"])(torch.tensor(x, dtype=torch.float64), tp)
    d = os.path.join(root, c["name"])
    os.makedirs(d)
    with open(os.path.join(d, "model.yaml"), "w") as f:
        f.write("# tools/gen_reduce_fixtures.py: %s\n" % c["name"])
        f.write(model_yaml(c))
    if params:
        dltools.write_safetensors(os.path.join(d, "model.safetensors"),
                                  {"0." + k: v for k, v in params.items()})
    dltools.write_npys(os.path.join(d, "in.npy"), [x])
    dltools.write_npys(os.path.join(d, "out.npy"), [y])
    if c["args"]:
        with open(os.path.join(d, "args"), "w") as f:
            f.write(c["args"] + "\n")


# A stack: conv2d, group_norm, relu, adaptive_max_pool2d, flatten, then
# max and argmax of the same features as two outputs.
STACK = """inputs:
  image: {shape: [3, 7, 6]}
outputs: [feat, top, which]
layers:
  - conv2d: {out_channels: 4, kernel_size: 3, padding: 1}
  - group_norm: {num_groups: 2, eps: 0.0001}
  - relu
  - adaptive_max_pool2d: {output_size: [2, 3]}
  - name: feat
    flatten: {}
  - name: top
    max: {dim: -1, keepdim: true}
  - name: which
    in: feat
    argmax: {dim: 1}
"""


def run_stack(root, name, batch, args=None):
    rng = rng_for("reduce/" + name)
    x = make_input(rng, [batch, 3, 7, 6], "f")
    p = {"0.weight": rng.uniform(-0.3, 0.3, size=[4, 3, 3, 3]),
         "0.bias": rng.uniform(-0.3, 0.3, size=[4]),
         "1.weight": rng.uniform(0.5, 1.5, size=[4]),
         "1.bias": rng.uniform(-1, 1, size=[4])}
    p = {k: v.astype(np.float32) for k, v in p.items()}
    t = {k: torch.tensor(v, dtype=torch.float64) for k, v in p.items()}
    with torch.no_grad():
        h = F.conv2d(torch.tensor(x, dtype=torch.float64),
                                 t["0.weight"], t["0.bias"], padding=1)
        h = F.group_norm(h, 2, t["1.weight"], t["1.bias"],
                                     eps=1e-4)
        h = torch.relu(h)
        h = F.adaptive_max_pool2d(h, (2, 3))
        feat = h.flatten(1)
        top = torch.amax(feat, dim=-1, keepdim=True)
        which = torch.argmax(feat, dim=1).double()
    d = os.path.join(root, name)
    os.makedirs(d)
    with open(os.path.join(d, "model.yaml"), "w") as f:
        f.write("# tools/gen_reduce_fixtures.py: %s\n" % name)
        f.write(STACK)
    dltools.write_safetensors(os.path.join(d, "model.safetensors"), p)
    dltools.write_npys(os.path.join(d, "in.npy"), [x])
    dltools.write_npys(os.path.join(d, "out.npy"), [feat, top, which])
    if args:
        with open(os.path.join(d, "args"), "w") as f:
            f.write(args + "\n")


# ---- single-op cases with gradients ----

def run_unit(c):
    rng = rng_for(c["name"])
    x = make_input(rng, c["x"], c["kind"])
    params = make_params(rng, param_shapes(c["op"], c["hp"], c["x"]))
    tx = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    tp = {k: torch.tensor(v, dtype=torch.float64, requires_grad=k not in BUFFERS)
          for k, v in params.items()}
    f = ref(c["op"], c["hp"])
    y = f(tx, tp, train=True) if c["train"] else f(tx, tp)
    gy = rng.uniform(-1.0, 1.0, size=list(y.shape)).astype(np.float32)
    if y.requires_grad:
        (y * torch.tensor(gy, dtype=torch.float64)).sum().backward()
    gx = tx.grad.numpy() if tx.grad is not None else np.zeros_like(x)
    out = {"x": x, "gy": gy, "y": y.detach().numpy(), "gx": gx}
    for k, v in params.items():
        out["p." + k] = v
    for k, t in tp.items():
        if k in BUFFERS:
            if c["train"]:
                out["after." + k] = t.detach().numpy()
        else:
            out["g." + k] = t.grad.numpy()
    return out


def save(path, a):
    a = np.ascontiguousarray(np.asarray(a, dtype=np.float64).astype("<f4"))
    with open(path, "wb") as f:
        np.lib.format.write_array(f, a, version=(1, 0), allow_pickle=False)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(here, "..", "tests"),
                    help="the tests directory (default: tests)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    fx = os.path.join(args.out, "fixtures", "reduce")
    data = os.path.join(args.out, "data", "reduce")
    for d in (fx, data):
        if os.path.isdir(d):
            shutil.rmtree(d)
        os.makedirs(d)
    for c in FIXTURES:
        run_fixture(c, fx)
    run_stack(fx, "stack", 2)
    run_stack(fx, "stack_b1", 1)
    run_stack(fx, "stack_bs2", 3, "--batch-size 2")
    lines = []
    for c in UNITS:
        for k, a in sorted(run_unit(c).items()):
            save(os.path.join(data, "%s.%s.npy" % (c["name"], k)), a)
        lines.append("%s|%s|%d|%s" % (c["name"], c["op"], int(c["train"]),
                                      yaml_hps(c["hp"])))
    with open(os.path.join(data, "cases.txt"), "w") as f:
        f.write("# NAME|OP|TRAIN|HYPERPARAMETERS: written by "
                "tools/gen_reduce_fixtures.py\n")
        f.write("\n".join(lines) + "\n")
    print("%d fixtures under %s, %d cases under %s" %
          (len(FIXTURES) + 3, fx, len(UNITS), data))


if __name__ == "__main__":
    sys.exit(main())
