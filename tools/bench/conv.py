#!/usr/bin/python3
"""Benchmarks dlrun's convolution, pooling and normalisation ops against
PyTorch on the same layers, weights and inputs, at 1 and 2 threads.

dlrun's side is tools/bench/convbench.c, built here against a build
directory's src/libdlrun.a: it calls the op's forward through its
descriptor on buffers allocated once (the workspace the op's shape
inference asks for), so both sides time the same thing: one forward call
of one layer, in-process, after a warm-up, excluding start-up, parsing and
allocation. PyTorch runs in this process under torch.no_grad() with
torch.set_num_threads(T); dlrun with --threads T semantics (OpenMP and
BLAS threads). Each measurement is the median of K calls; the two sides
alternate for R rounds and each keeps its best median, which damps noise
from other work on the machine (the load average is printed: numbers taken
on a busy machine are not worth much). Before timing, dlrun's output is
checked against PyTorch's (relative error in the infinity norm).

Usage: /usr/bin/python3 tools/bench/conv.py [--build DIR] [-k K] [-r R]
           [--threads 1,2] [--results FILE]
--build defaults to the current directory when it holds src/libdlrun.a;
--results writes the table as Markdown with the machine's description.
"""

import argparse
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
import torch.nn as nn

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.normpath(os.path.join(HERE, "..", ".."))

# (label, dlrun op, dlrun hyperparameters, input shape, torch module)
LAYERS = [
    ("conv2d 3x3 64->64 56x56 b1", "conv2d",
     "out_channels: 64, kernel_size: 3, padding: 1", (1, 64, 56, 56),
     lambda: nn.Conv2d(64, 64, 3, padding=1)),
    ("conv2d 3x3 64->64 56x56 b8", "conv2d",
     "out_channels: 64, kernel_size: 3, padding: 1", (8, 64, 56, 56),
     lambda: nn.Conv2d(64, 64, 3, padding=1)),
    ("conv2d 3x3 s2 64->128 56x56 b8", "conv2d",
     "out_channels: 128, kernel_size: 3, stride: 2, padding: 1",
     (8, 64, 56, 56), lambda: nn.Conv2d(64, 128, 3, stride=2, padding=1)),
    ("conv2d 1x1 256->64 56x56 b8", "conv2d",
     "out_channels: 64, kernel_size: 1", (8, 256, 56, 56),
     lambda: nn.Conv2d(256, 64, 1)),
    ("depthwise 3x3 128ch 56x56 b8", "conv2d",
     "out_channels: 128, kernel_size: 3, padding: 1, groups: 128",
     (8, 128, 56, 56), lambda: nn.Conv2d(128, 128, 3, padding=1, groups=128)),
    ("conv_transpose2d 4x4 s2 64->64 28x28 b8", "conv_transpose2d",
     "out_channels: 64, kernel_size: 4, stride: 2, padding: 1",
     (8, 64, 28, 28),
     lambda: nn.ConvTranspose2d(64, 64, 4, stride=2, padding=1)),
    ("max_pool2d 3x3 s2 64ch 56x56 b8", "max_pool2d",
     "kernel_size: 3, stride: 2, padding: 1", (8, 64, 56, 56),
     lambda: nn.MaxPool2d(3, 2, 1)),
    ("batch_norm2d 64ch 56x56 b8 (eval)", "batch_norm2d", "",
     (8, 64, 56, 56), lambda: nn.BatchNorm2d(64)),
    ("layer_norm [8, 128, 768]", "layer_norm", "", (8, 128, 768),
     lambda: nn.LayerNorm(768)),
]


def build_convbench(build, out):
    lib = os.path.join(build, "src", "libdlrun.a")
    if not os.path.exists(lib) or not os.path.exists(os.path.join(build, "config.h")):
        sys.exit("conv.py: no src/libdlrun.a and config.h in %s (configure and make "
                 "first, or give --build)" % build)
    libs = []
    for pkg in ("yaml-0.1", "jansson", "zlib", "openblas"):
        r = subprocess.run(["pkg-config", "--libs", pkg], capture_output=True,
                           text=True)
        libs += r.stdout.split() if r.returncode == 0 else []
    if not any("openblas" in x for x in libs):
        libs.append("-lopenblas")
    cmd = ["gcc", "-std=c11", "-D_POSIX_C_SOURCE=200809L", "-D_DEFAULT_SOURCE",
           "-O2", "-fopenmp", "-I" + os.path.join(SRC, "src"), "-I" + build,
           os.path.join(HERE, "convbench.c"), lib] + libs + ["-lm", "-o", out]
    subprocess.run(cmd, check=True)


