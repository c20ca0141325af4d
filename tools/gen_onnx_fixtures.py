#!/usr/bin/python3
"""Writes the ONNX import fixtures of tests/import.sh: for each small model,
tests/data/onnx/NAME.onnx (torch.onnx.export, random weights from a fixed
seed), NAME-input.npy (a batch of 2 or 3) and NAME-expected.npy (PyTorch's
output for it, computed in float64 from the float32 weights and rounded
once). Re-running it reproduces the committed files.
Run with Debian's python3-torch: /usr/bin/python3 tools/gen_onnx_fixtures.py
"""

import io
import math
import os

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class SmallCNN(nn.Module):
    """conv, batch norm (folded by the exporter), relu, max pool, avg pool,
    flatten, linear, log_softmax."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 6, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(6)
        self.conv2 = nn.Conv2d(6, 8, 3, padding=(1, 0))
        self.bn2 = nn.BatchNorm1d(8 * 3 * 2)
        self.fc = nn.Linear(8 * 3 * 2, 5)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.avg_pool2d(F.leaky_relu(self.conv2(x), 0.2), 2, ceil_mode=True)
        x = torch.flatten(x, 1)
        return F.log_softmax(self.fc(self.bn2(x)), dim=1)


class Residual(nn.Module):
    """A ResNet basic block with a projection shortcut, then global average
    pooling and a classifier, as torchvision writes them."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(4, 8, 3, stride=2, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(8)
        self.down = nn.Sequential(nn.Conv2d(4, 8, 1, stride=2, bias=False),
                                  nn.BatchNorm2d(8))
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(8, 3)

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        y = F.relu(y + self.down(x))
        return self.fc(torch.flatten(self.pool(y), 1))


class Separable(nn.Module):
    """Depthwise-separable block with sigmoid gating (SiLU) and a
    squeeze-and-excitation product, as in EfficientNet; a transposed
    convolution; a tanh."""

    def __init__(self):
        super().__init__()
        self.dw = nn.Conv2d(6, 6, 3, padding=1, groups=6)
        self.pw = nn.Conv2d(6, 5, 1)
        self.se1 = nn.Conv2d(5, 2, 1)
        self.se2 = nn.Conv2d(2, 5, 1)
        self.up = nn.ConvTranspose2d(5, 3, 3, stride=2, padding=1,
                                     output_padding=1)

    def forward(self, x):
        x = F.silu(self.dw(x))
        x = self.pw(x)
        s = torch.sigmoid(self.se2(F.silu(self.se1(x.mean((2, 3), keepdim=True)))))
        x = x * s
        return torch.tanh(self.up(x))


class MLP(nn.Module):
    """Two layers with GELU (exported as Erf arithmetic), then softmax."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(10, 24)
        self.fc2 = nn.Linear(24, 7)

    def forward(self, x):
        return F.softmax(self.fc2(F.gelu(self.fc1(x))), dim=-1)


class MLPTanh(nn.Module):
    """GELU's tanh approximation (exported as Mul, Add and Tanh
    arithmetic), then sigmoid."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(9, 16)
        self.fc2 = nn.Linear(16, 5)

    def forward(self, x):
        return torch.sigmoid(self.fc2(F.gelu(self.fc1(x), approximate="tanh")))


class Pointwise(nn.Module):
    """Ops that map to the pointwise ops of dlrun (relu6, hardswish,
    hardsigmoid, clamp, elu, scale): ReLU6 and clamp are ONNX Clips,
    x * 2 + 1 scalar arithmetic."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 12)
        self.fc2 = nn.Linear(12, 12)
        self.fc3 = nn.Linear(12, 6)

    def forward(self, x):
        x = F.hardswish(self.fc1(x) * 3)
        x = F.relu6(self.fc2(x) * 4 + 1)
        x = torch.clamp(self.fc3(x) - 2, -1.5, 0.75)
        return F.elu(F.hardsigmoid(x * 5), alpha=0.5) / 3


class Norms(nn.Module):
    """Instance norms (ONNX InstanceNormalization) and a global max pool,
    which map to ops of the reductions' family (instance_norm2d,
    instance_norm1d, adaptive_max_pool2d)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.in2 = nn.InstanceNorm2d(4, affine=True)
        self.conv1 = nn.Conv1d(2, 3, 2)
        self.in1 = nn.InstanceNorm1d(3, eps=1e-3)

    def forward(self, x):
        y = self.in1(self.conv1(x[:, 0, :2, :]))
        x = self.in2(self.conv(x))
        return F.adaptive_max_pool2d(x, 1).flatten(1)[:, :3] + y.mean(2)


