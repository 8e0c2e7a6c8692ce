"""Sample naming under a framework that owns the loader: find the ResumableSampler, share the skip list."""
from __future__ import annotations


def find_sampler(loader):
    """The :class:`ResumableSampler` feeding ``loader`` (as its ``batch_sampler`` or ``sampler``), or None.

    Frameworks may wrap the loader (Lightning's ``CombinedLoader``); ``.loaders`` / ``.iterables``
    are looked through.
    """
    from ..data.sampler import ResumableSampler

    for cand in (loader, getattr(loader, "loaders", None), getattr(loader, "iterables", None)):
        for obj in (cand if isinstance(cand, (list, tuple)) else [cand]):
            for s in (getattr(obj, "batch_sampler", None), getattr(obj, "sampler", None)):
                if isinstance(s, ResumableSampler):
                    return s
    return None


def attach_skiplist(namer, loader) -> None:
    """Give the loader's ResumableSampler the run's skip list, once (unless it has one of its own,
    which the namer then adds to)."""
    if getattr(namer, "_attached", False):
        return
    namer._attached = True
    s = find_sampler(loader)
    if s is None:
        return
    if s.skiplist is None:
        s.skiplist = namer.skiplist
    else:
        namer.skiplist = s.skiplist
