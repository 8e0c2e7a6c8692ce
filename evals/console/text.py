"""Text helpers shared by the renderers: tqdm's meter, Python logging timestamps.

``tqdm_meter`` follows tqdm's ``format_meter`` defaults (tqdm/std.py, v4.66): ``{desc}:
{percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} [{elapsed}<{remaining}, {rate_fmt}{postfix}]``, a
10-cell Unicode bar when the width is unknown (output captured to a file), and redraws joined by
``\\r`` on one physical line as they land in a captured log.
"""

from __future__ import annotations

from datetime import datetime

_PARTIAL = " ▏▎▍▌▋▊▉"


def hms(seconds: float) -> str:
    """tqdm's ``format_interval``: ``MM:SS`` or ``H:MM:SS``."""
    s = int(seconds)
    h, s = divmod(s, 3600)
    m, s = divmod(s, 60)
    return f"{h:d}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"


def bar(frac: float, width: int = 10) -> str:
    """tqdm's Unicode bar of ``width`` cells."""
    frac = min(1.0, max(0.0, frac))
    eighths = int(frac * width * 8)
    full, part = divmod(eighths, 8)
    s = "█" * full
    if full < width:
        s += _PARTIAL[part] + " " * (width - full - 1)
    return s


def tqdm_meter(n: int, total: int | None, elapsed: float, desc: str = "", postfix: str = "",
               unit: str = "it", width: int = 10) -> str:
    """One tqdm redraw (no leading ``\\r``)."""
    rate = n / elapsed if elapsed > 0 else 0.0
    if rate >= 1 or rate == 0:
        rate_fmt = f"{rate:5.2f}{unit}/s" if rate else f"?{unit}/s"
    else:
        rate_fmt = f"{1 / rate:5.2f}s/{unit}"
    post = f", {postfix}" if postfix else ""
    head = f"{desc}: " if desc else ""
    if total:
        remaining = (total - n) / rate if rate else 0
        return (f"{head}{100 * n / total:3.0f}%|{bar(n / total, width)}| {n}/{total} "
                f"[{hms(elapsed)}<{hms(remaining)}, {rate_fmt}{post}]")
    return f"{head}{n}{unit} [{hms(elapsed)}, {rate_fmt}{post}]"


def log_ts(t: datetime) -> str:
    """Python logging's default ``%(asctime)s``: ``2026-03-02 09:14:05,120``."""
    return t.strftime("%Y-%m-%d %H:%M:%S") + f",{t.microsecond // 1000:03d}"


def g(v: float, digits: int = 4) -> str:
    """Python's ``round(v, digits)`` as ``str`` would print it inside a dict."""
    return repr(round(v, digits))


class TqdmStream:
    """What a tqdm bar leaves in a captured stream: ``\\r`` redraws, and ``tqdm.write`` clearing the bar
    (``\\r`` + spaces + ``\\r``), printing its message on its own line, then redrawing the bar."""

    def __init__(self, total: int | None, desc: str = "", unit: str = "it", width: int = 10,
                 sec_per_it: float = 0.5):
        self.total, self.desc, self.unit, self.width = total, desc, unit, width
        self.sec_per_it = sec_per_it
        self.parts: list[str] = []
        self.n = 0
        self.postfix = ""
        self._last = ""
        self.draw(0)

    def meter(self) -> str:
        """The current redraw text."""
        if self.n == 0:
            head = f"{self.desc}: " if self.desc else ""
            post = f", {self.postfix}" if self.postfix else ""
            if self.total:
                return f"{head}  0%|{' ' * self.width}| 0/{self.total} [00:00<?, ?{self.unit}/s{post}]"
            return f"{head}0{self.unit} [00:00, ?{self.unit}/s{post}]"
        return tqdm_meter(self.n, self.total, self.n * self.sec_per_it, self.desc, self.postfix, self.unit, self.width)

    def draw(self, n: int, postfix: str | None = None) -> None:
        """Move the bar to ``n`` (and set its postfix) and redraw."""
        self.n = n
        if postfix is not None:
            self.postfix = postfix
        self._last = self.meter()
        self.parts.append("\r" + self._last)

    def advance(self, n: int) -> None:
        """Move the bar to ``n`` without drawing (tqdm skips redraws within ``mininterval``)."""
        self.n = n

    def write(self, msg: str) -> None:
        """``tqdm.write(msg)`` while the bar is shown: clear the last drawn bar, print, redraw at the current n."""
        self.parts.append("\r" + " " * len(self._last) + "\r" + msg + "\n")
        self._last = self.meter()
        self.parts.append("\r" + self._last)

    def close(self) -> None:
        """``bar.close()`` with leave=True: a final newline."""
        self.parts.append("\n")

    def text(self) -> str:
        """Everything written so far."""
        return "".join(self.parts)


def absl_prefix(t: datetime, where: str, level: str = "I", thread: int = 140235871725376) -> str:
    """absl-py's log prefix: ``I0302 09:14:05.123456 140235871725376 file.py:123] ``."""
    return f"{level}{t:%m%d %H:%M:%S}.{t.microsecond:06d} {thread:5d} {where}] "
