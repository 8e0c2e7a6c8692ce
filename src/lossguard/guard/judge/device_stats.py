"""The analyser's robust outlier test, on the device: a ring buffer with a median / MAD baseline.

:class:`DeviceOutlier` is the tensor twin of :class:`lossguard.detect.outlier.OnlineOutlier`: same
window, same refresh stride, same warm-up, same verdict, computed in float64 with the same median
definition (mean of the two middle values of an even count, as numpy's) and the same noise
estimator (MAD of first differences over the window, in time order). Fed the same values it
flags exactly the same points as :func:`lossguard.detect.outlier.score` -- a spike in the report is
a spike the guard acts on, at the same step.

Everything is branch-free tensor arithmetic: the refresh ("every ``stride`` finite points") and the
"only finite values enter the window" rules are ``torch.where`` selections, so an update never
reads a value back to the host (no sync on CUDA). Cost per update: one gather and two sorts of
``window`` float64 values, a few scalar kernels.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from ...detect.outlier import DIFF_TO_SIGMA, OutlierConfig


@dataclass
class DeviceVerdict:
    """Per-update result, all 0-d tensors on the detector's device.

    Attributes:
        outlier: bool; True for a non-finite value or an outlier against the baseline.
        z: float64 signed distance in noise units (NaN during warm-up / for a non-finite value).
        baseline: float64 median in use (NaN during warm-up).
        finite: bool; the value was finite.
    """

    outlier: torch.Tensor
    z: torch.Tensor
    baseline: torch.Tensor
    finite: torch.Tensor


class DeviceOutlier:
    """Online robust outlier test whose whole state lives on ``device``.

    Args:
        config: the analyser's :class:`OutlierConfig` (window, stride, warm-up, thresholds, side).
        device: where the ring buffer and statistics live (the model's device).
    """

    def __init__(self, config: OutlierConfig, device: torch.device | str = "cpu") -> None:
        self.config = config
        dev = torch.device(device)
        f64: dict[str, Any] = dict(dtype=torch.float64, device=dev)
        self._buf = torch.zeros(config.window, **f64)       # last `window` finite values (ring)
        self._pos = torch.zeros((), dtype=torch.long, device=dev)    # next slot to write
        self._count = torch.zeros((), dtype=torch.long, device=dev)  # finite values seen so far
        self._median = torch.full((), float("nan"), **f64)
        self._noise = torch.full((), float("nan"), **f64)
        self._idx = torch.arange(config.window, device=dev)
        self._inf = torch.full((), float("inf"), **f64)
        self._rel = torch.tensor(config.rel_threshold, **f64)
        self._warm_rel = torch.tensor(config.rel_threshold * config.warmup_rel_factor, **f64)

    @property
    def device(self) -> torch.device:
        """Device of the state tensors."""
        return self._buf.device

    def _median_of(self, values: torch.Tensor, valid: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
        # Invalid slots sort to the end as +inf; the median of the n valid values is the mean of the
        # sorted entries (n-1)//2 and n//2 -- numpy's definition, bit for bit in float64.
        s = torch.sort(torch.where(valid, values, self._inf)).values
        lo = torch.clamp((n - 1) // 2, min=0).reshape(1)
        hi = (n // 2).clamp(max=self.config.window - 1).reshape(1)
        return ((s.index_select(0, lo) + s.index_select(0, hi)) / 2).reshape(())

    def update(self, value: torch.Tensor) -> DeviceVerdict:
        """Judge ``value`` (a 0-d tensor) against the current baseline, then add it if finite."""
        cfg = self.config
        W = cfg.window
        x = value.detach().to(device=self.device, dtype=torch.float64).reshape(())
        finite = torch.isfinite(x)
        c = self._count
        n = torch.clamp(c, max=W)
        # The window in time order: slot (pos - n + i) mod W holds the i-th oldest of the n values.
        order = torch.remainder(self._pos - n + self._idx, W)
        w = self._buf.index_select(0, order)
        valid = self._idx < n
        med = self._median_of(w, valid, n)
        # Noise from first differences, as outlier.py: DIFF_TO_SIGMA * median |w[i+1] - w[i]|.
        d = torch.abs(w[1:] - w[:-1])
        dvalid = self._idx[:-1] < (n - 1)
        mad = self._median_of(d, dvalid, torch.clamp(n - 1, min=0))
        noise = torch.maximum(DIFF_TO_SIGMA * mad, cfg.rel_noise_floor * torch.abs(med))
        # Refresh schedule of outlier.py: every point while the window fills, then every `stride`.
        filling = (c >= cfg.min_points) & (c < W)
        refresh = finite & (filling | ((c >= W) & ((c - W) % cfg.stride == 0)))
        self._median = torch.where(refresh, med, self._median)
        self._noise = torch.where(refresh, noise, self._noise)
        judged = finite & (c >= cfg.min_points)
        # thresholds(): max(z * noise, rel * |median|), rel doubled while the window fills; the test
        # abstains (threshold inf) when |median| < min_snr * noise.
        scale = torch.abs(self._median)
        rel = torch.where(c < W, self._warm_rel, self._rel)
        thr = torch.maximum(cfg.z_threshold * self._noise, rel * torch.clamp(scale, min=1e-12))
        thr = torch.where(scale >= cfg.min_snr * self._noise, thr, self._inf)
        dev = x - self._median
        if cfg.side == "up":
            hit = (dev > 0) & (dev >= thr)
        elif cfg.side == "down":
            hit = (dev < 0) & (-dev >= thr)
        else:
            hit = (dev != 0) & (torch.abs(dev) >= thr)
        outlier = ~finite | (judged & hit)
        nan = torch.full_like(x, float("nan"))
        z = torch.where(judged, dev / self._noise, nan)
        baseline = torch.where(judged, self._median, nan)
        # Push: only a finite value enters the window (the slot keeps its old value otherwise).
        slot = self._pos.reshape(1)
        self._buf.index_copy_(0, slot, torch.where(finite, x, self._buf.index_select(0, slot).reshape(())).reshape(1))
        step = finite.to(torch.long)
        self._pos = (self._pos + step) % W
        self._count = self._count + step
        return DeviceVerdict(outlier=outlier, z=z, baseline=baseline, finite=finite)

    def state_dict(self) -> dict:
        """The window in time order and the statistics, in :class:`OnlineOutlier`'s format, so a
        checkpoint moves between the device twin and the host twin (a GPU run resumed on CPU)."""
        n = min(int(self._count), self.config.window)
        order = torch.remainder(self._pos - n + torch.arange(n, device=self.device), self.config.window)
        return {"window": self._buf.index_select(0, order).cpu().tolist(), "count": int(self._count),
                "median": float(self._median), "noise": float(self._noise)}

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict` (or ``OnlineOutlier.state_dict``) output onto this device."""
        dev, W = self.device, self.config.window
        window = [float(v) for v in state["window"]][-W:]
        self._buf = torch.zeros(W, dtype=torch.float64, device=dev)
        if window:
            self._buf[: len(window)] = torch.tensor(window, dtype=torch.float64, device=dev)
        self._pos = torch.tensor(len(window) % W, dtype=torch.long, device=dev)
        self._count = torch.tensor(int(state["count"]), dtype=torch.long, device=dev)
        self._median = torch.tensor(float(state["median"]), dtype=torch.float64, device=dev)
        self._noise = torch.tensor(float(state["noise"]), dtype=torch.float64, device=dev)
