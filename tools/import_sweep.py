#!/usr/bin/python3
"""The torchvision sweep of `dlrun import`: every classification model of
torchvision 0.14 and the video classifier r3d_18, random weights (seed 0) in eval mode with batch-norm
statistics that are not the identity, exported as
tools/check_import_torchvision.sh does (torch.onnx.export, opset 17,
dynamic batch), imported, run by `dlrun infer` on a batch of 2 and compared
with PyTorch (float64) by tests/npycmp within 1e-4 relative. Each model at
the smallest input size it accepts (or its fixed size), to keep it fast.

Prints one line per model:
  MODEL SIZE: ok (max rel err E; N entries; import I s, infer T s)
  MODEL SIZE: unsupported: <dlrun's one-line error>
  MODEL SIZE: export failed / infer failed / MISMATCH ...

Usage (from a built tree):
  /usr/bin/python3 tools/import_sweep.py [MODEL...]
Environment: DLRUN (default src/dlrun), NPYCMP (default tests/npycmp),
KEEP=DIR keeps the ONNX, model and array files in DIR. Exit status 1 when
any model is not ok. Needs Debian's python3-torch and python3-torchvision.
"""

import io
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
import torchvision

# (constructor, input size): the smallest size each accepts. alexnet's and
# the vggs' adaptive average pools must divide their input (the exporter
# refuses 1 -> 6 or 1 -> 7), so they take 224; inception_v3 needs 75;
# vit_b_16, swin_t and maxvit_t have fixed sizes.
MODELS = [
    ("alexnet", 224),
    ("vgg11", 224),
    ("vgg11_bn", 224),
    ("vgg16", 224),
    ("squeezenet1_0", 64),
    ("squeezenet1_1", 64),
    ("shufflenet_v2_x0_5", 64),
    ("shufflenet_v2_x1_0", 64),
    ("googlenet", 64),
    ("inception_v3", 75),
    ("mnasnet0_5", 64),
    ("mnasnet1_0", 64),
    ("mobilenet_v2", 64),
    ("mobilenet_v3_small", 64),
    ("mobilenet_v3_large", 64),
    ("regnet_x_400mf", 64),
    ("regnet_y_400mf", 64),
    ("resnet18", 64),
    ("resnet50", 64),
    ("resnext50_32x4d", 64),
    ("wide_resnet50_2", 64),
    ("densenet121", 64),
    ("efficientnet_b0", 64),
    ("efficientnet_b1", 64),
    ("efficientnet_v2_s", 64),
    ("convnext_tiny", 64),
    ("vit_b_16", 224),
    ("swin_t", 224),
    ("maxvit_t", 224),
    # a video classifier (3-D convolutions): 4 frames of SIZE x SIZE
    ("r3d_18", 32),
]


def save_npy(path, a):
    buf = io.BytesIO()
    np.save(buf, a)
    with open(path, "wb") as f:
        f.write(buf.getvalue())


def export(name, size, out):
    """Writes out/NAME.onnx, NAME-input.npy and NAME-expected.npy."""
    torch.manual_seed(0)
    video = not hasattr(torchvision.models, name)
    ns = torchvision.models.video if video else torchvision.models
    model = getattr(ns, name)(weights=None).eval()
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        # batch-norm statistics that are not the identity
        for mod in model.modules():
            if isinstance(mod, (torch.nn.BatchNorm2d, torch.nn.BatchNorm3d)):
                mod.running_mean.copy_(torch.randn(mod.num_features, generator=g) * 0.1)
                mod.running_var.copy_(torch.rand(mod.num_features, generator=g) + 0.5)
        # parameters initialised to one value (ViT's zero head, ConvNeXt's
        # layer scale 1e-6) would hide what they multiply: spread them
        for p in model.parameters():
            if p.numel() > 1 and bool((p == p.flatten()[0]).all()):
                p.add_(torch.randn(p.shape, generator=g) * 0.1)
    x = torch.randn((2, 3) + ((4,) if video else ()) + (size, size), generator=g)
    torch.onnx.export(model, x, os.path.join(out, name + ".onnx"), opset_version=17,
                      input_names=["x"], output_names=["y"],
                      dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}})
    with torch.no_grad():
        y = model.double()(x.double()).float()
    save_npy(os.path.join(out, name + "-input.npy"), x.numpy())
    save_npy(os.path.join(out, name + "-expected.npy"), y.numpy())


