#!/usr/bin/python3
"""PyTorch references for mixture_of_experts' noisy top-k gating and its
load-balancing loss (model-format.md section 7: `noisy_gating`,
`balance_loss`; Shazeer et al. 2017, eq. 3-7 and appendix A).

The reference is an inline PyTorch implementation of the paper's formulas
(autograd gives the gradients):

  H = x W_g^T + z * softplus(x W_noise^T)   (training; z standard normal)
  gates = softmax of the k largest H, 0 elsewhere
  importance = sum over tokens of gates
  load[e] = sum over tokens of Phi((clean_e - thr) / softplus(...)_e), thr
            the k-th largest H excluding e's own (the (k+1)-th overall when
            H_e is above it, else the k-th); without noise, or k = E, the
            count of tokens with a nonzero gate (no gradient)
  loss += w * (CV^2(importance) + CV^2(load)), CV^2 = var / (mean^2 + 1e-10),
          the population variance (tensor2tensor's cv_squared)

The noise is made identical to dlrun's by the documented seed path: `dlrun
train --seed S` seeds its run RNG (xoshiro256** through splitmix64,
src/engine/rng.c) with S ^ 0x5deece66d; for a model whose only random op is
one mixture, each training step's noise is that RNG's next draws, token by
token (batch-major), E normals per token made from pairs of uniforms u1, u2
(53-bit doubles) as sqrt(-2 ln(1 - u1)) cos(2 pi u2) then sin(2 pi u2) (an
odd E drops the last sine). The RNG is re-implemented here bit for bit.

Writes:
  tests/fixtures/moe/<case>/   model.yaml, model.safetensors, in.npy,
                               out.npy: inference (eval: the clean logits)
                               of models with noisy_gating and balance_loss,
                               as tests/fixtures.sh expects (train.sh also
                               gradchecks them in training mode, noise on)
  tests/data/train_parity/<case>/  in tools/gen_train_parity.py's layout,
                               plus expected_losses_<S>.txt (the logged
                               epoch loss, balance loss included): one SGD
                               step over the whole batch, and Adam over
                               three batches in file order

Every training reference is recomputed in float64 and must agree with the
float32 one to 2e-6; the k-th and (k+1)-th noisy logits of every token are
kept apart, so the float32 rounding cannot change a choice. Byte-stable.

Run with Debian's python3-torch: /usr/bin/python3 tools/gen_moe_noisy_fixtures.py
"""

import math
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dltools  # noqa: E402

TOP = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
M64 = (1 << 64) - 1


class Rng:
    """src/engine/rng.c: xoshiro256** seeded through splitmix64."""

    def __init__(self, seed):
        x = seed & M64
        self.s = []
        for _ in range(4):
            x = (x + 0x9E3779B97F4A7C15) & M64
            z = x
            z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
            z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
            self.s.append(z ^ (z >> 31))

    @staticmethod
    def rotl(x, k):
        return ((x << k) | (x >> (64 - k))) & M64

    def next(self):
        s = self.s
        result = (self.rotl((s[1] * 5) & M64, 7) * 9) & M64
        t = (s[1] << 17) & M64
        s[2] ^= s[0]
        s[3] ^= s[1]
        s[1] ^= s[2]
        s[0] ^= s[3]
        s[2] ^= t
        s[3] = self.rotl(s[3], 45)
        return result

    def uniform(self):
        return (self.next() >> 11) * 2.0 ** -53

    def noise(self, M, E):
        """moe.c's draw_noise: [M, E] float32 standard normals."""
        z = np.zeros((M, E), dtype=np.float32)
        for t in range(M):
            for e in range(0, E, 2):
                u1 = 1.0 - self.uniform()
                u2 = self.uniform()
                r = math.sqrt(-2.0 * math.log(u1))
                z[t, e] = r * math.cos(2.0 * math.pi * u2)
                if e + 1 < E:
                    z[t, e + 1] = r * math.sin(2.0 * math.pi * u2)
        return z


def run_seed(seed):
    """The RNG `dlrun train --seed seed` draws from (src/train/loop.c)."""
    return Rng(seed ^ 0x5DEECE66D)


ACT = {"relu": torch.relu, "tanh": torch.tanh, "silu": torch.nn.functional.silu}


