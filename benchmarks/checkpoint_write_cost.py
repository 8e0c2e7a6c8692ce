"""What hashing while writing adds to one process's ``dcp.save`` (issue 23): CPU time per save.

Saves a 48 MiB state dict (width 1024: 4 layers' weights and biases, times 3 for Adam's moments)
with plain DCP's ``FileSystemWriter`` and with :func:`lossguard.checkpoint.dcp_io.hashing_writer`,
interleaved, and prints the median CPU time of each and their ratio; ``--crc`` also times the
CRC alone over the same tensors (the floor the wrapper cannot go under) and ``--wrapper`` the
writer's own cost per ``write`` call (64-byte writes to ``/dev/null``, best of 20 x 10,000, against
the file's own ``write``). Compare two versions of lossguard by switching ``PYTHONPATH``::

    PYTHONPATH=src python benchmarks/checkpoint_write_cost.py --repeat 24 --crc --wrapper
"""
import argparse
import shutil
import statistics
import tempfile
import time
import warnings

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import FileSystemWriter

from lossguard.checkpoint.dcp_io import hashing_writer
from lossguard.checkpoint.files import crc32_function, fast_checksum


def state_dict(width: int) -> dict[str, torch.Tensor]:
    """Weights, biases and two Adam moments of 4 square layers, plus a step counter."""
    torch.manual_seed(0)
    sd = {f"{kind}.{i}.{p}": torch.randn((width, width) if p == "w" else (width,))
          for i in range(4) for p in ("w", "b") for kind in ("param", "exp_avg", "exp_avg_sq")}
    sd["step"] = torch.tensor(3)
    return sd


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--width", type=int, default=1024)
    ap.add_argument("--repeat", type=int, default=16)
    ap.add_argument("--crc", action="store_true", help="also time the CRC alone over the tensors")
    ap.add_argument("--wrapper", action="store_true", help="also time the writer's own cost per write call")
    args = ap.parse_args()
    warnings.filterwarnings("ignore")  # no process group: DCP warns that it saves in one process
    sd, algo = state_dict(args.width), fast_checksum()
    root = tempfile.mkdtemp()
    writers = {"plain": lambda d: FileSystemWriter(d), "hashed": lambda d: hashing_writer(d, algo)}
    cpu: dict[str, list[float]] = {k: [] for k in writers}
    for i in range(args.repeat + 1):
        for name, make in writers.items():
            path = f"{root}/{name}-{i}"
            t = time.process_time()
            dcp.save(sd, storage_writer=make(path), no_dist=True)
            if i:  # the first round warms up
                cpu[name].append(time.process_time() - t)
            shutil.rmtree(path)
    shutil.rmtree(root)
    plain, hashed = (statistics.median(cpu[k]) * 1e3 for k in ("plain", "hashed"))
    ratios = sorted(h / p for p, h in zip(cpu["plain"], cpu["hashed"], strict=True))
    mib = sum(t.numel() * t.element_size() for t in sd.values()) / 2**20
    print(f"{mib:.1f} MiB, {args.repeat} pairs, CPU ms per save: plain {plain:.1f}, hashed {hashed:.1f} "
          f"(+{hashed - plain:.1f}); paired ratio median {statistics.median(ratios):.3f}, "
          f"quartiles {ratios[len(ratios) // 4]:.3f}-{ratios[3 * len(ratios) // 4]:.3f}")
    if args.crc:
        crc, views = crc32_function(), [t.numpy().data.cast("B") for t in sd.values() if t.dim()]
        best = float("inf")
        for _ in range(30):
            t, value = time.process_time(), 0
            for view in views:
                value = crc(view, value)
            best = min(best, time.process_time() - t)
        print(f"CRC-32 alone over the tensors' bytes: {best * 1e3:.2f} ms (best of 30)")
    if args.wrapper:
        wrapper_cost(algo)


def wrapper_cost(algo) -> None:
    """Time per 64-byte ``write`` through the hashing stream and straight to the file."""
    from lossguard.checkpoint import dcp_io

    buf = memoryview(bytearray(64))
    with open("/dev/null", "wb") as raw:
        try:
            stream = dcp_io._HashingStream(raw, algo)
        except AttributeError:  # lossguard before session 7's second pass took a checksum instance
            stream = dcp_io._HashingStream(raw, algo())
        best = {}
        for name, write in (("file", raw.write), ("hashing stream", stream.write)):
            for _ in range(20):
                t = time.perf_counter()
                for _ in range(10_000):
                    write(buf)
                best[name] = min(best.get(name, float("inf")), (time.perf_counter() - t) / 10_000)
    extra = best["hashing stream"] - best["file"]
    print(f"per write call: file {best['file'] * 1e6:.3f} us, hashing stream {best['hashing stream'] * 1e6:.3f} us "
          f"(+{extra * 1e6:.3f} us; x 976 writes of a 48 MiB save = {extra * 976 * 1e3:.2f} ms)")


if __name__ == "__main__":
    main()
