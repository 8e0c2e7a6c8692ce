"""RecoveryPolicy: from verdicts to decisions (pure Python, no torch, no I/O but the ledger file).

The ladder, in order of escalation:

1. **skip** every bad step (non-finite, or an outlier in loss / grad norm);
2. **rollback + skip data** when an :class:`Episode` reaches ``rollback_after`` bad steps; the
   target is :func:`choose_checkpoint` (chosen by the executor, which knows the checkpoints), the
   skipped data :meth:`Episode.skip_range` (half-open);
3. **LR cut**: a first rollback assumes bad data. An episode that needs a rollback again within
   ``recurrence_window`` steps of the previous onset -- on different batches -- is a recurrence; at
   the ``recurrences_to_cut``-th in a row the optimizer is suspected and the LR is cut by
   ``recurrence_lr_factor``. Otherwise the recipe's mild cut (x ``recipe.lr_cut_factor`` for
   ``lr_cut_steps``) applies from the ``lr_cut_from``-th rollback;
4. **loss rising** (``loss_rise``): a loss baseline that climbs more than ``loss_rise`` above its
   lowest value is an optimizer fault seen directly: roll back before the lowest point and cut the
   LR by ``recurrence_lr_factor`` at once (cause ``loss_rising``);
5. **loss-scale reset** when a GradScaler's scale falls below ``min_loss_scale`` or overflows
   ``max_overflow_streak`` steps in a row;
6. **halt** when a rollback is needed and its incident's budget is spent (``rollbacks_per_incident``:
   an episode and its recurrences share one budget, an unrelated episode gets a fresh one), or
   ``max_rollbacks`` are spent over the whole run.

State comes in two parts: the *timeline* (open episode, overflow streak; :meth:`state_dict`) is
rolled back with a checkpoint; the :class:`RunLedger` (budgets, skipped data, LR cuts) never is.

Extension points (override in a subclass, or replace the function): :meth:`is_episode_evidence`
(which bad verdicts count towards an episode), :meth:`needs_rollback` (the per-episode budget),
:meth:`suspect` (data or optimizer) and :meth:`lr_cut_after_rollback` (which cut a rollback brings).
"""
from __future__ import annotations

from typing import Any

from .action import Action
from .config import PolicyConfig
from .decision import Decision
from .episode import Episode
from .finding import WholeLogFinding
from .ledger import RunLedger
from .loss_rise import fresh_level, loss_rising
from .lr_cuts import lr_cut_after_rollback
from .recurrence import recurrence_of, recurrence_reason
from .suspect import Suspect
from .verdict import Verdict


