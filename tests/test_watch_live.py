"""``lossguard watch`` as a user runs it: a real process following files that real writers append to.

Each test starts ``python -m lossguard watch`` in a subprocess, lets a writer (a thread, or a
process for TensorBoard so it can be SIGKILLed) append a log line by line (half lines included),
and checks what watch printed against ``analyze`` on the finished file.
"""
from __future__ import annotations

import json
import math
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path


from lossguard.analysis import analyze
from lossguard.io import read_log

EVERY = "0.1"
IDLE = "0.8"  # seconds without growth that end a test's watch (writers pause at most 0.02 s)


def watch(*args: str, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "lossguard", "watch", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kw)


def started(proc: subprocess.Popen) -> list[str]:
    """Block until watch says it follows a file (it has read what the file held); its lines so far."""
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if '"following ' in line:
            return seen
    raise AssertionError(f"watch ended before following anything: {proc.stderr.read()}")


def finish(proc: subprocess.Popen, seen: list[str] = (), timeout: float = 60) -> tuple[int, list[dict], str]:
    out, err = proc.communicate(timeout=timeout)
    assert "Traceback" not in err, err
    lines = [*seen, *out.splitlines()]
    return proc.returncode, [json.loads(line) for line in lines if line.startswith("{")], err


def found(events: list[dict]) -> list[tuple]:
    summary = [e for e in events if e["event"] == "summary"][-1]
    return sorted((f["kind"], f["metric"], f["onset"]) for r in summary["data"]["runs"] for f in r["found"])


def onsets(events: list[dict]) -> set[int]:
    return {f[2] for f in found(events)}


def analysed(*paths) -> list[tuple]:
    return sorted((i.kind.value, i.metric, i.onset) for i in analyze(read_log(list(map(str, paths)))).incidents)


def loss_at(s: int, rnd: random.Random, spike: int | None = None) -> float:
    v = 2.0 + 3.0 / math.sqrt(s) + rnd.gauss(0, 0.01)
    return v * 3 if spike is not None and spike <= s < spike + 3 else v


def wait_for(cond, timeout: float = 20.0) -> None:
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.02)


def write_lines(path: Path, lines: list[str], *, every: int = 20, pause: float = 0.02, mode: str = "w") -> None:
    """Append lines as a training loop does: flushed in small bursts, the last line of a burst in two halves."""
    with open(path, mode) as f:
        for n, line in enumerate(lines, 1):
            if n % every == 0:
                f.write(line[:3])
                f.flush()
                time.sleep(pause)  # watch polls while the line is half written
                f.write(line[3:])
            else:
                f.write(line)
            f.flush()


def test_csv_live_half_lines_and_fail_on(tmp_path):
    path = tmp_path / "train.csv"
    rnd = random.Random(0)
    lines = ["step,loss,lr\n"] + [f"{s},{loss_at(s, rnd, 500):.5f},0.001\n" for s in range(1, 901)]
    write_lines(path, lines[:2])
    proc = watch(str(path), "--every", EVERY, "--until-idle", IDLE, "--json", "--fail-on", "any")
    seen = started(proc)
    write_lines(path, lines[2:], mode="a")
    rc, events, _ = finish(proc, seen)
    assert rc == 1  # the spike was found and --fail-on any names it
    assert found(events) == analysed(path) and 500 in onsets(events)
    kinds = [e["event"] for e in events]
    assert kinds.index("alert") < kinds.index("incident") < kinds.index("stalled") < kinds.index("summary")
    inc = next(e for e in events if e["event"] == "incident")
    assert inc["incident"]["evidence"] and inc["plan"] is not None


def test_jsonl_live_with_a_rollback_event(tmp_path):
    path = tmp_path / "run.jsonl"
    rnd = random.Random(1)
    recs = [{"step": s, "loss": loss_at(s, rnd, 400), "grad_norm": 1.0 + rnd.random() * 0.1} for s in range(1, 701)]
    recs.append({"event": "rollback", "step": 600, "to_step": 550})
    recs += [{"step": s, "loss": loss_at(s, rnd), "grad_norm": 1.0} for s in range(551, 1001)]
    lines = [json.dumps(r) + "\n" for r in recs]
    write_lines(path, lines[:30])
    proc = watch(str(path), "--every", EVERY, "--until-idle", IDLE, "--json")
    seen = started(proc)
    write_lines(path, lines[30:], mode="a")
    rc, events, _ = finish(proc, seen)
    assert rc == 0
    assert found(events) == analysed(path)
    assert read_log(path).summary()["rollbacks"] == 1


