"""Every format watch follows gives the points and incidents ``analyze`` reads from the finished files.

In-process: the writer writes part of the log, the watch polls, the writer writes the rest (cut in
the middle of a line or record), the watch polls and finishes. Covers what the live tests do not:
tensorboardX ``add_scalars`` stream directories, Lightning's rewritten ``metrics.csv``, DeepSpeed
engine and overflow lines, JSONL guard events with a rollback, TSV with Megatron-style aliases.
"""
from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest

from lossguard.analysis import analyze
from lossguard.io import read_log
from lossguard.watch.session import RunWatch


def loss(rnd: random.Random, s: int, spike: int | None = None) -> float:
    v = 2.0 + 3.0 / math.sqrt(s) + rnd.gauss(0, 0.01)
    return v * 3 if spike is not None and spike <= s < spike + 3 else v


def same_as_analyze(path: Path, watch: RunWatch) -> None:
    watch.step()
    watch.finish()
    log = read_log(path)
    want = sorted((i.kind.value, i.metric, i.onset) for i in analyze(log).incidents)
    assert sorted((i.kind.value, i.metric, i.onset) for i in watch.engine.incidents()) == want
    assert watch.engine.history.total_points == sum(len(s) for s in log.series.values())
    assert set(watch.engine.history.metrics) == set(log.series)


def grow(path: Path, text: str, cut: int, watch: RunWatch) -> None:
    """Write ``text`` in two parts split at byte ``cut``, polling in between."""
    with open(path, "a") as f:
        f.write(text[:cut])
        f.flush()
        watch.step()
        f.write(text[cut:])


def test_hf_trainer_state_in_every_checkpoint(tmp_path):
    rnd = random.Random(2)
    history = [{"step": s, "loss": round(loss(rnd, s, 500), 5), "learning_rate": 1e-3, "epoch": s / 800}
               for s in range(1, 801)]
    watch = None
    for ck in range(100, 801, 100):  # every checkpoint repeats the whole history so far
        d = tmp_path / f"checkpoint-{ck}"
        d.mkdir()
        (d / "trainer_state.json").write_text(json.dumps({"global_step": ck, "log_history": history[:ck]}, indent=2))
        watch = watch or RunWatch("run", [str(tmp_path)])
        watch.step()
    same_as_analyze(tmp_path, watch)


@pytest.mark.parametrize("kind", ["deepspeed", "jsonl_guard", "csv_segments", "tsv", "lightning", "grammar_colours",
                                  "grammar_records"])
