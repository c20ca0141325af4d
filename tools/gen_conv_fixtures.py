#!/usr/bin/python3
"""Generates tests/data/conv/: PyTorch references for dlrun's convolution,
pooling, upsampling and normalisation ops (tests/check_conv.c reads them).

cases.txt has one line per case, NAME|OP|TRAIN|HYPERPARAMETERS, the last
field the body of a YAML flow mapping as a model file would write it. Each
case NAME has, as float32 .npy (version 1.0):

  NAME.x.npy            the input
  NAME.p.PARAM.npy      every parameter and buffer, before the step
  NAME.gy.npy           dL/dy, the gradient fed to backward
  NAME.y.npy            the expected output
  NAME.gx.npy           the expected dL/dx
  NAME.g.PARAM.npy      the expected gradient of each trainable parameter
  NAME.after.BUF.npy    batch-norm running statistics after a training step

References run in float64 on float32-representable values, then round to
float32. Where dlrun goes beyond PyTorch (pool padding above half the
kernel, asymmetric [before, after] pairs, `same` with stride > 1, crop
pairs on transposed convolutions), the reference pads with F.pad (-inf for
max, 0 for average) or crops the full output, and applies PyTorch's
ceil_mode rule (the last window starts inside the input or its leading
padding) to the output size. Upsampling in nearest mode is a gather,
computed in float32 so that its source index floor(i * (1/s)) is PyTorch's
float computation.

Seeds are fixed per case name: re-running gives the same bytes.
Run with Debian's python3-torch: /usr/bin/python3 tools/gen_conv_fixtures.py
"""

import argparse
import math
import os
import sys
import zlib

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

CASES = []


def case(name, op, x, train=False, distinct=False, ties=False, **hp):
    """x: input shape; distinct: inputs spaced apart so that finite
    differences never flip a max-pool window's winner; ties: integers in
    [-1, 1], so that windows hold tied maxima (PyTorch routes the gradient
    to the first; the name must end in _ties, which tests/check_conv.c
    leaves out of its finite differences)."""
    assert not ties or name.endswith("_ties")
    CASES.append(dict(name=name, op=op, x=x, train=train, distinct=distinct,
                      ties=ties, hp=hp))


