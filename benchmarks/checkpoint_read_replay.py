"""The verified read's own cost, without DCP, torch.load or the allocator around it (issue 23).

A single-process ``ShardedCheckpointStore`` checkpoint (an MLP of 4 square Linear layers, weights +
2 Adam moments: width 1024 = 48 MiB in one shard file) is loaded once through the store with every
call DCP makes on the shard's stream recorded (seek, tell, readinto and read with their sizes).
That exact sequence is then replayed, into one preallocated buffer, on

- the raw file (what plain DCP does to it),
- the raw file plus a CRC of every large read (>= 64 KiB) in blocks of 256 KiB-2 MiB or in one
  call, no bookkeeping: the floor any read-time check pays here,
- :class:`lossguard.checkpoint.crc_ranges.TrackingReader` with the load plan's items, then
  ``verify`` (what the store does), and without a plan (the whole file one span),
- with ``--base-src DIR``: the ``TrackingReader`` + ``verify_reads`` of another checkout's
  ``src`` (e.g. main before session 8), for an A/B in the same process.

Reported: median CPU time per replay and the paired median of its extra over the raw file, all
variants in rotating order, garbage collector off while timing. Run::

    PYTHONPATH=src .venv/bin/python benchmarks/checkpoint_read_replay.py [--width 1024] [--repeat 200] [--base-src DIR]
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile
import warnings
from contextlib import contextmanager
from typing import Any

from sharded_bench import base_module, print_extra_table, time_rotating, trained_mlp


class _Recorder:
    """A stream wrapper that logs every call DCP and torch.load make on it."""

    def __init__(self, inner: Any, ops: list) -> None:
        self.inner, self.ops = inner, ops

    def seek(self, *a):
        self.ops.append(("seek", a))
        return self.inner.seek(*a)

    def tell(self):
        self.ops.append(("tell", ()))
        return self.inner.tell()

    def readinto(self, b):
        self.ops.append(("readinto", len(b)))
        return self.inner.readinto(b)

    def read(self, n=-1):
        self.ops.append(("read", n))
        return self.inner.read(n)

    def readline(self, n=-1):
        self.ops.append(("readline", n))
        return self.inner.readline(n)

    def readable(self):
        return True

    def seekable(self):
        return True

    def fileno(self):
        return self.inner.fileno()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--width", type=int, default=1024)
    ap.add_argument("--repeat", type=int, default=200)
    ap.add_argument("--base-src", default=None, help="another checkout's src: its TrackingReader too")
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    import zlib_ng.zlib_ng as zn

    from lossguard.checkpoint import ShardedCheckpointStore, ShardedTrainState, crc_ranges, dcp_io
    from lossguard.checkpoint.files import Checksum

    model, opt = trained_mlp(args.width)
    state = ShardedTrainState(model, opt, step=1)
    root = tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR"))
    store = ShardedCheckpointStore(root.name, keep_last=10)
    state.save(store)
    path = store.path_of(1)
    files = json.loads((path / "manifest.json").read_text())["files"]

    log: dict[str, list] = {}
    planned: dict[str, Any] = {}
    real = dcp_io.VerifyingFileSystem.create_stream

    @contextmanager
    def recording(self, p, mode):
        with real(self, p, mode) as stream:
            planned[os.path.basename(p)] = self.planned.get(os.path.basename(p))
            yield _Recorder(stream, log.setdefault(os.path.basename(p), []))

    dcp_io.VerifyingFileSystem.create_stream = recording
    state.restore(store, 1)
    dcp_io.VerifyingFileSystem.create_stream = real
    name = max(log, key=lambda n: len(log[n]))
    ops, entry, plan = log[name], files[name], planned[name]
    fpath = str(path / name)
    buf = memoryview(bytearray(max(a for op, a in ops if op == "readinto") + 16))

    def replay(stream, block=None):
        crc = 0
        for op, a in ops:
            if op == "readinto":
                if block is not None and a >= 1 << 16:
                    done, step = 0, block or a
                    while done < a:
                        n = stream.readinto(buf[done:min(done + step, a)])
                        crc = zn.crc32(buf[done:done + n], crc)
                        done += n
                else:
                    stream.readinto(buf[:a])
            elif op == "seek":
                stream.seek(*a)
            elif op == "tell":
                stream.tell()
            elif op == "read":
                stream.read(a)
            else:
                stream.readline(a)

    def raw(block=None):
        def run():
            with open(fpath, "rb") as fh:
                replay(fh, block)
        return run

    def tracking(with_plan: bool):
        def run():
            with open(fpath, "rb") as fh:
                reader = crc_ranges.TrackingReader(fh, Checksum, name, entry["marks"], plan if with_plan else None)
                replay(reader)
                reader.verify("crc32")
        return run

    variants = {"raw file (plain DCP)": raw(), "raw + CRC, one call per read": raw(0)}
    variants.update({f"raw + CRC, {k} KiB blocks": raw(k << 10) for k in (256, 512, 1024, 2048)})
    variants.update({"TrackingReader, load plan": tracking(True), "TrackingReader, no plan": tracking(False)})
    if args.base_src:
        base = base_module(args.base_src, "crc_ranges")

        def base_run():
            with open(fpath, "rb") as fh:
                reader = base.TrackingReader(fh, Checksum)
                replay(reader)
                base.verify_reads(name, "crc32", entry["marks"], reader, fh.fileno())

        variants["base TrackingReader + verify_reads"] = base_run
    cpu = time_rotating(variants, args.repeat, warm=2)
    counts = {op: sum(1 for o, _ in ops if o == op) for op in ("readinto", "seek", "tell", "read")}
    print(f"{name}: {entry['size'] / 2**20:.1f} MiB, {len(ops)} stream calls {counts}, {len(plan or [])} planned "
          f"items; {args.repeat} repeats, load average {os.getloadavg()[0]:.2f}")
    print_extra_table(cpu)
    root.cleanup()


if __name__ == "__main__":
    main()
