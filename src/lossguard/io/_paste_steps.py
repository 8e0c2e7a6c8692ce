"""How the progress lines of a paste become points at steps (the state of :mod:`lossguard.io.pasted`).

Lines that print their step use it, and a lower step starts a new segment; HF Trainer's printed
dicts are numbered ``k * logging_steps``; DeepSpeed overflow lines are counted into the next logged
step by :func:`lossguard.io.megatron_lines.count_overflows`, the Megatron reader's own rule.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..metrics import EPOCH, LOSS_SCALE, SKIPPED_ITERS
from ._paste_lines import LineKind, PastedLine
from .megatron_lines import Overflow, count_overflows, overflow_event


@dataclass
class PasteSegment:
    """Points of one launch: metric -> step -> (value, line)."""

    note: str
    points: dict[str, dict[int, tuple[float, int]]] = field(default_factory=dict)
    last_step: int | None = None

    def put(self, metric: str, step: int, value: float, line: int) -> None:
        """Record ``value`` of ``metric`` at ``step`` (a later line of the same step replaces it)."""
        self.points.setdefault(metric, {})[step] = (value, line)


@dataclass
class PasteState:
    """Everything carried from one line to the next while reading."""

    logging_steps: int
    segments: list[PasteSegment] = field(default_factory=lambda: [PasteSegment("start of paste")])
    hf_count: int = 0
    hf_epoch: float | None = None
    pending: list[tuple[Overflow, int]] = field(default_factory=list)  # overflows waiting for a step
    overflows: list[tuple[Overflow, int]] = field(default_factory=list)  # all, for a stepless paste
    events: list[dict] = field(default_factory=list)
    tools: dict[str, None] = field(default_factory=dict)
    first_epoch: int | None = None  # the first epoch in view, for lines numbered (epoch - 1) x N + batch

    @property
    def seg(self) -> PasteSegment:
        """The segment being read."""
        return self.segments[-1]

    def restart(self, note: str) -> PasteSegment:
        """Open a new segment (a restart found at the line ``note`` describes) and return it."""
        self.segments.append(PasteSegment(note))
        return self.seg


def take(state: PasteState, parsed: PastedLine, number: int) -> None:
    """Add one parsed progress line (line ``number`` of the paste) to ``state``."""
    state.tools.setdefault(parsed.tool, None)
    kind = parsed.kind
    if kind is LineKind.OVERFLOW:
        if parsed.overflow is not None:  # (always, for this kind)
            state.pending.append((parsed.overflow, number))
            state.overflows.append((parsed.overflow, number))
        return
    if kind is LineKind.SCALE_AT_MINIMUM:
        step = state.seg.last_step
        state.events.append({"step": 0 if step is None else step, "event": "loss_scale_at_minimum", "line": number})
        return
    if kind is LineKind.HF_SUMMARY:
        return
    if kind is LineKind.HF_TRAIN:
        step = _hf_step(state, parsed, number)
    elif kind in (LineKind.HF_EVAL, LineKind.UNSTEPPED):
        step = state.seg.last_step if state.seg.last_step is not None else 0
    else:
        if parsed.step is None:
            return  # (never: every other kind prints its step)
        step = parsed.step
        if parsed.per_epoch and EPOCH in parsed.metrics:
            # Epochs count from the first one in view (the text grammar's rule, the corpus' numbering).
            epoch = int(parsed.metrics[EPOCH])
            if state.first_epoch is None:
                state.first_epoch = epoch
            step -= (state.first_epoch - 1) * parsed.per_epoch
        last = state.seg.last_step
        if last is not None and step < last:
            state.restart(f"step {step} after {last} at line {number}")
    seg = state.seg
    seg.last_step = step if seg.last_step is None else max(seg.last_step, step)
    _flush(state, step)
    for name, value in parsed.metrics.items():
        seg.put(name, step, value, number)


def _hf_step(state: PasteState, parsed: PastedLine, number: int) -> int:
    """The step of the next HF training dict: its order times logging_steps (or where its epoch puts it)."""
    epoch = parsed.metrics.get("epoch")
    if epoch is not None and state.hf_epoch is not None and epoch < state.hf_epoch and state.hf_count:
        # A resumed run printing from an earlier epoch: place it where that epoch was (the run's pace so far).
        per_dict = state.hf_epoch / state.hf_count
        state.hf_count = max(0, round(epoch / per_dict) - 1) if per_dict > 0 else 0
        state.restart(f"epoch {epoch:g} after {state.hf_epoch:g} at line {number}")
    if epoch is not None:
        state.hf_epoch = epoch
    state.hf_count += 1
    return state.hf_count * state.logging_steps


def _flush(state: PasteState, step: int) -> None:
    """Count the overflows since the last logged step into ``step`` (the interval they happened in)."""
    if not state.pending:
        return
    counted = count_overflows(state.pending, step)
    state.events.extend(counted.events)
    state.seg.put(SKIPPED_ITERS, step, counted.skipped, counted.line)
    state.seg.put(LOSS_SCALE, step, counted.scale, counted.line)
    state.pending = []


def finish(state: PasteState, warnings: list[str]) -> None:
    """Place overflows still pending: after the last step, or, in a paste without steps, by order."""
    if not state.pending:
        return
    if any(seg.last_step is not None for seg in state.segments):
        last = state.seg.last_step
        _flush(state, (last if last is not None else 0) + 1)  # the step in progress when the paste ends
        return
    lowest = min(ov.rank for ov, _ in state.overflows)
    order = [(ov, n) for ov, n in state.overflows if ov.rank == lowest]
    for k, (ov, number) in enumerate(order, start=1):
        state.seg.put(LOSS_SCALE, k, ov.reduced, number)
        state.seg.put(SKIPPED_ITERS, k, 1.0, number)
        state.events.append(overflow_event(ov, step=k, line=number))
    for event in state.events:  # a give-up line numbered against the overflows it followed
        if event["event"] == "loss_scale_at_minimum":
            event["step"] = sum(1 for _, n in order if n < event["line"]) + 1
    state.pending = []
    warnings.append("the paste has DeepSpeed overflow lines but no step numbers: each overflow is numbered "
                    "by order (1, 2, 3, ...), one skipped step each")
