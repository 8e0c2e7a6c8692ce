"""Trainer console corpus: renders a seeded loss curve through each trainer's own console format.

One module per trainer family (each cites the repository, path and commit of the format strings
it reproduces); ``python -m evals.console.render`` writes every fixture into tests/data/console/
with MANIFEST.json (see CORPUS_SCHEMA.md).
"""
