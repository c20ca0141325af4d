#!/usr/bin/python3
"""Converts the handwritten digits shipped with scikit-learn (Debian's
python3-sklearn: sklearn/datasets/data/digits.csv.gz, 1797 8x8 images with
pixel values 0..16, label in the last column) into models/data/digits.npz:

  x       [1437, 64] float32, pixels / 16 in [0, 1]
  y       [1437]     int64, class ids 0..9
  x_val   [360, 64]  float32
  y_val   [360]      int64

The split is fixed: numpy.random.RandomState(0).permutation(1797) (the
legacy generator, whose stream NumPy keeps stable); its first 1437 indices
are the training set, the last 360 the validation set, each in permutation
order. Rows are otherwise untouched (the CSV's row-major 8x8 pixels).

The archive is written byte-stable: members stored (not deflated, ~480 KB),
in the order above, with a fixed date (1980-01-01) and permissions.

Usage: tools/digits_to_npz.py [--csv PATH] [-o OUT]  (default
models/data/digits.npz next to this tools/ directory)
"""
import argparse
import gzip
import io
import os
import sys
import zipfile

import numpy as np

N_TRAIN = 1437
SPLIT_SEED = 0


def default_csv():
    import sklearn
    return os.path.join(os.path.dirname(sklearn.__file__), "datasets", "data",
                        "digits.csv.gz")


def read_digits(path):
    with gzip.open(path, "rt") as f:
        data = np.loadtxt(f, delimiter=",", dtype=np.int64)
    if data.ndim != 2 or data.shape[1] != 65:
        sys.exit("%s: expected 65 columns (64 pixels, label), got shape %s"
                 % (path, data.shape))
    pixels, labels = data[:, :64], data[:, 64]
    if pixels.min() < 0 or pixels.max() > 16 or labels.min() < 0 or labels.max() > 9:
        sys.exit("%s: pixels must be 0..16 and labels 0..9" % path)
    return (pixels.astype(np.float32) / np.float32(16.0)), labels.astype(np.int64)


def npy_bytes(a):
    buf = io.BytesIO()
    np.save(buf, np.ascontiguousarray(a), allow_pickle=False)
    return buf.getvalue()


def write_npz(path, arrays):
    """A .npz NumPy can load, with bytes that depend only on the arrays."""
    tmp = path + ".tmp"
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_STORED) as z:
        for name, a in arrays:
            info = zipfile.ZipInfo(name + ".npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_STORED
            info.create_system = 3              # Unix, whatever runs this
            info.external_attr = 0o644 << 16
            z.writestr(info, npy_bytes(a))
    os.replace(tmp, path)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--csv", help="digits.csv.gz (default: sklearn's)")
    ap.add_argument("-o", "--output",
                    default=os.path.normpath(
                        os.path.join(here, "..", "models", "data", "digits.npz")))
    args = ap.parse_args()

    x, y = read_digits(args.csv or default_csv())
    if len(x) != 1797:
        sys.exit("expected 1797 samples, got %d" % len(x))
    perm = np.random.RandomState(SPLIT_SEED).permutation(len(x))
    tr, va = perm[:N_TRAIN], perm[N_TRAIN:]
    os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
    write_npz(args.output, [("x", x[tr]), ("y", y[tr]),
                            ("x_val", x[va]), ("y_val", y[va])])
    print("%s: %d train, %d validation samples" % (args.output, len(tr), len(va)))
    # the validation set as text too, for tests/models.sh (no Python there)
    text = os.path.join(here, "..", "tests", "data", "digits")
    os.makedirs(text, exist_ok=True)
    np.savetxt(os.path.join(text, "x_val.txt"), x[va], fmt="%.9g")
    np.savetxt(os.path.join(text, "y_val.txt"), y[va], fmt="%d")


if __name__ == "__main__":
    main()
