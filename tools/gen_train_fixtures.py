#!/usr/bin/python3
"""Writes tests/data/train/*.npy: PyTorch's values for the training core
(losses and their gradients, optimizer steps, gradient clipping, learning
rate schedules), which tests/check_train.c compares dlrun with.

Usage: tools/gen_train_fixtures.py [OUTDIR]   (default tests/data/train)

Fixed seeds, float32 as dlrun computes; the same torch gives the same bytes.
Shapes and hyperparameters are repeated as constants in check_train.c.
"""
import math
import os
import sys
import warnings

import numpy as np
import torch
import torch.nn.functional as F

OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "train")


def save(name, a):
    a = np.ascontiguousarray(a)
    if a.dtype == np.float64:
        a = a.astype(np.float32)
    np.save(os.path.join(OUT, name + ".npy"), a, allow_pickle=False)


def t2n(t):
    return t.detach().numpy().copy()


def losses():
    g = torch.Generator().manual_seed(1)

    # cross_entropy [N, C], labels [N], two ignored with PyTorch's -100
    x = (torch.randn(8, 5, generator=g) * 2).requires_grad_()
    y = torch.randint(0, 5, (8,), generator=g)
    y[2] = -100
    y[5] = -100
    loss = F.cross_entropy(x, y, ignore_index=-100)
    loss.backward()
    save("ce2d_x", t2n(x)), save("ce2d_y", y.numpy().astype(np.int64))
    save("ce2d_loss", np.array([loss.item()], np.float32))
    save("ce2d_grad", t2n(x.grad))

    # cross_entropy [N, T, V] (classes last), labels [N, T], ignore_index 0
    # (a padding token); PyTorch wants the classes on dim 1, hence permute
    x = (torch.randn(3, 4, 7, generator=g) * 2).requires_grad_()
    y = torch.randint(0, 7, (3, 4), generator=g)
    y[0, 3] = 0
    y[2, 0] = 0
    loss = F.cross_entropy(x.permute(0, 2, 1), y, ignore_index=0)
    loss.backward()
    save("ce3d_x", t2n(x)), save("ce3d_y", y.numpy().astype(np.int64))
    save("ce3d_loss", np.array([loss.item()], np.float32))
    save("ce3d_grad", t2n(x.grad))

    # nll on log-probabilities
    logp = F.log_softmax(torch.randn(6, 4, generator=g) * 3, dim=1)
    logp = logp.detach().requires_grad_()
    y = torch.randint(0, 4, (6,), generator=g)
    loss = F.nll_loss(logp, y)
    loss.backward()
    save("nll_x", t2n(logp)), save("nll_y", y.numpy().astype(np.int64))
    save("nll_loss", np.array([loss.item()], np.float32))
    save("nll_grad", t2n(logp.grad))

    # mse
    x = torch.randn(5, 3, generator=g).requires_grad_()
    t = torch.randn(5, 3, generator=g)
    loss = F.mse_loss(x, t)
    loss.backward()
    save("mse_x", t2n(x)), save("mse_y", t.numpy())
    save("mse_loss", np.array([loss.item()], np.float32))
    save("mse_grad", t2n(x.grad))

    # bce_with_logits with soft targets and large logits (stability)
    x = torch.randn(4, 6, generator=g) * 3
    x[0, 0], x[1, 1], x[2, 2], x[3, 3] = 40.0, -40.0, 95.0, -95.0
    x.requires_grad_()
    t = torch.rand(4, 6, generator=g)
    t[0, 1], t[1, 2] = 0.0, 1.0
    loss = F.binary_cross_entropy_with_logits(x, t)
    loss.backward()
    save("bce_x", t2n(x)), save("bce_y", t.numpy())
    save("bce_loss", np.array([loss.item()], np.float32))
    save("bce_grad", t2n(x.grad))


# name -> (constructor, kwargs); two parameters [4, 3] and [5], flattened
OPTIMS = [
    ("sgd_plain", torch.optim.SGD, dict(lr=0.1)),
    ("sgd_momentum", torch.optim.SGD,
     dict(lr=0.05, momentum=0.9, dampening=0.1, weight_decay=0.01)),
    ("sgd_nesterov", torch.optim.SGD,
     dict(lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.001)),
    ("adam", torch.optim.Adam,
     dict(lr=0.01, betas=(0.8, 0.95), eps=1e-6, weight_decay=0.02)),
    ("adamw", torch.optim.AdamW, dict(lr=0.01, weight_decay=0.05)),
]
LR_FACTORS = [1.0, 0.5, 0.25]  # per-step learning rate = lr * factor


