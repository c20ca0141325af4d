#!/usr/bin/python3
"""Training parity fixtures for models with several inputs (tests/train.sh):
a two-layer graph convolution network (inputs x [V, F] and adj [V, V]) and
a GRU encoder-decoder (inputs src and tgt, token ids), trained by PyTorch
with SGD and with Adam from the same weights as `dlrun train`.

For every case this writes tests/data/train_parity/<case>/:

  model.yaml               the dlrun model
  init.safetensors         initial weights (PyTorch's default init, fixed seed)
  data.npz                 one array per model input, named as the input,
                           and the labels y (int64 class ids)
  with_val.npz             data.npz and a validation set: <input>_val, y_val
  stream.npy               data.npz as two steps of `--data -`: per step
                           one array per input, then y
  probe.npy                one array per input, back to back (what `dlrun
                           infer` reads from stdin for one step)
  args_<S>                 the `dlrun train` flags of setting S, one line
  expected_<S>.safetensors PyTorch's weights after training with setting S
  expected_probe_<S>.npy   PyTorch's output (eval mode) on the probe
  expected_losses_<S>.txt  the mean training loss of each epoch, one a line
                           (what --log records)

tests/train.sh trains CASE/model.yaml on CASE/data.npz with each args_S,
compares the weights and the probe's output within 1e-5 relative, and the
logged losses within 1e-5 relative.

Settings, three optimizer steps each: sgd (lr 0.1, momentum 0.9, three
epochs of one full batch) and adam (lr 0.01, betas 0.9,0.99, one epoch of
three batches in file order).

Everything is float32 with fixed seeds; the files are byte-stable (no
timestamps, sorted keys). Every reference is recomputed in float64 and must
agree with the float32 one to 2e-6.

Run: /usr/bin/python3 tools/gen_multi_train_parity.py [OUTDIR]
(default OUTDIR: tests/data/train_parity next to this script's parent).
"""

import io
import os
import sys
import textwrap
import zipfile

import numpy as np
import torch
from torch import nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_train_parity import f32, npy_bytes, relerr, safetensors_bytes, write  # noqa: E402

N = 6  # samples per case; adam uses batches of N // 3


