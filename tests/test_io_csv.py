"""CSV/TSV reader: aliasing, missing vs NaN, segments, and the exact line of every bad-input error.

Fixtures are written by the writers people use for CSV logs: Python's ``csv`` module and
``pandas.DataFrame.to_csv``. Every behaviour is checked on both parse paths (pyarrow and stdlib).
"""
from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np
import pytest

from lossguard.errors import LogFormatError
from lossguard.io import csv as csv_reader
from lossguard.metrics import GRAD_NORM, LOSS, LR, VAL_LOSS
from lossguard.stitch import stitch

FAST = pytest.mark.parametrize("fast", [True, False], ids=["pyarrow", "stdlib"])


def write_rows(path: Path, header: list[str], rows: list[list], delimiter: str = ",") -> Path:
    with open(path, "w", newline="") as f:
        w = csv.writer(f, delimiter=delimiter)
        w.writerow(header)
        w.writerows(rows)
    return path


@FAST
def test_aliases_and_values(tmp_path, fast):
    rows = [[i, 10.0 / i, 0.5 + i, 1e-4 * i] for i in range(1, 51)]
    p = write_rows(tmp_path / "m.csv", ["iteration", "lm loss", "grad-norm", "learning_rate"], rows)
    log = csv_reader.read(p, fast=fast)
    assert set(log.series) == {LOSS, GRAD_NORM, LR}
    s = log.series[LOSS]
    np.testing.assert_array_equal(s.steps, np.arange(1, 51))
    np.testing.assert_allclose(s.values, 10.0 / np.arange(1, 51))
    np.testing.assert_allclose(log.series[LR].values[-1], 5e-3)
    assert log.series[LOSS].steps.dtype == np.int64 and log.series[LOSS].values.dtype == np.float64
    assert len(log.segments) == 1 and log.format == "csv"


@FAST
def test_tsv_and_pandas_writer(tmp_path, fast):
    pd = pytest.importorskip("pandas")
    df = pd.DataFrame({"global_step": np.arange(0, 300, 3), "train/loss": np.linspace(5, 2, 100),
                       "eval/loss": [np.nan if i % 10 else 3.0 for i in range(100)]})
    p = tmp_path / "m.tsv"
    df.to_csv(p, sep="\t", index=False)  # pandas writes NaN as an empty cell: missing, not a NaN point
    log = csv_reader.read(p, fast=fast)
    assert len(log.series[LOSS]) == 100
    assert len(log.series[VAL_LOSS]) == 10
    np.testing.assert_array_equal(log.series[VAL_LOSS].steps, np.arange(0, 300, 30))
    assert not np.isnan(log.series[VAL_LOSS].values).any()


@FAST
def test_empty_is_missing_nan_and_inf_are_kept(tmp_path, fast):
    p = tmp_path / "m.csv"
    p.write_text("step,loss,grad_norm\n1,2.0,\n2,nan,0.5\n3,inf,\n4,-Infinity,1.0\n5,NaN,\n")
    log = csv_reader.read(p, fast=fast)
    loss = log.series[LOSS].values
    assert math.isnan(loss[1]) and loss[2] == math.inf and loss[3] == -math.inf and math.isnan(loss[4])
    np.testing.assert_array_equal(log.series[GRAD_NORM].steps, [2, 4])
    s = stitch(log).summary()["metrics"][LOSS]
    assert (s["nan"], s["inf"], s["first_nonfinite_step"]) == (2, 2, 2)


@FAST
def test_segment_column_numbers_launches(tmp_path, fast):
    rows = [[s, 3.0, "first launch"] for s in range(1, 11)] + [[s, 2.0, "relaunch"] for s in range(6, 16)]
    p = write_rows(tmp_path / "m.csv", ["step", "loss", "segment"], rows)
    log = stitch(csv_reader.read(p, fast=fast))
    assert [g.kind for g in log.segments] == ["start", "rollback"]
    assert log.segments[1].superseded == 5  # steps 6..10 of the first launch
    steps, values = log.live(LOSS)
    np.testing.assert_array_equal(steps, np.arange(1, 16))
    assert values[:5].tolist() == [3.0] * 5 and values[5:].tolist() == [2.0] * 10
    assert "segment" not in log.series


@FAST
def test_text_columns_that_are_not_metrics_are_ignored(tmp_path, fast):
    rows = [[i, 2.0, f"2024-01-0{i}", "node-a"] for i in range(1, 6)]
    p = write_rows(tmp_path / "m.csv", ["step", "loss", "date", "host"], rows)
    log = csv_reader.read(p, fast=fast)
    assert set(log.series) == {LOSS}
    assert log.metadata["ignored_columns"] == ["date", "host"]


