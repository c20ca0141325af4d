#!/usr/bin/python3
"""Generates tests/fixtures/attention/: PyTorch references for dlrun's
`attention` and `multihead_attention` ops (tests/fixtures.sh runs them).

Each case directory holds model.yaml, model.safetensors (keys as
nn.MultiheadAttention's state_dict under the entry's scope, `0.`), in.npy
(the model inputs back to back, in `inputs:` order) and out.npy.

References run in float64 on float32-representable values. Plain multihead
cases (with or without causal / sparse masks) use nn.MultiheadAttention
(batch_first=True, need_weights=False, a boolean attn_mask); the `attention`
op's scores, relative positions and dconv use the hand-written reference
below, itself checked against nn.MultiheadAttention where both apply.

The sparse-pattern masks and BigBird's random keys follow
src/ops/attention_core.c: random keys are min(r, Tk) distinct keys per query
drawn with splitmix64 from the state seed * 0x9E3779B97F4A7C15 +
i * 0xD1B54A32D192ED03 (mod 2^64), as `next % Tk`, redrawn on repeats.

Seeds are fixed per case name: re-running gives the same bytes.
Run: /usr/bin/python3 tools/gen_attention_fixtures.py
"""

import math
import os
import shutil
import sys
import zlib

import numpy as np
import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dltools  # noqa: E402

M64 = (1 << 64) - 1
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                    "tests", "fixtures", "attention")


def splitmix64(state):
    state = (state + 0x9E3779B97F4A7C15) & M64
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return state, z ^ (z >> 31)


def allowed(Tq, Tk, hp):
    """[Tq, Tk] bool: True where query i may attend to key j."""
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
    m = np.zeros((Tq, Tk), dtype=bool)
    for i in range(Tq):
        for j in range(Tk):
            if not anyp:
                m[i, j] = True
                continue
            d = i - j
            ok = False
            if window is not None and abs(d) <= window * dil and d % dil == 0:
                ok = True
            if stride is not None and (abs(d) < stride or d % stride == 0):
                ok = True
            if fixed is not None and (j // fixed == i // fixed
                                      or j % fixed >= fixed - fsum):
                ok = True
            if glob > 0 and (i < glob or j < glob):
                ok = True
            m[i, j] = ok
        if rnd > 0:
            r = min(rnd, Tk)
            s = (seed * 0x9E3779B97F4A7C15 + i * 0xD1B54A32D192ED03) & M64
            chosen = set()
            for _ in range(r):
                while True:
                    s, z = splitmix64(s)
                    k = z % Tk
                    if k not in chosen:
                        break
                chosen.add(k)
                m[i, k] = True
        if hp.get("causal"):
            m[i, i + 1:] = False
    assert m.any(axis=1).all(), "a query with no allowed key"
    return m


class Gen:
    def __init__(self, name):
        self.g = torch.Generator().manual_seed(zlib.crc32(name.encode()))

    def randn(self, *shape, scale=1.0):
        t = torch.randn(*shape, generator=self.g, dtype=torch.float64) * scale
        return t.float().double()


