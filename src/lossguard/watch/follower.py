"""RunFollower: the files of one run, found and followed as they appear, grow, rotate or stop.

The paths a user names are files or run directories, read as one run as ``analyze`` reads them. A
directory is walked again at every poll, so the new log or event file of a resumed job joins the
run as soon as it has its first line (a file is sniffed once it has content; until a reader
recognises it, it is looked at again as it grows, up to the 64 KiB ``read_log`` sniffs). Side
files (configs, W&B debug logs) are never read. When a directory holds logs of several formats
(HF's TensorBoard events *and* ``trainer_state.json``; Lightning's two loggers) only the format
``read_log`` prefers is followed, so no point is counted twice.

Each file has a :class:`~.tail.FileTail` (new bytes, rotation, truncation) and a decoder of its
format; rotated files are recognised by inode, so a log renamed to ``train.log.1`` is not read
twice.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from ..errors import LossguardError
from ..io import HEAD_BYTES, detect_format, require_reader
from ..io import runs as run_files
from .history import Points
from .lines import CsvDecoder, JsonlDecoder, MegatronDecoder
from .text import GrammarKeys, TextDecoder
from .tail import FileTail
from .tfevents import EventFileDecoder
from .wholefile import WholeFileDecoder

LINE_DECODERS = {"csv": CsvDecoder, "jsonl": JsonlDecoder, "megatron": MegatronDecoder, "text": TextDecoder}
"""Formats followed by their new bytes; every other format is re-read whole when it changes."""

class Decoder(Protocol):
    """What the follower asks of a format's incremental decoder (line, event-file or whole-file)."""

    @property
    def partial(self) -> bytes:
        """Bytes held back: the end of the file inside a line or record."""

    def restart(self) -> None:
        """The file was replaced or truncated: the next points are a new launch."""

    def feed(self, data: bytes) -> list[Points]:
        """The points decoded from the file's new bytes."""

    def flush(self) -> list[Points]:
        """The writer is gone: the points of an unterminated last line or record."""


@dataclass
class Followed:
    """One file being followed."""

    path: str
    format: str
    tail: FileTail
    decoder: Decoder
    root: Path | None
    broken: str | None = None  # why the file is no longer followed (corrupt)
    reported_partial: int = 0  # pending bytes already reported after the writer went quiet


@dataclass
class Poll:
    """What one poll found: the points, and notices in words (new file, rotation, corruption)."""

    points: list[Points] = field(default_factory=list)
    notices: list[str] = field(default_factory=list)
    bytes_read: int = 0


