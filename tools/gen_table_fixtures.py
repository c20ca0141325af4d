#!/usr/bin/python3
"""Fixtures for training on CSV tables (tests/table.sh), in tests/data/table:

- beer.csv: a header and 48 rows of 4 float features and a label column
  `kind` of class names (ale, lager, stout: ids 0, 1, 2 in sorted order);
- beer_mid.csv: the same table with the label column second;
- x.npy, y.npy: the same data as dlrun must read it (features as float32
  of the decimal text, labels as int64 ids in sorted order of the names);
  training on the CSV and on x.npy/y.npy with the same flags must give the
  same weights;
- mlp.yaml: a small classifier of the 4 features.
"""
import os

import numpy as np

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "table")

MODEL = """\
# A classifier for tests/table.sh (made by tools/gen_table_fixtures.py).
inputs: {x: {shape: [4]}}
layers:
  - linear: {out_features: 8}
  - relu: {}
  - linear: {out_features: 3}
"""


def main():
    os.makedirs(OUT, exist_ok=True)
    rng = np.random.default_rng(5)
    names = ["stout", "ale", "lager"]          # not in sorted order
    centres = np.array([[1.0, 3.0, -1.0, 0.5], [0.0, 1.0, 1.0, 2.0], [2.0, 0.0, 0.5, -1.0]])
    rows = []
    for i in range(48):
        k = int(rng.integers(3))
        f = centres[k] + rng.normal(0, 0.4, 4)
        rows.append(([float("%.4g" % v) for v in f], names[k]))
    header = ["colour", "bitterness", "sweetness", "body"]
    with open(os.path.join(OUT, "beer.csv"), "w") as f:
        f.write(",".join(header + ["kind"]) + "\n")
        for feats, name in rows:
            f.write(",".join(repr(v) for v in feats) + "," + name + "\n")
    with open(os.path.join(OUT, "beer_mid.csv"), "w") as f:
        # spaces, CRLF and a quoted name: the reader takes them all
        f.write("colour, kind, bitterness,sweetness,body\r\n")
        for feats, name in rows:
            f.write("%r, \"%s\" ,%r,%r,%r\r\n" % (feats[0], name, feats[1], feats[2], feats[3]))
    ids = {n: i for i, n in enumerate(sorted(set(names)))}
    x = np.array([[np.float32(v) for v in feats] for feats, _ in rows], dtype=np.float32)
    y = np.array([ids[n] for _, n in rows], dtype=np.int64)
    np.save(os.path.join(OUT, "x.npy"), x)
    np.save(os.path.join(OUT, "y.npy"), y)
    with open(os.path.join(OUT, "mlp.yaml"), "w") as f:
        f.write(MODEL)


if __name__ == "__main__":
    main()
