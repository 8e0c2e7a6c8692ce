"""W&B export reader. No wandb package is needed; fixtures are written in W&B's exact layouts:

* chart CSV as the UI downloads it ("Export panel data" -> CSV): header
  ``"Step","<run> - <metric>","<run> - <metric>__MIN","<run> - <metric>__MAX"`` with every field
  quoted, one row per sampled step, empty cells where the run has no value;
* ``run.history()`` dumped with pandas ``to_json(orient="records")`` (a JSON array) and with
  ``lines=True`` (JSONL); keys ``_step``, ``_runtime``, ``_timestamp``, ``train/loss``, ...;
* ``list(run.scan_history())`` dumped with ``json.dump`` (NaN written as ``NaN``).
"""
from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest

from lossguard.errors import LogFormatError
from lossguard.io import detect_format, read_log, wandb
from lossguard.metrics import GRAD_NORM, LOSS, LR, VAL_LOSS

RUN = "gpt2-small-lr3e-4"


def chart_csv(path: Path, runs: list[str], steps) -> Path:
    header = ["Step"]
    for r in runs:
        header += [f"{r} - train/loss", f"{r} - train/loss__MIN", f"{r} - train/loss__MAX"]
    with open(path, "w", newline="") as f:
        w = csv.writer(f, quoting=csv.QUOTE_ALL)  # the W&B UI quotes every field
        w.writerow(header)
        for s in steps:
            row = [s]
            for _ in runs:
                v = 3.0 - s / 1000
                row += [v, v - 0.01, v + 0.01]
            w.writerow(row)
    return path


def history(n: int = 200) -> list[dict]:
    recs = []
    for s in range(n):
        r = {"_step": s, "_runtime": 1.5 * s, "_timestamp": 1.7e9 + 1.5 * s, "train/loss": 4.0 - s / 100,
             "train/grad_norm": 0.5, "train/learning_rate": 3e-4, "_wandb": {"runtime": int(1.5 * s)}}
        if s % 50 == 49:
            r["eval/loss"] = 3.9 - s / 100
        recs.append(r)
    return recs


def test_chart_csv_drops_min_max(tmp_path):
    p = chart_csv(tmp_path / "wandb_export_2024-05-01.csv", [RUN], range(0, 1000, 10))
    assert detect_format(p) == "wandb"
    log = wandb.read(p)
    assert set(log.series) == {LOSS}
    np.testing.assert_array_equal(log.series[LOSS].steps, np.arange(0, 1000, 10))
    np.testing.assert_allclose(log.series[LOSS].values, 3.0 - np.arange(0, 1000, 10) / 1000)
    assert log.metadata["run"] == RUN


def test_chart_csv_with_several_runs_is_refused(tmp_path):
    p = chart_csv(tmp_path / "export.csv", [RUN, "baseline"], range(5))
    with pytest.raises(LogFormatError) as e:
        wandb.read(p)
    assert "2 runs" in e.value.what and RUN in e.value.what and "baseline" in e.value.what


def test_history_json_array_like_pandas_writes_it(tmp_path):
    pd = pytest.importorskip("pandas")
    df = pd.DataFrame(history())
    p = tmp_path / "history.json"
    df.to_json(p, orient="records")  # rows without eval/loss get null
    assert detect_format(p) == "wandb"
    log = read_log(p)
    assert set(log.series) == {LOSS, GRAD_NORM, LR, VAL_LOSS}  # _runtime, _wandb are bookkeeping
    np.testing.assert_array_equal(log.series[VAL_LOSS].steps, [49, 99, 149, 199])
    np.testing.assert_allclose(log.series[LOSS].values, 4.0 - np.arange(200) / 100)
    assert log.segments[0].start_time == pytest.approx(1.7e9)


def test_history_jsonl_and_scan_history_dump(tmp_path):
    pd = pytest.importorskip("pandas")
    recs = history()
    recs[10]["train/loss"] = math.nan
    p = tmp_path / "history.jsonl"
    pd.DataFrame(recs).to_json(p, orient="records", lines=True)
    q = tmp_path / "scan.json"
    q.write_text(json.dumps(recs))  # json.dump(list(run.scan_history())) writes NaN literally
    a, b = read_log(p), read_log(q)
    assert a.format == b.format == "wandb"
    # pandas writes NaN as null (missing); json.dumps keeps it as NaN (a non-finite point)
    assert len(a.series[LOSS]) == 199 and len(b.series[LOSS]) == 200
    assert math.isnan(b.series[LOSS].values[10])


def test_sniff(tmp_path):
    p = tmp_path / "x"
    assert wandb.sniff(p, b'"Step","run - loss","run - loss__MIN"\n')
    assert wandb.sniff(p, b'[{"_step": 0, "_runtime": 1.0, "loss": 2.0}]')
    assert not wandb.sniff(p, b"step,loss\n1,2\n")
    assert not wandb.sniff(p, b'{"step": 0, "loss": 2.0}\n')


def test_wandb_file_without_the_sdk_names_the_extra(tmp_path, monkeypatch):
    import importlib.util

    from lossguard.errors import MissingDependencyError
    from lossguard.io import _wandb_history

    path = tmp_path / "run-abc.wandb"
    path.write_bytes(_wandb_history.MAGIC + b"\x00\x01" + b"\x00" * 64)
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a))
    with pytest.raises(MissingDependencyError, match=r"lossguard\[wandb\]"):
        read_log(path)
