"""Byte-stable writers for the files dlrun reads: safetensors weights and
.npy tensor streams. Shared by gen_fixtures.py and gen_models.py; needs only
numpy (not the safetensors package), so the output depends on nothing but
the arrays given."""

import json
import struct

import numpy as np


def as_f32(a):
    """A C-ordered little-endian float32 copy of a (numpy array or torch tensor)."""
    if hasattr(a, "detach"):
        a = a.detach().cpu().numpy()
    return np.ascontiguousarray(np.asarray(a), dtype="<f4")


def safetensors_bytes(tensors):
    """The safetensors file for tensors (name -> array), all stored as F32.

    The header is compact JSON with the names in sorted order, padded with
    spaces so that the data starts at a multiple of 8; the data tiles the
    buffer in the same order. Same arrays, same bytes."""
    header = {}
    chunks = []
    offset = 0
    for name in sorted(tensors):
        data = as_f32(tensors[name]).tobytes()
        header[name] = {"dtype": "F32",
                        "shape": list(np.shape(tensors[name])),
                        "data_offsets": [offset, offset + len(data)]}
        chunks.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":"), sort_keys=True,
                      ensure_ascii=True).encode("ascii")
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(chunks)


def write_safetensors(path, tensors):
    with open(path, "wb") as f:
        f.write(safetensors_bytes(tensors))


def read_safetensors(path):
    """name -> float32 array; a minimal reader for checking our own files."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    body = raw[8 + n:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        assert info["dtype"] == "F32", (name, info["dtype"])
        b, e = info["data_offsets"]
        out[name] = np.frombuffer(body[b:e], dtype="<f4").reshape(info["shape"])
    return out


def write_npys(path, arrays):
    """arrays back to back as .npy version 1.0, float32 '<f4' (a dlrun stream)."""
    with open(path, "wb") as f:
        for a in arrays:
            np.lib.format.write_array(f, as_f32(a), version=(1, 0),
                                      allow_pickle=False)


def read_npys(path):
    """Every array of a back-to-back .npy file, in order."""
    out = []
    with open(path, "rb") as f:
        end = f.seek(0, 2)
        f.seek(0)
        while f.tell() < end:
            out.append(np.load(f, allow_pickle=False))
    return out
