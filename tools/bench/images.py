#!/usr/bin/python3
"""Image loading speed: dlrun's decode + augment pipeline against
torchvision's DataLoader with the same transforms and workers.

Writes N JPEGs (500x375, two classes, an ImageFolder) into a temporary
directory, then per thread count T:
  - dlrun: `dlrun train` of a model whose step costs next to nothing
    (avg_pool2d over the whole 224x224 image, then a linear layer), with
    data: train: [random_resized_crop 224, horizontal_flip, to_float,
    normalize], --threads T, 2 epochs, batch 32: images per second of the
    whole process (start-up included);
  - torchvision: ImageFolder with RandomResizedCrop(224),
    RandomHorizontalFlip(), ToTensor(), Normalize(...) (Pillow decodes;
    its resize is antialiased), DataLoader(batch_size=32, shuffle=True,
    num_workers=T), 2 epochs iterated: images per second;
and the same for the evaluation pipeline (resize 256, center_crop 224).

Usage: /usr/bin/python3 tools/bench/images.py [--dlrun src/dlrun] [-n 256]
Needs python3-torchvision and python3-pil.
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

MEAN = "[0.485, 0.456, 0.406]"
STD = "[0.229, 0.224, 0.225]"


def make_images(root, n):
    from PIL import Image
    rng = np.random.default_rng(0)
    y, x = np.mgrid[0:375, 0:500]
    for i in range(n):
        cls = "ab"[i % 2]
        os.makedirs(os.path.join(root, cls), exist_ok=True)
        a, b, c = rng.uniform(0.01, 0.05, 3)
        img = np.stack([np.sin(a * x + i), np.cos(b * y), np.sin(c * (x + y))], -1)
        img = ((img + 1) * 127.5 + rng.normal(0, 8, img.shape)).clip(0, 255).astype(np.uint8)
        Image.fromarray(img).save(os.path.join(root, cls, "%04d.jpg" % i), quality=90)


def dlrun_rate(dlrun, root, steps, threads, n, tmp):
    model = os.path.join(tmp, "m.yaml")
    with open(model, "w") as f:
        f.write("inputs: {x: {shape: [3, 224, 224]}}\n"
                "data: {image: [resize: 256, center_crop: 224, to_float: {}, normalize: "
                "{mean: %s, std: %s}], train: [%s, to_float: {}, normalize: {mean: %s, "
                "std: %s}]}\n"
                "layers: [avg_pool2d: {kernel_size: 224}, flatten, linear: {out_features: 2}]\n"
                % (MEAN, STD, steps, MEAN, STD))
    t0 = time.perf_counter()
    subprocess.run([dlrun, "train", model, "--data", root, "--epochs", "2", "--batch-size",
                    "32", "--threads", str(threads), "-q", "-o",
                    os.path.join(tmp, "m.safetensors")], check=True)
    return 2 * n / (time.perf_counter() - t0)


def torch_rate(root, train, threads, n):
    import torch
    import torchvision.transforms as T
    from torchvision.datasets import ImageFolder
    norm = T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])
    if train:
        tf = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(), norm])
    else:
        tf = T.Compose([T.Resize(256), T.CenterCrop(224), T.ToTensor(), norm])
    torch.set_num_threads(1)
    dl = torch.utils.data.DataLoader(ImageFolder(root, tf), batch_size=32, shuffle=True,
                                     num_workers=threads)
    t0 = time.perf_counter()
    for _ in range(2):
        for x, y in dl:
            pass
    return 2 * n / (time.perf_counter() - t0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dlrun", default=os.path.join(os.path.dirname(__file__), "..", "..",
                                                     "src", "dlrun"))
    ap.add_argument("-n", type=int, default=256)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = os.path.join(tmp, "imgs")
        make_images(root, a.n)
        print("| pipeline | threads | dlrun images/s | torchvision images/s | dlrun/torchvision |")
        print("| --- | ---: | ---: | ---: | ---: |")
        for name, steps, train in (
                ("train: random_resized_crop 224, flip", "random_resized_crop: {size: 224}, "
                 "horizontal_flip: 0.5", True),
                ("eval: resize 256, center_crop 224", None, False)):
            for th in (1, 2):
                d = dlrun_rate(a.dlrun, root, steps or "resize: 256, center_crop: 224", th,
                               a.n, tmp)
                t = torch_rate(root, train, th, a.n)
                print("| %s | %d | %.0f | %.0f | %.2f |" % (name, th, d, t, d / t))
                sys.stdout.flush()


if __name__ == "__main__":
    main()
