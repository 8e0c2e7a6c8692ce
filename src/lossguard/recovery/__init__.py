"""The recovery core: one definition of every recovery concept, used by the analyser's plans
(:mod:`lossguard.plan`), the live guard (:mod:`lossguard.guard`) and ``lossguard simulate``.

Torch-free. One concept per module:

- :class:`Severity` (``severity``), :class:`Action` (``action``): the enums, one ordering each;
- :class:`SkipRange` (``skip_range``): skipped batches, half-open ``[start, stop)``;
- :class:`RecoveryRecipe` (``recipe``): rollback distance, skip margin, LR cut, loss-scale reset;
- :func:`choose_checkpoint` (``checkpoint_choice``): newest checkpoint <= max(onset - distance, 0);
- :class:`Episode` (``episode``): bad steps close together, onset, last bad batch, per-episode budget;
- :class:`Verdict` (``verdict``): the judge's typed finding about one step;
- :class:`Decision` (``decision``): one decision with reasons and numbers;
- :class:`PolicyConfig` (``config``), :class:`RecoveryPolicy` (``policy``): the ladder -- the one
  decision function of the guard, ``simulate`` and the analyser's plans;
- the policy's rules, one each: the rise rule (``loss_rise``), the LR cut a rollback brings
  (``lr_cuts``), recurrence (``recurrence``);
- :func:`resolve_rollback` (``resolve``): a rollback's target, or the halt it becomes (executor and simulate);
- :class:`Suspect` (``suspect``): the cause a decision names; :class:`LrRamp` (``lr_phase``): is the LR ramping?;
- :class:`WholeLogFinding` (``finding``): evidence only the whole log has (the one documented
  difference between the analyser and a live guard);
- :class:`RunLedger` (``ledger``): budgets and history, never rolled back, ``ledger.json``.
"""
from .action import Action
from .checkpoint_choice import choose_checkpoint, rollback_limit
from .config import PolicyConfig
from .decision import Decision
from .episode import Episode
from .finding import WholeLogFinding
from .ledger import LEDGER_FILE, LrCut, RunLedger
from .policy import RecoveryPolicy
from .lr_phase import LrRamp
from .recipe import RecoveryRecipe
from .resolve import Resolution, resolve_rollback
from .severity import SEVERITIES, Severity
from .skip_range import SkipRange
from .suspect import Suspect
from .verdict import PACKED_FIELDS, Verdict

__all__ = ["Action", "Decision", "Episode", "LEDGER_FILE", "LrCut", "LrRamp", "PACKED_FIELDS", "PolicyConfig",
           "RecoveryPolicy", "RecoveryRecipe", "Resolution", "RunLedger", "SEVERITIES", "Severity", "SkipRange",
           "Suspect", "Verdict", "WholeLogFinding", "choose_checkpoint", "resolve_rollback", "rollback_limit"]
