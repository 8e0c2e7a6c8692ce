"""The stall rule on real runs of the harsh natural-instability preset (issue 20): the run that sits
on a plateau at its peak LR is named, the best LR's run is not (``tests/data/natural/README.md``)."""
from __future__ import annotations

from pathlib import Path

from lossguard.analysis import analyze
from lossguard.classify.incident import IncidentKind as K
from lossguard.io import read_log

NATURAL = Path(__file__).parent / "data" / "natural"


def test_the_high_lr_plateau_is_named_a_stall_with_its_attention_logits():
    rep = analyze(read_log(NATURAL / "harsh_clip_lr0.1_s0.jsonl"))
    stalls = [i for i in rep.incidents if i.kind == K.STALL]
    assert len(stalls) == 1
    text = " ".join(stalls[0].evidence) if isinstance(stalls[0].evidence, list) else str(stalls[0].evidence)
    assert "not resumed" in text and "attention logit" in text
    assert stalls[0].onset < 200  # the plateau starts early and lasts to the end


def test_the_best_lr_run_has_no_stall():
    rep = analyze(read_log(NATURAL / "harsh_clip_lr0.003_s0.jsonl"))
    assert not [i for i in rep.incidents if i.kind == K.STALL]