def test_megatron_stdout_with_a_restart(tmp_path):
    path = tmp_path / "stdout.log"
    rnd = random.Random(2)

    def it(s: int, spike=None) -> str:
        return (f" iteration {s:8d}/  100000 | consumed samples: {s * 8:10d} | elapsed time per iteration (ms): 512.3 | "
                f"learning rate: 3.000E-04 | lm loss: {loss_at(s, rnd, spike):.6E} | grad norm: 1.234 | "
                "number of skipped iterations:   0 |\n")
    lines = ["using world size: 8, data-parallel size: 8\n", "training ...\n"]
    lines += [it(s, 300) for s in range(1, 601)]
    lines += ["[after crash] restarting\n", "using world size: 8, data-parallel size: 8\n", "training ...\n"]
    lines += [it(s) for s in range(501, 901)]
    write_lines(path, lines[:5])
    proc = watch(str(path), "--every", EVERY, "--until-idle", IDLE, "--json")
    seen = started(proc)
    write_lines(path, lines[5:], mode="a")
    rc, events, _ = finish(proc, seen)
    assert rc == 0
    assert found(events) == analysed(path) and 300 in onsets(events)
    assert read_log(path).summary()["rollbacks"] == 1


TB_WRITER = r"""
import math, random, sys, time
import torch
torch.set_num_threads(1)
from torch.utils.tensorboard import SummaryWriter
w = SummaryWriter(sys.argv[1], flush_secs=1)
rnd = random.Random(3)
for s in range(1, 100000):
    v = 2.0 + 3.0 / math.sqrt(s) + rnd.gauss(0, 0.01)
    w.add_scalar("train/loss", v * 3 if 400 <= s < 403 else v, s)
    if s % 25 == 0:
        w.flush()
        print(s, flush=True)
    time.sleep(0.001)
"""


def test_tensorboard_writer_killed_mid_run(tmp_path):
    logdir = tmp_path / "tb"
    writer = subprocess.Popen([sys.executable, "-c", TB_WRITER, str(logdir)], stdout=subprocess.PIPE, text=True)
    try:
        assert writer.stdout.readline()  # the event file exists and holds records
        proc = watch(str(logdir), "--every", EVERY, "--until-idle", IDLE, "--json")
        seen = started(proc)
        while int(writer.stdout.readline()) < 700:
            pass
    finally:
        writer.send_signal(signal.SIGKILL)
        writer.wait()
    # What a kill inside a write leaves: the head of one more record (here a copy of the last one).
    event_file = next(logdir.glob("events.out.tfevents.*"))
    good, pos, last = event_file.read_bytes(), 0, b""
    while pos < len(good):
        end = pos + 16 + int.from_bytes(good[pos:pos + 8], "little")
        pos, last = end, good[pos:end]
    with open(event_file, "ab") as f:
        f.write(last[:-5])
    rc, events, _ = finish(proc, seen)
    assert rc == 0
    assert found(events) == analysed(logdir) and 400 in onsets(events)
    assert any(e["event"] == "notice" and "ends inside a record" in e["message"] for e in events)


