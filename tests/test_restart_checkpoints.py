"""Where a relaunched HF / Lightning run resumes: the framework's checkpoints seen as a store (complete
ones only), and the run ledger's ``resume_from`` taking precedence over the newest checkpoint."""
from __future__ import annotations

import pytest

from lossguard.errors import ConfigError
from lossguard.integrations._checkpoints import FrameworkCheckpoints, resume_checkpoint
from lossguard.recovery.ledger import LEDGER_FILE, RunLedger


def _hf_checkpoint(root, step, complete=True):
    d = root / f"checkpoint-{step}"
    d.mkdir(parents=True)
    (d / "model.safetensors").write_bytes(b"w")
    if complete:
        (d / "trainer_state.json").write_text("{}")


def test_hf_checkpoints_listed_only_when_complete(tmp_path):
    for step in (25, 50):
        _hf_checkpoint(tmp_path, step)
    _hf_checkpoint(tmp_path, 75, complete=False)  # killed while HF was writing it
    (tmp_path / "tmp-checkpoint-100").mkdir()
    ck = FrameworkCheckpoints(tmp_path, "hf")
    assert ck.steps() == [25, 50]
    assert ck.newest_at_or_before(60) == 50 and ck.newest_at_or_before(10) is None
    assert ck.path_of(25) == tmp_path / "checkpoint-25"
    assert resume_checkpoint(tmp_path, "hf") == str(tmp_path / "checkpoint-50")


def test_lightning_step_names_and_the_ledger_target_wins(tmp_path):
    for name in ("step=20.ckpt", "epoch=0-step=40.ckpt", "last.ckpt", "step=60.txt"):
        (tmp_path / name).write_bytes(b"c")
    ck = FrameworkCheckpoints(tmp_path, "lightning")
    assert ck.steps() == [20, 40]
    assert resume_checkpoint(tmp_path, "lightning") == str(tmp_path / "epoch=0-step=40.ckpt")
    ledger = RunLedger()
    ledger.resume_from = 20
    ledger.save(tmp_path / LEDGER_FILE)
    assert resume_checkpoint(tmp_path, "lightning") == str(tmp_path / "step=20.ckpt")


def test_fresh_start_and_bad_kind(tmp_path):
    assert resume_checkpoint(tmp_path / "nothing-yet", "hf") is None
    with pytest.raises(ConfigError, match="kind"):
        FrameworkCheckpoints(tmp_path, "deepspeed")
