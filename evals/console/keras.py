"""Keras 2 (tf.keras) and Keras 3 ``model.fit`` console output: ``Epoch e/E`` then the Progbar.

Formats taken from github.com/keras-team/keras:
- Keras 2, tag v2.15.0, keras/utils/generic_utils.py ``Progbar.update``: ``%{d}d/%d [`` + ``=``*(w-1) + ``>`` +
  ``.``*rest + ``]`` (width 30), `` - ETA: 2s`` while running, `` - 2s 20ms/step`` when finalised, then
  `` - loss: {:.4f}``; on a terminal each redraw is ``\\b``*previous width + ``\\r``; verbose=2 prints one line per
  epoch ``{n}/{N} - 2s - loss: X - val_loss: Y - 2s/epoch - 20ms/step``; keras/callbacks.py ``ProgbarLogger``
  (``Epoch {e}/{E}``) and ``TerminateOnNaN`` (``Batch {batch}: Invalid loss, terminating training``).
- Keras 3 @ 3422977a5e38fb2f7709aaa9a08e47f0c43d0f60, keras/src/utils/progbar.py: the counter in bold
  ``\\x1b[1m%{d}d/%d\\x1b[0m``, a 20-cell bar of ``━`` in green ``\\33[32m`` (done) and white ``\\33[37m`` (to do),
  bold ETA / elapsed, `` 20ms/step``, `` - loss: {:.4f}``; ``_dynamic_display`` is true on a terminal *and* whenever
  ``"posix" in sys.modules`` (Linux), so redirected logs also get ``\\b``*width + ``\\r`` redraws (checked with Keras
  3.15 writing to a file); verbose=2 ``{n}/{N} - 2s - 20ms/step - loss: X``.
The loss printed by the Progbar is the running mean over the epoch's batches so far; here the curve value is
printed as that mean.
"""

from __future__ import annotations

import math
import re

from evals.console.curve import Event, EventKind
from evals.console.fixture import Run, Spec

K2 = "github.com/keras-team/keras keras/utils/generic_utils.py Progbar + keras/callbacks.py (tag v2.15.0)"
K3 = "github.com/keras-team/keras keras/src/utils/progbar.py (3422977a5e38fb2f7709aaa9a08e47f0c43d0f60)"
PER_EPOCH = 100
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _f(v: float) -> str:
    return f"{v:.4f}" if (math.isnan(v) or abs(v) > 1e-3) else f"{v:.4e}"


