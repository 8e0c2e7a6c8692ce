"""The library reports through one logger per module, never by printing to stderr, and adds no
handler of its own: with logging left unconfigured its warnings still reach stderr, worded as before
(logging's last-resort handler); an application that configures logging decides where they go."""
from __future__ import annotations

import ast
import logging
import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "lossguard"


def _library_modules() -> list[Path]:
    """Every module of the package but the CLI's (the command's own output is printed)."""
    return sorted(p for p in SRC.rglob("*.py") if "cli" not in p.relative_to(SRC).parts)


def _is_sys_stderr(node: ast.AST) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr in ("stderr", "__stderr__")
            and isinstance(node.value, ast.Name) and node.value.id == "sys")


def test_library_modules_neither_print_to_stderr_nor_name_a_shared_logger():
    found = []
    for path in _library_modules():
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if not isinstance(node, ast.Call):
                continue
            where = f"{path.relative_to(SRC)}:{node.lineno}"
            func = node.func
            if isinstance(func, ast.Name) and func.id == "print":
                if any(k.arg == "file" and _is_sys_stderr(k.value) for k in node.keywords):
                    found.append(f"{where}: print(..., file=sys.stderr)")
            elif isinstance(func, ast.Attribute) and func.attr == "write" and _is_sys_stderr(func.value):
                found.append(f"{where}: sys.stderr.write")
            elif isinstance(func, ast.Attribute) and func.attr == "getLogger":
                if not (len(node.args) == 1 and isinstance(node.args[0], ast.Name) and node.args[0].id == "__name__"):
                    found.append(f"{where}: getLogger without __name__")
    assert found == [], found


def test_the_library_adds_no_handler():
    import lossguard.distributed.heartbeat  # noqa: F401 - each logs on its own module's logger
    import lossguard.integrations._halt  # noqa: F401
    import lossguard.watch.alerts  # noqa: F401

    names = [n for n in logging.root.manager.loggerDict if n == "lossguard" or n.startswith("lossguard.")]
    assert "lossguard.watch.alerts" in names and "lossguard.integrations._halt" in names
    for name in names:
        assert getattr(logging.getLogger(name), "handlers", []) == [], name


def test_unconfigured_a_warning_reaches_stderr_worded_as_before():
    script = ("from lossguard.watch.alerts import HookConfig, HookRunner\n"
              "HookRunner(HookConfig()).report('hook queue full; not delivering incident at step 7')\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stderr == "lossguard watch: hook queue full; not delivering incident at step 7\n"
    assert done.stdout == ""
