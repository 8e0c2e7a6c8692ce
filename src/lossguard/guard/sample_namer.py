"""Naming the samples of a withheld step: the guard's hook around :mod:`.attribution`.

    guard = StabilityGuard(model, opt, store=store, sampler=sampler,
                           attribution=SampleAttribution(per_sample_loss=per_row_loss))

When the guard withholds a step it calls :meth:`SampleNamer.name` with the batch it handed to the
loop (it keeps a reference, no copy) and the RNG state of that step's forward. The namer replays the
batch, names the samples carrying the excess, writes a ``suspects`` record to the guard's log and
the run ledger, and puts the named samples on the run's :class:`SkipList` (``<store>/skiplist.json``),
which the :class:`ResumableSampler` honours from the next batch on, after a rollback, a resume, or a
relaunch with another batch size or world size.

Under DDP every rank replays its own slice of the batch on the unwrapped module (no collective in
the replay itself); two ``all_gather_object`` calls then give every rank the same findings, so all
ranks list the same samples.

Where it cannot name (no per-sample loss function; no sample ids because the loader has no
positions, e.g. an iterable dataset, and ``ids_of`` is not given), the record says why: the rows
that carry the excess are still given where the batch itself is at hand.
"""
from __future__ import annotations

import enum
import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from ..data.sample_ids import DatasetMix, key_of
from ..data.skiplist import SKIPLIST_FILE, SkipList
from ..errors import ConfigError, raise_all
from ..recovery.suspects import SUSPECTS_EVENT, summary_lines
from .attribution import Finding, gradient_findings, isolated, loss_findings, per_sample_losses, select_rows
from .micro_batches import MicroBatches



class NameMethod(enum.Enum):
    """How the namer measures the samples."""

    AUTO = "auto"
    """Per-sample losses when the loss test fired and the named samples explain the excess
    (:attr:`SampleAttribution.explains`); else gradient bisection."""
    LOSS = "loss"
    """Per-sample losses only (one forward); names nobody on a step whose loss did not rise."""
    GRADIENT = "gradient"
    """Gradient bisection only."""


@dataclass(kw_only=True)
class SampleAttribution:
    """What the guard needs to name the samples of a spike, and how it decides."""

    per_sample_loss: Callable[[Any, Any], Any]
    """``fn(model, batch) -> Tensor[B]``: each row's loss (``reduction='none'``; for sequences the
    mean token loss of each row), called on the unwrapped module in its training mode."""
    method: NameMethod = NameMethod.AUTO
    """Which measurement; see :class:`NameMethod`."""
    z_threshold: float = 6.0
    """Robust z-score (median/MAD of the batch) a row's loss must exceed to be named: a first filter
    that keeps the batch's bulk out. It does not decide alone: per-row losses are heavy-tailed (a
    trained classifier has most rows near 0, so a merely hard row reaches z in the thousands);
    :attr:`min_share` carries the precision."""
    min_share: float = 0.1
    """A sample is named only if it carries at least this share of the step's excess loss over the
    guard's baseline, or of the batch's squared gradient norm. Measured on the 1-rank planted run
    (``tests/test_attribution_planted.py``, per-row shares of the 6 withheld steps): the planted
    samples carried 0.24-1.0 of their step's excess, the largest other row 0.039."""
    explains: float = 0.5
    """AUTO: the loss findings are kept when the loss test fired and they carry at least this share
    of the excess; otherwise the gradient bisection runs."""
    ratio: float = 3.0
    """Gradient bisection follows a group whose gradient norm exceeds this times its siblings' median."""
    groups: int = 8
    """Fan-out of the gradient bisection: level one costs one forward-backward of the batch, each
    followed group ``1/groups`` of it."""
    max_suspects: int = 8
    """At most this many samples are named per step."""
    select: Callable[[Any, list], Any] = select_rows
    """``select(batch, rows)``: the sub-batch of ``rows`` (for the bisection)."""
    ids_of: Callable[[Any], list] | None = None
    """``ids_of(batch)``: the batch's flat sample ids when the loader has no positions (a batch
    that carries its ids); None: from the sampler."""
    fetch: Callable[[list], Any] | None = None
    """``fetch(ids)``: rebuild a batch from sample ids, when the guard was not handed the batch (a
    framework owns the loop); None: the batch must be given."""
    render: Callable[[Any], str] | None = None
    """``render(key) -> str``: what a sample is (a text excerpt, an image path), shown in the log
    and the report; ``key`` is a :class:`SampleKey`."""
    skip_named: bool = True
    """Put named samples on the skip list (False: name only)."""
    skiplist: SkipList | None = None
    """The skip list to add to (default: ``<store>/skiplist.json``, or in memory without a store)."""
    mix: DatasetMix | None = None
    """For a mix of named datasets: how flat ids map to (name, index)."""

    def __post_init__(self) -> None:
        problems = []
        if not callable(self.per_sample_loss):
            problems.append(f"per_sample_loss must be callable, got {self.per_sample_loss!r}")
        if not isinstance(self.method, NameMethod):
            problems.append(f"method must be a NameMethod, got {self.method!r}")
        if not self.z_threshold > 0:
            problems.append(f"z_threshold must be > 0, got {self.z_threshold!r}")
        if not self.ratio > 1:
            problems.append(f"ratio must be > 1, got {self.ratio!r}")
        if not (isinstance(self.groups, int) and self.groups >= 2):
            problems.append(f"groups must be an int >= 2, got {self.groups!r}")
        if not 0 < self.min_share <= 1 or not 0 < self.explains <= 1:
            problems.append(f"min_share and explains must be in (0, 1], got {self.min_share!r}, {self.explains!r}")
        if not (isinstance(self.max_suspects, int) and self.max_suspects >= 1):
            problems.append(f"max_suspects must be an int >= 1, got {self.max_suspects!r}")
        raise_all(problems, error=ConfigError, fix="fix the SampleAttribution arguments")


