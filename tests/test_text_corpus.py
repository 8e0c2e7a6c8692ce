"""Every entry of the console and paste corpora (tests/data/console, tests/data/pastes; schema in
their MANIFEST.json) read without --format and analysed: the step numbering and loss spot values of
the manifest, each event found (kind family, onset within a margin), no alarm on healthy entries.

Scoring is ``evals/text_corpus.py`` (``python -m evals.text_corpus`` prints the per-writer table).
The entries listed in :data:`KNOWN_GAPS` are where the reader or the analyser and the manifest still
disagree, each with why; they are expected to fail (strict), so a fix shows up as an XPASS to move
out of the list. Every other entry must pass. An entry with ``read_with`` (open_clip's sample counter:
the text lacks the batch size) is read with those flags and must give its ``warns`` warning without.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from evals import text_corpus  # noqa: E402

KNOWN_GAPS: dict[str, str] = {}


def _cases():
    for corpus in text_corpus.CORPORA:
        for entry in text_corpus.entries(corpus):
            marks = [pytest.mark.xfail(reason=KNOWN_GAPS[entry["file"]], strict=True)] \
                if entry["file"] in KNOWN_GAPS else []
            yield pytest.param(corpus, entry, id=f"{corpus}/{entry['file']}", marks=marks)


@pytest.mark.parametrize("corpus,entry", list(_cases()))
def test_entry_is_read_and_analysed_as_its_manifest_says(corpus, entry):
    s = text_corpus.score(corpus, entry)
    assert s.read, s.problems
    assert s.steps_ok and s.loss_ok, s.problems
    assert s.found == s.events, s.problems
    assert not s.false_alarms, s.problems
