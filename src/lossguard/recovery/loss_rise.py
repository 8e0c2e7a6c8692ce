"""The rise rule (``loss_rise``): a loss that does not come back is an optimizer fault seen directly.

The policy tracks the loss baseline's lowest value after ``loss_rise_after`` good points (its
*level*: timeline state, rolled back with a checkpoint). Once the baseline stays more than
``loss_rise`` above that lowest value, on new data, the rule rolls back to before the lowest point
-- and the rollback brings a decisive LR cut (:mod:`.lr_cuts`, cause ``loss_rising``) -- or halts
when the rule's budget (``rollbacks_per_incident``) or the run's (``max_rollbacks``) is spent.
"""
from __future__ import annotations

from typing import Any

from .action import Action
from .config import PolicyConfig
from .decision import Decision
from .ledger import RunLedger
from .verdict import Verdict


def fresh_level() -> dict[str, Any]:
    """The level before any point: nothing seen, no lowest value."""
    return {"seen": 0, "best": None, "best_step": None}


def loss_rising(config: PolicyConfig, ledger: RunLedger, level: dict[str, Any], verdict: Verdict) -> Decision | None:
    """A rollback (or a halt, budget spent) when the baseline of a good step has risen too far above
    its lowest value; None otherwise. Updates ``level`` (the lowest value and its step) in place."""
    cfg, lv = config, level
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
    led = ledger
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
