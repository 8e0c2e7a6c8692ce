"""The evaluation lab of lossguard: generators, scorers, model zoo, training scripts and corpora (not
shipped in the package; see evals/README.md)."""