def moe(w, x, E, k, act, noisy, balance, noise=None, margin=None):
    """y, balance loss. x [..., D]; w the state dict (prefix "moe.");
    noise [M, E] in training with noisy gating, else None."""
    D = x.shape[-1]
    tok = x.reshape(-1, D)
    clean = tok @ w["moe.gate.weight"].T
    if noise is not None:
        sigma = torch.nn.functional.softplus(tok @ w["moe.noise.weight"].T)
        logits = clean + noise.to(clean.dtype) * sigma
    else:
        logits = clean
    top, idx = logits.topk(min(k + 1, E), dim=-1)
    if margin is not None and k < E:
        margin.append(float((top[:, k - 1] - top[:, k]).min()))
    gates = torch.zeros_like(logits).scatter(1, idx[:, :k], torch.softmax(top[:, :k], dim=-1))
    y = 0
    for e in range(E):
        p = "moe.experts.%d." % e
        h = ACT[act](tok @ w[p + "0.weight"].T + w[p + "0.bias"])
        y = y + gates[:, e:e + 1] * (h @ w[p + "2.weight"].T + w[p + "2.bias"])
    y = y.reshape(list(x.shape[:-1]) + [y.shape[-1]])
    bal = torch.zeros((), dtype=x.dtype)
    if balance > 0:
        imp = gates.sum(0)
        if noise is not None and k < E:
            normal = torch.distributions.Normal(torch.zeros((), dtype=x.dtype),
                                                torch.ones((), dtype=x.dtype))
            thr_in, thr_out = top[:, k:k + 1], top[:, k - 1:k]
            p_in = normal.cdf((clean - thr_in) / sigma)
            p_out = normal.cdf((clean - thr_out) / sigma)
            load = torch.where(logits > thr_in, p_in, p_out).sum(0)
        else:
            load = (gates > 0).sum(0).to(x.dtype)

        def cv2(v):
            return v.var(unbiased=False) / (v.mean() ** 2 + 1e-10)
        bal = balance * (cv2(imp) + cv2(load))
    return y, bal


def weights(g, E, D, H, O, noisy):
    w = {"moe.gate.weight": torch.randn(E, D, generator=g)}
    if noisy:
        w["moe.noise.weight"] = torch.randn(E, D, generator=g) * 0.5
    for e in range(E):
        w["moe.experts.%d.0.weight" % e] = torch.randn(H, D, generator=g) / D ** 0.5
        w["moe.experts.%d.0.bias" % e] = torch.randn(H, generator=g) * 0.1
        w["moe.experts.%d.2.weight" % e] = torch.randn(O, H, generator=g) / H ** 0.5
        w["moe.experts.%d.2.bias" % e] = torch.randn(O, generator=g) * 0.1
    return w


def yaml_text(title, shape, E, k, H, O, act, noisy, balance):
    return ("# %s (tools/gen_moe_noisy_fixtures.py)\n"
            "inputs:\n  x: {shape: %s}\nlayers:\n  - name: moe\n"
            "    mixture_of_experts:\n      num_experts: %d\n      k: %d\n"
            "      noisy_gating: %s\n      balance_loss: %s\n"
            "      expert:\n        - linear: {out_features: %d}\n        - %s\n"
            "        - linear: {out_features: %d}\n"
            % (title, shape, E, k, "true" if noisy else "false", balance, H, act, O))


# ---------------------------------------------------------------- inference

INFER = [
    # name, per-sample shape, batch, experts, k, hidden, out, act, noisy, balance
    ("moe_noisy_k2", [5, 6], 3, 4, 2, 8, 3, "relu", True, 0.1),
    ("moe_noisy_k1_b1", [4, 5], 1, 3, 1, 5, 6, "tanh", True, 0.01),
    ("moe_balance_k3", [6], 4, 5, 3, 7, 2, "silu", False, 0.5),
    # top 1 with a noise that would change the choice of some tokens: the
    # clean logits still choose, with weight 1
    ("moe_noisy_k1_eval", [6, 5], 2, 4, 1, 6, 3, "relu", True, 0.0),
]
# noise.weight scaled up (a trained gate's noise), so that noisy logits
# would choose other experts than the clean ones
NOISE_SCALE = {"moe_noisy_k1_eval": 8.0}


def gen_infer():
    for ci, (name, shape, batch, E, k, H, O, act, noisy, bal) in enumerate(INFER):
        g = torch.Generator().manual_seed(2000 + ci)
        D = shape[-1]
        w = {key: v.float().double() for key, v in weights(g, E, D, H, O, noisy).items()}
        x = torch.randn([batch] + shape, generator=g).float().double()
        if name in NOISE_SCALE:
            w["moe.noise.weight"] = (w["moe.noise.weight"] * NOISE_SCALE[name]).float().double()
            tok = x.reshape(-1, D)
            clean = tok @ w["moe.gate.weight"].T
            z = torch.tensor(run_seed(1).noise(tok.shape[0], E), dtype=torch.float64)
            noisy_logits = clean + z * torch.nn.functional.softplus(tok @ w["moe.noise.weight"].T)
            changed = int((noisy_logits.argmax(1) != clean.argmax(1)).sum())
            assert changed > 0, name
            print("%s: noise would change %d of %d choices" % (name, changed, tok.shape[0]))
        y, _ = moe(w, x, E, k, act, noisy, 0)
        d = os.path.join(TOP, "tests", "fixtures", "moe", name)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "model.yaml"), "w") as f:
            f.write(yaml_text("%s: mixture_of_experts, %d experts, top %d; inference uses "
                              "the clean logits" % (name, E, k), shape, E, k, H, O, act,
                              noisy, bal))
        dltools.write_safetensors(os.path.join(d, "model.safetensors"),
                                  {key: v.numpy() for key, v in w.items()})
        dltools.write_npys(os.path.join(d, "in.npy"), [x.numpy()])
        dltools.write_npys(os.path.join(d, "out.npy"), [y.numpy()])
        print(d)


