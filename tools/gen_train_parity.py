#!/usr/bin/python3
"""Training parity fixtures for tests/train.sh: PyTorch's optimizer arithmetic
is the reference for `dlrun train`.

For every case this writes tests/data/train_parity/<case>/:

  model.yaml               the dlrun model
  init.safetensors         initial weights (PyTorch's default init, fixed seed)
  x.npy, y.npy             one batch of training data (y: int64 class ids or
                           float32 targets, as the loss needs)
  probe.npy                a fixed input for `dlrun infer` after training
  args_<S>                 the `dlrun train` flags of setting S, one line
  expected_<S>.safetensors PyTorch's weights after training with setting S
  expected_probe_<S>.npy   PyTorch's output (eval mode) on probe.npy with them

Settings: sgd (lr 0.1, momentum 0.9, one step over the whole batch; one case
with --nesterov, one with --weight-decay 0.01 --dampening 0.1), adamw (lr
0.01, betas 0.9,0.99, weight decay 0.05, three steps: three batches of one
epoch in file order) and sgd3 (three SGD steps, so that momentum and
dampening act); a few cases add adam with a cosine schedule and SGD with
gradient clipping and a step schedule.

Also tests/data/train_parity/resume/model.yaml (the model of the
resume-after-SIGKILL test, trained on models/data/digits.npz) and bad/*.npy
(labels and data that `dlrun train` must refuse).

The shell test knows nothing about the cases: it runs
  dlrun train CASE/model.yaml -w CASE/init.safetensors --data CASE/x.npy \
      --labels CASE/y.npy $(cat CASE/args_S) -o OUT.safetensors
and compares OUT with expected_S.safetensors tensor by tensor and the
model's output on probe.npy with expected_probe_S.npy.

Everything is float32 with fixed seeds; the files are byte-stable (no
timestamps, sorted keys). Before writing, every reference is recomputed in
float64 and must agree with the float32 one to 2e-6, so the 1e-5 tolerance
of the test is not eaten by the conditioning of a case.

Run: /usr/bin/python3 tools/gen_train_parity.py [OUTDIR]
(default OUTDIR: tests/data/train_parity next to this script's parent).
"""

import json
import math
import os
import struct
import sys
import textwrap

import numpy as np
import torch
from torch import nn
import torch.nn.functional as F

N = 12  # samples per case; the 3-step settings use batches of N // 3

# ---------------------------------------------------------------- writers


def f32(a):
    if isinstance(a, torch.Tensor):
        a = a.detach().cpu().numpy()
    return np.array(a, dtype="<f4", order="C", copy=True)


def safetensors_bytes(tensors):
    """F32 safetensors: 8-byte little-endian header length, compact JSON
    header with sorted keys padded with spaces to a multiple of 8, then the
    data in key order."""
    header, chunks, off = {}, [], 0
    for k in sorted(tensors):
        a = f32(tensors[k])
        b = a.tobytes()
        header[k] = {"data_offsets": [off, off + len(b)], "dtype": "F32",
                     "shape": list(a.shape)}
        chunks.append(b)
        off += len(b)
    text = json.dumps(header, separators=(",", ":"), sort_keys=True,
                      ensure_ascii=True).encode("ascii")
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(chunks)


def npy_bytes(a):
    """A version 1.0 .npy of a, written by hand so the bytes do not depend on
    the NumPy version: header padded with spaces to a multiple of 64."""
    a = np.ascontiguousarray(a)
    descr = {np.dtype("<f4"): "<f4", np.dtype("<i8"): "<i8"}[a.dtype]
    if a.ndim == 1:
        shape = "(%d,)" % a.shape[0]
    else:
        shape = "(" + ", ".join("%d" % n for n in a.shape) + ")"
    d = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr,
                                                                    shape)
    pad = -(10 + len(d) + 1) % 64
    h = (d + " " * pad + "\n").encode("latin1")
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h)) + h + a.tobytes()


def npy_any(a):
    """npy_bytes of a (a numpy array or torch tensor) as int64 '<i8' if it
    holds integers, else as float32 '<f4': a dlrun input or output."""
    if isinstance(a, torch.Tensor):
        a = a.detach().cpu().numpy()
    a = np.asarray(a)
    return npy_bytes(np.ascontiguousarray(
        a, dtype="<i8" if np.issubdtype(a.dtype, np.integer) else "<f4"))


def write(path, data):
    with open(path, "wb") as f:
        f.write(data)


# ---------------------------------------------------------------- models


