"""Helpers for testing your own setup with lossguard: fault injection (:mod:`.faults`), a 2-rank gloo
launcher (:mod:`.distributed`) and the GPU self-check (:mod:`.gpu_check`). The team's evaluation lab
(generators, scorers, model zoo, training scripts) is not part of the package: it lives in the
repository's ``evals/``."""
