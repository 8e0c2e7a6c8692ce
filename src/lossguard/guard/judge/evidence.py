"""What counts as evidence of trouble: the judge's calibrated rule, one definition for every twin.

The analyser's outlier test (median / MAD of first differences) is right for the loss, whose
healthy noise is close to Gaussian. The gradient norm of a small-batch run is not: its healthy
excursions are heavy-tailed, and measured on the zoo's tuned families (``benchmarks/zoo_calibrate.py``)
the MAD test flags them at z = 7-15 every few dozen steps. A guard that acts on each of those
is switched off after its first false alarm. So a step is bad (its update withheld) only on
evidence that means trouble:

- a **non-finite** loss or gradient norm (always, from step 0; with a GradScaler a non-finite
  gradient is the scaler's overflow, not the guard's);
- a **loss outlier** (the analyser's test, unchanged: a spike in the report is a spike the guard acts on);
- a **grad-norm outlier together with the loss**: the analyser's test flags the grad norm *and* the
  loss is at least ``joint_loss_z`` noise units above its baseline on the same step;
- a **grad-norm excursion far beyond its own recent tail**: more than ``grad_tail_factor`` times the
  ``grad_tail_quantile`` quantile of the grad norm's own trailing window (:mod:`.tail`);
- the two grad-norm kinds are **not** evidence on a step in the LR ramp when the update is clipped
  (``ramp_clipped``, :func:`ramp_clipped`): the schedule, not the data, blew the gradient up, and
  the clip already bounds the update. Issue 20: at the best LR of the natural-instability
  benchmark the gradient norm jumps 100-150x its tail in the warm-up (steps 25-42 of 60, nothing
  injected), and withholding those 5 steps changed nothing but the log;
- a **sustained loss shift** (opt-in, ``shift_z``): the loss at least ``shift_z`` noise units
  above its baseline on half of the latest ``shift_window`` steps, though no single step is an
  outlier (a pocket of bad data whose batches each look almost normal); the episode it opens
  starts at the window's start (:mod:`lossguard.recovery` back-dates it by ``onset_lag``);
- **before the statistics are warm** (the loss test has fewer than ``min_points`` values) an
  absolute sanity bound relative to the first steps: a grad norm above ``cold_grad_factor`` times
  the largest accepted one so far (at the very first step: times the parameter norm), or a
  positive loss above ``cold_loss_factor`` times the largest accepted first loss.

:class:`Evidence` names which of these fired (the first in that order); it travels in the verdict
so the log and a halt's diagnosis name the test, never decided from prose.
"""
from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

from ...errors import raise_all
from ...recovery.verdict import Evidence

__all__ = ["ColdBound", "Evidence", "EvidenceConfig", "LossShift", "grad_evidence", "onset_lag", "ramp_clipped"]