def test_text_formats(tmp_path, kind):
    rnd = random.Random(0)
    if kind == "deepspeed":
        path, lines = tmp_path / "stdout.log", []
        for s in range(1, 701):
            lines.append(f"[Rank 0] step={s}, skipped={int(s > 400)}, lr=[0.0001], mom=[(0.9, 0.95)]\n")
            if s == 400:
                lines.append("[deepspeed] OVERFLOW! Rank 0 Skipping step. "
                             "Attempted loss scale: 65536, reducing to 32768\n")
            lines.append(f" iteration {s:8d}/  100000 | lm loss: {loss(rnd, s, 200):.6E} | loss scale: 65536.0 |\n")
    elif kind == "jsonl_guard":
        path = tmp_path / "guard.jsonl"
        lines = [json.dumps({"step": s, "loss": loss(rnd, s, 350), "lr": 1e-3}) + "\n" for s in range(1, 701)]
        lines.insert(352, json.dumps({"step": 351, "event": "skip", "reason": "spike"}) + "\n")
        lines.append(json.dumps({"event": "rollback", "step": 700, "to_step": 600}) + "\n")
        lines += [json.dumps({"step": s, "loss": loss(rnd, s), "lr": 1e-3}) + "\n" for s in range(601, 901)]
    elif kind == "csv_segments":  # a resumed run appended to one file, launches numbered in a column
        path = tmp_path / "log.csv"
        lines = ["step,loss,segment\n"] + [f"{s},{loss(rnd, s, 250):.5f},0\n" for s in range(1, 601)]
        lines += [f"{s},{loss(rnd, s):.5f},1\n" for s in range(501, 901)]
    elif kind == "grammar_colours":  # torchtitan-style: colours between labels and numbers, a restart at 601
        path = tmp_path / "console.log"
        lines = ["starting up...\n"] + [f"[rank0]: \x1b[31mstep: {s:4d}  \x1b[32mloss: {loss(rnd, s, 300):7.4f}  "
                                         f"\x1b[33mgrad_norm: 1.0000\x1b[39m\n" for s in range(1, 701)]
        lines += [f"[rank0]: \x1b[31mstep: {s:4d}  \x1b[32mloss: {loss(rnd, s):7.4f}  "
                  f"\x1b[33mgrad_norm: 1.0000\x1b[39m\n" for s in range(601, 901)]
    elif kind == "grammar_records":  # OLMo-core-style record header then indented metric lines
        path = tmp_path / "olmo.log"
        lines = [f"[step={s}/900]\n    train/CE loss={loss(rnd, s, 450):.4f}\n    optim/total grad norm=1.0\n"
                 for s in range(1, 901)]
    elif kind == "tsv":
        path = tmp_path / "log.tsv"
        lines = ["iteration\tlm loss\tgrad_norm\n"] + [f"{s}\t{loss(rnd, s, 450):.5f}\t1.0\n" for s in range(1, 801)]
    else:  # Lightning's CSVLogger rewrites metrics.csv whole at every save
        path = tmp_path / "lightning_logs" / "version_0" / "metrics.csv"
        path.parent.mkdir(parents=True)
        rows = ["epoch,step,train_loss\n"] + [f"0,{s},{loss(rnd, s, 400):.5f}\n" for s in range(1, 801)]
        path.write_text("".join(rows[:300]))
        watch = RunWatch("run", [str(path.parent.parent)])
        watch.step()
        path.write_text("".join(rows))
        same_as_analyze(path.parent.parent, watch)
        return
    text = "".join(lines)
    # The first poll sees a third of the file (for the segment column: exactly the first launch, so
    # the next batch begins with the new label).
    split = len("".join(lines[:601])) if kind == "csv_segments" else len(text) // 3
    path.write_text(text[:split])
    watch = RunWatch("run", [str(path)])
    grow(path, text[split:], 5, watch)  # cut inside the next line
    same_as_analyze(path, watch)


def test_tensorboardx_add_scalars_streams(tmp_path):
    tbx = pytest.importorskip("tensorboardX")
    rnd = random.Random(1)
    w = tbx.SummaryWriter(str(tmp_path))
    watch = None
    for s in range(1, 801):
        w.add_scalar("loss", loss(rnd, s, 500), s)
        w.add_scalars("loss", {"web": loss(rnd, s), "code": loss(rnd, s, 300)}, s)
        if s == 400:
            w.flush()
            for sub in w.all_writers.values():
                sub.flush()
            watch = RunWatch("run", [str(tmp_path)])
            watch.step()
            assert {"loss", "loss/web", "loss/code"} <= set(watch.engine.history.metrics)
    w.close()
    same_as_analyze(tmp_path, watch)


def test_resumed_job_writes_a_new_event_file(tmp_path):
    """A job killed at step 600 and resumed from its step-500 checkpoint: a second event file in the
    same directory, found by the watch, stitched as a rollback as analyze stitches it."""
    tbx = pytest.importorskip("tensorboardX")
    rnd = random.Random(3)
    first = tbx.SummaryWriter(str(tmp_path), filename_suffix=".launch1")
    for s in range(1, 601):
        first.add_scalar("train/loss", loss(rnd, s, 300), s)
    first.close()
    watch = RunWatch("run", [str(tmp_path)])
    watch.step()
    resumed = tbx.SummaryWriter(str(tmp_path), filename_suffix=".launch2")
    for s in range(501, 1001):
        resumed.add_scalar("train/loss", loss(rnd, s, 800), s)
        if s == 700:
            resumed.flush()
            watch.step()
    resumed.close()
    same_as_analyze(tmp_path, watch)
    assert read_log(tmp_path).summary()["rollbacks"] == 1
    assert {i.onset for i in watch.engine.incidents()} >= {300, 800}


