#!/usr/bin/python3
"""Writes the model zoo, models/zoo/: one small model per architecture of
the catalogue, each as

  NAME.yaml             the model description
  NAME.safetensors      its weights (drawn here, see redraw())
  NAME-input.npy        a batch of inputs, one array per model input, back
                        to back in the order of `inputs:`
  NAME-expected.npy     the expected output: PyTorch's, computed in float64
                        on the float32 weights and inputs by a PyTorch
                        counterpart written below (torch.nn modules where
                        PyTorch has the layer, torch functions where it has
                        none), rounded once; for the relu selection networks
                        the formula where(c, a, b) itself (exact)
  NAME.svg              its picture, from `dlrun draw`

and models/zoo/README.md, the table (with the relu selection error table
measured by tools/relu_select.py through dlrun). tests/zoo.sh checks each
model against its expected output, trains it one step and re-draws its
picture; `make images` re-draws the pictures alone.

The parameter keys come from `dlrun init` (so the file has exactly the keys
dlrun expects); their values are then drawn here from a generator seeded by
the model and key names, so the output is byte-stable.

Run from the top of a built tree with Debian's python3-torch:
  /usr/bin/python3 tools/gen_zoo.py [--dlrun src/dlrun]
"""

import argparse
import collections
import math
import os
import subprocess
import sys
import tempfile
import textwrap
import zlib

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import dltools  # noqa: E402
import relu_select  # noqa: E402
from gen_attention_fixtures import causal_dconv  # noqa: E402
from gen_attention_opts_fixtures import ref_core  # noqa: E402
from gen_example_models import LENET5, lenet5 as torch_lenet5  # noqa: E402
from gen_gating_fixtures import graph_conv, highway, spatial_gating  # noqa: E402
from gen_recurrent_fixtures import decoder_ref  # noqa: E402
from gen_train_parity import npy_any, write  # noqa: E402

ROOT = os.path.normpath(os.path.join(HERE, ".."))
ZOO = os.path.join(ROOT, "models", "zoo")
D64 = torch.float64

MODELS = []

Model = collections.namedtuple(
    "Model", "name arch paper shows yaml inputs ref source weights")


def model(name, arch, paper, shows, yaml, inputs, source="PyTorch",
          weights=None):
    """Registers a model; inputs is a list of (name, kind, shape) with kind
    float, int:V (token ids below V) or adj (a symmetric 0/1 adjacency
    without self-loops); the decorated function maps (P, inputs) to the
    output (float64 tensors, P keyed by parameter name)."""
    def register(fn):
        MODELS.append(Model(name, arch, paper, shows, yaml, inputs, fn, source,
                            weights))
        return fn
    return register


# ---- helpers of the PyTorch counterparts ----

def sub(P, prefix):
    return {k[len(prefix):]: v for k, v in P.items() if k.startswith(prefix)}


def load(mod, P, prefix):
    mod = mod.double()
    mod.load_state_dict(sub(P, prefix))
    return mod.eval()


def lin(x, P, k):
    return F.linear(x, P[k + ".weight"], P.get(k + ".bias"))


def conv(x, P, k, **kw):
    return F.conv2d(x, P[k + ".weight"], P.get(k + ".bias"), **kw)


def bn(x, P, k):
    return F.batch_norm(x, P[k + ".running_mean"], P[k + ".running_var"],
                        P[k + ".weight"], P[k + ".bias"], False, 0.0, 1e-5)


def ln(x, P, k):
    return F.layer_norm(x, x.shape[-1:], P[k + ".weight"], P[k + ".bias"],
                        1e-5)


def mha(x, P, k, H, **hp):
    """multihead_attention on one input, with dlrun's sparse patterns,
    relative positions and dconv (nn.MultiheadAttention's math, the mask of
    the pattern built by gen_attention_opts_fixtures.allowed)."""
    p = sub(P, k + ".")
    N, T, E = x.shape
    Wq, Wk, Wv = p["in_proj_weight"].chunk(3)
    bq, bk, bv = p["in_proj_bias"].chunk(3)
    Q, K, V = x @ Wq.T + bq, x @ Wk.T + bk, x @ Wv.T + bv
    if hp.get("dconv"):
        Q = causal_dconv(Q, p["q_dconv.weight"], p["q_dconv.bias"])
        K = causal_dconv(K, p["k_dconv.weight"], p["k_dconv.bias"])
        V = causal_dconv(V, p["v_dconv.weight"], p["v_dconv.bias"])
    d = E // H
    heads = [t.view(N, T, H, d).transpose(1, 2) for t in (Q, K, V)]
    o = ref_core(*heads, hp, p).transpose(1, 2).reshape(N, T, E)
    return o @ p["out_proj.weight"].T + p["out_proj.bias"]


def plain_mha(x, P, k, H, causal=False):
    """nn.MultiheadAttention itself"""
    m = load(nn.MultiheadAttention(x.shape[-1], H, batch_first=True), P,
             k + ".")
    T = x.shape[1]
    mask = (torch.triu(torch.ones(T, T, dtype=torch.bool), 1) if causal
            else None)
    return m(x, x, x, attn_mask=mask, need_weights=False)[0]


# ---- feed-forward and gating ----

@model("ffn", "Feed-forward network (multilayer perceptron)",
       "Rumelhart, Hinton, Williams 1986",
       "linear layers and ReLUs, one vector in, class scores out",
       """\
inputs:
  x: {shape: [8]}
layers:
  - linear: {out_features: 16}
  - relu
  - linear: {out_features: 16}
  - relu
  - linear: {out_features: 3}
""", [("x", "float", [8])])
def _ffn(P, x):
    h = F.relu(lin(x, P, "0"))
    return lin(F.relu(lin(h, P, "2")), P, "4")