@dataclass(kw_only=True)
class EvidenceConfig:
    """The calibrated rule's settings (see the module docstring); part of :class:`GuardConfig`."""

    joint_loss_z: float = 3.0
    """A grad-norm outlier is bad only when the same step's loss is at least this many noise units
    above the loss baseline. Measured on the tuned zoo families (48 healthy runs, 21,600 steps,
    ``benchmarks/zoo_calibrate.py``): the analyser's test flags the grad norm on 4.2% of healthy
    steps, and the loss z of those steps has median -11.8, 99th percentile 0.5, maximum 6.6 -- so
    at 3 at most ~1 in 1,000 of those flags (0.04% of steps) becomes a skip, while a bad batch
    moves loss and gradient together. Re-measured in round 3 (other dropout masks since the zoo's
    loop stopped drawing from the global RNG): 4.1% flagged, 99th percentile 0.70, maximum 9.3;
    healthy skips 4 of 21,600 steps."""
    grad_tail_quantile: float = 0.9
    """The "recent tail" of the grad norm: this quantile of its trailing window (the grad-norm
    test's window and refresh schedule). 0.9 of 128 points: 12 spikes are needed to move it."""
    grad_tail_factor: float = 5.0
    """A grad norm above this multiple of its recent tail is bad on its own. Healthy excursions
    of the tuned families reach 2.07x their q0.9 tail (99.9th percentile 1.70; max over 48 runs,
    21,600 steps); 5 leaves a margin of 2.4x over that and still catches a 10x gradient fault.
    Re-measured in round 3 (other dropout masks): max 2.67x (a tiny-GPT run; 99.9th percentile
    1.71), a margin of 1.9x."""
    cold_grad_factor: float = 1000.0
    """First steps: a grad norm above this multiple of the largest accepted one so far (at the
    first step: of the parameter norm) is bad. Healthy first steps of the tuned families stay
    within 2.2x of the first step's grad norm, and the first grad norm is at most 0.5x the
    parameter norm; a 1e6x fault is far beyond 1000x, and no healthy start comes near it."""
    cold_loss_factor: float = 10.0
    """First steps: a positive loss above this multiple of the largest accepted first loss is bad
    (healthy first losses of the tuned families stay within 1.13x of the first; 10x is garbage)."""

    shift_z: float | None = None
    """The loss-shift test (off by default; 2.0 turns it on): a step's loss is *elevated* at this
    many noise units (the loss test's z) above its baseline. See ``shift_window``.

    Off by default because of what it did outside the zoo (``benchmarks/simulate_families.py`` and
    ``lossguard simulate`` on the real logs, at 2.0): on the generator's TEST curves it rolled back or
    halted 11 runs whose events need no action (fast spikes, resume spikes, drops), 10 of them with
    AR(1) noise -- autocorrelated, so the loss test's noise estimate from first differences is too
    small; on the real Megatron Mixtral log it took the slow recovery after each known spike for a
    shift and added 3 rollbacks and 2 LR cuts where the default guard only skips the spikes. Turn it
    on for a run whose bad data hides in the noise and whose loss noise is close to independent."""
    shift_window: int = 16
    """The loss-shift test (when ``shift_z`` is set) fires when at least half of the latest
    ``shift_window`` steps were elevated. Measured on the tuned zoo families (48 healthy runs,
    21,600 steps, unguarded; ``benchmarks/zoo_calibrate.py``): at most 4 of any 16 consecutive
    healthy steps reach z >= 2 (at z >= 1.5, 6), so 8 of 16 leaves a margin of 2x. The two
    20-batch pockets of garbage tokens that no single-step test sees (encoder classifier, b16 AdamW
    and b32 SGD) reach 11 and 14 of 16 and fire 11 and 6 steps after the pocket's start. A short
    window keeps the back-dated onset close: a pocket's first batches are skipped on the replay,
    not trained on again."""

    def problems(self) -> list[str]:
        """Every invalid field, one sentence each."""
        p = []
        if self.shift_z is not None and not (isinstance(self.shift_z, (int, float)) and self.shift_z > 0):
            p.append(f"evidence.shift_z must be > 0 or None, got {self.shift_z!r}")
        if not (isinstance(self.shift_window, int) and not isinstance(self.shift_window, bool)
                and self.shift_window >= 2):
            p.append(f"evidence.shift_window must be an integer >= 2, got {self.shift_window!r}")
        if not (isinstance(self.joint_loss_z, (int, float)) and self.joint_loss_z >= 0):
            p.append(f"evidence.joint_loss_z must be >= 0, got {self.joint_loss_z!r}")
        if not (isinstance(self.grad_tail_quantile, (int, float)) and 0 < self.grad_tail_quantile <= 1):
            p.append(f"evidence.grad_tail_quantile must be in (0, 1], got {self.grad_tail_quantile!r}")
        for name in ("grad_tail_factor", "cold_grad_factor", "cold_loss_factor"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and v > 1):
                p.append(f"evidence.{name} must be > 1, got {v!r}")
        return p

    def __post_init__(self) -> None:
        raise_all(self.problems(), fix="correct the EvidenceConfig field(s) named above")


def ramp_clipped(in_lr_ramp: bool, max_grad_norm: float | None, lr_ramp_window: int) -> bool:
    """Whether a step's grad-norm evidence is waived: the LR is still rising
    (:mod:`lossguard.recovery.lr_phase`), the LR-ramp rule is on (``lr_ramp_window`` > 0) and the
    guard clips the gradient (``max_grad_norm`` set). One definition for the live judges and
    :mod:`lossguard.simulate`."""
    return bool(in_lr_ramp) and max_grad_norm is not None and lr_ramp_window > 0


