"""One line of pasted or printed training output -> the step and metrics it reports.

Each training tool prints its progress its own way; :func:`parse_line` recognises the lines below
(found anywhere in the line, so tqdm bars, timestamps and markdown quoting around them do not
matter) and returns a :class:`PastedLine`, or None for every other line:

* HF Trainer's printed dicts, ``{'loss': 2.63, 'grad_norm': nan, 'learning_rate': 6.7e-08,
  'epoch': 0.07}`` (no step: :mod:`lossguard.io.pasted` numbers them), its eval dicts and its final
  ``train_runtime`` summary;
* nanoGPT, ``iter 3010: loss nan, time 95.12ms, mfu 12.3%``, and its evals ``step 3000: train loss
  2.89, val loss 2.95``;
* llm.c, ``step   10/500 | train loss 7.12 | norm 1.23 | lr 6.00e-05 | (95.12 ms | 12345 tok/s)``
  and ``val loss 3.2``;
* modded-nanogpt, ``step:100/1530 train_loss:4.1234 train_time:12345ms step_avg:123.45ms``;
* mlx_lm, ``Iter 75: Train loss 3.32, Learning Rate 1.000e-05, It/sec 0.45, ...``;
* mmengine / mmcv, ``Epoch [1][100/500]  lr: 1.0e-04, ... loss: 2.44`` and ``Iter(train) [ 100/1000]
  ... loss: 2.44``;
* Megatron-LM / Megatron-DeepSpeed iteration and validation lines (parsed by
  :mod:`lossguard.io.megatron`'s own field rules);
* DeepSpeed's ``OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 64, reducing to 32`` and
  ``Current loss scale already at minimum``.

Numbers may be written ``nan``, ``NaN``, ``NAN``, ``inf``, ``-inf`` or ``Infinity``: all are read
as non-finite values, never as text.
"""
from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field
from functools import lru_cache

from ..metrics import EPOCH, ITER_TIME, LOSS, LOSS_SCALE, LR, VAL_LOSS, canonical_name
from ..runlog import finite_or_nan
from . import megatron_lines

_NUM = r"[-+]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|[Nn][Aa][Nn]|[Ii]nfinity|[Ii][Nn][Ff])"
NUMBER = re.compile(_NUM)
"""A logged number, non-finite spellings included."""


class LineKind(enum.Enum):
    """Which tool printed a recognised line (decides how the reader numbers its step)."""

    HF_TRAIN = "hf_train"
    """HF Trainer training dict: has ``loss``, no step (numbered by order)."""
    HF_EVAL = "hf_eval"
    """HF Trainer evaluation dict (``eval_*`` keys): belongs to the last training step."""
    HF_SUMMARY = "hf_summary"
    """HF Trainer's end-of-training summary (``train_runtime``): an average, not a point."""
    STEPPED = "stepped"
    """A line that carries its own step (nanoGPT, llm.c, modded-nanogpt, mlx_lm, mmengine, Megatron)."""
    UNSTEPPED = "unstepped"
    """Metrics without a step (llm.c's ``val loss``): they belong to the last step seen."""
    OVERFLOW = "overflow"
    """DeepSpeed fp16 overflow: a skipped step and the reduced loss scale."""
    SCALE_AT_MINIMUM = "scale_at_minimum"
    """DeepSpeed gave up: the loss scale is already at its minimum."""


@dataclass(frozen=True, kw_only=True)
class PastedLine:
    """What one recognised line says.

    Attributes:
        kind: how the line's step is to be found.
        step: the optimizer step the line reports, or None when the line has none.
        metrics: canonical metric name -> value (NaN/Inf kept).
        tool: the tool that printed it (``"hf_trainer"``, ``"nanogpt"``, ...), for metadata.
        rank: the rank that printed an overflow line (0 when the line does not say).
        overflow: what an overflow line reports (None for every other line).
        per_epoch: for a step computed as ``(epoch - 1) x per_epoch + batch`` (mmcv's ``Epoch [e][b/N]``),
            ``N``: the reader counts epochs from the first one in view instead (a paste that starts
            at epoch 147 is numbered from 0 + batch, as the text grammar and the corpus count).
    """

    kind: LineKind
    step: int | None
    metrics: dict[str, float] = field(default_factory=dict)
    tool: str = ""
    rank: int = 0
    overflow: megatron_lines.Overflow | None = None
    per_epoch: int | None = None