@model("highway", "Highway network", "Srivastava, Greff, Schmidhuber 2015",
       "two `highway` layers (y = H(x) T(x) + x (1 - T(x))) in a `repeat`",
       """\
inputs:
  x: {shape: [6]}
layers:
  - repeat:
      times: 2
      body: [highway: {}]
  - linear: {out_features: 3}
""", [("x", "float", [6])])
def _highway(P, x):
    for i in range(2):
        x = highway(x, P, "0.%d.0." % i, "relu")
    return lin(x, P, "1")


@model("moe", "Sparsely-gated mixture of experts",
       "Shazeer et al. 2017",
       "top-2 of 4 experts per token, each expert a small FFN written as entries",
       """\
inputs:
  x: {shape: [4, 6]}
layers:
  - name: moe
    mixture_of_experts:
      num_experts: 4
      k: 2
      expert: [linear: {out_features: 12}, relu, linear: {out_features: 6}]
  - linear: {out_features: 3}
""", [("x", "float", [4, 6])])
def _moe(P, x):
    logits = x @ P["moe.gate.weight"].T                  # [N, T, E]
    top, idx = logits.topk(2, dim=-1)
    w = torch.softmax(top, dim=-1)
    y = torch.zeros_like(x)
    for e in range(4):
        k = "moe.experts.%d." % e
        out = lin(F.relu(lin(x, P, k + "0")), P, k + "2")
        gate = (w * (idx == e)).sum(-1, keepdim=True)
        y = y + gate * out
    return lin(y, P, "1")


@model("gmlp", "gMLP block", "Liu, Dai, So, Le 2021",
       "`spatial_gating` (a learned [T, T] mixing of half the channels) in a pre-norm residual",
       """\
inputs:
  x: {shape: [5, 6]}
layers:
  - residual:
      - layer_norm
      - linear: {out_features: 16}
      - gelu
      - spatial_gating: {norm: true}
      - linear: {out_features: 6}
  - linear: {out_features: 3}
""", [("x", "float", [5, 6])])
def _gmlp(P, x):
    h = F.gelu(lin(ln(x, P, "0.0"), P, "0.1"))
    h = lin(spatial_gating(h, P, "0.3.", True), P, "0.4")
    return lin(x + h, P, "1")


# ---- recurrent ----

@model("rnn", "Recurrent network (Elman)", "Elman 1990",
       "`rnn` (tanh) over 5 steps, its last hidden state to a linear layer",
       """\
inputs:
  x: {shape: [5, 4]}
layers:
  - rnn: {hidden_size: 6, output: last}
  - linear: {out_features: 3}
""", [("x", "float", [5, 4])])
def _rnn(P, x):
    _, h = load(nn.RNN(4, 6, batch_first=True), P, "0.")(x)
    return lin(h[-1], P, "1")


@model("birnn", "Bidirectional recurrent network",
       "Schuster, Paliwal 1997",
       "`rnn` with `bidirectional: true`: forward and backward states per step",
       """\
inputs:
  x: {shape: [5, 4]}
layers:
  - rnn: {hidden_size: 5, bidirectional: true}
  - linear: {out_features: 3}
""", [("x", "float", [5, 4])])
def _birnn(P, x):
    y, _ = load(nn.RNN(4, 5, batch_first=True, bidirectional=True), P,
                "0.")(x)
    return lin(y, P, "1")


@model("lstm", "Long short-term memory", "Hochreiter, Schmidhuber 1997",
       "a two-layer `lstm`, the last layer's final state classified",
       """\
inputs:
  x: {shape: [6, 4]}
layers:
  - lstm: {hidden_size: 6, num_layers: 2, output: last}
  - linear: {out_features: 3}
""", [("x", "float", [6, 4])])
def _lstm(P, x):
    _, (h, _) = load(nn.LSTM(4, 6, num_layers=2, batch_first=True), P,
                     "0.")(x)
    return lin(h[-1], P, "1")


@model("gru-seq2seq", "GRU encoder-decoder", "Cho et al. 2014",
       "a two-layer `gru` encoder whose `output: state` (h_n of both layers) starts the decoder",
       """\
inputs:
  src: {shape: [5, 4]}
  tgt: {shape: [4, 3]}
layers:
  - name: encoder
    in: src
    gru: {hidden_size: 6, num_layers: 2, output: state}
  - name: decoder
    in: [tgt, encoder]
    gru: {hidden_size: 6, num_layers: 2}
  - name: out
    linear: {out_features: 5}
""", [("src", "float", [5, 4]), ("tgt", "float", [4, 3])])
def _gru_seq2seq(P, src, tgt):
    _, h = load(nn.GRU(4, 6, num_layers=2, batch_first=True), P,
                "encoder.")(src)
    y, _ = load(nn.GRU(3, 6, num_layers=2, batch_first=True), P,
                "decoder.")(tgt, h)
    return lin(y, P, "out")


@model("bahdanau", "Encoder-decoder with additive attention",
       "Bahdanau, Cho, Bengio 2015",
       "a bidirectional `gru` encoder and an `attention_decoder` whose GRU cell reads [x_t; context_t]",
       """\
inputs:
  src: {shape: [6, 4]}
  tgt: {shape: [5, 3]}
layers:
  - name: encoder
    in: src
    gru: {hidden_size: 4, bidirectional: true}
  - name: decoder
    in: [tgt, encoder]
    attention_decoder: {hidden_size: 5, attention_size: 6}
  - name: out
    linear: {out_features: 4}
""", [("src", "float", [6, 4]), ("tgt", "float", [5, 3])])
def _bahdanau(P, src, tgt):
    mem, _ = load(nn.GRU(4, 4, batch_first=True, bidirectional=True), P,
                  "encoder.")(src)
    cell = load(nn.GRUCell(3 + 8, 5), P, "decoder.cell.")
    p = sub(P, "decoder.")
    y = decoder_ref("gru", "additive", "sequence", tgt, mem, None, None,
                    cell, p)
    return lin(y, P, "out")