def yaml_value(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(yaml_value(e) for e in v) + "]"
    return str(v)


def yaml_hps(hp):
    return ", ".join("%s: %s" % (k, yaml_value(v)) for k, v in hp.items())


# ---- the cases ----

# conv1d
case("conv1d_basic", "conv1d", [2, 3, 11], out_channels=4, kernel_size=3)
case("conv1d_stride_gt_kernel", "conv1d", [2, 3, 13], out_channels=2,
     kernel_size=2, stride=3, padding=1)
case("conv1d_dilation", "conv1d", [2, 2, 13], out_channels=3, kernel_size=3,
     dilation=3, padding=2)
case("conv1d_pairs", "conv1d", [2, 3, 9], out_channels=2, kernel_size=4,
     padding=[[2, 1]], stride=2)
case("conv1d_same_s2", "conv1d", [2, 2, 10], out_channels=3, kernel_size=4,
     stride=2, padding="same")
case("conv1d_same_dil", "conv1d", [1, 2, 9], out_channels=2, kernel_size=3,
     dilation=2, padding="same")
case("conv1d_valid_nobias", "conv1d", [2, 3, 7], out_channels=2,
     kernel_size=3, padding="valid", bias=False)
case("conv1d_depthwise", "conv1d", [2, 4, 9], out_channels=8, kernel_size=3,
     groups=4, padding=1, stride=2)
case("conv1d_groups", "conv1d", [2, 4, 8], out_channels=6, kernel_size=3,
     groups=2)
# conv2d
case("conv2d_basic", "conv2d", [2, 3, 7, 6], out_channels=4, kernel_size=3,
     padding=1)
case("conv2d_nonsquare_pairs", "conv2d", [2, 3, 7, 9], out_channels=4,
     kernel_size=[3, 2], stride=2, padding=[[1, 0], [0, 2]])
case("conv2d_stride_gt_kernel", "conv2d", [1, 2, 9, 8], out_channels=3,
     kernel_size=2, stride=3)
case("conv2d_dilation", "conv2d", [2, 2, 9, 9], out_channels=3,
     kernel_size=[3, 2], dilation=[2, 3], padding=[1, 2])
case("conv2d_same_s2", "conv2d", [2, 2, 7, 8], out_channels=3,
     kernel_size=3, stride=2, padding="same")
case("conv2d_same_even", "conv2d", [1, 2, 6, 5], out_channels=2,
     kernel_size=[4, 2], padding="same")
case("conv2d_depthwise", "conv2d", [2, 3, 7, 8], out_channels=3,
     kernel_size=3, groups=3, padding=1)
case("conv2d_depthwise_mult", "conv2d", [2, 3, 9, 7], out_channels=6,
     kernel_size=[3, 2], groups=3, stride=2, padding=[[0, 2], [1, 1]],
     dilation=[1, 2])
case("conv2d_groups", "conv2d", [2, 4, 6, 5], out_channels=6, kernel_size=3,
     groups=2, padding=[1, 0])
case("conv2d_winograd", "conv2d", [2, 16, 7, 9], out_channels=16,
     kernel_size=3, padding=[[1, 2], [0, 1]])
case("conv2d_winograd_groups", "conv2d", [1, 32, 6, 5], out_channels=32,
     kernel_size=3, groups=2, padding=1)
case("conv2d_winograd_same", "conv2d", [1, 16, 5, 6], out_channels=24,
     kernel_size=3, padding="same", bias=False)
# Winograd F(4x4, 3x3) (src/ops/conv.c's rule: >= 16 channels per group,
# >= 16 4x4 tiles in the batch, fewer products than F(2x2)'s 2x2 tiles):
# odd channel counts, sizes that are not multiples of the 4x4 tile,
# batch 1 and 2, padding 1, 0, 2, asymmetric pairs, "same" and groups
case("conv2d_wino4", "conv2d", [2, 17, 13, 11], out_channels=19,
     kernel_size=3, padding=1)
case("conv2d_wino4_b1", "conv2d", [1, 18, 15, 17], out_channels=21,
     kernel_size=3, padding=1)
case("conv2d_wino4_valid", "conv2d", [2, 19, 14, 15], out_channels=17,
     kernel_size=3, bias=False)
case("conv2d_wino4_pad2", "conv2d", [2, 16, 11, 9], out_channels=23,
     kernel_size=3, padding=2)
case("conv2d_wino4_pairs", "conv2d", [2, 17, 10, 13], out_channels=18,
     kernel_size=3, padding=[[2, 0], [1, 3]])
case("conv2d_wino4_same_groups", "conv2d", [1, 34, 17, 15], out_channels=38,
     kernel_size=3, padding="same", groups=2)
case("conv2d_depthwise_dil_pairs", "conv2d", [2, 3, 8, 9], out_channels=3,
     kernel_size=3, groups=3, dilation=[2, 1], padding=[[2, 0], [0, 3]])
case("conv2d_depthwise_narrow", "conv2d", [1, 2, 4, 2], out_channels=2,
     kernel_size=3, groups=2, padding=1)
# depthwise on padded planes (equal strides; src/ops/conv.c): odd sizes,
# several output channels per input channel, an input row and column no
# window reads, batch 1, 1D; unequal strides keep the row-wise kernels
case("conv2d_depthwise_s1_mult", "conv2d", [2, 3, 7, 9], out_channels=6,
     kernel_size=[3, 5], groups=3, padding=[[1, 0], [2, 2]], dilation=[2, 1])
case("conv2d_depthwise_s2_trailing", "conv2d", [3, 4, 10, 9],
     out_channels=4, kernel_size=3, groups=4, stride=2, bias=False)
case("conv2d_depthwise_s3_k5_b1", "conv2d", [1, 5, 13, 11], out_channels=5,
     kernel_size=5, groups=5, stride=3, padding=2)
case("conv2d_depthwise_wide", "conv2d", [2, 3, 5, 37], out_channels=3,
     kernel_size=3, groups=3, padding=1)
case("conv2d_depthwise_big", "conv2d", [1, 2, 67, 70], out_channels=2,
     kernel_size=3, groups=2, padding=1, bias=False)
case("conv2d_depthwise_sh_sw", "conv2d", [2, 3, 9, 8], out_channels=3,
     kernel_size=3, groups=3, stride=[2, 1], padding=1)
case("conv1d_depthwise_s1", "conv1d", [3, 6, 17], out_channels=6,
     kernel_size=5, groups=6, padding=2)
case("conv2d_pointwise", "conv2d", [2, 5, 4, 3], out_channels=3,
     kernel_size=1)
case("conv2d_pointwise_s2", "conv2d", [2, 4, 5, 5], out_channels=3,
     kernel_size=1, stride=2, bias=False)
# on dl_sgemm_rows where the FMA units are 512 bits wide (src/ops/conv.c:
# the backward at 16 or more output channels per group, the batched
# pointwise forward at 32 or more): planes of at most 16 cells (im2col by
# vector shuffles, the grouped backward), a 1x1 layer's images packed
# straight into panels, groups, and a plane past the grouped backward's
# 64 cells; channel counts off the 16-wide panels
case("conv2d_rows_small_planes", "conv2d", [5, 19, 4, 4], out_channels=33,
     kernel_size=3, padding=1)
case("conv2d_rows_pointwise", "conv2d", [6, 37, 2, 2], out_channels=35,
     kernel_size=1)
case("conv2d_rows_groups_s2", "conv2d", [3, 34, 5, 7], out_channels=36,
     kernel_size=3, stride=2, padding=1, groups=2)
case("conv2d_rows_dilation", "conv2d", [2, 17, 9, 10], out_channels=20,
     kernel_size=3, padding=2, dilation=2, bias=False)
# transposed
case("conv_transpose1d_basic", "conv_transpose1d", [2, 3, 6],
     out_channels=2, kernel_size=3, stride=2)
case("conv_transpose1d_outpad", "conv_transpose1d", [2, 3, 5],
     out_channels=4, kernel_size=4, stride=3, padding=1, output_padding=2,
     dilation=1)
case("conv_transpose1d_crop_pairs", "conv_transpose1d", [2, 2, 6],
     out_channels=3, kernel_size=4, stride=2, padding=[[2, 1]])
case("conv_transpose1d_groups_dil", "conv_transpose1d", [2, 4, 5],
     out_channels=6, kernel_size=3, groups=2, dilation=2, stride=2,
     output_padding=1)
case("conv_transpose2d_basic", "conv_transpose2d", [2, 3, 4, 5],
     out_channels=2, kernel_size=3, stride=2, padding=1)
case("conv_transpose2d_k4s2", "conv_transpose2d", [2, 3, 4, 3],
     out_channels=2, kernel_size=4, stride=2, padding=1)
case("conv_transpose2d_pairs", "conv_transpose2d", [2, 2, 4, 5],
     out_channels=3, kernel_size=[3, 2], stride=[2, 3],
     padding=[[0, 2], [1, 0]], output_padding=[1, 2])
case("conv_transpose2d_groups_dil", "conv_transpose2d", [1, 4, 3, 4],
     out_channels=2, kernel_size=2, groups=2, dilation=[2, 1], stride=2,
     bias=False)
case("conv_transpose2d_depthwise", "conv_transpose2d", [2, 3, 4, 4],
     out_channels=3, kernel_size=3, groups=3, stride=2, padding=1,
     output_padding=1)
case("conv_transpose2d_pointwise", "conv_transpose2d", [2, 3, 3, 4],
     out_channels=2, kernel_size=1)
# max pooling
case("max_pool1d_basic", "max_pool1d", [2, 3, 10], distinct=True,
     kernel_size=3)
case("max_pool1d_ceil_pad", "max_pool1d", [2, 2, 10], distinct=True,
     kernel_size=3, stride=2, padding=1, ceil_mode=True)
case("max_pool1d_dil_pairs", "max_pool1d", [2, 2, 11], distinct=True,
     kernel_size=3, dilation=2, padding=[[3, 0]], stride=2, ceil_mode=True)
case("max_pool2d_basic", "max_pool2d", [2, 2, 7, 7], distinct=True,
     kernel_size=2)
case("max_pool2d_ceil_partial", "max_pool2d", [2, 2, 7, 8], distinct=True,
     kernel_size=3, stride=2, ceil_mode=True)
case("max_pool2d_nonsquare_dil", "max_pool2d", [1, 3, 9, 8], distinct=True,
     kernel_size=[3, 2], stride=[2, 1], padding=[1, 1], dilation=[2, 3])
case("max_pool2d_big_pad", "max_pool2d", [2, 2, 5, 6], distinct=True,
     kernel_size=3, stride=2, padding=2)
case("max_pool2d_pairs_ceil", "max_pool2d", [2, 2, 7, 6], distinct=True,
     kernel_size=3, stride=2, padding=[[0, 2], [2, 1]], ceil_mode=True)
case("max_pool1d_ceil_big_after", "max_pool1d", [2, 2, 5], distinct=True,
     kernel_size=2, padding=[[1, 3]], ceil_mode=True)
case("max_pool2d_same", "max_pool2d", [1, 2, 7, 6], distinct=True,
     kernel_size=3, stride=2, padding="same")
case("max_pool2d_stride_gt_kernel", "max_pool2d", [1, 2, 9, 10],
     distinct=True, kernel_size=2, stride=3)
# max pooling with every window inside the input (the gathered path of
# src/ops/pool.c): odd sizes, ties, overlapping windows, planes of more
# than one chunk of 1024 outputs
case("max_pool2d_inside_odd", "max_pool2d", [3, 5, 9, 11], distinct=True,
     kernel_size=2)
case("max_pool2d_inside_b1", "max_pool2d", [1, 3, 8, 10], distinct=True,
     kernel_size=[2, 3])
case("max_pool2d_inside_dil", "max_pool2d", [2, 3, 11, 13], distinct=True,
     kernel_size=3, stride=2, dilation=[1, 2])
case("max_pool2d_inside_chunks", "max_pool2d", [2, 1, 70, 66],
     distinct=True, kernel_size=2)
case("max_pool2d_inside_ties", "max_pool2d", [3, 4, 8, 9], ties=True,
     kernel_size=2)
case("max_pool2d_inside_overlap_ties", "max_pool2d", [2, 3, 9, 7],
     ties=True, kernel_size=3, stride=1)
case("max_pool1d_inside_ties", "max_pool1d", [2, 3, 13], ties=True,
     kernel_size=3, stride=2)
# average pooling
case("avg_pool1d_basic", "avg_pool1d", [2, 3, 9], kernel_size=3, stride=2)
case("avg_pool1d_ceil_pad", "avg_pool1d", [2, 2, 10], kernel_size=3,
     stride=2, padding=1, ceil_mode=True)
case("avg_pool1d_ceil_pad_nocount", "avg_pool1d", [2, 2, 10], kernel_size=3,
     stride=2, padding=1, ceil_mode=True, count_include_pad=False)
case("avg_pool2d_basic", "avg_pool2d", [2, 2, 6, 6], kernel_size=2)
case("avg_pool2d_ceil_count", "avg_pool2d", [2, 2, 8, 7], kernel_size=3,
     stride=2, padding=1, ceil_mode=True)
case("avg_pool2d_ceil_nocount", "avg_pool2d", [2, 2, 8, 7], kernel_size=3,
     stride=2, padding=1, ceil_mode=True, count_include_pad=False)
case("avg_pool2d_nonsquare", "avg_pool2d", [1, 3, 7, 9],
     kernel_size=[2, 3], stride=[1, 2], padding=[1, 1])
case("avg_pool2d_pairs_ceil_count", "avg_pool2d", [2, 2, 7, 6],
     kernel_size=3, stride=2, padding=[[0, 2], [2, 1]], ceil_mode=True)
case("avg_pool2d_pairs_ceil_nocount", "avg_pool2d", [2, 2, 7, 6],
     kernel_size=3, stride=2, padding=[[0, 2], [2, 1]], ceil_mode=True,
     count_include_pad=False)
case("avg_pool1d_ceil_big_after", "avg_pool1d", [2, 2, 5], kernel_size=2,
     padding=[[1, 3]], ceil_mode=True)
case("avg_pool1d_ceil_big_after_nocount", "avg_pool1d", [2, 2, 5],
     kernel_size=2, padding=[[1, 3]], ceil_mode=True, count_include_pad=False)
case("avg_pool2d_big_pad_nocount", "avg_pool2d", [1, 2, 5, 5],
     kernel_size=3, stride=2, padding=2, count_include_pad=False)
case("avg_pool2d_big_pad_count", "avg_pool2d", [1, 2, 5, 5],
     kernel_size=3, stride=2, padding=2)
# adaptive average pooling
case("adaptive_avg_pool1d_uneven", "adaptive_avg_pool1d", [2, 3, 10],
     output_size=4)
case("adaptive_avg_pool1d_up", "adaptive_avg_pool1d", [2, 2, 3],
     output_size=5)
case("adaptive_avg_pool2d_uneven", "adaptive_avg_pool2d", [2, 2, 7, 5],
     output_size=[3, 2])
case("adaptive_avg_pool2d_global", "adaptive_avg_pool2d", [2, 3, 5, 4],
     output_size=1)
# upsample
case("upsample_nearest2d", "upsample", [2, 2, 3, 4], scale_factor=2)
case("upsample_nearest2d_frac", "upsample", [1, 2, 4, 5],
     scale_factor=[1.5, 2.5])
case("upsample_nearest1d_down", "upsample", [2, 2, 9], scale_factor=0.5)
case("upsample_linear", "upsample", [2, 2, 5], scale_factor=2.5,
     mode="linear")
case("upsample_bilinear", "upsample", [2, 2, 4, 5], scale_factor=[2, 1.5],
     mode="bilinear")
case("upsample_bilinear_align", "upsample", [1, 2, 3, 4], scale_factor=2,
     mode="bilinear", align_corners=True)
# batch norm
case("batch_norm1d_nc_train", "batch_norm1d", [6, 4], train=True)
case("batch_norm1d_nc_eval", "batch_norm1d", [5, 4])
case("batch_norm1d_ncl_train", "batch_norm1d", [3, 4, 5], train=True,
     momentum=0.3)
case("batch_norm1d_ncl_eval", "batch_norm1d", [3, 4, 5], eps=0.001)
case("batch_norm2d_train", "batch_norm2d", [3, 3, 4, 5], train=True)
case("batch_norm2d_eval", "batch_norm2d", [2, 3, 4, 5])
case("batch_norm2d_noaffine_train", "batch_norm2d", [2, 3, 3, 4],
     train=True, affine=False)
case("batch_norm2d_notrack_eval", "batch_norm2d", [2, 3, 3, 4],
     track_running_stats=False)
# layer norm
case("layer_norm_last", "layer_norm", [3, 4, 6])
case("layer_norm_shape2", "layer_norm", [2, 3, 4, 5], normalized_shape=[4, 5],
     eps=0.0001)
case("layer_norm_noaffine", "layer_norm", [4, 7], elementwise_affine=False)
case("layer_norm_nobias", "layer_norm", [2, 3, 8], normalized_shape=8,
     bias=False)


# ---- geometry, as dlrun and the spec define it ----

def tup(v, n):
    if isinstance(v, (list, tuple)):
        assert len(v) == n
        return list(v)
    return [v] * n


def pads(hp, n, L, k, s, d):
    """[(before, after)] per spatial dimension."""
    p = hp.get("padding", 0)
    if p == "valid":
        return [(0, 0)] * n
    if p == "same":
        out = []
        for i in range(n):
            o = -(-L[i] // s[i])
            total = max(0, (o - 1) * s[i] + d[i] * (k[i] - 1) + 1 - L[i])
            out.append((total // 2, total - total // 2))
        return out
    if isinstance(p, list) and p and isinstance(p[0], list):
        return [tuple(q) for q in p]
    return [(q, q) for q in tup(p, n)]


def fpad(pp):
    """F.pad's order: last dimension first."""
    out = []
    for b, a in reversed(pp):
        out += [b, a]
    return out


def pool_out(L, k, s, d, pb, pa, ceil):
    span = L + pb + pa - (d * (k - 1) + 1)
    o = (-(-span // s) if ceil else span // s) + 1
    while ceil and o > 1 and (o - 1) * s >= L + pb:
        o -= 1
    return o


# ---- references ----

def ref_conv(c, x, params):
    hp, nsp = c["hp"], len(c["x"]) - 2
    L = c["x"][2:]
    k = tup(hp["kernel_size"], nsp)
    s = tup(hp.get("stride", 1), nsp)
    d = tup(hp.get("dilation", 1), nsp)
    g = hp.get("groups", 1)
    w, b = params["weight"], params.get("bias")
    pp = pads(hp, nsp, L, k, s, d)
    conv = F.conv1d if nsp == 1 else F.conv2d
    if all(bb == aa for bb, aa in pp):
        return conv(x, w, b, stride=s, padding=[bb for bb, _ in pp],
                    dilation=d, groups=g)
    return conv(F.pad(x, fpad(pp)), w, b, stride=s, padding=0, dilation=d,
                groups=g)


def ref_conv_transpose(c, x, params):
    hp, nsp = c["hp"], len(c["x"]) - 2
    k = tup(hp["kernel_size"], nsp)
    s = tup(hp.get("stride", 1), nsp)
    d = tup(hp.get("dilation", 1), nsp)
    op = tup(hp.get("output_padding", 0), nsp)
    g = hp.get("groups", 1)
    w, b = params["weight"], params.get("bias")
    pp = pads(hp, nsp, c["x"][2:], k, s, d)
    convt = F.conv_transpose1d if nsp == 1 else F.conv_transpose2d
    if all(bb == aa for bb, aa in pp):
        return convt(x, w, b, stride=s, padding=[bb for bb, _ in pp],
                     output_padding=op, groups=g, dilation=d)
    full = convt(x, w, b, stride=s, padding=0, output_padding=op, groups=g,
                 dilation=d)
    for i, (bb, aa) in enumerate(pp):
        full = full.narrow(2 + i, bb, full.shape[2 + i] - bb - aa)
    return full


def pool_setup(c):
    hp, nsp = c["hp"], len(c["x"]) - 2
    L = c["x"][2:]
    k = tup(hp["kernel_size"], nsp)
    s = tup(hp.get("stride", hp["kernel_size"]), nsp)
    d = tup(hp.get("dilation", 1), nsp)
    pp = pads(hp, nsp, L, k, s, d)
    ceil = hp.get("ceil_mode", False)
    outs = [pool_out(L[i], k[i], s[i], d[i], pp[i][0], pp[i][1], ceil)
            for i in range(nsp)]
    native = all(bb == aa and bb <= k[i] // 2 for i, (bb, aa) in enumerate(pp))
    return nsp, k, s, d, pp, ceil, outs, native


def crop_to(y, outs):
    for i, o in enumerate(outs):
        assert y.shape[2 + i] >= o
        y = y.narrow(2 + i, 0, o)
    return y


def ref_max_pool(c, x, params):
    nsp, k, s, d, pp, ceil, outs, native = pool_setup(c)
    pool = F.max_pool1d if nsp == 1 else F.max_pool2d
    if native:
        y = pool(x, k, s, [bb for bb, _ in pp], d, ceil_mode=ceil)
    else:
        y = pool(F.pad(x, fpad(pp), value=-math.inf), k, s, 0, d,
                 ceil_mode=ceil)
    assert list(y.shape[2:]) == outs or not native, (y.shape, outs)
    return crop_to(y, outs)


def ref_avg_pool(c, x, params):
    nsp, k, s, d, pp, ceil, outs, native = pool_setup(c)
    count = c["hp"].get("count_include_pad", True)
    pool = F.avg_pool1d if nsp == 1 else F.avg_pool2d
    if native:
        y = pool(x, k, s, [bb for bb, _ in pp], ceil_mode=ceil,
                 count_include_pad=count)
        assert list(y.shape[2:]) == outs, (y.shape, outs)
        return y
    xp = F.pad(x, fpad(pp))
    if count:
        # torch clips a ceil_mode window at the end of its (here: padded)
        # input, as PyTorch clips at the end of the padding
        return crop_to(pool(xp, k, s, 0, ceil_mode=ceil), outs)
    # sum over the window / number of input cells in it (0 when none)
    total = crop_to(window_sum(xp, k, s, ceil), outs)
    cells = crop_to(window_sum(F.pad(torch.ones_like(x), fpad(pp)), k, s, ceil),
                    outs)
    return torch.where(cells > 0, total / cells.clamp(min=1),
                       torch.zeros_like(total))


def window_sum(t, k, s, ceil):
    """Sums over pooling windows (clipped at the end in ceil_mode)."""
    if t.dim() == 3:
        return window_sum(t.unsqueeze(2), [1] + k, [1] + s, ceil).squeeze(2)
    return F.avg_pool2d(t, k, s, 0, ceil_mode=ceil, divisor_override=1)


def ref_adaptive(c, x, params):
    nsp = len(c["x"]) - 2
    o = tup(c["hp"]["output_size"], nsp)
    return (F.adaptive_avg_pool1d if nsp == 1 else F.adaptive_avg_pool2d)(x, o)


def ref_upsample(c, x, params):
    nsp = len(c["x"]) - 2
    hp = c["hp"]
    mode = hp.get("mode", "nearest")
    sf = hp["scale_factor"]
    sf = tuple(float(v) for v in tup(sf, nsp))
    if mode == "nearest":
        return F.interpolate(x, scale_factor=sf, mode="nearest")
    return F.interpolate(x, scale_factor=sf, mode=mode,
                         align_corners=hp.get("align_corners", False))


def make_bn(c, params):
    hp = c["hp"]
    C = c["x"][1]
    cls = nn.BatchNorm1d if c["op"] == "batch_norm1d" else nn.BatchNorm2d
    m = cls(C, eps=hp.get("eps", 1e-5), momentum=hp.get("momentum", 0.1),
            affine=hp.get("affine", True),
            track_running_stats=hp.get("track_running_stats", True))
    m = m.double()
    with torch.no_grad():
        for name, t in params.items():
            getattr(m, name).copy_(t)
    m.train(c["train"])
    return m


def make_ln(c, params):
    hp = c["hp"]
    ns = hp.get("normalized_shape", c["x"][-1])
    ns = tup(ns, 1) if not isinstance(ns, list) else ns
    m = nn.LayerNorm(ns, eps=hp.get("eps", 1e-5),
                     elementwise_affine=hp.get("elementwise_affine", True))
    if not hp.get("bias", True):
        # torch 1.13's LayerNorm has no `bias` argument: a zero bias
        # that is never trained is the same
        m.bias = None
    return m.double()


# ---- parameters ----

def param_shapes(c):
    hp, op, xs = c["hp"], c["op"], c["x"]
    C = xs[1]
    if op.startswith("conv"):
        g = hp.get("groups", 1)
        k = tup(hp["kernel_size"], len(xs) - 2)
        oc = hp["out_channels"]
        if "transpose" in op:
            w = [C, oc // g] + k
        else:
            w = [oc, C // g] + k
        out = {"weight": w}
        if hp.get("bias", True):
            out["bias"] = [oc]
        return out
    if op.startswith("batch_norm"):
        out = {}
        if hp.get("affine", True):
            out["weight"] = [C]
            out["bias"] = [C]
        if hp.get("track_running_stats", True):
            out["running_mean"] = [C]
            out["running_var"] = [C]
        return out
    if op == "layer_norm":
        ns = hp.get("normalized_shape", xs[-1])
        ns = ns if isinstance(ns, list) else [ns]
        out = {}
        if hp.get("elementwise_affine", True):
            out["weight"] = ns
            if hp.get("bias", True):
                out["bias"] = ns
        return out
    return {}


BUFFERS = ("running_mean", "running_var")


def f32(rng, shape, lo=-1.0, hi=1.0):
    return rng.uniform(lo, hi, size=shape).astype(np.float32)


def run_case(c):
    rng = np.random.Generator(np.random.PCG64(zlib.crc32(c["name"].encode())))
    xs = c["x"]
    if c["ties"]:
        x = rng.integers(-1, 2, size=xs).astype(np.float32)
    elif c["distinct"]:
        n = int(np.prod(xs))
        x = ((rng.permutation(n) - n / 2) * (2.0 / n)).astype(np.float32)
        x = x.reshape(xs)
    else:
        x = f32(rng, xs)
    params = {}
    for name, shape in param_shapes(c).items():
        if name == "running_var":
            params[name] = f32(rng, shape, 0.5, 2.0)
        elif c["op"].startswith(("batch_norm", "layer_norm")) and name == "weight":
            params[name] = f32(rng, shape, 0.5, 1.5)
        else:
            params[name] = f32(rng, shape)
    op = c["op"]
    nearest = op == "upsample" and c["hp"].get("mode", "nearest") == "nearest"
    dtype = torch.float32 if nearest else torch.float64
    tx = torch.tensor(x, dtype=dtype, requires_grad=True)
    tp = {k: torch.tensor(v, dtype=dtype, requires_grad=k not in BUFFERS)
          for k, v in params.items()}
    module = None
    if op in ("conv1d", "conv2d"):
        y = ref_conv(c, tx, tp)
    elif op.startswith("conv_transpose"):
        y = ref_conv_transpose(c, tx, tp)
    elif op.startswith("max_pool"):
        y = ref_max_pool(c, tx, tp)
    elif op.startswith("avg_pool"):
        y = ref_avg_pool(c, tx, tp)
    elif op.startswith("adaptive_avg_pool"):
        y = ref_adaptive(c, tx, tp)
    elif op == "upsample":
        y = ref_upsample(c, tx, tp)
    elif op.startswith("batch_norm"):
        module = make_bn(c, tp)
        y = module(tx)
    elif op == "layer_norm":
        module = make_ln(c, tp)
        with torch.no_grad():
            for k, v in tp.items():
                getattr(module, k).copy_(v)
        y = module(tx)
    else:
        raise SystemExit("unknown op " + op)
    gy = f32(rng, list(y.shape))
    (y * torch.tensor(gy, dtype=dtype)).sum().backward()
    out = {"x": x, "gy": gy, "y": y.detach().numpy(),
           "gx": tx.grad.numpy()}
    for k, v in params.items():
        out["p." + k] = v
    if module is not None:
        for k, p in module.named_parameters():
            out["g." + k] = p.grad.numpy()
        if c["train"]:
            for k in BUFFERS:
                if k in params:
                    out["after." + k] = getattr(module, k).detach().numpy()
    else:
        for k, t in tp.items():
            if t.requires_grad:
                out["g." + k] = t.grad.numpy()
    return out


def save(path, a):
    a = np.ascontiguousarray(np.asarray(a, dtype=np.float64).astype("<f4"))
    with open(path, "wb") as f:
        np.lib.format.write_array(f, a, version=(1, 0), allow_pickle=False)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-o", "--out",
                    default=os.path.join(here, "..", "tests", "data", "conv"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    # only the generated files go: gradcheck/ beside them is written by hand
    os.makedirs(args.out, exist_ok=True)
    for f in os.listdir(args.out):
        if f.endswith(".npy") or f == "cases.txt":
            os.remove(os.path.join(args.out, f))
    lines = []
    for c in CASES:
        arrays = run_case(c)
        for k, a in sorted(arrays.items()):
            save(os.path.join(args.out, "%s.%s.npy" % (c["name"], k)), a)
        lines.append("%s|%s|%d|%s" % (c["name"], c["op"], int(c["train"]),
                                      yaml_hps(c["hp"])))
    with open(os.path.join(args.out, "cases.txt"), "w") as f:
        f.write("# NAME|OP|TRAIN|HYPERPARAMETERS: written by "
                "tools/gen_conv_fixtures.py\n")
        f.write("\n".join(lines) + "\n")
    total = sum(os.path.getsize(os.path.join(args.out, f))
                for f in os.listdir(args.out))
    print("%d cases, %d files, %d bytes in %s" %
          (len(CASES), len(os.listdir(args.out)), total, args.out))


if __name__ == "__main__":
    sys.exit(main())
