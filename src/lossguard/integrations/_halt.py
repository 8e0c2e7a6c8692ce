"""Loud halts for the framework callbacks: log the diagnosis, say where the data is, and raise.

A guard that halts a Lightning or HF run silently (``fit()`` returns at step 58 of 100 with
nothing printed) is worse than none: the job "finishes" and nobody looks. So when the guard halted,
the callback's end-of-training hook calls :func:`halt_loudly`: the diagnosis (why, which test
fired, the checkpoint to resume from) is logged as an error on this module's logger -- on stderr
unless the application routes logging elsewhere -- with the **loader positions** of the
episode -- epoch and batch index within the epoch, as the framework's own loader counts them,
not the guard's step numbers -- and :class:`TrainingHalted` is raised out of ``fit()`` /
``train()``, so a script ends with a non-zero exit status. ``GuardConfig(halt_raises=False)``
keeps the message and returns normally instead (as the plain loop's ``batches()`` does).
"""
from __future__ import annotations

import logging
from typing import Any

_log = logging.getLogger(__name__)


class LoaderPositions:
    """Where the framework's loader was at each optimizer step: ``(epoch, first batch index)``.

    Args:
        batches_per_epoch: batches the loader yields per epoch (None: unknown, only the steps
            noted are translated).
        accumulation: loader batches per optimizer step (gradient accumulation).
    """

    def __init__(self, batches_per_epoch: int | None = None, accumulation: int = 1) -> None:
        self.batches_per_epoch = batches_per_epoch if batches_per_epoch and batches_per_epoch > 0 else None
        self.accumulation = max(1, int(accumulation))
        self.noted: dict[int, tuple[int, int]] = {}

    def note(self, step: int, epoch: int, batch: int) -> None:
        """Record the loader position of ``step`` (the callbacks note every judged step's; a dict
        entry per step, overwritten after a restart)."""
        self.noted[int(step)] = (int(epoch), int(batch))

    def of(self, step: int) -> tuple[int, int] | None:
        """``(epoch, batch index in the epoch)`` of ``step``'s first batch, or None if unknown."""
        if step in self.noted:
            return self.noted[step]
        if self.batches_per_epoch is None:
            return None
        return divmod(int(step) * self.accumulation, self.batches_per_epoch)

    def describe(self, halt: dict[str, Any]) -> list[str]:
        """Lines naming the loader positions of a halt record's episode and skip range."""
        def where(step: int) -> str:
            pos = self.of(step)
            return f"step {step} (not seen)" if pos is None else f"step {step} = epoch {pos[0]}, batch {pos[1]}"

        lines = ["Loader positions (epoch, batch index within the epoch, as your data loader counts them):"]
        onset = halt.get("onset", halt.get("step"))
        if onset is not None:
            lines.append(f"  - episode onset: {where(int(onset))}; halted at {where(int(halt['step']))}")
        rng = halt.get("skip_batches")
        if rng:
            a, b = int(rng[0]), int(rng[1])
            lines.append(f"  - data to skip on resume (the episode plus the margin, steps [{a}, {b})): "
                         f"from {where(a)} up to and including {where(b - 1)}")
        return lines


def halt_loudly(guard, positions: LoaderPositions | None, *, raises: bool = True, exit_code: bool = False) -> None:
    """If ``guard`` halted: log its diagnosis and the loader positions (an error), then raise
    :class:`TrainingHalted` (``raises=False``: log only). Does nothing otherwise.

    ``exit_code``: the callback runs the restart protocol (it ends the process with
    ``ExitCode.ROLLBACK`` for a rollback), so it owns the exit: a halt ends the process with
    ``ExitCode.HALT`` (77) instead of raising, so a launcher or scheduler can tell it apart."""
    if guard is None or not guard.halted:
        return
    from ..guard.executor import TrainingHalted

    halts = [e for e in guard.events if e.get("event") == "halt"]
    text = guard.diagnosis or "lossguard halted the run."
    if halts and positions is not None:
        text = text + "\n" + "\n".join(positions.describe(halts[-1]))
    _log.error("%s", text)
    if raises:
        err = TrainingHalted(text, path=guard.executor.diagnosis_file,
                             fix="fix the cause named above, then resume from the checkpoint it names, "
                                 "skipping the loader positions it names")
        exit_halted(err, exit_code=exit_code)


def exit_halted(err, *, exit_code: bool) -> None:
    """Raise ``err`` (a :class:`TrainingHalted`), or with ``exit_code`` end the process with
    ``ExitCode.HALT`` (77; ``err`` is the exit's cause). A relaunched process refuses to train on
    (:mod:`lossguard.guard.halted`), so under ``torchrun --max-restarts`` each restart ends at once."""
    if exit_code:
        from ..distributed.restart import ExitCode

        raise SystemExit(int(ExitCode.HALT)) from err
    raise err


def build_guard(make, *, exit_code: bool):
    """``make()`` (the callback's guard, built and restored), or, on a halted ledger (a relaunch
    after a halt), log why it refuses (an error) and :func:`exit_halted`."""
    from ..guard.executor import TrainingHalted

    try:
        return make()
    except TrainingHalted as err:
        _log.error("%s", err)
        exit_halted(err, exit_code=exit_code)
