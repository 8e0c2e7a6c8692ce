"""Helpers for testing your own setup with lossguard: fault injection (:mod:`.faults`) and a 2-rank
gloo launcher (:mod:`.distributed`). The team's evaluation lab (generators, scorers, model zoo,
training scripts) is not part of the package: it lives in the repository's ``evals/``."""
