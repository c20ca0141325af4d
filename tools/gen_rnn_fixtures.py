#!/usr/bin/python3
"""Generates tests/fixtures/rnn/: PyTorch references for dlrun's rnn, lstm
and gru ops (tests/fixtures.sh runs them).

Each case directory holds model.yaml, model.safetensors (keys: the
nn.RNN/LSTM/GRU state_dict keys behind the entry's scope, e.g.
`0.weight_ih_l0`), in.npy (every model input back to back, in the order of
`inputs:`) and out.npy. The reference is torch.nn.RNN/LSTM/GRU with
batch_first=True in float64 on float32-representable weights and inputs;
initial states are given batch first, as the spec says, and transposed to
PyTorch's [D*num_layers, N, H]. The GRU variant with linear_before_reset
false (ONNX, Keras) has no PyTorch module: its reference is written out here.

Seeds are fixed per case name: re-running gives the same bytes.
Run: /usr/bin/python3 tools/gen_rnn_fixtures.py [--out DIR]

With --check-backward PATH/TO/dlrun it writes nothing and checks backward
instead: for each fixture with one input, one `dlrun train` step (SGD, lr 1,
MSE loss, the whole batch) must move every parameter by minus torch
autograd's gradient.
"""

import argparse
import os
import shutil
import sys
import zlib

import numpy as np
import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dltools  # noqa: E402

MODULES = {"rnn": nn.RNN, "lstm": nn.LSTM, "gru": nn.GRU}

# name, op, hyperparameters (as in the YAML), N, T, input_size, initial
# states given, followed by a linear of this many outputs (or None)
CASES = [
    ("rnn_tanh", "rnn", {"hidden_size": 5}, 3, 4, 3, False, None),
    ("rnn_tanh_b1", "rnn", {"hidden_size": 5}, 1, 4, 3, False, None),
    ("rnn_relu", "rnn", {"hidden_size": 4, "nonlinearity": "relu"}, 2, 5, 3,
     False, None),
    ("rnn_2layer_bidir", "rnn", {"hidden_size": 3, "num_layers": 2,
                                 "bidirectional": True}, 2, 5, 4, False, None),
    ("rnn_nobias_last", "rnn", {"hidden_size": 6, "bias": False,
                                "output": "last"}, 3, 3, 2, False, None),
    ("rnn_h0_bidir_last", "rnn", {"hidden_size": 3, "num_layers": 2,
                                  "bidirectional": True, "output": "last"},
     2, 4, 3, True, None),
    ("rnn_linear", "rnn", {"hidden_size": 4}, 2, 3, 3, False, 2),
    ("lstm", "lstm", {"hidden_size": 5}, 3, 4, 3, False, None),
    ("lstm_b1_odd", "lstm", {"hidden_size": 7}, 1, 1, 5, False, None),
    ("lstm_2layer_bidir", "lstm", {"hidden_size": 3, "num_layers": 2,
                                   "bidirectional": True}, 2, 5, 4, False,
     None),
    ("lstm_h0_c0", "lstm", {"hidden_size": 4, "num_layers": 2}, 3, 4, 3,
     True, None),
    ("lstm_h0_c0_bidir_last", "lstm", {"hidden_size": 3, "bidirectional": True,
                                       "output": "last"}, 2, 3, 2, True, None),
    ("lstm_nobias_last_linear", "lstm", {"hidden_size": 5, "bias": False,
                                         "output": "last"}, 4, 6, 3, False, 3),
    ("gru", "gru", {"hidden_size": 5}, 3, 4, 3, False, None),
    ("gru_b1", "gru", {"hidden_size": 3}, 1, 6, 2, False, None),
    ("gru_2layer_bidir_h0", "gru", {"hidden_size": 3, "num_layers": 2,
                                    "bidirectional": True}, 2, 4, 3, True,
     None),
    ("gru_nobias_last", "gru", {"hidden_size": 4, "bias": False,
                                "output": "last"}, 3, 5, 3, False, None),
    ("gru_lbr_false", "gru", {"hidden_size": 4, "linear_before_reset": False},
     3, 4, 3, False, None),
    ("gru_lbr_false_bidir_h0_last", "gru",
     {"hidden_size": 3, "num_layers": 2, "bidirectional": True,
      "linear_before_reset": False, "output": "last"}, 2, 5, 2, True, None),
    ("gru_lbr_false_nobias", "gru", {"hidden_size": 5, "bias": False,
                                     "linear_before_reset": False},
     1, 3, 4, False, None),
]


