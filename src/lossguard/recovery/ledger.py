"""RunLedger: what the recovery did to a run -- budgets, skipped data, LR cuts, history.

The ledger is never rolled back: a rollback restores the timeline (weights, optimizer, detector
windows, the open episode) but not the ledger, otherwise a rollback would refund its own budget and
read the same bad data again. It is persisted on its own, atomically, as ``ledger.json`` beside the
checkpoints (:data:`LEDGER_FILE`), so recovery also survives a process restart.

File format (JSON, strict: no NaN)::

    {"format": "lossguard-ledger", "version": 1,
     "rollbacks": 1, "skips": 4, "transients": 0, "recurrences": 0, "halted": false,
     "skip_ranges": [[1020, 1235]],              # half-open [start, stop) batch indices
     "lr_cuts": [{"start_step": 900, "until_step": 1100, "factor": 0.5, "cause": "rollbacks"}],
     "last_rollback": {"onset": 1020, "onset_batch": 1020, "to_step": 900,
                       "skip_batches": [1020, 1235], "recurrence": 0},
     "resume_from": null,                          # checkpoint step a restarted process must load
     "history": [{"step": 1022, "event": "rollback", ...}, ...]}   # future-changing actions only
"""
from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..errors import LossguardError
from ..jsonsafe import read_json_file, strict_json
from .skip_range import SkipRange, skip_to

LEDGER_FILE = "ledger.json"
"""File name of the ledger in a checkpoint directory."""
LEDGER_FORMAT, LEDGER_VERSION = "lossguard-ledger", 1


@dataclass(kw_only=True)
class LrCut:
    """An LR multiplier in force from ``start_step`` until ``until_step`` (exclusive; None = for good)."""

    start_step: int
    """First step the cut applies to (the rollback target; for ``"loss_rising"`` the loss's lowest point)."""
    until_step: int | None
    """First step no longer cut; None = the rest of the run."""
    factor: float
    """Multiplier on the scheduled LR (cuts of different causes multiply)."""
    cause: str
    """``"rollbacks"`` (the recipe's mild cut), ``"recurrence"`` or ``"loss_rising"`` (optimizer suspected)."""

    def active(self, step: int) -> bool:
        """True if the cut applies at ``step`` (from ``start_step`` on: a rollback's cut starts at its
        target, and a rising-loss cut at the loss's lowest point)."""
        return step >= self.start_step and (self.until_step is None or step < self.until_step)


