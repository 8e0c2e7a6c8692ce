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
- :class:`PolicyConfig` (``config``), :class:`RecoveryPolicy` (``policy``): the ladder;
- :class:`RunLedger` (``ledger``): budgets and history, never rolled back, ``ledger.json``.
"""
from .action import Action
from .checkpoint_choice import choose_checkpoint, rollback_limit
from .config import PolicyConfig
from .decision import Decision
from .episode import Episode
from .ledger import LEDGER_FILE, LrCut, RunLedger
from .policy import RecoveryPolicy
from .recipe import RecoveryRecipe
from .severity import SEVERITIES, Severity
from .skip_range import SkipRange
from .verdict import PACKED_FIELDS, Verdict

__all__ = ["Action", "Decision", "Episode", "LEDGER_FILE", "LrCut", "PACKED_FIELDS", "PolicyConfig",
           "RecoveryPolicy", "RecoveryRecipe", "RunLedger", "SEVERITIES", "Severity", "SkipRange", "Verdict",
           "choose_checkpoint", "rollback_limit"]