@FAST
@pytest.mark.parametrize("body, where, what", [
    ("step,loss\n1,2.0\n2,abc\n3,1.0\n", "line 3", "non-numeric value 'abc'"),
    ("step,loss\n1,2.0\n2,2.1\n2,2.2\n", "line 4", "duplicate step 2"),
    ("step,loss\n1,2.0\n5,2.1\n3,2.2\n", "line 4", "steps go backwards"),
    ("step,loss\n1,2.0\n2,2.1,7\n", "line 3", "3 fields where the header has 2"),
    ("step,loss\n1,2.0\n2.5,2.1\n", "line 3", "not an integer"),
    ("step,loss\n1,2.0\n,2.1\n", "line 3", "no 'step'"),
    ("step,loss\n1,2.0\nx,2.1\n", "line 3", "non-numeric step 'x'"),
    ("step,mystery\n1,2.0\n2,oops\n", "line 3", "non-numeric value 'oops'"),
    ("loss,lr\n2.0,0.1\n", "line 1", "no step column"),
])
def test_bad_input_names_the_line(tmp_path, fast, body, where, what):
    p = tmp_path / "bad.csv"
    p.write_text(body)
    with pytest.raises(LogFormatError) as e:
        csv_reader.read(p, fast=fast)
    assert e.value.where == where and what in e.value.what and e.value.path == str(p) and e.value.fix


def test_blank_lines_keep_line_numbers(tmp_path):
    p = tmp_path / "m.csv"
    p.write_text("step,loss\n1,2.0\n\n2,2.1\n\n2,2.2\n")
    with pytest.raises(LogFormatError) as e:
        csv_reader.read(p)
    assert e.value.where == "line 6"


@pytest.mark.parametrize("body", [b"", b"   \n", b"step,loss\n", b"\xff\xfe\x00garbage"])
def test_empty_or_binary_files(tmp_path, body):
    p = tmp_path / "x.csv"
    p.write_bytes(body)
    with pytest.raises(LogFormatError):
        csv_reader.read(p)


@pytest.mark.parametrize("chunk", [1 << 20, 100], ids=["one-chunk", "many-chunks"])
def test_paths_agree_on_a_random_log(tmp_path, monkeypatch, chunk):
    monkeypatch.setattr("lossguard.io._chunks.CHUNK_BYTES", chunk)  # the fast path parses in chunks
    rng = np.random.default_rng(7)
    n = 2000
    vals = rng.lognormal(size=(n, 3))
    vals[rng.random((n, 3)) < 0.1] = np.nan  # written as empty cells below
    rows = [[i] + ["" if np.isnan(v) else repr(float(v)) for v in r] for i, r in enumerate(vals)]
    rows = [r + [f"launch {1 + (i >= n // 2)}"] for i, r in enumerate(rows)]  # a text column across chunks
    rows[n // 2:] = [[i - 100] + r[1:] for i, r in zip(range(n // 2, n), rows[n // 2:])]  # relaunch at -100
    p = write_rows(tmp_path / "m.csv", ["step", "loss", "grad_norm", "lr", "segment"], rows)
    a, b = csv_reader.read(p, fast=True), csv_reader.read(p, fast=False)
    assert len(a.segments) == len(b.segments) == 2
    for name in (LOSS, GRAD_NORM, LR):
        np.testing.assert_array_equal(a.series[name].steps, b.series[name].steps)
        np.testing.assert_array_equal(a.series[name].values, b.series[name].values)
        col = vals[:, [LOSS, GRAD_NORM, LR].index(name)]
        np.testing.assert_array_equal(a.series[name].values, col[~np.isnan(col)])


def test_sniff(tmp_path):
    p = tmp_path / "log.txt"
    assert csv_reader.sniff(p, b"step,loss\n1,2\n")
    assert csv_reader.sniff(p, b"iteration\tlm loss\n1\t2\n")
    assert not csv_reader.sniff(p, b'{"step": 1}\n')
    assert not csv_reader.sniff(p, b"hello world\n")
    assert not csv_reader.sniff(p, b"a,b\n1,2\n")  # no step column and not named .csv
    assert csv_reader.sniff(tmp_path / "x.csv", b"a,b\n1,2\n")  # a .csv without a step column: read and explained
