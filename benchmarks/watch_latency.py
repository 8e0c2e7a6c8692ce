"""``lossguard watch``: alert latency, CPU cost while following, memory over a 1M-point run.

Part A (latency, CPU): a writer process appends a CSV log at ``--rate`` points a second, with a
3-point spike (3x the loss) every ``--spike-every`` steps, and records the wall time at which each
spike's first line was flushed. ``lossguard watch FILE --every 0.5 --json`` follows it in its own
process; each line it prints is time-stamped on arrival. Latency = arrival of the ``alert`` (and of
the decided ``incident``) for a spike's onset step minus the time its line was written. CPU = the
watch process's user+system time over the writer's steady state, as a share of one core. The
alternative measured in the same run is what the nearest peer does: re-read and re-analyse the
whole file on every change (``analyze(read_log(file))`` per poll), timed on the final file.

Part B (memory): a writer appends 1,000,000 points as fast as it can (blocks of 10,000 lines)
while watch follows; the watch process's RSS is sampled every 0.25 s against the lines written.

    .venv/bin/python benchmarks/watch_latency.py                # both parts (~90 s)
    .venv/bin/python benchmarks/watch_latency.py --part a --prefix 1000000   # cost after 1M points
"""
from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

WRITER = r"""
import json, math, random, sys, time
path, rate, seconds, every, first = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
rnd = random.Random(0)
spikes = {}
with open(path, "a") as f:
    t0 = time.time() - first / rate; n = first + int(rate * seconds)
    for s in range(first, n + 1):
        v = 2.0 + 3.0 / math.sqrt(s) + rnd.gauss(0, 0.01)
        on = s >= every and s % every < 3
        f.write(f"{s},{v * 3 if on else v:.5f},0.001\n"); f.flush()
        if on and s % every == 0:
            spikes[s] = time.time()
        time.sleep(max(0.0, t0 + s / rate - time.time()))
print(json.dumps(spikes))
"""

BULK = r"""
import math, random, sys, time
path, n = sys.argv[1], int(sys.argv[2])
rnd = random.Random(1)
with open(path, "w") as f:
    f.write("step,loss,grad_norm,lr\n")
    for a in range(1, n + 1, 10000):
        f.write("".join(f"{s},{2.0 + 3.0 / math.sqrt(s) + rnd.gauss(0, 0.01):.5f},{1 + rnd.random() * 0.1:.4f},0.001\n"
                        for s in range(a, min(n, a + 9999) + 1)))
        f.flush()
        print(min(n, a + 9999), flush=True)
        time.sleep(0.02)
"""


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _watch(path: Path, every: float, extra: list[str]) -> tuple[subprocess.Popen, list[tuple[float, dict]]]:
    proc = subprocess.Popen([sys.executable, "-m", "lossguard", "watch", str(path), "--every", str(every), "--json",
                             *extra], stdout=subprocess.PIPE, text=True)
    lines: list[tuple[float, dict]] = []

    def read() -> None:
        for line in proc.stdout:
            lines.append((time.time(), json.loads(line)))

    threading.Thread(target=read, daemon=True).start()
    return proc, lines


def _settle(pid: int) -> None:
    """Wait until the process uses under 5% of a core over a second (imports, catch-up done)."""
    while True:
        c = _cpu_seconds(pid)
        time.sleep(1.0)
        if _cpu_seconds(pid) - c < 0.05:
            return


