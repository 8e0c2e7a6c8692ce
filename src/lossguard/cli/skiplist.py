"""``lossguard skiplist FILE [show|add|remove] [ID...]``: read or edit a run's skip list.

``FILE`` is a ``skiplist.json`` (the guard writes one beside its checkpoints) or a checkpoint
directory holding one. ``show`` (the default) lists the samples and why each is there (``--json``:
the file's entries); ``add ID... --reason TEXT`` and ``remove ID...`` change it atomically, creating
the file for ``add``. An ID is a dataset index (``81234``) or, in a mix, ``NAME:INDEX``
(``code:77``). Exit 0, or 2 on a bad file or ID (nothing written).
"""
from __future__ import annotations

import json
from pathlib import Path

from ..data.sample_ids import SampleKey
from ..data.skiplist import SKIPLIST_FILE, SkipList
from ..errors import LossguardError


def register(subparsers) -> None:
    """Add the ``skiplist`` verb."""
    p = subparsers.add_parser(
        "skiplist", help="show or edit a run's skip list (samples the guard named, or you listed)",
        description="Show or edit a skip list of absolute sample ids (dataset index, or NAME:INDEX in a mix). "
                    "The ResumableSampler and the HF/Lightning callbacks leave listed samples out of every batch.")
    p.add_argument("path", metavar="FILE|DIR", help="a skiplist.json, or the checkpoint directory holding it")
    p.add_argument("action", nargs="?", default="show", choices=("show", "add", "remove"))
    p.add_argument("ids", nargs="*", metavar="ID", help="sample ids: INDEX or NAME:INDEX")
    p.add_argument("--reason", default="added by hand", help="why (stored with each added id)")
    p.add_argument("--json", action="store_true", help="show: print the entries as JSON")
    p.set_defaults(handler=run)


def _path(text: str) -> Path:
    p = Path(text)
    return p / SKIPLIST_FILE if p.is_dir() else p


def run(args) -> int:
    """Carry out the verb; returns the exit code."""
    path = _path(args.path)
    keys = [SampleKey.from_json(int(i) if i.isdigit() else i) for i in args.ids]  # all parsed before any write
    if args.action != "show" and not keys:
        raise LossguardError(f"'{args.action}' needs at least one sample id",
                             fix="e.g. lossguard skiplist DIR add 81234")
    if args.action == "add":
        sl = SkipList.open(path)
        new = sl.add(keys, reason=args.reason)
        print(f"added {len(new)} sample(s); {len(sl)} listed in {path}")
        return 0
    if not path.exists():
        raise LossguardError("no skip list here", path=path,
                             fix="give a skiplist.json or the checkpoint directory holding one")
    sl = SkipList.load(path)
    if args.action == "remove":
        gone = sl.remove(keys)
        missing = [str(k) for k in keys if k not in gone]
        print(f"removed {len(gone)} sample(s); {len(sl)} listed in {path}"
              + (f" (not listed: {', '.join(missing)})" if missing else ""))
        return 0
    if args.json:
        print(json.dumps(sl.to_dict()["samples"], indent=1))
        return 0
    print(f"{len(sl)} sample(s) listed in {path}")
    for k in sl.keys():
        note = sl.note(k)
        step = f"step {note['step']}: " if "step" in note else ""
        print(f"  {str(k):>16}  {step}{note.get('reason', '')}")
    return 0
