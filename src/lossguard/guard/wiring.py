"""How :class:`StabilityGuard` picks its parts from its arguments: the gate, the judge, the state.

Kept apart from the guard so its constructor reads as a list of parts; each choice here is one
rule, named.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from ..recovery.ledger import LEDGER_FILE, RunLedger
from .config import GuardConfig
from .judge.twins import DeviceJudge, HostJudge


def choose_gate(config: GuardConfig, optimizer: Any) -> str:
    """``"device"`` (the optimizer applies or skips the update itself, no sync) or ``"host"``.

    Raises:
        ConfigError: ``gate='device'`` with an optimizer whose ``step()`` takes no ``gate=``.
    """
    from .gate import supports_device_gate

    if config.gate == "device" and not supports_device_gate(optimizer):
        from ..errors import ConfigError
        raise ConfigError(f"gate='device' needs an optimizer whose step() takes gate=; "
                          f"{type(optimizer).__name__} does not",
                          fix="use lossguard.guard.SkipStepAdamW, or gate='host'")
    auto_device = config.gate == "auto" and supports_device_gate(optimizer)
    return "device" if config.gate == "device" or auto_device else "host"


def make_judge(config: GuardConfig, device: Any, *, has_scaler: bool) -> HostJudge | DeviceJudge:
    """The host judge (``stats='host'``, or ``'auto'`` on CPU) or the device judge."""
    if judges_on_host(config, device):
        return HostJudge(config.loss, config.grad_norm, evidence=config.evidence, has_scaler=has_scaler,
                         shadow=config.shadow)
    return DeviceJudge(config.loss, config.grad_norm, device=device, evidence=config.evidence,
                       has_scaler=has_scaler, shadow=config.shadow)


def judges_on_host(config: GuardConfig, device: Any) -> bool:
    """The statistics live on the host: ``stats='host'``, or ``'auto'`` with parameters on the CPU."""
    return config.stats == "host" or (config.stats == "auto" and device.type == "cpu")


def defers_host_read(config: GuardConfig, device: Any, *, attribution: bool) -> bool:
    """Read each step's verdict one step late (``defer_host_read``; default: on CUDA without
    ``attribution``, which must replay a withheld batch before the next update). Only when the
    statistics live on the device: a host judge has the verdict at once."""
    if judges_on_host(config, device):
        return False
    if config.defer_host_read is not None:
        return config.defer_host_read
    return device.type == "cuda" and not attribution


def open_ledger(ledger: RunLedger | None, store: Any) -> RunLedger:
    """The ledger given, else ``<store>/ledger.json`` (an existing one is loaded), else one in memory.

    Raises:
        TrainingHalted: the ledger says the run was halted (a relaunch after a halt): the halt is
            final until a person clears it (:mod:`lossguard.guard.halted`).
    """
    if ledger is None:
        ledger = RunLedger.open(Path(store.directory) / LEDGER_FILE if store is not None else None)
    if ledger.halted:
        from .halted import halted_error
        raise halted_error(ledger)
    return ledger


def world_and_rank() -> tuple[int, int]:
    """``(world size, this rank)`` under an initialised ``torch.distributed``, else ``(1, 0)``."""
    import torch

    dist = torch.distributed
    world = dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1
    return world, dist.get_rank() if world > 1 else 0


def make_namer(attribution: Any, **parts: Any) -> Any:
    """The :class:`SampleNamer` for ``attribution`` (None without one); ``parts`` are
    :meth:`SampleNamer.build`'s keyword arguments."""
    if attribution is None:
        return None
    from .sample_namer import SampleNamer
    return SampleNamer.build(attribution, **parts)


def make_train_state(model: Any, optimizer: Any, *, store: Any, scheduler: Any, scaler: Any, sampler: Any,
                     timeline: Any) -> Any:
    """The state every checkpoint holds, the guard's timeline among its extras: a
    :class:`ShardedTrainState` for a sharded store (DCP), else a :class:`TrainState` of the
    unwrapped model (a DDP wrapper's ``.module``)."""
    if store is not None and store.sharded:
        from ..checkpoint.sharded_state import ShardedTrainState
        return ShardedTrainState(model, optimizer, scheduler=scheduler, scaler=scaler, data=sampler,
                                 extras={"guard": timeline})
    from ..checkpoint.state import TrainState
    return TrainState(getattr(model, "module", model), optimizer, scheduler=scheduler, scaler=scaler,
                      data=sampler, extras={"guard": timeline})


def diagnosis_file(log_path: Any, diagnosis_path: Any, store: Any) -> Path | None:
    """Where a halt writes its diagnosis: the path given, else ``<log>.halt.txt`` beside the log,
    else ``<store>/HALT.txt``, else nowhere."""
    if diagnosis_path is not None:
        return Path(diagnosis_path)
    if log_path is not None:
        return Path(log_path).with_name(Path(log_path).stem + ".halt.txt")
    return Path(store.directory) / "HALT.txt" if store is not None else None
