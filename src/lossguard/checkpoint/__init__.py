"""Checkpoints: atomic CheckpointStore, TrainState (everything a resume needs), RNG capture/restore.

Importing this package does not import torch; saving and loading do.
"""
from .rng import capture_rng, restore_rng
from .state import TrainState
from .store import CheckpointInfo, CheckpointStore

__all__ = ["CheckpointInfo", "CheckpointStore", "TrainState", "capture_rng", "restore_rng"]