class ResidualList(nn.Sequential):
    """y = x + body(x); an nn.Sequential, so its keys are <scope>.<i>.*"""

    def forward(self, x):
        return x + super().forward(x)


class Lambda(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x)


class ConcatShared(nn.Module):
    """h = linear(x); a = relu(h); b = tanh(h); cat = concat [a, b];
    out = linear(cat)"""

    def __init__(self):
        super().__init__()
        self.h = nn.Linear(6, 8)
        self.out = nn.Linear(16, 3)

    def forward(self, x):
        h = self.h(x)
        return self.out(torch.cat([torch.relu(h), torch.tanh(h)], 1))


class Gated(nn.Module):
    """h = linear(x); g = sigmoid(gate(x)); m = h * g; s = m - x;
    out = linear(s): the model input and two names used twice, with mul
    and sub"""

    def __init__(self):
        super().__init__()
        self.h = nn.Linear(6, 6)
        self.gate = nn.Linear(6, 6)
        self.out = nn.Linear(6, 3)

    def forward(self, x):
        m = self.h(x) * torch.sigmoid(self.gate(x))
        return self.out(m - x)


def S(*mods):
    return nn.Sequential(*mods)


def lin(i, o, bias=True):
    return nn.Linear(i, o, bias=bias)


Y = textwrap.dedent

CASES = []


def case(name, seed, yaml, build, xshape, target, loss="cross_entropy",
         extra="", sgd_extra="", more=()):
    CASES.append(dict(name=name, seed=seed, yaml=Y(yaml).lstrip(), build=build,
                      xshape=xshape, target=target, loss=loss, extra=extra,
                      sgd_extra=sgd_extra, more=more))


case("mlp", 101, """
    # MLP, no dropout: 8 -> 16 -> 16 -> 4, cross_entropy
    inputs:
      x: {shape: [8]}
    layers:
      - linear: {out_features: 16}
      - relu
      - linear: {out_features: 16}
      - relu
      - linear: {out_features: 4}
    """, lambda: S(lin(8, 16), nn.ReLU(), lin(16, 16), nn.ReLU(), lin(16, 4)),
     (8,), ("class", 4), more=("adam_cosine", "sgd_clip_step"))

case("residual_mlp", 102, """
    # residual MLP (residual: list form), cross_entropy; SGD with nesterov
    inputs:
      x: {shape: [7]}
    layers:
      - linear: {out_features: 12}
      - residual:
          - linear: {out_features: 10}
          - tanh
          - linear: {out_features: 12}
      - relu
      - residual:
          - linear: {out_features: 12}
          - relu
      - linear: {out_features: 3}
    """, lambda: S(lin(7, 12), ResidualList(lin(12, 10), nn.Tanh(), lin(10, 12)),
                   nn.ReLU(), ResidualList(lin(12, 12), nn.ReLU()), lin(12, 3)),
     (7,), ("class", 3), sgd_extra="--nesterov")

case("softmax_ce", 103, """
    # a softmax head: the model outputs probabilities and cross_entropy is
    # taken on them (as nn.CrossEntropyLoss on a softmax output);
    # SGD with weight decay and dampening
    inputs:
      x: {shape: [6]}
    layers:
      - linear: {out_features: 10}
      - gelu: {approximate: tanh}
      - linear: {out_features: 5}
      - softmax: {dim: 1}
    """, lambda: S(lin(6, 10), nn.GELU(approximate="tanh"), lin(10, 5),
                   nn.Softmax(dim=1)),
     (6,), ("class", 5),
     sgd_extra="--weight-decay 0.01 --dampening 0.1",
     more=("sgd_clip_step",))

case("concat_shared", 104, """
    # concat of two branches that share one named entry (h, used twice)
    inputs:
      x: {shape: [6]}
    layers:
      - name: h
        linear: {out_features: 8}
      - name: a
        in: h
        relu: {}
      - name: b
        in: h
        tanh: {}
      - name: cat
        in: [a, b]
        concat: {dim: 1}
      - name: out
        linear: {out_features: 3}
    """, ConcatShared, (6,), ("class", 3))

case("gated", 105, """
    # the model input and named entries used twice: mul, sub, sigmoid
    inputs:
      x: {shape: [6]}
    layers:
      - name: h
        linear: {out_features: 6}
      - name: gate
        in: x
        linear: {out_features: 6}
      - name: g
        sigmoid: {}
      - name: m
        in: [h, g]
        mul: {}
      - name: s
        in: [m, x]
        sub: {}
      - name: out
        linear: {out_features: 3}
    """, Gated, (6,), ("class", 3))

