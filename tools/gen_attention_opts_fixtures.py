#!/usr/bin/python3
"""Generates tests/fixtures/attention_opts/: PyTorch references for the
attention options of `attention` and `multihead_attention`
(tests/fixtures.sh runs them): an attn_mask input (int: nonzero = masked;
float: added to the scores; per sample or batch 1), a key_padding_mask
input [N, S] (nonzero = padding, also as a float input of 0/1 flags),
per-head 4-D inputs [N, H, T, d], block_size patterns and Shaw's relative
values.

Each case directory holds model.yaml, model.safetensors (keys under the
entry's scope, `0.`), in.npy (the model inputs back to back in `inputs:`
order; `dtype: int` inputs as int64) and out.npy.

The references run in float64 on float32-representable values. Block
patterns are dense attention with the equivalent boolean mask, written from
the contract's definitions (window blocks |bi - bj| <= w * dilation with
(bi - bj) % dilation == 0, global blocks, r random key blocks per query
block drawn as src/ops/attention_core.c documents). Where PyTorch has the
operation (F._scaled_dot_product_attention of torch 1.13 for the 4-D and masked cases
without relative tables, nn.MultiheadAttention with attn_mask and
key_padding_mask) the hand-written reference is checked against it.

Seeds are fixed per case name: re-running gives the same bytes.
Run: /usr/bin/python3 tools/gen_attention_opts_fixtures.py
"""

import math
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
from gen_attention_fixtures import Gen, splitmix64, yaml_value  # noqa: E402

M64 = (1 << 64) - 1
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                    "tests", "fixtures", "attention_opts")


