#!/usr/bin/python3
"""Writes the ONNX import fixtures of tests/import.sh for masks and
selections computed from the data (issue 34): for each small model written
as users write them, tests/data/onnx/NAME.onnx (torch.onnx.export, opset
14 to 17, dynamic batch, random weights from a fixed seed), NAME-input.npy
and NAME-expected.npy (PyTorch's outputs in float64 from the float32
weights, rounded once), as tools/gen_onnx_fixtures.py does.
Run with Debian's python3-torch: /usr/bin/python3 tools/gen_onnx_mask_fixtures.py
"""

import io
import math
import os
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_onnx_fixtures import randomize_norms, save_npy  # noqa: E402


class NanoGPTBlock(nn.Module):
    """nanoGPT's block: the causal mask a tril buffer, applied with
    masked_fill(bias[:, :, :T, :T] == 0, -inf) (Equal folded, Where on
    the data)."""

    def __init__(self, t=6, d=8, h=2):
        super().__init__()
        self.h = h
        self.ln_1 = nn.LayerNorm(d)
        self.c_attn = nn.Linear(d, 3 * d)
        self.c_proj = nn.Linear(d, d)
        self.ln_2 = nn.LayerNorm(d)
        self.fc = nn.Linear(d, 4 * d)
        self.proj = nn.Linear(4 * d, d)
        self.register_buffer("bias", torch.tril(torch.ones(t, t)).view(1, 1, t, t))

    def attn(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(C, dim=2)
        k = k.view(B, T, self.h, C // self.h).transpose(1, 2)
        q = q.view(B, T, self.h, C // self.h).transpose(1, 2)
        v = v.view(B, T, self.h, C // self.h).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.proj(F.gelu(self.fc(self.ln_2(x))))


class BertMask(nn.Module):
    """A BERT-style padding mask from the token ids: (ids != 0) (Not of
    Equal on integer data), unsqueezed, compared again (a Cast of the bool)
    and applied with masked_fill."""

    def __init__(self, vocab=11, d=8):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.q = nn.Linear(d, d)
        self.k = nn.Linear(d, d)

    def forward(self, ids):
        x = self.emb(ids)
        pad = (ids != 0)[:, None, :]
        att = self.q(x) @ self.k(x).transpose(1, 2) / math.sqrt(x.size(-1))
        att = att.masked_fill(pad == 0, float("-inf"))
        return F.softmax(att, -1) @ x


class SEBlock(nn.Module):
    """A squeeze-and-excitation block as SE-ResNets write it: the gate
    viewed to [b, c, 1, 1] and expand_as the input (Expand)."""

    def __init__(self, c=6, r=3):
        super().__init__()
        self.conv = nn.Conv2d(3, c, 3, padding=1)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc1 = nn.Linear(c, c // r)
        self.fc2 = nn.Linear(c // r, c)

    def forward(self, x):
        x = F.relu(self.conv(x))
        b, c, _, _ = x.size()
        y = self.pool(x).view(b, c)
        y = torch.sigmoid(self.fc2(F.relu(self.fc1(y)))).view(b, c, 1, 1)
        return x * y.expand_as(x)


class Masks(nn.Module):
    """Masks from the data: comparisons, not/and/or, where, triu/tril on
    the data, a bool mask as floats (Cast of a bool), a float mask as
    bools (Cast to bool), and a Where of constants that broadcast."""

    def forward(self, x):
        m = ((x > 0.1) & (x < 0.8)) | ~(x >= -0.5)
        y = torch.where(m, x, 2 * x) + (x <= 0).float()
        z = torch.triu(y, diagonal=1) + torch.tril(x, -1) * 0.5 + torch.triu(x)
        z = z.masked_fill(F.relu(x - 0.3).bool(), -1.5)
        # a band built from the sizes (folded at import, with broadcasting)
        r = torch.arange(x.size(-1))
        z = z + torch.where(r[:, None] > 2, r[None, :] * 0.5, -1.0)
        return z * (x == x.amax(-1, keepdim=True)).float() + z


class TopK(nn.Module):
    """A linear layer, then the top 3 scores and their indices (two
    outputs), as a decoder picks its candidates, the argmax (a third) and
    a greedy decoder's next input: the embedding of topk(1)'s index,
    squeezed to one per sample (a fourth)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(5, 9)
        self.emb = nn.Embedding(9, 4)

    def forward(self, x):
        v, i = torch.topk(self.fc(x), 3, dim=-1)
        lo, _ = torch.topk(x, 2, dim=1, largest=False)
        _, top = self.fc(x).topk(1)
        return v + lo.sum(-1, keepdim=True), i, self.fc(x).argmax(-1), self.emb(top.squeeze(-1))


class PointNet(nn.Module):
    """PointNet's segmentation head: shared MLPs as 1x1 conv1d, the global
    feature a max over the points (ReduceMax), repeated to every point
    (Tile), concatenated with the local features; min and sum pools too."""

    def __init__(self, p=7):
        super().__init__()
        self.p = p
        self.c1 = nn.Conv1d(3, 8, 1)
        self.c2 = nn.Conv1d(8, 16, 1)
        self.c3 = nn.Conv1d(8 + 16 + 16, 4, 1)

    def forward(self, x):
        f = F.relu(self.c1(x))
        g = self.c2(f)
        gmax = torch.max(g, 2, keepdim=True)[0]
        gmin = torch.amin(g, 2, keepdim=True) + g.sum(2, keepdim=True) * 0.1
        glob = (gmax + gmin).repeat(1, 1, self.p)
        return self.c3(torch.cat([f, g, glob], 1))


class Conv3d(nn.Module):
    """A tiny 3-D convolutional net: conv3d, batch norm, max and average
    3-D pools, a transposed 3-D convolution, global average pooling."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv3d(2, 4, 3, padding=1)
        self.bn = nn.BatchNorm3d(4)
        self.conv2 = nn.Conv3d(4, 6, (1, 3, 3), stride=(1, 2, 2), padding=(0, 1, 1))
        self.up = nn.ConvTranspose3d(6, 4, 2, stride=2)
        self.fc = nn.Linear(4, 3)

    def forward(self, x):
        x = self.bn(F.relu(self.conv1(x)))
        x = F.max_pool3d(x, 2)
        x = F.relu(self.conv2(x))
        x = F.avg_pool3d(self.up(x), (1, 2, 2))
        return self.fc(torch.flatten(F.adaptive_avg_pool3d(x, 1), 1))


# name: (class, per-sample input shape, batch, opset[, "int": token ids])
MODELS = {
    "nanogpt_mask": (NanoGPTBlock, (6, 8), 2, 14),
    "bert_mask": (BertMask, (6,), 2, 17, "int"),
    "se_expand": (SEBlock, (3, 5, 5), 2, 17),
    "data_masks": (Masks, (3, 5, 5), 2, 17),
    "topk": (TopK, (5,), 3, 15),
    "pointnet": (PointNet, (3, 7), 2, 16),
    "conv3d": (Conv3d, (2, 4, 6, 6), 2, 17),
}


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    out = os.path.normpath(os.path.join(here, "..", "tests", "data", "onnx"))
    os.makedirs(out, exist_ok=True)
    for name, (cls, shape, batch, opset, *kind) in MODELS.items():
        torch.manual_seed(0)
        model = cls().eval()
        g = torch.Generator().manual_seed(1)
        with torch.no_grad():
            randomize_norms(model, g)
            for m in model.modules():
                if isinstance(m, nn.BatchNorm3d):
                    m.running_mean.copy_(torch.randn(m.num_features, generator=g) * 0.2)
                    m.running_var.copy_(torch.rand(m.num_features, generator=g) + 0.5)
                    m.weight.data.copy_(torch.rand(m.num_features, generator=g) + 0.5)
                    m.bias.data.copy_(torch.randn(m.num_features, generator=g) * 0.1)
        if kind:
            # ids from 1, the padding (0) at the end of all but the first
            x = torch.randint(1, 11, (batch,) + shape, generator=g)
            for b in range(1, batch):
                x[b, shape[0] - 2 * b:] = 0
        else:
            x = torch.randn((batch,) + shape, generator=g)
        path = os.path.join(out, name + ".onnx")
        with torch.no_grad():
            y = model.double()(x if kind else x.double())
        ys = list(y) if isinstance(y, tuple) else [y]
        names = ["y%d" % i if i else "y" for i in range(len(ys))]
        model.float()
        torch.onnx.export(model, x, path, opset_version=opset,
                          input_names=["x"], output_names=names,
                          dynamic_axes=dict({"x": {0: "batch"}},
                                            **{n: {0: "batch"} for n in names}))
        save_npy(os.path.join(out, name + "-input.npy"),
                 x.numpy().astype(np.int64 if kind else np.float32))
        with open(os.path.join(out, name + "-expected.npy"), "wb") as f:
            for t in ys:
                buf = io.BytesIO()
                np.save(buf, t.float().numpy())
                f.write(buf.getvalue())


if __name__ == "__main__":
    main()