class RunFollower:
    """Follows the files and directories of one run.

    Args:
        paths: files or run directories (they must exist).
        format: force one reader for every file instead of sniffing.
        keys: ``--step-key`` / ``--loss-key`` for text logs read by the grammar.

    Raises:
        LossguardError: a path that does not exist.
    """

    def __init__(self, paths: list[str], *, format: str | None = None, keys: GrammarKeys | None = None) -> None:
        for p in paths:
            if not os.path.exists(p):
                raise LossguardError("no such file or directory", path=p,
                                     fix="check the path (watch follows files that exist; start it once the job "
                                         "has created its log or run directory)")
        self.paths = [str(p) for p in paths]
        self.format = format
        self.keys = keys or GrammarKeys()
        self.files: dict[str, Followed] = {}
        self._waiting: dict[str, int] = {}  # unrecognised path -> size when last sniffed
        self._tb_names: dict[tuple[str, str], str] = {}
        self._newest: dict[str, dict[str, int]] = {}
        self._main_tb: str | None = None
        self._read_inodes: set[tuple[int, int]] = set()  # every file read so far, under whatever name
        self._told: set[str] = set()  # named files we said we are waiting for
        self._listing: dict[str, tuple[int, list[str], list[str]]] = {}  # dir -> (mtime, files, sub-dirs)

    # ---- discovery -----------------------------------------------------------------------------
    def _candidates(self) -> list[tuple[str, Path | None]]:
        out: list[tuple[str, Path | None]] = []
        for p in self.paths:
            if os.path.isdir(p):
                root = Path(p)
                out.extend((f, root) for f in self._walk(p))
            else:
                out.append((p, None))
        return out

    def _walk(self, top: str) -> list[str]:
        """Files under ``top`` (hidden ones left out). A directory is listed again only when its
        modification time changed (an entry was added or removed), so a run directory holding
        thousands of checkpoint shards costs one ``stat`` per sub-directory per poll."""
        files: list[str] = []
        stack = [top]
        while stack:
            d = stack.pop()
            try:
                mtime = os.stat(d).st_mtime_ns
            except OSError:
                continue
            cached = self._listing.get(d)
            if cached is None or cached[0] != mtime:
                names: list[str] = []
                subs: list[str] = []
                try:
                    with os.scandir(d) as it:
                        for e in it:
                            if e.name.startswith("."):
                                continue
                            (subs if e.is_dir(follow_symlinks=False) else names).append(e.name)
                except OSError:
                    continue
                cached = (mtime, sorted(names), sorted(subs))
                self._listing[d] = cached
            files.extend(os.path.join(d, n) for n in cached[1])
            stack.extend(os.path.join(d, s) for s in reversed(cached[2]))
        return files

    def _discover(self, poll: Poll) -> None:
        for f in self.files.values():
            if f.tail.identity is not None:
                self._read_inodes.add(f.tail.identity)
        for path, root in self._candidates():
            if path in self.files:
                continue
            try:
                st = os.stat(path)
            except OSError:
                continue
            if (st.st_dev, st.st_ino) in self._read_inodes:
                continue  # a rotated file: already read under its old name
            if root is not None and run_files.is_side_file(Path(path)):
                continue
            if st.st_size == 0 or self._waiting.get(path) == st.st_size:
                continue
            fmt = self._sniff(path, st.st_size, root)
            if fmt is None:
                self._waiting[path] = st.st_size
                if root is None and path not in self._told:
                    self._told.add(path)
                    poll.notices.append(f"waiting for {path} to hold a line a reader recognises")
                if root is None and st.st_size >= HEAD_BYTES:
                    raise LossguardError("no reader recognises this file", path=path,
                                         fix="pass --format; CSV needs a header naming a step column, "
                                             "JSONL one JSON object per line")
                continue
            self._waiting.pop(path, None)
            if root is not None and not self._preferred(fmt, root):
                continue
            self.files[path] = Followed(path, fmt, FileTail(path), self._decoder(path, fmt, root), root)
            poll.notices.append(f"following {path} ({fmt})")

    def _sniff(self, path: str, size: int, root: Path | None) -> str | None:
        if "tfevents" in os.path.basename(path) and self.format in (None, "tensorboard"):
            return "tensorboard"
        if self.format is not None and root is None:
            return self.format  # a file named by the user, its format forced
        try:
            with open(path, "rb") as fh:
                head = fh.read(HEAD_BYTES)
        except OSError:
            return None
        if b"\n" not in head and size < HEAD_BYTES:
            return None  # not even one whole line yet
        if self.format is not None:  # a forced format applies to the directory's files it can read
            try:
                return self.format if require_reader(self.format).sniff(Path(path), head) else None
            except Exception:  # noqa: BLE001 - a sniffer must never crash the watch; treat as "not mine"
                return None
        found = detect_format(path, head)
        if found is None and root is None and self.keys.given and b"\n" in head:
            return "text"  # the user named the columns: the grammar reads the file with them, as analyze does
        return found

    def _preferred(self, fmt: str, root: Path) -> bool:
        """False when the directory's files of a format read_log prefers are followed already."""
        order = run_files.SOURCE_PREFERENCE
        rank = order.index(fmt) if fmt in order else len(order)
        others = [f.format for f in self.files.values() if f.root == root]
        if any((order.index(o) if o in order else len(order)) < rank for o in others):
            return False
        for path, f in list(self.files.items()):  # a better source appeared: drop the worse one
            if f.root == root and (order.index(f.format) if f.format in order else len(order)) > rank:
                del self.files[path]
        return True

    def _decoder(self, path: str, fmt: str, root: Path | None) -> Decoder:
        if fmt == "tensorboard":
            return EventFileDecoder(path, root or Path(path).parent, self._tb_names)
        if fmt == "text":
            return TextDecoder(path, self.keys)
        if fmt in LINE_DECODERS:
            return LINE_DECODERS[fmt](path)
        return WholeFileDecoder(path, fmt, self._newest.setdefault(fmt, {}))

    @property
    def waiting(self) -> list[str]:
        """Files with content that no reader recognises (yet)."""
        return list(self._waiting)

    # ---- reading -------------------------------------------------------------------------------
    def poll(self, sink=None) -> Poll:
        """Find new files and read what every followed file has gained.

        Args:
            sink: called with each :class:`Points` as soon as its bytes are decoded (so a long
                backlog is never held in memory at once); without it they are collected in
                ``Poll.points``.
        """
        poll = Poll()
        sink = sink or poll.points.append
        self._discover(poll)
        for f in list(self.files.values()):
            if f.broken:
                continue
            for _ in range(64):  # bounded catch-up per poll (1 MiB a read)
                chunk = f.tail.read()
                if chunk is None:
                    break
                poll.bytes_read += len(chunk.data)
                f.reported_partial = 0
                if chunk.restarted:
                    f.decoder.restart()
                    poll.notices.append(f"{f.path}: {chunk.why}; reading it from the start as a new launch")
                try:
                    pts = f.decoder.feed(chunk.data)
                except LossguardError as exc:
                    f.broken = str(exc)
                    poll.notices.append(f"stopped following {f.path}: {exc}")
                    break
                for p in self._joined(f, pts):
                    sink(p)
        return poll

    def _joined(self, f: Followed, pts: list[Points]) -> list[Points]:
        if f.format != "tensorboard":
            return pts
        if isinstance(f.decoder, EventFileDecoder) and f.decoder.is_stream:  # tensorboard: always one
            for p in pts:
                p.join = self._main_tb
        elif pts:
            self._main_tb = f.path
        return pts

    def flush(self) -> Poll:
        """The writers are gone: parse unterminated last lines, report incomplete records."""
        poll = Poll()
        for f in self.files.values():
            if f.broken:
                continue
            try:
                poll.points.extend(self._joined(f, f.decoder.flush()))
            except LossguardError as exc:
                poll.notices.append(f"{f.path}: {exc}")
        return poll

    def pending(self) -> list[str]:
        """Files that end inside a line or record, in words (said once per stall)."""
        out = []
        for f in self.files.values():
            n = len(f.decoder.partial)
            if n and n != f.reported_partial:
                f.reported_partial = n
                unit = "record" if f.format == "tensorboard" else "line"
                out.append(f"{f.path} ends inside a {unit} ({n} bytes written so far): a writer still writing, "
                           f"or one killed mid-{unit}; the complete {unit}s before it were read")
        return out