def allowed(Tq, Tk, hp):
    """[Tq, Tk] bool: the pattern's allowed keys; window, global and random
    count blocks of block_size tokens (a partial last block is a block)."""
    B = hp.get("block_size", 1)
    window = hp.get("window")
    dil = hp.get("dilation", 1)
    glob = hp.get("global_tokens", 0)
    rnd = hp.get("random_keys", 0)
    seed = hp.get("seed", 0)
    stride = hp.get("stride")
    fixed = hp.get("fixed")
    fsum = hp.get("fixed_summary", 1)
    anyp = (window is not None or stride is not None or fixed is not None
            or glob > 0 or rnd > 0)
    nb = -(-Tk // B)
    m = np.zeros((Tq, Tk), dtype=bool)
    for i in range(Tq):
        bi = i // B
        for j in range(Tk):
            if not anyp:
                m[i, j] = True
                continue
            bj = j // B
            d, db = i - j, bi - bj
            ok = False
            if window is not None and abs(db) <= window * dil and \
                    db % dil == 0:
                ok = True
            if stride is not None and (abs(d) < stride or d % stride == 0):
                ok = True
            if fixed is not None and (j // fixed == i // fixed
                                      or j % fixed >= fixed - fsum):
                ok = True
            if glob > 0 and (i < glob * B or j < glob * B):
                ok = True
            m[i, j] = ok
        if rnd > 0:
            r = min(rnd, nb)
            s = (seed * 0x9E3779B97F4A7C15 +
                 (bi if B > 1 else i) * 0xD1B54A32D192ED03) & M64
            chosen = set()
            for _ in range(r):
                while True:
                    s, z = splitmix64(s)
                    kb = z % nb
                    if kb not in chosen:
                        break
                chosen.add(kb)
                m[i, kb * B:kb * B + B] = True
        if hp.get("causal"):
            m[i, i + 1:] = False
    return m


def rel_idx(Tq, Tk, K):
    return torch.tensor([[min(max(j - i, -K), K) + K for j in range(Tk)]
                         for i in range(Tq)])


def ref_core(q, k, v, hp, params, am=None, am_int=False, kpm=None,
             score="scaled_dot"):
    """q [N, (H,) Tq, d], k, v likewise; am [N or 1, Tq, Tk]; kpm [N, Tk],
    nonzero = padding"""
    Tq, Tk, d = q.shape[-2], k.shape[-2], q.shape[-1]
    four = q.dim() == 4
    if score == "bilinear":
        s = q @ params["weight"] @ k.transpose(-1, -2)
    else:
        s = q @ k.transpose(-1, -2)
        K = hp.get("relative_positions", 0)
        if K:
            R = params["rel_k"][rel_idx(Tq, Tk, K)]
            s = s + torch.einsum("...id,ijd->...ij", q, R)
        if score == "scaled_dot":
            s = s / math.sqrt(d)
    ok = torch.from_numpy(allowed(Tq, Tk, hp)).expand(s.shape).clone()
    if am is not None:
        a = am.unsqueeze(1) if four else am
        if am_int:
            ok &= ~(a != 0)
        else:
            s = s + a
    if kpm is not None:
        kk = kpm[:, None, None, :] if four else kpm[:, None, :]
        ok &= ~(kk != 0)
    assert ok.any(-1).all(), "a query with no allowed key"
    p = torch.softmax(s.masked_fill(~ok, float("-inf")), dim=-1)
    o = p @ v
    if hp.get("relative_values"):
        RV = params["rel_v"][rel_idx(Tq, Tk, hp["relative_positions"])]
        o = o + torch.einsum("...ij,ijd->...id", p, RV)
    return o


def torch_mask(Tq, Tk, hp, am, am_int, kpm, four):
    """The combined additive mask for F.scaled_dot_product_attention"""
    m = torch.zeros(Tq, Tk, dtype=torch.float64)
    m = m.masked_fill(~torch.from_numpy(allowed(Tq, Tk, hp)), float("-inf"))
    if am is not None:
        a = torch.zeros_like(am, dtype=torch.float64).masked_fill(
            am != 0, float("-inf")) if am_int else am
        m = m + (a.unsqueeze(1) if four else a)
    if kpm is not None:
        kk = torch.zeros_like(kpm, dtype=torch.float64).masked_fill(
            kpm != 0, float("-inf"))
        m = m + (kk[:, None, None, :] if four else kk[:, None, :])
    return m


def model_yaml(inputs, op, hp):
    lines = ["inputs:"]
    for name, shape, is_int in inputs:
        lines.append("  %s: {shape: [%s]%s}" % (
            name, ", ".join(map(str, shape)), ", dtype: int" if is_int else ""))
    lines.append("layers:")
    return "\n".join(lines) + "\n"


def entry_yaml(ins, op, hp):
    body = ", ".join("%s: %s" % (k, yaml_value(v)) for k, v in hp.items())
    return "  - in: [%s]\n    %s: {%s}\n" % (", ".join(ins), op, body)


def write_npys(path, arrays):
    with open(path, "wb") as f:
        for a in arrays:
            if a.dtype in (torch.int64, np.int64):
                arr = np.ascontiguousarray(np.asarray(a), dtype="<i8")
            else:
                arr = dltools.as_f32(a)
            np.lib.format.write_array(f, arr, version=(1, 0),
                                      allow_pickle=False)


def write_case(name, text, params, inputs, out, rtol=None):
    d = os.path.join(ROOT, name)
    os.makedirs(d)
    with open(os.path.join(d, "model.yaml"), "w") as f:
        f.write(text)
    if params:
        dltools.write_safetensors(os.path.join(d, "model.safetensors"),
                                  {"0." + k: v for k, v in params.items()})
    write_npys(os.path.join(d, "in.npy"), inputs)
    write_npys(os.path.join(d, "out.npy"), [out])
    if rtol:
        with open(os.path.join(d, "rtol"), "w") as f:
            f.write(rtol + "\n")


def int_mask(g, shape, p=0.3):
    """0/1 int64 mask, about p masked, never the first key"""
    u = torch.rand(*shape, generator=g.g, dtype=torch.float64)
    m = (u < p).long()
    m[..., 0] = 0
    return m


def repair(hp, Tq, Tk, N, A, am_int, P):
    """Unmasks the first pattern key of any query that the int masks leave
    with no key (PyTorch gives NaN there; dlrun gives zeros)"""
    pat = allowed(Tq, Tk, hp)
    for n in range(N):
        for i in range(Tq):
            ok = pat[i].copy()
            if A is not None and am_int:
                ok &= (A[n if A.shape[0] > 1 else 0, i] == 0).numpy()
            if P is not None:
                ok &= (P[n] == 0).numpy()
            if not ok.any():
                j = int(np.argmax(pat[i]))
                if A is not None and am_int:
                    A[n if A.shape[0] > 1 else 0, i, j] = 0
                if P is not None:
                    P[n, j] = 0


def att_case(name, N, Tq, Tk, d, dv, form, H=None, am=None, am_b1=False,
             kpm=None, score="scaled_dot", **hp):
    """form: 'self' (x, written out as x, x, x when am is given), 'kv' or
    'qkv'; am / kpm: None, 'int' or 'float'; H: 4-D per-head inputs"""
    g = Gen(name)
    lead = (N, H) if H else (N,)
    q = g.randn(*lead, Tq, d)
    if form == "self":
        assert Tq == Tk and d == dv
        k = v = q
    else:
        k = g.randn(*lead, Tk, d)
        v = k if form == "kv" else g.randn(*lead, Tk, dv)
    params = {}
    if score == "bilinear":
        params["weight"] = g.randn(d, d, scale=0.5)
    K = hp.get("relative_positions", 0)
    if K:
        params["rel_k"] = g.randn(2 * K + 1, d)
    if hp.get("relative_values"):
        params["rel_v"] = g.randn(2 * K + 1, dv)
    A = None
    if am == "int":
        A = int_mask(g, (1 if am_b1 else N, Tq, Tk))
    elif am == "float":
        A = g.randn(1 if am_b1 else N, Tq, Tk)
    P = None
    if kpm == "int":
        P = int_mask(g, (N, Tk), 0.4)
    elif kpm == "float":
        P = int_mask(g, (N, Tk), 0.4).double()
    repair(hp, Tq, Tk, N, A, am == "int", P)
    y = ref_core(q, k, v, hp, params, A, am == "int", P, score)
    if score == "scaled_dot" and not K:
        m = torch_mask(Tq, Tk, hp, A, am == "int", P, H is not None)
        # torch 1.13 names it _scaled_dot_product_attention (a tuple)
        yt = F._scaled_dot_product_attention(q, k, v, m, 0.0, False,
                                             False)[0]
        assert torch.allclose(y, yt, rtol=1e-9, atol=1e-12), name
    shp = lambda T, D: ([H] if H else []) + [T, D]  # noqa: E731
    if form == "self":
        inputs = [("x", shp(Tq, d), False)]
        arrays = [q]
        ins = ["x", "x", "x"] if A is not None else ["x"]
    elif form == "kv":
        inputs = [("q", shp(Tq, d), False), ("kv", shp(Tk, d), False)]
        arrays = [q, k]
        ins = ["q", "kv", "kv"] if A is not None else ["q", "kv"]
    else:
        inputs = [("q", shp(Tq, d), False), ("k", shp(Tk, d), False),
                  ("v", shp(Tk, dv), False)]
        arrays = [q, k, v]
        ins = ["q", "k", "v"]
    if A is not None:
        inputs.append(("mask", [Tq, Tk], am == "int"))
        arrays.append(A)
        ins.append("mask")
    if P is not None:
        inputs.append(("pad", [Tk], kpm == "int"))
        arrays.append(P)
        ins.append("pad")
    yhp = {"score": score} if score != "scaled_dot" else {}
    yhp.update(hp)
    text = model_yaml(inputs, "attention", yhp)
    if len(ins) > 1:
        text += entry_yaml(ins, "attention", yhp)
    else:
        body = ", ".join("%s: %s" % (k_, yaml_value(v_))
                         for k_, v_ in yhp.items())
        text += "  - attention: {%s}\n" % body
    write_case(name, text, params, arrays, y)


def ref_mha(q, k, v, params, hp, H, am, am_int, kpm):
    E = q.shape[-1]
    if "in_proj_weight" in params:
        Wq, Wk, Wv = params["in_proj_weight"].chunk(3)
    else:
        Wq, Wk, Wv = (params["q_proj_weight"], params["k_proj_weight"],
                      params["v_proj_weight"])
    bq, bk, bv = params["in_proj_bias"].chunk(3)
    Q, K_, V = q @ Wq.T + bq, k @ Wk.T + bk, v @ Wv.T + bv
    N, Tq, Tk, d = q.shape[0], q.shape[1], k.shape[1], E // H
    Qh = Q.view(N, Tq, H, d).transpose(1, 2)
    Kh = K_.view(N, Tk, H, d).transpose(1, 2)
    Vh = V.view(N, Tk, H, d).transpose(1, 2)
    o = ref_core(Qh, Kh, Vh, hp, params, am, am_int, kpm)
    o = o.transpose(1, 2).reshape(N, Tq, E)
    return o @ params["out_proj.weight"].T + params["out_proj.bias"]


def mha_case(name, N, Tq, Tk, E, H, form, kd=None, am=None, am_b1=False,
             kpm=True, **hp):
    g = Gen(name)
    kd = kd or E
    torch.manual_seed(zlib.crc32(name.encode()))
    mod = nn.MultiheadAttention(E, H, batch_first=True, kdim=kd,
                                vdim=kd).double()
    with torch.no_grad():
        for p in mod.parameters():
            p.copy_(g.randn(*p.shape, scale=0.5))
    params = {k_: v_.detach().clone() for k_, v_ in mod.state_dict().items()}
    K = hp.get("relative_positions", 0)
    if K:
        params["rel_k"] = g.randn(2 * K + 1, E // H)
    if hp.get("relative_values"):
        params["rel_v"] = g.randn(2 * K + 1, E // H)
    q = g.randn(N, Tq, E)
    if form == "self":
        k = v = q
    else:
        k = g.randn(N, Tk, kd)
        v = k if form == "kv" else g.randn(N, Tk, kd)
    A = None
    if am == "int":
        A = int_mask(g, (1 if am_b1 else N, Tq, Tk))
    elif am == "float":
        A = g.randn(1 if am_b1 else N, Tq, Tk)
    P = int_mask(g, (N, Tk), 0.4) if kpm else None
    repair(hp, Tq, Tk, N, A, am == "int", P)
    y = ref_mha(q, k, v, params, hp, H, A, am == "int", P)
    if not K:
        m = torch.zeros(Tq, Tk, dtype=torch.float64).masked_fill(
            ~torch.from_numpy(allowed(Tq, Tk, hp)), float("-inf"))
        m = m.expand(N, Tq, Tk)
        if A is not None:
            a = torch.zeros_like(A, dtype=torch.float64).masked_fill(
                A != 0, float("-inf")) if am == "int" else A
            m = m + a
        m = m.repeat_interleave(H, dim=0)
        with torch.no_grad():
            yt, _ = mod(q, k, v, need_weights=False, attn_mask=m,
                        key_padding_mask=None if P is None else P != 0)
        assert torch.allclose(y, yt, rtol=1e-9, atol=1e-12), name
    if form == "self":
        inputs = [("x", [Tq, E], False)]
        arrays = [q]
        ins = ["x", "x", "x"] if A is not None else ["x"]
    elif form == "kv":
        inputs = [("q", [Tq, E], False), ("kv", [Tk, kd], False)]
        arrays = [q, k]
        ins = ["q", "kv", "kv"] if A is not None else ["q", "kv"]
    else:
        inputs = [("q", [Tq, E], False), ("k", [Tk, kd], False),
                  ("v", [Tk, kd], False)]
        arrays = [q, k, v]
        ins = ["q", "k", "v"]
    if A is not None:
        inputs.append(("mask", [Tq, Tk], am == "int"))
        arrays.append(A)
        ins.append("mask")
    if P is not None:
        inputs.append(("pad", [Tk], True))
        arrays.append(P)
        ins.append("pad")
    yhp = {"num_heads": H}
    yhp.update(hp)
    text = model_yaml(inputs, "multihead_attention", yhp)
    if len(ins) > 1:
        text += entry_yaml(ins, "multihead_attention", yhp)
    else:
        body = ", ".join("%s: %s" % (k_, yaml_value(v_))
                         for k_, v_ in yhp.items())
        text += "  - multihead_attention: {%s}\n" % body
    write_case(name, text, params, arrays, y)


def main():
    if os.path.isdir(ROOT):
        shutil.rmtree(ROOT)
    os.makedirs(ROOT)
    # attn_mask: int and float, per sample and batch 1, every input form
    att_case("mask_int_qkv", 2, 5, 7, 4, 3, "qkv", am="int")
    att_case("mask_int_self_b1", 1, 5, 5, 4, 4, "self", am="int")
    att_case("mask_int_bcast", 3, 6, 5, 4, 4, "kv", am="int", am_b1=True)
    att_case("mask_float_qkv", 2, 5, 7, 4, 3, "qkv", am="float")
    att_case("mask_float_bcast_causal", 2, 7, 7, 3, 3, "self", am="float",
             am_b1=True, causal=True)
    att_case("mask_float_dot", 2, 5, 6, 4, 4, "kv", am="float", score="dot")
    att_case("mask_int_bilinear", 2, 5, 6, 4, 5, "qkv", am="int",
             score="bilinear")
    # key_padding_mask, alone (after 1, 2 or 3 inputs) and with a mask
    att_case("kpm_self", 2, 7, 7, 4, 4, "self", kpm="int")
    att_case("kpm_kv_b1", 1, 4, 9, 4, 4, "kv", kpm="int")
    att_case("kpm_qkv_float", 3, 5, 6, 4, 3, "qkv", kpm="float")
    att_case("mask_kpm", 2, 5, 7, 4, 3, "qkv", am="float", kpm="int")
    # per-head 4-D inputs [N, H, T, d]
    att_case("4d_qkv", 2, 5, 7, 4, 3, "qkv", H=3)
    att_case("4d_self_causal_b1", 1, 7, 7, 4, 4, "self", H=2, causal=True)
    att_case("4d_mask_kpm", 2, 5, 6, 4, 4, "kv", H=3, am="int",
             am_b1=True, kpm="int")
    att_case("4d_window_relpos", 2, 9, 9, 4, 4, "self", H=2, window=2,
             relative_positions=2)
    # block patterns, with the masks on the key lists too
    att_case("block_window", 2, 11, 11, 4, 4, "self", window=1,
             block_size=2)
    att_case("block_window_dil_cross", 2, 7, 13, 4, 3, "qkv", window=1,
             dilation=2, block_size=3)
    att_case("block_global_random", 2, 13, 13, 4, 4, "self", window=0,
             global_tokens=1, random_keys=1, seed=5, block_size=3)
    att_case("block_causal_stride", 1, 9, 9, 3, 3, "self", window=1,
             stride=3, causal=True, block_size=2)
    att_case("block_window_fixed_mask", 2, 11, 11, 4, 4, "self", am="int",
             kpm="int", window=0, fixed=4, block_size=4)
    att_case("sparse_stride_bilinear_mask", 2, 9, 9, 4, 4, "self",
             am="float", score="bilinear", stride=3)
    att_case("sparse_window_kpm_float", 2, 8, 8, 4, 4, "self", kpm="float",
             window=2, dilation=2)
    # relative values
    att_case("relv", 2, 7, 7, 4, 4, "self", relative_positions=2,
             relative_values=True)
    att_case("relv_cross_causal", 2, 6, 9, 4, 5, "qkv", relative_positions=3,
             relative_values=True, causal=True)
    att_case("relv_window_mask", 1, 9, 9, 4, 3, "qkv", am="int",
             relative_positions=1, relative_values=True, window=2)
    att_case("relv_4d_block", 2, 9, 9, 4, 4, "self", H=2,
             relative_positions=2, relative_values=True, window=1,
             block_size=2)

    # multihead_attention: key_padding_mask, attn_mask, blocks, relv
    mha_case("mha_kpm_self", 2, 7, 7, 6, 3, "self")
    mha_case("mha_kpm_self_b1", 1, 5, 5, 4, 2, "self")
    mha_case("mha_kpm_cross", 2, 4, 9, 6, 2, "kv")
    mha_case("mha_kpm_qkv_kdim", 2, 5, 6, 6, 3, "qkv", kd=5)
    mha_case("mha_mask_int_kpm", 2, 5, 7, 4, 2, "qkv", am="int")
    mha_case("mha_mask_float_b1", 2, 6, 6, 4, 2, "self", am="float",
             am_b1=True, kpm=False)
    mha_case("mha_kpm_window", 2, 9, 9, 4, 2, "self", window=1)
    mha_case("mha_block_window_global", 2, 11, 11, 6, 3, "self", window=1,
             global_tokens=1, block_size=2)
    mha_case("mha_block_random_causal", 2, 10, 10, 4, 2, "self", window=0,
             random_keys=1, seed=2, causal=True, block_size=3, kpm=False)
    mha_case("mha_relv", 2, 7, 7, 6, 3, "self", relative_positions=2,
             relative_values=True)
    mha_case("mha_relv_window_causal", 2, 9, 9, 4, 2, "self", window=2,
             causal=True, relative_positions=2, relative_values=True,
             kpm=False)


if __name__ == "__main__":
    main()