def _eta(sec: float) -> str:
    if sec > 3600:
        return "%d:%02d:%02d" % (sec // 3600, (sec % 3600) // 60, sec % 60)
    if sec > 60:
        return "%d:%02d" % (sec // 60, sec % 60)
    return "%ds" % sec


def _epochs(run: Run) -> int:
    return math.ceil(run.total / PER_EPOCH)


def keras2_dynamic(run: Run) -> str:
    """Keras 2 verbose=1: redraws joined by backspaces and ``\\r`` within each epoch's line.

    Progbar's ``_dynamic_display`` is also true when ``"posix" in sys.modules``, so on Linux a log redirected to a
    file looks like a terminal capture. On a NaN, TerminateOnNaN (which runs before the progress bar's update) prints
    ``Batch {i}: Invalid loss, terminating training`` after the last finite redraw; the epoch's final redraw then
    shows ``N/N`` with ``loss: nan``.
    """
    out: list[str] = ["Model: \"sequential\"", "Total params: 1,234,560 (4.71 MB)", ""]
    E = _epochs(run)
    cur_line = ""
    prev_w = 0
    epoch = 0
    for i in range(run.n):
        step = run.steps[i]
        e = (step - 1) // PER_EPOCH + 1
        c = step - (e - 1) * PER_EPOCH
        if e != epoch:
            if cur_line:
                out.append(cur_line)
            out.append(f"Epoch {e}/{E}")
            epoch, cur_line, prev_w = e, "", 0
        v = run.loss[i]
        if math.isnan(v):
            run.crash(step)  # the message names this batch (0-based index c - 1)
            cur_line += f"Batch {c - 1}: Invalid loss, terminating training\n"
            c, v = PER_EPOCH, v
            step = (e - 1) * PER_EPOCH + PER_EPOCH
        bar = "%3d/%d [" % (c, PER_EPOCH)
        pw = int(30 * c / PER_EPOCH)
        if pw > 0:
            bar += "=" * (pw - 1) + (">" if c < PER_EPOCH else "=")
        bar += "." * (30 - pw) + "]"
        shown = run.show(i, _f(v), step=step)
        if c >= PER_EPOCH:
            info = f" - 2s 20ms/step - loss: {shown}"
        else:
            info = f" - ETA: {_eta(0.02 * (PER_EPOCH - c))} - loss: {shown}"
        w = len(bar) + len(info)
        if prev_w > w:
            info += " " * (prev_w - w)
        cur_line += ("\b" * prev_w + "\r" if prev_w else "") + bar + info
        prev_w = w
        if math.isnan(v):
            break
    out.append(cur_line)
    return "\n".join(out) + "\n"


def keras2_verbose2(run: Run) -> str:
    """Keras 2 verbose=2: one line per epoch (the step is the epoch)."""
    out = [f"Epoch {1}/{run.n}"]
    for i in range(run.n):
        if i:
            out.append(f"Epoch {run.steps[i]}/{run.n}")
        v = run.loss[i]
        out.append(f"{PER_EPOCH}/{PER_EPOCH} - 2s - loss: {run.show(i, _f(v))} - val_loss: {_f(v + 0.05)} - 2s/epoch - 20ms/step")
        if i % 20 == 19:
            out.append(f"\nEpoch {run.steps[i]}: saving model to ckpt/weights.{run.steps[i]:02d}.h5")
    return "\n".join(out) + "\n"


def keras3_file(run: Run) -> str:
    """Keras 3 verbose=1 with stdout redirected to a file on Linux: ``\\b``*width + ``\\r`` redraws, ANSI kept.

    As observed with Keras 3.15 (torch backend, stdout to a file): the width erased by the backspaces is the visible
    width (ANSI codes excluded), shorter redraws are padded with spaces, and the epoch's last redraw ends with a newline.
    """
    E = _epochs(run)
    text = ""
    epoch = 0
    prev_w = 0
    for i in range(run.n):
        step = run.steps[i]
        e = (step - 1) // PER_EPOCH + 1
        c = step - (e - 1) * PER_EPOCH
        if e != epoch:
            text += f"Epoch {e}/{E}\n"
            epoch, prev_w = e, 0
        pw = int(20 * c / PER_EPOCH)
        bar = f"\x1b[1m{c:3d}/{PER_EPOCH}\x1b[0m "
        if pw > 0:
            bar += f"\33[32m{'━' * pw}\x1b[0m"
        bar += f"\33[37m{'━' * (20 - pw)}\x1b[0m"
        if c < PER_EPOCH:
            info = f" \x1b[1m{_eta(0.021 * (PER_EPOCH - c))}\x1b[0m 21ms/step"
        else:
            info = " \x1b[1m2s\x1b[0m 21ms/step"
        info += f" - loss: {run.show(i, _f(run.loss[i]))}"
        if c >= PER_EPOCH:
            info += f" - val_loss: {_f(run.loss[i] + 0.05)}"
        w = len(_ANSI.sub("", bar)) + len(_ANSI.sub("", info))
        if prev_w > w:
            info += " " * (prev_w - w)
        text += "\b" * prev_w + "\r" + bar + info
        prev_w = w
        if c >= PER_EPOCH:
            text += "\n"
    return text + "\n"


def keras3_verbose2(run: Run) -> str:
    """Keras 3 verbose=2: ``Epoch e/E`` then ``100/100 - 2s - 21ms/step - loss: X - val_loss: Y``."""
    out = []
    for i in range(run.n):
        out.append(f"Epoch {run.steps[i]}/{run.n}")
        v = run.loss[i]
        out.append(f"{PER_EPOCH}/{PER_EPOCH} - 2s - 21ms/step - loss: {run.show(i, _f(v))} - val_loss: {_f(v + 0.05)}")
    return "\n".join(out) + "\n"


FIXTURES = [
    Spec("keras2__terminal_nan.log", "Keras 2", K2, "epoch*batch", "loss", keras2_dynamic, points=600, interval=5,
         first=5, seed=401, events=(Event(EventKind.NONFINITE, 0.85),),
         notes="each epoch's redraws joined by \\b...\\r on one line (terminal or Linux file); step = (epoch-1)*100 + batch; "
               "TerminateOnNaN's 'Batch i: Invalid loss, terminating training' (i 0-based: step = (epoch-1)*100 + i + 1) after "
               "the last finite redraw, then the final redraw '100/100 ... loss: nan'"),
    Spec("keras2__verbose2_healthy.log", "Keras 2", K2, "epoch", "loss", keras2_verbose2, points=300, interval=1,
         first=1, seed=402, notes="one line per epoch; '100/100' is the batch count, not the step; ModelCheckpoint lines"),
    Spec("keras3__file_spike.log", "Keras 3", K3, "epoch*batch", "loss", keras3_file, points=500, interval=5,
         first=5, seed=403, events=(Event(EventKind.SPIKE, 0.5),),
         notes="stdout to a file on Linux: \\b*width + \\r redraws with ANSI bold/colour codes and '━' bars, one line per "
               "epoch; counter restarts each epoch; step = (epoch-1)*100 + n"),
    Spec("keras3__verbose2_divergence.log", "Keras 3", K3, "epoch", "loss", keras3_verbose2, points=250, interval=1,
         first=1, seed=404, events=(Event(EventKind.DIVERGENCE, 0.75),), notes="one line per epoch; divergence"),
]
