"""FileTail: the new bytes of one growing file, surviving rotation and truncation.

Each :meth:`FileTail.read` returns only the bytes appended since the last call (so following a
file costs what it grows, not its length). The file is recognised by its inode: when the path
now names another file (``logrotate``'s rename, a job that recreates its log) the rest of the old
file is read first, then the new one from its start; when the file shrank (``copytruncate``, a
job that reopened it with ``"w"``) it is read again from byte 0. Either way the caller is told, so
the points that follow start a new segment.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import BinaryIO


@dataclass
class Chunk:
    """Bytes read in one call.

    Attributes:
        data: the new bytes (possibly ending inside a line or record).
        restarted: True when these bytes are the start of a new file at that path (rotated,
            recreated or truncated): whatever was pending from the old one is void.
        why: how the restart was noticed, in words.
    """

    data: bytes
    restarted: bool = False
    why: str = ""


class FileTail:
    """Follows one path.

    Args:
        path: the file.
        max_read: most bytes returned by one call (the rest comes on the next call), so that
            catching up on a large existing log is done in bounded pieces.
    """

    def __init__(self, path: str, *, max_read: int = 1 << 20) -> None:
        self.path = path
        self.max_read = max_read
        self._fh: BinaryIO | None = None
        self._ino: tuple[int, int] | None = None
        self.offset = 0
        self.size = 0

    def close(self) -> None:
        """Close the file handle (a later read reopens it)."""
        if self._fh is not None:
            self._fh.close()
            self._fh = None

    @property
    def identity(self) -> tuple[int, int] | None:
        """(device, inode) of the file being read, or None before the first read."""
        return self._ino

    def read(self) -> Chunk | None:
        """The bytes appended since the last call, or None when there are none (or no file)."""
        try:
            st = os.stat(self.path)
        except OSError:
            return self._drain_old()  # moved away: finish the old file, then wait for a new one
        ident = (st.st_dev, st.st_ino)
        if self._fh is not None and ident != self._ino:
            rest = self._drain_old()
            if rest is not None:
                return rest  # the end of the rotated file first; the new one on the next call
        restarted, why = False, ""
        if self._fh is None:
            try:
                self._fh = open(self.path, "rb")
            except OSError:
                return None
            fst = os.fstat(self._fh.fileno())
            restarted = self._ino is not None
            why = "the file was replaced (rotated or recreated)" if restarted else ""
            self._ino = (fst.st_dev, fst.st_ino)
            self.offset = 0
            st = fst
        elif st.st_size < self.offset:
            restarted, why = True, f"the file shrank from {self.offset} to {st.st_size} bytes (truncated)"
            self.offset = 0
        self.size = st.st_size
        if st.st_size <= self.offset and not restarted:
            return None
        self._fh.seek(self.offset)
        data = self._fh.read(min(self.max_read, max(0, st.st_size - self.offset)))
        self.offset += len(data)
        return Chunk(data, restarted, why)

    def _drain_old(self) -> Chunk | None:
        """The unread end of the file we hold open after its path moved on; then let it go."""
        if self._fh is None:
            return None
        data = self._fh.read(self.max_read)
        if data:
            self.offset += len(data)
            return Chunk(data)
        self.close()
        return None