def yaml_value(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return v
    return str(v)


def model_yaml(inputs, op, hp):
    lines = ["inputs:"]
    for name, shape in inputs:
        lines.append("  %s: {shape: [%s]}" % (name, ", ".join(map(str, shape))))
    lines.append("layers:")
    body = ", ".join("%s: %s" % (k, yaml_value(v)) for k, v in hp.items())
    if len(inputs) > 1:
        lines.append("  - in: [%s]" % ", ".join(n for n, _ in inputs))
        lines.append("    %s: {%s}" % (op, body))
    else:
        lines.append("  - %s: {%s}" % (op, body))
    return "\n".join(lines) + "\n"


def softmax_masked(S, m):
    S = S.masked_fill(~torch.from_numpy(m), float("-inf"))
    return torch.softmax(S, dim=-1)


def ref_scores(score, q, k, params, hp, scale_d):
    """q [N, Tq, Dq], k [N, Tk, Dk] -> [N, Tq, Tk]"""
    if score in ("scaled_dot", "dot"):
        s = q @ k.transpose(-1, -2)
        K = hp.get("relative_positions", 0)
        if K:
            Tq, Tk = q.shape[-2], k.shape[-2]
            idx = torch.tensor([[min(max(j - i, -K), K) + K for j in range(Tk)]
                                for i in range(Tq)])
            R = params["rel_k"][idx]           # [Tq, Tk, d]
            s = s + torch.einsum("...id,ijd->...ij", q, R)
        if score == "scaled_dot":
            s = s / math.sqrt(scale_d)
        return s
    if score == "bilinear":
        return q @ params["weight"] @ k.transpose(-1, -2)
    W = params["w.weight"]
    Dq = q.shape[-1]
    aq = q @ W[:, :Dq].T                       # [N, Tq, A]
    ak = k @ W[:, Dq:].T                       # [N, Tk, A]
    t = torch.tanh(aq.unsqueeze(-2) + ak.unsqueeze(-3))
    return (t @ params["w2.weight"].T).squeeze(-1)


def ref_attention(score, q, k, v, params, hp):
    m = allowed(q.shape[1], k.shape[1], hp)
    s = ref_scores(score, q, k, params, hp, q.shape[-1])
    return softmax_masked(s, m) @ v


def causal_dconv(x, w, b):
    """x [N, T, E], w [E, 1, width], b [E] or None"""
    E, width = w.shape[0], w.shape[2]
    xt = torch.nn.functional.pad(x.transpose(1, 2), (width - 1, 0))
    return torch.nn.functional.conv1d(xt, w, b, groups=E).transpose(1, 2)


def ref_mha(q, k, v, params, hp, H):
    """hand-written nn.MultiheadAttention (batch first), with relative
    positions and dconv"""
    E = q.shape[-1]
    if "in_proj_weight" in params:
        Wq, Wk, Wv = params["in_proj_weight"].chunk(3)
    else:
        Wq, Wk, Wv = (params["q_proj_weight"], params["k_proj_weight"],
                      params["v_proj_weight"])
    if "in_proj_bias" in params:
        bq, bk, bv = params["in_proj_bias"].chunk(3)
    else:
        bq = bk = bv = torch.zeros(E, dtype=torch.float64)
    Q, K_, V = q @ Wq.T + bq, k @ Wk.T + bk, v @ Wv.T + bv
    if hp.get("dconv"):
        Q = causal_dconv(Q, params["q_dconv.weight"], params.get("q_dconv.bias"))
        K_ = causal_dconv(K_, params["k_dconv.weight"], params.get("k_dconv.bias"))
        V = causal_dconv(V, params["v_dconv.weight"], params.get("v_dconv.bias"))
    N, Tq, Tk, d = q.shape[0], q.shape[1], k.shape[1], E // H
    Qh = Q.view(N, Tq, H, d).transpose(1, 2)
    Kh = K_.view(N, Tk, H, d).transpose(1, 2)
    Vh = V.view(N, Tk, H, d).transpose(1, 2)
    m = allowed(Tq, Tk, hp)
    s = ref_scores("scaled_dot", Qh, Kh, params, hp, d)
    o = (softmax_masked(s, m) @ Vh).transpose(1, 2).reshape(N, Tq, E)
    o = o @ params["out_proj.weight"].T
    if "out_proj.bias" in params:
        o = o + params["out_proj.bias"]
    return o


MASK_KEYS = ("causal", "window", "dilation", "global_tokens", "random_keys",
             "seed", "stride", "fixed", "fixed_summary", "relative_positions")


def write_case(name, yaml_text, params, inputs, out, rtol=None):
    d = os.path.join(ROOT, name)
    os.makedirs(d)
    with open(os.path.join(d, "model.yaml"), "w") as f:
        f.write(yaml_text)
    if params:
        dltools.write_safetensors(os.path.join(d, "model.safetensors"),
                                  {"0." + k: v for k, v in params.items()})
    dltools.write_npys(os.path.join(d, "in.npy"), inputs)
    dltools.write_npys(os.path.join(d, "out.npy"), [out])
    if rtol:
        with open(os.path.join(d, "rtol"), "w") as f:
            f.write(rtol + "\n")


def attention_case(name, N, Tq, Tk, Dq, Dk, Dv, nin, **hp):
    g = Gen(name)
    score = hp.get("score", "scaled_dot")
    if nin == 1:
        assert Tq == Tk and Dq == Dk == Dv
    if nin == 2:
        assert Dk == Dv
    q = g.randn(N, Tq, Dq)
    k = q if nin == 1 else g.randn(N, Tk, Dk)
    v = k if nin < 3 else g.randn(N, Tk, Dv)
    params = {}
    if score == "bilinear":
        params["weight"] = g.randn(Dq, Dk, scale=0.5)
    if score == "additive":
        A = hp["attention_size"]
        params["w.weight"] = g.randn(A, Dq + Dk, scale=0.5)
        params["w2.weight"] = g.randn(1, A)
    if hp.get("relative_positions"):
        params["rel_k"] = g.randn(2 * hp["relative_positions"] + 1, Dq)
    y = ref_attention(score, q, k, v, params, hp)
    names = [("x", [Tq, Dq])] if nin == 1 else \
        [("q", [Tq, Dq]), ("kv", [Tk, Dk])] if nin == 2 else \
        [("q", [Tq, Dq]), ("k", [Tk, Dk]), ("v", [Tk, Dv])]
    ins = [q, k, v][:nin]
    write_case(name, model_yaml(names, "attention", hp), params, ins, y)


def mha_case(name, N, Tq, Tk, E, H, nin, kd=None, vd=None, bias=True,
             hand=False, **hp):
    g = Gen(name)
    kd = kd or E
    vd = vd or E
    if nin < 3:
        assert vd == kd
    if nin == 1:
        assert Tq == Tk and kd == E
    torch.manual_seed(zlib.crc32(name.encode()))
    mod = nn.MultiheadAttention(E, H, bias=bias, batch_first=True, kdim=kd,
                                vdim=vd).double()
    with torch.no_grad():
        for p in mod.parameters():
            p.copy_(g.randn(*p.shape, scale=0.5))
    params = {k: v.detach().clone() for k, v in mod.state_dict().items()}
    if "in_proj_weight" in params and params["in_proj_weight"] is None:
        del params["in_proj_weight"]
    w = hp.get("dconv", 0)
    if w:
        for t in "qkv":
            params[t + "_dconv.weight"] = g.randn(E, 1, w, scale=0.5)
            if bias:
                params[t + "_dconv.bias"] = g.randn(E, scale=0.5)
    if hp.get("relative_positions"):
        params["rel_k"] = g.randn(2 * hp["relative_positions"] + 1, E // H)
    q = g.randn(N, Tq, E)
    k = q if nin == 1 else g.randn(N, Tk, kd)
    v = k if nin < 3 else g.randn(N, Tk, vd)
    m = allowed(Tq, Tk, hp)
    yh = ref_mha(q, k, v, params, hp, H)
    if not hand:
        with torch.no_grad():
            y, _ = mod(q, k, v, need_weights=False,
                       attn_mask=torch.from_numpy(~m))
        assert torch.allclose(y, yh, rtol=1e-9, atol=1e-12), name
    else:
        y = yh
    names = [("x", [Tq, E])] if nin == 1 else \
        [("q", [Tq, E]), ("kv", [Tk, kd])] if nin == 2 else \
        [("q", [Tq, E]), ("k", [Tk, kd]), ("v", [Tk, vd])]
    yhp = {"num_heads": H}
    if not bias:
        yhp["bias"] = False
    yhp.update(hp)
    ins = [q, k, v][:nin]
    write_case(name, model_yaml(names, "multihead_attention", yhp), params,
               ins, y)


def main():
    if os.path.isdir(ROOT):
        shutil.rmtree(ROOT)
    os.makedirs(ROOT)
    # attention: every score, 1 / 2 / 3 inputs, causal
    for score in ("scaled_dot", "dot", "bilinear", "additive"):
        extra = {"attention_size": 7} if score == "additive" else {}
        base = {"score": score} if score != "scaled_dot" else {}
        same = score in ("scaled_dot", "dot")
        attention_case("att_%s_self" % score, 2, 5, 5, 6, 6, 6, 1,
                       **base, **extra)
        attention_case("att_%s_self_b1" % score, 1, 5, 5, 6, 6, 6, 1,
                       **base, **extra)
        attention_case("att_%s_kv" % score, 3, 4, 7, 6 if same else 5, 6, 6,
                       2, **base, **extra)
        attention_case("att_%s_qkv" % score, 2, 5, 3, 4 if same else 3, 4,
                       9, 3, **base, **extra)
        attention_case("att_%s_causal" % score, 2, 6, 6, 5, 5, 5, 1,
                       causal=True, **base, **extra)
    attention_case("att_causal_kv_longer_q", 2, 7, 4, 3, 3, 3, 2, causal=True)
    # dense causal slices multiply in blocks of 32 queries, each against
    # the keys up to its last (src/ops/attention_core.c): two full blocks
    # and a partial one; more queries than keys (blocks past the keys)
    attention_case("att_causal_blocks", 2, 70, 70, 3, 3, 3, 1, causal=True)
    attention_case("att_causal_blocks_kv", 1, 70, 40, 3, 3, 4, 3, causal=True)
    # attention: sparse patterns
    attention_case("att_window", 2, 9, 9, 4, 4, 4, 1, window=2)
    attention_case("att_window_dil", 1, 11, 11, 4, 4, 4, 1, window=2,
                   dilation=3)
    attention_case("att_window_global_causal", 2, 10, 10, 3, 3, 3, 1,
                   window=1, global_tokens=2, causal=True)
    attention_case("att_stride", 2, 11, 11, 4, 4, 4, 1, stride=3)
    attention_case("att_fixed", 2, 11, 11, 4, 4, 4, 1, fixed=4,
                   fixed_summary=2)
    attention_case("att_random", 2, 9, 9, 4, 4, 4, 1, random_keys=3, seed=7)
    attention_case("att_union", 2, 13, 13, 4, 4, 4, 1, window=1, stride=5,
                   fixed=4, global_tokens=1, random_keys=2, seed=3)
    # window alone on key lists (O(T * window)): with dilation, causal,
    # cross, relative positions
    attention_case("att_window_kv_relpos", 2, 6, 9, 4, 4, 5, 3, window=1,
                   relative_positions=2)
    attention_case("att_window_dot_causal_dil", 2, 12, 12, 3, 3, 3, 1,
                   score="dot", window=2, dilation=2, causal=True)
    attention_case("att_window0", 1, 5, 5, 3, 3, 3, 1, window=0)
    attention_case("att_relpos", 2, 7, 7, 4, 4, 4, 1, relative_positions=2)
    attention_case("att_relpos_kv_causal", 2, 5, 8, 4, 4, 3, 3,
                   relative_positions=3, causal=True)
    attention_case("att_additive_window", 2, 7, 7, 3, 3, 3, 1,
                   score="additive", attention_size=4, window=1)

    # multihead
    mha_case("mha_self", 2, 5, 5, 6, 3, 1)
    mha_case("mha_self_b1", 1, 5, 5, 6, 3, 1)
    mha_case("mha_self_1head", 2, 4, 4, 5, 1, 1)
    mha_case("mha_self_nobias", 2, 5, 5, 6, 2, 1, bias=False)
    mha_case("mha_causal", 2, 6, 6, 8, 2, 1, causal=True)
    mha_case("mha_causal_blocks", 2, 37, 37, 4, 2, 1, causal=True)
    mha_case("mha_cross", 2, 4, 7, 6, 3, 2)
    mha_case("mha_cross_b1", 1, 4, 7, 6, 3, 2)
    mha_case("mha_qkv", 2, 5, 6, 6, 2, 3)
    mha_case("mha_kdim", 2, 4, 6, 6, 3, 2, kd=5, vd=5)
    mha_case("mha_kdim_vdim", 2, 5, 3, 6, 2, 3, kd=4, vd=7)
    mha_case("mha_kdim_vdim_nobias", 1, 5, 3, 4, 2, 3, kd=3, vd=5,
             bias=False)
    mha_case("mha_cross_causal", 2, 6, 4, 4, 2, 2, causal=True)
    mha_case("mha_window", 2, 9, 9, 4, 2, 1, window=2)
    mha_case("mha_window_dil_causal", 2, 10, 10, 4, 2, 1, window=3,
             dilation=2, causal=True)
    mha_case("mha_window_cross", 2, 5, 8, 6, 2, 2, window=2, dilation=2)
    mha_case("mha_window_kdim_b1", 1, 7, 9, 6, 3, 3, kd=4, vd=5, window=1)
    mha_case("mha_window_relpos_causal", 2, 9, 9, 6, 3, 1, hand=True,
             window=2, causal=True, relative_positions=3)
    mha_case("mha_window_dconv", 2, 8, 8, 4, 2, 1, hand=True, window=1,
             dconv=2)
    mha_case("mha_global_window", 2, 10, 10, 4, 2, 1, window=1,
             global_tokens=2)
    mha_case("mha_global", 1, 6, 6, 4, 2, 1, global_tokens=2)
    mha_case("mha_stride", 2, 11, 11, 6, 3, 1, stride=4)
    mha_case("mha_fixed", 2, 12, 12, 4, 2, 1, fixed=4)
    mha_case("mha_fixed_causal", 2, 12, 12, 4, 2, 1, fixed=3,
             fixed_summary=2, causal=True)
    mha_case("mha_random", 2, 8, 8, 4, 2, 1, random_keys=2, seed=11)
    mha_case("mha_random_cross", 2, 5, 9, 4, 2, 2, random_keys=3)
    mha_case("mha_union_causal", 2, 13, 13, 6, 3, 1, window=1, stride=4,
             fixed=5, global_tokens=1, random_keys=2, seed=5, causal=True)
    mha_case("mha_relpos", 2, 6, 6, 6, 3, 1, hand=True, relative_positions=2)
    mha_case("mha_relpos_cross_causal", 2, 7, 5, 4, 2, 2, hand=True,
             relative_positions=1, causal=True)
    mha_case("mha_dconv", 2, 6, 6, 6, 3, 1, hand=True, dconv=3)
    mha_case("mha_dconv_cross_nobias", 2, 5, 7, 4, 2, 2, bias=False,
             hand=True, dconv=2)
    mha_case("mha_dconv_kdim_causal", 1, 6, 6, 4, 2, 3, kd=3, vd=5,
             hand=True, dconv=3, causal=True)


if __name__ == "__main__":
    main()
