#!/usr/bin/python3
"""The relu selection network: where(c, a, b) from one linear-relu-linear
stack, its weights for any n and C, and its measured float32 error.

    where(c, a, b) = W2 relu(W1 [c; a; b] + b1)
    W1 = [[C, I, 0], [C, -I, 0], [-C, 0, I], [-C, 0, -I]]   (blocks of n)
    b1 = [-C, -C, 0, 0],  W2 = [I, -I, I, -I]

c is 0 or 1 per element. With c = 1 the hidden units are relu(a), relu(-a),
relu(b - C), relu(-b - C); the last two are 0 when |b| < C, so the output is
relu(a) - relu(-a) = a. With c = 0 it is b. In float32 the sums C + a round
to C's ulp: exact when C is a power of two and a, b are multiples of
C * 2^-23 with |a|, |b| < C, else within a few ulp of C; for |a| >= C the
wrong branch's unit is no longer cut off and the result is wrong.

Two more forms (the zoo holds all three, models/zoo/relu-select*.yaml):

- residual: [c; a; b] -> [c; where(c, a, b); 0] as x + W2 relu(W1 x)
  (no bias), hidden 4n: relu(b - a - 2C c), relu(a - b - 2C c), relu(b),
  relu(-b); W2 adds (b - a) to the a slot when c = 0 and -b to the b slot.
  2C because |b - a| < 2C.
- integer condition: an integer c (any sign) -> 0/1 by the relu
  inequality relu(c) - relu(c - 1) (1 when c >= 1, 0 when c <= 0), a and b
  passed through as relu(a) - relu(-a); then the selection.

Usage (with Debian's python3-numpy; the table needs a built dlrun):
  /usr/bin/python3 tools/relu_select.py weights N C [plain|residual|int] -o FILE.safetensors
  /usr/bin/python3 tools/relu_select.py table [--dlrun PATH]
"""

import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dltools  # noqa: E402


def selection(n, C):
    """W1 [4n, 3n], b1 [4n], W2 [n, 4n] of where(c, a, b) (float64)."""
    I, Z = np.eye(n), np.zeros((n, n))
    Cc = C * np.eye(n)
    W1 = np.block([[Cc, I, Z], [Cc, -I, Z], [-Cc, Z, I], [-Cc, Z, -I]])
    b1 = np.concatenate([-C * np.ones(n), -C * np.ones(n), np.zeros(n),
                         np.zeros(n)])
    W2 = np.block([[I, -I, I, -I]])
    return W1, b1, W2


def residual(n, C):
    """W1 [4n, 3n], W2 [3n, 4n] of [c; a; b] -> [c; where(c, a, b); 0] as
    x + W2 relu(W1 x)."""
    I, Z = np.eye(n), np.zeros((n, n))
    C2 = 2 * C * np.eye(n)
    W1 = np.block([[-C2, -I, I], [-C2, I, -I], [Z, Z, I], [Z, Z, -I]])
    W2 = np.block([[Z, Z, Z, Z], [I, -I, Z, Z], [Z, Z, -I, I]])
    return W1, W2


def front_end(n):
    """W [6n, 3n], b [6n], P [3n, 6n]: [c_int; a; b] -> [c01; a; b] as
    P relu(W x + b)."""
    I, Z = np.eye(n), np.zeros((n, n))
    W = np.block([[I, Z, Z], [I, Z, Z], [Z, I, Z], [Z, -I, Z], [Z, Z, I],
                  [Z, Z, -I]])
    b = np.concatenate([np.zeros(n), -np.ones(n), np.zeros(4 * n)])
    P = np.block([[I, -I, Z, Z, Z, Z], [Z, Z, I, -I, Z, Z],
                  [Z, Z, Z, Z, I, -I]])
    return W, b, P


def tensors(n, C, form):
    """name -> array, the keys of the zoo's model files."""
    if form == "plain":
        W1, b1, W2 = selection(n, C)
        return {"select.weight": W1, "select.bias": b1, "combine.weight": W2}
    if form == "residual":
        W1, W2 = residual(n, C)
        return {"0.select.weight": W1, "0.combine.weight": W2}
    if form == "int":
        W, b, P = front_end(n)
        W1, b1, W2 = selection(n, C)
        return {"condition.weight": W, "condition.bias": b,
                "unpack.weight": P, "select.weight": W1, "select.bias": b1,
                "combine.weight": W2}
    raise ValueError(form)


def yaml_text(n, form):
    head = "inputs:\n  x: {shape: [%d]}          # [c; a; b], blocks of n = %d\n" % (
        3 * n, n)
    if form == "plain":
        return (head + "layers:\n"
                "  - name: select\n"
                "    linear: {out_features: %d}\n"
                "  - relu\n"
                "  - name: combine\n"
                "    linear: {out_features: %d, bias: false}\n" % (4 * n, n))
    if form == "residual":
        return (head + "layers:\n"
                "  - residual:\n"
                "      - name: select\n"
                "        linear: {out_features: %d, bias: false}\n"
                "      - relu\n"
                "      - name: combine\n"
                "        linear: {out_features: %d, bias: false}\n"
                % (4 * n, 3 * n))
    if form == "int":
        return (head + "layers:\n"
                "  - name: condition        # relu(c), relu(c - 1), a+, a-, b+, b-\n"
                "    linear: {out_features: %d}\n"
                "  - relu\n"
                "  - name: unpack           # [relu(c) - relu(c - 1); a; b]\n"
                "    linear: {out_features: %d, bias: false}\n"
                "  - name: select\n"
                "    linear: {out_features: %d}\n"
                "  - relu\n"
                "  - name: combine\n"
                "    linear: {out_features: %d, bias: false}\n"
                % (6 * n, 3 * n, 4 * n, n))
    raise ValueError(form)


