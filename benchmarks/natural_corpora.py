"""Texts for the natural-instability benchmark (``--corpus``), each loaded deterministically.

* ``demo``: lossguard's shipped public-domain corpus (``src/lossguard/demo/corpus.txt``, ~0.3 MB of
  prose), the text the ``mild`` and ``harsh`` presets were developed on;
* ``pydoc``: the Python language and library reference topics that ship with every CPython
  (``pydoc_data.topics``, ~0.46 MB on 3.11: English prose mixed with grammar rules and code
  examples), built at run time so that nothing is checked in. A different text from a different
  source, for the ``outside`` preset that nothing was tuned on. Its bytes depend on the Python
  version (the topics are rewritten with each release); the row records their length and hash.
"""
from __future__ import annotations

import hashlib

from lossguard.demo.corpus import load_corpus


def pydoc_corpus() -> bytes:
    """The ``pydoc_data.topics`` texts, joined in sorted-key order, UTF-8."""
    try:
        from pydoc_data.topics import topics
    except ImportError as exc:  # some distributions strip pydoc_data from their Python
        raise SystemExit("corpus 'pydoc' needs the standard library's pydoc_data package, which this "
                         "Python lacks (Debian: the libpython3.X-stdlib package); use --corpus demo") from exc
    return "\n\n".join(topics[k] for k in sorted(topics)).encode("utf-8")


CORPORA = {"demo": load_corpus, "pydoc": pydoc_corpus}
"""Corpus name -> loader returning the corpus bytes."""


def load(name: str) -> bytes:
    """The bytes of corpus ``name`` (one of :data:`CORPORA`)."""
    return CORPORA[name]()


def fingerprint(data: bytes) -> str:
    """Length and short SHA-256 of a corpus, to tell rows of different Python versions apart."""
    return f"{len(data)}:{hashlib.sha256(data).hexdigest()[:12]}"
