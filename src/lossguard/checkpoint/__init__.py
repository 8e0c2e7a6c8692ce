"""Checkpoints: atomic CheckpointStore, TrainState (everything a resume needs), RNG capture/restore;
for sharded runs ShardedCheckpointStore (DCP) and ShardedTrainState; HostSnapshot for fast rollback.

Importing this package does not import torch; saving and loading do.
"""
from .protocol import GuardStore
from .rng import capture_rng, restore_rng
from .pending_save import PendingSave
from .sharded import ShardedCheckpointStore
from .sharded_state import ShardedTrainState
from .snapshot import HostSnapshot
from .state import TrainState
from .store import CheckpointInfo, CheckpointStore

__all__ = ["CheckpointInfo", "CheckpointStore", "GuardStore", "HostSnapshot", "PendingSave", "ShardedCheckpointStore",
           "ShardedTrainState", "TrainState", "capture_rng", "restore_rng"]
