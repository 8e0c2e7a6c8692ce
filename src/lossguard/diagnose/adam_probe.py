"""AdamProbe: per-layer Adam-instability statistics, attached to an optimizer by step hooks.

Implements the measurements of Molybog et al. 2023 ("A Theory on Adam Instability in Large-Scale
Machine Learning"), section 4, per parameter tensor ("layer"):

``grad_norm``
    L2 norm of the gradient; its per-layer history shows the early layers' gradients shrinking
    before a spike.
``frac_below_eps``
    fraction of gradient entries with ``|g| < eps``: the epsilon trap. Where it is large, Adam's
    ``m / (sqrt(v) + eps)`` is dominated by ``eps`` and the update distribution collapses to 0.
``update_ratio``
    ``||delta p|| / ||p||`` of the step just taken.
``update_bimodality``
    Sarle's bimodality coefficient of the normalised Adam update ``r = m_hat / (sqrt(v_hat) + eps)``
    (read from the optimizer state; ``delta p / lr`` for optimizers without Adam state). Above
    5/9 the layer is in the sign-descent regime (peaks at +-1).
``update_corr``
    cosine between this step's and the previous measured step's update of the layer.

The probe registers ``register_step_pre_hook`` / ``register_step_post_hook`` on the optimizer, so
the training loop does not change; statistics stay on the device until :meth:`AdamProbe.measure`
moves them to the host in one transfer.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from lossguard.diagnose.bimodality import (BIMODAL_THRESHOLD, bimodality_coefficient,
                                           time_correlation)
from lossguard.errors import raise_all

STATS = ("grad_norm", "frac_below_eps", "update_ratio", "update_bimodality", "update_corr")


@dataclass(frozen=True, kw_only=True)
class ProbeConfig:
    """What :class:`AdamProbe` measures and how often."""

    eps: float | None = None
    """Threshold for ``frac_below_eps``; ``None`` takes each parameter group's own ``eps``
    (1e-8 when the optimizer has none)."""
    every: int = 1
    """Measure every N-th optimizer step (the others cost nothing)."""
    history: int = 1000
    """Measured steps kept per layer in :attr:`AdamProbe.history`."""
    trap_fraction: float = 0.5
    """A layer with more than this fraction of ``|g| < eps`` is reported as trapped."""
    bimodal_threshold: float = BIMODAL_THRESHOLD
    """Bimodality coefficient above which a layer's update is reported as bimodal."""

    def __post_init__(self) -> None:
        problems = []
        if self.eps is not None and not self.eps > 0:
            problems.append(f"field 'eps' must be > 0 or None, got {self.eps!r}")
        if self.every < 1:
            problems.append(f"field 'every' must be >= 1, got {self.every!r}")
        if self.history < 1:
            problems.append(f"field 'history' must be >= 1, got {self.history!r}")
        if not 0 < self.trap_fraction < 1:
            problems.append(f"field 'trap_fraction' must be in (0, 1), got {self.trap_fraction!r}")
        raise_all(problems, fix="correct the ProbeConfig fields listed above")


