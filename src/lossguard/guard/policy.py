"""RecoveryPolicy: from per-step records to decisions, with budgets (host side, pure Python).

The ladder, in order of escalation:

1. **skip** every bad step (non-finite, or an outlier in loss / grad norm);
2. **rollback + skip data** when an *episode* -- bad steps at most ``episode_gap`` steps apart --
   reaches ``rollback_after`` bad steps (spikes close together, or a spike that does not come back
   down: each elevated step is itself an outlier against the robust baseline). The skipped data
   range is ``[onset batch, last bad batch + 1 + skip_margin)`` in data-stream batch indices;
3. **LR cut**, two kinds. *Data or optimizer?* A first rollback assumes bad data (the cause the
   BLOOM and OPT teams named most often) and skips it. An episode that needs a rollback again
   within ``recurrence_window`` (default: ``episode_gap``) steps of the previous onset -- the same
   place, on different batches, since the previous rollback skipped the old ones -- is a
   *recurrence*. At the ``recurrences_to_cut``-th (2nd) in a row the data is exonerated and the
   optimizer suspected (the LR too high for the weights there; LR and weights up to the onset are
   functions of the step, so it comes back at the same place); that rollback also cuts the LR by
   ``recurrence_lr_factor`` (0.1) for ``recurrence_lr_steps`` (None: the rest of the run; the cuts
   compound on further recurrences), as the OPT-175B team did by hand. Otherwise the mild hedge
   applies: x``lr_cut_factor`` after the ``lr_cut_from``-th rollback, for ``lr_cut_steps`` steps;
4. **loss-scale reset** when a GradScaler's scale falls below ``min_loss_scale`` or overflows
   ``max_overflow_streak`` steps in a row (the guard first checks the optimizer state is finite;
   if it is not, a reset cannot help and it rolls back instead);
5. **halt** when a rollback is needed and ``max_rollbacks`` are spent (or there is no checkpoint).

State comes in two parts. The *episode* part (open episode, overflow streak) describes the
timeline and is rolled back with the checkpoint; the *budget* part (rollbacks made, data ranges
skipped, LR cut) describes the run's history and survives a rollback -- otherwise a rollback would
refund its own budget and the same bad data would be read again.
"""
from __future__ import annotations

from typing import Any

from .config import GuardConfig
from .decision import Action, Decision, StepRecord