@dataclass(kw_only=True)
class RunLedger:
    """Budgets and history of a run's recovery (never rolled back)."""

    rollbacks: int = 0
    """Rollbacks carried out (or booked, in shadow mode / simulate)."""
    skips: int = 0
    """Steps whose update was withheld."""
    transients: int = 0
    """Of those, faults that did not reproduce on replay."""
    recurrences: int = 0
    """Recurrence LR cuts made."""
    halted: bool = False
    """The run was halted."""
    skip_ranges: list[SkipRange] = field(default_factory=list)
    """Data ranges to skip (half-open), in the order they were decided."""
    lr_cuts: list[LrCut] = field(default_factory=list)
    """LR cuts, at most one per cause (a new cut of a cause replaces the old one)."""
    last_rollback: dict[str, Any] | None = None
    """``{"onset", "onset_batch", "to_step", "skip_batches", "recurrence"}`` of the latest rollback."""
    resume_from: int | None = None
    """Checkpoint step a restarted process must resume from (a rollback that could not be carried
    out in-process, e.g. under a framework); None when the newest checkpoint is fine."""
    history: list[dict[str, Any]] = field(default_factory=list)
    """Event records of the actions that changed the run's future (rollback, LR cut, loss-scale
    reset, halt), in order."""
    path: Path | None = field(default=None, compare=False, repr=False)
    """Where :meth:`save` writes (None = in memory only). Not part of the file."""

    # ---------------------------------------------------------------- queries
    def lr_factor(self, step: int) -> float:
        """Multiplier on the scheduled LR at ``step``: the active cuts multiplied (1.0 when none)."""
        f = 1.0
        for c in self.lr_cuts:
            if c.active(step):
                f *= c.factor
        return f

    def skip_to(self, batch_index: int) -> int | None:
        """If ``batch_index`` is in a skipped range, the first index after it (chains followed); else None."""
        return skip_to(self.skip_ranges, batch_index)

    def cut(self, cause: str) -> LrCut | None:
        """The LR cut of this cause, if any."""
        return next((c for c in self.lr_cuts if c.cause == cause), None)

    # ---------------------------------------------------------------- changes
    def set_lr_cut(self, cut: LrCut) -> None:
        """Put ``cut`` in force, replacing any earlier cut of the same cause."""
        self.lr_cuts = [c for c in self.lr_cuts if c.cause != cut.cause] + [cut]

    def compound_lr_cut(self, cause: str, cut: float, *, start_step: int, until_step: int | None = None) -> float:
        """Multiply the cut of ``cause`` (1.0 when there is none) by ``cut``, in force from
        ``start_step`` until ``until_step``; returns the new factor."""
        old = self.cut(cause)
        factor = (old.factor if old else 1.0) * cut
        self.set_lr_cut(LrCut(start_step=int(start_step), until_step=until_step, factor=factor, cause=cause))
        return factor

    def clear_halt(self, why: str = "cleared by hand") -> None:
        """Let a halted run train again: a halt is final across relaunches (a new guard on a halted
        ledger raises ``TrainingHalted``) until a person decides otherwise and calls this. Clears
        ``halted``, records ``{"event": "halt_cleared", "why": ...}`` in the history, and saves.

        From a shell: ``python -c "from lossguard.recovery import RunLedger;
        RunLedger.open('CKPT_DIR/ledger.json').clear_halt()"``.
        """
        self.halted = False
        self.note({"event": "halt_cleared", "why": str(why)})

    def note(self, record: dict[str, Any]) -> None:
        """Append an action record to the history and persist the ledger."""
        self.history.append(strict_json(dict(record)))
        self.save()

    # ---------------------------------------------------------------- persistence
    def to_dict(self) -> dict[str, Any]:
        """The file's content (strict-JSON-ready)."""
        d = {k: v for k, v in asdict(self).items() if k != "path"}
        d["skip_ranges"] = [r.to_json() for r in self.skip_ranges]
        return strict_json({"format": LEDGER_FORMAT, "version": LEDGER_VERSION, **d})

    @classmethod
    def from_dict(cls, d: dict[str, Any], *, path: Path | None = None) -> "RunLedger":
        """The inverse of :meth:`to_dict`.

        Raises:
            LossguardError: not a ledger, or a newer version.
        """
        if not isinstance(d, dict) or d.get("format") != LEDGER_FORMAT:
            raise LossguardError("not a lossguard run ledger", path=path,
                                 fix=f"point at the {LEDGER_FILE} written by the guard, or remove it to start afresh")
        if int(d.get("version", 0)) > LEDGER_VERSION:
            raise LossguardError(f"ledger version {d.get('version')} is newer than this lossguard reads "
                                 f"({LEDGER_VERSION})", path=path, fix="upgrade lossguard")
        try:
            return cls(rollbacks=int(d["rollbacks"]), skips=int(d["skips"]), transients=int(d["transients"]),
                       recurrences=int(d["recurrences"]), halted=bool(d["halted"]),
                       skip_ranges=[SkipRange.from_json(r) for r in d["skip_ranges"]],
                       lr_cuts=[LrCut(**c) for c in d["lr_cuts"]], last_rollback=d.get("last_rollback"),
                       resume_from=d.get("resume_from"), history=list(d.get("history", [])), path=path)
        except (KeyError, TypeError, ValueError) as exc:
            raise LossguardError(f"damaged run ledger ({exc!r})", path=path,
                                 fix="restore it from a backup or remove it (budgets then start afresh)") from None

    def save(self, path: str | os.PathLike | None = None) -> None:
        """Write the ledger atomically (temp file, fsync, rename) to ``path`` or :attr:`path`; no-op if neither."""
        target = Path(path) if path is not None else self.path
        if target is None:
            return
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".ledger-", suffix=".tmp", dir=target.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump(self.to_dict(), fh, indent=1, allow_nan=False)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    @classmethod
    def load(cls, path: str | os.PathLike) -> "RunLedger":
        """Read a ledger file; later :meth:`save` calls write back to it.

        Raises:
            LossguardError: unreadable, not JSON, or not a ledger.
        """
        p = Path(path)
        d = read_json_file(p, what="the run ledger", fix_unreadable="check the checkpoint directory",
                           fix_invalid="restore it or remove it (budgets then start afresh)")
        return cls.from_dict(d, path=p)

    @classmethod
    def open(cls, path: str | os.PathLike | None) -> "RunLedger":
        """The ledger at ``path`` if the file exists (a resumed run), else a new one that saves there."""
        if path is not None and Path(path).exists():
            return cls.load(path)
        return cls(path=None if path is None else Path(path))
