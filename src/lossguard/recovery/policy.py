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
from .ledger import LrCut, RunLedger
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
        self.level = {"seen": 0, "best": None, "best_step": None}
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
        cfg, led = self.config, self.ledger
        if decision.numbers.get("cause") == "loss_rising":
            old = led.cut("loss_rising")
            factor = (old.factor if old else 1.0) * cfg.recurrence_lr_factor
            # From (just before) the lowest point on, where the loss stopped coming down -- not from
            # the rollback target: the steps replayed up to there were healthy at the scheduled LR.
            start = max(int(to_step), int(decision.numbers["onset"]) - cfg.loss_rise_lead)
            led.set_lr_cut(LrCut(start_step=start, until_step=None, factor=factor, cause="loss_rising"))
            return Decision(Action.LR_CUT, to_step, [
                f"the loss did not come back (rising on new data since step {decision.numbers['onset']}): optimizer "
                f"instability suspected; LR x{cfg.recurrence_lr_factor:g} (recurrence_lr_factor) from step {start} "
                f"for the rest of the run"],
                {"factor": round(factor, 12), "cut": cfg.recurrence_lr_factor, "until_step": None,
                 "cause": "loss_rising"})
        if decision.numbers.get("suspect") == "optimizer" and cfg.recurrence_lr_factor < 1:
            led.recurrences += 1
            old = led.cut("recurrence")
            factor = (old.factor if old else 1.0) * cfg.recurrence_lr_factor
            until = None if cfg.recurrence_lr_steps is None else to_step + cfg.recurrence_lr_steps
            led.set_lr_cut(LrCut(start_step=to_step, until_step=until, factor=factor, cause="recurrence"))
            held = "for the rest of the run" if until is None else f"until step {until}"
            return Decision(Action.LR_CUT, to_step, [
                f"episode recurred at step {decision.numbers['onset']} after the rollback for the episode at "
                f"step {decision.numbers.get('recurrence_of')} skipped its data: optimizer instability "
                f"suspected; LR x{cfg.recurrence_lr_factor:g} (recurrence_lr_factor), {held}"],
                {"factor": round(factor, 12), "cut": cfg.recurrence_lr_factor, "until_step": until,
                 "cause": "recurrence", "recurrences": led.recurrences})
        cut = cfg.recipe.lr_cut_factor
        if cfg.lr_cut_from and led.rollbacks >= cfg.lr_cut_from and cut < 1:
            until = to_step + cfg.lr_cut_steps
            led.set_lr_cut(LrCut(start_step=to_step, until_step=until, factor=cut, cause="rollbacks"))
            return Decision(Action.LR_CUT, to_step, [f"rollback number {led.rollbacks} (lr_cut_from={cfg.lr_cut_from})"],
                            {"factor": cut, "until_step": until, "cause": "rollbacks"})
        return None

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
            nums = {"batch_index": verdict.batch_index, "loss": verdict.loss, "grad_norm": verdict.grad_norm,
                    "loss_z": verdict.loss_z, "grad_norm_z": verdict.grad_norm_z,
                    "loss_baseline": verdict.loss_baseline}
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
            held = counts and self.needs_rollback(ep) and self.suspect_for(ep) is Suspect.LR_SCHEDULE
            if held:
                nums["suspect"] = Suspect.LR_SCHEDULE.value
                reasons = reasons + [f"no rollback: the grad norm alone blew up while the LR was ramping up (it rose "
                                     f"within the last {cfg.lr_ramp_window} steps): the LR schedule, not the data; "
                                     "the update is withheld (and clipped, with max_grad_norm), no data skipped"]
            out.append(Decision(Action.SKIP, verdict.step, reasons, nums))
            if counts and not held and self.needs_rollback(ep):
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
        cfg, lv = self.config, self.level
        b = verdict.loss_baseline
        if cfg.loss_rise is None or not (b == b and abs(b) != float("inf")) or verdict.bad:
            return None
        lv["seen"] += 1
        if lv["seen"] < cfg.loss_rise_after:
            return None
        if lv["best"] is None or b < lv["best"]:
            lv["best"], lv["best_step"] = b, verdict.step
            return None
        if not lv["best"] > 0 or b <= lv["best"] * (1.0 + cfg.loss_rise):
            return None
        led = self.ledger
        done = sum(1 for h in led.history if h.get("event") == "rollback" and h.get("cause") == "loss_rising")
        nums: dict[str, Any] = {"onset": int(lv["best_step"]), "rollbacks_done": led.rollbacks, "suspect": "optimizer",
                                "cause": "loss_rising", "baseline": b, "lowest": lv["best"]}
        reasons = [f"loss does not come back: its baseline (trailing median) {b:.4g} is "
                   f"{100 * (b / lv['best'] - 1):.0f}% above its lowest value {lv['best']:.4g} (step {lv['best_step']}), "
                   f"on new data (loss_rise={cfg.loss_rise:g}): an optimizer instability, not a bad batch"]
        if done >= cfg.rollbacks_per_incident or led.rollbacks >= cfg.max_rollbacks:
            led.halted = True
            return Decision(Action.HALT, verdict.step, reasons + [
                f"rollback budget spent ({done} rollbacks for a rising loss, rollbacks_per_incident="
                f"{cfg.rollbacks_per_incident}; {led.rollbacks} in the run, max_rollbacks={cfg.max_rollbacks})"], nums)
        return Decision(Action.ROLLBACK, verdict.step, reasons, nums)

    def escalate(self, step: int, why: str) -> Decision:
        """A rollback for the open episode (or from ``step`` if none), or a halt once the budget is spent."""
        cfg, led, ep = self.config, self.ledger, self.episode
        nums: dict[str, Any] = {"onset": step if ep is None else ep.onset_step, "rollbacks_done": led.rollbacks}
        reasons = [why]
        if ep is not None:
            nums["skip_batches"] = ep.skip_range(cfg.recipe.margin_for(self.run_steps)).to_json()
            prev = self._recurrence_of(ep)
            if prev is not None:
                n = int(prev.get("recurrence", 0)) + 1
                nums["recurrence"], nums["recurrence_of"] = n, prev["onset"]
                nums["suspect"] = self.suspect(n)
                reasons.append(
                    f"recurrence {n}: onset {ep.onset_step} is {abs(ep.onset_step - prev['onset'])} steps from the "
                    f"onset {prev['onset']} of the previous rollback, which skipped batches {prev['skip_batches']}; "
                    f"the spike came back on different data (batch {ep.onset_batch}): evidence against bad data, "
                    + ("for an optimizer instability (LR too high for the weights there)" if nums["suspect"] == "optimizer"
                       else f"not yet enough (recurrences_to_cut={cfg.recurrences_to_cut}): skipping data again"))
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

    def _recurrence_of(self, ep: Episode) -> dict[str, Any] | None:
        """The previous rollback if ``ep`` is its recurrence (same place, its data skipped), else None.

        "The same place" is either the previous onset's step, or the first batches after the
        skipped data: where a framework cannot jump its loader (HF, Lightning) the skipped batches
        are withheld updates, so an instability of the weights comes back once updates resume, the
        length of the skip later (issue 10: HF runs with an LR fault rolled back 6 times, each a
        "new" incident 23 steps after the last, and never got the decisive LR cut)."""
        cfg, prev = self.config, self.ledger.last_rollback
        if prev is None or prev.get("skip_batches") is None:
            return None
        window = cfg.episode_gap if cfg.recurrence_window is None else cfg.recurrence_window
        a, b = prev["skip_batches"]
        if a <= ep.onset_batch < b:
            return None  # the same data again (not skipped after all): no evidence either way
        same_step = abs(ep.onset_step - prev["onset"]) <= window
        right_after_skip = 0 <= ep.onset_batch - b <= window
        return prev if same_step or right_after_skip else None

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
            self.level = {"seen": 0, "best": None, "best_step": None}  # watch the new, cut LR afresh

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
