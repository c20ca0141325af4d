#!/usr/bin/python3
"""Generates the PyTorch fixtures of dlrun's 3-D ops: conv3d,
conv_transpose3d, max_pool3d, avg_pool3d, adaptive_avg_pool3d and
batch_norm3d on [N, C, D, H, W].

Two sets, both made from the same references:

tests/fixtures/ops3d/<case>/ (tests/fixtures.sh runs them through `dlrun
infer`): model.yaml, model.safetensors (its default weights; none for
parameterless models), in.npy (the input), out.npy (the expected output)
and optionally `args` (extra dlrun infer arguments).

tests/data/ops3d/ (tests/check_conv.c reads it like tests/data/conv): one
op per case, forward and backward against PyTorch's autograd. cases.txt has
one line per case, NAME|OP|TRAIN|HYPERPARAMETERS; each case has NAME.x.npy
(input), NAME.p.PARAM.npy (parameters and buffers), NAME.gy.npy (dL/dy),
NAME.y.npy, NAME.gx.npy and NAME.g.PARAM.npy (the expected output and
gradients), and in training NAME.after.BUF.npy (running statistics after
the step). train_x.npy and train_y.npy are a small regression (16 volumes
[1, 4, 4, 4], each labelled with its mean) that tests/ops_3d.sh trains a
3-D network on. Max-pool cases named *_distinct have inputs spaced 2/numel apart
(a finite-difference step never changes a winner); *_ties hold tied maxima
(compared with PyTorch's gradient only).

References run in float64 on float32-representable values through
torch.nn.functional (F.conv3d, F.conv_transpose3d, F.max_pool3d,
F.avg_pool3d, F.adaptive_avg_pool3d, F.batch_norm as nn.BatchNorm3d calls
it), then round to float32. [before, after] padding pairs, which PyTorch's
ops do not take, are F.pad (zeros; -inf for max pooling) before an
unpadded op, and for conv_transpose3d a crop of the unpadded output. Seeds
are fixed per case name: re-running gives the same bytes.
Run with Debian's python3-torch: /usr/bin/python3 tools/gen_3d_fixtures.py
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

FIXTURES = []   # CLI cases: tests/fixtures/ops3d
UNITS = []      # single-op cases with gradients: tests/data/ops3d
BUFFERS = ("running_mean", "running_var")


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
    """kind: 'f' U(-1, 2); 'distinct' a permutation spaced 2/numel apart;
    'ties' integers in [-1, 1]"""
    n = int(np.prod(shape))
    if kind == "distinct":
        x = (rng.permutation(n) - n / 2) * (2.0 / n)
    elif kind == "ties":
        x = rng.integers(-1, 2, size=n).astype(np.float64)
    else:
        x = rng.uniform(-1.0, 2.0, size=n)
    return x.astype(np.float32).reshape(shape)


def triple(v):
    return list(v) if isinstance(v, (list, tuple)) else [v, v, v]


def is_pairs(p):
    return isinstance(p, list) and p and isinstance(p[0], list)


def pad_last_first(pairs):
    """[[db, da], [hb, ha], [wb, wa]] as F.pad's (wb, wa, hb, ha, db, da)"""
    out = []
    for b, a in reversed(pairs):
        out += [b, a]
    return tuple(out)


# ---- references: op name, hyperparameters -> a function of (x, params) ----

