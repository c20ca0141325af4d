#!/usr/bin/python3
"""Writes the handwritten digits of models/data/digits.npz
(tools/digits_to_npz.py) as PNG files in torchvision's ImageFolder layout,
for `dlrun train --data DIR` and `dlrun infer MODEL FILES --top 3`:

  OUT/train/<digit>/<index>.png   1437 8x8 gray images
  OUT/val/<digit>/<index>.png     360

Pixels are round(x * 255) of the archive's x in [0, 1]. The PNGs are
written by hand (zlib), so the tool needs numpy only.

Usage: tools/digits_to_pngs.py [OUT]   (default: digits)
"""
import os
import struct
import sys
import zlib

import numpy as np


def png(px):
    """An 8-bit gray PNG of the uint8 array px [h, w]."""
    def chunk(kind, data):
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))
    h, w = px.shape
    raw = b"".join(b"\0" + row.tobytes() for row in px)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 0, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "digits"
    here = os.path.dirname(os.path.abspath(__file__))
    d = np.load(os.path.join(here, "..", "models", "data", "digits.npz"))
    for part, x, y in (("train", d["x"], d["y"]), ("val", d["x_val"], d["y_val"])):
        for i, (row, label) in enumerate(zip(x, y)):
            folder = os.path.join(out, part, str(int(label)))
            os.makedirs(folder, exist_ok=True)
            px = np.rint(row.reshape(8, 8) * 255).astype(np.uint8)
            with open(os.path.join(folder, "%04d.png" % i), "wb") as f:
                f.write(png(px))
    print("wrote", out + "/train and", out + "/val")


if __name__ == "__main__":
    main()
