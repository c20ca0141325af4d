#!/usr/bin/python3
"""The learning rates of torch.optim.lr_scheduler.ReduceLROnPlateau for
given sequences of monitored values, for tests/check_monitor.c: writes
tests/data/monitor/plateau.txt.

Each case is a line "case NAME MODE FACTOR PATIENCE MIN_LR LR N" followed
by N lines "VALUE LR_AFTER": the value passed to step() and the optimizer's
learning rate after it. threshold 1e-4 (rel) and cooldown 0, as dlrun.

    /usr/bin/python3 tools/gen_plateau_fixture.py [OUT]
"""

import math
import os
import sys

import torch

CASES = [
    # a loss that falls, stalls, falls again, and creeps down by less than
    # the relative threshold (1e-4): those epochs count as bad
    ("min_patience2", "min", 0.5, 2, 0.0, 0.1,
     [1.0, 0.8, 0.81, 0.8, 0.79999, 0.7, 0.7, 0.69995, 0.7, 0.6,
      0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.5, float("nan"), 0.5, 0.5]),
    # accuracy: patience 0 lowers the rate after every bad epoch, down to
    # min_lr; then the tiny changes (below PyTorch's eps 1e-8) are skipped
    ("max_patience0_min_lr", "max", 0.1, 0, 1e-4, 0.1,
     [0.5, 0.6, 0.6, 0.7, 0.65, 0.7, 0.70001, 0.8, 0.8, 0.8, 0.8, 0.8]),
    # the default factor and patience (0.1, 10)
    ("min_defaults", "min", 0.1, 10, 0.0, 0.003,
     [2.0] + [1.5] * 14 + [1.4] * 12),
    # lr small enough that the factor's step is below eps
    ("min_eps", "min", 0.5, 1, 0.0, 3e-8,
     [1.0, 1.0, 1.0, 1.0, 1.0, 1.0]),
]


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(__file__), "..", "tests", "data", "monitor", "plateau.txt")
    lines = ["# ReduceLROnPlateau's learning rates; made by tools/gen_plateau_fixture.py"]
    for name, mode, factor, patience, min_lr, lr, values in CASES:
        p = torch.nn.Parameter(torch.zeros(1))
        opt = torch.optim.SGD([p], lr=lr)
        sched = torch.optim.lr_scheduler.ReduceLROnPlateau(
            opt, mode=mode, factor=factor, patience=patience, threshold=1e-4,
            threshold_mode="rel", cooldown=0, min_lr=min_lr)
        lines.append("case %s %s %r %d %r %r %d" % (name, mode, factor, patience, min_lr,
                                                    lr, len(values)))
        for v in values:
            sched.step(v)
            lines.append("%s %r" % ("nan" if math.isnan(v) else repr(v),
                                    opt.param_groups[0]["lr"]))
    with open(out, "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