@dataclass
class SampleNamer:
    """Runs :class:`SampleAttribution` for one guard (built by the guard; see the module docstring)."""

    config: SampleAttribution
    module: Any
    """The unwrapped model (``model.module`` under DDP)."""
    log: Any
    ledger: Callable[[], Any]
    """Returns the guard's current run ledger (a framework callback may swap it)."""
    sampler: Any = None
    world: int = 1
    skiplist: SkipList = field(default_factory=SkipList)
    records: list = field(default_factory=list)
    """The ``suspects`` records written by this process."""
    loss_only: bool = False
    """No gradient bisection (FSDP: each pass all-gathers the shards, so every rank would have to
    run the same passes, but each bisects its own rows)."""

    @classmethod
    def build(cls, config: SampleAttribution, *, model, sampler, store, log, ledger, world: int,
              sharded: bool = False) -> "SampleNamer":
        """Open the skip list (``<store>/skiplist.json``) and attach it to the sampler if it has none
        (``sharded``: the parameters are FSDP shards; per-row losses only)."""
        from pathlib import Path

        sl = config.skiplist
        if sl is None:
            sl = SkipList.open(Path(store.directory) / SKIPLIST_FILE if store is not None else None, mix=config.mix)
        elif config.mix is not None and sl.mix is None:
            sl.mix = config.mix  # named keys must map to the loader's flat ids
        if sampler is not None and hasattr(sampler, "skiplist") and sampler.skiplist is None:
            sampler.skiplist = sl
        return cls(config, getattr(model, "module", model), log, ledger, sampler, world, sl, loss_only=sharded)

    def _ids(self, batch) -> tuple[list | None, str | None]:
        if self.config.ids_of is not None and isinstance(batch, MicroBatches):
            return batch.ids(self.config.ids_of), None
        if self.config.ids_of is not None and batch is not None:
            return [int(i) for i in self.config.ids_of(batch)], None
        if self.sampler is not None and hasattr(self.sampler, "last_batch_ids"):
            return self.sampler.last_batch_ids(), None
        return None, ("no sample ids: the loader has no positions (an iterable dataset?); "
                      "give ids_of= or a ResumableSampler")

    def _gather(self, obj) -> list:
        if self.world == 1:
            return [obj]
        import torch.distributed as dist

        out = [None] * self.world
        dist.all_gather_object(out, obj)
        return out

    def name(self, *, step: int, batch_index: int, batch=None, rng: dict | None = None,
             baseline: float | None = None, loss_flagged: bool = True) -> dict:
        """Name the samples of a withheld step (see :meth:`_name`). A failure of the user's functions
        (``per_sample_loss``, ``ids_of``, ``render``, ...) does not stop training: the record says
        what failed, and the step stays withheld as the guard decided."""
        try:
            return self._name(step=step, batch_index=batch_index, batch=batch, rng=rng, baseline=baseline,
                              loss_flagged=loss_flagged)
        except Exception as exc:  # noqa: BLE001 -- naming is advice; the guard's decision stands
            return self._emit({"step": int(step), "event": SUSPECTS_EVENT, "batch_index": int(batch_index),
                               "named": False, "suspects": [],
                               "why": f"naming failed: {type(exc).__name__}: {exc}"[:300]})

    def _name(self, *, step: int, batch_index: int, batch=None, rng: dict | None = None,
              baseline: float | None = None, loss_flagged: bool = True) -> dict:
        """Replay the withheld batch, name its suspects, log them, list them; returns the record.

        Args:
            step: the withheld step.
            batch_index: its global batch index.
            batch: the batch (None: rebuilt with ``fetch`` from its ids).
            rng: the torch RNG state of the step's forward (its dropout masks).
            baseline: the loss test's baseline (the typical batch loss) the excess is measured from.
            loss_flagged: the loss test (or a non-finite loss) flagged the step; else only the
                gradient norm did, and AUTO goes to the gradient bisection.
        """
        cfg, t0 = self.config, time.perf_counter()
        ids, why = self._ids(batch)
        if batch is None and cfg.fetch is not None and ids is not None:
            batch = cfg.fetch(ids)
        rec: dict[str, Any] = {"step": int(step), "event": SUSPECTS_EVENT, "batch_index": int(batch_index)}
        if batch is None:
            why = "the batch cannot be replayed: the guard was not given it and no fetch= rebuilds it from ids"
            self._gather(None)  # keep the ranks' collectives in step
            return self._emit({**rec, "named": False, "why": why, "suspects": []})
        with isolated(self.module):
            if rng is not None:
                from .replay import _set
                _set(rng)  # the step's own dropout masks
            micro = isinstance(batch, MicroBatches)
            losses = batch.measure(self.module, cfg.per_sample_loss) if micro \
                else per_sample_losses(self.module, batch, cfg.per_sample_loss)
            if ids is not None and len(ids) != len(losses):
                why, ids = f"sample ids ({len(ids)}) do not match the batch's rows ({len(losses)})", None
            parts = self._gather((ids, losses))
            rows = [(r, k) for r, (_, ls) in enumerate(parts) for k in range(len(ls))]
            # Shares of an excess loss mean something only when the loss did rise: on a step that only
            # the gradient norm flagged, the heavy tail of ordinary rows would carry the "excess".
            found = loss_findings([x for _, ls in parts for x in ls], baseline=baseline, z_threshold=cfg.z_threshold,
                                  min_share=cfg.min_share, max_suspects=cfg.max_suspects) \
                if cfg.method is not NameMethod.GRADIENT and loss_flagged else []
            method, fwd, bwd = "loss", 1.0, 0.0
            picked = [(rows[f.row], f) for f in found]
            enough = sum(f.share for f in found) >= cfg.explains
            wants_grad = cfg.method is NameMethod.GRADIENT or (cfg.method is NameMethod.AUTO and not enough)
            if wants_grad and self.loss_only:
                why = "gradient bisection is off under FSDP (its passes all-gather shards on every rank)"
            elif wants_grad:
                fs, cost, energy = gradient_findings(self.module, batch, len(losses), cfg.per_sample_loss,
                                                     select=batch.selector(cfg.select) if micro else cfg.select,
                                                     groups=cfg.groups, ratio=cfg.ratio, min_share=cfg.min_share,
                                                     max_suspects=cfg.max_suspects,
                                                     top=batch.ranges() if micro else None)
                allf = self._gather((fs, energy))
                total = sum(e for _, e in allf) or 1.0
                by_grad = sorted([((r, f.row), Finding(f.row, min(1.0, f.score ** 2 / total) if math.isfinite(f.score)
                                                       else 1.0, f.score, f.z))
                                  for r, (fl, _) in enumerate(allf) for f in fl], key=lambda t: -t[1].score)
                fwd, bwd = 1.0 + cost, cost
                if by_grad or not picked:  # else the loss findings stand (the gradient found nobody)
                    picked, method = by_grad[:cfg.max_suspects], "gradient"
        suspects: list[dict[str, Any]] = []
        for (r, k), f in picked:
            sid = parts[r][0][k] if parts[r][0] is not None else None
            s: dict[str, Any] = {"rank": r, "row": k, "share": round(f.share, 4), "z": _finite(f.z),
                                 "loss": _finite(parts[r][1][k])}
            if method == "gradient":
                s["grad_norm"] = _finite(f.score)
            if sid is not None:
                key = key_of(sid, cfg.mix)
                s["id"] = key.to_json()
                if cfg.render is not None:
                    s["shows"] = str(cfg.render(key))[:200]
            suspects.append(s)
        named = bool(suspects) and all("id" in s for s in suspects)
        if micro:
            rec["micro_batches"] = len(batch.parts)
        rec.update(named=named, method=method, suspects=suspects, batch_rows=len(rows),
                   share=round(sum(s["share"] for s in suspects), 4), passes={"forward": fwd, "backward": bwd},
                   seconds=round(time.perf_counter() - t0, 4))
        if not suspects:
            rec["why"] = "no sample stands out: the excess is spread over the batch" + (f"; {why}" if why else "")
        elif why is not None:
            rec["why"] = why
        if named and cfg.skip_named:
            self.skiplist.add([s["id"] for s in suspects], step=step,
                              reason=f"named at step {step} ({method}: {rec['share']:.0%} of the excess)")
            rec["skiplisted"] = True
        return self._emit(rec)

    def summary(self) -> str:
        """The samples named so far, one line per withheld step (empty when none)."""
        if not self.records:
            return ""
        return "\n".join(["Samples named on withheld steps (share of the step's excess):"]
                         + summary_lines(self.records))

    def _emit(self, rec: dict) -> dict:
        self.log.event(rec)
        self.records.append(rec)
        if rec.get("named"):
            self.ledger().note(rec)
        return rec


def _finite(x: float) -> float | None:
    return round(float(x), 6) if math.isfinite(x) else None
