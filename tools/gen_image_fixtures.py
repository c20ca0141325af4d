#!/usr/bin/python3
"""Fixtures for tests/images.sh: tiny PNG (gray, RGB, RGBA, palette with
transparency, 16-bit) and JPEG files, the pixels torchvision.io.read_image
decodes from them, and the tensors after each `data:` pipeline step as
torchvision's transforms on a uint8 tensor give them (resize with
antialias=True). Also an ImageFolder of gray PNGs with the equivalent .npz,
and a small classifier with a classes file for `infer --top`.

Needs Debian's python3-torchvision (and python3-pil for the JPEG encoder).
PNGs are written by hand (zlib), so their bytes depend on nothing else.

Usage: /usr/bin/python3 tools/gen_image_fixtures.py [OUTDIR]
(default tests/data/images)."""

import os
import struct
import sys
import zlib

import numpy as np
import torch
import torchvision
import torchvision.transforms.functional as TF
from torchvision.io import ImageReadMode, read_image
from PIL import Image

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dltools  # noqa: E402

OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "images")


def chunk(kind, data):
    body = kind + data
    return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body) & 0xffffffff)


def png_bytes(rows, color_type, bit_depth=8, plte=None, trns=None):
    """rows: [h][bytes of one row] (already packed)."""
    h = len(rows)
    w_bytes = len(rows[0])
    channels = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}[color_type]
    w = w_bytes * 8 // (bit_depth * channels)
    raw = b"".join(b"\0" + bytes(r) for r in rows)
    out = b"\x89PNG\r\n\x1a\n"
    out += chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, bit_depth, color_type, 0, 0, 0))
    if plte is not None:
        out += chunk(b"PLTE", bytes(plte))
    if trns is not None:
        out += chunk(b"tRNS", bytes(trns))
    out += chunk(b"IDAT", zlib.compress(raw, 9))
    out += chunk(b"IEND", b"")
    return out


def write(name, data):
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(data)


def save_flat(name, t):
    """t (a tensor [C, H, W]) as one [1, C*H*W] float32 array, what a
    `flatten` model gives for it."""
    a = np.asarray(t, dtype=np.float32).reshape(1, -1)
    dltools.write_npys(os.path.join(OUT, name), [a])