def npz_bytes(arrays):
    """An .npz (zip of NAME.npy, stored) with fixed timestamps, so the bytes
    do not depend on the time or the NumPy version."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as z:
        for name in arrays:
            info = zipfile.ZipInfo(name + ".npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16
            z.writestr(info, npy_bytes(arrays[name]))
    return buf.getvalue()


# ---------------------------------------------------------------- models


def graph_conv(x, a, lin):
    """Y = D^-1/2 (A + I) D^-1/2 X W^T + b (dlrun's graph_conv)."""
    V = a.shape[-1]
    b = a + torch.eye(V, dtype=a.dtype)
    s = b.sum(-1).pow(-0.5)
    ahat = s.unsqueeze(-1) * b * s.unsqueeze(-2)
    return ahat @ (x @ lin.weight.t()) + lin.bias


class GCN(nn.Module):
    def __init__(self):
        super().__init__()
        self.gc1 = nn.Linear(3, 8)
        self.gc2 = nn.Linear(8, 4)

    def forward(self, x, adj):
        h = torch.relu(graph_conv(x, adj, self.gc1))
        return graph_conv(h, adj, self.gc2)


GCN_YAML = """\
# a two-layer graph convolution network: per-node classes of 5-node graphs
# (features x [V, F], weighted adjacency adj [V, V]); cross_entropy on the
# [N, V, C] output with [N, V] labels
inputs:
  x: {shape: [5, 3]}
  adj: {shape: [5, 5]}
layers:
  - name: gc1
    in: [x, adj]
    graph_conv: {out_features: 8}
  - name: h
    relu: {}
  - name: gc2
    in: [h, adj]
    graph_conv: {out_features: 4}
"""


class Seq2Seq(nn.Module):
    """embedding + GRU encoder (its final state) feeding the decoder GRU's
    h0; the decoder reads the embedded target tokens (teacher forcing)."""

    def __init__(self):
        super().__init__()
        self.src_emb = nn.Embedding(7, 4)
        self.enc = nn.GRU(4, 6, batch_first=True)
        self.tgt_emb = nn.Embedding(7, 4)
        self.dec = nn.GRU(4, 6, batch_first=True)
        self.head = nn.Linear(6, 7)

    def forward(self, src, tgt):
        _, h = self.enc(self.src_emb(src))
        y, _ = self.dec(self.tgt_emb(tgt), h)
        return self.head(y)


SEQ_YAML = """\
# a GRU encoder-decoder: the encoder's final state is the decoder's h0
# ([N, 1, H] after a reshape); teacher forcing on the target tokens;
# cross_entropy on the [N, T, V] output with [N, T] labels
inputs:
  src: {shape: [6], dtype: int}
  tgt: {shape: [5], dtype: int}
layers:
  - name: src_emb
    in: src
    embedding: {num_embeddings: 7, embedding_dim: 4}
  - name: enc
    gru: {hidden_size: 6, output: last}
  - name: h0
    reshape: {shape: [1, 6]}
  - name: tgt_emb
    in: tgt
    embedding: {num_embeddings: 7, embedding_dim: 4}
  - name: dec
    in: [tgt_emb, h0]
    gru: {hidden_size: 6}
  - name: head
    linear: {out_features: 7}
"""


def gcn_data(rng, n):
    x = rng.standard_normal((n, 5, 3)).astype("<f4")
    a = (rng.random((n, 5, 5)) < 0.5) * rng.uniform(0.5, 1.5, (n, 5, 5))
    a = np.triu(a, 1)
    adj = (a + a.transpose(0, 2, 1)).astype("<f4")
    return {"x": x, "adj": adj}


def seq_data(rng, n):
    return {"src": rng.integers(0, 7, (n, 6)).astype("<i8"),
            "tgt": rng.integers(0, 7, (n, 5)).astype("<i8")}


CASES = [
    dict(name="gcn", seed=201, yaml=GCN_YAML, build=GCN, inputs=("x", "adj"),
         data=gcn_data, classes=4, ylen=5),
    dict(name="gru_seq2seq", seed=202, yaml=SEQ_YAML, build=Seq2Seq,
         inputs=("src", "tgt"), data=seq_data, classes=7, ylen=5),
]

SETTINGS = {
    "sgd": (lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9), 3, N,
            "--optimizer sgd --lr 0.1 --momentum 0.9 --epochs 3 "
            "--batch-size %d --no-shuffle" % N),
    "adam": (lambda p: torch.optim.Adam(p, lr=0.01, betas=(0.9, 0.99)), 1,
             N // 3,
             "--optimizer adam --lr 0.01 --betas 0.9,0.99 --epochs 1 "
             "--batch-size %d --no-shuffle" % (N // 3)),
}


def tensors(c, arrays, dtype):
    out = []
    for k in c["inputs"]:
        a = arrays[k]
        out.append(torch.tensor(a) if a.dtype == np.int64
                   else torch.tensor(a, dtype=dtype))
    return out


def train(c, model, init, data, y, setting, dtype):
    make_opt, epochs, bs, _ = setting
    model.load_state_dict({k: torch.tensor(v, dtype=dtype)
                           for k, v in init.items()})
    model.to(dtype)
    model.train()
    params = [p for _, p in sorted(model.named_parameters())]
    opt = make_opt(params)
    xs = tensors(c, data, dtype)
    yt = torch.tensor(y)
    losses = []
    for _ in range(epochs):
        total = 0.0
        for i in range(0, N, bs):
            opt.zero_grad()
            out = model(*[x[i:i + bs] for x in xs])
            loss = F.cross_entropy(out.transpose(1, 2), yt[i:i + bs])
            loss.backward()
            opt.step()
            total += float(loss) * min(bs, N - i)
        losses.append(total / N)
    return {k: v.detach().clone() for k, v in model.state_dict().items()}, losses


def probe_out(c, model, state, probe, dtype):
    model.load_state_dict(state)
    model.eval()
    with torch.no_grad():
        return model(*tensors(c, probe, dtype))


def make_case(c, outdir):
    torch.manual_seed(c["seed"])
    model = c["build"]()
    init = {k: f32(v) for k, v in model.state_dict().items()}
    keys = sorted(init)
    rng = np.random.default_rng(c["seed"])
    data = c["data"](rng, N)
    probe = c["data"](rng, 3)
    y = rng.integers(0, c["classes"], (N, c["ylen"])).astype("<i8")

    d = os.path.join(outdir, c["name"])
    os.makedirs(d, exist_ok=True)
    write(os.path.join(d, "model.yaml"), c["yaml"].encode())
    write(os.path.join(d, "init.safetensors"), safetensors_bytes(init))
    arrays = {k: data[k] for k in c["inputs"]}
    arrays["y"] = y
    write(os.path.join(d, "data.npz"), npz_bytes(arrays))
    # the same with a validation set, <input>_val and y_val (fresh samples)
    vdata = c["data"](np.random.default_rng(c["seed"] + 1), 4)
    for k in c["inputs"]:
        arrays[k + "_val"] = vdata[k]
    arrays["y_val"] = np.random.default_rng(c["seed"] + 2).integers(
        0, c["classes"], (4, c["ylen"])).astype("<i8")
    write(os.path.join(d, "with_val.npz"), npz_bytes(arrays))
    # the same data as a stream for `--data -`: two steps of N // 2
    # samples, each one array per input in the model's order, then y
    h = N // 2
    write(os.path.join(d, "stream.npy"),
          b"".join(npy_bytes(a[i:i + h]) for i in (0, h)
                   for a in [data[k] for k in c["inputs"]] + [y]))
    write(os.path.join(d, "probe.npy"),
          b"".join(npy_bytes(probe[k]) for k in c["inputs"]))
    report = []
    for sname, setting in SETTINGS.items():
        st32, l32 = train(c, model, init, data, y, setting, torch.float32)
        assert sorted(st32) == keys, (c["name"], sorted(st32), keys)
        out32 = probe_out(c, model, st32, probe, torch.float32)
        st64, l64 = train(c, model, init, data, y, setting, torch.float64)
        out64 = probe_out(c, model, st64, probe, torch.float64)
        model.to(torch.float32)
        worst = max([relerr(f32(st32[k]), st64[k].numpy()) for k in keys] +
                    [relerr(f32(out32), out64.numpy()), relerr(l32, l64)])
        moved = min(relerr(f32(st32[k]), init[k]) for k in keys)
        assert worst < 2e-6, (c["name"], sname, worst)
        assert moved > 1e-4, (c["name"], sname, "a tensor hardly moved", moved)
        write(os.path.join(d, "args_" + sname), (setting[3] + "\n").encode())
        write(os.path.join(d, "expected_%s.safetensors" % sname),
              safetensors_bytes({k: st32[k] for k in keys}))
        write(os.path.join(d, "expected_probe_%s.npy" % sname),
              npy_bytes(f32(out32)))
        write(os.path.join(d, "expected_losses_%s.txt" % sname),
              "".join("%.9g\n" % v for v in l64).encode())
        report.append("%s f32-vs-f64 %.1e" % (sname, worst))
    print("%-16s %s" % (c["name"], ", ".join(report)))


def make_bad(outdir):
    """Data `dlrun train` must refuse for the gcn case: a missing array, a
    misnamed one, a wrong per-sample shape, sample counts that differ, no
    labels, a stream that ends inside a step."""
    d = os.path.join(outdir, "bad")
    os.makedirs(d, exist_ok=True)
    rng = np.random.default_rng(9)
    g = gcn_data(rng, N)
    y = rng.integers(0, 4, (N, 5)).astype("<i8")
    bad = {
        "gcn_no_adj.npz": {"x": g["x"], "y": y},
        "gcn_misnamed.npz": {"x": g["x"], "adjacency": g["adj"], "y": y},
        "gcn_adj_shape.npz": {"x": g["x"], "adj": g["adj"][:, :4, :4], "y": y},
        "gcn_short.npz": {"x": g["x"], "adj": g["adj"][:N - 1], "y": y},
        "gcn_no_y.npz": {"x": g["x"], "adj": g["adj"]},
    }
    for name, arrays in bad.items():
        write(os.path.join(d, name), npz_bytes(arrays))
    # validation arrays for only some of the inputs: adj_val is missing
    write(os.path.join(d, "gcn_val_partial.npz"),
          npz_bytes({"x": g["x"], "adj": g["adj"], "y": y,
                     "x_val": g["x"], "y_val": y}))
    # a stream that ends after the second step's x, before its adj
    write(os.path.join(d, "gcn_stream_short.npy"),
          b"".join(npy_bytes(a) for a in (g["x"], g["adj"], y, g["x"])))


def make_broadcast(outdir):
    """The gcn case with one adjacency for every sample: adj1.npz holds it
    as one sample (it serves every sample, as infer broadcasts a batch-1
    input), adj_rep.npz the same adjacency repeated per sample; dlrun train
    must give the same bytes on both."""
    d = os.path.join(outdir, "gcn")
    os.makedirs(d, exist_ok=True)
    rng = np.random.default_rng(10)
    g = gcn_data(rng, N)
    y = rng.integers(0, 4, (N, 5)).astype("<i8")
    one = g["adj"][:1]
    write(os.path.join(d, "adj1.npz"),
          npz_bytes({"x": g["x"], "adj": one, "y": y}))
    write(os.path.join(d, "adj_rep.npz"),
          npz_bytes({"x": g["x"], "adj": np.repeat(one, N, 0), "y": y}))


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    outdir = sys.argv[1] if len(sys.argv) > 1 else \
        os.path.join(here, "..", "tests", "data", "train_parity")
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    for c in CASES:
        make_case(c, outdir)
    make_bad(outdir)
    make_broadcast(outdir)


if __name__ == "__main__":
    main()
