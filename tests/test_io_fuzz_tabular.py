"""Hypothesis: random and mutated bytes into every tabular reader and into read_log.

A reader may return a RunLog or raise a LossguardError; anything else escaping is a bug.
Seeds are valid files of each format; mutations flip, insert, delete and truncate bytes.
"""
from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lossguard.errors import LossguardError
from lossguard.io import csv as csv_reader
from lossguard.io import hf_trainer_state, jsonl, lightning, pasted, read_log, wandb
from lossguard.runlog import RunLog

SEEDS = {
    "csv": b"step,loss,grad_norm,lr,segment\n1,2.5,0.3,1e-4,a\n2,nan,,1e-4,a\n2,2.4,0.2,1e-4,b\n3,2.6,inf,1e-4,b\n",
    "tsv": b"iteration\tlm loss\tloss scale\n10\t2.1\t4096\n20\t2.0\t2048\n",
    "jsonl": (b'{"step": 1, "loss": 2.5, "lr": 0.001}\n{"step": 2, "loss": NaN}\n'
              b'{"step": 2, "event": "rollback", "to_step": 1}\n{"step": 2, "loss": 2.4, "time": 5.0}\n'),
    "hf": json.dumps({"global_step": 4, "log_history": [
        {"epoch": 0.5, "grad_norm": 1.0, "learning_rate": 1e-4, "loss": 2.0, "step": 2},
        {"epoch": 0.5, "eval_loss": 1.9, "step": 2},
        {"epoch": 1.0, "step": 4, "train_loss": 2.0, "train_runtime": 1.0}]}, indent=2).encode(),
    "lightning": b"epoch,step,train_loss,val_loss\r\n0,0,1.5,\r\n0,1,1.2,\r\n0,1,,1.1\r\n",
    "wandb_csv": b'"Step","r - train/loss","r - train/loss__MIN","r - train/loss__MAX"\n"1","2.0","1.9","2.1"\n',
    "wandb_json": b'[{"_step": 0, "_runtime": 1.0, "_timestamp": 1700000000.0, "train/loss": 2.0}]',
    "pasted": (b"> iter 10: loss 2.5, time 95.1ms, mfu 12.3%\r 10%|#  | 1/10\n{'loss': nan, 'grad_norm': inf, 'epoch': 0.1}\n"
               b"[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 64, reducing to 32\n"
               b"Epoch [1][100/500]\tlr: 1.0e-04, loss: 2.44\nstep:5/100 train_loss:4.1 step_avg:nanms\n"),
}
READERS = {"csv": csv_reader.read, "jsonl": jsonl.read, "hf": hf_trainer_state.read, "lightning": lightning.read,
           "wandb": wandb.read, "pasted": pasted.read, "read_log": read_log}

FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                       HealthCheck.too_slow])


def _mutate(data: bytes, ops: list[tuple[int, int, int]]) -> bytes:
    b = bytearray(data)
    for kind, pos, val in ops:
        if not b:
            b.append(val)
            continue
        i = pos % len(b)
        if kind == 0:
            b[i] = val
        elif kind == 1:
            b.insert(i, val)
        elif kind == 2:
            del b[i]
        else:
            del b[i:]
    return bytes(b)


_DIR = Path(tempfile.mkdtemp(prefix="lossguard-fuzz-"))


def _check(data: bytes, suffix: str) -> None:
    p = _DIR / f"f{suffix}"
    p.write_bytes(data)
    for name, read in READERS.items():
        try:
            out = read(p)
        except LossguardError:
            continue
        assert isinstance(out, RunLog), name
        out.summary()  # a log that was read must also describe itself


mutations = st.lists(st.tuples(st.integers(0, 3), st.integers(0, 10_000), st.integers(0, 255)), min_size=1,
                     max_size=6)


@FUZZ
@given(data=st.binary(max_size=400), suffix=st.sampled_from([".csv", ".jsonl", ".json", ""]))
def test_random_bytes(data, suffix):
    _check(data, suffix)


@FUZZ
@given(seed=st.sampled_from(sorted(SEEDS)), ops=mutations)
def test_mutated_valid_files(seed, ops):
    _check(_mutate(SEEDS[seed], ops), ".csv" if "csv" in seed else ".json")


@FUZZ
@given(text=st.text(alphabet=st.sampled_from(list('step,los\n\t"{}[]:01-.e9naif ')), max_size=200))
def test_structured_garbage(text):
    _check(text.encode(), ".csv")


@pytest.mark.parametrize("seed", sorted(SEEDS))
def test_seeds_are_valid(seed):
    p = _DIR / f"seed_{seed}"
    p.write_bytes(SEEDS[seed])
    assert read_log(p).metrics
