#!/usr/bin/python3
"""Fixtures for the model-format features of the loader: tied parameters
(`share:`), shared repeats (`repeat: {shared: true}`), the `parameter` op,
digit names, `_` in `in:` lists, and weights files with key problems.

Training parity (run by tests/train.sh like every case there), written to
tests/data/train_parity/<case>/ in the layout of tools/gen_train_parity.py,
plus expected_losses_<S>.txt: PyTorch's loss of each step, one a line (train.sh compares
them with `dlrun train --log` within 1e-5 relative):

  gpt_tied       a GPT-style model: token embedding `wte`, a learned
                 position tensor `pos` (the `parameter` op, a bare
                 nn.Parameter), a pre-norm residual MLP block, a final
                 layer_norm and an LM head whose weight IS wte.weight
                 (`share: {weight: wte.weight}`, PyTorch's
                 `lm_head.weight = wte.weight`); cross_entropy over [N, T, V]
  shared_repeat  one residual block applied 3 times with one set of
                 parameters (`repeat: {times: 3, shared: true}`, PyTorch's
                 nn.Sequential(*[block] * 3)); written keys are copy 0's

Each is trained 5 Adam steps (batch = all samples, 5 epochs, so that the
per-epoch log line holds each step's loss) and 3 AdamW steps (3 batches).

Loader fixtures, written to tests/data/loader/ (tests/loader.sh):

  gpt_tied_both.safetensors     the PyTorch state_dict of gpt_tied's
                                initial model: both tied keys, equal
  gpt_tied_unequal.safetensors  the same with lm_head.weight changed
  gpt_tied_probe_init.npy       PyTorch's output of the initial model on
                                train_parity/gpt_tied/probe.npy
  shared_repeat_full.safetensors  PyTorch's state_dict of the shared
                                repeat: all three copies' keys, equal
                                (copies 1 and 2's are unexpected keys
                                to dlrun: it loads with --ignore-extra)
  digits.yaml, digits.safetensors, digits_x.npy, digits_y.npy
                                digit names ("0", "3", "4") for PyTorch's
                                index keys (layers.0.weight, 4.weight)
  underscore.yaml, underscore.safetensors, underscore_x.npy,
  underscore_y.npy              `_` in in: lists, against PyTorch
  nanogpt.yaml, nanogpt_ignore.yaml, nanogpt.safetensors, nanogpt_x.npy,
  nanogpt_y.npy                 nanoGPT-like keys with causal-mask buffers
                                h.I.attn.bias that the model does not use;
                                the _ignore model says ignore_keys
  keys.yaml, keys.safetensors   a file with 3 missing and 2 unexpected keys

Everything is float32 with fixed seeds and byte-stable. Before writing, each
training reference is recomputed in float64 and must agree with the float32
one to 2e-6, so the 1e-5 tolerance of the tests is not eaten by the
conditioning of a case.

Run: /usr/bin/python3 tools/gen_share_parity.py
"""

import os
import sys
import textwrap

import numpy as np
import torch
from torch import nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_train_parity import (f32, safetensors_bytes, npy_any,  # noqa: E402
                              npy_bytes, write, relerr)

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
PARITY = os.path.join(ROOT, "tests", "data", "train_parity")
LOADER = os.path.join(ROOT, "tests", "data", "loader")
Y = textwrap.dedent


class ResidualList(nn.Sequential):
    """y = x + body(x); an nn.Sequential, so its keys are <scope>.<i>.*"""

    def forward(self, x):
        return x + super().forward(x)


# ---------------------------------------------------------------- models

V, T, D = 13, 5, 8

GPT_YAML = Y("""
    # GPT-style: embedding + learned positions (parameter) + a pre-norm
    # residual MLP + layer_norm + an LM head tied to the embedding
    inputs:
      idx: {shape: [5], dtype: int}
    layers:
      - name: wte
        embedding: {num_embeddings: 13, embedding_dim: 8}
      - name: pos
        parameter: {shape: [5, 8]}
      - name: h
        in: [wte, pos]
        add: {}
      - name: block
        residual:
          - layer_norm
          - linear: {out_features: 16}
          - gelu
          - linear: {out_features: 8}
      - name: ln_f
        layer_norm: {}
      - name: lm_head
        share: {weight: wte.weight}
        linear: {out_features: 13, bias: false}
    """).lstrip()


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(V, D)
        self.pos = nn.Parameter(torch.randn(T, D))
        self.block = ResidualList(nn.LayerNorm(D), nn.Linear(D, 16),
                                  nn.GELU(), nn.Linear(16, D))
        self.ln_f = nn.LayerNorm(D)
        self.lm_head = nn.Linear(D, V, bias=False)
        self.lm_head.weight = self.wte.weight  # tied, as GPT-2's

    def forward(self, idx):
        h = self.wte(idx) + self.pos
        return self.lm_head(self.ln_f(self.block(h)))