def machine():
    model = platform.processor() or "unknown"
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                model = line.split(":", 1)[1].strip()
    except OSError:
        pass
    return model, os.cpu_count()


def load_average():
    try:
        with open("/proc/loadavg") as f:
            return f.read().split()[0]
    except OSError:
        return "?"


def torch_time(module, x, threads, k):
    torch.set_num_threads(threads)
    with torch.no_grad():
        for _ in range(3):
            module(x)
        ts = []
        for _ in range(k):
            t0 = time.perf_counter()
            module(x)
            ts.append(time.perf_counter() - t0)
    ts.sort()
    return ts[len(ts) // 2] * 1e3


def dlrun_time(exe, op, hps, shape, threads, k, d=None):
    cmd = [exe, op, hps, ",".join(map(str, shape)), "-t", str(threads),
           "-k", str(k)]
    if d:
        cmd += ["-d", d]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return float(out.stdout.split()[1])


def save(path, a):
    np.save(path, np.ascontiguousarray(a, dtype="<f4"), allow_pickle=False)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=".")
    ap.add_argument("-k", type=int, default=20, help="calls per measurement")
    ap.add_argument("-r", type=int, default=3, help="alternating rounds")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--results", help="write a Markdown table here")
    ap.add_argument("--only", help="run the layers whose label contains this")
    args = ap.parse_args()
    threads = [int(t) for t in args.threads.split(",")]

    tmp = tempfile.mkdtemp(prefix="convbench.")
    try:
        exe = os.path.join(tmp, "convbench")
        build_convbench(os.path.abspath(args.build), exe)
        rows = []
        print("%-40s %3s %10s %10s %7s %9s" %
              ("layer", "thr", "dlrun ms", "torch ms", "ratio", "check"))
        for label, op, hps, shape, make in LAYERS:
            if args.only and args.only not in label:
                continue
            torch.manual_seed(0)
            module = make().eval()
            if isinstance(module, nn.BatchNorm2d):
                with torch.no_grad():
                    module.running_mean.uniform_(-0.5, 0.5)
                    module.running_var.uniform_(0.5, 2.0)
            x = torch.rand(shape) * 2 - 1
            d = os.path.join(tmp, label.replace(" ", "_").replace(">", ""))
            os.makedirs(d)
            save(os.path.join(d, "x.npy"), x.numpy())
            for name, t in module.state_dict().items():
                if t.dtype.is_floating_point:
                    save(os.path.join(d, name + ".npy"), t.numpy())
            dlrun_time(exe, op, hps, shape, 1, 1, d)
            with torch.no_grad():
                ref = module(x).numpy()
            got = np.load(os.path.join(d, "y_dlrun.npy"))
            err = float(np.max(np.abs(got - ref)) / max(np.max(np.abs(ref)), 1e-30))
            if got.shape != ref.shape or not err <= 1e-4:
                sys.exit("conv.py: %s: dlrun and PyTorch disagree (shape %s vs %s, "
                         "relative error %g)" % (label, got.shape, ref.shape, err))
            for t in threads:
                best_d = best_t = float("inf")
                for _ in range(args.r):
                    best_d = min(best_d, dlrun_time(exe, op, hps, shape, t, args.k))
                    best_t = min(best_t, torch_time(module, x, t, args.k))
                ratio = best_d / best_t
                rows.append((label, t, best_d, best_t, ratio, err))
                print("%-40s %3d %10.3f %10.3f %7.2f %9.1e" %
                      (label, t, best_d, best_t, ratio, err), flush=True)
        load = load_average()
        model, ncpu = machine()
        print("machine: %s, %d CPUs; load average %s; torch %s" %
              (model, ncpu, load, torch.__version__))
        if args.results:
            with open(args.results, "w") as f:
                f.write("# Convolution benchmark: dlrun vs PyTorch\n\n")
                f.write("Written by `tools/bench/conv.py` (%s).\n\n" % " ".join(
                    ["--build BUILD", "-k %d" % args.k, "-r %d" % args.r]))
                f.write("- machine: %s, %d CPUs (`lscpu`)\n" % (model, ncpu))
                f.write("- PyTorch %s (Debian), its own kernels (oneDNN)\n" %
                        torch.__version__)
                f.write("- load average when the run ended: %s\n\n" % load)
                f.write("| layer | threads | dlrun ms | PyTorch ms | dlrun/PyTorch |\n")
                f.write("| --- | ---: | ---: | ---: | ---: |\n")
                for label, t, a, b, r, _ in rows:
                    f.write("| %s | %d | %.3f | %.3f | %.2f |\n" % (label, t, a, b, r))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