case("silu_softplus", 106, """
    # smooth activations: silu, softplus (beta 2), gelu
    inputs:
      x: {shape: [8]}
    layers:
      - linear: {out_features: 10}
      - silu
      - linear: {out_features: 10}
      - softplus: {beta: 2}
      - linear: {out_features: 10}
      - gelu
      - linear: {out_features: 4}
    """, lambda: S(lin(8, 10), nn.SiLU(), lin(10, 10), nn.Softplus(beta=2),
                   lin(10, 10), nn.GELU(), lin(10, 4)),
     (8,), ("class", 4), more=("adam_cosine",))

case("log_softmax_nll", 107, """
    # log_softmax output trained with --loss nll
    inputs:
      x: {shape: [6]}
    layers:
      - linear: {out_features: 9}
      - tanh
      - linear: {out_features: 4}
      - log_softmax
    """, lambda: S(lin(6, 9), nn.Tanh(), lin(9, 4), nn.LogSoftmax(dim=-1)),
     (6,), ("class", 4), loss="nll")

case("mse", 108, """
    # regression with --loss mse on float targets [N, 3]
    inputs:
      x: {shape: [5]}
    layers:
      - linear: {out_features: 8}
      - sigmoid
      - linear: {out_features: 3}
    """, lambda: S(lin(5, 8), nn.Sigmoid(), lin(8, 3)),
     (5,), ("float", 3), loss="mse")

case("bce", 109, """
    # multi-label logits with --loss bce_with_logits, targets 0/1 [N, 2]
    inputs:
      x: {shape: [6]}
    layers:
      - linear: {out_features: 8}
      - leaky_relu: {negative_slope: 0.1}
      - linear: {out_features: 2}
    """, lambda: S(lin(6, 8), nn.LeakyReLU(0.1), lin(8, 2)),
     (6,), ("binary", 2), loss="bce_with_logits")

case("seq_ce", 110, """
    # a per-position classifier: [N, 3, 4] output, [N, 3] labels, some
    # positions ignored with --ignore-index -100
    inputs:
      x: {shape: [3, 5]}
    layers:
      - linear: {out_features: 8}
      - relu
      - linear: {out_features: 4}
    """, lambda: S(lin(5, 8), nn.ReLU(), lin(8, 4)),
     (3, 5), ("seq_class", 4), extra="--ignore-index -100")

case("shape_ops", 111, """
    # shape ops inside a trained model: transpose, slice with a step,
    # mean, flatten
    inputs:
      x: {shape: [4, 6]}
    layers:
      - linear: {out_features: 5}
      - transpose: {dim0: 1, dim1: 2}
      - slice: {dim: 2, start: 0, step: 2}
      - tanh
      - flatten
      - linear: {out_features: 3}
    """, lambda: S(lin(6, 5), Lambda(lambda t: t.transpose(1, 2)),
                   Lambda(lambda t: t[:, :, 0::2]), nn.Tanh(), nn.Flatten(),
                   lin(10, 3)),
     (4, 6), ("class", 3))

# ---------------------------------------------------------------- settings


