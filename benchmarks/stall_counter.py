"""Healthy curves with attention logits logged: when does the stall rule's creep reading name them?

The creep reading (:mod:`lossguard.detect.stall`) names a plateau that creeps only with the attention
logits grown past ``attn_logit_high`` within the first ``attn_early_fraction`` of the run. This
measures its price on curves that are healthy by construction (``tests/test_stall.py``'s power law
with a cosine LR, and a constant LR with a linear cooldown to 0 over the last 30%), with a largest
attention logit that jumps from 10 to 1,000 at a fraction ``f`` of the run (or stays below the bar):
how many of them are named a stall, per ``f``.

    python benchmarks/stall_counter.py [--seeds 10]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from test_stall import cooldown, cosine_lr, healthy  # noqa: E402

from lossguard.detect.stall import find_stalls  # noqa: E402

FRACTIONS = (0.005, 0.01, 0.02, 0.05, 0.1, 0.15, 0.3, 0.5)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=10)
    a = ap.parse_args(argv)
    n = 1500
    t = np.arange(n, dtype=np.float64)
    print("| curve | logits below the bar | " + " | ".join(f"past it at {f:g}" for f in FRACTIONS) + " |")
    print("|---|---|" + "---|" * len(FRACTIONS))
    for name in ("cosine, power law", "linear cooldown"):
        counts = [0] * (len(FRACTIONS) + 1)
        runs = 0
        for seed in range(a.seeds):
            for noise in (0.04, 0.15):
                if name == "linear cooldown":
                    loss, lr = cooldown(n, seed, noise)
                else:
                    loss, lr = healthy(n, seed, noise=noise), cosine_lr(n, 3e-3, 100)
                runs += 1
                attns = [np.linspace(1.0, 60.0, n)] + [np.where(t >= f * n, 1000.0, 10.0) for f in FRACTIONS]
                for i, attn in enumerate(attns):
                    counts[i] += bool(find_stalls(t, loss, lr=(t, lr), attn=(t, attn)))
        print(f"| {name} | " + " | ".join(f"{c}/{runs}" for c in counts) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
