"""Readers stream: memory follows the columns kept, and late errors are found on the fast path.

Memory is measured as a real process sees it: each big read runs in a fresh interpreter and reports
its peak RSS growth over the RSS after imports (``VmHWM``), which counts pyarrow's allocator.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from lossguard.errors import LogFormatError
from lossguard.io import _chunks, read_log
from lossguard.io import csv as csv_reader
from lossguard.io import jsonl

pytest.importorskip("pyarrow")

_PEAK = r"""
import json, resource, sys
from lossguard.io import read_log
import pyarrow.csv, pyarrow.json  # the readers import these lazily: count them as imports, not as the read
def rss(key='VmRSS:'):
    return next(int(l.split()[1]) for l in open('/proc/self/status') if l.startswith(key))
base = rss()
log = read_log(sys.argv[1])
peak = rss('VmHWM:')  # this image's peak; ru_maxrss may carry the forking parent's
print(json.dumps({'grow_mb': (peak - base) / 1024, 'metrics': sorted(log.series),
                  'warnings': log.metadata.get('warnings', [])}))
"""


def _peak(path: Path) -> dict:
    done = subprocess.run([sys.executable, "-c", _PEAK, str(path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_one_10mb_string_field_does_not_widen_every_row(tmp_path):
    p = tmp_path / "wide.jsonl"
    with open(p, "w") as f:
        for i in range(200):
            f.write(json.dumps({"step": i, "loss": 2.0, **({"note": "x" * 10_000_000} if i == 100 else {})}) + "\n")
    size_mb = p.stat().st_size / 1e6
    out = _peak(p)
    assert out["metrics"] == ["loss"]
    assert out["grow_mb"] < 2 * size_mb + 64, out  # was 16 GB: every row as wide as the widest cell


def test_a_record_with_200k_keys_is_capped_with_a_warning(tmp_path):
    p = tmp_path / "keys.jsonl"
    with open(p, "w") as f:
        for i in range(100):
            rec = {"step": i, "loss": 2.0}
            if i == 50:
                rec.update({f"k{j}": float(j) for j in range(200_000)})
            f.write(json.dumps(rec) + "\n")
    out = _peak(p)
    assert "loss" in out["metrics"] and 9_000 < len(out["metrics"]) <= 10_000  # the kept keys are metrics
    assert any("distinct keys" in w and "dropped" in w for w in out["warnings"])


def _csv(path: Path, rows: int, last: str | None = None, blank_at: int | None = None) -> None:
    lines = ["step,loss,lr\n"]
    lines += [f"{i},{2.0 + (i % 13) * 0.01},{1e-4}\n" for i in range(rows)]
    if last is not None:
        lines[-1] = last
    if blank_at is not None:
        lines.insert(blank_at, "\n")
    path.write_text("".join(lines))


@pytest.fixture
def small_chunks(monkeypatch):
    """Chunks of 4 KiB so that a small file spans many (the same code as 4 MB chunks of a big one)."""
    monkeypatch.setattr(_chunks, "CHUNK_BYTES", 4096)


@pytest.fixture
def no_exact_path(monkeypatch):
    """Fail the test if the whole file is re-read on the exact path."""
    def boom(*a, **k):
        raise AssertionError("the exact path re-read the whole file")
    monkeypatch.setattr(csv_reader, "read_bytes", boom)
    monkeypatch.setattr(jsonl, "read_bytes", boom)


def test_bad_cell_in_the_last_row_is_named_on_the_fast_path(tmp_path, small_chunks, no_exact_path):
    p = tmp_path / "bad.csv"
    _csv(p, 5000, last="4999,2.0x,0.0001\n")
    with pytest.raises(LogFormatError, match="non-numeric value '2.0x'") as err:
        read_log(p)
    assert err.value.where == "line 5001"


def test_ragged_row_late_in_the_file_is_named_on_the_fast_path(tmp_path, small_chunks, no_exact_path):
    p = tmp_path / "ragged.csv"
    _csv(p, 5000, last="4999,2.0\n")
    with pytest.raises(LogFormatError, match="2 fields where the header has 3") as err:
        read_log(p)
    assert err.value.where == "line 5001"


def test_with_blank_lines_the_exact_path_still_names_the_right_line(tmp_path, small_chunks):
    p = tmp_path / "blank.csv"
    _csv(p, 3000, last="2999,oops,0.0001\n", blank_at=1500)
    with pytest.raises(LogFormatError, match="'oops'") as err:
        read_log(p)
    assert err.value.where == "line 3002"


def test_bad_json_line_late_in_the_file_is_named_from_its_chunk(tmp_path, small_chunks, no_exact_path):
    p = tmp_path / "bad.jsonl"
    rows = [json.dumps({"step": i, "loss": 2.0}) + "\n" for i in range(3000)]
    rows[2500] = '{"step": 2500, "loss": 2.0,,}\n'
    p.write_text("".join(rows))
    with pytest.raises(LogFormatError, match="not valid JSON") as err:
        read_log(p)
    assert err.value.where == "line 2501"


def test_text_in_a_metric_column_late_in_jsonl(tmp_path, small_chunks, no_exact_path):
    p = tmp_path / "text.jsonl"
    rows = [json.dumps({"step": i, "loss": 2.0}) + "\n" for i in range(3000)]
    rows[2800] = json.dumps({"step": 2800, "loss": "diverged"}) + "\n"
    p.write_text("".join(rows))
    with pytest.raises(LogFormatError, match="'diverged'") as err:
        read_log(p)
    assert err.value.where == "line 2801"


def test_many_chunks_read_the_same_as_one(tmp_path, monkeypatch):
    p = tmp_path / "ok.csv"
    _csv(p, 4000)
    whole = read_log(p)
    monkeypatch.setattr(_chunks, "CHUNK_BYTES", 1024)
    chunked = read_log(p)
    assert (chunked.series["loss"].values == whole.series["loss"].values).all()
    assert chunked.series["loss"].steps.tolist() == list(range(4000))


def test_label_column_that_starts_numeric_in_early_chunks_is_still_a_label(tmp_path, small_chunks):
    # numbers in early chunks, text later: a broken metric for a known metric, ignored for labels
    p = tmp_path / "label.csv"
    rows = ["step,loss,tag\n"] + [f"{i},2.0,{i}\n" for i in range(2000)] + ["2000,2.0,final\n"]
    p.write_text("".join(rows))
    with pytest.raises(LogFormatError, match="non-numeric value 'final' in metric column 'tag'") as err:
        read_log(p)
    assert err.value.where == "line 2002"


def test_rare_keys_are_stored_sparse_and_read_as_the_exact_path_does(tmp_path, small_chunks):
    p = tmp_path / "rare.jsonl"
    rows = []
    for i in range(3000):
        rec = {"step": i, "loss": 2.0 + i * 1e-4}
        if i % 100 == 0:
            rec["eval_loss"] = 1.0 + i * 1e-4
        if i == 2500:
            rec["note"] = "checkpoint saved"
        rows.append(json.dumps(rec) + "\n")
    p.write_text("".join(rows))
    fast, exact = jsonl.read(p), jsonl.read(p, fast=False)
    for log in (fast, exact):
        assert log.series["val_loss"].steps.tolist() == list(range(0, 3000, 100))
        assert log.series["val_loss"].values[-1] == pytest.approx(1.29)
        assert log.metadata["ignored_columns"] == ["note"]
    assert (fast.series["loss"].values == exact.series["loss"].values).all()