def ref(op, hp):
    k = hp.get("kernel_size")
    stride = hp.get("stride", 1)
    pad = hp.get("padding", 0)
    dil = hp.get("dilation", 1)
    if op == "conv3d":
        groups = hp.get("groups", 1)

        def f(x, p, train=False):
            if is_pairs(pad):
                x = F.pad(x, pad_last_first(pad))
                return F.conv3d(x, p["weight"], p.get("bias"), stride, 0, dil, groups)
            return F.conv3d(x, p["weight"], p.get("bias"), stride, pad, dil, groups)
        return f
    if op == "conv_transpose3d":
        groups = hp.get("groups", 1)
        outpad = hp.get("output_padding", 0)

        def f(x, p, train=False):
            if is_pairs(pad):
                y = F.conv_transpose3d(x, p["weight"], p.get("bias"), stride, 0,
                                       outpad, groups, dil)
                sl = [slice(None), slice(None)]
                for i, (b, a) in enumerate(pad):
                    sl.append(slice(b, y.shape[2 + i] - a))
                return y[tuple(sl)]
            return F.conv_transpose3d(x, p["weight"], p.get("bias"), stride, pad,
                                      outpad, groups, dil)
        return f
    if op == "max_pool3d":
        s = hp.get("stride", k)
        ceil = hp.get("ceil_mode", False)

        def f(x, p, train=False):
            if is_pairs(pad):
                x = F.pad(x, pad_last_first(pad), value=-np.inf)
                return F.max_pool3d(x, k, s, 0, dil, ceil_mode=ceil)
            return F.max_pool3d(x, k, s, pad, dil, ceil_mode=ceil)
        return f
    if op == "avg_pool3d":
        s = hp.get("stride", k)
        return lambda x, p, train=False: F.avg_pool3d(
            x, k, s, pad, ceil_mode=hp.get("ceil_mode", False),
            count_include_pad=hp.get("count_include_pad", True))
    if op == "adaptive_avg_pool3d":
        o = hp["output_size"]
        return lambda x, p, train=False: F.adaptive_avg_pool3d(
            x, tuple(o) if isinstance(o, list) else o)
    if op == "batch_norm3d":
        # nn.BatchNorm3d's forward: batch statistics in training or
        # without running statistics; the running ones updated in place
        def f(x, p, train=False):
            track = hp.get("track_running_stats", True)
            return F.batch_norm(x, p.get("running_mean"), p.get("running_var"),
                                p.get("weight"), p.get("bias"),
                                train or not track, hp.get("momentum", 0.1),
                                hp.get("eps", 1e-5))
        return f
    raise SystemExit("unknown op " + op)


