"""The public surface is frozen: ``lossguard.__all__`` and the CLI's verbs and flags.

Both are compared with the checked-in snapshot ``tests/data/public_api.json``, so adding, renaming or
removing a public name, a verb or a flag is a deliberate act. After such a change, regenerate the
snapshot and commit it with the change::

    LOSSGUARD_UPDATE_API=1 PYTHONPATH=src python -m pytest tests/test_public_api.py

Also: every public name resolves (the torch-backed ones raise the error naming the extra when torch
is missing), and ``import lossguard`` reads and analyses a real CSV log with torch blocked.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import lossguard
from lossguard.cli import build_parser
from lossguard.errors import MissingDependencyError

SNAPSHOT = Path(__file__).parent / "data" / "public_api.json"
REGENERATE = "LOSSGUARD_UPDATE_API=1 PYTHONPATH=src python -m pytest tests/test_public_api.py"
HAVE_TORCH = importlib.util.find_spec("torch") is not None


def _parser_shape(parser: argparse.ArgumentParser) -> dict:
    """Positionals (by name, in order), options (option strings -> takes a value or is a switch), sub-verbs."""
    shape: dict = {"positionals": [], "options": {}, "verbs": {}}
    for action in parser._actions:  # argparse keeps no public list of a parser's arguments
        if isinstance(action, argparse._SubParsersAction):
            shape["verbs"] = {name: _parser_shape(sub) for name, sub in sorted(action.choices.items())}
        elif action.option_strings:
            shape["options"][", ".join(action.option_strings)] = "switch" if action.nargs == 0 else "value"
        else:
            shape["positionals"].append(action.dest)
    shape["options"] = dict(sorted(shape["options"].items()))
    return shape


def current_api() -> dict:
    """The public surface as it is now, in the snapshot's shape."""
    return {"python": {"__all__": sorted(lossguard.__all__)}, "cli": _parser_shape(build_parser())}


def _diff(old, new, path="") -> list[str]:
    """Human-readable differences between two snapshots (added / removed / changed, by path)."""
    if isinstance(old, dict) and isinstance(new, dict):
        out = [f"removed {path}/{k}" for k in old if k not in new]
        out += [f"added {path}/{k}" for k in new if k not in old]
        for k in old.keys() & new.keys():
            out += _diff(old[k], new[k], f"{path}/{k}")
        return out
    if isinstance(old, list) and isinstance(new, list):
        out = [f"removed {path}: {x}" for x in old if x not in new]
        out += [f"added {path}: {x}" for x in new if x not in old]
        return out or ([f"reordered {path}: {old} -> {new}"] if old != new else [])
    return [] if old == new else [f"changed {path}: {old!r} -> {new!r}"]


def test_public_names_and_cli_flags_match_the_snapshot():
    now = current_api()
    if os.environ.get("LOSSGUARD_UPDATE_API") == "1":
        SNAPSHOT.write_text(json.dumps(now, indent=2) + "\n", encoding="utf-8")
    frozen = json.loads(SNAPSHOT.read_text(encoding="utf-8"))
    changes = _diff(frozen, now)
    assert not changes, (
        "the public API differs from tests/data/public_api.json:\n  " + "\n  ".join(sorted(changes))
        + f"\nIf the change is deliberate, regenerate the snapshot and commit it:\n  {REGENERATE}")


def test_the_snapshot_covers_the_names_users_need():
    """The names the README's examples and the issue ask for are public (not only whatever is frozen)."""
    needed = {"StabilityGuard", "GuardConfig", "CheckpointStore", "ShardedCheckpointStore", "ResumableSampler",
              "TrainingHalted", "read_log", "analyze", "stitch", "simulate", "RunLog", "Incident", "IncidentKind",
              "LossguardError", "Analysis"}
    assert needed <= set(lossguard.__all__)
    assert set(lossguard._LAZY) <= set(lossguard.__all__) <= set(dir(lossguard))
    assert len(set(lossguard.__all__)) == len(lossguard.__all__)
    assert {"analyze", "info", "report", "simulate", "watch"} <= set(current_api()["cli"]["verbs"])


@pytest.mark.parametrize("name", sorted(lossguard.__all__))
def test_every_public_name_resolves(name):
    try:
        value = getattr(lossguard, name)
    except MissingDependencyError as exc:
        assert not HAVE_TORCH, f"{name} failed although torch is installed: {exc}"
        assert "lossguard[torch]" in str(exc)
        return
    assert value is not None
    if name != "__version__":
        assert getattr(value, "__doc__", None), f"{name} has no docstring"
    if callable(value) and not isinstance(value, type):
        assert value.__module__.startswith("lossguard."), (name, value.__module__)  # the function, not its module


# Runs in a fresh interpreter where every import of torch fails, as on a machine without it.
_NO_TORCH = textwrap.dedent("""
    import importlib.abc, json, sys

    class BlockTorch(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in ("torch", "torchdata"):
                raise ImportError(f"No module named {name!r} (blocked by the test)")
            return None

    sys.meta_path.insert(0, BlockTorch())
    import lossguard
    from lossguard import GuardConfig, analyze, read_log, simulate
    from lossguard.cli import main
    from lossguard.errors import MissingDependencyError

    path = sys.argv[1]
    analysis = analyze(read_log(path))
    sim = simulate(read_log(path), GuardConfig())
    rc_analyze = main(["analyze", path, "--json"])
    rc_simulate = main(["simulate", path])
    try:
        from lossguard import StabilityGuard
        guard_error = None
    except MissingDependencyError as exc:
        guard_error = str(exc)
    print(json.dumps({"incidents": [[i.kind.value, i.onset, i.peak] for i in analysis.incidents],
                      "decisions": len(sim.decisions), "rc": [rc_analyze, rc_simulate],
                      "guard_error": guard_error, "torch_imported": "torch" in sys.modules}))
""")


def test_log_path_works_with_torch_blocked(real_logs, tmp_path):
    path = real_logs / "megatron_mixtral8x7b_v0p8_a100.csv"
    proc = subprocess.run([sys.executable, "-c", _NO_TORCH, str(path)], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["torch_imported"] is False
    assert result["rc"] == [0, 0]
    assert result["guard_error"] and "lossguard[torch]" in result["guard_error"]
    # the same analysis as with torch importable: 7 known spikes of this log, found without torch
    expected = [[i.kind.value, i.onset, i.peak] for i in lossguard.analyze(lossguard.read_log(path)).incidents]
    assert result["incidents"] == expected and len(expected) >= 7
