#!/usr/bin/python3
"""Error of dlrun's 3x3 convolution paths against a float64 reference:
Winograd F(4x4, 3x3), F(2x2, 3x3) and im2col (src/ops/conv.c's rule picks
the path from the shape, so each path runs on the shape that routes to it:
8x8 outputs at batch 4 for F(4x4), batch 1 for F(2x2), 6x6 at batch 1 for
im2col), on resnet-like data: inputs after batch norm and relu (|N(0, 1)|
half the time, else 0), Kaiming-normal weights (std sqrt(2 / (9 C))),
input channels 16 to 1024, 64 output channels, 3 seeds. Prints, per path
and channel count, the worst max|y - ref| / max|ref| (the measure and the
1e-5 tolerance of tests/check_conv.c's fixtures) and the RMS relative
error. Above WINO4_MAX_C input channels the rule gives F(4x4)'s shape to
F(2x2): to measure F(4x4) there, raise WINO4_MAX_C and rebuild.

Usage: /usr/bin/python3 tools/bench/wino_error.py [--build DIR]
(builds tools/bench/convbench.c against DIR's static libdlrun).
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import conv  # noqa: E402  (build_convbench, save)

PATHS = [("F(4x4)", 4, 8), ("F(2x2)", 1, 8), ("im2col", 1, 6)]
CHANNELS = [16, 64, 128, 256, 512, 1024]
OC = 64


def build(b, out):
    lib = os.path.join(b, "src", ".libs", "libdlrun.a")
    libs = subprocess.run(["pkg-config", "--libs", "yaml-0.1", "jansson", "zlib",
                           "openblas", "libprotobuf-c", "ompi-c"],
                          capture_output=True, text=True).stdout.split()
    subprocess.run(["gcc", "-std=c11", "-D_POSIX_C_SOURCE=200809L", "-D_DEFAULT_SOURCE",
                    "-O2", "-fopenmp", "-I" + os.path.join(conv.SRC, "src"), "-I" + b,
                    os.path.join(conv.HERE, "convbench.c"), lib] + libs +
                   ["-lopenblas", "-lm", "-o", out], check=True)


def run(exe, d, shape, c, seed):
    g = np.random.default_rng(seed)
    x = np.abs(g.standard_normal(shape)) * (g.random(shape) < 0.5)
    w = g.standard_normal((OC, c, 3, 3)) * np.sqrt(2.0 / (9 * c))
    b = g.standard_normal(OC) * 0.1
    x, w, b = (a.astype(np.float32) for a in (x, w, b))
    conv.save(os.path.join(d, "x.npy"), x)
    conv.save(os.path.join(d, "weight.npy"), w)
    conv.save(os.path.join(d, "bias.npy"), b)
    subprocess.run([exe, "conv2d", "out_channels: %d, kernel_size: 3, padding: 1" % OC,
                    ",".join(map(str, shape)), "-t", "1", "-k", "1", "-d", d],
                   check=True, capture_output=True)
    y = np.load(os.path.join(d, "y_dlrun.npy")).astype(np.float64)
    ref = F.conv2d(torch.from_numpy(x).double(), torch.from_numpy(w).double(),
                   torch.from_numpy(b).double(), padding=1).numpy()
    e = np.abs(y - ref)
    return e.max() / np.abs(ref).max(), np.sqrt((e ** 2).mean() / (ref ** 2).mean())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=".")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="wino_error.")
    try:
        exe = os.path.join(tmp, "convbench")
        build(os.path.abspath(args.build), exe)
        print("| C | " + " | ".join("%s max / rms" % p[0] for p in PATHS) + " |")
        print("| ---: |" + " ---: |" * len(PATHS))
        for c in CHANNELS:
            cells = []
            for _, n, hw in PATHS:
                r = [run(exe, tmp, (n, c, hw, hw), c, s) for s in range(3)]
                cells.append("%.2g / %.2g" % (max(a for a, _ in r), max(b for _, b in r)))
            print("| %d | %s |" % (c, " | ".join(cells)))
    finally:
        shutil.rmtree(tmp)


if __name__ == "__main__":
    main()
