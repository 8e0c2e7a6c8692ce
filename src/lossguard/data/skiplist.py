"""SkipList: absolute sample ids a run must never train on again -- portable across resumes, batch
sizes and world sizes.

A skip *range* (:class:`lossguard.recovery.SkipRange`) names batches by position, which means
something only for one order, batch size and world size. A skip *list* names samples by what they
are: a dataset index, or for a mix a dataset name and the index inside it (:class:`SampleKey`). So
the same file keeps a sample out of a run relaunched with another batch size, another world size or
another mix layout, and a user can pass it to a loader of their own (:meth:`SkipList.filter`).

Like the run ledger it is never rolled back: it lives beside the checkpoints as ``skiplist.json``
(:data:`SKIPLIST_FILE`), written atomically on every change.

File format (JSON)::

    {"format": "lossguard-skiplist", "version": 1,
     "samples": [{"id": 81234, "step": 412, "reason": "named at step 412: 93% of the excess loss"},
                 {"id": {"dataset": "code", "index": 77}, "reason": "added by hand"}]}
"""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any, Iterable

from ..errors import LossguardError
from ..jsonsafe import read_json_file
from .sample_ids import DatasetMix, SampleKey, key_of

SKIPLIST_FILE = "skiplist.json"
"""File name of the skip list in a checkpoint directory (beside ``ledger.json``)."""
SKIPLIST_FORMAT, SKIPLIST_VERSION = "lossguard-skiplist", 1


class SkipList:
    """A set of :class:`SampleKey` kept out of training, with why each one is there.

    Args:
        path: the JSON file every change is written to (None: in memory).
        mix: how flat loader indices map to named datasets (None: one dataset; keys are indices).
    """

    def __init__(self, path: str | os.PathLike | None = None, *, mix: DatasetMix | None = None) -> None:
        self.path = None if path is None else Path(path)
        self._mix = mix
        self._notes: dict[SampleKey, dict[str, Any]] = {}
        self._flat: set[int] = set()
        self.version = 0
        """Bumped by every change (a loader with prefetched batches restarts when it moves)."""

    @property
    def mix(self) -> DatasetMix | None:
        """How flat loader indices map to named datasets (settable: the flat ids are recomputed)."""
        return self._mix

    @mix.setter
    def mix(self, mix: DatasetMix | None) -> None:
        self._mix = mix
        self._flat = {f for f in (self._flat_of(k) for k in self._notes) if f is not None}
        self.version += 1

    # ---------------------------------------------------------------- queries
    def __len__(self) -> int:
        return len(self._notes)

    def __contains__(self, sample: int | SampleKey) -> bool:
        """True if a flat loader index (or a key) is on the list."""
        if isinstance(sample, SampleKey):
            return sample in self._notes
        return int(sample) in self._flat

    def keys(self) -> list[SampleKey]:
        """The listed samples, sorted."""
        return sorted(self._notes, key=lambda k: (k.dataset or "", k.index))

    def note(self, key: SampleKey) -> dict[str, Any]:
        """Why ``key`` is listed (``{"step", "reason"}`` as given to :meth:`add`)."""
        return dict(self._notes[key])

    def filter(self, ids: Iterable[int]) -> list[int]:
        """``ids`` without the listed ones, order kept (for a loader of your own)."""
        flat = self._flat
        return [i for i in ids if int(i) not in flat]

    # ---------------------------------------------------------------- changes
    def _key(self, sample: int | SampleKey | Any) -> SampleKey:
        if isinstance(sample, SampleKey):
            return sample
        if isinstance(sample, int) and not isinstance(sample, bool) and self.mix is not None:
            return key_of(sample, self.mix)  # a flat loader index of the mix
        return SampleKey.from_json(sample)

    def _flat_of(self, key: SampleKey) -> int | None:
        if self.mix is None:
            return key.index if key.dataset is None else None
        return self.mix.flat(key)

    def add(self, samples: Iterable[int | SampleKey], *, reason: str = "", step: int | None = None) -> list[SampleKey]:
        """List ``samples`` (flat loader indices or keys); returns the newly listed keys. Saves."""
        new = []
        for s in samples:
            k = self._key(s)
            if k in self._notes:
                continue
            self._notes[k] = {"reason": str(reason), **({} if step is None else {"step": int(step)})}
            f = self._flat_of(k)
            if f is not None:
                self._flat.add(f)
            new.append(k)
        if new:
            self.version += 1
            self.save()
        return new

    def remove(self, samples: Iterable[int | SampleKey]) -> list[SampleKey]:
        """Take ``samples`` off the list (a sample judged innocent); returns the removed keys. Saves."""
        gone = []
        for s in samples:
            k = self._key(s)
            if self._notes.pop(k, None) is not None:
                f = self._flat_of(k)
                if f is not None:
                    self._flat.discard(f)
                gone.append(k)
        if gone:
            self.version += 1
            self.save()
        return gone

    # ---------------------------------------------------------------- persistence
    def to_dict(self) -> dict[str, Any]:
        """The file's content."""
        return {"format": SKIPLIST_FORMAT, "version": SKIPLIST_VERSION,
                "samples": [{"id": k.to_json(), **self._notes[k]} for k in self.keys()]}

    def save(self) -> None:
        """Write the file atomically (temp file, fsync, rename); no-op in memory."""
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".skiplist-", suffix=".tmp", dir=self.path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump(self.to_dict(), fh, indent=1)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    @classmethod
    def load(cls, path: str | os.PathLike, *, mix: DatasetMix | None = None) -> "SkipList":
        """Read a skip list file; later changes are written back to it.

        Raises:
            LossguardError: unreadable, not JSON, or not a skip list.
        """
        p = Path(path)
        d = read_json_file(p, what="the skip list", fix_unreadable="check the path",
                           fix_invalid="restore it, or remove it to start with an empty list")
        if not isinstance(d, dict) or d.get("format") != SKIPLIST_FORMAT or not isinstance(d.get("samples"), list):
            raise LossguardError("not a lossguard skip list", path=p,
                                 fix=f"point at a {SKIPLIST_FILE} written by lossguard")
        if int(d.get("version", 0)) > SKIPLIST_VERSION:
            raise LossguardError(f"skip list version {d.get('version')} is newer than this lossguard reads",
                                 path=p, fix="upgrade lossguard")
        out = cls(None, mix=mix)
        for i, rec in enumerate(d["samples"]):
            try:
                k = SampleKey.from_json(rec["id"])
            except (LossguardError, KeyError, TypeError) as exc:
                raise LossguardError(f"damaged skip list entry {i}: {rec!r} ({exc})", path=p,
                                     fix="fix or remove that entry") from None
            out._notes[k] = {n: v for n, v in rec.items() if n != "id"}
            f = out._flat_of(k)
            if f is not None:
                out._flat.add(f)
        out.path = p
        return out

    @classmethod
    def open(cls, path: str | os.PathLike | None, *, mix: DatasetMix | None = None) -> "SkipList":
        """The list at ``path`` if the file exists (a resumed run), else an empty one that saves there."""
        if path is not None and Path(path).exists():
            return cls.load(path, mix=mix)
        return cls(path, mix=mix)
