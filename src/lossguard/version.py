"""The package's version, in a module of its own so any module can read it without importing the package.

``lossguard/__init__.py`` imports the analysis modules, and :mod:`lossguard.analysis` records the
version in every analysis it writes: reading it from the package would be an import cycle.
Keep it equal to ``version`` in pyproject.toml.
"""

__version__ = "0.1.0"
"""The version of lossguard (PEP 440)."""