class AdamProbe:
    """Attach to ``optimizer``; after each measured step :meth:`measure` returns the statistics.

    Args:
        optimizer: a ``torch.optim.Optimizer`` (Adam-family for the ``update_bimodality`` of the
            normalised update; any optimizer for the rest).
        names: ``model.named_parameters()`` (or a dict) to label layers; unnamed parameters are
            labelled ``group<i>.<j>``.
        config: a :class:`ProbeConfig`.
    """

    def __init__(self, optimizer, names=None, *, config: ProbeConfig | None = None) -> None:
        self.optimizer = optimizer
        self.config = config or ProbeConfig()
        by_id = {id(p): n for n, p in (dict(names).items() if names is not None else ())}
        self._names = {}
        for gi, group in enumerate(optimizer.param_groups):
            for pi, p in enumerate(group["params"]):
                self._names[p] = by_id.get(id(p), f"group{gi}.{pi}")
        self.steps = 0
        self._history: dict[str, deque] = {}
        self._before: dict = {}
        self._grad: dict = {}
        self._prev_update: dict = {}
        self._pending: list = []  # (step, {layer: device tensor}) not yet moved to the host
        self._last: dict = {}
        self._handles = [optimizer.register_step_pre_hook(self._pre),
                         optimizer.register_step_post_hook(self._post)]

    def remove(self) -> None:
        """Detach the hooks."""
        for h in self._handles:
            h.remove()
        self._handles = []

    def _measuring(self) -> bool:
        return self.steps % self.config.every == 0

    def _pre(self, optimizer, args, kwargs) -> None:
        import torch

        if not self._measuring():
            return
        with torch.no_grad():
            for group in optimizer.param_groups:
                eps = self.config.eps if self.config.eps is not None else group.get("eps", 1e-8)
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    g = p.grad.detach()
                    self._grad[p] = (g.norm(), (g.abs() < eps).float().mean())
                    self._before[p] = p.detach().clone()

    def _post(self, optimizer, args, kwargs) -> None:
        import torch

        if self._measuring():
            stats = {}
            with torch.no_grad():
                for group in optimizer.param_groups:
                    for p in group["params"]:
                        if p not in self._before:
                            continue
                        before = self._before.pop(p)
                        delta = p.detach() - before
                        gn, frac = self._grad.pop(p)
                        r = self._normalised_update(optimizer, group, p, delta)
                        prev = self._prev_update.get(p)
                        corr = (time_correlation(prev, delta) if prev is not None
                                else torch.tensor(float("nan"), dtype=torch.float64))
                        self._prev_update[p] = delta
                        ratio = delta.norm() / before.norm().clamp_min(1e-30)
                        stats[self._names[p]] = torch.stack([
                            gn.double(), frac.double(), ratio.double(),
                            bimodality_coefficient(r).to(gn.device), corr.to(gn.device)])
            self._pending.append((self.steps, stats))
            if len(self._pending) > self.config.history:
                self._pending.pop(0)
        self.steps += 1

    @staticmethod
    def _normalised_update(optimizer, group, p, delta):
        state = optimizer.state.get(p, {})
        if "exp_avg" in state and "exp_avg_sq" in state and "step" in state:
            b1, b2 = group["betas"]
            t = float(state["step"])
            eps = group.get("eps", 0.0) or 0.0
            m_hat = state["exp_avg"] / (1 - b1 ** t)
            denom = (state["exp_avg_sq"] / (1 - b2 ** t)).sqrt() + eps
            return torch_where_safe(m_hat, denom)
        lr = group.get("lr", 1.0) or 1.0
        return delta / lr

    def measure(self) -> dict[str, dict[str, float]]:
        """Statistics of the last measured step: ``{layer: {stat: value}}``.

        Every step measured since the previous call is moved to the host in one transfer and
        appended to :attr:`history`, so calling this every
        few hundred steps loses nothing. Returns the previous result when nothing new was measured.
        """
        import torch

        if self._pending:
            rows = [(step, n) for step, stats in self._pending for n in stats]
            values = torch.stack([t for _, stats in self._pending for t in stats.values()]).tolist()
            for (step, n), v in zip(rows, values, strict=True):
                s = dict(zip(STATS, v, strict=True))
                self._history.setdefault(n, deque(maxlen=self.config.history)).append((step, s))
            last_step = self._pending[-1][0]
            self._last = {n: s for n, dq in self._history.items() for step, s in [dq[-1]]
                          if step == last_step}
            self._pending = []
        return self._last

    @property
    def history(self) -> dict[str, deque]:
        """``{layer: deque of (step, stats)}`` of every measured step (flushes pending ones)."""
        self.measure()
        return self._history

    def flags(self) -> dict[str, list[str]]:
        """Layers of the last measurement in the two regimes of Molybog et al.

        Returns:
            ``{"eps_trapped": [...], "bimodal": [...]}``: layers whose ``frac_below_eps`` exceeds
            ``trap_fraction``, and layers whose update bimodality exceeds the threshold.
        """
        last = self.measure()
        return {
            "eps_trapped": [n for n, s in last.items()
                            if s["frac_below_eps"] > self.config.trap_fraction],
            "bimodal": [n for n, s in last.items()
                        if s["update_bimodality"] > self.config.bimodal_threshold],
        }


def torch_where_safe(num, den):
    """``num / den`` with 0 where ``den == 0`` (eps-free optimizers with unseen entries)."""
    import torch

    return torch.where(den > 0, num / torch.where(den > 0, den, 1.0), torch.zeros_like(num))
