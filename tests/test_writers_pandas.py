"""CSV files written by pandas' ``DataFrame.to_csv`` with its defaults: a leading unnamed index column.

That is what ``wandb.Api().run(path).history().to_csv("history.csv")`` writes, and what people do
with any metrics DataFrame. The history rows are shaped as HF's ``WandbCallback`` logs them: one
``wandb.log`` call per training log and one per eval (each its own ``_step``), every call carrying
``train/global_step`` and ``train/epoch``.
"""
from __future__ import annotations

import numpy as np
import pytest

from lossguard.io import read_log
from lossguard.metrics import EPOCH, LOSS, LR, VAL_LOSS

pd = pytest.importorskip("pandas")


def _history() -> "pd.DataFrame":
    rows = []
    for s in range(1, 61):
        base = {"_step": len(rows), "_runtime": 0.1 * s, "_timestamp": 1.7e9 + s, "train/epoch": s / 20,
                "train/global_step": s}
        rows.append({**base, "train/loss": 3.0 - 0.01 * s, "train/learning_rate": 1e-3,
                     "train/grad_norm": np.nan if s == 33 else 1.0})
        if s % 20 == 0:
            rows.append({**base, "_step": len(rows), "eval/loss": 2.5 - 0.01 * s})
    return pd.DataFrame(rows)


@pytest.mark.parametrize("index", [True, False], ids=["default_index", "index_false"])
def test_wandb_history_to_csv(tmp_path, index):
    path = tmp_path / "history.csv"
    _history().to_csv(path, index=index)
    if index:
        assert path.read_text().startswith(",_step,")  # the unnamed index column
    log = read_log(path)
    assert log.format == "wandb"
    # train/global_step is the step (not W&B's _step, which counts calls); bookkeeping is no metric
    assert set(log.series) == {LOSS, LR, EPOCH, VAL_LOSS, "grad_norm"}
    steps, values = log.live(LOSS)
    assert steps.tolist() == list(range(1, 61))
    np.testing.assert_allclose(values, [3.0 - 0.01 * s for s in range(1, 61)])
    assert log.live(VAL_LOSS)[0].tolist() == [20, 40, 60]
    assert log.live(EPOCH)[0].tolist() == list(range(1, 61))  # repeated on eval rows: kept once
    # pandas writes NaN as an empty cell: a missing point, not a NaN
    assert 33 not in log.live("grad_norm")[0].tolist() and len(log.live("grad_norm")[0]) == 59


def test_plain_dataframe_to_csv(tmp_path):
    path = tmp_path / "metrics.csv"
    pd.DataFrame({"step": range(0, 100, 10), "loss": np.linspace(3, 2, 10), "lr": 1e-3}).to_csv(path)
    log = read_log(path)
    assert log.format == "csv" and set(log.series) == {LOSS, LR}
    assert log.live(LOSS)[0].tolist() == list(range(0, 100, 10))


@pytest.mark.parametrize("lines", [True, False], ids=["jsonl", "json_array"])
def test_wandb_history_to_json(tmp_path, lines):
    path = tmp_path / ("history.jsonl" if lines else "history.json")
    _history().to_json(path, orient="records", lines=lines)
    log = read_log(path)
    assert log.format == "wandb" and set(log.series) == {LOSS, LR, EPOCH, VAL_LOSS, "grad_norm"}
    assert log.live(LOSS)[0].tolist() == list(range(1, 61))
    assert log.live(VAL_LOSS)[0].tolist() == [20, 40, 60]