class TwoOut(nn.Module):
    """Two outputs, one of them also used inside (the logits and their
    softmax), written as two arrays per step."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 4)

    def forward(self, x):
        logits = self.fc(x)
        return logits, F.softmax(logits, dim=1)


class Block(nn.Module):
    """A transformer-ish block written with batch-safe reshapes: layer norm,
    one attention head set with matmuls and softmax, a residual, an MLP with
    GELU; then a token mean."""

    def __init__(self, d=12, h=3):
        super().__init__()
        self.h = h
        self.norm1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.norm2 = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, 2 * d)
        self.fc2 = nn.Linear(2 * d, d)

    def forward(self, x):
        n, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(d, dim=-1)
        q = q.reshape(n, t, self.h, d // self.h).transpose(1, 2)
        k = k.reshape(n, t, self.h, d // self.h).transpose(1, 2)
        v = v.reshape(n, t, self.h, d // self.h).transpose(1, 2)
        a = torch.softmax(q @ k.transpose(-2, -1), dim=-1) @ v
        x = x + self.proj(a.transpose(1, 2).reshape(n, t, d))
        x = x + self.fc2(F.gelu(self.fc1(self.norm2(x))))
        return x.mean(1)


class Embed(nn.Module):
    """Token ids -> embedding -> tanh -> linear on the flattened sequence."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(11, 4)
        self.fc = nn.Linear(5 * 4, 3)

    def forward(self, ids):
        return self.fc(torch.tanh(self.emb(ids)).flatten(1))


