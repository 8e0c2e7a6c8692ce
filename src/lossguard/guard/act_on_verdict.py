"""What the guard does with a step's verdict: the policy's decisions, carried out in order.

A rollback's restore loads the checkpoint's timeline while this loop runs; the guard's
:class:`TimelineSlot` parks it, and it is applied only once the decisions are over (so the policy
is not rewritten under its own decision loop). A step with no decision still counts toward the
withheld-updates cap (:mod:`.withheld`). A rollback restores step counter, model, optimizer,
scheduler, GradScaler, RNG, data position and the timeline; the data stream then skips the
episode's half-open batch range when it reaches it (:mod:`.data_feed`).
"""
from __future__ import annotations

from itertools import chain
from typing import TYPE_CHECKING, Iterable

from ..recovery.decision import Decision
from ..recovery.resume_watch import answered
from ..recovery.update_jump import resolve_jump
from ..recovery.verdict import Verdict

if TYPE_CHECKING:
    from .guard import StabilityGuard


def act_on_verdict(guard: StabilityGuard, v: Verdict, *, transient: bool, responses: Iterable[Decision] = ()) -> None:
    """Ask the policy about ``v`` and have the executor carry out each decision; after a rollback,
    put the restored timeline in place (step counter, data position, policy).

    ``responses``: decisions of the precursor responders for this step (an update jump's rollback
    or LR cut, :mod:`lossguard.recovery.update_jump`), carried out first: a rollback for an LR
    fault undoes the step the policy would otherwise judge."""
    finding = guard._timeline.watch.update(v.step, v.loss)  # repeated data after a resume (resume_watch.py)
    ex = guard.executor
    jumps = [resolve_jump(d, ex.checkpoints(), guard.ledger, max_rollbacks=guard.config.max_rollbacks,
                          in_process=ex.in_process_rollback and ex.state is not None) for d in responses]
    with guard._timeline.parked():  # a rollback's restore must not reload this guard mid-decision
        for d in chain(jumps, guard.policy.observe(v, transient=transient), answered(guard.policy, finding)):
            data_count = guard.feed.count
            out = guard.executor.carry_out(d)
            if out.rolled_back_to is not None:
                rollback = d
                break
            if out.halted:
                guard.halted, guard.restart_requested = True, out.restart
                if guard.namer is not None and guard.namer.records and guard.executor.diagnosis:
                    add_to_diagnosis(guard, guard.namer.summary())
                return
        else:
            halt = guard.withheld.update(v.step, bool(v.bad) and not guard.config.shadow)
            if halt is not None and guard.executor.carry_out(halt).halted:
                guard.halted = True
            return
    # The decision is over: now the restored timeline (detector windows, episode, data counter)
    # replaces the guard's, and the policy starts afresh after the rollback.
    guard._timeline.apply()
    guard.policy.restart_timeline(rollback)
    guard.step_count = guard.state.step
    if guard.sampler is None:
        guard.feed.count = data_count  # the stream itself was not rewound
    guard.feed.reiterate = True
    guard.transfer.drop()


def add_to_diagnosis(guard: StabilityGuard, text: str) -> None:
    """Append ``text`` (the named samples) to the halt diagnosis and, on rank 0, to its file."""
    ex = guard.executor
    ex.diagnosis = f"{ex.diagnosis}\n{text}"
    f = ex.diagnosis_file
    if f is not None and guard.rank == 0 and f.exists():
        f.write_text(ex.diagnosis + "\n", encoding="utf-8")