def settings_for(c):
    """setting name -> (optimizer factory, per-step lr function or None,
    batch size, clip, flags)"""
    loss = "" if c["loss"] == "cross_entropy" else " --loss " + c["loss"]
    extra = (" " + c["extra"]) if c["extra"] else ""
    common = loss + extra
    b3 = N // 3
    s = {}
    sx = (" " + c["sgd_extra"]) if c["sgd_extra"] else ""
    wd = 0.01 if "--weight-decay" in c["sgd_extra"] else 0.0
    damp = 0.1 if "--dampening" in c["sgd_extra"] else 0.0
    nest = "--nesterov" in c["sgd_extra"]
    s["sgd"] = (lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9,
                                          dampening=damp, weight_decay=wd,
                                          nesterov=nest),
                None, N, None,
                "--optimizer sgd --lr 0.1 --momentum 0.9%s --epochs 1 "
                "--batch-size %d --no-shuffle%s" % (sx, N, common))
    s["adamw"] = (lambda p: torch.optim.AdamW(p, lr=0.01, betas=(0.9, 0.99),
                                              weight_decay=0.05),
                  None, b3, None,
                  "--optimizer adamw --lr 0.01 --betas 0.9,0.99 "
                  "--weight-decay 0.05 --epochs 1 --batch-size %d "
                  "--no-shuffle%s" % (b3, common))
    if nest:
        s["sgd3"] = (lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9,
                                               nesterov=True,
                                               weight_decay=0.01),
                     None, b3, None,
                     "--optimizer sgd --lr 0.05 --momentum 0.9 --nesterov "
                     "--weight-decay 0.01 --epochs 1 --batch-size %d "
                     "--no-shuffle%s" % (b3, common))
    else:
        s["sgd3"] = (lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9,
                                               dampening=0.1,
                                               weight_decay=0.01),
                     None, b3, None,
                     "--optimizer sgd --lr 0.05 --momentum 0.9 "
                     "--dampening 0.1 --weight-decay 0.01 --epochs 1 "
                     "--batch-size %d --no-shuffle%s" % (b3, common))
    if "adam_cosine" in c["more"]:
        # cosine from 0.02 to 0.002 over T = 3 steps, Adam with L2 decay
        T = 3
        s["adam_cosine"] = (
            lambda p: torch.optim.Adam(p, lr=0.02, betas=(0.8, 0.95),
                                       eps=1e-6, weight_decay=0.01),
            lambda t: 0.002 + (0.02 - 0.002) * (1 + math.cos(math.pi * t / T))
            / 2,
            b3, None,
            "--optimizer adam --lr 0.02 --betas 0.8,0.95 --eps 1e-6 "
            "--weight-decay 0.01 --lr-schedule cosine --min-lr 0.002 "
            "--epochs 1 --batch-size %d --no-shuffle%s" % (b3, common))
    if "sgd_clip_step" in c["more"]:
        # two epochs of 3 steps; clip the global norm at 0.05 (below the
        # gradients' norm, so it acts); lr 0.2 * 0.5^floor(t / 2)
        s["sgd_clip_step"] = (
            lambda p: torch.optim.SGD(p, lr=0.2, momentum=0.5),
            lambda t: 0.2 * 0.5 ** (t // 2),
            b3, 0.05,
            "--optimizer sgd --lr 0.2 --momentum 0.5 --clip-grad-norm 0.05 "
            "--lr-schedule step --step-size 2 --gamma 0.5 --epochs 2 "
            "--batch-size %d --no-shuffle%s" % (b3, common))
    return s


# ---------------------------------------------------------------- reference


def loss_fn(c, out, y):
    if c["loss"] == "cross_entropy":
        if out.dim() == 3:  # [N, T, V] -> [N, V, T]
            return F.cross_entropy(out.transpose(1, 2), y, ignore_index=-100)
        return F.cross_entropy(out, y)
    if c["loss"] == "nll":
        return F.nll_loss(out, y)
    if c["loss"] == "mse":
        return F.mse_loss(out, y)
    return F.binary_cross_entropy_with_logits(out, y)


def train(c, model, init, x, y, setting, dtype):
    make_opt, sched, bs, clip, _ = setting
    model.load_state_dict({k: torch.tensor(v, dtype=dtype)
                           for k, v in init.items()})
    model.to(dtype)
    model.train()
    params = [p for _, p in sorted(model.named_parameters())]
    opt = make_opt(params)
    xt = torch.tensor(x, dtype=dtype)
    yt = torch.tensor(y) if y.dtype == np.int64 else torch.tensor(y, dtype=dtype)
    epochs = 2 if "--epochs 2" in setting[4] else 1
    t = 0
    losses = []
    for _ in range(epochs):
        for i in range(0, N, bs):
            if sched is not None:
                for g in opt.param_groups:
                    g["lr"] = sched(t)
            opt.zero_grad()
            loss = loss_fn(c, model(xt[i:i + bs]), yt[i:i + bs])
            loss.backward()
            if clip is not None:
                norm = torch.nn.utils.clip_grad_norm_(params, clip)
                assert norm > 2 * clip, (c["name"], float(norm))
            opt.step()
            losses.append(float(loss))
            t += 1
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def probe_out(model, state, probe, dtype):
    model.load_state_dict(state)
    model.eval()
    with torch.no_grad():
        return model(torch.tensor(probe, dtype=dtype))


def relerr(a, b):
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-30))


