#!/usr/bin/python3
"""PyTorch references for transformer_encoder_layer and
transformer_decoder_layer with a key_padding_mask input and the sparse
patterns of multihead_attention: tests/fixtures/transformer_sparse/<case>/
with model.yaml, model.safetensors, in.npy and out.npy, as
tests/fixtures.sh expects.

The references are nn.TransformerEncoderLayer (src_key_padding_mask) and
nn.TransformerDecoderLayer (memory_key_padding_mask) with batch_first=True,
in float64 on float32 values, dropout 0 (dlrun's default 0.1 is the identity
at inference). A sparse pattern is the self attention's boolean attn_mask
(src_mask / tgt_mask) built from the contract's definitions
(gen_attention_opts_fixtures.allowed: window with dilation, global tokens,
random keys as src/ops/attention_core.c draws them, stride, fixed, block
forms, causal). Two cases are long enough (T^2 >= 2^20) for dlrun's
blocked online-softmax (flash) path of dense attention. Padding is drawn at random (about 30%, never the first
key) and then lifted from one key of any query left with no key (PyTorch
gives NaN there, dlrun zeros). Byte-stable.

Run with Debian's python3-torch:
/usr/bin/python3 tools/gen_transformer_sparse_fixtures.py
"""

import collections
import os
import shutil
import sys

import numpy as np
import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dltools  # noqa: E402
from gen_attention_opts_fixtures import allowed, write_npys  # noqa: E402
from gen_attention_fixtures import yaml_value  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                    "tests", "fixtures", "transformer_sparse")

# name, decoder, T, S, D, heads, ff, norm_first, batch, padding, pattern
CASES = [
    ("enc_kpm", False, 5, 0, 8, 2, 16, False, 3, True, {}),
    ("enc_kpm_b1_causal_norm_first", False, 6, 0, 6, 3, 10, True, 1, True,
     {"causal": True}),
    ("enc_longformer_kpm", False, 9, 0, 8, 2, 12, False, 2, True,
     {"window": 1, "global_tokens": 1}),
    ("enc_bigbird_block", False, 11, 0, 8, 4, 12, False, 2, True,
     {"block_size": 2, "window": 1, "global_tokens": 1, "random_keys": 1,
      "seed": 3}),
    ("enc_stride_causal", False, 10, 0, 6, 2, 8, True, 2, False,
     {"stride": 3, "causal": True}),
    ("enc_window_dilation_fixed", False, 9, 0, 8, 2, 8, False, 3, True,
     {"window": 2, "dilation": 2, "fixed": 3, "fixed_summary": 2}),
    ("enc_random_b1", False, 8, 0, 4, 1, 8, False, 1, False,
     {"random_keys": 2, "seed": 5, "window": 0}),
    ("dec_mem_kpm", True, 4, 6, 8, 2, 16, False, 3, True, {}),
    ("dec_window_causal_mem_kpm", True, 7, 5, 6, 2, 12, False, 2, True,
     {"window": 1, "causal": True}),
    ("dec_fixed_norm_first_b1", True, 8, 3, 8, 4, 8, True, 1, True,
     {"fixed": 4, "global_tokens": 1, "random_keys": 1}),
    # long dense self attention (T T >= 2^20 cells): the flash path
    ("enc_flash_causal_kpm_b1", False, 1040, 0, 8, 2, 8, False, 1, True,
     {"causal": True}),
    ("enc_flash_bs2", False, 1030, 0, 4, 1, 4, True, 2, False, {}),
]


def f32(t):
    return t.float().double()


def pad_mask(g, N, S, hp, T):
    """[N, S] int64, nonzero = padding; the self attention's queries (when
    the mask is on its keys, S == T and hp the pattern) keep a key"""
    u = torch.rand(N, S, generator=g, dtype=torch.float64)
    m = (u < 0.3).long()
    m[:, 0] = 0
    if hp is not None:
        pat = allowed(T, S, hp)
        for n in range(N):
            for i in range(T):
                if not (pat[i] & (m[n] == 0).numpy()).any():
                    m[n, int(np.argmax(pat[i]))] = 0
    return m


def main():
    if os.path.isdir(ROOT):
        shutil.rmtree(ROOT)
    for ci, case in enumerate(CASES):
        (name, dec, T, S, D, H, F, pre, B, padding, hp) = case
        torch.manual_seed(900 + ci)
        cls = nn.TransformerDecoderLayer if dec else nn.TransformerEncoderLayer
        # train() with dropout 0: PyTorch's plain path (its inference fast
        # path would take another route to the same numbers)
        m = cls(D, H, F, dropout=0.0, batch_first=True,
                norm_first=pre).double().train()
        g = torch.Generator().manual_seed(1000 + ci)
        with torch.no_grad():
            for k, p in m.named_parameters():
                if k.startswith("norm"):
                    p.add_(0.3 * torch.randn(p.shape, generator=g,
                                             dtype=torch.float64))
                p.copy_(f32(p))
        x = f32(torch.randn(B, T, D, generator=g, dtype=torch.float64))
        mem = f32(torch.randn(B, S, D, generator=g,
                              dtype=torch.float64)) if dec else None
        pat = allowed(T, T, hp)
        attn_mask = torch.from_numpy(~pat) if hp else None
        P = None
        if padding:
            P = pad_mask(g, B, S if dec else T, None if dec else hp, T)
        with torch.no_grad():
            if dec:
                y = m(x, mem, tgt_mask=attn_mask,
                      memory_key_padding_mask=None if P is None else P.bool())
            else:
                y = m(x, src_mask=attn_mask,
                      src_key_padding_mask=None if P is None else P.bool())
        assert not torch.isnan(y).any(), name
        state = collections.OrderedDict(
            ("layer." + k, v.float().numpy()) for k, v in m.state_dict().items())
        d = os.path.join(ROOT, name)
        os.makedirs(d)
        kind = "transformer_decoder_layer" if dec else "transformer_encoder_layer"
        body = {"nhead": H, "dim_feedforward": F}
        if pre:
            body["norm_first"] = True
        body.update(hp)
        ins = ["x"] + (["memory"] if dec else []) + (["pad"] if padding else [])
        with open(os.path.join(d, "model.yaml"), "w") as f:
            f.write("# %s (tools/gen_transformer_sparse_fixtures.py)\n" % name)
            f.write("inputs:\n  x: {shape: [%d, %d]}\n" % (T, D))
            if dec:
                f.write("  memory: {shape: [%d, %d]}\n" % (S, D))
            if padding:
                f.write("  pad: {shape: [%d], dtype: int}\n" % (S if dec else T))
            f.write("layers:\n  - name: layer\n    in: [%s]\n" % ", ".join(ins))
            f.write("    %s: {%s}\n" % (kind, ", ".join(
                "%s: %s" % (k, yaml_value(v)) for k, v in body.items())))
        dltools.write_safetensors(os.path.join(d, "model.safetensors"), state)
        arrays = [x] + ([mem] if dec else []) + ([P] if padding else [])
        write_npys(os.path.join(d, "in.npy"), arrays)
        write_npys(os.path.join(d, "out.npy"), [y])
        print(d)


if __name__ == "__main__":
    main()
