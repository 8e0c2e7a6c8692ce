"""The hashing write stream's own cost, without DCP, torch.save or the planner around it (issue 23).

A single-process ``ShardedCheckpointStore`` save of an MLP (4 square Linear layers, weights + 2 Adam
moments: width 1024 = 48 MiB in one shard file) is made once with every call DCP and ``torch.save``
make on the shard's write stream recorded (``write`` with a copy of its bytes, ``tell``, ``flush``,
``close``: a flush, the file stays open).
That exact sequence is then replayed into a fresh file in the page cache on

- the raw file (what plain DCP writes through),
- the raw file plus a CRC of every write, in one call or, for large writes, in blocks of
  256 KiB-1 MiB each hashed right before it is written (no bookkeeping: the floor),
- :class:`lossguard.checkpoint.dcp_io._HashingStream` (what the store writes through), and with
  ``--base-src DIR`` the ``_HashingStream`` of another checkout's ``src`` (an A/B in one process).

Reported: median CPU time per replay (the file's close included, its deletion not) and the paired
median of its extra over the raw file, all variants in rotating order, garbage collector off while
timing. Run::

    PYTHONPATH=src .venv/bin/python benchmarks/checkpoint_write_replay.py [--width 1024] [--repeat 150] [--base-src DIR]
"""
from __future__ import annotations

import argparse
import os
import tempfile
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sharded_bench import base_module, print_extra_table, time_rotating, trained_mlp


class _Recorder:
    """A write stream wrapper that logs every call made on it (with a copy of each write's bytes)."""

    def __init__(self, inner: Any, ops: list) -> None:
        self.inner, self.ops = inner, ops

    def write(self, data) -> int:
        self.ops.append(("write", bytes(data)))
        return self.inner.write(data)

    def tell(self) -> int:
        self.ops.append(("tell", None))
        return self.inner.tell()

    def flush(self) -> None:
        self.ops.append(("flush", None))
        self.inner.flush()

    def close(self) -> None:  # DCP closes the stream (it flushes, the file stays open): a flush in the replay
        self.ops.append(("flush", None))
        self.inner.close()

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self.inner.fileno()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--width", type=int, default=1024)
    ap.add_argument("--repeat", type=int, default=150)
    ap.add_argument("--base-src", default=None, help="another checkout's src: its _HashingStream too")
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    import zlib_ng.zlib_ng as zn

    from lossguard.checkpoint import ShardedCheckpointStore, ShardedTrainState, dcp_io
    from lossguard.checkpoint.files import Checksum

    model, opt = trained_mlp(args.width)
    state = ShardedTrainState(model, opt, step=1)
    root = tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR"))
    store = ShardedCheckpointStore(Path(root.name) / "store", keep_last=10)
    log: dict[str, list] = {}
    real = dcp_io.HashingFileSystem.create_stream

    @contextmanager
    def recording(self, p, mode):
        with real(self, p, mode) as stream:
            yield _Recorder(stream, log.setdefault(os.path.basename(p), [])) if "w" in mode else stream

    dcp_io.HashingFileSystem.create_stream = recording
    state.save(store)
    dcp_io.HashingFileSystem.create_stream = real
    name = max(log, key=lambda n: len(log[n]))
    # Each write's bytes in a buffer of its own, as torch hands a view of each storage.
    ops = [(op, memoryview(bytearray(a)) if op == "write" else None) for op, a in log[name]]
    out = str(Path(root.name) / "replay")

    def replay(stream, block=None):
        crc = 0
        for op, data in ops:
            if op == "write":
                if block is None:
                    stream.write(data)
                elif block == 0 or len(data) <= block:
                    crc = zn.crc32(data, crc)
                    stream.write(data)
                else:
                    for start in range(0, len(data), block):
                        part = data[start:start + block]
                        crc = zn.crc32(part, crc)
                        stream.write(part)
            elif op == "tell":
                stream.tell()
            else:
                stream.flush()

    def raw(block=None):
        def run():
            with open(out, "wb") as fh:
                replay(fh, block)
        return run

    def hashing(module):
        def run():
            with open(out, "wb") as fh:
                replay(module._HashingStream(fh, Checksum))
        return run

    variants = {"raw file (plain DCP)": raw(), "raw + CRC, one call per write": raw(0)}
    variants.update({f"raw + CRC, {k} KiB blocks": raw(k << 10) for k in (256, 512, 1024)})
    variants["_HashingStream"] = hashing(dcp_io)
    if args.base_src:
        variants["base _HashingStream"] = hashing(base_module(args.base_src, "dcp_io"))
    # unlinking is outside the timed span: freeing the page cache is the kernel's, not the stream's
    cpu = time_rotating(variants, args.repeat, warm=1, after=lambda: os.unlink(out))
    sizes = [len(d) for op, d in ops if op == "write"]
    print(f"{name}: {sum(sizes) / 2**20:.1f} MiB, {len(ops)} stream calls ({len(sizes)} writes, "
          f"{sum(s > 1 << 16 for s in sizes)} of them > 64 KiB); {args.repeat} repeats, "
          f"load average {os.getloadavg()[0]:.2f}")
    print_extra_table(cpu)
    root.cleanup()


if __name__ == "__main__":
    main()