# extra `dlrun infer` arguments per case (the `args` file)
ARGS = {"lstm_h0_c0": "--batch-size 2", "gru_lbr_false": "--batch-size 2"}


def f32(t):
    """t rounded to float32, held as float64."""
    return t.float().double()


def yaml_value(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def gru_no_lbr(x, h0, p, H, L, D, bias):
    """ONNX's GRU with linear_before_reset = 0, batch first:
    n = tanh(W_in x + b_in + W_hn (r * h) + b_hn)."""
    N, T, _ = x.shape
    inp = x
    hn = []
    for layer in range(L):
        outs = []
        for d in range(D):
            sfx = "_l%d%s" % (layer, "_reverse" if d else "")
            wih, whh = p["weight_ih" + sfx], p["weight_hh" + sfx]
            bih = p["bias_ih" + sfx] if bias else torch.zeros(3 * H, dtype=x.dtype)
            bhh = p["bias_hh" + sfx] if bias else torch.zeros(3 * H, dtype=x.dtype)
            h = h0[layer * D + d]
            ys = [None] * T
            steps = range(T - 1, -1, -1) if d else range(T)
            for t in steps:
                gi = inp[:, t] @ wih.T + bih
                r = torch.sigmoid(gi[:, :H] + h @ whh[:H].T + bhh[:H])
                z = torch.sigmoid(gi[:, H:2 * H] + h @ whh[H:2 * H].T
                                  + bhh[H:2 * H])
                n = torch.tanh(gi[:, 2 * H:] + (r * h) @ whh[2 * H:].T
                               + bhh[2 * H:])
                h = (1 - z) * n + z * h
                ys[t] = h
            outs.append(torch.stack(ys, 1))
            hn.append(h)
        inp = torch.cat(outs, 2)
    return inp, torch.stack(hn, 0)


def build(name, op, hp, N, T, I, states, lin):
    """The case's inputs, its reference output (with autograd), and the
    weights by their dlrun keys (leaf tensors)."""
    seed = zlib.crc32(name.encode())
    g = torch.Generator().manual_seed(seed)
    H = hp["hidden_size"]
    L = hp.get("num_layers", 1)
    D = 2 if hp.get("bidirectional", False) else 1
    bias = hp.get("bias", True)
    last = hp.get("output") == "last"
    kw = {k: v for k, v in hp.items()
          if k not in ("output", "linear_before_reset")}
    mod = MODULES[op](input_size=I, batch_first=True, **kw).double()
    with torch.no_grad():
        for prm in mod.parameters():
            prm.copy_(f32(torch.rand(prm.shape, generator=g, dtype=torch.float64)
                          * 1.2 - 0.6))
    x = f32(torch.randn(N, T, I, generator=g, dtype=torch.float64))
    h0 = c0 = None
    if states:
        h0 = f32(torch.randn(N, D * L, H, generator=g, dtype=torch.float64) * 0.5)
        if op == "lstm":
            c0 = f32(torch.randn(N, D * L, H, generator=g, dtype=torch.float64))
    params = dict(mod.named_parameters())
    tensors = {"0." + k: v for k, v in params.items()}
    fc = None
    if lin:
        fc = nn.Linear(D * H, lin).double()
        with torch.no_grad():
            fc.weight.copy_(f32(torch.rand(fc.weight.shape, generator=g,
                                           dtype=torch.float64) - 0.5))
            fc.bias.copy_(f32(torch.rand(fc.bias.shape, generator=g,
                                         dtype=torch.float64) - 0.5))
        tensors["1.weight"] = fc.weight
        tensors["1.bias"] = fc.bias
    if op == "gru" and hp.get("linear_before_reset", True) is False:
        hz = h0.transpose(0, 1) if states else torch.zeros(
            D * L, N, H, dtype=torch.float64)
        y, hn = gru_no_lbr(x, hz, params, H, L, D, bias)
    elif states:
        st = h0.transpose(0, 1).contiguous()
        if op == "lstm":
            st = (st, c0.transpose(0, 1).contiguous())
        y, hn = mod(x, st)
    else:
        y, hn = mod(x)
    if op == "lstm" and isinstance(hn, tuple):
        hn = hn[0]
    if last:
        # h_n of the last layer: forward, then backward
        y = torch.cat([hn[(L - 1) * D + d] for d in range(D)], 1)
    if fc is not None:
        y = fc(y)
    return x, h0, c0, y, tensors


def make_case(root, name, op, hp, N, T, I, states, lin):
    x, h0, c0, y, tensors = build(name, op, hp, N, T, I, states, lin)
    H = hp["hidden_size"]
    L = hp.get("num_layers", 1)
    D = 2 if hp.get("bidirectional", False) else 1
    d = os.path.join(root, name)
    os.makedirs(d)
    lines = ["# %s: generated by tools/gen_rnn_fixtures.py" % name,
             "inputs:", "  x: {shape: [%d, %d]}" % (T, I)]
    ins = ["x"]
    if states:
        lines.append("  h0: {shape: [%d, %d]}" % (D * L, H))
        ins.append("h0")
        if op == "lstm":
            lines.append("  c0: {shape: [%d, %d]}" % (D * L, H))
            ins.append("c0")
    lines.append("layers:")
    hps = ", ".join("%s: %s" % (k, yaml_value(v)) for k, v in hp.items())
    if states:
        lines.append("  - in: [%s]" % ", ".join(ins))
        lines.append("    %s: {%s}" % (op, hps))
    else:
        lines.append("  - %s: {%s}" % (op, hps))
    if lin:
        lines.append("  - linear: {out_features: %d}" % lin)
    with open(os.path.join(d, "model.yaml"), "w") as f:
        f.write("\n".join(lines) + "\n")
    dltools.write_safetensors(os.path.join(d, "model.safetensors"), tensors)
    arrays = [x] + ([h0] if states else []) + ([c0] if c0 is not None else [])
    dltools.write_npys(os.path.join(d, "in.npy"), arrays)
    dltools.write_npys(os.path.join(d, "out.npy"), [y])
    if name in ARGS:
        with open(os.path.join(d, "args"), "w") as f:
            f.write(ARGS[name] + "\n")


def check_backward(dlrun, fixtures, tmp):
    """Backward parity with torch autograd for the one-input cases: one
    `dlrun train` step of plain SGD with lr 1 on an MSE loss moves each
    parameter by minus its gradient; compares that with autograd's.
    Returns the number of failures."""
    import subprocess
    fails = 0
    for c in CASES:
        name, states = c[0], c[6]
        if states:
            continue  # dlrun train feeds one model input
        x, _, _, y, tensors = build(*c)
        target = f32(torch.randn(y.shape, generator=torch.Generator()
                                 .manual_seed(7), dtype=torch.float64))
        loss = ((y - target) ** 2).mean()
        grads = torch.autograd.grad(loss, list(tensors.values()))
        d = os.path.join(fixtures, name)
        dltools.write_npys(os.path.join(tmp, "x.npy"), [x])
        dltools.write_npys(os.path.join(tmp, "y.npy"), [target])
        new = os.path.join(tmp, "new.safetensors")
        subprocess.run([dlrun, "train", os.path.join(d, "model.yaml"),
                        "--data", os.path.join(tmp, "x.npy"),
                        "--labels", os.path.join(tmp, "y.npy"),
                        "--loss", "mse", "--optimizer", "sgd", "--lr", "1",
                        "--epochs", "1", "--batch-size", str(x.shape[0]),
                        "--no-shuffle", "-w",
                        os.path.join(d, "model.safetensors"), "-o", new],
                       check=True, stderr=subprocess.DEVNULL)
        got = dltools.read_safetensors(new)
        worst = 0.0
        for (k, v), gr in zip(tensors.items(), grads):
            dg = v.detach().float().numpy() - got[k]
            scale = max(float(gr.abs().max()), 1e-3)
            worst = max(worst, float(np.abs(dg - gr.numpy()).max()) / scale)
        ok = worst < 1e-4
        fails += not ok
        print("%s %s: worst error %.2e of the largest gradient"
              % ("ok" if ok else "FAIL", name, worst))
    return fails


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--out", default=os.path.join(here, "..", "tests",
                                                  "fixtures", "rnn"))
    ap.add_argument("--check-backward", metavar="DLRUN",
                    help="instead: compare one SGD step of DLRUN train on "
                    "the fixtures in --out with torch autograd")
    args = ap.parse_args()
    torch.set_num_threads(1)
    if args.check_backward:
        import tempfile
        with tempfile.TemporaryDirectory() as tmp:
            sys.exit(1 if check_backward(args.check_backward, args.out, tmp)
                     else 0)
    if os.path.isdir(args.out):
        shutil.rmtree(args.out)
    os.makedirs(args.out)
    for c in CASES:
        make_case(args.out, *c)


if __name__ == "__main__":
    main()