def last_line(text):
    lines = [l for l in text.strip().splitlines() if l.strip()]
    return lines[-1] if lines else ""


def sweep_one(name, size, out, dlrun, npycmp):
    tag = "%s %d" % (name, size)
    try:
        import contextlib
        with open(os.path.join(out, name + ".export.log"), "w") as log, \
                contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
            export(name, size, out)
    except Exception as e:  # the exporter's own refusals
        return False, "%s: export failed: %s" % (tag, last_line(str(e)) or type(e).__name__)
    onnx = os.path.join(out, name + ".onnx")
    yaml = os.path.join(out, name + ".yaml")
    t0 = time.time()
    p = subprocess.run([dlrun, "import", onnx, "-o", yaml], capture_output=True, text=True)
    t_imp = time.time() - t0
    if p.returncode != 0:
        msg = last_line(p.stderr).replace(onnx + ": ", "")
        return False, "%s: unsupported: %s" % (tag, msg)
    t0 = time.time()
    with open(os.path.join(out, name + "-input.npy"), "rb") as fi, \
            open(os.path.join(out, name + "-out.npy"), "wb") as fo:
        p = subprocess.run([dlrun, "infer", yaml], stdin=fi, stdout=fo,
                           stderr=subprocess.PIPE, text=True)
    t_inf = time.time() - t0
    if p.returncode != 0:
        return False, "%s: infer failed: %s" % (tag, last_line(p.stderr))
    p = subprocess.run([npycmp, os.path.join(out, name + "-out.npy"),
                        os.path.join(out, name + "-expected.npy"), "1e-4"],
                       capture_output=True, text=True)
    m = re.search(r"rel_err (\S+)", p.stdout)
    err = m.group(1) if m else "?"
    with open(yaml) as f:
        entries = sum(1 for l in f if l.startswith("  - name:"))
    if p.returncode != 0:
        return False, "%s: MISMATCH: max rel err %s (%s)" % (tag, err, last_line(p.stdout + p.stderr))
    return True, "%s: ok (max rel err %s; %d entries; import %.1f s, infer %.1f s)" % (
        tag, err, entries, t_imp, t_inf)


def main():
    top = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    dlrun = os.environ.get("DLRUN", os.path.join(top, "src", "dlrun"))
    npycmp = os.environ.get("NPYCMP", os.path.join(top, "tests", "npycmp"))
    want = sys.argv[1:]
    sizes = dict(MODELS)
    for w in want:
        if w not in sizes and not hasattr(torchvision.models, w):
            print("%s: no such torchvision model" % w)
            return 2
    todo = [(w, sizes.get(w, 64)) for w in want] if want else MODELS
    keep = os.environ.get("KEEP")
    out = keep or tempfile.mkdtemp(prefix="dlrun-sweep.")
    os.makedirs(out, exist_ok=True)
    torch.set_num_threads(int(os.environ.get("THREADS", "2")))
    bad = 0
    try:
        for name, size in todo:
            ok, line = sweep_one(name, size, out, dlrun, npycmp)
            bad += not ok
            print(line, flush=True)
            if not keep:
                for f in os.listdir(out):
                    if f.startswith(name + ".") or f.startswith(name + "-"):
                        os.remove(os.path.join(out, f))
    finally:
        if not keep:
            shutil.rmtree(out, ignore_errors=True)
    print("%d of %d ok" % (len(todo) - bad, len(todo)))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
