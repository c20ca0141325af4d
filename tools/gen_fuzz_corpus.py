#!/usr/bin/python3
"""Writes the binary seed inputs of tests/fuzz/corpus/ (npy, npz,
safetensors, infer): small, deterministic. Run from the top directory."""
import io
import json
import struct

import numpy as np

C = 'tests/fuzz/corpus/'


def st(tensors, meta=None):
    h, data = {}, b''
    if meta:
        h['__metadata__'] = meta
    for name, (dt, shape, raw) in tensors.items():
        h[name] = {'dtype': dt, 'shape': shape,
                   'data_offsets': [len(data), len(data) + len(raw)]}
        data += raw
    j = json.dumps(h).encode()
    j += b' ' * ((8 - len(j) % 8) % 8)
    return struct.pack('<Q', len(j)) + j + data


np.save(C + 'npy/f4.npy', np.arange(6, dtype=np.float32).reshape(2, 3))
np.save(C + 'npy/i8.npy', np.arange(3, dtype=np.int64))
np.save(C + 'npy/f8_fortran.npy',
        np.asfortranarray(np.arange(6, dtype=np.float64).reshape(2, 3)))
b = io.BytesIO()
np.save(b, np.zeros((1, 2), np.float32))
np.save(b, np.ones((3,), np.uint8))
open(C + 'npy/two.npy', 'wb').write(b.getvalue())
np.savez(C + 'npz/stored.npz', x=np.zeros((2, 3), np.float32), y=np.arange(2))
np.savez_compressed(C + 'npz/deflated.npz', x=np.ones((2, 2), np.float32),
                    y_val=np.arange(3, dtype=np.int32))
open(C + 'safetensors/f32.safetensors', 'wb').write(st({
    '0.weight': ('F32', [2, 3], np.arange(6, dtype=np.float32).tobytes()),
    '0.bias': ('F32', [2], np.zeros(2, np.float32).tobytes())}, {'format': 'pt'}))
open(C + 'safetensors/mixed.safetensors', 'wb').write(st({
    'a': ('F16', [2], np.ones(2, np.float16).tobytes()),
    'b': ('BF16', [1], b'\x80\x3f'),
    'c': ('I64', [2], np.arange(2).tobytes()),
    'd': ('F64', [1], np.ones(1).tobytes()),
    'e': ('BOOL', [2], b'\x01\x00')}))
b = io.BytesIO()
np.save(b, np.arange(12, dtype=np.float32).reshape(1, 2, 6))
np.save(b, np.zeros((4, 2, 6), np.float64))
open(C + 'infer/npy.bin', 'wb').write(b.getvalue())
