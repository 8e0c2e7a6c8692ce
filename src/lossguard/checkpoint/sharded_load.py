"""Loading a sharded checkpoint: each rank checks its share of the files inside DCP's load, which
loads in place.

The files of a checkpoint are spread over the ranks for the size check (file ``k`` goes to rank
``k % world_size``). The check runs before DCP's load but its verdict is handed to DCP: the reader
(:class:`CheckedReader`) raises it in DCP's planning step, whose gather reaches every rank, so all
ranks pass over a damaged checkpoint together without a collective of the store's own, and before
any tensor is loaded. DCP's own read then checks every item's checksum on the way (:mod:`.dcp_io`),
this rank's own state included: it is one DCP item of the rank's shard file
(:func:`~.sharded_layout.rank_key`). A checkpoint of an older lossguard keeps that state in
``rank-NNNNN.pt``, read once here, verified, and kept for the load. A damaged file is reported as a
:class:`ChecksumMismatch` on every rank alike.
"""
from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any

from ..errors import CheckpointError
from .files import ChecksumMismatch
from .manifest import MANIFEST
from .sharded_layout import SHARDED_FORMAT, active_dist, rank_file, rank_key

_MISMATCH_TEXT = re.compile(r"\S+ (?:does not match its [\w-]+ in manifest\.json \(corrupted\)"
                            r"|has \d+ bytes, the manifest recorded \S+)")


def mismatch_in(exc: BaseException) -> str | None:
    """The message of a :class:`ChecksumMismatch` inside DCP's exception (its per-rank failures), or None."""
    if isinstance(exc, ChecksumMismatch):
        return str(exc)
    failures = getattr(exc, "failures", None) or {}
    for failure in failures.values():
        inner = failure[0] if isinstance(failure, tuple) else failure
        if isinstance(inner, ChecksumMismatch):
            return str(inner)
    # DCP folds some read errors (the .metadata read) into the text of another exception.
    found = _MISMATCH_TEXT.search(str(exc))
    return found.group(0) if found else None


def agreed_candidates(store: Any, step: int | None) -> list[int]:
    """Rank 0's valid steps of a sharded ``store`` to try, newest first (only ``step`` when given),
    the same on every rank (a collective).

    Raises:
        CheckpointError: ``step`` is not a valid checkpoint in rank 0's listing (the reason and the
            valid steps in the message).
    """
    listing: list[Any] = [None]
    if store.rank == 0:
        valid = store.steps()
        if step is None:
            listing[0] = list(reversed(valid))
        elif step in valid:
            listing[0] = [step]
        else:
            reason = next((i.reason for i in store.list() if i.step == step), "it does not exist")
            listing[0] = f"checkpoint of step {step} is not loadable ({reason}; valid: {valid})"
    dist = active_dist()
    if dist:
        dist.broadcast_object_list(listing, src=0)
    if isinstance(listing[0], str):
        raise CheckpointError(listing[0], path=store.directory, fix="pick a valid step, or None for the newest")
    return list(listing[0])


def verify_share(path: Path, step: int, *, rank: int, world_size: int,
                 checksum: bool) -> tuple[str | None, dict[str, Any], bytes | None]:
    """This rank's part of the verification of the checkpoint at ``path``, with no collective.
    Over all ranks, the shares check what the store's listing checks (manifest, step, every file's
    size), so a load of an explicit step needs no listing first.

    Args:
        path: the checkpoint directory.
        step: the step it must hold (its manifest's ``step``).
        rank, world_size: this rank and the number of ranks (the share is every world_size-th file).
        checksum: also read and verify this rank's own file (an older lossguard's checkpoint).

    Returns:
        ``(problem or None, the manifest's files, that rank file's bytes or None)``.
    """
    try:
        manifest = json.loads((path / MANIFEST).read_text())
        files = manifest["files"]
        if not isinstance(files, dict) or not files:
            return f"{MANIFEST} lists no files", {}, None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return f"{MANIFEST} unreadable on rank {rank} ({exc})", {}, None
    if manifest.get("format") != SHARDED_FORMAT:
        return "not a sharded checkpoint (use CheckpointStore for whole-model ones)", files, None
    if manifest.get("step") != step:
        return f"manifest says step {manifest.get('step')!r}, directory says {step}", files, None
    if manifest.get("world_size") != world_size:
        return (f"saved by {manifest.get('world_size')} ranks, this run has {world_size} (the per-rank "
                "RNG and data position do not map onto a different world size)"), files, None
    for k, (name, expected) in enumerate(sorted(files.items())):
        if k % world_size != rank:
            continue
        try:
            size = (path / name).stat().st_size
        except OSError:
            return f"{name} is missing", files, None
        recorded = expected.get("size") if isinstance(expected, dict) else None
        if size != recorded:
            return f"{name} has {size} bytes, the manifest recorded {recorded}", files, None
    name = rank_file(rank)
    if checksum and name in files:  # an older checkpoint's own small file, read once, kept for the load
        from .dcp_io import read_verified

        try:
            return None, files, read_verified(path / name, files[name])
        except (OSError, ChecksumMismatch) as exc:
            return str(exc), files, None
    return None, files, None