# ---- convolutional ----

@model("kim-cnn", "Convolutional network for sentence classification",
       "Kim 2014",
       "token ids, an `embedding`, three parallel `conv1d` widths max-pooled over time and concatenated",
       """\
inputs:
  tokens: {shape: [10], dtype: int}
layers:
  - name: embed
    embedding: {num_embeddings: 20, embedding_dim: 6}
  - name: channels
    transpose: {dim0: 1, dim1: 2}
  - name: width3
    in: channels
    sequential: [conv1d: {out_channels: 4, kernel_size: 3}, relu,
                 adaptive_max_pool1d: {output_size: 1}, flatten]
  - name: width4
    in: channels
    sequential: [conv1d: {out_channels: 4, kernel_size: 4}, relu,
                 adaptive_max_pool1d: {output_size: 1}, flatten]
  - name: width5
    in: channels
    sequential: [conv1d: {out_channels: 4, kernel_size: 5}, relu,
                 adaptive_max_pool1d: {output_size: 1}, flatten]
  - name: features
    in: [width3, width4, width5]
    concat: {dim: 1}
  - dropout: {p: 0.5}
  - name: fc
    linear: {out_features: 2}
""", [("tokens", "int:20", [10])])
def _kim(P, tok):
    e = F.embedding(tok, P["embed.weight"]).transpose(1, 2)
    fs = []
    for w in (3, 4, 5):
        k = "width%d.0" % w
        c = F.relu(F.conv1d(e, P[k + ".weight"], P[k + ".bias"]))
        fs.append(c.amax(-1))
    return lin(torch.cat(fs, 1), P, "fc")


@model("conv1x1", "1x1 convolutions (network in network)",
       "Lin, Chen, Yan 2014",
       "`conv2d` with `kernel_size: 1` mixing channels per pixel, global average pooling",
       """\
inputs:
  x: {shape: [3, 6, 6]}
layers:
  - conv2d: {out_channels: 8, kernel_size: 3, padding: 1}
  - relu
  - conv2d: {out_channels: 4, kernel_size: 1}
  - relu
  - conv2d: {out_channels: 2, kernel_size: 1}
  - adaptive_avg_pool2d: {output_size: 1}
  - flatten
""", [("x", "float", [3, 6, 6])])
def _conv1x1(P, x):
    h = F.relu(conv(x, P, "0", padding=1))
    h = conv(F.relu(conv(h, P, "2")), P, "4")
    return h.mean((2, 3))


@model("depthwise-separable", "Depthwise separable convolution",
       "Chollet 2017; Howard et al. 2017 (MobileNets)",
       "a depthwise `conv2d` (`groups` = channels) then a pointwise one, each with batch norm",
       """\
inputs:
  x: {shape: [4, 7, 7]}
layers:
  - conv2d: {out_channels: 4, kernel_size: 3, padding: 1, groups: 4, bias: false}
  - batch_norm2d
  - relu
  - conv2d: {out_channels: 8, kernel_size: 1, bias: false}
  - batch_norm2d
  - relu
""", [("x", "float", [4, 7, 7])])
def _dws(P, x):
    h = F.relu(bn(conv(x, P, "0", padding=1, groups=4), P, "1"))
    return F.relu(bn(conv(h, P, "3"), P, "4"))


@model("resnet-block", "ResNet basic block", "He, Zhang, Ren, Sun 2016",
       "`residual` with an identity shortcut around two 3x3 convolutions",
       """\
inputs:
  x: {shape: [4, 6, 6]}
layers:
  - residual:
      - conv2d: {out_channels: 4, kernel_size: 3, padding: 1, bias: false}
      - batch_norm2d
      - relu
      - conv2d: {out_channels: 4, kernel_size: 3, padding: 1, bias: false}
      - batch_norm2d
  - relu
""", [("x", "float", [4, 6, 6])])
def _resnet(P, x):
    h = F.relu(bn(conv(x, P, "0.0", padding=1), P, "0.1"))
    h = bn(conv(h, P, "0.3", padding=1), P, "0.4")
    return F.relu(x + h)


@model("resnext", "ResNeXt block", "Xie, Girshick, Dollar, Tu, He 2017",
       "a bottleneck whose 3x3 convolution has cardinality 4 (`groups: 4`)",
       """\
inputs:
  x: {shape: [8, 5, 5]}
layers:
  - residual:
      - conv2d: {out_channels: 8, kernel_size: 1, bias: false}
      - batch_norm2d
      - relu
      - conv2d: {out_channels: 8, kernel_size: 3, padding: 1, groups: 4, bias: false}
      - batch_norm2d
      - relu
      - conv2d: {out_channels: 8, kernel_size: 1, bias: false}
      - batch_norm2d
  - relu
""", [("x", "float", [8, 5, 5])])
def _resnext(P, x):
    h = F.relu(bn(conv(x, P, "0.0"), P, "0.1"))
    h = F.relu(bn(conv(h, P, "0.3", padding=1, groups=4), P, "0.4"))
    h = bn(conv(h, P, "0.6"), P, "0.7")
    return F.relu(x + h)