class Tagger(nn.Module):
    """An LSTM tagger: embedding, a two-layer LSTM (two ONNX LSTM nodes
    between the exporter's transposes), a linear layer per token."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(13, 6)
        self.lstm = nn.LSTM(6, 8, num_layers=2, batch_first=True)
        self.out = nn.Linear(8, 4)

    def forward(self, ids):
        return F.log_softmax(self.out(self.lstm(self.emb(ids))[0]), dim=-1)


class Recurrent(nn.Module):
    """An Elman RNN with ReLU, then a bidirectional GRU, a linear layer
    and the mean over time."""

    def __init__(self):
        super().__init__()
        self.rnn = nn.RNN(5, 4, nonlinearity="relu", batch_first=True)
        self.gru = nn.GRU(4, 6, bidirectional=True, batch_first=True)
        self.fc = nn.Linear(12, 3)

    def forward(self, x):
        return self.fc(self.gru(self.rnn(x)[0])[0]).mean(1)


def decorrelate(module, g):
    """Fresh random values for every parameter: nn.TransformerEncoder
    copies one layer, and the exporter would share equal initializers."""
    with torch.no_grad():
        for name, p in module.named_parameters():
            if name.endswith("norm1.weight") or name.endswith("norm2.weight"):
                p.copy_(torch.rand(p.shape, generator=g) + 0.5)
            else:
                p.copy_(torch.randn(p.shape, generator=g) * 0.3)


class Encoder(nn.Module):
    """A 2-layer nn.TransformerEncoder (batch first, d_model 12, 3 heads,
    post-norm, ReLU): the exporter's attention subgraph comes back as
    multihead_attention."""

    def __init__(self):
        super().__init__()
        layer = nn.TransformerEncoderLayer(12, 3, 20, dropout=0.0, batch_first=True)
        self.enc = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        decorrelate(self, torch.Generator().manual_seed(2))

    def forward(self, x):
        return self.enc(x)


class GPT(nn.Module):
    """A small GPT written as nanoGPT is: token and position embeddings
    (wpe of arange), pre-norm blocks of causal self attention
    (nn.MultiheadAttention with the causal attn_mask) and a GELU MLP, a
    final layer norm and the LM head."""

    def __init__(self, vocab=11, t=7, d=8, h=2, layers=2):
        super().__init__()
        self.t = t
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(t, d)
        self.ln1 = nn.ModuleList(nn.LayerNorm(d) for _ in range(layers))
        self.attn = nn.ModuleList(nn.MultiheadAttention(d, h, batch_first=True)
                                  for _ in range(layers))
        self.ln2 = nn.ModuleList(nn.LayerNorm(d) for _ in range(layers))
        self.mlp = nn.ModuleList(nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(),
                                               nn.Linear(4 * d, d))
                                 for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)
        self.register_buffer("mask", torch.triu(torch.full((t, t), float("-inf")), 1))
        decorrelate(self, torch.Generator().manual_seed(3))

    def forward(self, ids):
        x = self.wte(ids) + self.wpe(torch.arange(self.t))
        for ln1, attn, ln2, mlp in zip(self.ln1, self.attn, self.ln2, self.mlp):
            h = ln1(x)
            x = x + attn(h, h, h, attn_mask=self.mask, need_weights=False)[0]
            x = x + mlp(ln2(x))
        return self.lm_head(self.ln_f(x))


class Dense(nn.Module):
    """DenseNet's concatenations: torch.cat of one tensor (its first
    layer) and of six (more than four), then the spatial mean."""

    def __init__(self):
        super().__init__()
        self.convs = nn.ModuleList(nn.Conv2d(3 + 2 * i, 2, 3, padding=1) for i in range(5))

    def forward(self, x):
        feats = [x]
        for conv in self.convs:
            feats.append(F.relu(conv(torch.cat(feats, 1))))
        return torch.cat(feats, 1).mean((2, 3))


class LayerScale(nn.Module):
    """A ConvNeXt block: depthwise conv, layer norm channels last, an MLP,
    the learned per-channel scale (a constant operand [C, 1, 1], imported
    as a parameter entry) and the residual; then tables of constants
    subtracted from and dividing the data."""

    def __init__(self):
        super().__init__()
        self.dw = nn.Conv2d(4, 4, 3, padding=1, groups=4)
        self.norm = nn.LayerNorm(4)
        self.fc1 = nn.Linear(4, 8)
        self.fc2 = nn.Linear(8, 4)
        self.gamma = nn.Parameter(torch.rand(4, 1, 1) + 0.5)
        self.table = nn.Parameter(torch.randn(5))

    def forward(self, x):
        y = self.dw(x).permute(0, 2, 3, 1)
        y = self.fc2(F.gelu(self.fc1(self.norm(y)))).permute(0, 3, 1, 2)
        x = x + self.gamma * y
        return (self.table - x) / (self.table.abs() + 1)


class ClassToken(nn.Module):
    """ViT's class token: a learned [1, 1, D] expanded to the batch
    (x.expand(n, -1, -1), a parameter entry) and concatenated before the
    patches, learned positions added, the token read back with x[:, 0]."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Conv2d(3, 6, 2, stride=2)
        self.cls = nn.Parameter(torch.randn(1, 1, 6))
        self.pos = nn.Parameter(torch.randn(1, 5, 6))
        self.head = nn.Linear(6, 3)

    def forward(self, x):
        n = x.shape[0]
        t = self.proj(x).flatten(2).transpose(1, 2)
        t = torch.cat([self.cls.expand(n, -1, -1), t], 1) + self.pos
        return self.head(t[:, 0] + t.mean(1))


