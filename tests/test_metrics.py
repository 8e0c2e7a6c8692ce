"""Metric aliasing: the names real frameworks write map to one canonical name."""
import pytest

from lossguard import metrics as m


@pytest.mark.parametrize("raw, expected", [
    ("lm loss", m.LOSS), ("train/loss", m.LOSS), ("train_loss", m.LOSS), ("lm_loss", m.LOSS),
    ("loss", m.LOSS), ("train_loss_step", m.LOSS), ("eval_loss", m.VAL_LOSS), ("val/loss", m.VAL_LOSS),
    ("lm loss validation", m.VAL_LOSS), ("grad norm", m.GRAD_NORM), ("train/grad_norm", m.GRAD_NORM),
    ("learning_rate", m.LR), ("learning rate", m.LR), ("loss scale", m.LOSS_SCALE),
    ("number of skipped iterations", m.SKIPPED_ITERS), ("number of nan iterations", m.NAN_ITERS),
    ("loss/cm4", "loss/cm4"), ("train/loss/cm4", "loss/cm4"), ("cm4/loss", "loss/cm4"),
    ("some_custom_metric", "some_custom_metric"),
])
def test_canonical_name(raw, expected):
    assert m.canonical_name(raw) == expected


def test_streams():
    assert m.stream_of("loss/pmd") == "pmd" and m.stream_of("loss") is None
    assert m.is_loss("loss") and m.is_loss("loss/pmd") and not m.is_loss("val_loss")
    assert m.is_step_name("Step") and m.is_step_name("global_step") and not m.is_step_name("loss")