# ---------------------------------------------------------------- training

# name, per-sample shape, samples, experts, k, hidden, out, act, noisy,
# balance, seed
TRAIN = [
    ("moe_noisy_balance", [5, 6], 6, 5, 2, 7, 3, "tanh", True, 0.5, 7),
    ("moe_noisy_k1_odd", [4, 5], 6, 3, 1, 6, 2, "relu", True, 1.0, 3),
]
SETTINGS = [
    # name, optimizer, flags, batch size (None: all samples)
    ("sgd", "sgd", "--optimizer sgd --lr 0.1 --momentum 0.9", None),
    ("adam", "adam", "--optimizer adam --lr 0.01 --betas 0.9,0.99", 2),
]


def train_ref(w0, xs, ys, E, k, act, noisy, bal, seed, opt, bs, dtype):
    w = {key: v.to(dtype).clone().requires_grad_(True) for key, v in w0.items()}
    keys = sorted(w)
    if opt == "sgd":
        o = torch.optim.SGD([w[key] for key in keys], lr=0.1, momentum=0.9)
    else:
        o = torch.optim.Adam([w[key] for key in keys], lr=0.01, betas=(0.9, 0.99))
    rng = run_seed(seed)
    n = xs.shape[0]
    bs = bs or n
    total, margins = 0.0, []
    for at in range(0, n, bs):
        x = xs[at:at + bs].to(dtype)
        y = ys[at:at + bs].to(dtype)
        M = x.numel() // x.shape[-1]
        noise = torch.from_numpy(rng.noise(M, E)) if noisy else None
        out, b = moe(w, x, E, k, act, noisy, bal, noise, margins)
        loss = torch.nn.functional.mse_loss(out, y) + b
        o.zero_grad()
        loss.backward()
        o.step()
        total += float(loss) * x.shape[0]
    return {key: v.detach() for key, v in w.items()}, total / n, margins


def gen_train():
    for ci, (name, shape, n, E, k, H, O, act, noisy, bal, seed) in enumerate(TRAIN):
        g = torch.Generator().manual_seed(3000 + ci)
        D = shape[-1]
        w0 = {key: v.float() for key, v in weights(g, E, D, H, O, noisy).items()}
        xs = torch.randn([n] + shape, generator=g).float()
        ys = torch.randn([n] + shape[:-1] + [O], generator=g).float()
        probe = torch.randn([3] + shape, generator=g).float()
        d = os.path.join(TOP, "tests", "data", "train_parity", name)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "model.yaml"), "w") as f:
            f.write(yaml_text("%s: noisy top-%d gating of %d experts and the balance loss, "
                              "trained with --seed %d" % (name, k, E, seed), shape, E, k, H,
                              O, act, noisy, bal))
        dltools.write_safetensors(os.path.join(d, "init.safetensors"),
                                  {key: v.numpy() for key, v in w0.items()})
        dltools.write_npys(os.path.join(d, "x.npy"), [xs.numpy()])
        dltools.write_npys(os.path.join(d, "y.npy"), [ys.numpy()])
        dltools.write_npys(os.path.join(d, "probe.npy"), [probe.numpy()])
        report = []
        for sname, opt, flags, bs in SETTINGS:
            w32, l32, margins = train_ref(w0, xs, ys, E, k, act, noisy, bal, seed, opt, bs,
                                          torch.float32)
            w64, l64, _ = train_ref(w0, xs, ys, E, k, act, noisy, bal, seed, opt, bs,
                                    torch.float64)
            worst = max(float((w32[key].double() - w64[key]).abs().max() /
                              max(1e-3, float(w64[key].abs().max()))) for key in w32)
            worst = max(worst, abs(l32 - l64) / abs(l64))
            assert worst < 2e-6, (name, sname, worst)
            assert min(margins) > 1e-3, (name, sname, min(margins))
            out, _ = moe(w32, probe, E, k, act, noisy, 0)
            with open(os.path.join(d, "args_" + sname), "w") as f:
                f.write("%s --epochs 1 --batch-size %d --no-shuffle --loss mse --seed %d\n"
                        % (flags, bs or n, seed))
            dltools.write_safetensors(os.path.join(d, "expected_%s.safetensors" % sname),
                                      {key: v.numpy() for key, v in w32.items()})
            dltools.write_npys(os.path.join(d, "expected_probe_%s.npy" % sname),
                               [out.detach().numpy()])
            with open(os.path.join(d, "expected_losses_%s.txt" % sname), "w") as f:
                f.write("%.9g\n" % l32)
            report.append("%s f32-vs-f64 %.1e margin %.1e" % (sname, worst, min(margins)))
        print("%s: %s" % (d, ", ".join(report)))


if __name__ == "__main__":
    gen_infer()
    gen_train()