@model("densenet", "DenseNet block", "Huang, Liu, van der Maaten, Weinberger 2017",
       "each layer's output concatenated to all earlier ones (`concat` skips), then a transition",
       """\
inputs:
  x: {shape: [4, 6, 6]}
layers:
  - name: layer1
    sequential: [batch_norm2d, relu,
                 conv2d: {out_channels: 3, kernel_size: 3, padding: 1, bias: false}]
  - name: cat1
    in: [x, layer1]
    concat: {dim: 1}
  - name: layer2
    sequential: [batch_norm2d, relu,
                 conv2d: {out_channels: 3, kernel_size: 3, padding: 1, bias: false}]
  - name: cat2
    in: [cat1, layer2]
    concat: {dim: 1}
  - name: transition
    sequential: [batch_norm2d, relu,
                 conv2d: {out_channels: 5, kernel_size: 1, bias: false},
                 avg_pool2d: {kernel_size: 2}]
""", [("x", "float", [4, 6, 6])])
def _densenet(P, x):
    def layer(h, k, pad):
        return conv(F.relu(bn(h, P, k + ".0")), P, k + ".2", padding=pad)
    c1 = torch.cat([x, layer(x, "layer1", 1)], 1)
    c2 = torch.cat([c1, layer(c1, "layer2", 1)], 1)
    return F.avg_pool2d(layer(c2, "transition", 0), 2)


@model("unet", "U-Net", "Ronneberger, Fischer, Brox 2015",
       "an encoder, a `conv_transpose2d` up-sampling and the skip `concat`, per-pixel scores",
       """\
inputs:
  x: {shape: [2, 8, 8]}
layers:
  - name: enc
    sequential: [conv2d: {out_channels: 4, kernel_size: 3, padding: 1}, relu]
  - max_pool2d: {kernel_size: 2}
  - name: mid
    sequential: [conv2d: {out_channels: 8, kernel_size: 3, padding: 1}, relu]
  - name: up
    conv_transpose2d: {out_channels: 4, kernel_size: 2, stride: 2}
  - name: skip
    in: [enc, up]
    concat: {dim: 1}
  - name: dec
    sequential: [conv2d: {out_channels: 4, kernel_size: 3, padding: 1}, relu]
  - name: head
    conv2d: {out_channels: 2, kernel_size: 1}
""", [("x", "float", [2, 8, 8])])
def _unet(P, x):
    e = F.relu(conv(x, P, "enc.0", padding=1))
    m = F.relu(conv(F.max_pool2d(e, 2), P, "mid.0", padding=1))
    u = F.conv_transpose2d(m, P["up.weight"], P["up.bias"], stride=2)
    d = F.relu(conv(torch.cat([e, u], 1), P, "dec.0", padding=1))
    return conv(d, P, "head")


@model("mbconv-se", "EfficientNet MBConv block with squeeze-excitation",
       "Tan, Le 2019; Hu, Shen, Sun 2018 (SE)",
       "expand, depthwise, squeeze-excitation (`mul` by a pooled gate), project, in a `residual`",
       """\
inputs:
  x: {shape: [4, 6, 6]}
layers:
  - residual:
      - name: expand
        conv2d: {out_channels: 16, kernel_size: 1, bias: false}
      - name: bn0
        batch_norm2d: {}
      - silu
      - name: depthwise
        conv2d: {out_channels: 16, kernel_size: 3, padding: 1, groups: 16, bias: false}
      - name: bn1
        batch_norm2d: {}
      - name: act
        silu: {}
      - name: se
        sequential: [adaptive_avg_pool2d: {output_size: 1},
                     conv2d: {out_channels: 2, kernel_size: 1}, silu,
                     conv2d: {out_channels: 16, kernel_size: 1}, sigmoid]
      - in: [act, se]
        mul: {}
      - name: project
        conv2d: {out_channels: 4, kernel_size: 1, bias: false}
      - name: bn2
        batch_norm2d: {}
""", [("x", "float", [4, 6, 6])])
def _mbconv(P, x):
    h = F.silu(bn(conv(x, P, "0.expand"), P, "0.bn0"))
    h = F.silu(bn(conv(h, P, "0.depthwise", padding=1, groups=16), P,
                  "0.bn1"))
    s = h.mean((2, 3), keepdim=True)
    s = torch.sigmoid(conv(F.silu(conv(s, P, "0.se.1")), P, "0.se.3"))
    h = bn(conv(h * s, P, "0.project"), P, "0.bn2")
    return x + h


# ---- graphs ----

@model("gcn", "Graph convolutional network", "Kipf, Welling 2017",
       "two `graph_conv` layers on node features and a per-sample adjacency",
       """\
inputs:
  x: {shape: [5, 4]}
  adj: {shape: [5, 5]}
layers:
  - name: gc1
    in: [x, adj]
    graph_conv: {out_features: 8}
  - relu
  - name: gc2
    in: [_, adj]
    graph_conv: {out_features: 3}
""", [("x", "float", [5, 4]), ("adj", "adj", [5, 5])])
def _gcn(P, x, a):
    h = F.relu(graph_conv(x, a, P, "gc1."))
    return graph_conv(h, a, P, "gc2.")


@model("gae", "Graph autoencoder", "Kipf, Welling 2016",
       "a GCN encoder and the inner-product decoder sigmoid(Z Z^T) (`transpose`, `matmul`)",
       """\
inputs:
  x: {shape: [6, 4]}
  adj: {shape: [6, 6]}
layers:
  - name: gc1
    in: [x, adj]
    graph_conv: {out_features: 8}
  - relu
  - name: z
    in: [_, adj]
    graph_conv: {out_features: 4}
  - name: zt
    transpose: {dim0: 1, dim1: 2}
  - name: logits
    in: [z, zt]
    matmul: {}
  - sigmoid
""", [("x", "float", [6, 4]), ("adj", "adj", [6, 6])])
def _gae(P, x, a):
    z = graph_conv(F.relu(graph_conv(x, a, P, "gc1.")), a, P, "z.")
    return torch.sigmoid(z @ z.transpose(1, 2))


