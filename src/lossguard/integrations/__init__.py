"""Thin adapters that put the StabilityGuard inside frameworks that step the optimizer themselves:
:mod:`.lightning` (Lightning callback) and :mod:`.hf` (Hugging Face Trainer callback)."""