class RecoveryPolicy:
    """Decides skip / rollback / LR cut / loss-scale reset / halt from the judge's verdicts.

    Args:
        config: budgets, rules and recipe (a :class:`GuardConfig` is one).
        ledger: the run's ledger (a new in-memory one if None); the policy books into it.
        has_scaler: a GradScaler is in use (enables the loss-scale checks).
        run_steps: the run's length in steps, when known: it bounds the skip margin
            (:meth:`RecoveryRecipe.margin_for`).
    """

    def __init__(self, config: PolicyConfig, *, ledger: RunLedger | None = None, has_scaler: bool = False,
                 run_steps: int | None = None) -> None:
        self.config = config
        self.ledger = ledger if ledger is not None else RunLedger()
        self.has_scaler = has_scaler
        self.run_steps = run_steps
        """The run's length in steps (None = unknown); set by ``guard.batches(steps=...)`` and the
        framework callbacks."""
        self.episode: Episode | None = None
        """The open episode (timeline state)."""
        self.overflow_streak = 0
        """Overflow steps in a row (timeline state)."""
        self.level = fresh_level()
        """The loss baseline's lowest value so far and its step (timeline state; the rise rule)."""
        self.episode_tests: dict[str, int] = {}
        """Which judge tests fired in the open episode, with counts: a rollback or a halt names them,
        so a user knows what the guard saw (for the reasons only; not checkpointed)."""

    # ---------------------------------------------------------------- extension points
    def is_episode_evidence(self, verdict: Verdict, *, transient: bool) -> bool:
        """Whether a bad verdict counts towards an episode (a transient fault does not)."""
        return not transient

    def needs_rollback(self, episode: Episode) -> bool:
        """The per-episode budget: a rollback once ``rollback_after`` bad steps accumulate."""
        return episode.needs_rollback(self.config.rollback_after)

    def suspect(self, recurrence: int) -> str:
        """``"optimizer"`` once an episode recurred ``recurrences_to_cut`` times in a row, else ``"data"``."""
        return Suspect.OPTIMIZER.value if recurrence >= self.config.recurrences_to_cut else Suspect.DATA.value

    def suspect_for(self, episode: Episode) -> Suspect:
        """The suspect of an episode that is no recurrence, from what its bad steps showed:
        :attr:`Suspect.LR_SCHEDULE` when every bad step came in the LR ramp and only the grad norm
        blew up (``lr_ramp_window``), :attr:`Suspect.NUMERICS` when nothing in it was finite, else
        :attr:`Suspect.DATA` (the first rollback's assumption; recurrences test it)."""
        if self.config.lr_ramp_window and not episode.outside_ramp and not episode.loss_symptom:
            return Suspect.LR_SCHEDULE
        if not episode.finite_seen:
            return Suspect.NUMERICS
        return Suspect.DATA

    def lr_cut_after_rollback(self, decision: Decision, to_step: int) -> Decision | None:
        """The LR cut a carried-out rollback brings (booked in the ledger), or None."""
        return lr_cut_after_rollback(self.config, self.ledger, decision, to_step)

    # ---------------------------------------------------------------- decisions
    def observe(self, verdict: Verdict, *, transient: bool = False) -> list[Decision]:
        """Decisions for one step's verdict, in the order they must be carried out.

        Args:
            verdict: the judge's finding.
            transient: the replay check showed the fault does not reproduce.
        """
        cfg, out = self.config, []
        ep = self.episode
        if ep is not None and ep.is_over(verdict.step, cfg.episode_gap):
            self.episode = ep = None  # the run settled
            self.episode_tests = {}
        if verdict.bad:
            self.ledger.skips += 1
            nums: dict[str, Any] = {"batch_index": verdict.batch_index, "loss": verdict.loss,
                                    "grad_norm": verdict.grad_norm, "loss_z": verdict.loss_z,
                                    "grad_norm_z": verdict.grad_norm_z, "loss_baseline": verdict.loss_baseline}
            counts = self.is_episode_evidence(verdict, transient=transient)
            if transient:
                self.ledger.transients += 1
                nums["transient"] = True
            if counts:
                if ep is None:
                    self.episode = ep = Episode.open(verdict.step, verdict.batch_index, lag=verdict.onset_lag)
                    self.episode_tests = {}
                else:
                    ep.add(verdict.step, verdict.batch_index)
                test = verdict.evidence.describe() if verdict.evidence else "flagged"
                self.episode_tests[test] = self.episode_tests.get(test, 0) + 1
                ep.note(verdict)
                nums["episode_bad_steps"] = ep.count
            reasons = verdict.reasons() or ["flagged"]
            held = counts and ep is not None and self.needs_rollback(ep) and self.suspect_for(ep) is Suspect.LR_SCHEDULE
            if held:
                nums["suspect"] = Suspect.LR_SCHEDULE.value
                reasons = reasons + [f"no rollback: the grad norm alone blew up while the LR was ramping up (it rose "
                                     f"within the last {cfg.lr_ramp_window} steps): the LR schedule, not the data; "
                                     "the update is withheld (and clipped, with max_grad_norm), no data skipped"]
            out.append(Decision(Action.SKIP, verdict.step, reasons, nums))
            if counts and ep is not None and not held and self.needs_rollback(ep):
                out.append(self.escalate(verdict.step, f"{ep.count} bad steps within an episode "
                                                       f"(gap <= {cfg.episode_gap}) since step {ep.onset_step}"))
        if not any(d.action in (Action.ROLLBACK, Action.HALT) for d in out):
            rise = self.loss_rising(verdict)
            if rise is not None:
                out.append(rise)
        if self.has_scaler:
            self.overflow_streak = self.overflow_streak + 1 if verdict.overflow else 0
            scale = verdict.loss_scale
            low = scale == scale and scale < cfg.min_loss_scale
            if low or self.overflow_streak >= cfg.max_overflow_streak:
                why = (f"loss scale {scale:g} < min_loss_scale {cfg.min_loss_scale:g}" if low else
                       f"{self.overflow_streak} overflow steps in a row")
                out.append(Decision(Action.LOSS_SCALE_RESET, verdict.step, [why],
                                    {"loss_scale": scale, "overflow_streak": self.overflow_streak}))
                self.overflow_streak = 0
        return out

    def observe_finding(self, finding: WholeLogFinding) -> list[Decision]:
        """Decisions for a whole-log finding (:mod:`lossguard.recovery.finding`: evidence the analyser
        has and a live guard cannot have), in the order they must be carried out."""
        led = self.ledger
        answer = finding.answer(margin=self.config.recipe.margin_for(self.run_steps))
        if answer is None:
            return []
        nums, reasons = answer
        action = Action(nums.pop("action", Action.ROLLBACK.value))
        if action is not Action.ROLLBACK:
            return [Decision(action, int(finding.step), reasons, nums)]
        nums["rollbacks_done"] = led.rollbacks
        if led.rollbacks >= self.config.max_rollbacks:
            led.halted = True
            return [Decision(Action.HALT, int(finding.step), reasons + [
                f"rollback budget spent for the run ({led.rollbacks} of max_rollbacks={self.config.max_rollbacks})"],
                nums)]
        return [Decision(Action.ROLLBACK, int(finding.step), reasons, nums)]

    def loss_rising(self, verdict: Verdict) -> Decision | None:
        """The rise rule (``loss_rise``): a rollback + decisive LR cut when the loss baseline stays more
        than ``loss_rise`` above its lowest value; None otherwise. Tracks the lowest value."""
        return loss_rising(self.config, self.ledger, self.level, verdict)

    def escalate(self, step: int, why: str) -> Decision:
        """A rollback for the open episode (or from ``step`` if none), or a halt once the budget is spent."""
        cfg, led, ep = self.config, self.ledger, self.episode
        nums: dict[str, Any] = {"onset": step if ep is None else ep.onset_step, "rollbacks_done": led.rollbacks}
        reasons = [why]
        if ep is not None:
            nums["skip_batches"] = ep.skip_range(cfg.recipe.margin_for(self.run_steps)).to_json()
            prev = recurrence_of(cfg, led.last_rollback, ep)
            if prev is not None:
                n = int(prev.get("recurrence", 0)) + 1
                nums["recurrence"], nums["recurrence_of"] = n, prev["onset"]
                nums["suspect"] = self.suspect(n)
                reasons.append(recurrence_reason(cfg, prev, ep, n, nums["suspect"]))
            else:
                nums["suspect"] = self.suspect_for(ep).value
        if self.episode_tests:
            nums["tests"] = dict(self.episode_tests)
            reasons.append("tests that fired in this episode: " + "; ".join(
                f"{name} x{n}" for name, n in self.episode_tests.items()))
        spent = int(nums.get("recurrence", 0))  # rollbacks this incident already used
        if spent >= cfg.rollbacks_per_incident:
            led.halted = True
            return Decision(Action.HALT, step, reasons + [
                f"rollback budget spent for this incident ({spent} rollbacks for the episode at step "
                f"{nums.get('recurrence_of')} and its recurrences; rollbacks_per_incident="
                f"{cfg.rollbacks_per_incident})"], nums)
        if led.rollbacks >= cfg.max_rollbacks:
            led.halted = True
            return Decision(Action.HALT, step, reasons + [f"rollback budget spent for the run ({led.rollbacks} of "
                                                          f"max_rollbacks={cfg.max_rollbacks})"], nums)
        return Decision(Action.ROLLBACK, step, reasons, nums)

    def rolled_back(self, decision: Decision, to_step: int) -> list[Decision]:
        """Book a rollback that was carried out (ledger); returns the follow-up decisions (LR cut)."""
        led = self.ledger
        led.rollbacks += 1
        rng = decision.numbers.get("skip_batches")
        if rng is not None:
            from .skip_range import SkipRange
            led.skip_ranges.append(SkipRange.from_json(rng))
        led.last_rollback = {"onset": int(decision.numbers.get("onset", decision.step)),
                             "onset_batch": None if rng is None else int(rng[0]), "to_step": int(to_step),
                             "skip_batches": None if rng is None else [int(rng[0]), int(rng[1])],
                             "recurrence": int(decision.numbers.get("recurrence", 0)),
                             "cause": decision.numbers.get("cause")}
        self.restart_timeline(decision)
        cut = self.lr_cut_after_rollback(decision, to_step)
        return [] if cut is None else [cut]

    def restart_timeline(self, decision: Decision) -> None:
        """The timeline after a rollback: no open episode, no overflow streak; after a loss-rise
        rollback the rise rule watches the new, cut LR afresh. (The guard calls it again once it
        has loaded the restored timeline, which would otherwise bring back the checkpoint's episode.)"""
        self.reset_timeline({"cause": decision.numbers.get("cause")})

    def reset_timeline(self, rollback: dict[str, Any] | None) -> None:
        """:meth:`restart_timeline` from a rollback's ledger record (``ledger.last_rollback``): what a
        process resuming a rollback that a crash interrupted calls, so its timeline equals the one
        the in-process rollback would have left."""
        self.episode, self.overflow_streak, self.episode_tests = None, 0, {}
        if rollback is not None and rollback.get("cause") == "loss_rising":
            self.level = fresh_level()  # watch the new, cut LR afresh

    # ---------------------------------------------------------------- queries
    def lr_factor(self, step: int) -> float:
        """Multiplier on the scheduled LR at ``step`` (from the ledger)."""
        return self.ledger.lr_factor(step)

    def skip_to(self, batch_index: int) -> int | None:
        """First batch index after the skipped range holding ``batch_index``, or None (from the ledger)."""
        return self.ledger.skip_to(batch_index)

    @property
    def episode_onset(self) -> int | None:
        """Onset step of the open episode (None when the run is calm)."""
        return None if self.episode is None else self.episode.onset_step

    @property
    def rollbacks(self) -> int:
        """Rollbacks booked so far (``ledger.rollbacks``)."""
        return self.ledger.rollbacks

    @property
    def halted(self) -> bool:
        """The policy decided to halt (``ledger.halted``)."""
        return self.ledger.halted

    # ---------------------------------------------------------------- timeline state
    def state_dict(self) -> dict[str, Any]:
        """The timeline part (rolled back with a checkpoint); JSON-safe."""
        return {"episode": None if self.episode is None else self.episode.to_dict(),
                "overflow_streak": self.overflow_streak, "level": dict(self.level)}

    def load_state_dict(self, sd: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` output."""
        self.episode = None if sd.get("episode") is None else Episode.from_dict(sd["episode"])
        self.overflow_streak = int(sd.get("overflow_streak", 0))
        self.episode_tests = {}  # reasons only: counted afresh after a restore
        lv = sd.get("level") or {}
        self.level = {"seen": int(lv.get("seen", 0)), "best": lv.get("best"), "best_step": lv.get("best_step")}