def optims():
    for k, (name, ctor, kw) in enumerate(OPTIMS):
        g = torch.Generator().manual_seed(100 + k)
        params = [torch.randn(4, 3, generator=g).requires_grad_(),
                  torch.randn(5, generator=g).requires_grad_()]
        p0 = torch.cat([p.detach().flatten() for p in params]).numpy().copy()
        if ctor is not torch.optim.SGD:
            kw = dict(kw, foreach=False)  # the single-tensor path dlrun follows
        opt = ctor(params, **kw)
        grads, after, lrs = [], [], []
        for s, f in enumerate(LR_FACTORS):
            for group in opt.param_groups:
                group["lr"] = kw["lr"] * f
            lrs.append(kw["lr"] * f)
            flat = torch.randn(17, generator=g) * (1 + s)
            params[0].grad = flat[:12].reshape(4, 3).clone()
            params[1].grad = flat[12:].clone()
            opt.step()
            grads.append(flat.numpy().copy())
            after.append(torch.cat([p.detach().flatten() for p in params]).numpy().copy())
        save("opt_%s_p0" % name, p0)
        save("opt_%s_g" % name, np.stack(grads))
        save("opt_%s_p" % name, np.stack(after))
        save("opt_%s_lr" % name, np.array(lrs, np.float64).astype(np.float32))


CLIPS = [("clip_on", 1.0), ("clip_off", 50.0)]


def clips():
    g = torch.Generator().manual_seed(7)
    for name, max_norm in CLIPS:
        params = [torch.zeros(4, 3, requires_grad=True),
                  torch.zeros(5, requires_grad=True)]
        flat = torch.randn(17, generator=g) * 2
        params[0].grad = flat[:12].reshape(4, 3).clone()
        params[1].grad = flat[12:].clone()
        norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
        save("%s_g" % name, flat.numpy())
        save("%s_out" % name,
             torch.cat([p.grad.flatten() for p in params]).numpy())
        save("%s_norm" % name, np.array([norm.item()], np.float32))


# name -> (kind, lr, warmup, step_size, gamma, min_lr, total_steps)
SCHEDS = [
    ("constant", "constant", 0.1, 0, 0, 0, 0, 12),
    ("constant_warmup", "constant", 0.1, 3, 0, 0, 0, 12),
    ("step", "step", 0.1, 0, 4, 0.5, 0, 12),
    ("step_warmup", "step", 0.1, 3, 4, 0.5, 0, 12),
    ("cosine", "cosine", 0.1, 0, 0, 0, 0.01, 12),
    ("cosine_warmup", "cosine", 0.1, 3, 0, 0, 0.01, 12),
]


def formula(kind, lr, warmup, step_size, gamma, min_lr, total, t):
    """cli.md's wording: warmup first, then the schedule from 0."""
    if t < warmup:
        return lr * (t + 1) / warmup
    k = t - warmup
    if kind == "step":
        return lr * gamma ** (k // step_size)
    if kind == "cosine":
        T = total - warmup
        return min_lr + (lr - min_lr) * (1 + math.cos(math.pi * min(k, T) / T)) / 2
    return lr


def schedules():
    S = torch.optim.lr_scheduler
    for name, kind, lr, warmup, step_size, gamma, min_lr, total in SCHEDS:
        opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=lr)
        if kind == "step":
            main = S.StepLR(opt, step_size=step_size, gamma=gamma)
        elif kind == "cosine":
            main = S.CosineAnnealingLR(opt, T_max=total - warmup, eta_min=min_lr)
        else:
            main = S.ConstantLR(opt, factor=1.0, total_iters=0)
        if warmup:
            warm = S.LinearLR(opt, start_factor=1.0 / warmup, end_factor=1.0,
                              total_iters=warmup - 1)
            sched = S.SequentialLR(opt, [warm, main], milestones=[warmup])
        else:
            sched = main
        got = []
        for t in range(total):
            got.append(opt.param_groups[0]["lr"])
            opt.step()
            sched.step()
        want = [formula(kind, lr, warmup, step_size, gamma, min_lr, total, t)
                for t in range(total)]
        # torch and the formula must agree: the fixture is both
        for t, (a, b) in enumerate(zip(got, want)):
            if abs(a - b) > 1e-12 * max(1.0, abs(b)):
                sys.exit("%s: step %d: torch %r, formula %r" % (name, t, a, b))
        save("lr_%s" % name, np.array(got, np.float64))


def main():
    # SequentialLR calls step(0) on the next scheduler at a milestone
    warnings.filterwarnings("ignore", message="The epoch parameter")
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    os.makedirs(OUT, exist_ok=True)
    losses()
    optims()
    clips()
    schedules()


if __name__ == "__main__":
    main()
