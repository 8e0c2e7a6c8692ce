"""Heartbeat: a rank that stops beating is ended with ExitCode.HANG; a beating or paused one is not."""
from __future__ import annotations

import subprocess
import sys
import textwrap
import time

import pytest

from lossguard.distributed.heartbeat import Heartbeat, HeartbeatConfig
from lossguard.distributed.restart import ExitCode
from lossguard.errors import ConfigError


def _fake_exit(codes):
    return lambda code: codes.append(code)


def test_silence_longer_than_the_timeout_fires_with_the_hang_code():
    codes = []
    hb = Heartbeat(HeartbeatConfig(timeout_s=0.3, check_every_s=0.05), exit=_fake_exit(codes)).start()
    t0 = time.monotonic()
    assert hb.fired.wait(3.0)
    assert 0.3 <= time.monotonic() - t0 < 2.0
    assert codes == [ExitCode.HANG] == [76]
    hb.stop()


def test_beating_and_pausing_keep_it_quiet():
    codes = []
    hb = Heartbeat(HeartbeatConfig(timeout_s=0.3, check_every_s=0.05), exit=_fake_exit(codes)).start()
    for _ in range(12):  # 0.6 s of steps, each shorter than the timeout
        time.sleep(0.05)
        hb.beat()
    with hb.paused():  # a known long operation: 0.6 s without a beat
        time.sleep(0.6)
    time.sleep(0.1)
    hb.stop()
    assert codes == [] and not hb.fired.is_set()


def test_config_errors_name_the_field():
    with pytest.raises(ConfigError) as err:
        HeartbeatConfig(timeout_s=0, check_every_s=-1, exit_code=137)
    text = str(err.value)
    assert "timeout_s" in text and "check_every_s" in text and "exit_code" in text
    assert HeartbeatConfig(timeout_s=50).interval == 5.0


def test_a_stuck_process_really_exits_with_76_and_its_stacks():
    script = textwrap.dedent("""
        import time
        from lossguard.distributed.heartbeat import Heartbeat, HeartbeatConfig
        Heartbeat(HeartbeatConfig(timeout_s=0.5, check_every_s=0.1), rank=3).start()
        def stuck_in_a_collective():
            time.sleep(60)
        stuck_in_a_collective()
    """)
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 76
    assert time.monotonic() - t0 < 30
    assert "rank 3 made no progress" in proc.stderr and "stuck_in_a_collective" in proc.stderr
