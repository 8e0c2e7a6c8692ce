"""Checksum throughput and GIL release of the hash routines a checkpoint can use (issue 23).

For each routine that is installed (stdlib ``zlib.crc32``, ``zlib_ng.crc32``, ``isal_zlib.crc32``,
``google_crc32c.extend``, ``crc32c.crc32c``, ``xxhash.xxh3_64``):

- in cache: one 1 MiB block hashed 200 times (what the sharded load does: each block is hashed right
  after it is read, while still in cache);
- from memory: a 96 MiB buffer (one rank's share of a 192 MiB checkpoint) in 1 MiB calls;
- GIL: a worker thread hashes a 256 MiB buffer in one call while the main thread waits to run; if
  the routine releases the GIL, the main thread runs before the call returns (5 trials).

Best of 5 for the speeds. Run::

    python benchmarks/checksum_speed.py
"""
from __future__ import annotations

import os
import threading
import time
import zlib
from collections.abc import Callable
from typing import Any


def _routines() -> dict[str, Callable[[Any], int]]:
    """The installed routines by label (algorithm in parentheses)."""
    found: dict[str, Callable[[Any], int]] = {"zlib.crc32 (CRC-32, stdlib)": zlib.crc32}
    try:
        from zlib_ng import zlib_ng

        found["zlib_ng.crc32 (CRC-32)"] = zlib_ng.crc32
    except ImportError:
        pass
    try:
        from isal import isal_zlib

        found["isal_zlib.crc32 (CRC-32)"] = isal_zlib.crc32
    except ImportError:
        pass
    try:
        import google_crc32c

        found["google_crc32c.extend (CRC-32C)"] = lambda b: google_crc32c.extend(0, b)
    except ImportError:
        pass
    try:
        import crc32c

        found["crc32c.crc32c (CRC-32C)"] = crc32c.crc32c
    except ImportError:
        pass
    try:
        import xxhash

        found["xxhash.xxh3_64 (not a CRC)"] = xxhash.xxh3_64_intdigest
    except ImportError:
        pass
    return found


def _best(fn: Callable[[], object], runs: int = 5) -> float:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def _runs_alongside(fn: Callable[[Any], int], data: Any, trials: int = 5) -> tuple[float, int]:
    """(one call's time, in how many of ``trials`` calls the main thread ran Python during the call).
    A worker signals, notes the time and makes one long call; the main thread, woken by the signal,
    needs the GIL to note its own time: before the call is half done only if the call released it
    (the OS may delay the main thread on a busy CPU, but not by half a 256 MiB call)."""
    one, alongside = _best(lambda: fn(data), runs=1), 0
    for _ in range(trials):
        started, began = threading.Event(), [0.0]

        def work(started: threading.Event = started, began: list[float] = began) -> None:
            started.set()
            began[0] = time.perf_counter()
            fn(data)

        worker = threading.Thread(target=work)
        worker.start()
        started.wait()
        woke = time.perf_counter()
        worker.join()
        alongside += began[0] <= woke < began[0] + one / 2
    return one, alongside


def main() -> None:
    import numpy as np

    block, share = 1 << 20, 96 << 20
    big = np.frombuffer(bytearray(os.urandom(256 << 20)), dtype=np.uint8)  # writable, like a tensor
    print("| routine | in cache (1 MiB x 200) | from memory (96 MiB in 1 MiB calls) | one 256 MiB call "
          "| main thread ran during the call | GIL |")
    print("|---|---:|---:|---:|---:|---|")
    for name, fn in _routines().items():
        def in_cache(fn: Callable[[Any], int] = fn) -> None:
            for _ in range(200):
                fn(big[:block])

        def from_memory(fn: Callable[[Any], int] = fn) -> None:
            for offset in range(0, share, block):
                fn(big[offset:offset + block])

        cached, memory = _best(in_cache), _best(from_memory)
        one, alongside = _runs_alongside(fn, big)
        print(f"| {name} | {200 * block / cached / 1e9:.1f} GB/s | {share / memory / 1e9:.1f} GB/s "
              f"| {one * 1e3:.1f} ms | {alongside} of 5 | {'released' if alongside >= 3 else 'held'} |")


if __name__ == "__main__":
    main()