@model("st-gcn", "Spatio-temporal graph convolution", "Yan, Xiong, Lin 2018",
       "`graph_conv` on [N, T, V, F] (every time step shares the graph), then a temporal `conv2d` of width 3",
       """\
inputs:
  x: {shape: [4, 5, 3]}       # [T, V, F]
  adj: {shape: [5, 5]}
layers:
  - name: gcn
    in: [x, adj]
    graph_conv: {out_features: 6}
  - relu
  - permute: {dims: [0, 3, 2, 1]}
  - name: tcn
    conv2d: {out_channels: 6, kernel_size: [1, 3], padding: [0, 1]}
  - relu
""", [("x", "float", [4, 5, 3]), ("adj", "adj", [5, 5])])
def _stgcn(P, x, a):
    h = F.relu(graph_conv(x, a.unsqueeze(1), P, "gcn."))   # [N, T, V, 6]
    h = h.permute(0, 3, 2, 1)
    return F.relu(conv(h, P, "tcn", padding=(0, 1)))


@model("recurrent-gnn", "Recurrent graph network (shared weights)",
       "Scarselli et al. 2009; Li et al. 2016",
       "one `graph_conv` + tanh step applied 3 times with one set of weights (`repeat` `shared: true`)",
       """\
inputs:
  x: {shape: [5, 4]}
  adj: {shape: [5, 5]}
layers:
  - name: embed
    in: x
    linear: {out_features: 6}
  - name: propagate
    repeat:
      times: 3
      shared: true
      body:
        - in: [_, adj]
          graph_conv: {out_features: 6}
        - tanh
  - name: readout
    linear: {out_features: 2}
""", [("x", "float", [5, 4]), ("adj", "adj", [5, 5])])
def _rgnn(P, x, a):
    h = lin(x, P, "embed")
    for _ in range(3):
        h = torch.tanh(graph_conv(h, a, P, "propagate.0.0."))
    return lin(h, P, "readout")


# ---- attention ----

@model("self-attention", "Self-attention", "Vaswani et al. 2017; Cheng, Dong, Lapata 2016",
       "query, key and value projections into the parameter-free `attention` (scaled dot product)",
       """\
inputs:
  x: {shape: [5, 6]}
layers:
  - name: q
    in: x
    linear: {out_features: 6}
  - name: k
    in: x
    linear: {out_features: 6}
  - name: v
    in: x
    linear: {out_features: 6}
  - name: att
    in: [q, k, v]
    attention: {}
""", [("x", "float", [5, 6])])
def _self_att(P, x):
    q, k, v = (lin(x, P, n) for n in "qkv")
    a = torch.softmax(q @ k.transpose(1, 2) / math.sqrt(6), dim=-1)
    return a @ v


@model("multihead-attention", "Multi-head attention", "Vaswani et al. 2017",
       "`multihead_attention` with 2 heads, PyTorch's parameters",
       """\
inputs:
  x: {shape: [6, 8]}
layers:
  - multihead_attention: {num_heads: 2}
""", [("x", "float", [6, 8])])
def _mha(P, x):
    return plain_mha(x, P, "0", 2)


@model("transformer", "Transformer encoder-decoder", "Vaswani et al. 2017",
       "two `transformer_encoder_layer`s (`repeat`) and a causal `transformer_decoder_layer` reading the memory",
       """\
inputs:
  src: {shape: [5, 8]}
  tgt: {shape: [4, 8]}
layers:
  - name: encoder
    in: src
    repeat:
      times: 2
      body: [transformer_encoder_layer: {nhead: 2, dim_feedforward: 16}]
  - name: decoder
    in: [tgt, encoder]
    transformer_decoder_layer: {nhead: 2, dim_feedforward: 16, causal: true}
  - name: out
    linear: {out_features: 5}
""", [("src", "float", [5, 8]), ("tgt", "float", [4, 8])])
def _transformer(P, src, tgt):
    m = src
    for i in range(2):
        layer = load(nn.TransformerEncoderLayer(8, 2, 16, batch_first=True),
                     P, "encoder.%d.0." % i)
        m = layer(m)
    dec = load(nn.TransformerDecoderLayer(8, 2, 16, batch_first=True), P,
               "decoder.")
    T = tgt.shape[1]
    mask = torch.triu(torch.full((T, T), float("-inf"), dtype=D64), 1)
    return lin(dec(tgt, m, tgt_mask=mask), P, "out")


@model("gpt", "GPT decoder", "Radford et al. 2018",
       "token and learned position embeddings (`parameter`), pre-norm causal blocks, an LM head tied to the embedding (`share`)",
       """\
inputs:
  idx: {shape: [8], dtype: int}
layers:
  - name: wte
    embedding: {num_embeddings: 16, embedding_dim: 8}
  - name: pos
    parameter: {shape: [8, 8]}
  - name: h
    in: [wte, pos]
    add: {}
  - name: blocks
    repeat:
      times: 2
      body:
        - residual: [layer_norm, multihead_attention: {num_heads: 2, causal: true}]
        - residual: [layer_norm, linear: {out_features: 32}, gelu,
                     linear: {out_features: 8}]
  - name: ln_f
    layer_norm: {}
  - name: lm_head
    share: {weight: wte.weight}
    linear: {out_features: 16, bias: false}
""", [("idx", "int:16", [8])])
def _gpt(P, idx):
    h = F.embedding(idx, P["wte.weight"]) + P["pos"]
    for i in range(2):
        k = "blocks.%d." % i
        h = h + plain_mha(ln(h, P, k + "0.0"), P, k + "0.1", 2, causal=True)
        f = F.gelu(lin(ln(h, P, k + "1.0"), P, k + "1.1"))
        h = h + lin(f, P, k + "1.3")
    return ln(h, P, "ln_f") @ P["wte.weight"].T


def sparse_block(op_line):
    return """\
inputs:
  x: {shape: [12, 8]}
layers:
  - residual: [layer_norm, multihead_attention: {%s}]
  - residual: [layer_norm, linear: {out_features: 16}, relu,
               linear: {out_features: 8}]
""" % op_line


