"""The judge: one step's loss and gradient norm -> a typed :class:`Verdict`.

Two twins with the same verdicts, bit for bit:

- :class:`HostJudge` runs the analyser's :class:`OnlineOutlier` on Python floats. Torch-free: the
  guard uses it on a CPU (where a few floats cost less than ~60 tiny tensor ops) and
  ``lossguard simulate`` uses it to replay a recorded log.
- :class:`DeviceJudge` runs :class:`DeviceOutlier` on 0-d tensors on the model's device: the
  verdict stays a tensor (the device gate needs no sync) and the numbers are packed into one small
  tensor (:data:`PACKED_FIELDS`) for the one batched host read per step.

Both return a :class:`Judgement`: ``bad`` / ``apply`` (bools or 0-d bool tensors) and ``packed``
(the floats of :data:`PACKED_FIELDS`, a list or a tensor). :meth:`Judgement.verdict` turns the host
copy into a :class:`Verdict` by field name.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ...detect.outlier import OnlineOutlier, OutlierConfig
from ...recovery.verdict import PACKED_FIELDS, Verdict
from .evidence import ColdBound, Evidence, EvidenceConfig, LossShift, grad_evidence, onset_lag
from .tail import OnlineTail


@dataclass
class Judgement:
    """What a judge returns for one step (before the host has read it, on a device).

    Attributes:
        bad: the update is to be withheld (bool, or a 0-d bool tensor on the device).
        apply: whether the optimizer applies the update (``not bad``; always True in shadow mode).
        packed: the verdict's numbers in :data:`PACKED_FIELDS` order (list of floats, or a tensor).
    """

    bad: Any
    apply: Any
    packed: Any

    @staticmethod
    def verdict(host_values, *, step: int, batch_index: int, lr: float = math.nan,
                loss_scale: float = math.nan) -> Verdict:
        """The typed verdict from the host copy of :attr:`packed` (a list, or anything with ``tolist``)."""
        values = host_values if isinstance(host_values, list) else host_values.tolist()
        return Verdict.from_packed(values, step=step, batch_index=batch_index, lr=lr, loss_scale=loss_scale)


def plain(obj: Any) -> Any:
    """``obj`` with every NumPy scalar made a Python ``float`` / ``int`` / ``bool`` (dicts and lists
    rebuilt). The analyser's online statistics compute in NumPy (its ``noise`` is an ``np.float64``);
    a checkpoint holding one fails ``torch.load(weights_only=True)``, torch's default since 2.6, so
    the judge's state leaves it as plain Python."""
    if isinstance(obj, dict):
        return {k: plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [plain(v) for v in obj]
    if hasattr(obj, "dtype") and getattr(obj, "ndim", None) == 0 and hasattr(obj, "item"):
        return obj.item()
    return obj


def _detector_state(judge) -> dict[str, Any]:
    """The windows of a judge's tests (the loss test, the grad-norm test and tail), either twin."""
    return {"loss": judge.loss_test.state_dict(),
            "grad_norm": None if judge.grad_norm_test is None else judge.grad_norm_test.state_dict(),
            "grad_norm_tail": None if judge.grad_norm_tail is None else judge.grad_norm_tail.state_dict()}


def _load_detector_state(judge, sd: dict[str, Any]) -> None:
    """Restore :func:`_detector_state` output (from either twin) into ``judge``."""
    judge.loss_test.load_state_dict(sd["loss"])
    if judge.grad_norm_test is not None and sd.get("grad_norm") is not None:
        judge.grad_norm_test.load_state_dict(sd["grad_norm"])
    if judge.grad_norm_tail is not None:
        judge.grad_norm_tail.load_state_dict(sd.get("grad_norm_tail"))


class HostJudge:
    """The judge on the host (Python floats; no torch).

    Args:
        loss: the loss test.
        grad_norm: the gradient-norm test (None: only a non-finite norm is bad).
        evidence: the calibrated rule (:mod:`.evidence`); None = its defaults.
        has_scaler: a GradScaler is in charge (its overflow steps are not the guard's to skip).
        shadow: report only (``apply`` is always True).
    """

    def __init__(self, loss: OutlierConfig, grad_norm: OutlierConfig | None, *,
                 evidence: EvidenceConfig | None = None, has_scaler: bool = False, shadow: bool = False) -> None:
        self.evidence = evidence or EvidenceConfig()
        self.loss_test = OnlineOutlier(loss)
        self.grad_norm_test = OnlineOutlier(grad_norm) if grad_norm is not None else None
        self.grad_norm_tail = (OnlineTail(grad_norm, self.evidence.grad_tail_quantile)
                               if grad_norm is not None else None)
        self.cold = ColdBound(self.evidence)
        self.shift = LossShift(self.evidence)
        self.has_scaler, self.shadow = has_scaler, shadow

    @property
    def warm(self) -> bool:
        """The loss test gives verdicts (the first-steps sanity bound no longer applies)."""
        return self.loss_test.count >= self.loss_test.config.min_points

    def judge(self, loss: float, grad_norm: float, local_loss: float | None = None,
              param_norm: float = math.nan, waived: bool = False) -> Judgement:
        """Judge one step (``grad_norm`` NaN when not measured and no grad-norm test is configured;
        ``param_norm`` only matters at the very first step, for the sanity bound; ``waived``: the
        grad-norm evidence is waived, :func:`~.evidence.ramp_clipped`)."""
        cold = not self.warm
        lv = self.loss_test.update(loss)
        shifted = self.shift.update(lv.z)
        gn_finite = math.isfinite(grad_norm)
        ratio, gn_z, gn_stat = math.nan, math.nan, False
        if self.grad_norm_test is not None and self.grad_norm_tail is not None:  # set together
            gv = self.grad_norm_test.update(grad_norm)
            tail = self.grad_norm_tail.update(grad_norm)
            gn_stat, gn_z = gv.outlier and gn_finite, gv.z
            ratio = grad_norm / tail if tail > 0 else math.nan
        overflow = self.has_scaler and not gn_finite
        if not math.isfinite(loss) or (not gn_finite and not overflow):
            ev = Evidence.NON_FINITE
        elif lv.outlier:
            ev = Evidence.LOSS
        elif self.grad_norm_test is not None and gn_finite:
            ev = grad_evidence(self.evidence, gn_outlier=gn_stat, loss_z=lv.z, ratio=ratio)
            ev = Evidence.NONE if waived else ev
        else:
            ev = Evidence.NONE
        if ev is Evidence.NONE and shifted and not overflow:
            ev = Evidence.LOSS_SHIFT
        if cold and ev is Evidence.NONE and self.cold.check(loss, grad_norm if gn_finite else math.nan, param_norm):
            ev = Evidence.COLD_BOUND
        bad = ev is not Evidence.NONE
        gn_out = ev in (Evidence.GRAD_AND_LOSS, Evidence.GRAD_TAIL) or (not gn_finite and not overflow)
        values = {"loss": loss, "grad_norm": grad_norm, "loss_z": lv.z, "grad_norm_z": gn_z,
                  "loss_baseline": lv.baseline, "loss_outlier": float(lv.outlier), "grad_norm_outlier": float(gn_out),
                  "overflow": float(overflow), "bad": float(bad),
                  "local_loss": loss if local_loss is None else local_loss,
                  "grad_norm_ratio": ratio, "evidence": float(int(ev)),
                  "onset_lag": float(onset_lag(ev, self.evidence))}
        return Judgement(bad=bad, apply=self.shadow or not bad, packed=[float(values[k]) for k in PACKED_FIELDS])

    def state_dict(self) -> dict[str, Any]:
        """The detector windows (timeline state), in plain Python types only (see :func:`plain`)."""
        return plain({**_detector_state(self), "cold": self.cold.state_dict(), "shift": self.shift.state_dict()})

    def load_state_dict(self, sd: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` output (also accepts a :class:`DeviceJudge`'s)."""
        _load_detector_state(self, sd)
        self.cold.load_state_dict(sd.get("cold"))
        self.shift.load_state_dict(sd.get("shift"))


class DeviceJudge:
    """The judge on the device: 0-d tensors in, 0-d tensors out, no host sync.

    The same rule as :class:`HostJudge` (:mod:`.evidence`) in branch-free tensor arithmetic.
    Args: as :class:`HostJudge`, plus ``device`` (where the statistics live).
    """

    def __init__(self, loss: OutlierConfig, grad_norm: OutlierConfig | None, *, device,
                 evidence: EvidenceConfig | None = None, has_scaler: bool = False, shadow: bool = False) -> None:
        import torch

        from .device_stats import DeviceOutlier
        from .tail import DeviceTail

        self.evidence = evidence or EvidenceConfig()
        self.loss_test = DeviceOutlier(loss, device)
        self.grad_norm_test = DeviceOutlier(grad_norm, device) if grad_norm is not None else None
        self.grad_norm_tail = (DeviceTail(grad_norm, self.evidence.grad_tail_quantile, device)
                               if grad_norm is not None else None)
        f64: dict[str, Any] = dict(dtype=torch.float64, device=torch.device(device))
        self._cold_loss = torch.full((), math.nan, **f64)   # largest accepted first-steps loss
        self._cold_gn = torch.full((), math.nan, **f64)     # largest accepted first-steps grad norm
        # The loss-shift test's flags, a ring written at a host-side position (no sync).
        self._shift_flags = torch.zeros(self.evidence.shift_window, dtype=torch.bool, device=torch.device(device))
        self._shift_pos = 0
        self._never = torch.zeros((), dtype=torch.bool, device=torch.device(device))  # the test off
        self.has_scaler, self.shadow = has_scaler, shadow

    def judge(self, loss, grad_norm, local_loss=None, param_norm=None, waived: bool = False) -> Judgement:
        """Judge one step from 0-d float64 tensors (global loss, global grad norm, this rank's loss,
        and the parameter norm for the first step's sanity bound, or None); ``waived`` (a host
        bool: no sync) waives the grad-norm evidence, :func:`~.evidence.ramp_clipped`."""
        import torch

        ev_cfg = self.evidence
        nan = torch.full_like(loss, math.nan)
        cold = self.loss_test._count < self.loss_test.config.min_points
        gn_finite = torch.isfinite(grad_norm)
        lv = self.loss_test.update(loss)
        shifted = self._shift(lv.z)
        if self.grad_norm_test is not None and self.grad_norm_tail is not None:  # set together
            gv = self.grad_norm_test.update(grad_norm)
            tail = self.grad_norm_tail.update(grad_norm)
            gn_stat, gn_z = gv.outlier & gn_finite, gv.z
            ratio = torch.where(tail > 0, grad_norm / tail, nan)
            tail_hit = ratio > ev_cfg.grad_tail_factor
            joint_hit = gn_stat & (lv.z >= ev_cfg.joint_loss_z)
        else:
            gn_z, ratio = nan, nan
            tail_hit = joint_hit = torch.zeros_like(gn_finite)
        # With a GradScaler, overflow steps are the scaler's business (it skips them itself).
        overflow = (~gn_finite) if self.has_scaler else torch.zeros_like(gn_finite)
        nonfinite = ~torch.isfinite(loss) | (~gn_finite & ~overflow)
        loss_hit = lv.outlier & ~nonfinite
        grad_hit = gn_finite & (tail_hit | joint_hit) & ~nonfinite & ~loss_hit
        if waived:
            grad_hit = torch.zeros_like(grad_hit)
        shift_hit = shifted & ~nonfinite & ~loss_hit & ~grad_hit & ~overflow
        ref_g = torch.where(torch.isnan(self._cold_gn), nan if param_norm is None else param_norm.to(nan),
                            self._cold_gn)
        cold_hit = cold & ~nonfinite & ~loss_hit & ~grad_hit & ~shift_hit & (
            (gn_finite & (grad_norm > ev_cfg.cold_grad_factor * ref_g))
            | ((self._cold_loss > 0) & (loss > ev_cfg.cold_loss_factor * self._cold_loss)))
        ev = (nonfinite.double() * int(Evidence.NON_FINITE) + loss_hit.double() * int(Evidence.LOSS)
              + (grad_hit & ~tail_hit).double() * int(Evidence.GRAD_AND_LOSS)
              + (grad_hit & tail_hit).double() * int(Evidence.GRAD_TAIL) + cold_hit.double() * int(Evidence.COLD_BOUND)
              + shift_hit.double() * int(Evidence.LOSS_SHIFT))
        bad = nonfinite | loss_hit | grad_hit | cold_hit | shift_hit
        accept = cold & ~bad
        self._cold_gn = torch.where(accept & gn_finite, torch.fmax(self._cold_gn, grad_norm), self._cold_gn)
        self._cold_loss = torch.where(accept & torch.isfinite(loss), torch.fmax(self._cold_loss, loss), self._cold_loss)
        gn_out = grad_hit | (~gn_finite & ~overflow)
        apply = torch.ones_like(bad) if self.shadow else ~bad
        values = {"loss": loss, "grad_norm": grad_norm, "loss_z": lv.z, "grad_norm_z": gn_z,
                  "loss_baseline": lv.baseline, "loss_outlier": lv.outlier.double(),
                  "grad_norm_outlier": gn_out.double(), "overflow": overflow.double(), "bad": bad.double(),
                  "local_loss": loss if local_loss is None else local_loss, "grad_norm_ratio": ratio, "evidence": ev,
                  "onset_lag": shift_hit.double() * (ev_cfg.shift_window - 1)}
        packed = torch.stack([values[k].to(torch.float64).reshape(()) for k in PACKED_FIELDS])
        return Judgement(bad=bad, apply=apply, packed=packed)

    def _shift(self, loss_z):
        """The loss-shift test (:class:`LossShift`'s twin): record this step's flag, fire on half the window."""
        if self.evidence.shift_z is None:
            return self._never
        w = self.evidence.shift_window
        self._shift_flags[self._shift_pos % w] = loss_z >= self.evidence.shift_z  # NaN z: not elevated
        self._shift_pos += 1
        return 2 * self._shift_flags.sum() >= w

    @property
    def warm(self) -> bool:
        """Whether the loss test gives verdicts (reads one count back: not for the hot path)."""
        return int(self.loss_test._count) >= self.loss_test.config.min_points

    def state_dict(self) -> dict[str, Any]:
        """The detector windows, in the host twin's format."""
        return {**_detector_state(self),
                "cold": {"max_loss": float(self._cold_loss), "max_grad_norm": float(self._cold_gn)},
                "shift": {"elevated": self._shift_chronological()}}

    def _shift_chronological(self) -> list[bool]:
        """The shift flags oldest first, as many as were written (the host twin's format)."""
        w = self.evidence.shift_window
        n = min(self._shift_pos, w)
        flags = self._shift_flags.tolist()
        return [bool(flags[(self._shift_pos - n + k) % w]) for k in range(n)]

    def load_state_dict(self, sd: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` output (also accepts a :class:`HostJudge`'s)."""
        import torch

        _load_detector_state(self, sd)
        cold = sd.get("cold") or {}
        self._cold_loss = torch.tensor(float(cold.get("max_loss", math.nan)), dtype=torch.float64,
                                       device=self._cold_loss.device)
        self._cold_gn = torch.tensor(float(cold.get("max_grad_norm", math.nan)), dtype=torch.float64,
                                     device=self._cold_gn.device)
        flags = [bool(e) for e in (sd.get("shift") or {}).get("elevated", [])][-self.evidence.shift_window:]
        self._shift_flags.zero_()
        if flags:
            self._shift_flags[:len(flags)] = torch.tensor(flags, dtype=torch.bool, device=self._shift_flags.device)
        self._shift_pos = len(flags)