_HF_DICT = re.compile(r"\{\s*'[^']+'\s*:[^{}]*\}")
_HF_PAIR = re.compile(r"'([^']+)'\s*:\s*(?:tensor\(\s*|')?(" + _NUM + r")")
"""A key and its number in a printed dict; transformers 5 prints each float as a quoted ``.4g``
string (``'loss': '2.346'``)."""
_NANOGPT = re.compile(r"\biter\s+(\d+)\s*:\s*(.*)", re.I)
_NANOGPT_EVAL = re.compile(r"\bstep\s+(\d+)\s*:\s*(train loss.*)", re.I)
_LLMC = re.compile(r"\bstep\s+(\d+)\s*/\s*\d+\s*[|:]\s*(.*)", re.I)
_LLMC_VAL = re.compile(r"^\s*val loss\s+(" + _NUM + r")\s*$", re.I)
_MODDED = re.compile(r"\bstep:(\d+)/\d+\s+(.*)")
_MODDED_PAIR = re.compile(r"([A-Za-z_]\w*):(" + _NUM + r")(ms|s)?\b")
_MLX = re.compile(r"\bIter\s+(\d+)\s*:\s*(.*)")
_MM_EPOCH = re.compile(r"\bEpoch(?:\(train\))?\s*\[(\d+)\]\s*\[\s*(\d+)\s*/\s*(\d+)\s*\](.*)")
_MM_ITER = re.compile(r"\bIter\(train\)\s*\[\s*(\d+)\s*/\s*\d+\s*\](.*)")
_MM_PAIR = re.compile(r"([A-Za-z_][\w.]*):\s+(" + _NUM + r")(?![\w:])")
# "name value[unit]", optionally followed by a parenthesised note (llm.c's z-score, "(+0.12z)").
_FIELD = re.compile(r"^\s*\(?\s*([A-Za-z][A-Za-z_/ .\-]*?)\s*[:=]?\s*(" + _NUM + r")\s*(ms|s|%|GB)?\s*"
                    r"(?:\([^()]*\))?\s*\)?\s*$")
_BARE_MS = re.compile(r"^\s*\(?\s*(" + _NUM + r")\s*ms\s*\)?\s*$")  # llm.c's "| 312.40 ms |": time per step
_AT_MINIMUM = re.compile(r"Current loss scale already at minimum", re.I)

CANDIDATE = re.compile(r"\{\s*'|iter|step|epoch|overflow|already at minimum|val loss", re.I)
"""Cheap first test: a line without any of these words is none of the lines above."""


def parse_line(line: str) -> PastedLine | None:
    """The step and metrics of one line of pasted text, or None when no known tool printed it."""
    if not CANDIDATE.search(line):
        return None
    if "verflow" in line or "VERFLOW" in line:
        hit = _overflow(line)
        if hit is not None:
            return hit
    if "'" in line and "{" in line:
        hit = _hf_dict(line)
        if hit is not None:
            return hit
    if "iteration" in line:
        hit = _megatron(line)
        if hit is not None:
            return hit
    if _AT_MINIMUM.search(line):
        return PastedLine(kind=LineKind.SCALE_AT_MINIMUM, step=None, tool="deepspeed")
    for parse in (_modded, _LLMC_LINE.parse, _NANOGPT_EVAL_LINE.parse, _MLX_LINE.parse, _NANOGPT_LINE.parse,
                  _mmengine, _llmc_val):
        hit = parse(line)
        if hit is not None:
            return hit
    return None


def _overflow(line: str) -> PastedLine | None:
    ov = megatron_lines.parse_overflow(line)
    if ov is None:
        return None
    return PastedLine(kind=LineKind.OVERFLOW, step=None, metrics={LOSS_SCALE: ov.reduced}, tool="deepspeed",
                      rank=ov.rank, overflow=ov)


def _hf_dict(line: str) -> PastedLine | None:
    m = _HF_DICT.search(line)
    if m is None:
        return None
    values: dict[str, float] = {}
    raw_step = None
    for key, num in _HF_PAIR.findall(m.group(0)):
        if key in ("step", "global_step"):
            step = finite_or_nan(num)
            raw_step = int(step) if step == step and abs(step) < 2**62 and step == int(step) else None
            continue
        values[key] = finite_or_nan(num)
    if not values:
        return None
    if "train_runtime" in values:
        return PastedLine(kind=LineKind.HF_SUMMARY, step=None, tool="hf_trainer")
    metrics = {_hf_name(k): v for k, v in values.items()}
    if "loss" in values:
        return PastedLine(kind=LineKind.HF_TRAIN if raw_step is None else LineKind.STEPPED, step=raw_step,
                          metrics=metrics, tool="hf_trainer")
    if any(k.startswith("eval_") for k in values):
        return PastedLine(kind=LineKind.HF_EVAL if raw_step is None else LineKind.STEPPED, step=raw_step,
                          metrics=metrics, tool="hf_trainer")
    return None  # some other printed dict (a config): not a log line


@lru_cache(maxsize=512)
def _hf_name(key: str) -> str:
    return canonical_name(key)


def _megatron(line: str) -> PastedLine | None:
    hit = megatron_lines.parse_iteration(line) or megatron_lines.parse_validation(line)
    if hit is None:
        return None
    return PastedLine(kind=LineKind.STEPPED, step=hit.step, metrics=hit.metrics, tool="megatron")