@pytest.mark.parametrize("pieces", [1, 97], ids=["backlog", "record-by-record"])
def test_event_file_with_a_restart_inside(tmp_path, pieces):
    """A process that restarted and appended to the same event file (steps go back inside it), read
    as a backlog in one piece (the vectorised path) or in 97 pieces cut anywhere (record by record)."""
    tbx = pytest.importorskip("tensorboardX")
    rnd = random.Random(4)
    parts = []
    for n, steps in enumerate((range(1, 3001), range(2500, 4001))):
        d = tmp_path / f"w{n}"
        w = tbx.SummaryWriter(str(d))
        for s in steps:
            w.add_scalar("train/loss", loss(rnd, s, 1000 if n == 0 else 3500), s)
            w.add_scalar("train/epoch", s // 1000, s)
        w.close()
        parts.append(next(d.glob("events.out.tfevents.*")).read_bytes())
    run = tmp_path / "run"
    run.mkdir()
    data = parts[0] + parts[1]
    event_file = run / "events.out.tfevents.1.host"
    cut = [len(data) * i // pieces for i in range(pieces + 1)]
    event_file.write_bytes(data[:cut[1]])
    watch = RunWatch("run", [str(run)])
    for a, b in zip(cut[1:-1], cut[2:], strict=True):
        watch.step()
        with open(event_file, "ab") as f:
            f.write(data[a:b])
    same_as_analyze(run, watch)
    assert read_log(run).summary()["rollbacks"] == 1


def test_grammar_keys_follow_what_analyze_reads_with_them(tmp_path):
    """``watch --step-key/--loss-key``: the same columns ``analyze`` reads with the same keys.

    The default choice here is ``loss`` (flat) numbered by ``step``; the user names ``aux_ce``
    (with a spike at 1-based record 401) and the per-line ``seq`` counter instead."""
    from lossguard.watch.text import GrammarKeys

    rnd = random.Random(5)
    lines = [f"seq {1000 + 2 * s} | step {s} | loss {2.0 + rnd.gauss(0, 0.005):.4f} | aux_ce {loss(rnd, s, 401):.4f}\n"
             for s in range(1, 801)]
    path = tmp_path / "train.log"
    text = "".join(lines)
    path.write_text(text[: len(text) // 3])
    keys = GrammarKeys(step_key="seq", loss_key="aux_ce")
    watch = RunWatch("run", [str(path)], keys=keys)
    grow(path, text[len(text) // 3:], 7, watch)
    watch.step()
    watch.finish()
    log = read_log(path, step_key="seq", loss_key="aux_ce")
    want = sorted((i.kind.value, i.metric, i.onset) for i in analyze(log).incidents)
    assert want and any(kind.startswith("spike") and onset == 1000 + 2 * 401 for kind, _, onset in want)
    assert sorted((i.kind.value, i.metric, i.onset) for i in watch.engine.incidents()) == want
    plain = RunWatch("plain", [str(path)])
    plain.step()
    plain.finish()
    assert not any(i.kind.value.startswith("spike") for i in plain.engine.incidents())


def test_watch_cli_takes_the_grammar_options(tmp_path):
    """``lossguard watch`` parses ``--step-key`` / ``--loss-key`` with analyze's own definitions."""
    import argparse

    from lossguard.cli import inputs, watch as watch_cli

    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers()
    watch_cli.register(sub)
    args = parser.parse_args(["watch", "x.log", "--step-key", "seq", "--loss-key", "aux_ce"])
    assert (args.step_key, args.loss_key) == ("seq", "aux_ce")
    mine = argparse.ArgumentParser()
    inputs.add_grammar_options(mine)
    helps = {a.dest: a.help for a in mine._actions}
    watch_parser = sub.choices["watch"]
    assert {a.dest: a.help for a in watch_parser._actions if a.dest in ("step_key", "loss_key")} == \
        {k: helps[k] for k in ("step_key", "loss_key")}