def main():
    os.makedirs(OUT, exist_ok=True)
    rng = np.random.default_rng(7)

    # ---- decoding ----
    gray = rng.integers(0, 256, (7, 5), dtype=np.uint8)
    write("gray.png", png_bytes([r.tobytes() for r in gray], 0))
    rgb = rng.integers(0, 256, (5, 6, 3), dtype=np.uint8)
    write("rgb.png", png_bytes([r.tobytes() for r in rgb], 2))
    rgba = rng.integers(0, 256, (4, 6, 4), dtype=np.uint8)
    write("rgba.png", png_bytes([r.tobytes() for r in rgba], 6))
    pal = rng.integers(0, 256, (4, 3), dtype=np.uint8)
    idx = rng.integers(0, 4, (6, 5), dtype=np.uint8)
    write("palette.png", png_bytes([r.tobytes() for r in idx], 3, plte=pal.tobytes(),
                                   trns=[255, 0, 128]))
    rgb16 = rng.integers(0, 65536, (3, 4, 3), dtype=np.uint16)
    write("rgb16.png", png_bytes([r.astype(">u2").tobytes() for r in rgb16], 2, 16))

    def decoded(name, mode):
        return read_image(os.path.join(OUT, name), mode)

    save_flat("gray.npy", decoded("gray.png", ImageReadMode.UNCHANGED))
    save_flat("rgb.npy", decoded("rgb.png", ImageReadMode.UNCHANGED))
    save_flat("rgba.npy", decoded("rgba.png", ImageReadMode.RGB))
    # a gray image for a 3-channel input: repeated, as ImageReadMode.RGB
    save_flat("gray_rgb.npy", decoded("gray.png", ImageReadMode.RGB))
    save_flat("palette.npy", decoded("palette.png", ImageReadMode.RGB))
    # 16-bit: libpng's scaling to 8 bits, round(v * 255 / 65535) (the man
    # page's rule; torchvision 0.14 reads 16-bit PNGs as int32)
    s16 = np.floor(rgb16.astype(np.float64) * 255 / 65535 + 0.5).astype(np.uint8)
    save_flat("rgb16.npy", torch.from_numpy(s16).permute(2, 0, 1))

    # JPEG: 4:2:0 chroma (fancy upsampling matters), odd sizes
    y, x = np.mgrid[0:13, 0:17]
    photo = np.stack([(x * 15) % 256, (y * 19) % 256, ((x + y) * 7) % 256], -1).astype(np.uint8)
    Image.fromarray(photo, "RGB").save(os.path.join(OUT, "photo.jpg"), quality=90,
                                       subsampling=2)
    Image.fromarray(gray, "L").save(os.path.join(OUT, "gray.jpg"), quality=95)
    save_flat("photo.npy", decoded("photo.jpg", ImageReadMode.UNCHANGED))
    save_flat("gray_jpg.npy", decoded("gray.jpg", ImageReadMode.UNCHANGED))
    # Pillow decodes the same pixels (libjpeg-turbo, islow, fancy upsampling)
    pil = np.array(Image.open(os.path.join(OUT, "photo.jpg")).convert("RGB"))
    assert (torch.from_numpy(pil).permute(2, 0, 1) == decoded("photo.jpg", ImageReadMode.RGB)).all()

    # ---- pipeline steps on a 30x40 RGB image ----
    big = np.clip(rng.normal(128, 60, (30, 40, 3)), 0, 255).astype(np.uint8)
    big[8:20, 10:25] = [250, 10, 90]
    write("big.png", png_bytes([r.tobytes() for r in big], 2))
    t = read_image(os.path.join(OUT, "big.png"))
    f = lambda u: u.float() / 255  # noqa: E731  (to_float)
    save_flat("resize16.npy", f(TF.resize(t, 16, antialias=True)))
    save_flat("resize_45x20.npy", f(TF.resize(t, [45, 20], antialias=True)))
    save_flat("crop11.npy", f(TF.center_crop(t, 11)))
    save_flat("crop9x14.npy", f(TF.center_crop(t, [9, 14])))
    save_flat("crop33x44.npy", f(TF.center_crop(t, [33, 44])))
    save_flat("flip.npy", f(TF.hflip(t)))
    save_flat("gray_step.npy", f(TF.rgb_to_grayscale(t)))
    # random_resized_crop whose 10 draws all fail (ratio 2 cannot fit at
    # scale 1): torchvision's fallback, a center crop of ratio 2, resized
    rrc = torchvision.transforms.RandomResizedCrop([10, 20], scale=(1.0, 1.0), ratio=(2.0, 2.0),
                                                   antialias=True)
    save_flat("rrc_fallback.npy", f(rrc(t)))
    mean, std = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
    save_flat("normalize.npy", TF.normalize(f(t), mean, std))
    full = TF.normalize(f(TF.center_crop(TF.resize(t, 20, antialias=True), 16)), mean, std)
    save_flat("full.npy", full)

    # ---- an ImageFolder of 3 classes, 3 gray 6x6 PNGs each, and its .npz ----
    xs, ys = [], []
    for c, cls in enumerate(["ant", "bee", "cat"]):
        os.makedirs(os.path.join(OUT, "folder", cls), exist_ok=True)
        for i in range(3):
            px = rng.integers(0, 256, (6, 6), dtype=np.uint8)
            px[:, c * 2:c * 2 + 2] = 255
            write(os.path.join("folder", cls, "%d.png" % i), png_bytes([r.tobytes() for r in px], 0))
            xs.append(px.astype(np.float32)[None] / np.float32(255))
            ys.append(c)
    x = np.stack(xs).astype("<f4")
    y = np.array(ys, dtype="<i8")
    np.savez(os.path.join(OUT, "folder.npz"), x=x, y=y)
    with open(os.path.join(OUT, "folder.txt"), "w") as fl:
        for c, cls in enumerate(["ant", "bee", "cat"]):
            for i in range(3):
                fl.write("folder/%s/%d.png %d\n" % (cls, i, c))

    # ---- a classifier of 4x4 RGB images into 5 classes, for --top ----
    torch.manual_seed(0)
    lin = torch.nn.Linear(48, 5)
    dltools.write_safetensors(os.path.join(OUT, "top.safetensors"),
                              {"1.weight": lin.weight, "1.bias": lin.bias})
    with open(os.path.join(OUT, "top-classes.txt"), "w") as fc:
        fc.write("apple\nbanana\ncherry\ndate\nelder\n")
    probs = []
    for name in ["rgb.png", "big.png"]:
        u = read_image(os.path.join(OUT, name))
        v = f(TF.center_crop(TF.resize(u, 4, antialias=True), 4))
        p = torch.softmax(lin(v.reshape(1, -1)), -1)[0]
        top = torch.topk(p, 3)
        for pr, i in zip(top.values, top.indices):
            probs.append("%s\t%s\t%.6f" % (name, ["apple", "banana", "cherry", "date", "elder"][i], pr))
    with open(os.path.join(OUT, "top3.txt"), "w") as ft:
        ft.write("\n".join(probs) + "\n")
    print("torchvision", torchvision.__version__, "->", OUT)


if __name__ == "__main__":
    main()