def make_case(c, outdir):
    torch.manual_seed(c["seed"])
    model = c["build"]()
    init = {k: f32(v) for k, v in model.state_dict().items()}
    keys = sorted(init)
    rng = np.random.default_rng(c["seed"])
    x = rng.standard_normal((N,) + c["xshape"]).astype("<f4")
    probe = rng.standard_normal((5,) + c["xshape"]).astype("<f4")
    kind, k = c["target"]
    if kind == "class":
        y = rng.integers(0, k, N).astype("<i8")
    elif kind == "seq_class":
        y = rng.integers(0, k, (N, c["xshape"][0])).astype("<i8")
        y[rng.random(y.shape) < 0.25] = -100
        y[:, 0] = np.where(y[:, 0] < 0, 1, y[:, 0])  # no batch all ignored
    elif kind == "float":
        y = rng.standard_normal((N, k)).astype("<f4")
    else:
        y = (rng.random((N, k)) < 0.5).astype("<f4")

    d = os.path.join(outdir, c["name"])
    os.makedirs(d, exist_ok=True)
    write(os.path.join(d, "model.yaml"), c["yaml"].encode())
    write(os.path.join(d, "init.safetensors"), safetensors_bytes(init))
    write(os.path.join(d, "x.npy"), npy_bytes(x))
    write(os.path.join(d, "y.npy"), npy_bytes(y))
    write(os.path.join(d, "probe.npy"), npy_bytes(probe))
    report = []
    for sname, setting in settings_for(c).items():
        st32 = train(c, model, init, x, y, setting, torch.float32)
        assert sorted(st32) == keys, (c["name"], sorted(st32), keys)
        out32 = probe_out(model, st32, probe, torch.float32)
        st64 = train(c, model, init, x, y, setting, torch.float64)
        out64 = probe_out(model, st64, probe, torch.float64)
        model.to(torch.float32)
        worst = max([relerr(f32(st32[k]), st64[k].numpy()) for k in keys] +
                    [relerr(f32(out32), out64.numpy())])
        moved = min(relerr(f32(st32[k]), init[k]) for k in keys)
        assert worst < 2e-6, (c["name"], sname, worst)
        assert moved > 1e-4, (c["name"], sname, "a tensor hardly moved", moved)
        write(os.path.join(d, "args_" + sname), (setting[4] + "\n").encode())
        write(os.path.join(d, "expected_%s.safetensors" % sname),
              safetensors_bytes({k: st32[k] for k in keys}))
        write(os.path.join(d, "expected_probe_%s.npy" % sname),
              npy_bytes(f32(out32)))
        report.append("%s f32-vs-f64 %.1e" % (sname, worst))
    print("%-16s %s" % (c["name"], ", ".join(report)))


RESUME_YAML = """\
# tests/train.sh kills a run of this model with SIGKILL, resumes it from its
# checkpoint and compares the final weights with an uninterrupted run's. It
# trains on models/data/digits.npz (8x8 images, 10 classes); the dropout
# makes the generator's state part of what a checkpoint must restore.
inputs:
  x: {shape: [64]}
layers:
  - linear: {out_features: 128}
  - relu
  - dropout: {p: 0.3}
  - linear: {out_features: 10}
"""


def make_bad(outdir):
    """Inputs that `dlrun train` must refuse (exit 2), for the models of the
    cases mlp (x [8], 4 classes), residual_mlp (3 classes) and mse (3
    float targets); 12 samples unless said otherwise."""
    d = os.path.join(outdir, "bad")
    os.makedirs(d, exist_ok=True)
    rng = np.random.default_rng(7)
    y = rng.integers(0, 4, N).astype("<i8")
    bad = {
        "y_range.npy": np.where(np.arange(N) == 5, 4, y).astype("<i8"),
        "y_negative.npy": np.where(np.arange(N) == 2, -1, y).astype("<i8"),
        "y_short.npy": y[:N - 1],
        "y_float.npy": y.astype("<f4"),
        "y_2col.npy": rng.integers(0, 3, (N, 2)).astype("<i8"),
        "t_2col.npy": rng.standard_normal((N, 2)).astype("<f4"),
        "t_int.npy": rng.integers(0, 3, (N, 3)).astype("<i8"),
        "x_int.npy": rng.integers(-3, 4, (N, 8)).astype("<i8"),
    }
    for name, a in bad.items():
        write(os.path.join(d, name), npy_bytes(a))


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    outdir = sys.argv[1] if len(sys.argv) > 1 else \
        os.path.join(here, "..", "tests", "data", "train_parity")
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    for c in CASES:
        make_case(c, outdir)
    os.makedirs(os.path.join(outdir, "resume"), exist_ok=True)
    write(os.path.join(outdir, "resume", "model.yaml"), RESUME_YAML.encode())
    make_bad(outdir)


if __name__ == "__main__":
    main()