def part_a(work: Path, rate: float, seconds: float, every: float, spike_every: int, prefix: int) -> None:
    path = work / "live.csv"
    rnd = random.Random(2)
    with open(path, "w") as f:  # an existing history: the cost per new point must not depend on it
        f.write("step,loss,lr\n")
        f.writelines(f"{s},{2.0 + 3.0 / s ** 0.5 + rnd.gauss(0, 0.01):.5f},0.001\n" for s in range(1, prefix + 1))
    proc, lines = _watch(path, every, [])
    _settle(proc.pid)  # interpreter start, imports and reading the existing history are not counted
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(path), str(rate), str(seconds), str(spike_every),
                               str(prefix + 1)], stdout=subprocess.PIPE, text=True)
    time.sleep(2.0)
    c0, t0 = _cpu_seconds(proc.pid), time.time()
    out, _ = writer.communicate()
    c1, t1 = _cpu_seconds(proc.pid), time.time()
    time.sleep(2.0)
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=60)
    spikes = {int(k): v for k, v in json.loads(out).items()}
    alert, decided = [], []
    for step, written in spikes.items():
        a = [t for t, e in lines if e["event"] == "alert" and e["step"] == step]
        d = [t for t, e in lines if e["event"] == "incident" and e["incident"]["onset"] == step]
        if a:
            alert.append(a[0] - written)
        if d:
            decided.append(d[0] - written)
    cpu = (c1 - c0) / (t1 - t0)
    from lossguard.analysis import analyze
    from lossguard.io import read_log
    analyze(read_log(path))  # warm: imports and first paging-in are not the per-poll cost
    t = time.perf_counter()
    ref = analyze(read_log(path))
    peer = time.perf_counter() - t
    summary = next(e for _, e in lines if e["event"] == "summary")["data"]["runs"][0]
    same = sorted((f["kind"], f["onset"]) for f in summary["found"]) == sorted((i.kind.value, i.onset)
                                                                              for i in ref.incidents)
    n = int(rate * seconds)
    print(f"A. {prefix} points already in the file, then {n} at {rate:g}/s, --every {every}; {len(spikes)} spikes; "
          f"alerts for {len(alert)}, incidents decided for {len(decided)}; at the end the same incidents as "
          f"analyze on the finished file: {'yes' if same else 'NO'} ({len(ref.incidents)})")
    for name, xs in (("alert", alert), ("decided incident", decided)):
        if xs:
            print(f"   latency to {name}: median {statistics.median(xs):.3f} s, max {max(xs):.3f} s, "
                  f"min {min(xs):.3f} s")
    print(f"   watch CPU while following: {cpu * 100:.2f}% of one core ({c1 - c0:.2f} s CPU over {t1 - t0:.1f} s)")
    print(f"   alternative, re-read + re-analyse the whole file per poll: {peer * 1000:.0f} ms at {prefix + n} points = "
          f"{peer / every * 100:.1f}% of one core at --every {every} (grows with the log)")


def part_b(work: Path, n: int) -> None:
    path = work / "big.csv"
    path.write_text("step,loss,grad_norm,lr\n")
    proc, lines = _watch(path, 0.5, ["--until-idle", "3"])
    time.sleep(3.0)
    writer = subprocess.Popen([sys.executable, "-c", BULK, str(path), str(n)], stdout=subprocess.PIPE, text=True)
    written = [0]

    def progress() -> None:
        for line in writer.stdout:
            written[0] = int(line)

    threading.Thread(target=progress, daemon=True).start()
    samples = []
    t0 = time.time()
    while proc.poll() is None:
        try:
            samples.append((written[0], _rss_mb(proc.pid)))
        except OSError:
            break
        time.sleep(0.25)
    summary = next(e for _, e in lines if e["event"] == "summary")["data"]["runs"][0]
    print(f"B. {n} points (loss, grad_norm, lr) written in blocks of 10,000; watch read {summary['points']} points "
          f"to step {summary['last_step']} in {time.time() - t0:.0f} s (incl. 3 s idle)")
    marks = [n // 10, n // 4, n // 2, 3 * n // 4, n]
    row = []
    for m in marks:
        at = [r for w, r in samples if w >= m]
        row.append(f"{m:,}: {at[0]:.0f} MB" if at else f"{m:,}: -")
    print("   watch RSS when the writer had written " + "; ".join(row))
    print(f"   RSS peak {max(r for _, r in samples):.0f} MB, first sample {samples[0][1]:.0f} MB")
    from lossguard.analysis import analyze
    from lossguard.io import read_log
    t = time.perf_counter()
    analyze(read_log(path))
    print(f"   alternative, re-read + re-analyse the whole file per poll: {time.perf_counter() - t:.2f} s at {n:,} "
          "points, once per poll")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--part", choices=("a", "b", "both"), default="both")
    ap.add_argument("--rate", type=float, default=100.0, help="points a second (part A)")
    ap.add_argument("--seconds", type=float, default=40.0, help="how long the part A writer runs")
    ap.add_argument("--every", type=float, default=0.5, help="watch --every (part A)")
    ap.add_argument("--spike-every", type=int, default=237,
                    help="steps between spikes (part A; not a multiple of the poll period, so spikes land at "
                         "every phase of it)")
    ap.add_argument("--prefix", type=int, default=0, help="points already in the file when watch starts (part A)")
    ap.add_argument("--points", type=int, default=1_000_000, help="points written in part B")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        if args.part in ("a", "both"):
            part_a(Path(d), args.rate, args.seconds, args.every, args.spike_every, args.prefix)
        if args.part in ("b", "both"):
            part_b(Path(d), args.points)


if __name__ == "__main__":
    main()
