"""Capture and restore every global random number generator a training step can draw from.

A resumed run must draw exactly the random numbers the uninterrupted run would have drawn
(dropout masks, random crops, shuffles that use the global RNG). That means four generators:
Python's ``random``, NumPy's legacy global ``np.random``, torch's CPU generator and, where CUDA is
present, every CUDA device's generator.

The captured dict holds only ints, strings, tuples, lists and tensors, so it loads with
``torch.load(weights_only=True)``. Where torch is importable, the two long integer sequences --
Python's 625-word state and NumPy's 624-word key -- are int64 tensors: ``torch.save`` calls a
Python hook for every object it pickles, so as ~1,250 ints they were most of a sharded save's
per-rank state (0.5 of 0.6 ms per save, issue 23). Without torch they are lists; :func:`restore_rng`
takes either, and the lists of a format-1 capture.
"""
from __future__ import annotations

import random
from typing import Any

import numpy as np

from ..errors import CheckpointError

#: Version of the captured layout; bump when the layout changes (2: the integer sequences as int64
#: tensors where torch is importable; 1: as lists).
RNG_FORMAT = 2


def _ints(seq: Any) -> list[int]:
    """An integer sequence of a capture as a list of Python ints (a tensor, an array or a list)."""
    return seq.tolist() if hasattr(seq, "tolist") else [int(v) for v in seq]


def capture_rng() -> dict[str, Any]:
    """Snapshot the state of every global RNG.

    Returns:
        ``{"format", "python", "numpy", "torch", "cuda"}``; ``"torch"``/``"cuda"`` are absent when
        torch is not importable, ``"cuda"`` is an empty list on a machine without CUDA.
    """
    np_state = np.random.get_state(legacy=False)
    version, words, gauss = random.getstate()
    key = np_state["state"]["key"].astype(np.int64)  # uint32[624]; int64 keeps every value exactly
    try:
        import torch
    except ImportError:  # log-analysis installs have no torch: lists, and no torch generator
        torch = None  # type: ignore[assignment]
    state: dict[str, Any] = {
        "format": RNG_FORMAT,
        # 625 words below 2**32 (the last one the position): exact in int64, and one object to pickle
        "python": (version, words if torch is None else torch.tensor(words, dtype=torch.int64), gauss),
        "numpy": {
            "bit_generator": np_state["bit_generator"],
            "key": key.tolist() if torch is None else torch.from_numpy(key),
            "pos": int(np_state["state"]["pos"]),
            "has_gauss": int(np_state["has_gauss"]),
            "gauss": float(np_state["gauss"]),
        },
    }
    if torch is None:
        return state
    state["torch"] = torch.get_rng_state()
    # get_rng_state_all() would initialise CUDA; only touch it when CUDA is already usable.
    state["cuda"] = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []
    return state


def restore_rng(state: dict[str, Any]) -> None:
    """Put every global RNG back to a state captured by :func:`capture_rng`.

    Args:
        state: the dict :func:`capture_rng` returned (possibly after a save/load round trip).

    Raises:
        CheckpointError: the dict is not an RNG snapshot, or holds CUDA states for a different
            number of devices than this machine has.
    """
    if not isinstance(state, dict) or "python" not in state or "numpy" not in state:
        keys = sorted(state) if isinstance(state, dict) else type(state).__name__
        raise CheckpointError(f"not an RNG snapshot (keys: {keys})",
                              fix="pass the 'rng' entry of a TrainState checkpoint")
    py = state["python"]
    # torch.save turns the tuple into a tuple again, but JSON or other round trips give lists.
    random.setstate((py[0], tuple(_ints(py[1])), py[2]))
    nps = state["numpy"]
    np.random.set_state({
        "bit_generator": nps["bit_generator"],
        "state": {"key": np.asarray(_ints(nps["key"]), dtype=np.uint32), "pos": int(nps["pos"])},
        "has_gauss": int(nps["has_gauss"]),
        "gauss": float(nps["gauss"]),
    })
    if "torch" not in state:
        return
    import torch

    torch.set_rng_state(state["torch"])
    cuda = state.get("cuda") or []
    if cuda:
        if not torch.cuda.is_available() or torch.cuda.device_count() != len(cuda):
            have = torch.cuda.device_count() if torch.cuda.is_available() else 0
            raise CheckpointError(
                f"the checkpoint holds RNG states for {len(cuda)} CUDA device(s), this process sees {have}",
                fix="resume with the same number of visible GPUs (CUDA_VISIBLE_DEVICES), or drop "
                    "state['rng']['cuda'] to accept different random numbers")
        torch.cuda.set_rng_state_all(cuda)
