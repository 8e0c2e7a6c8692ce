"""Attribution: which samples of a withheld batch carry its excess loss or gradient.

Two measurements, both on the batch the guard withheld (the weights are still those of its forward
pass, since the update was not applied):

- **per-sample losses** (one forward, no backward): a sample is named when its loss is a robust
  outlier against the batch's own median (median/MAD z-score) and it carries a real part of the
  step's excess loss ``sum(l_i - baseline)`` over the guard's baseline; its share is that part.
  Enough for random bytes or a flipped label when the loss test fired.
- **gradient bisection** where the losses name nobody (a sample whose loss is ordinary but whose
  gradient is not, e.g. one token repeated thousands of times under sum pooling): the batch is cut
  into ``groups`` sub-batches, each gets one forward-backward of its *summed* per-sample loss, and
  the groups whose gradient norm stands out from their siblings are cut again until single samples
  remain. Level one costs one forward-backward of the batch; each followed group ``1/groups`` of it.
  A sample's share is its squared gradient norm over the batch's (sum over the first-level groups).

Nothing here touches the optimizer; :func:`isolated` keeps RNG, ``.grad`` and buffers (BatchNorm
running statistics) exactly as they were, so an exact resume stays bitwise.

The per-sample loss convention: ``per_sample_loss(model, batch) -> Tensor[B]``, the loss of each
row with ``reduction='none'`` (for a language model: the mean token loss of each sequence), such
that the training loss is (close to) its mean.
"""
from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from typing import Any, Callable, Sequence


@dataclass(frozen=True)
class Finding:
    """One sample the measurement singled out (``row``: its row in the local batch)."""

    row: int
    share: float
    """Its share of the batch's excess (0..1)."""
    score: float
    """Its loss (loss method) or gradient norm (gradient method)."""
    z: float
    """Its robust z-score against the batch (loss) or its sibling groups (gradient)."""


def robust_z(values: Sequence[float]) -> tuple[float, float]:
    """``(median, sigma)`` of ``values``: ``sigma = 1.4826 * MAD`` (floored at 1e-12)."""
    import numpy as np

    v = np.asarray(values, dtype=np.float64)
    med = float(np.median(v))
    return med, max(1.4826 * float(np.median(np.abs(v - med))), 1e-12 * max(1.0, abs(med)))


def loss_findings(losses: Sequence[float], *, baseline: float | None, z_threshold: float, min_share: float,
                  max_suspects: int) -> list[Finding]:
    """Samples whose loss is an outlier of the batch *and* carries at least ``min_share`` of the
    step's excess ``sum(l_i - baseline)`` (``baseline``: the guard's typical batch loss; None: the
    batch median). Non-finite losses come first, sharing equally."""
    bad = [i for i, x in enumerate(losses) if not math.isfinite(x)]
    if bad:
        return [Finding(i, 1.0 / len(bad), float(losses[i]), math.inf) for i in bad[:max_suspects]]
    med, sigma = robust_z(losses)
    base = med if baseline is None or not math.isfinite(baseline) else float(baseline)
    total = sum(x - base for x in losses)
    if total <= 0:
        return []  # the batch is not above its baseline: nothing to explain by loss
    out = [Finding(i, min(1.0, (x - base) / total), float(x), (x - med) / sigma) for i, x in enumerate(losses)
           if (x - med) / sigma > z_threshold and (x - base) / total >= min_share]
    return sorted(out, key=lambda f: -f.score)[:max_suspects]


def select_rows(batch: Any, rows: Sequence[int]) -> Any:
    """The sub-batch of ``rows`` (tensors indexed on dim 0; tuples, lists and dicts recursed; other
    leaves, e.g. a list of strings, indexed by position)."""
    import torch

    if torch.is_tensor(batch):
        return batch[torch.as_tensor(list(rows), dtype=torch.long, device=batch.device)]
    if isinstance(batch, dict):
        return type(batch)({k: select_rows(v, rows) for k, v in batch.items()})
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):
        return type(batch)(*(select_rows(v, rows) for v in batch))
    if isinstance(batch, (list, tuple)) and batch and all(torch.is_tensor(v) or isinstance(v, (dict, list, tuple))
                                                          for v in batch):
        return type(batch)(select_rows(v, rows) for v in batch)
    if isinstance(batch, (list, tuple)):
        return type(batch)(batch[r] for r in rows)
    raise TypeError(f"cannot take rows of a {type(batch).__name__} batch; pass select= to SampleAttribution")