REPEAT_YAML = Y("""
    # one residual block applied three times with one set of parameters
    inputs:
      x: {shape: [6]}
    layers:
      - linear: {out_features: 8}
      - repeat:
          times: 3
          shared: true
          body:
            - residual:
                - linear: {out_features: 8}
                - tanh
      - linear: {out_features: 4}
    """).lstrip()


def make_repeat():
    block = nn.Sequential(ResidualList(nn.Linear(8, 8), nn.Tanh()))
    return nn.Sequential(nn.Linear(6, 8), nn.Sequential(*[block] * 3),
                         nn.Linear(8, 4))


def unique_state(model):
    """The state_dict with each tensor once, under its first key (what
    dlrun writes)."""
    seen, out = set(), {}
    for k, v in model.state_dict().items():
        if v.data_ptr() in seen:
            continue
        seen.add(v.data_ptr())
        out[k] = v.detach().clone()
    return out


# ---------------------------------------------------------------- training

N = 6


def train(model, init, x, y, make_opt, bs, epochs, dtype, seq):
    model.load_state_dict({k: torch.tensor(v, dtype=dtype)
                           for k, v in init.items()}, strict=False)
    model.to(dtype)
    model.train()
    params = list(model.parameters())  # tied tensors once
    opt = make_opt(params)
    xt = torch.tensor(x) if x.dtype == np.int64 else torch.tensor(x, dtype=dtype)
    yt = torch.tensor(y)
    losses = []
    for _ in range(epochs):
        for i in range(0, N, bs):
            opt.zero_grad()
            out = model(xt[i:i + bs])
            if seq:
                out = out.transpose(1, 2)
            loss = F.cross_entropy(out, yt[i:i + bs])
            loss.backward()
            opt.step()
            losses.append(float(loss))
    return unique_state(model), losses


