"""How long recognising a large text file takes: the pasted-text sniffer and the whole reader order.

Two ``--mb`` MB files (default 40):

* ``megatron long start-up``: a Megatron-LM stdout log whose first ``--startup-mb`` MB (default 8)
  are launcher output (argument dump, NCCL lines, the tokenizer and model summary), then iteration lines;
* ``non-log text``: the repository's Markdown docs repeated (prose full of "step", "epoch",
  "iteration"), which no reader may claim.

For each: the seconds of ``pasted.sniff`` alone, of ``megatron.sniff`` alone, and of
:func:`lossguard.io.detect_format` (every reader in order, until one says yes), best of ``--repeat``.

    .venv/bin/python benchmarks/read_sniff.py            # 40 MB files
    .venv/bin/python benchmarks/read_sniff.py --mb 10    # quick
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from lossguard.io import HEAD_BYTES, detect_format, reader

_ROOT = Path(__file__).resolve().parent.parent


def write_megatron(path: Path, mb: float, startup_mb: float) -> None:
    """A Megatron stdout log: ``startup_mb`` MB of start-up output, then iteration lines up to ``mb`` MB."""
    args = [f"  {name} {'.' * (40 - len(name))} {value}" for name, value in
            [("train_iters", 500000), ("log_interval", 10), ("eval_iters", 10), ("eval_interval", 1000),
             ("global_batch_size", 1536), ("lr_warmup_iters", 2000), ("seq_length", 2048)]]
    startup = ["using world size: 1024, data-parallel size: 128", "-------------------- arguments --------------------",
               *args, "> building GPT2BPETokenizer tokenizer ..."]
    nccl = "node{0:04d}:{1}:{1} [{2}] NCCL INFO Channel {3:02d}/32 : {2} -> {4} via P2P/IPC/read"
    with open(path, "w") as f:
        f.write("\n".join(startup) + "\n")
        k = 0
        while f.tell() < startup_mb * 1e6:
            f.write(nccl.format(k % 128, 1000 + k % 97, k % 8, k % 32, (k + 1) % 8) + "\n")
            k += 1
        f.write("[before the start of training step] datetime: 2024-05-01 12:00:00\n")
        it = 1
        while f.tell() < mb * 1e6:
            f.write(f" iteration {it:8d}/  500000 | consumed samples: {it * 1536:12d} | elapsed time per "
                    f"iteration (ms): 4123.4 | learning rate: 1.000E-04 | global batch size:  1536 | "
                    f"lm loss: {2.5 - it * 1e-6:.6E} | loss scale: 4096.0 | grad norm: 0.241 | "
                    f"number of skipped iterations:   0 | number of nan iterations:   0 |\n")
            it += 1


def write_prose(path: Path, mb: float) -> None:
    """The repository's Markdown docs, repeated to ``mb`` MB: text with the words the sniffers look for."""
    docs = [_ROOT / "README.md", *sorted((_ROOT / "docs").glob("*.md"))]
    text = "\n".join(p.read_text(encoding="utf-8") for p in docs if p.is_file()).encode()
    with open(path, "wb") as f:
        while f.tell() < mb * 1e6:
            f.write(text)


def best(fn, repeat: int) -> tuple[float, object]:
    """Smallest wall time of ``repeat`` calls, and the call's result."""
    times, out = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return min(times), out


def main(argv: list[str] | None = None) -> int:
    """Write the two files, time the sniffers, print a Markdown table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, default=40.0, help="size of each file in MB")
    ap.add_argument("--startup-mb", type=float, default=8.0, help="start-up output before the first iteration")
    ap.add_argument("--repeat", type=int, default=3, help="timed calls per measurement (best kept)")
    args = ap.parse_args(argv)
    print("| file | size (MB) | pasted.sniff (s) | megatron.sniff (s) | detect_format (s) | format |")
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        files = {"megatron long start-up": Path(tmp) / "train.log", "non-log text": Path(tmp) / "notes.txt"}
        write_megatron(files["megatron long start-up"], args.mb, args.startup_mb)
        write_prose(files["non-log text"], args.mb)
        for name, path in files.items():
            with open(path, "rb") as f:
                head = f.read(HEAD_BYTES)
            t_paste, said = best(lambda: reader("pasted").sniff(path, head), args.repeat)
            t_mega, _ = best(lambda: reader("megatron").sniff(path, head), args.repeat)
            t_all, fmt = best(lambda: detect_format(path, head), args.repeat)
            print(f"| {name} | {path.stat().st_size / 1e6:.0f} | {t_paste:.3f} ({'yes' if said else 'no'}) "
                  f"| {t_mega:.3f} | {t_all:.3f} | {fmt} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
