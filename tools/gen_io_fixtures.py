#!/usr/bin/python3
"""Writes the small files the I/O tests read: tests/data/io/ (arrays written
by NumPy itself, .npz archives, a safetensors file of every converted dtype)
and tests/bad/ (malformed files that `dlrun infer` must reject with exit 2).
Byte-stable: run it twice and nothing changes (zip dates are fixed).

Usage: /usr/bin/python3 tools/gen_io_fixtures.py [SRCDIR]
"""
import io
import json
import os
import struct
import sys
import zipfile

import numpy as np

SRC = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
DATA = os.path.join(SRC, "tests", "data", "io")
BAD = os.path.join(SRC, "tests", "bad")


def put(path, data):
    with open(path, "wb") as f:
        f.write(data)


def npy(arr, version=None):
    b = io.BytesIO()
    np.lib.format.write_array(b, arr, version=version, allow_pickle=False)
    return b.getvalue()


def npz(path, arrays, compress, zip64_everywhere=False):
    """As np.savez / np.savez_compressed, but with a fixed date."""
    saved = zipfile.ZIP64_LIMIT
    if zip64_everywhere:
        # sizes and offsets above the limit go to zip64 extra fields and a
        # zip64 end record: the paths huge archives take, on a tiny file
        zipfile.ZIP64_LIMIT = 0
    try:
        b = io.BytesIO()
        method = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
        with zipfile.ZipFile(b, "w", method) as z:
            for name, arr in arrays.items():
                info = zipfile.ZipInfo(name + ".npy", date_time=(1980, 1, 1, 0, 0, 0))
                info.compress_type = method
                with z.open(info, "w", force_zip64=True) as f:
                    f.write(npy(arr))
    finally:
        zipfile.ZIP64_LIMIT = saved
    put(path, b.getvalue())
    with np.load(path) as check:  # NumPy must read it back
        for name, arr in arrays.items():
            assert np.array_equal(check[name], arr)


def safetensors(tensors, metadata=None):
    """tensors: list of (name, dtype, shape, raw bytes), laid out in order."""
    header, blobs, at = {}, [], 0
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": list(shape),
                        "data_offsets": [at, at + len(raw)]}
        blobs.append(raw)
        at += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(blobs)


def bf16_bits(values):
    """Round-to-nearest-even float32 -> bfloat16 bits, as torch does."""
    u = np.asarray(values, dtype="<f4").view("<u4").astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return u.astype("<u2")


def main():
    os.makedirs(DATA, exist_ok=True)
    os.makedirs(BAD, exist_ok=True)
    a23 = np.arange(6, dtype="<f4").reshape(2, 3) - 2.5  # -2.5 .. 2.5

    # what dlrun's writer must produce byte for byte
    put(f"{DATA}/write_2x3.npy", npy(a23))
    put(f"{DATA}/write_3.npy", npy(np.array([1, 2, 3], "<f4")))
    put(f"{DATA}/write_0d.npy", npy(np.array(3.5, "<f4")))
    put(f"{DATA}/write_0x3.npy", npy(np.zeros((0, 3), "<f4")))
    put(f"{DATA}/write_4d.npy", npy(np.zeros((1, 2, 1, 2), "<f4")))
    put(f"{DATA}/write_12345x0.npy", npy(np.zeros((12345, 0), "<f4")))

    # every readable dtype, as NumPy writes it; values checked in check_io.c
    put(f"{DATA}/f8.npy", npy(np.array([[0.5, -1.25, 3.0], [1e-3, 2.5, -7.0]], "<f8")))
    put(f"{DATA}/i4.npy", npy(np.array([-2147483648, -1, 0, 1, 2147483647], "<i4")))
    put(f"{DATA}/i8.npy", npy(np.array([-(2**62), -1, 0, 2**40 + 1], "<i8")))
    put(f"{DATA}/u1.npy", npy(np.array([0, 1, 127, 128, 255], "u1")))
    put(f"{DATA}/f2.npy", npy(np.array([1.0, -2.0, 65504.0, 2.0**-24, 2.0**-14,
                                        np.inf, -np.inf, 0.0, -0.0, np.nan], "<f2")))
    put(f"{DATA}/v2.npy", npy(a23, version=(2, 0)))
    put(f"{DATA}/v3.npy", npy(a23, version=(3, 0)))
    put(f"{DATA}/fortran.npy",
        npy(np.asfortranarray(np.arange(24, dtype="<f4").reshape(2, 3, 4))))
    put(f"{DATA}/fortran_i8.npy",
        npy(np.asfortranarray(np.arange(6, dtype="<i8").reshape(2, 3))))

    arrays = {"x": a23, "y": np.array([3, 1, 4, 1], "<i8")}
    npz(f"{DATA}/stored.npz", arrays, compress=False)
    npz(f"{DATA}/deflated.npz", arrays, compress=True)
    npz(f"{DATA}/zip64.npz", arrays, compress=True, zip64_everywhere=True)

    f16 = np.array([[1.0, -2.0, 65504.0], [2.0**-24, np.inf, np.nan]], "<f2")
    put(f"{DATA}/dtypes.safetensors", safetensors([
        ("f16", "F16", (2, 3), f16.tobytes()),
        ("bf16", "BF16", (3,), bf16_bits([1.0, -3.0e38, 0.1]).tobytes()),
        ("f64", "F64", (2,), np.array([0.1, -1e300], "<f8").tobytes()),
        ("i32", "I32", (2,), np.array([-7, 9], "<i4").tobytes()),
        ("flags", "BOOL", (3,), bytes([1, 0, 1])),
        ("empty", "F32", (0, 4), b""),
        ("scalar", "F32", (), np.array(2.5, "<f4").tobytes()),
    ], metadata={"format": "pt", "note": "dtypes"}))

    # tests/bad: each makes `dlrun infer` exit 2
    good = npy(a23)
    put(f"{BAD}/bad_magic.npy", b"\x93NUMPZ" + good[6:])
    put(f"{BAD}/bad_dtype.npy", npy(np.array([1 + 2j, 3 - 4j], "<c8")))
    put(f"{BAD}/truncated.npy", good[:len(good) - 24 + 10])
    w = np.arange(6, dtype="<f4").tobytes()
    put(f"{BAD}/truncated.safetensors",
        safetensors([("w", "F32", (2, 3), w)])[:-14])
    hdr = safetensors([("w", "F32", (2, 3), w)])
    put(f"{BAD}/header_beyond.safetensors", struct.pack("<Q", 1000) + hdr[8:])
    text = json.dumps({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
                       "b": {"dtype": "F32", "shape": [4], "data_offsets": [8, 24]}},
                      separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    put(f"{BAD}/overlap.safetensors",
        struct.pack("<Q", len(text)) + text + np.arange(6, dtype="<f4").tobytes())


if __name__ == "__main__":
    main()
