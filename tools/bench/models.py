#!/usr/bin/python3
"""Whole models, dlrun against PyTorch, in one run: the example models of
models/ (the MLP of the quick start, LeNet-5, the ResNet and MobileNet
blocks, the small U-Net) with the same weights, timed in process on both
sides:

  dlrun:   `dlrun bench MODEL --json` (median of K forward passes after a
           warm-up; with --train, forward + backward + an Adam step)
  PyTorch: the same module (tools/gen_models.py, tools/gen_example_models.py)
           in eval mode under torch.no_grad(), median of K calls after the
           same warm-up; with --train, train mode, forward, a backward of a
           fixed output gradient, and torch.optim.Adam's step

at 1 and 2 threads, and prints milliseconds and the dlrun/PyTorch ratio
(below 1: dlrun is faster). It also prints each side's process start-up to
a first answer (`dlrun infer` vs `python3 -c 'import torch ...'`), since for
small models that is what a user waits for.

Usage: /usr/bin/python3 tools/bench/models.py [--dlrun PATH] [-k K] [--train]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(TOP, "tools"))

import dltools  # noqa: E402
import gen_example_models  # noqa: E402
import gen_models  # noqa: E402

# name, PyTorch builder, per-sample input shape, batch sizes
MODELS = [
    ("mlp", gen_models.mlp, [16], [1, 64]),
    ("lenet5", gen_example_models.lenet5, None, [1, 16]),
    ("resnet-block", gen_example_models.resnet_block, None, [1, 8]),
    ("mobilenet-block", gen_example_models.mobilenet_block, None, [1, 8]),
    ("unet-small", gen_example_models.unet_small, None, [1, 4]),
]


def torch_model(name, build):
    m = build()
    state = {k: torch.from_numpy(v.copy()) for k, v in
             dltools.read_safetensors(os.path.join(TOP, "models", name + ".safetensors")).items()}
    m.load_state_dict(state, strict=False)
    return m


def input_shape(name, shape):
    if shape is not None:
        return shape
    return list(gen_example_models.MODELS[name][1])


def time_torch(m, x, k, train):
    if train:
        m.train()
        opt = torch.optim.Adam(m.parameters(), lr=1e-6)
        y = m(x)
        g = torch.full_like(y, 1.0 / y.numel())

        def step():
            opt.zero_grad(set_to_none=False)
            out = m(x)
            out.backward(g)
            opt.step()
    else:
        m.eval()

        def step():
            with torch.no_grad():
                m(x)
    for _ in range(3):
        step()
    times = []
    for _ in range(k):
        t0 = time.perf_counter()
        step()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def time_dlrun(dlrun, name, batch, k, threads, train):
    cmd = [dlrun, "bench", os.path.join(TOP, "models", name + ".yaml"),
           "-b", str(batch), "-k", str(k), "--threads", str(threads), "--json"]
    if train:
        cmd.append("--train")
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out)["median_ms"]


def startup(dlrun):
    """Wall time of one whole process answering one MLP input."""
    x = os.path.join(TOP, "models", "mlp-input.npy")
    y = os.devnull
    t0 = time.perf_counter()
    subprocess.run([dlrun, "infer", os.path.join(TOP, "models", "mlp.yaml"), "-i", x,
                    "-o", "-"], check=True, stdout=subprocess.DEVNULL)
    d = time.perf_counter() - t0
    script = ("import torch, numpy, sys; sys.path.insert(0, %r); import gen_models, dltools;"
              "m = gen_models.mlp(); m.eval();"
              "print(m(torch.from_numpy(numpy.load(%r))).shape)") % (
                  os.path.join(TOP, "tools"), x)
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", script], check=True, stdout=subprocess.DEVNULL)
    p = time.perf_counter() - t0
    del y
    return d * 1e3, p * 1e3


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dlrun", default=os.path.join(TOP, "src", "dlrun"))
    ap.add_argument("-k", type=int, default=50)
    ap.add_argument("--train", action="store_true")
    args = ap.parse_args()
    what = "training step (forward + backward + Adam)" if args.train else "forward"
    print("| model | batch | threads | dlrun ms | PyTorch ms | dlrun/PyTorch |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for name, build, shape, batches in MODELS:
        m = torch_model(name, build)
        for batch in batches:
            x = torch.rand([batch] + input_shape(name, shape),
                           generator=torch.Generator().manual_seed(0))
            for threads in (1, 2):
                torch.set_num_threads(threads)
                t = time_torch(m, x, args.k, args.train)
                d = time_dlrun(args.dlrun, name, batch, args.k, threads, args.train)
                print("| %s | %d | %d | %.3f | %.3f | %.2f |" % (name, batch, threads, d, t, d / t))
                sys.stdout.flush()
    d, p = startup(args.dlrun)
    print("\n%s; medians of %d after 3 warm-up iterations." % (what, args.k))
    print("Process start-up to a first answer (the MLP on 3 samples): dlrun %.0f ms, "
          "python3 + torch %.0f ms." % (d, p))


if __name__ == "__main__":
    main()