SETTINGS = {
    "adam5": (lambda p: torch.optim.Adam(p, lr=0.01), N, 5,
              "--optimizer adam --lr 0.01 --epochs 5 --batch-size %d "
              "--no-shuffle" % N),
    "adamw3": (lambda p: torch.optim.AdamW(p, lr=0.01, betas=(0.9, 0.99),
                                           weight_decay=0.05), N // 3, 1,
               "--optimizer adamw --lr 0.01 --betas 0.9,0.99 --weight-decay "
               "0.05 --epochs 1 --batch-size %d --no-shuffle" % (N // 3)),
}


def probe_out(model, state, probe, dtype):
    model.load_state_dict({k: torch.tensor(f32(v)).to(dtype)
                           for k, v in state.items()}, strict=False)
    model.to(dtype)
    model.eval()
    with torch.no_grad():
        p = torch.tensor(probe) if probe.dtype == np.int64 else \
            torch.tensor(probe, dtype=dtype)
        return model(p)


def parity_case(name, seed, yaml, build, x, y, probe, seq):
    torch.manual_seed(seed)
    model = build()
    init = {k: f32(v) for k, v in unique_state(model).items()}
    keys = sorted(init)
    d = os.path.join(PARITY, name)
    os.makedirs(d, exist_ok=True)
    write(os.path.join(d, "model.yaml"), yaml.encode())
    write(os.path.join(d, "init.safetensors"), safetensors_bytes(init))
    write(os.path.join(d, "x.npy"), npy_any(x))
    write(os.path.join(d, "y.npy"), npy_any(y))
    write(os.path.join(d, "probe.npy"), npy_any(probe))
    report = []
    for sname, (make_opt, bs, epochs, flags) in SETTINGS.items():
        st32, l32 = train(model, init, x, y, make_opt, bs, epochs,
                          torch.float32, seq)
        out32 = probe_out(model, st32, probe, torch.float32)
        st64, l64 = train(model, init, x, y, make_opt, bs, epochs,
                          torch.float64, seq)
        out64 = probe_out(model, st64, probe, torch.float64)
        model.to(torch.float32)
        assert sorted(st32) == keys, (name, sorted(st32), keys)
        worst = max([relerr(f32(st32[k]), st64[k].numpy()) for k in keys] +
                    [relerr(f32(out32), out64.numpy()),
                     relerr(np.float32(l32), np.float64(l64))])
        moved = min(relerr(f32(st32[k]), init[k]) for k in keys)
        assert worst < 2e-6, (name, sname, worst)
        assert moved > 1e-4, (name, sname, "a tensor hardly moved", moved)
        write(os.path.join(d, "args_" + sname), (flags + "\n").encode())
        write(os.path.join(d, "expected_%s.safetensors" % sname),
              safetensors_bytes({k: st32[k] for k in keys}))
        write(os.path.join(d, "expected_probe_%s.npy" % sname),
              npy_bytes(f32(out32)))
        if epochs > 1:  # one step per epoch: the log's losses are the steps'
            write(os.path.join(d, "expected_losses_" + sname + ".txt"),
                  "".join("%.9g\n" % v for v in l32).encode())
        report.append("%s f32-vs-f64 %.1e" % (sname, worst))
    print("%-16s %s" % (name, ", ".join(report)))
    return model, init


# ---------------------------------------------------------------- loader

DIGITS_YAML = Y("""
    # digit names stand for PyTorch's index keys: layers.0.*, layers.3.*
    # (PyTorch's layers.1 and .2 are a ReLU and a Dropout), and a top-level
    # entry named 4 at index 2
    inputs:
      x: {shape: [6]}
    layers:
      - name: layers
        sequential:
          - name: "0"
            linear: {out_features: 9}
          - relu
          - name: "3"
            linear: {out_features: 7}
      - tanh
      - name: "4"
        linear: {out_features: 3}
    """).lstrip()


def make_digits():
    from collections import OrderedDict
    return nn.Sequential(OrderedDict([
        ("layers", nn.Sequential(nn.Linear(6, 9), nn.ReLU(), nn.Dropout(0.5),
                                 nn.Linear(9, 7))),
        ("act", nn.Tanh()),
        ("4", nn.Linear(7, 3))]))


UNDERSCORE_YAML = Y("""
    # `_` is the default input: the previous entry's output, or the
    # composite's input for a body's first entry
    inputs:
      x: {shape: [6]}
    layers:
      - name: a
        linear: {out_features: 6}
      - tanh
      - in: [_, x]
        mul: {}
      - residual:
          - in: [_, a]
            add: {}
          - linear: {out_features: 6}
      - name: out
        in: [a, _]
        concat: {dim: 1}
    """).lstrip()


class Underscore(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(6, 6)
        # the residual, entry 3: body [add, linear] -> keys 3.1.*
        self.add_module("3", nn.Sequential(nn.Identity(), nn.Linear(6, 6)))

    def forward(self, x):
        a = self.a(x)
        m = torch.tanh(a) * x
        r = m + getattr(self, "3")[1](m + a)
        return torch.cat([a, r], 1)


NANOGPT_YAML = Y("""
    # nanoGPT-like keys: h.I.attn.c_proj.*, h.I.mlp.c_fc.*; the file also
    # holds each block's causal mask buffer h.I.attn.bias, unused here
    inputs:
      x: {shape: [4, 8]}
    layers:
      - name: h
        sequential:
          - name: "0"
            sequential:
              - name: attn
                sequential:
                  - name: c_proj
                    linear: {out_features: 8}
              - name: mlp
                sequential:
                  - name: c_fc
                    linear: {out_features: 8}
                  - gelu
          - name: "1"
            sequential:
              - name: attn
                sequential:
                  - name: c_proj
                    linear: {out_features: 8}
              - name: mlp
                sequential:
                  - name: c_fc
                    linear: {out_features: 8}
                  - gelu
    """).lstrip()

NANOGPT_IGNORE_YAML = NANOGPT_YAML.replace(
    "inputs:", "ignore_keys: ['h.*.attn.bias']\ninputs:", 1)


class NanoBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = nn.Module()
        self.attn.c_proj = nn.Linear(8, 8)
        self.attn.register_buffer("bias", torch.tril(torch.ones(4, 4))
                                  .view(1, 1, 4, 4))
        self.mlp = nn.Module()
        self.mlp.c_fc = nn.Linear(8, 8)

    def forward(self, x):
        return F.gelu(self.mlp.c_fc(self.attn.c_proj(x)))


class Nano(nn.Module):
    def __init__(self):
        super().__init__()
        self.h = nn.ModuleList([NanoBlock(), NanoBlock()])

    def forward(self, x):
        for b in self.h:
            x = b(x)
        return x


KEYS_YAML = Y("""
    # a weights file for this model misses 3 keys and has 2 it does not use
    inputs:
      x: {shape: [4]}
    layers:
      - name: a
        linear: {out_features: 4}
      - name: b
        linear: {out_features: 4}
      - name: c
        layer_norm: {}
    """).lstrip()


def fixture(name, yaml, model, x, seed):
    """yaml, PyTorch's state_dict, input and output under LOADER/name*"""
    write(os.path.join(LOADER, name + ".yaml"), yaml.encode())
    sd = {k: f32(v) for k, v in model.state_dict().items()}
    write(os.path.join(LOADER, name + ".safetensors"), safetensors_bytes(sd))
    model.eval()
    with torch.no_grad():
        y = model(torch.tensor(x))
    write(os.path.join(LOADER, name + "_x.npy"), npy_any(x))
    write(os.path.join(LOADER, name + "_y.npy"), npy_bytes(f32(y)))


def main():
    os.makedirs(LOADER, exist_ok=True)
    rng = np.random.default_rng(7)
    x = rng.integers(0, V, (N, T)).astype(np.int64)
    y = rng.integers(0, V, (N, T)).astype(np.int64)
    probe = rng.integers(0, V, (3, T)).astype(np.int64)
    gpt, init = parity_case("gpt_tied", 301, GPT_YAML, GPT, x, y, probe, True)

    # the full state_dict (both tied keys), and one whose copies differ
    gpt.load_state_dict({k: torch.tensor(v) for k, v in init.items()},
                        strict=False)
    both = {k: f32(v) for k, v in gpt.state_dict().items()}
    assert "lm_head.weight" in both and "wte.weight" in both
    assert np.array_equal(both["lm_head.weight"], both["wte.weight"])
    write(os.path.join(LOADER, "gpt_tied_both.safetensors"),
          safetensors_bytes(both))
    bad = dict(both)
    bad["lm_head.weight"] = both["lm_head.weight"].copy()
    bad["lm_head.weight"][2, 3] += 0.25
    write(os.path.join(LOADER, "gpt_tied_unequal.safetensors"),
          safetensors_bytes(bad))
    gpt.eval()
    with torch.no_grad():
        out = gpt(torch.tensor(probe))
    write(os.path.join(LOADER, "gpt_tied_probe_init.npy"), npy_bytes(f32(out)))

    xr = rng.standard_normal((N, 6)).astype(np.float32)
    yr = rng.integers(0, 4, N).astype(np.int64)
    pr = rng.standard_normal((3, 6)).astype(np.float32)
    rep, rinit = parity_case("shared_repeat", 302, REPEAT_YAML, make_repeat,
                             xr, yr, pr, False)
    rep.load_state_dict({k: torch.tensor(v) for k, v in rinit.items()},
                        strict=False)
    full = {k: f32(v) for k, v in rep.state_dict().items()}
    assert "1.2.0.0.weight" in full
    write(os.path.join(LOADER, "shared_repeat_full.safetensors"),
          safetensors_bytes(full))

    torch.manual_seed(303)
    fixture("digits", DIGITS_YAML, make_digits(),
            rng.standard_normal((4, 6)).astype(np.float32), 303)
    torch.manual_seed(304)
    fixture("underscore", UNDERSCORE_YAML, Underscore(),
            rng.standard_normal((3, 6)).astype(np.float32), 304)
    torch.manual_seed(305)
    fixture("nanogpt", NANOGPT_YAML, Nano(),
            rng.standard_normal((2, 4, 8)).astype(np.float32), 305)
    write(os.path.join(LOADER, "nanogpt_ignore.yaml"),
          NANOGPT_IGNORE_YAML.encode())

    # 3 missing (b.bias, c.weight, c.bias), 2 unexpected (b.bais, d.weight)
    write(os.path.join(LOADER, "keys.yaml"), KEYS_YAML.encode())
    z = np.zeros
    write(os.path.join(LOADER, "keys.safetensors"), safetensors_bytes({
        "a.weight": z((4, 4)), "a.bias": z(4), "b.weight": z((4, 4)),
        "b.bais": z(4), "d.weight": z((2, 2))}))


if __name__ == "__main__":
    main()