def sparse_ref(P, x, act=F.relu, **hp):
    h = x + mha(ln(x, P, "0.0"), P, "0.1", 2, **hp)
    return h + lin(act(lin(ln(h, P, "1.0"), P, "1.1")), P, "1.3")


@model("longformer", "Longformer layer", "Beltagy, Peters, Cohan 2020",
       "a sliding window of +-2 keys plus one global token, O(T w) attention",
       sparse_block("num_heads: 2, window: 2, global_tokens: 1"),
       [("x", "float", [12, 8])], source="PyTorch, dense with the pattern's mask")
def _longformer(P, x):
    return sparse_ref(P, x, window=2, global_tokens=1)


@model("bigbird", "BigBird layer", "Zaheer et al. 2020",
       "blocks of 2 tokens: a window of one block, one global block, one random block per query block",
       sparse_block("num_heads: 2, window: 1, global_tokens: 1, random_keys: 1, block_size: 2, seed: 3"),
       [("x", "float", [12, 8])], source="PyTorch, dense with the pattern's mask")
def _bigbird(P, x):
    return sparse_ref(P, x, window=1, global_tokens=1, random_keys=1,
                      block_size=2, seed=3)


@model("sparse-strided", "Sparse Transformer, strided pattern",
       "Child, Gray, Radford, Sutskever 2019",
       "causal attention to the last 3 keys and every 3rd key (`stride: 3`)",
       sparse_block("num_heads: 2, stride: 3, causal: true"),
       [("x", "float", [12, 8])], source="PyTorch, dense with the pattern's mask")
def _strided(P, x):
    return sparse_ref(P, x, stride=3, causal=True)


@model("sparse-fixed", "Sparse Transformer, fixed pattern",
       "Child, Gray, Radford, Sutskever 2019",
       "causal attention within blocks of 4 and to each block's last cell (`fixed: 4`)",
       sparse_block("num_heads: 2, fixed: 4, fixed_summary: 1, causal: true"),
       [("x", "float", [12, 8])], source="PyTorch, dense with the pattern's mask")
def _fixed(P, x):
    return sparse_ref(P, x, fixed=4, fixed_summary=1, causal=True)


@model("primer", "Primer layer", "So et al. 2021",
       "multi-dconv-head attention (`dconv: 3`) and a squared-ReLU feed-forward (`relu_squared`)",
       """\
inputs:
  x: {shape: [12, 8]}
layers:
  - residual: [layer_norm, multihead_attention: {num_heads: 2, dconv: 3, causal: true}]
  - residual: [layer_norm, linear: {out_features: 16}, relu_squared,
               linear: {out_features: 8}]
""", [("x", "float", [12, 8])])
def _primer(P, x):
    return sparse_ref(P, x, act=lambda t: F.relu(t) ** 2, dconv=3,
                      causal=True)


@model("relative-positions", "Relative position representations",
       "Shaw, Uszkoreit, Vaswani 2018",
       "`relative_positions: 2` on keys and `relative_values: true` on values",
       """\
inputs:
  x: {shape: [7, 8]}
layers:
  - multihead_attention: {num_heads: 2, relative_positions: 2, relative_values: true}
""", [("x", "float", [7, 8])])
def _relpos(P, x):
    return mha(x, P, "0", 2, relative_positions=2, relative_values=True)


@model("linear-attention", "Linear attention", "Katharopoulos et al. 2020",
       "phi(x) = elu(x) + 1 feature maps and the O(T) product phi(Q) (phi(K)^T V) / phi(Q) sum phi(K), from `matmul`, `sum`, `div`",
       """\
inputs:
  x: {shape: [6, 4]}
layers:
  - name: q
    in: x
    linear: {out_features: 4}
  - name: k
    in: x
    linear: {out_features: 4}
  - name: v
    in: x
    linear: {out_features: 4}
  - name: fq
    in: q
    sequential: [elu, scale: {shift: 1}]
  - name: fk
    in: k
    sequential: [elu, scale: {shift: 1}]
  - name: fkt
    transpose: {dim0: 1, dim1: 2}
  - name: kv
    in: [fkt, v]
    matmul: {}
  - name: num
    in: [fq, kv]
    matmul: {}
  - name: ksum
    in: fk
    sum: {dim: 1, keepdim: true}
  - name: ksumt
    transpose: {dim0: 1, dim1: 2}
  - name: den
    in: [fq, ksumt]
    matmul: {}
  - name: out
    in: [num, den]
    div: {}
""", [("x", "float", [6, 4])])
def _linatt(P, x):
    q, k, v = (lin(x, P, n) for n in "qkv")
    fq, fk = F.elu(q) + 1, F.elu(k) + 1
    num = fq @ (fk.transpose(1, 2) @ v)
    den = fq @ fk.sum(1, keepdim=True).transpose(1, 2)
    return num / den


@model("lenet5", "LeNet-5", "LeCun, Bottou, Bengio, Haffner 1998",
       "convolutions, max pooling and linear layers on a 28x28 image (the weights of models/lenet5)",
       # models/lenet5.yaml from `inputs:` on, with its weights
       "weights: ../lenet5.safetensors\n" + LENET5[LENET5.index("inputs:"):],
       [("image", "float", [1, 28, 28])], weights="../lenet5.safetensors")
def _lenet5(P, x):
    m = torch_lenet5().double()
    m.load_state_dict(P)
    return m.eval()(x)


# ---- relu selection (weights by construction, expected = the formula) ----

RELU_N, RELU_C = 4, 4.0
RELU_FORMS = [
    ("relu-select", "plain",
     "where(c, a, b) = W2 relu(W1 [c; a; b] + b1) by construction (n = 4, C = 4)"),
    ("relu-select-residual", "residual",
     "[c; a; b] -> [c; where(c, a, b); 0] as x + W2 relu(W1 x) (n = 4, C = 4)"),
    ("relu-select-int", "int",
     "an integer c made 0/1 by relu(c) - relu(c - 1), then the selection (n = 4, C = 4)"),
]