def grad_evidence(cfg: EvidenceConfig, *, gn_outlier: bool, loss_z: float, ratio: float) -> Evidence:
    """Whether a finite grad norm is evidence, from the analyser's verdict on it (``gn_outlier``), the
    loss z of the same step and the grad norm's ratio to its recent tail (NaN while not warm)."""
    if ratio > cfg.grad_tail_factor:
        return Evidence.GRAD_TAIL
    if gn_outlier and loss_z >= cfg.joint_loss_z:
        return Evidence.GRAD_AND_LOSS
    return Evidence.NONE


class LossShift:
    """The loss-shift test's window (host twin; the device judge keeps the same flags in a tensor).

    Holds whether each of the latest ``shift_window`` steps had its loss elevated (z >= ``shift_z``;
    a NaN z -- warm-up, a non-finite loss -- is not elevated).
    """

    def __init__(self, cfg: EvidenceConfig) -> None:
        self.cfg = cfg
        self.elevated: deque = deque(maxlen=cfg.shift_window)

    def update(self, loss_z: float) -> bool:
        """Take one step's loss z; True when half the window is elevated (the test fires)."""
        if self.cfg.shift_z is None:
            return False
        self.elevated.append(bool(loss_z >= self.cfg.shift_z))
        return 2 * sum(self.elevated) >= self.cfg.shift_window

    def state_dict(self) -> dict:
        """The flags, oldest first (timeline state)."""
        return {"elevated": [bool(e) for e in self.elevated]}

    def load_state_dict(self, sd: dict | None) -> None:
        """Restore :meth:`state_dict` output (None: a checkpoint from before the test existed)."""
        self.elevated = deque((bool(e) for e in (sd or {}).get("elevated", [])), maxlen=self.cfg.shift_window)


def onset_lag(ev: Evidence, cfg: EvidenceConfig) -> int:
    """Steps before the judged one where the evidence began: the loss-shift test's window less one,
    0 for every single-step test (the device judge computes the same in tensor form)."""
    return cfg.shift_window - 1 if ev is Evidence.LOSS_SHIFT else 0


def shift_series(loss_z, cfg: EvidenceConfig):
    """The vectorised twin of :class:`LossShift` over a whole log: where the test fires."""
    import numpy as np

    z = np.asarray(loss_z, dtype=np.float64)
    if cfg.shift_z is None:
        return np.zeros(len(z), dtype=bool)
    with np.errstate(invalid="ignore"):
        up = (z >= cfg.shift_z).astype(np.int64)
    count = np.convolve(up, np.ones(cfg.shift_window, dtype=np.int64))[:len(z)]  # the trailing window's sum
    return 2 * count >= cfg.shift_window


class ColdBound:
    """The sanity bound of the first steps (host twin; the device judge mirrors it with tensors).

    Holds the largest accepted loss and grad norm seen while the loss test is not warm yet.
    """

    def __init__(self, cfg: EvidenceConfig) -> None:
        self.cfg = cfg
        self.max_loss = math.nan
        self.max_grad_norm = math.nan

    def check(self, loss: float, grad_norm: float, param_norm: float = math.nan) -> bool:
        """True if this (finite) first step breaks the bound; an accepted step raises the references."""
        cfg = self.cfg
        ref_g = self.max_grad_norm if self.max_grad_norm == self.max_grad_norm else param_norm
        bad = (ref_g == ref_g and grad_norm == grad_norm and grad_norm > cfg.cold_grad_factor * ref_g) or (
            self.max_loss == self.max_loss and self.max_loss > 0 and loss > cfg.cold_loss_factor * self.max_loss)
        if not bad:
            if math.isfinite(grad_norm):
                self.max_grad_norm = grad_norm if self.max_grad_norm != self.max_grad_norm else max(
                    self.max_grad_norm, grad_norm)
            if math.isfinite(loss):
                self.max_loss = loss if self.max_loss != self.max_loss else max(self.max_loss, loss)
        return bad

    def state_dict(self) -> dict:
        """The references (timeline state)."""
        return {"max_loss": float(self.max_loss), "max_grad_norm": float(self.max_grad_norm)}

    def load_state_dict(self, sd: dict | None) -> None:
        """Restore :meth:`state_dict` output (None: a checkpoint from before the bound existed)."""
        sd = sd or {}
        self.max_loss = float(sd.get("max_loss", math.nan))
        self.max_grad_norm = float(sd.get("max_grad_norm", math.nan))


