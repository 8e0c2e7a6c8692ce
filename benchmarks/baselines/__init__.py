"""Detection rules that training frameworks and tools use today, each from its published source.

Every module has ``NAME``, ``COVERS`` (the kinds it can claim; ``"spike"`` = the loss-spike
umbrella) and ``detect(log) -> [(kind, onset)]``.
"""
from . import llm_foundry, lightning_spike, losslint_cli, megatron, olmo_core, ruptures_cp, zscore

ALL = (olmo_core, llm_foundry, lightning_spike, megatron, zscore, ruptures_cp, losslint_cli)