def test_rotated_and_truncated_files(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    log = run / "train.log"
    rnd = random.Random(4)
    rows = [f"{s},{loss_at(s, rnd, 700):.5f}\n" for s in range(1, 1001)]
    write_lines(log, ["step,loss\n"] + rows[:500])
    proc = watch(str(run), "--every", EVERY, "--until-idle", IDLE, "--json")
    seen = started(proc)
    os.rename(log, run / "train.log.1")  # logrotate: rename, the writer reopens the path
    write_lines(log, ["step,loss\n"] + rows[500:])
    rc, events, _ = finish(proc, seen)
    assert rc == 0
    assert found(events) == analysed(run)  # the renamed file is not read twice
    assert any("replaced" in e["message"] for e in events if e["event"] == "notice")
    summary = [e for e in events if e["event"] == "summary"][-1]["data"]["runs"][0]
    assert summary["points"] == 1000 and summary["last_step"] == 1000

    # copytruncate: the same file emptied and written again from the start
    trunc = tmp_path / "t.csv"
    write_lines(trunc, ["step,loss\n"] + rows[:300])
    proc = watch(str(trunc), "--every", EVERY, "--until-idle", IDLE, "--json")
    seen = started(proc)
    write_lines(trunc, ["step,loss\n"] + rows[:100], mode="w")
    rc, events, _ = finish(proc, seen)
    assert rc == 0 and any("shrank" in e["message"] for e in events if e["event"] == "notice")
    assert [e for e in events if e["event"] == "summary"][-1]["data"]["runs"][0]["points"] == 400


def test_failing_hooks_are_retried_and_never_stop_the_watcher(tmp_path):
    from http.server import BaseHTTPRequestHandler, HTTPServer

    got: list[dict] = []
    codes = [500]  # the first POST fails, the retry succeeds

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 - http.server's name
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            code = codes.pop(0) if codes else 200
            if code == 200:
                got.append(body)
            self.send_response(code)
            self.end_headers()

        def log_message(self, *a):
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    path = tmp_path / "train.csv"
    rnd = random.Random(5)
    write_lines(path, ["step,loss\n"] + [f"{s},{loss_at(s, rnd, 300):.5f}\n" for s in range(1, 601)])
    try:
        proc = watch(str(path), "--every", EVERY, "--until-idle", "0.5", "--hook-attempts", "2",
                     "--on-incident", f"cat >> {tmp_path / 'stdin.jsonl'}; echo >> {tmp_path / 'stdin.jsonl'}; exit 1",
                     "--webhook", f"http://127.0.0.1:{server.server_port}/hook")
        rc, _, err = finish(proc)
    finally:
        server.shutdown()
    assert rc == 0
    assert "--on-incident failed" in err and "exit 1" in err and "retrying in 0.5 s" in err and "giving up" in err
    assert "--webhook failed" in err and "HTTP 500" in err
    received = [json.loads(x) for x in (tmp_path / "stdin.jsonl").read_text().splitlines() if x]
    incident = next(r for r in received if r["event"] == "incident")  # the command got the incident on stdin
    assert incident["incident"]["onset"] == 300 and incident["incident"]["evidence"]
    assert len([r for r in received if r["event"] == "incident"]) == 2  # tried twice (--hook-attempts 2)
    posted = [g for g in got if g["event"] == "incident"]
    assert posted and posted[0]["text"].startswith("lossguard watch") and posted[0]["incident"]["onset"] == 300
    assert any(g["event"] == "stalled" for g in got)


def test_ctrl_c_prints_the_summary_and_exits_cleanly(tmp_path):
    path = tmp_path / "train.csv"
    write_lines(path, ["step,loss\n"] + [f"{s},{2 + 1 / s:.5f}\n" for s in range(1, 50)])
    # SIGINT back to its default in the child: a suite started as a background job (`cmd &` in a
    # script) passes SIGINT on *ignored*, and Python then installs no KeyboardInterrupt handler.
    proc = watch(str(path), "--every", EVERY, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    # SIGINT only once watch says it follows the file: on a loaded machine a fixed sleep sent it before
    # Python had started, and the child died of the signal instead of printing its summary.
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if "following " in line:
            break
    proc.send_signal(signal.SIGINT)
    rest, err = proc.communicate(timeout=20)
    out = "".join(seen) + rest
    assert proc.returncode == 0 and "Traceback" not in err
    assert "interrupted; 1 run(s), 0 incident(s)" in out and "49 points to step 49" in out


def test_bad_input_exits_2_with_one_message(tmp_path):
    done = subprocess.run([sys.executable, "-m", "lossguard", "watch", str(tmp_path / "nope.csv")],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 2 and "no such file or directory" in done.stderr and "Traceback" not in done.stderr
    done = subprocess.run([sys.executable, "-m", "lossguard", "watch", str(tmp_path), "--fail-on", "bogus"],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 2 and "unknown kind" in done.stderr


def test_sweep_prints_one_line_per_run(tmp_path):
    for name, spike in (("lr-1e-3", None), ("lr-3e-3", 250)):
        (tmp_path / name).mkdir()
        rnd = random.Random(6)
        write_lines(tmp_path / name / "log.csv", ["step,loss\n"] + [f"{s},{loss_at(s, rnd, spike):.5f}\n"
                                                                    for s in range(1, 501)])
    proc = watch(str(tmp_path), "--every", EVERY, "--until-idle", "0.5", "--json")
    rc, events, _ = finish(proc)
    assert rc == 0
    states = [e for e in events if e["event"] == "run_state"]
    last = {e["run"]: e for e in states}
    assert set(last) == {"lr-1e-3", "lr-3e-3"}
    assert last["lr-1e-3"]["data"]["incidents"] == 0
    assert [f["onset"] for f in last["lr-3e-3"]["data"]["found"]] == [250]
    assert all(e["event"] in ("run_state", "summary") for e in events)  # one line per run, nothing else
