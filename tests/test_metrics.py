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


@pytest.mark.parametrize("raw, expected", [
    # Lightning's LearningRateMonitor: the first optimizer's first parameter group is the LR
    ("lr-SGD", m.LR), ("lr-AdamW", m.LR), ("lr-Adam/pg1", m.LR), ("lr-DeepSpeedCPUAdam", m.LR),
    ("lr-Adam/pg2", "lr_adam/pg2"), ("lr-Adam-1", "lr_adam_1"),
    ("lr-SGD-momentum", "lr_sgd_momentum"), ("lr-AdamW-weight_decay", "lr_adamw_weight_decay"),
])
def test_learning_rate_monitor_columns(raw, expected):
    assert m.canonical_name(raw) == expected


@pytest.mark.parametrize("raw", ["_step", "_runtime", "_timestamp", "_wandb", "train/global_step",
                                 "trainer/global_step", "global_step"])
def test_bookkeeping_is_not_a_metric(raw):
    assert m.is_bookkeeping(raw)


@pytest.mark.parametrize("raw", ["loss", "train/loss", "epoch", "lr-SGD", "grad_norm"])
def test_metrics_are_not_bookkeeping(raw):
    assert not m.is_bookkeeping(raw)


def test_framework_global_step_beats_wandb_call_counter():
    assert m.STEP_ALIASES.index("train/global_step") < m.STEP_ALIASES.index("_step")