@contextlib.contextmanager
def isolated(module):
    """Run attribution passes on ``module`` leaving no trace: the torch RNG streams, every
    parameter's ``.grad`` (references kept, new ones dropped) and the module's buffers are put back."""
    import torch

    from .replay import capture_torch_rng

    rng = capture_torch_rng()
    params = list(module.parameters())
    grads = [p.grad for p in params]
    buffers = [(b, b.detach().clone()) for b in module.buffers()]
    try:
        for p in params:
            p.grad = None
        yield
    finally:
        for p, g in zip(params, grads, strict=True):
            p.grad = g
        with torch.no_grad():
            for b, saved in buffers:
                b.copy_(saved)
        torch.set_rng_state(rng["cpu"])
        if "cuda" in rng:
            torch.cuda.set_rng_state(rng["cuda"])


def per_sample_losses(module, batch, fn: Callable) -> list[float]:
    """``fn(module, batch)`` without autograd, as host floats (one forward)."""
    import torch

    with torch.no_grad():
        out = fn(module, batch)
    return out.detach().to(torch.float64).reshape(-1).cpu().tolist()


def _group_norm(module, batch, rows: Sequence[int], fn: Callable, select: Callable) -> float:
    """Gradient norm of the summed per-sample loss of ``rows`` (one forward-backward of them); NaN
    when the model cannot take so few rows (BatchNorm in training mode on one row)."""
    import torch

    params = [p for p in module.parameters() if p.requires_grad]
    for p in params:
        p.grad = None
    try:
        loss = fn(module, select(batch, rows)).sum()
    except (ValueError, RuntimeError):
        if len(rows) > 1:
            raise
        return math.nan
    grads = torch.autograd.grad(loss, params, allow_unused=True)
    sq = sum(float(g.detach().to(torch.float64).pow(2).sum()) for g in grads if g is not None)
    return math.sqrt(sq) if math.isfinite(sq) else math.inf


def split(rows: Sequence[int], groups: int) -> list[list[int]]:
    """``rows`` cut into at most ``groups`` contiguous, near-equal, non-empty parts."""
    k = max(1, min(groups, len(rows)))
    q, r = divmod(len(rows), k)
    out, at = [], 0
    for g in range(k):
        n = q + (g < r)
        out.append(list(rows[at:at + n]))
        at += n
    return out


def gradient_findings(module, batch, n_rows: int, fn: Callable, *, select: Callable = select_rows, groups: int = 8,
                      ratio: float = 3.0, min_share: float = 0.1, max_suspects: int = 8,
                      top: list[list[int]] | None = None) -> tuple[list[Finding], float, float]:
    """Bisect the batch by gradient norm; returns the singled-out samples, the cost in
    forward-backward passes of the whole batch (``1 + followed rows / n_rows``) and the batch's
    gradient energy (the sum of the first-level groups' squared norms, the shares' denominator).

    A group is followed when its norm is more than ``ratio`` times the median of its siblings
    *and* its squared norm is at least ``min_share`` of the batch's gradient energy (non-finite
    norms always are): ordinary samples' norms are heavy-tailed, so the ratio alone would follow
    them; the share keeps the search on what carries the spike. At most ``max_suspects`` groups
    are followed at each level. ``top``: the first level's groups (the micro-batches of a step);
    default: ``groups`` near-equal parts.
    """
    top = top if top is not None else split(range(n_rows), groups)
    norms = [_group_norm(module, batch, g, fn, select) for g in top]
    energy = sum(x * x for x in norms if math.isfinite(x)) or 1.0
    cost_rows = n_rows
    found: list[Finding] = []
    frontier = list(zip(top, norms, strict=True))
    while frontier:
        chosen = []
        for k, (g, x) in enumerate(frontier):
            # Against the median of its siblings without itself: with two siblings, the other one.
            others = [y for j, (_, y) in enumerate(frontier) if j != k and math.isfinite(y)]
            med, sigma = robust_z(others or [0.0])
            big = x * x >= min_share * energy
            alone = len(frontier) == 1 and len(g) < n_rows  # the only part left of a followed group
            if not math.isfinite(x) or (big and (alone or x > ratio * max(med, 1e-12))):
                chosen.append((g, x, (x - med) / sigma if math.isfinite(x) else math.inf))
        chosen = sorted(chosen, key=lambda t: -t[1])[:max_suspects]
        nxt = []
        for g, x, z in chosen:
            if len(g) == 1:
                found.append(Finding(g[0], min(1.0, x * x / energy) if math.isfinite(x) else 1.0, x, z))
                continue
            parts = split(g, groups)
            cost_rows += len(g)
            measured = [(p, _group_norm(module, batch, p, fn, select)) for p in parts]
            if any(math.isnan(y) for _, y in measured):  # rows too few for the model: name the group
                found += [Finding(r, min(1.0, x * x / energy) / len(g), x, z) for r in g]
                continue
            nxt += measured
        frontier = nxt
    return sorted(found, key=lambda f: -f.score)[:max_suspects], cost_rows / max(n_rows, 1), energy
