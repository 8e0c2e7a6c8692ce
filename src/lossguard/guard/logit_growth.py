"""How fast the largest attention logit grows: the earliest sign of an LR too high for the model.

A level threshold (QK-clip's ``tau`` = 100) sees attention-logit growth late on a model whose loss
stalls early: on the harsh preset of ``benchmarks/natural_instability.py`` (4 layers, width 128,
heads of 64) the loss at LR 1e-2 falls behind the best LR's from step ~25, when the largest logit
is ~20, and it passes 100 only at step ~55; at LR 0.1 the loss stalls at step ~12 (logit 33). What
separates those runs early is the *rate*: at 1e-2 the largest logit grows 0.7 -> 19.8 over steps
15-25 (28x), at 0.1 0.5 -> 33.5 over steps 3-12, while at the best LR (3e-3) it never grows more
than ~5x in 20 steps (0.7 -> 3.4 over steps 25-45, below 2 then) and 2.3x once above 10 (5.3 -> 12.4
over steps 90-120), staying under 32 for the whole run. Exponential growth is what an instability
is; a logit that creeps up as the model learns grows slowly.
"""
from __future__ import annotations

import math
from collections import deque
from typing import Any


class LogitGrowth:
    """The largest attention logit of the last ``window`` steps, and whether it grew too fast.

    Args:
        window: steps over which growth is measured (the oldest kept value is compared with the newest).
        factor: growth flagged at ``newest >= factor * oldest``.
        floor: ... and only when ``newest > floor`` (tiny logits at initialisation grow by large
            factors while the model learns anything at all).
    """

    def __init__(self, *, window: int, factor: float, floor: float) -> None:
        self.window, self.factor, self.floor = window, factor, floor
        self._seen: deque[tuple[int, float]] = deque()

    def update(self, step: int, largest: float) -> float | None:
        """Record step ``step``'s largest logit. When it is at least ``factor`` times the oldest value
        of the window (kept at least ``window // 4`` steps: faster growth is stronger evidence, and at
        the start of training or after a cut the window is not full yet), the growth *per window*,
        ``ratio ** (window / steps it took)``; else None. Non-finite values are not recorded (the
        NaN test acts there)."""
        if not math.isfinite(largest):
            return None
        self._seen.append((step, largest))
        while self._seen and self._seen[0][0] < step - self.window:
            self._seen.popleft()
        first_step, first = self._seen[0]
        span = step - first_step
        if span < max(1, self.window // 4) or largest <= self.floor or first <= 0:
            return None
        ratio = largest / first
        return ratio ** (self.window / span) if ratio >= self.factor else None

    @property
    def onset(self) -> int | None:
        """The first step of the window (where the growth flagged now began), None when empty."""
        return self._seen[0][0] if self._seen else None

    def restart(self) -> None:
        """Forget the history (after an LR cut: the next cut needs new evidence)."""
        self._seen.clear()

    def state_dict(self) -> dict[str, Any]:
        """The window's values (JSON-safe)."""
        return {"seen": [list(x) for x in self._seen]}

    def load_state_dict(self, sd: dict[str, Any] | None) -> None:
        """Restore :meth:`state_dict` output (None: from before this test existed; start empty)."""
        self._seen = deque((int(s), float(v)) for s, v in (sd or {}).get("seen", []))