def _checked_reader(path: Path, expected: dict[str, Any] | None, problem: str | None) -> Any:
    """A ``FileSystemReader`` of ``path`` that verifies every file it reads against ``expected``
    (None: sizes were checked, no checksums) and fails DCP's planning with ``problem`` when this
    rank's share did not verify: DCP gathers planning failures from every rank and raises them on
    all, so no rank loads a checkpoint that another rank found damaged."""
    from torch.distributed.checkpoint.metadata import Metadata

    from .dcp_io import VerifyingReader

    class CheckedReader(VerifyingReader):
        def read_metadata(self, *args: Any, **kwargs: Any) -> Any:
            if problem is not None:  # .metadata may be the damaged file: planning fails below instead
                return Metadata(state_dict_metadata={})
            return super().read_metadata(*args, **kwargs)

        def set_up_storage_reader(self, metadata: Any, is_coordinator: bool, *args: Any, **kwargs: Any) -> None:
            if problem is not None:
                raise ChecksumMismatch(problem)
            super().set_up_storage_reader(metadata, is_coordinator, *args, **kwargs)

    return CheckedReader(path, expected)


def load_verified(path: Path, step: int, template: dict[str, Any], *, rank: int, world_size: int,
                  verify: bool) -> dict[str, Any]:
    """Check this rank's share of the checkpoint at ``path`` (:func:`verify_share`), then DCP-load it
    into ``template``, each file's checksum verified as DCP reads it; this rank's own state from its
    DCP item, or (an older checkpoint) from its rank file.

    Raises:
        ChecksumMismatch: any rank's share did not verify, or a file DCP read is damaged (on every
            rank: DCP gathers the planning and read errors of all ranks).
        CheckpointError: DCP failed otherwise (the checkpoint does not match the model).
    """
    import torch
    import torch.distributed.checkpoint as dcp

    problem, files, raw = verify_share(path, step, rank=rank, world_size=world_size, checksum=verify)
    own_file = rank_file(rank) in files
    # DCP loads tensors in place; the dict is copied only to add this rank's own item, whose bytes
    # DCP puts in its place.
    sharded = template["sharded"] if own_file else dict(template["sharded"], **{rank_key(rank): b""})
    reader = _checked_reader(path, files if verify else None, problem)
    from torch.distributed.checkpoint.api import CheckpointException

    try:
        dcp.load(sharded, storage_reader=reader, no_dist=active_dist() is None)
    except (Exception, CheckpointException) as exc:  # CheckpointException is a BaseException
        mismatch = mismatch_in(exc)
        if mismatch is not None:
            raise ChecksumMismatch(mismatch) from exc
        raise CheckpointError(f"DCP load failed: {str(exc).splitlines()[0]}", path=path,
                              fix="the checkpoint does not match this model/optimizer; use the same "
                                  "configuration as the run that saved it") from exc
    if own_file:
        if raw is None:
            raw = (path / rank_file(rank)).read_bytes()
    else:
        raw = sharded[rank_key(rank)]
    rank_state = torch.load(io.BytesIO(raw), map_location="cpu", weights_only=False)
    return {"format": SHARDED_FORMAT, "step": step, "sharded": template["sharded"], "rank": rank_state}