def param_shapes(op, hp, x):
    C = x[1]
    if op in ("conv3d", "conv_transpose3d"):
        g = hp.get("groups", 1)
        O = hp["out_channels"]
        k = triple(hp["kernel_size"])
        w = [O, C // g] + k if op == "conv3d" else [C, O // g] + k
        out = {"weight": w}
        if hp.get("bias", True):
            out["bias"] = [O]
        return out
    if op == "batch_norm3d":
        out = {}
        if hp.get("affine", True):
            out.update({"weight": [C], "bias": [C]})
        if hp.get("track_running_stats", True):
            out.update({"running_mean": [C], "running_var": [C]})
        return out
    return {}


def make_params(rng, shapes):
    """weight U(0.5, 1.5) for batch norm, U(-0.5, 0.5) for convolutions;
    running_var U(0.5, 2); others U(-1, 1)"""
    out = {}
    for k, s in sorted(shapes.items()):
        if k == "weight" and len(s) == 5:
            lo, hi = -0.5, 0.5
        else:
            lo, hi = {"weight": (0.5, 1.5), "running_var": (0.5, 2.0)}.get(k, (-1.0, 1.0))
        out[k] = rng.uniform(lo, hi, size=s).astype(np.float32)
    return out


def fixture(name, op, x, kind="f", args=None, **hp):
    FIXTURES.append(dict(name=name, op=op, x=x, kind=kind, args=args, hp=hp))


def unit(name, op, x, kind="f", train=False, **hp):
    UNITS.append(dict(name=name, op=op, x=x, kind=kind, train=train, hp=hp))


def both(name, op, x, kind="f", args=None, **hp):
    fixture(name, op, x, kind, args, **hp)
    unit(name, op, x, kind, **hp)


# conv3d
both("conv3d_basic", "conv3d", [2, 3, 5, 6, 4], out_channels=4, kernel_size=3,
     padding=1)
both("conv3d_stride_pairs_b1", "conv3d", [1, 2, 7, 6, 5], out_channels=3,
     kernel_size=[3, 2, 3], stride=[2, 1, 2], padding=[[1, 0], [0, 1], [2, 1]])
both("conv3d_dilation_groups", "conv3d", [2, 4, 7, 5, 7], out_channels=6,
     kernel_size=[2, 3, 2], dilation=[2, 1, 3], groups=2, bias=False,
     padding=[0, 1, 1])
both("conv3d_same_even", "conv3d", [1, 2, 5, 4, 6], out_channels=2,
     kernel_size=[3, 2, 4], padding="same")
both("conv3d_valid_stride", "conv3d", [2, 2, 6, 7, 5], out_channels=3,
     kernel_size=2, stride=[2, 3, 1], padding="valid")
both("conv3d_pointwise", "conv3d", [2, 5, 3, 2, 4], out_channels=3, kernel_size=1)
both("conv3d_depthwise", "conv3d", [2, 3, 4, 5, 4], out_channels=6,
     kernel_size=3, groups=3, padding=[1, 0, 1], stride=[1, 1, 2])
fixture("conv3d_bs2", "conv3d", [3, 2, 4, 5, 3], args="--batch-size 2",
        out_channels=3, kernel_size=[2, 3, 2], padding=[1, 1, 0])
# conv_transpose3d
both("conv_transpose3d_basic", "conv_transpose3d", [2, 3, 3, 4, 3],
     out_channels=2, kernel_size=3, stride=2, padding=1, output_padding=1)
both("conv_transpose3d_groups_dil_b1", "conv_transpose3d", [1, 4, 3, 3, 4],
     out_channels=6, kernel_size=[2, 3, 2], stride=[1, 2, 2],
     dilation=[2, 1, 1], groups=2, output_padding=[1, 0, 1])
both("conv_transpose3d_pairs", "conv_transpose3d", [2, 2, 3, 2, 3],
     out_channels=3, kernel_size=[3, 2, 3], stride=[2, 1, 2],
     padding=[[1, 0], [0, 1], [2, 1]], output_padding=[1, 0, 0], bias=False)
both("conv_transpose3d_pointwise", "conv_transpose3d", [2, 4, 2, 3, 3],
     out_channels=2, kernel_size=1)
# max_pool3d
both("max_pool3d_basic_distinct", "max_pool3d", [2, 3, 6, 5, 7], "distinct",
     kernel_size=2)
both("max_pool3d_pad_ceil_distinct", "max_pool3d", [2, 2, 5, 6, 7], "distinct",
     kernel_size=3, stride=2, padding=1, ceil_mode=True)
both("max_pool3d_dil_b1_distinct", "max_pool3d", [1, 2, 7, 6, 6], "distinct",
     kernel_size=[2, 3, 2], stride=[1, 2, 2], dilation=[2, 1, 1],
     padding=[0, 1, 1])
both("max_pool3d_pairs_distinct", "max_pool3d", [2, 2, 5, 4, 5], "distinct",
     kernel_size=[2, 3, 2], stride=[2, 1, 2], padding=[[1, 0], [0, 1], [1, 1]])
both("max_pool3d_ties", "max_pool3d", [2, 2, 4, 5, 4], "ties",
     kernel_size=[2, 2, 3], stride=1, padding=[1, 0, 1])
fixture("max_pool3d_bs2", "max_pool3d", [3, 2, 4, 4, 5], args="--batch-size 2",
        kernel_size=2, stride=[1, 2, 2])
# avg_pool3d
both("avg_pool3d_basic", "avg_pool3d", [2, 3, 4, 6, 5], kernel_size=2)
both("avg_pool3d_pad_exclude_ceil", "avg_pool3d", [2, 2, 5, 6, 7],
     kernel_size=3, stride=2, padding=1, ceil_mode=True, count_include_pad=False)
both("avg_pool3d_pad_include_ceil_b1", "avg_pool3d", [1, 2, 6, 5, 7],
     kernel_size=[3, 2, 3], stride=[2, 2, 3], padding=1, ceil_mode=True)
both("avg_pool3d_stride1", "avg_pool3d", [2, 2, 4, 3, 5], kernel_size=[2, 3, 2],
     stride=1, padding=[1, 1, 0], count_include_pad=False)
# adaptive_avg_pool3d
both("adaptive_avg_pool3d_uneven", "adaptive_avg_pool3d", [2, 3, 7, 5, 6],
     output_size=[3, 2, 4])
both("adaptive_avg_pool3d_up_b1", "adaptive_avg_pool3d", [1, 2, 3, 2, 3],
     output_size=[4, 3, 2])
both("adaptive_avg_pool3d_global", "adaptive_avg_pool3d", [2, 4, 3, 4, 5],
     output_size=1)
# batch_norm3d
both("batch_norm3d_eval", "batch_norm3d", [2, 3, 3, 4, 2])
both("batch_norm3d_notrack_b1", "batch_norm3d", [1, 2, 3, 2, 4],
     track_running_stats=False, eps=1e-3)
fixture("batch_norm3d_bs2", "batch_norm3d", [3, 2, 2, 3, 2],
        args="--batch-size 2", num_features=2)
unit("batch_norm3d_train", "batch_norm3d", [3, 3, 2, 3, 4], train=True,
     momentum=0.3)
unit("batch_norm3d_noaffine_train", "batch_norm3d", [2, 2, 3, 3, 2], train=True,
     affine=False)


def model_yaml(c):
    per = c["x"][1:]
    hps = yaml_hps(c["hp"])
    return ("inputs:\n  x: {shape: %s}\nlayers:\n  - %s: {%s}\n"
            % (yaml_value(per), c["op"], hps))


def to64(params, grad=False):
    return {k: torch.tensor(v, dtype=torch.float64,
                            requires_grad=grad and k not in BUFFERS)
            for k, v in params.items()}


def write_case_dir(d, name, yaml_text, params, x, y, args):
    os.makedirs(d)
    with open(os.path.join(d, "model.yaml"), "w") as f:
        f.write("# tools/gen_3d_fixtures.py: %s\n" % name)
        f.write(yaml_text)
    if params:
        dltools.write_safetensors(os.path.join(d, "model.safetensors"), params)
    dltools.write_npys(os.path.join(d, "in.npy"), [x])
    dltools.write_npys(os.path.join(d, "out.npy"), [y])
    if args:
        with open(os.path.join(d, "args"), "w") as f:
            f.write(args + "\n")


def run_fixture(c, root):
    rng = rng_for("ops3d/" + c["name"])
    x = make_input(rng, c["x"], c["kind"])
    params = make_params(rng, param_shapes(c["op"], c["hp"], c["x"]))
    with torch.no_grad():
        y = ref(c["op"], c["hp"])(torch.tensor(x, dtype=torch.float64),
                                  to64(params))
    write_case_dir(os.path.join(root, c["name"]), c["name"], model_yaml(c),
                   {"0." + k: v for k, v in params.items()}, x, y, c["args"])


# A small 3-D network through every op: conv3d, batch_norm3d (running
# statistics, and num_batches_tracked in the weights), relu, max_pool3d, conv_transpose3d, avg_pool3d,
# adaptive_avg_pool3d, flatten, linear.
STACK = """inputs:
  x: {shape: [2, 6, 7, 5]}
layers:
  - conv3d: {out_channels: 4, kernel_size: 3, padding: [1, 1, 0], stride: [1, 2, 1]}
  - batch_norm3d: {}
  - relu
  - max_pool3d: {kernel_size: 2, ceil_mode: true}
  - conv_transpose3d: {out_channels: 3, kernel_size: [2, 3, 2], stride: 2, padding: 1, output_padding: [1, 0, 1]}
  - avg_pool3d: {kernel_size: 2, stride: 1, padding: 1, count_include_pad: false}
  - adaptive_avg_pool3d: {output_size: [2, 1, 3]}
  - flatten: {}
  - linear: {out_features: 5}
"""


def run_stack(root, name, batch, args=None):
    rng = rng_for("ops3d/" + name)
    x = make_input(rng, [batch, 2, 6, 7, 5], "f")
    p = {"0.weight": rng.uniform(-0.3, 0.3, size=[4, 2, 3, 3, 3]),
         "0.bias": rng.uniform(-0.3, 0.3, size=[4]),
         "1.weight": rng.uniform(0.5, 1.5, size=[4]),
         "1.bias": rng.uniform(-1, 1, size=[4]),
         "1.running_mean": rng.uniform(-0.5, 0.5, size=[4]),
         "1.running_var": rng.uniform(0.5, 2.0, size=[4]),
         "4.weight": rng.uniform(-0.4, 0.4, size=[4, 3, 2, 3, 2]),
         "4.bias": rng.uniform(-0.3, 0.3, size=[3]),
         "8.weight": rng.uniform(-0.3, 0.3, size=[5, 18]),
         "8.bias": rng.uniform(-0.3, 0.3, size=[5])}
    p = {k: v.astype(np.float32) for k, v in p.items()}
    t = to64(p)
    # PyTorch's state_dict has it; dlrun accepts it and has no use for it
    p["1.num_batches_tracked"] = np.array(7.0, dtype=np.float32)
    with torch.no_grad():
        h = F.conv3d(torch.tensor(x, dtype=torch.float64), t["0.weight"],
                     t["0.bias"], stride=[1, 2, 1], padding=[1, 1, 0])
        h = F.batch_norm(h, t["1.running_mean"], t["1.running_var"],
                         t["1.weight"], t["1.bias"], False)
        h = torch.relu(h)
        h = F.max_pool3d(h, 2, ceil_mode=True)
        h = F.conv_transpose3d(h, t["4.weight"], t["4.bias"], stride=2,
                               padding=1, output_padding=[1, 0, 1])
        h = F.avg_pool3d(h, 2, stride=1, padding=1, count_include_pad=False)
        h = F.adaptive_avg_pool3d(h, [2, 1, 3])
        y = F.linear(h.flatten(1), t["8.weight"], t["8.bias"])
    write_case_dir(os.path.join(root, name), name, STACK, p, x, y, args)


# ---- single-op cases with gradients ----

def run_unit(c):
    rng = rng_for(c["name"])
    x = make_input(rng, c["x"], c["kind"])
    params = make_params(rng, param_shapes(c["op"], c["hp"], c["x"]))
    tx = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    tp = to64(params, grad=True)
    y = ref(c["op"], c["hp"])(tx, tp, train=c["train"])
    gy = rng.uniform(-1.0, 1.0, size=list(y.shape)).astype(np.float32)
    (y * torch.tensor(gy, dtype=torch.float64)).sum().backward()
    out = {"x": x, "gy": gy, "y": y.detach().numpy(), "gx": tx.grad.numpy()}
    for k, v in params.items():
        out["p." + k] = v
    for k, t in tp.items():
        if k in BUFFERS:
            if c["train"]:
                out["after." + k] = t.detach().numpy()
        else:
            out["g." + k] = t.grad.numpy()
    return out


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(here, "..", "tests"),
                    help="the tests directory (default: tests)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    fx = os.path.join(args.out, "fixtures", "ops3d")
    data = os.path.join(args.out, "data", "ops3d")
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
            dltools.write_npys(os.path.join(data, "%s.%s.npy" % (c["name"], k)), [a])
        lines.append("%s|%s|%d|%s" % (c["name"], c["op"], int(c["train"]),
                                      yaml_hps(c["hp"])))
    rng = rng_for("ops3d/train")
    tx = (rng.uniform(-1.0, 1.0, size=[16, 1, 4, 4, 4]) +
          0.25 * (np.arange(16) % 4).reshape(16, 1, 1, 1, 1)).astype(np.float32)
    dltools.write_npys(os.path.join(data, "train_x.npy"), [tx])
    dltools.write_npys(os.path.join(data, "train_y.npy"),
                       [tx.astype(np.float64).mean(axis=(1, 2, 3, 4)).reshape(16, 1)])
    with open(os.path.join(data, "cases.txt"), "w") as f:
        f.write("# NAME|OP|TRAIN|HYPERPARAMETERS: written by "
                "tools/gen_3d_fixtures.py\n")
        f.write("\n".join(lines) + "\n")
    print("%d fixtures under %s, %d cases under %s" %
          (len(FIXTURES) + 3, fx, len(UNITS), data))


if __name__ == "__main__":
    sys.exit(main())