def relu_model(name, form, shows):
    MODELS.append(Model(
        name, "Relu selection network" + {"plain": "", "residual": ", residual",
                                           "int": ", integer condition"}[form],
        "the seed construction (`tools/relu_select.py`)", shows,
        "# The relu selection network (%s form), weights by tools/relu_select.py;\n"
        "# exact (bit for bit) for a, b multiples of C * 2^-23 with |a|, |b| < C.\n"
        "name: %s\n" % (form, name) + relu_select.yaml_text(RELU_N, form),
        [("x", "relu:" + form, [3 * RELU_N])], None,
        "the formula where(c, a, b), exact", form))


for _n, _f, _s in RELU_FORMS:
    relu_model(_n, _f, _s)

# more sizes and bounds for tests/zoo.sh's bit-for-bit check, written to
# tests/data/relu_select/: (n, C, form), C a power of two
RELU_EXTRA = [(1, 1.0, "plain"), (7, 1024.0, "plain"), (3, 0.125, "residual"),
              (5, 2.0 ** 20, "int"), (2, 2.0 ** -10, "plain")]


def write_relu_extra():
    d = os.path.join(ROOT, "tests", "data", "relu_select")
    os.makedirs(d, exist_ok=True)
    for n, C, form in RELU_EXTRA:
        name = "n%d-c2e%d-%s" % (n, int(math.log2(C)), form)
        base = os.path.join(d, name)
        with open(base + ".yaml", "w") as f:
            f.write("# where(c, a, b) with n = %d, C = %g (%s form): "
                    "tools/gen_zoo.py\n" % (n, C, form)
                    + relu_select.yaml_text(n, form))
        dltools.write_safetensors(base + ".safetensors",
                                  relu_select.tensors(n, C, form))
        x = relu_select.grid_inputs(n, C, 40, zlib.crc32(name.encode()),
                                    form)
        write_stream(base + "-input.npy", [x])
        write_stream(base + "-expected.npy",
                     [relu_select.expected(x, n, form)])


# the layers PyTorch has no module for, written with torch functions from
# their papers' formulas (the rest use torch.nn modules or their F forms)
NO_MODULE = {
    "highway": "PyTorch functions (highway's formula)",
    "moe": "PyTorch functions (top-k gating's formula)",
    "gmlp": "PyTorch functions (spatial gating's formula)",
    "bahdanau": "PyTorch (a loop of nn.GRUCell over [x_t; c_t])",
    "gcn": "PyTorch functions (D^-1/2 (A + I) D^-1/2 X W^T + b)",
    "gae": "PyTorch functions (GCN's formula)",
    "st-gcn": "PyTorch functions (GCN's formula), F.conv2d",
    "recurrent-gnn": "PyTorch functions (GCN's formula)",
    "primer": "PyTorch functions (dconv as a causal F.conv1d)",
    "relative-positions": "PyTorch functions (Shaw's formula)",
}


# ---- writing ----

def redraw(name, shapes):
    """Deterministic values for the keys dlrun init wrote: batch-norm
    statistics and 1-D scales near their defaults, the rest uniform in
    +-1/sqrt(fan_in) as PyTorch's linear and conv layers."""
    out = {}
    for key in sorted(shapes):
        s = list(shapes[key])
        g = torch.Generator().manual_seed(zlib.crc32(("%s:%s" % (name, key))
                                                     .encode()))
        u = 2 * torch.rand(s, generator=g, dtype=D64) - 1
        leaf = key.rsplit(".", 1)[-1]
        if leaf == "running_var":
            v = 1 + 0.5 * u
        elif leaf == "running_mean" or (len(s) == 1 and leaf != "weight"):
            v = 0.2 * u
        elif len(s) == 1:
            v = 1 + 0.2 * u
        else:
            v = u / math.sqrt(max(1, int(np.prod(s[1:]))))
        out[key] = v.float()
    return out


def make_inputs(m):
    g = torch.Generator().manual_seed(zlib.crc32(m.name.encode()))
    N = 2
    arrays = []
    for _, kind, shape in m.inputs:
        if kind.startswith("int:"):
            arrays.append(torch.randint(0, int(kind[4:]), [N] + shape,
                                        generator=g))
        elif kind == "adj":
            V = shape[0]
            a = (torch.rand(N, V, V, generator=g) < 0.4).float()
            a = torch.triu(a, 1)
            arrays.append(a + a.transpose(1, 2))
        elif kind.startswith("relu:"):
            form = kind[5:]
            x = relu_select.grid_inputs(RELU_N, RELU_C, 64,
                                        zlib.crc32(m.name.encode()), form)
            arrays.append(torch.from_numpy(x))
        else:
            arrays.append(torch.randn([N] + shape, generator=g))
    return arrays


def write_stream(path, arrays):
    write(path, b"".join(npy_any(a) for a in arrays))


def dlrun_init_shapes(dlrun, yaml_path):
    with tempfile.TemporaryDirectory() as d:
        w = os.path.join(d, "w.safetensors")
        subprocess.run([dlrun, "init", yaml_path, "-o", w, "--seed", "0"],
                       check=True)
        return {k: v.shape for k, v in dltools.read_safetensors(w).items()}


