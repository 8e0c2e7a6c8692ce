"""Evaluation corpora for lossguard (not shipped in the package; see evals/README.md)."""
