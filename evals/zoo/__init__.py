"""A model zoo for the guard: several small model families, healthy and faulty, guarded or not.

Each run is a :class:`RunSpec` (family, seed, batch size, optimizer, schedule, scenario, guarded) and
:func:`run` trains it on one thread in a few seconds and returns an :class:`Outcome` (final held-out
loss, skips, rollbacks, LR cuts, halts). ``benchmarks/zoo.py`` runs the whole grid; the tests run a
fast slice. Families (one file each):

- tuned (the guard's thresholds may be chosen on them): ``mlp``, ``cnn``, ``gpt`` (lossguard's tiny
  GPT), ``encoder`` (a 2-layer ``nn.TransformerEncoder`` classifier);
- held out of all tuning, reported separately: ``lstm`` and ``hf_gpt2`` (GPT-2 under
  ``transformers.Trainer`` with the HF ``StabilityCallback``).

Needs torch (and transformers for ``hf_gpt2``); the guard is touched only through :mod:`.adapter`.
"""
from __future__ import annotations

from lossguard.errors import require

require("torch", "torch", "the guard's model zoo")

from evals.zoo import cnn, encoder, gpt, hf_gpt2, lstm, mlp  # noqa: E402
from evals.zoo.family import Family, Trainer  # noqa: E402
from evals.zoo.spec import Optim, Outcome, RunSpec, Scenario, Schedule  # noqa: E402

FAMILIES: dict[str, Family] = {f.name: f for f in (mlp.FAMILY, cnn.FAMILY, gpt.FAMILY, encoder.FAMILY,
                                                   lstm.FAMILY, hf_gpt2.FAMILY)}
"""Every family of the zoo, by name."""


def run(spec: RunSpec, *, config=None, workdir=None, record: bool = False) -> Outcome:
    """Train ``spec`` (one thread) and return its :class:`Outcome`.

    Args:
        spec: the run.
        config: the ``GuardConfig`` of a guarded run; None = the guard's defaults.
        workdir: directory for the guard's checkpoints and log; None = a temporary one.
        record: keep the per-step loss and gradient norm of an unguarded plain-loop run.
    """
    import torch

    from lossguard.errors import ConfigError

    if spec.family not in FAMILIES:
        raise ConfigError(f"unknown zoo family {spec.family!r}", fix=f"use one of {', '.join(FAMILIES)}")
    torch.set_num_threads(1)
    family = FAMILIES[spec.family]
    if family.trainer is Trainer.HF:
        if spec.oracle:
            raise ConfigError(f"the oracle control drops batches from a plain loop; {spec.family} runs under "
                              "transformers.Trainer", fix="use oracle=True with a plain-loop family")
        from evals.zoo.hf_loop import run_hf
        return run_hf(spec, family, config=config, workdir=workdir)
    from evals.zoo.loop import run_plain
    return run_plain(spec, family, config=config, workdir=workdir, record=record)


__all__ = ["FAMILIES", "Family", "Optim", "Outcome", "RunSpec", "Scenario", "Schedule", "Trainer", "run"]
