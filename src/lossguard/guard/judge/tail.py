"""The recent tail of a series: a quantile of its trailing window, online, vectorised and on the device.

Three twins of one statistic, with the analyser's outlier test's window and refresh schedule
(:func:`lossguard.detect.outlier.refresh_counts`): while the window fills (``min_points <= c <
window`` finite points seen) the quantile is refreshed at every point, then every ``stride`` points.
Every finite value enters the window (as in the outlier test); a quantile below the maximum is
robust to the few spikes that do (0.9 of 128 points: 12 are needed to move it). Before
``min_points`` values the tail is NaN (no verdict). Quantiles interpolate linearly (numpy's and
torch's default), in float64.
"""
from __future__ import annotations

import math
from collections import deque
from typing import Any

import numpy as np

from ...detect.outlier import OutlierConfig, refresh_counts


class OnlineTail:
    """The tail quantile, one point at a time; ``update(x)`` returns the tail *before* ``x``."""

    def __init__(self, config: OutlierConfig, q: float) -> None:
        self.config, self.q = config, q
        self._window: deque = deque(maxlen=config.window)
        self._count = 0
        self._tail = math.nan

    def update(self, value: float) -> float:
        """The tail quantile in force for ``value`` (NaN before ``min_points``); then add it if finite."""
        cfg, c = self.config, self._count
        if not math.isfinite(value):
            return self._tail if c >= cfg.min_points else math.nan
        if cfg.min_points <= c < cfg.window or (c >= cfg.window and (c - cfg.window) % cfg.stride == 0):
            self._tail = float(np.quantile(np.fromiter(self._window, dtype=np.float64), self.q))
        tail = self._tail if c >= cfg.min_points else math.nan
        self._window.append(float(value))
        self._count += 1
        return tail

    def state_dict(self) -> dict:
        """Window and statistic (timeline state)."""
        return {"window": [float(v) for v in self._window], "count": int(self._count), "tail": float(self._tail)}

    def load_state_dict(self, sd: dict | None) -> None:
        """Restore :meth:`state_dict` output (None: start empty, a checkpoint from before the tail)."""
        sd = sd or {"window": [], "count": 0, "tail": math.nan}
        self._window = deque((float(v) for v in sd["window"]), maxlen=self.config.window)
        self._count, self._tail = int(sd["count"]), float(sd["tail"])


def tail_series(x: np.ndarray, config: OutlierConfig, q: float) -> np.ndarray:
    """The vectorised twin over *finite* values ``x`` (in order): the tail in force for each point."""
    m = len(x)
    out = np.full(m, np.nan)
    if m <= config.min_points:
        return out
    refresh = refresh_counts(m, config)
    tails = np.empty(len(refresh))
    W = config.window
    full = refresh >= W
    for k in np.flatnonzero(~full):  # the window still filling: at most `window` of them, all short
        r = int(refresh[k])
        tails[k] = np.quantile(x[max(0, r - W):r], q)
    if full.any():
        # Full windows: one quantile per refresh block (~m/stride), taken as rows of a strided view
        # (no copy of the series), in chunks to bound the partition's scratch memory.
        rows = np.lib.stride_tricks.sliding_window_view(x, W)   # rows[j] = x[j:j+W]
        starts = refresh[full].astype(np.int64) - W
        pos = np.flatnonzero(full)
        for a in range(0, len(starts), 4096):
            tails[pos[a:a + 4096]] = np.quantile(rows[starts[a:a + 4096]], q, axis=1)
    counts = np.diff(np.append(refresh, m))
    out[int(refresh[0]):] = np.repeat(tails, counts)
    return out


class DeviceTail:
    """The tail quantile with its whole state on ``device`` (no host sync): a NaN-padded ring buffer."""

    def __init__(self, config: OutlierConfig, q: float, device) -> None:
        import torch

        self.config, self.q = config, q
        f64: dict[str, Any] = dict(dtype=torch.float64, device=torch.device(device))
        self._buf = torch.full((config.window,), math.nan, **f64)
        self._pos = torch.zeros((), dtype=torch.long, device=self._buf.device)
        self._count = torch.zeros((), dtype=torch.long, device=self._buf.device)
        self._tail = torch.full((), math.nan, **f64)

    def update(self, value):
        """The tail in force for ``value`` (0-d float64 tensor; NaN before ``min_points``)."""
        import torch

        cfg, c = self.config, self._count
        x = value.detach().to(self._buf).reshape(())
        finite = torch.isfinite(x)
        refresh = finite & (((c >= cfg.min_points) & (c < cfg.window))
                            | ((c >= cfg.window) & ((c - cfg.window) % cfg.stride == 0)))
        self._tail = torch.where(refresh, torch.nanquantile(self._buf, self.q), self._tail)
        tail = torch.where(c >= cfg.min_points, self._tail, torch.full_like(self._tail, math.nan))
        slot = self._pos.reshape(1)
        self._buf.index_copy_(0, slot, torch.where(finite, x, self._buf.index_select(0, slot).reshape(())).reshape(1))
        step = finite.to(torch.long)
        self._pos = (self._pos + step) % cfg.window
        self._count = self._count + step
        return tail

    def state_dict(self) -> dict:
        """In :class:`OnlineTail`'s format (window in time order)."""
        import torch

        n = min(int(self._count), self.config.window)
        order = torch.remainder(self._pos - n + torch.arange(n, device=self._buf.device), self.config.window)
        return {"window": self._buf.index_select(0, order).cpu().tolist(), "count": int(self._count),
                "tail": float(self._tail)}

    def load_state_dict(self, sd: dict | None) -> None:
        """Restore :meth:`state_dict` (or :class:`OnlineTail`) output onto this device."""
        import torch

        sd = sd or {"window": [], "count": 0, "tail": math.nan}
        W, dev = self.config.window, self._buf.device
        window = [float(v) for v in sd["window"]][-W:]
        self._buf = torch.full((W,), math.nan, dtype=torch.float64, device=dev)
        if window:
            self._buf[:len(window)] = torch.tensor(window, dtype=torch.float64, device=dev)
        self._pos = torch.tensor(len(window) % W, dtype=torch.long, device=dev)
        self._count = torch.tensor(int(sd["count"]), dtype=torch.long, device=dev)
        self._tail = torch.tensor(float(sd["tail"]), dtype=torch.float64, device=dev)