class RecoveryPolicy:
    """Decides skip / rollback / LR cut / loss-scale reset / halt from the guard's step records.

    Args:
        config: the guard's configuration (thresholds and budgets).
        has_scaler: a GradScaler is in use (enables the loss-scale checks).
    """

    def __init__(self, config: GuardConfig, *, has_scaler: bool = False) -> None:
        self.config = config
        self.has_scaler = has_scaler
        # Budget part (survives rollbacks).
        self.rollbacks = 0
        self.skips = 0
        self.transients = 0
        self.skip_ranges: list[tuple[int, int]] = []
        self.lr_cut_until: int | None = None
        self.halted = False
        self.last_rollback: dict[str, Any] | None = None  # {"onset", "onset_batch", "to_step", "skip_batches"}
        self.recurrences = 0
        self.recurrence_factor = 1.0  # product of the recurrence cuts made so far
        self.recurrence_until: int | None = None
        # Episode part (rolled back with the checkpoint).
        self._episode: dict[str, Any] | None = None
        self._overflow_streak = 0

    # ------------------------------------------------------------------ decisions
    def observe(self, rec: StepRecord, *, transient: bool = False) -> list[Decision]:
        """Decisions for one step's record, in the order the guard must carry them out.

        Args:
            rec: the step's statistics.
            transient: the replay check showed the fault does not reproduce (skip it, but it does
                not count towards an episode: the data is not to blame).
        """
        cfg, out = self.config, []
        ep = self._episode
        if ep is not None and rec.step - ep["last_step"] > cfg.episode_gap:
            self._episode = ep = None  # the run settled: the episode is over
        if rec.bad:
            self.skips += 1
            nums = {"batch_index": rec.batch_index, "loss": rec.loss, "grad_norm": rec.grad_norm,
                    "loss_z": rec.loss_z, "grad_norm_z": rec.grad_norm_z, "loss_baseline": rec.loss_baseline}
            if transient:
                self.transients += 1
                nums["transient"] = True
            elif ep is None:
                self._episode = ep = {"onset_step": rec.step, "onset_batch": rec.batch_index,
                                      "last_step": rec.step, "last_batch": rec.batch_index, "count": 1}
            else:
                ep.update(last_step=rec.step, last_batch=rec.batch_index, count=ep["count"] + 1)
            if ep is not None and not transient:
                nums["episode_bad_steps"] = ep["count"]
            out.append(Decision(Action.SKIP, rec.step, rec.reasons() or ["flagged"], nums))
            if ep is not None and not transient and ep["count"] >= cfg.rollback_after:
                out.append(self.escalate(rec.step, f"{ep['count']} bad steps within an episode "
                                                   f"(gap <= {cfg.episode_gap}) since step {ep['onset_step']}"))
        if self.has_scaler:
            self._overflow_streak = self._overflow_streak + 1 if rec.overflow else 0
            low = rec.loss_scale == rec.loss_scale and rec.loss_scale < cfg.min_loss_scale
            if low or self._overflow_streak >= cfg.max_overflow_streak:
                why = (f"loss scale {rec.loss_scale:g} < min_loss_scale {cfg.min_loss_scale:g}" if low else
                       f"{self._overflow_streak} overflow steps in a row")
                out.append(Decision(Action.LOSS_SCALE_RESET, rec.step, [why],
                                    {"loss_scale": rec.loss_scale, "overflow_streak": self._overflow_streak}))
                self._overflow_streak = 0
        return out

    def escalate(self, step: int, why: str) -> Decision:
        """A rollback for the open episode (or from ``step`` if none), or a halt once the budget is spent."""
        cfg = self.config
        ep = self._episode or {"onset_step": step, "onset_batch": None, "last_step": step,
                               "last_batch": None, "count": 0}
        nums: dict[str, Any] = {"onset": ep["onset_step"], "rollbacks_done": self.rollbacks}
        if ep["onset_batch"] is not None:
            nums["skip_batches"] = [ep["onset_batch"], ep["last_batch"] + 1 + cfg.skip_margin]
        reasons = [why]
        prev = self._recurrence_of(ep)
        if prev is not None:
            n = int(prev.get("recurrence", 0)) + 1  # recurrences in a row at this place
            nums["recurrence"], nums["recurrence_of"] = n, prev["onset"]
            nums["suspect"] = "optimizer" if n >= cfg.recurrences_to_cut else "data"
            reasons.append(
                f"recurrence {n}: onset {ep['onset_step']} is {abs(ep['onset_step'] - prev['onset'])} steps from "
                f"the onset {prev['onset']} of the previous rollback, which skipped batches {prev['skip_batches']}; "
                f"the spike came back on different data (batch {ep['onset_batch']}): evidence against bad data, "
                + ("for an optimizer instability (LR too high for the weights there)" if n >= cfg.recurrences_to_cut
                   else f"not yet enough (recurrences_to_cut={cfg.recurrences_to_cut}): skipping data again"))
        elif ep["onset_batch"] is not None:
            nums["suspect"] = "data"
        if self.rollbacks >= cfg.max_rollbacks:
            self.halted = True
            return Decision(Action.HALT, step, reasons + [f"rollback budget spent ({self.rollbacks} of "
                                                          f"max_rollbacks={cfg.max_rollbacks})"], nums)
        return Decision(Action.ROLLBACK, step, reasons, nums)

    def _recurrence_of(self, ep: dict[str, Any]) -> dict[str, Any] | None:
        """The previous rollback if ``ep`` is its recurrence (same place, its data skipped), else None."""
        cfg, prev = self.config, self.last_rollback
        if prev is None or prev.get("skip_batches") is None or ep["onset_batch"] is None:
            return None
        window = cfg.episode_gap if cfg.recurrence_window is None else cfg.recurrence_window
        if abs(ep["onset_step"] - prev["onset"]) > window:
            return None
        a, b = prev["skip_batches"]
        if a <= ep["onset_batch"] < b:
            return None  # the same data again (not skipped after all): no evidence either way
        return prev

    def rolled_back(self, decision: Decision, to_step: int) -> list[Decision]:
        """Book a rollback that the guard carried out; returns the follow-up decisions (LR cut)."""
        cfg = self.config
        self.rollbacks += 1
        rng = decision.numbers.get("skip_batches")
        if rng is not None:
            self.skip_ranges.append((int(rng[0]), int(rng[1])))
        self.last_rollback = {"onset": int(decision.numbers.get("onset", decision.step)),
                              "onset_batch": None if rng is None else int(rng[0]), "to_step": int(to_step),
                              "skip_batches": None if rng is None else [int(rng[0]), int(rng[1])],
                              "recurrence": int(decision.numbers.get("recurrence", 0))}
        self._episode = None
        self._overflow_streak = 0
        out = []
        if decision.numbers.get("suspect") == "optimizer" and cfg.recurrence_lr_factor < 1:
            # The decisive cut replaces the mild hedge below for this rollback.
            self.recurrences += 1
            self.recurrence_factor *= cfg.recurrence_lr_factor
            self.recurrence_until = None if cfg.recurrence_lr_steps is None else to_step + cfg.recurrence_lr_steps
            held = ("for the rest of the run" if self.recurrence_until is None
                    else f"until step {self.recurrence_until}")
            out.append(Decision(Action.LR_CUT, to_step, [
                f"episode recurred at step {decision.numbers['onset']} after the rollback for the episode at "
                f"step {decision.numbers.get('recurrence_of')} skipped its data: optimizer instability "
                f"suspected; LR x{cfg.recurrence_lr_factor:g} (recurrence_lr_factor), {held}"],
                {"factor": round(self.recurrence_factor, 12), "cut": cfg.recurrence_lr_factor,
                 "until_step": self.recurrence_until, "cause": "recurrence", "recurrences": self.recurrences}))
        elif cfg.lr_cut_from and self.rollbacks >= cfg.lr_cut_from and cfg.lr_cut_factor < 1:
            self.lr_cut_until = to_step + cfg.lr_cut_steps
            out.append(Decision(Action.LR_CUT, to_step, [f"rollback number {self.rollbacks} "
                                                        f"(lr_cut_from={cfg.lr_cut_from})"],
                                {"factor": cfg.lr_cut_factor, "until_step": self.lr_cut_until, "cause": "rollbacks"}))
        return out

    def lr_factor(self, step: int) -> float:
        """Multiplier on the scheduled LR at ``step``: the active LR cuts multiplied (1.0 when none)."""
        f = 1.0
        if self.lr_cut_until is not None and step < self.lr_cut_until:
            f *= self.config.lr_cut_factor
        if self.recurrences and (self.recurrence_until is None or step < self.recurrence_until):
            f *= self.recurrence_factor
        return f

    def skip_to(self, batch_index: int) -> int | None:
        """If ``batch_index`` falls in a skipped data range, the first index after it; else None."""
        end = None
        for a, b in self.skip_ranges:
            if a <= batch_index < b:
                end = max(end or b, b)
        if end is not None:  # ranges may chain: follow them
            nxt = self.skip_to(end)
            return nxt if nxt is not None else end
        return None

    @property
    def episode_onset(self) -> int | None:
        """Onset step of the open episode (None when the run is calm)."""
        return None if self._episode is None else self._episode["onset_step"]

    # ------------------------------------------------------------------ state
    def budget_state(self) -> dict[str, Any]:
        """The part that survives a rollback."""
        return {"rollbacks": self.rollbacks, "skips": self.skips, "transients": self.transients,
                "skip_ranges": [list(r) for r in self.skip_ranges], "lr_cut_until": self.lr_cut_until,
                "halted": self.halted, "last_rollback": None if self.last_rollback is None else dict(self.last_rollback),
                "recurrences": self.recurrences, "recurrence_factor": self.recurrence_factor,
                "recurrence_until": self.recurrence_until}

    def load_budget_state(self, sd: dict[str, Any]) -> None:
        """Restore :meth:`budget_state` output."""
        self.rollbacks, self.skips = int(sd["rollbacks"]), int(sd["skips"])
        self.transients = int(sd.get("transients", 0))
        self.skip_ranges = [(int(a), int(b)) for a, b in sd["skip_ranges"]]
        self.lr_cut_until = None if sd["lr_cut_until"] is None else int(sd["lr_cut_until"])
        self.halted = bool(sd.get("halted", False))
        # .get: checkpoints written before the recurrence rule have none of these.
        self.last_rollback = None if sd.get("last_rollback") is None else dict(sd["last_rollback"])
        self.recurrences = int(sd.get("recurrences", 0))
        self.recurrence_factor = float(sd.get("recurrence_factor", 1.0))
        self.recurrence_until = None if sd.get("recurrence_until") is None else int(sd["recurrence_until"])

    def state_dict(self) -> dict[str, Any]:
        """Budget and episode parts together (a plain dict, JSON-safe)."""
        return {"budget": self.budget_state(), "episode": None if self._episode is None else dict(self._episode),
                "overflow_streak": self._overflow_streak}

    def load_state_dict(self, sd: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` output."""
        self.load_budget_state(sd["budget"])
        self._episode = None if sd["episode"] is None else dict(sd["episode"])
        self._overflow_streak = int(sd["overflow_streak"])
