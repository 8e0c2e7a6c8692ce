"""TensorBoard files from ``torch.utils.tensorboard.SummaryWriter`` and ``tensorboardX``, written the
way training loops write them: bookkeeping tags re-logged at one step, a value logged twice before
the step advances, a launch that crashed and was resumed from an earlier step into a new file, and
a writer whose steps go back inside one file.

The rule under test: only a step going strictly backwards, on the run's main metrics, is a
restart; a repeated step keeps the last value written (what TensorBoard shows).
"""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from lossguard.io import read_log
from lossguard.metrics import EPOCH, LOSS, LR

WRITERS = []
try:
    from torch.utils.tensorboard import SummaryWriter as TorchWriter

    WRITERS.append(pytest.param(TorchWriter, id="torch"))
except ImportError:  # pragma: no cover - torch is in the test extra
    pass
try:
    from tensorboardX import SummaryWriter as XWriter

    WRITERS.append(pytest.param(XWriter, id="tensorboardX"))
except ImportError:  # pragma: no cover
    pass

pytestmark = pytest.mark.skipif(not WRITERS, reason="no TensorBoard writer installed")


def _loss(step: int, launch: int) -> float:
    return 3.0 - 0.01 * step + 0.5 * launch  # the two launches differ, so a mix-up shows


def _launch(writer_cls, logdir: Path, steps: range, launch: int) -> None:
    w = writer_cls(str(logdir))
    for s in steps:
        w.add_scalar("train/loss", _loss(s, launch), s)
        w.add_scalar("train/lr", 1e-3, s)
        w.add_scalar("epoch", s // 20, s)
        if s % 10 == 0:  # Lightning-style: epoch again with each validation log, at the same step
            w.add_scalar("val_loss", 2.0, s)
            w.add_scalar("epoch", s // 20, s)
            w.add_scalar("epoch", s // 20, s)
    w.close()


@pytest.mark.parametrize("writer_cls", WRITERS)
def test_crash_and_resume_into_a_new_file(writer_cls, tmp_path):
    _launch(writer_cls, tmp_path, range(0, 50), launch=0)
    time.sleep(1.1)  # writers name their files to the second
    _launch(writer_cls, tmp_path, range(40, 60), launch=1)
    log = read_log(tmp_path)
    assert [g.kind for g in log.segments] == ["start", "rollback"]
    assert set(log.series) == {LOSS, LR, EPOCH, "val_loss"}
    steps, values = log.live(LOSS)
    assert steps.tolist() == list(range(60))
    np.testing.assert_array_equal(values.astype(np.float32),
                                  np.float32([_loss(s, 0 if s < 40 else 1) for s in range(60)]))
    assert len(log.series[LOSS]) == 70 and int((~log.series[LOSS].alive).sum()) == 10
    assert log.live("val_loss")[0].tolist() == [0, 10, 20, 30, 40, 50]
    assert log.live(EPOCH)[0].tolist() == list(range(60))  # one point per step: the last one written


@pytest.mark.parametrize("writer_cls", WRITERS)
def test_repeated_step_keeps_the_last_value(writer_cls, tmp_path):
    w = writer_cls(str(tmp_path))
    for s in range(5):
        w.add_scalar("loss", 1.0, s)
        w.add_scalar("loss", 2.0 + s, s)  # logged again before the step advanced
    w.close()
    log = read_log(tmp_path)
    assert len(log.segments) == 1
    steps, values = log.live(LOSS)
    assert steps.tolist() == [0, 1, 2, 3, 4] and values.tolist() == [2.0, 3.0, 4.0, 5.0, 6.0]


@pytest.mark.parametrize("writer_cls", WRITERS)
def test_steps_going_back_inside_one_file_is_a_restart(writer_cls, tmp_path):
    """One writer kept open across a rollback (``fit`` called again in one process)."""
    w = writer_cls(str(tmp_path))
    for s in list(range(0, 30)) + list(range(20, 40)):
        w.add_scalar("loss", float(s), s)
        w.add_scalar("epoch", s // 10, s)
        w.add_scalar("epoch", s // 10, s)  # re-logged at the same step: not a restart
    w.close()
    log = read_log(tmp_path)
    assert [g.kind for g in log.segments] == ["start", "rollback"]
    assert log.segments[1].first_step == 20
    assert log.live(LOSS)[0].tolist() == list(range(40))
