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

from ..detect.outlier import OnlineOutlier, OutlierConfig
from ..recovery.verdict import PACKED_FIELDS, Verdict


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


class HostJudge:
    """The judge on the host (Python floats; no torch).

    Args:
        loss: the loss test.
        grad_norm: the gradient-norm test (None: only a non-finite norm is bad).
        has_scaler: a GradScaler is in charge (its overflow steps are not the guard's to skip).
        shadow: report only (``apply`` is always True).
    """

    def __init__(self, loss: OutlierConfig, grad_norm: OutlierConfig | None, *, has_scaler: bool = False,
                 shadow: bool = False) -> None:
        self.loss_test = OnlineOutlier(loss)
        self.grad_norm_test = OnlineOutlier(grad_norm) if grad_norm is not None else None
        self.has_scaler, self.shadow = has_scaler, shadow

    def judge(self, loss: float, grad_norm: float, local_loss: float | None = None) -> Judgement:
        """Judge one step (``grad_norm`` NaN when not measured and no grad-norm test is configured)."""
        lv = self.loss_test.update(loss)
        gn_finite = math.isfinite(grad_norm)
        if self.grad_norm_test is not None:
            gv = self.grad_norm_test.update(grad_norm)
            gn_out, gn_z = gv.outlier, gv.z
        else:
            gn_out, gn_z = not gn_finite, math.nan
        overflow = self.has_scaler and not gn_finite
        bad = bool(lv.outlier or (gn_out and not overflow))
        values = {"loss": loss, "grad_norm": grad_norm, "loss_z": lv.z, "grad_norm_z": gn_z,
                  "loss_baseline": lv.baseline, "loss_outlier": float(lv.outlier), "grad_norm_outlier": float(gn_out),
                  "overflow": float(overflow), "bad": float(bad),
                  "local_loss": loss if local_loss is None else local_loss}
        return Judgement(bad=bad, apply=self.shadow or not bad, packed=[float(values[k]) for k in PACKED_FIELDS])

    def state_dict(self) -> dict[str, Any]:
        """The detector windows (timeline state)."""
        return {"loss": self.loss_test.state_dict(),
                "grad_norm": None if self.grad_norm_test is None else self.grad_norm_test.state_dict()}

    def load_state_dict(self, sd: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` output (also accepts a :class:`DeviceJudge`'s)."""
        self.loss_test.load_state_dict(sd["loss"])
        if self.grad_norm_test is not None and sd.get("grad_norm") is not None:
            self.grad_norm_test.load_state_dict(sd["grad_norm"])


class DeviceJudge:
    """The judge on the device: 0-d tensors in, 0-d tensors out, no host sync.

    Args: as :class:`HostJudge`, plus ``device`` (where the statistics live).
    """

    def __init__(self, loss: OutlierConfig, grad_norm: OutlierConfig | None, *, device, has_scaler: bool = False,
                 shadow: bool = False) -> None:
        from .device_stats import DeviceOutlier

        self.loss_test = DeviceOutlier(loss, device)
        self.grad_norm_test = DeviceOutlier(grad_norm, device) if grad_norm is not None else None
        self.has_scaler, self.shadow = has_scaler, shadow

    def judge(self, loss, grad_norm, local_loss=None) -> Judgement:
        """Judge one step from 0-d float64 tensors (global loss, global grad norm, this rank's loss)."""
        import torch

        gn_finite = torch.isfinite(grad_norm)
        lv = self.loss_test.update(loss)
        if self.grad_norm_test is not None:
            gv = self.grad_norm_test.update(grad_norm)
            gn_out, gn_z = gv.outlier, gv.z
        else:
            gn_out, gn_z = ~gn_finite, torch.full_like(grad_norm, math.nan)
        # With a GradScaler, overflow steps are the scaler's business (it skips them itself).
        overflow = (~gn_finite) if self.has_scaler else torch.zeros_like(gn_finite)
        bad = lv.outlier | (gn_out & ~overflow)
        apply = torch.ones_like(bad) if self.shadow else ~bad
        values = {"loss": loss, "grad_norm": grad_norm, "loss_z": lv.z, "grad_norm_z": gn_z,
                  "loss_baseline": lv.baseline, "loss_outlier": lv.outlier.double(),
                  "grad_norm_outlier": gn_out.double(), "overflow": overflow.double(), "bad": bad.double(),
                  "local_loss": loss if local_loss is None else local_loss}
        packed = torch.stack([values[k].to(torch.float64).reshape(()) for k in PACKED_FIELDS])
        return Judgement(bad=bad, apply=apply, packed=packed)

    def state_dict(self) -> dict[str, Any]:
        """The detector windows, in the host twin's format."""
        return {"loss": self.loss_test.state_dict(),
                "grad_norm": None if self.grad_norm_test is None else self.grad_norm_test.state_dict()}

    def load_state_dict(self, sd: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` output (also accepts a :class:`HostJudge`'s)."""
        self.loss_test.load_state_dict(sd["loss"])
        if self.grad_norm_test is not None and sd.get("grad_norm") is not None:
            self.grad_norm_test.load_state_dict(sd["grad_norm"])