def expected(x, n, form):
    """The formula's answer for inputs x [B, 3n] (float32, exact)."""
    c, a, b = x[:, :n], x[:, n:2 * n], x[:, 2 * n:]
    if form == "int":
        c = (c >= 1).astype(np.float32)
    w = np.where(c != 0, a, b).astype(np.float32)
    if form == "residual":
        return np.concatenate([c, w, np.zeros_like(b)], 1).astype(np.float32)
    return w


def grid_inputs(n, C, rows, seed, form="plain"):
    """[rows, 3n] float32: c in {0, 1} (integers -3..3 for the int form),
    a and b multiples of C * 2^-23 with |a|, |b| < C, including the
    extremes +-(C - C 2^-23) and +-C 2^-23 and 0."""
    rng = np.random.default_rng(seed)
    q = 1 << 23
    k = rng.integers(-(q - 1), q, size=(rows, 2 * n))
    edge = np.array([q - 1, -(q - 1), 1, -1, 0, q // 2, -(q // 3)])
    flat = k.reshape(-1)
    flat[:len(edge)] = edge
    flat[-len(edge):] = edge[::-1]
    # exact float32 values when C is a power of two; rounded otherwise
    ab = (k.astype(np.float64) * (C / q)).astype(np.float32)
    if form == "int":
        c = rng.integers(-3, 4, size=(rows, n)).astype(np.float32)
    else:
        c = rng.integers(0, 2, size=(rows, n)).astype(np.float32)
    return np.concatenate([c, ab], 1)


def write_weights(path, n, C, form):
    dltools.write_safetensors(path, tensors(n, C, form))


# ---- the error table ----

TABLE_C = [1.0, 3.0, 10.0, 100.0, 1000.0, 65536.0, 1e6]


def run(dlrun, yaml, weights, x):
    with tempfile.TemporaryDirectory() as d:
        xin = os.path.join(d, "x.npy")
        dltools.write_npys(xin, [x])
        out = subprocess.run([dlrun, "infer", yaml, "-w", weights, "-i", xin],
                             check=True, stdout=subprocess.PIPE).stdout
        path = os.path.join(d, "y.npy")
        with open(path, "wb") as f:
            f.write(out)
        return dltools.read_npys(path)[0]


def measure(dlrun, n=8, rows=2000, seed=0):
    """Rows of (C, max error for |a|, |b| <= 1 random floats, the same in
    ulps of C, max error on the C 2^-23 grid, error when the value not
    selected is +-C, +-1.5C, +-2C), every number measured through dlrun
    infer."""
    out = []
    rng = np.random.default_rng(seed)
    with tempfile.TemporaryDirectory() as d:
        yaml = os.path.join(d, "sel.yaml")
        with open(yaml, "w") as f:
            f.write(yaml_text(n, "plain"))
        for C in TABLE_C:
            w = os.path.join(d, "sel.safetensors")
            write_weights(w, n, C, "plain")
            c = rng.integers(0, 2, size=(rows, n)).astype(np.float32)
            ab = rng.uniform(-1, 1, size=(rows, 2 * n)).astype(np.float32)
            x = np.concatenate([c, ab], 1)
            e_arb = float(np.max(np.abs(run(dlrun, yaml, w, x).astype(np.float64)
                                        - expected(x, n, "plain"))))
            xg = grid_inputs(n, C, rows // 4, seed + 1)
            e_grid = float(np.max(np.abs(run(dlrun, yaml, w, xg).astype(np.float64)
                                         - expected(xg, n, "plain"))))
            row = [C, e_arb, e_arb / float(np.spacing(np.float32(C))), e_grid]
            for mult in (1.0, 1.5, 2.0):
                # where it breaks: c = 1 selects a = 0.5, the unselected b
                # is mult * C (and c = 0 selects b = 0.5, the unselected a
                # is -mult * C); the answer is 0.5 either way
                xb = np.zeros((2, 3 * n), np.float32)
                xb[0, :n] = 1
                xb[0, n:2 * n] = 0.5
                xb[0, 2 * n:] = np.float32(mult * C)
                xb[1, n:2 * n] = np.float32(-mult * C)
                xb[1, 2 * n:] = 0.5
                y = run(dlrun, yaml, w, xb)
                row.append(float(np.max(np.abs(y.astype(np.float64) - 0.5))))
            out.append(row)
    return out


def table_markdown(rows):
    lines = [
        "| C | max error, a, b uniform in [-1, 1] | in ulps of C | "
        "max error on the C 2^-23 grid | "
        "error, unselected value +-C | +-1.5 C | +-2 C |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for C, ea, eu, eg, e1, e15, e2 in rows:
        lines.append("| %g | %.3g | %.2f | %.3g | %g | %g | %g |" % (
            C, ea, eu, eg, e1, e15, e2))
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("weights")
    w.add_argument("n", type=int)
    w.add_argument("C", type=float)
    w.add_argument("form", nargs="?", default="plain",
                   choices=["plain", "residual", "int"])
    w.add_argument("-o", required=True)
    w.add_argument("--yaml", help="also write the model description here")
    t = sub.add_parser("table")
    t.add_argument("--dlrun", default=os.environ.get("DLRUN", "src/dlrun"))
    args = ap.parse_args()
    if args.cmd == "weights":
        write_weights(args.o, args.n, args.C, args.form)
        if args.yaml:
            with open(args.yaml, "w") as f:
                f.write(yaml_text(args.n, args.form))
    else:
        sys.stdout.write(table_markdown(measure(args.dlrun)))


if __name__ == "__main__":
    main()