class WindowMask(nn.Module):
    """Swin's shape arithmetic, without its windows merged into the batch:
    the padding to a multiple of the window computed with % (Mod, folded)
    and applied by F.pad (whose pads the exporter reverses with a Slice of
    step -1 and transposes, folded), and the shifted windows' mask built by
    assigning to slices of zeros (ScatterND, folded): a constant added to
    the data, a parameter entry."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(2, 3, 1)

    def forward(self, x):
        x = self.conv(x)
        h, w = x.shape[-2:]
        x = F.pad(x, (0, (3 - w % 3) % 3, 0, (3 - h % 3) % 3))
        m = x.new_zeros((x.shape[2], x.shape[3]))
        cnt = 0
        for hs in (slice(0, -3), slice(-3, -1), slice(-1, None)):
            for ws in (slice(0, -3), slice(-3, -1), slice(-1, None)):
                m[hs, ws] = cnt
                cnt += 1
        return x + m


class Einsum(nn.Module):
    """MaxViT's attention products written with torch.einsum, batch first
    (per window group g): q k^T ('bgid,bgjd->bgij'), the weights times v,
    and the weights transposed ('bgji,bgjd->bgid'), imported as matmul
    and permute entries."""

    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(4, 12)

    def forward(self, x):
        q, k, v = self.qkv(x).chunk(3, -1)
        s = torch.einsum("bgid,bgjd->bgij", q, k).softmax(-1)
        return torch.einsum("bgij,bgjd->bgid", s, v) + torch.einsum("bgji,bgjd->bgid", s, v)


# name: (model, input shape per sample, batch, input kind[, opset])
MODELS = {
    "cnn": (SmallCNN, (3, 11, 11), 3, "float"),
    "residual": (Residual, (4, 7, 7), 2, "float"),
    "separable": (Separable, (6, 5, 5), 2, "float"),
    "mlp": (MLP, (10,), 3, "float"),
    "mlp_tanh": (MLPTanh, (9,), 2, "float"),
    "pointwise": (Pointwise, (8,), 4, "float"),
    "norms": (Norms, (3, 6, 7), 2, "float"),
    "two_outputs": (TwoOut, (6,), 3, "float"),
    "block": (Block, (5, 12), 2, "float"),
    "embed": (Embed, (5,), 3, "int"),
    # opset 14: the exporter writes layer norm out as ReduceMean, Sub, Pow,
    # Sqrt, Div, Mul and Add (recognised as layer_norm)
    "block14": (Block, (5, 12), 2, "float", 14),
    "tagger": (Tagger, (7,), 3, "int"),
    "recurrent": (Recurrent, (9, 5), 2, "float"),
    "encoder": (Encoder, (5, 12), 3, "float"),
    # opset 13: the layer norms written out too
    "gpt": (GPT, (7,), 2, "int", 13),
    "dense": (Dense, (3, 5, 5), 2, "float"),
    "layer_scale": (LayerScale, (4, 5, 5), 2, "float"),
    "class_token": (ClassToken, (3, 4, 4), 3, "float"),
    "window_mask": (WindowMask, (2, 5, 7), 2, "float"),
    "einsum": (Einsum, (2, 3, 4), 2, "float"),
}


def save_npy(path, a):
    buf = io.BytesIO()
    np.save(buf, a)
    with open(path, "wb") as f:
        f.write(buf.getvalue())


def randomize_norms(model, g):
    """Batch-norm statistics that are not the identity, so the folding the
    exporter does is exercised."""
    for m in model.modules():
        if isinstance(m, (nn.BatchNorm1d, nn.BatchNorm2d)):
            m.running_mean.copy_(torch.randn(m.num_features, generator=g) * 0.2)
            m.running_var.copy_(torch.rand(m.num_features, generator=g) + 0.5)
            m.weight.data.copy_(torch.rand(m.num_features, generator=g) + 0.5)
            m.bias.data.copy_(torch.randn(m.num_features, generator=g) * 0.1)
        if isinstance(m, nn.LayerNorm):
            m.weight.data.copy_(torch.rand(m.weight.shape, generator=g) + 0.5)
            m.bias.data.copy_(torch.randn(m.bias.shape, generator=g) * 0.1)


def bad_models(out):
    """ONNX files that dlrun import must refuse with one line, exit 2:
    tests/data/onnx/bad/NAME.onnx, made with python3-onnx's helpers."""
    from onnx import TensorProto, helper, numpy_helper

    def f32(name, shape):
        return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)

    def model(nodes, inputs, outputs, inits=(), opset=17):
        g = helper.make_graph(nodes, "bad", inputs, outputs, list(inits))
        m = helper.make_model(g, producer_name="gen_onnx_fixtures",
                              opset_imports=[helper.make_operatorsetid("", opset)])
        m.ir_version = 8
        return m

    w = numpy_helper.from_array(np.ones((4, 3), np.float32), "fc.weight")

    def short_tensor():
        t = TensorProto()
        t.name = "w"
        t.data_type = TensorProto.FLOAT
        t.dims.extend([4, 3])
        t.raw_data = np.ones(11, np.float32).tobytes()
        return t
    shape2 = numpy_helper.from_array(np.array([2, -1], np.int64), "shape")
    bad = {
        # two op types dlrun has no equivalent for, and one it has
        "unknown_ops": model(
            [helper.make_node("Relu", ["x"], ["a"], name="relu"),
             helper.make_node("NonMaxSuppression", ["a"], ["b"], name="nms"),
             helper.make_node("Size", ["b"], ["y"], name="size")],
            [f32("x", ["N", 3])], [f32("y", ["N", 3])]),
        # an unsupported op in a node without a name (exporters often
        # leave them out): named by its place and its output
        "unnamed_node": model(
            [helper.make_node("Relu", ["x"], ["a"]),
             helper.make_node("Size", ["a"], ["y"])],
            [f32("x", ["N", 3])], [f32("y", ["N", 3])]),
        # a size other than the batch that is dynamic
        "dynamic_dim": model(
            [helper.make_node("Relu", ["x"], ["y"], name="relu")],
            [f32("x", ["N", "T", 3])], [f32("y", ["N", "T", 3])]),
        # raw data shorter than the initializer's shape
        "init_size": model(
            [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")],
            [f32("x", ["N", 4])], [f32("y", ["N", 3])],
            [short_tensor()]),
        # an attribute without a dlrun equivalent
        "bad_attr": model(
            [helper.make_node("MaxPool", ["x"], ["y"], name="pool",
                              kernel_shape=[2, 2], storage_order=1)],
            [f32("x", ["N", 1, 4, 4])], [f32("y", ["N", 1, 2, 2])]),
        # an attribute dlrun import does not know
        "unknown_attr": model(
            [helper.make_node("Relu", ["x"], ["y"], name="relu", color=3)],
            [f32("x", ["N", 3])], [f32("y", ["N", 3])]),
        # a reshape that changes the batch dimension
        "reshape_batch": model(
            [helper.make_node("Reshape", ["x", "shape"], ["y"], name="reshape")],
            [f32("x", ["N", 6])], [f32("y", [2, "M"])], [shape2]),
        # shape arithmetic on the batch size (N * 2): cannot be folded
        "batch_arith": model(
            [helper.make_node("Shape", ["x"], ["s"], name="shape"),
             helper.make_node("Constant", [], ["two"], name="two",
                              value=numpy_helper.from_array(np.array([2, 1], np.int64))),
             helper.make_node("Div", ["s", "two"], ["t"], name="div"),
             helper.make_node("Reshape", ["x", "t"], ["y"], name="reshape")],
            [f32("x", ["N", 6])], [f32("y", ["M", 6])]),
        # the batch multiplied (Swin's windows folded into the batch)
        "batch_merge": model(
            [helper.make_node("Shape", ["x"], ["s"], name="shape"),
             helper.make_node("Constant", [], ["k"], name="k",
                              value=numpy_helper.from_array(np.array([4, 1], np.int64))),
             helper.make_node("Mul", ["s", "k"], ["t"], name="windows"),
             helper.make_node("Reshape", ["x", "t"], ["y"], name="reshape")],
            [f32("x", ["N", 6])], [f32("y", ["M", 6])]),
        # a transpose that moves the batch
        "transpose_batch": model(
            [helper.make_node("Transpose", ["x"], ["y"], name="t", perm=[1, 0])],
            [f32("x", ["N", 3])], [f32("y", [3, "N"])]),
        # Erf outside GELU's pattern
        "erf_alone": model(
            [helper.make_node("Erf", ["x"], ["y"], name="erf")],
            [f32("x", ["N", 3])], [f32("y", ["N", 3])]),
        # a constant operand with a batch of its own (constants of one
        # sample are parameter entries)
        "const_operand": model(
            [helper.make_node("Mul", ["x", "k"], ["y"], name="mul")],
            [f32("x", ["N", 4, 3])], [f32("y", ["N", 4, 3])],
            [numpy_helper.from_array(np.ones((2, 4, 3), np.float32), "k")]),
        # a node input that nothing defines
        "undefined_input": model(
            [helper.make_node("Relu", ["nope"], ["y"], name="relu")],
            [f32("x", ["N", 3])], [f32("y", ["N", 3])]),
        # an Einsum that is not a batched matrix product (a trace)
        "einsum_trace": model(
            [helper.make_node("Einsum", ["x"], ["y"], name="trace", equation="bii->bi")],
            [f32("x", ["N", 3, 3])], [f32("y", ["N", 3])]),
        # an opset older than dlrun import reads
        "old_opset": model(
            [helper.make_node("Relu", ["x"], ["y"], name="relu")],
            [f32("x", ["N", 3])], [f32("y", ["N", 3])], opset=5),
    }
    # an initializer whose data is in another file
    ext = numpy_helper.from_array(np.ones((4, 3), np.float32), "w")
    ext.ClearField("raw_data")
    ext.data_location = TensorProto.EXTERNAL
    kv = ext.external_data.add()
    kv.key, kv.value = "location", "w.bin"
    bad["external_data"] = model(
        [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")],
        [f32("x", ["N", 4])], [f32("y", ["N", 3])], [ext])
    # a graph that declares no outputs
    bad["no_outputs"] = model(
        [helper.make_node("Relu", ["x"], ["y"], name="relu")],
        [f32("x", ["N", 3])], [])
    # an opset newer than dlrun import reads
    bad["new_opset"] = model(
        [helper.make_node("Relu", ["x"], ["y"], name="relu")],
        [f32("x", ["N", 3])], [f32("y", ["N", 3])], opset=30)
    # a node without an op type
    m = model([helper.make_node("Relu", ["x"], ["y"], name="relu")],
              [f32("x", ["N", 3])], [f32("y", ["N", 3])])
    m.graph.node[0].ClearField("op_type")
    bad["no_op_type"] = m
    os.makedirs(out, exist_ok=True)
    for name, m in bad.items():
        with open(os.path.join(out, name + ".onnx"), "wb") as f:
            f.write(m.SerializeToString())


class BandAttention(nn.Module):
    """nn.MultiheadAttention with a constant mask that is not the causal
    one: dlrun has no op for a learned constant, so no import."""

    def __init__(self):
        super().__init__()
        self.attn = nn.MultiheadAttention(8, 2, batch_first=True)
        band = torch.ones(5, 5).triu(2).bool() | torch.ones(5, 5).tril(-2).bool()
        self.register_buffer("mask", torch.zeros(5, 5).masked_fill(band, float("-inf")))

    def forward(self, x):
        return self.attn(x, x, x, attn_mask=self.mask, need_weights=False)[0]


def bad_attention(out):
    """tests/data/onnx/bad/attn_mask.onnx: attention that is not
    multihead_attention's (a banded mask)."""
    torch.manual_seed(0)
    torch.onnx.export(BandAttention().eval(), torch.randn(2, 5, 8),
                      os.path.join(out, "attn_mask.onnx"), opset_version=17,
                      input_names=["x"], output_names=["y"],
                      dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}})


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    out = os.path.normpath(os.path.join(here, "..", "tests", "data", "onnx"))
    os.makedirs(out, exist_ok=True)
    for name, (cls, shape, batch, kind, *opset) in MODELS.items():
        torch.manual_seed(0)
        model = cls().eval()
        g = torch.Generator().manual_seed(1)
        with torch.no_grad():
            randomize_norms(model, g)
        if kind == "int":
            x = torch.randint(0, 11, (batch,) + shape, generator=g)  # < 11 and 13
        else:
            x = torch.randn((batch,) + shape, generator=g)
        path = os.path.join(out, name + ".onnx")
        with torch.no_grad():
            y = model.double()(x if kind == "int" else x.double())
        ys = list(y) if isinstance(y, tuple) else [y]
        names = ["y%d" % i if i else "y" for i in range(len(ys))]
        model.float()
        torch.onnx.export(model, x, path, opset_version=opset[0] if opset else 17,
                          input_names=["x"], output_names=names,
                          dynamic_axes=dict({"x": {0: "batch"}},
                                            **{n: {0: "batch"} for n in names}))
        save_npy(os.path.join(out, name + "-input.npy"),
                 x.numpy().astype(np.int64 if kind == "int" else np.float32))
        with open(os.path.join(out, name + "-expected.npy"), "wb") as f:
            for t in ys:
                buf = io.BytesIO()
                np.save(buf, t.float().numpy())
                f.write(buf.getvalue())
    bad_models(os.path.join(out, "bad"))
    bad_attention(os.path.join(out, "bad"))


if __name__ == "__main__":
    main()