def write_model(m, dlrun):
    base = os.path.join(ZOO, m.name)
    header = "".join("# " + line + "\n" for line in textwrap.wrap(
        "%s (%s): %s. Weights, input and expected output: tools/gen_zoo.py;"
        " picture: %s.svg." % (m.arch, m.paper, m.shows.replace("`", ""),
                               m.name), 74))
    if m.ref is None:
        text = m.yaml
    else:
        text = header + "name: %s\n" % m.name + m.yaml
    with open(base + ".yaml", "w") as f:
        f.write(text)
    if m.ref is None:                        # relu selection
        W = relu_select.tensors(RELU_N, RELU_C, m.weights)
        dltools.write_safetensors(base + ".safetensors", W)
        x = make_inputs(m)[0].numpy()
        write_stream(base + "-input.npy", [x])
        write_stream(base + "-expected.npy",
                     [relu_select.expected(x, RELU_N, m.weights)])
        return sum(int(np.prod(np.shape(v))) for v in W.values())
    if m.weights:
        P32 = dltools.read_safetensors(os.path.join(ZOO, m.weights))
        P32 = {k: torch.from_numpy(np.array(v)) for k, v in P32.items()}
    else:
        P32 = redraw(m.name, dlrun_init_shapes(dlrun, base + ".yaml"))
        dltools.write_safetensors(base + ".safetensors", P32)
    ins = make_inputs(m)
    write_stream(base + "-input.npy", ins)
    P = {k: v.double() for k, v in P32.items()}
    ins64 = [a if not a.is_floating_point() else a.double() for a in ins]
    with torch.no_grad():
        y = m.ref(P, *ins64)
    write_stream(base + "-expected.npy", [y.float()])
    return sum(v.numel() for k, v in P32.items()
               if not k.endswith(("running_mean", "running_var")))


def draw(dlrun, name):
    base = os.path.join(ZOO, name)
    subprocess.run([dlrun, "draw", base + ".yaml", "-o", base + ".svg"],
                   check=True)


README_HEAD = """\
# The dlrun model zoo

One small model per architecture: its description `NAME.yaml`, weights
`NAME.safetensors`, an input `NAME-input.npy` (one array per model input,
back to back), the expected output `NAME-expected.npy` and its picture
`NAME.svg` (`dlrun draw`). Run one:

    dlrun infer models/zoo/gpt.yaml < models/zoo/gpt-input.npy > y.npy

The expected outputs are PyTorch's (computed in float64 on the same float32
weights by `tools/gen_zoo.py`, with `torch.nn` modules where PyTorch has
the layer and torch functions where it has none; the sparse attention
patterns as dense attention under the pattern's mask), except for the relu
selection networks, whose expected output is the formula where(c, a, b)
itself. `tests/zoo.sh` (in `make check`) runs every model against it,
trains each one step (`--loss mse`, the expected output as labels) and
checks that the pictures are current; `make images` re-draws them. The
weights are random (seeded), not trained: the zoo shows the wiring and
the numbers, not accuracy.

| architecture | paper | file | parameters | what it shows | picture | expected output |
| --- | --- | --- | ---: | --- | --- | --- |
"""

RELU_TEXT = """
## Relu selection: exactness and error

`tools/relu_select.py weights N C [plain|residual|int] -o FILE` writes the
weights of where(c, a, b) = W2 relu(W1 [c; a; b] + b1) for any n and C
(W1 = [[C, I, 0], [C, -I, 0], [-C, 0, I], [-C, 0, -I]], b1 = [-C, -C, 0,
0], W2 = [I, -I, I, -I]); the zoo holds n = 4, C = 4 in three forms:
`relu-select` (the construction), `relu-select-residual` ([c; a; b] ->
[c; where(c, a, b); 0] as x + W2 relu(W1 x), hidden units relu(b - a - 2C
c), relu(a - b - 2C c), relu(b), relu(-b)) and `relu-select-int` (an
integer c, of any sign, made 0/1 by relu(c) - relu(c - 1)). Their inputs
are a grid of multiples of C * 2^-23 with |a|, |b| < C, extremes
included, and `tests/zoo.sh` requires dlrun's output to equal
where(c, a, b) bit for bit.

For arbitrary floats the sums C + a round to C's ulp. Measured through
`dlrun infer` (n = 8, 2000 samples, `tools/relu_select.py table`):

"""

RELU_AFTER = """
The error for arbitrary a, b is half an ulp of C at most (so C should be
the smallest bound on |a|, |b| that holds); on the C * 2^-23 grid it is 0
when C is a power of two, and otherwise the grid itself does not fit in
float32 and the error is an ulp of C or two. Where it breaks: the value
that is not selected must be cut off by its relu, which needs it below C
in magnitude. At exactly +-C its unit sits at the kink and the answer is
still right; beyond, it leaks through with |value| - C (half of C at
1.5 C, all of C at 2 C): the construction needs |a|, |b| < C (|a|, |b| <=
C at the edge).
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dlrun", default=os.path.join(ROOT, "src", "dlrun"))
    ap.add_argument("--only", help="one model (skips the README)")
    args = ap.parse_args()
    os.makedirs(ZOO, exist_ok=True)
    rows = []
    for m in MODELS:
        if args.only and m.name != args.only:
            continue
        n = write_model(m, args.dlrun)
        draw(args.dlrun, m.name)
        rows.append("| %s | %s | [%s.yaml](%s.yaml) | %d | %s | "
                    "[<img src=\"%s.svg\" width=\"120\" alt=\"picture\">](%s.svg) | %s |"
                    % (m.arch, m.paper, m.name, m.name, n, m.shows, m.name,
                       m.name, NO_MODULE.get(m.name, m.source)))
        print("models/zoo/%s: %d parameters" % (m.name, n))
    if args.only:
        return
    write_relu_extra()
    table = relu_select.table_markdown(relu_select.measure(args.dlrun))
    with open(os.path.join(ZOO, "README.md"), "w") as f:
        f.write(README_HEAD + "\n".join(rows) + "\n" + RELU_TEXT + table
                + RELU_AFTER)


if __name__ == "__main__":
    main()