def evidence_series(loss, loss_scores, grad_norm, present, grad_scores, config, in_lr_ramp=None) -> tuple:
    """The vectorised twin of the judge's rule over a recorded log (``lossguard simulate``).

    Args:
        loss: the loss per step (float array, may hold NaN/Inf).
        loss_scores: ``score(loss, config.loss)``.
        grad_norm: the grad norm per step (NaN where the log has none).
        present: where the log has a grad norm.
        grad_scores: ``score(grad_norm[present], config.grad_norm)``, or None without a grad-norm test.
        config: the :class:`GuardConfig`.
        in_lr_ramp: bool array, True where the LR ramps up (:mod:`lossguard.recovery.lr_phase`): there
            grad-norm evidence is waived when :func:`ramp_clipped` says so. None: nowhere.

    Returns:
        ``(bad, grad_norm_outlier, grad_norm_ratio, evidence)`` arrays aligned with ``loss``; no
        parameter norm is logged, so the sanity bound has no scale at the very first step.
    """
    import numpy as np

    from .tail import tail_series

    ev_cfg = config.evidence
    n = len(loss)
    loss = np.asarray(loss, dtype=np.float64)
    gn = np.asarray(grad_norm, dtype=np.float64)
    ratio = np.full(n, np.nan)
    gn_stat = np.zeros(n, dtype=bool)
    if grad_scores is not None:
        gp = gn[present]
        fin = np.isfinite(gp)
        tails = np.full(len(gp), np.nan)
        t = tail_series(gp[fin], config.grad_norm, ev_cfg.grad_tail_quantile)
        idx = np.flatnonzero(fin)
        # a non-finite grad norm does not enter the window: it sees the tail of the last finite point
        tails[idx] = t
        with np.errstate(divide="ignore", invalid="ignore"):
            r = np.where(tails > 0, gp / tails, np.nan)
        ratio[present] = r
        gn_stat[present] = grad_scores.outlier & fin
    gn_finite = ~present | np.isfinite(gn)
    nonfinite = ~np.isfinite(loss) | ~gn_finite
    loss_hit = loss_scores.outlier & ~nonfinite
    with np.errstate(invalid="ignore"):
        tail_hit = ratio > ev_cfg.grad_tail_factor
        joint_hit = gn_stat & (loss_scores.z >= ev_cfg.joint_loss_z)
    grad_hit = present & gn_finite & (tail_hit | joint_hit) & ~nonfinite & ~loss_hit
    if in_lr_ramp is not None and ramp_clipped(True, config.max_grad_norm, config.lr_ramp_window):
        grad_hit &= ~np.asarray(in_lr_ramp, dtype=bool)
    shift_hit = shift_series(loss_scores.z, ev_cfg) & ~nonfinite & ~loss_hit & ~grad_hit
    ev = np.zeros(n, dtype=np.int64)
    ev[nonfinite] = int(Evidence.NON_FINITE)
    ev[loss_hit] = int(Evidence.LOSS)
    ev[grad_hit & ~tail_hit] = int(Evidence.GRAD_AND_LOSS)
    ev[grad_hit & tail_hit] = int(Evidence.GRAD_TAIL)
    ev[shift_hit] = int(Evidence.LOSS_SHIFT)
    # The first steps: the loss test is cold until it has seen min_points finite losses.
    cold = ColdBound(ev_cfg)
    seen = 0
    for i in range(n):
        if seen >= config.loss.min_points:
            break
        if ev[i] == int(Evidence.NONE) and cold.check(float(loss[i]), float(gn[i]) if present[i] else math.nan):
            ev[i] = int(Evidence.COLD_BOUND)
        seen += int(math.isfinite(loss[i]))
    bad = ev != int(Evidence.NONE)
    gn_out = np.isin(ev, [int(Evidence.GRAD_AND_LOSS), int(Evidence.GRAD_TAIL)]) | (present & ~np.isfinite(gn))
    return bad, gn_out, ratio, ev