@dataclass(frozen=True, kw_only=True)
class _StepFields:
    """A tool whose progress line is a step, then ``name value[unit]`` fields split on one separator."""

    tool: str
    """Name kept in the log's metadata."""
    pattern: re.Pattern
    """Groups (step, the fields)."""
    separator: str
    """Between two fields."""
    needs: str | None = None
    """A metric the line must report to be this tool's (nanoGPT's ``iter`` line has the loss)."""
    renamed: tuple[tuple[str, str], ...] = ()
    """(metric, new name) pairs: a field whose meaning on this line differs from the usual one."""

    def parse(self, line: str) -> PastedLine | None:
        """The step and metrics of ``line``, or None when it is not this tool's line."""
        m = self.pattern.search(line)
        if m is None:
            return None
        metrics = _fields(m.group(2), self.separator)
        for old, new in self.renamed:
            if old in metrics:
                metrics[new] = metrics.pop(old)
        if not metrics or (self.needs is not None and self.needs not in metrics):
            return None
        return PastedLine(kind=LineKind.STEPPED, step=int(m.group(1)), metrics=metrics, tool=self.tool)


_LLMC_LINE = _StepFields(tool="llm.c", pattern=_LLMC, separator="|")
# nanoGPT's eval "train loss" is an estimate over eval batches, not the step's loss: keep it apart.
_NANOGPT_EVAL_LINE = _StepFields(tool="nanogpt", pattern=_NANOGPT_EVAL, separator=",",
                                 renamed=((LOSS, "eval_train_loss"),))
_MLX_LINE = _StepFields(tool="mlx_lm", pattern=_MLX, separator=",")  # "Iter N:", before nanoGPT's "iter N:"
_NANOGPT_LINE = _StepFields(tool="nanogpt", pattern=_NANOGPT, separator=",", needs=LOSS)


def _llmc_val(line: str) -> PastedLine | None:
    m = _LLMC_VAL.search(line)
    if m is None:
        return None
    return PastedLine(kind=LineKind.UNSTEPPED, step=None, metrics={VAL_LOSS: finite_or_nan(m.group(1))}, tool="llm.c")


def _modded(line: str) -> PastedLine | None:
    m = _MODDED.search(line)
    if m is None:
        return None
    metrics = {}
    for key, num, unit in _MODDED_PAIR.findall(m.group(2)):
        value = finite_or_nan(num) * (1e-3 if unit == "ms" else 1.0)
        name = ITER_TIME if key == "step_avg" else _field_name(key)
        metrics[name] = value
    if not metrics:
        return None
    return PastedLine(kind=LineKind.STEPPED, step=int(m.group(1)), metrics=metrics, tool="modded-nanogpt")


def _mmengine(line: str) -> PastedLine | None:
    m = _MM_EPOCH.search(line)
    if m is not None:
        epoch, it, per_epoch = int(m.group(1)), int(m.group(2)), int(m.group(3))
        step, rest = (epoch - 1) * per_epoch + it, m.group(4)  # mmcv counts epochs from 1
    else:
        m = _MM_ITER.search(line)
        if m is None:
            return None
        step, rest, epoch, per_epoch = int(m.group(1)), m.group(2), None, None
    metrics = {}
    for key, num in _MM_PAIR.findall(rest):
        if key != "eta":  # a duration ("1 day, 2:10:11"), not a number
            metrics[_field_name(key)] = finite_or_nan(num)
    if not metrics:
        return None
    if epoch is not None:
        metrics.setdefault(EPOCH, float(epoch))
    return PastedLine(kind=LineKind.STEPPED, step=step, metrics=metrics, tool="mmengine",
                      per_epoch=per_epoch if epoch is not None else None)


def _fields(text: str, separator: str) -> dict[str, float]:
    """``name value[unit]`` fields split on ``separator``: ``loss nan``, ``time 95.12ms``, ``Train loss 3.32``."""
    metrics = {}
    for part in text.replace("`", "").split(separator):
        m = _FIELD.match(part)
        if m is None:
            bare = _BARE_MS.match(part)
            if bare is not None:
                metrics[ITER_TIME] = finite_or_nan(bare.group(1)) * 1e-3
            continue
        name, num, unit = m.group(1), m.group(2), m.group(3)
        value = finite_or_nan(num)
        if unit == "ms":
            value *= 1e-3
        metrics[_field_name(name)] = value
    return metrics


@lru_cache(maxsize=1024)
def _field_name(raw: str) -> str:
    """A printed field name -> metric name (``Learning Rate`` -> ``lr``, ``time`` -> ``iter_time``)."""
    low = " ".join(raw.lower().split())
    special = {"time": ITER_TIME, "learning rate": LR, "val loss": VAL_LOSS, "train loss": LOSS,
               "it/sec": "iterations_per_sec", "tokens/sec": "tokens_per_sec", "tok/s": "tokens_per_sec"}
    if low in special:
        return special[low]
    return canonical_name(low.replace("/", "_per_"))
