"""A line's numbers masked into a template, and the label each number carries.

A line is split by one compiled regex into its text pieces and its numbers. The text pieces alone
(the *skeleton*) decide everything about the line's grammar, so they are parsed once per distinct
skeleton (the idea of log-template miners such as Drain, with the numbers as the variable tokens)
and the result, a :class:`Template`, is cached: reading a line is then a split, a dictionary look-up
and a float() per kept number.

For each number the template knows its label, in every usual spelling: ``k: v``, ``k=v``, ``k v``,
``| k v |``, ``[k] v``, ``'k': v``, ``"k": "v"``, ``k=tensor(v)``, ``k=[v]``; a unit glued to it
(``95ms``, ``12%``, ``2s``, ``36.5it/s``); an ``N/M`` or ``N of M`` counter (``M`` is its total); a
leading ``N:`` counter; and a parenthesised running average after a value (``loss: 2.3 (2.4)``),
which is dropped. Unlabelled numbers (a clock time, a bar's percentage) are not kept.
"""
from __future__ import annotations

import enum
import re
from dataclasses import dataclass

from .crash import ERRORISH as _ERRORISH
from .names import StepKind, is_ppl, loss_rank, step_kind

SPLIT = re.compile(r"(?<![\w.])([-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?(?![\d.])|"
                   r"-?(?:[Nn][Aa][Nn]|[Ii]nfinity|[Ii]nf|INF)(?!\w))")
"""Splits a line into text pieces and numbers (``nan``, ``inf``, ``Infinity`` included)."""

_UNIT = re.compile(r"^(?:%|[A-Za-zµ]{1,5}(?:/[A-Za-z]{1,5})?)(?=$|[\s,;|()\]}'\"<>-])")
_OPENERS = re.compile(r"(?:\s*(?:(?:(?:np|jnp|numpy|torch|jax\.numpy|tf)\.)?(?:tensor|(?:Device|Shaped|Concrete)?Array|"
                      r"array|float(?:16|32|64)?|bfloat16|Tensor)\(|[\[({<'\"]))+\s*$", re.I)
"""What wraps a printed value: brackets, quotes and the reprs of tensor libraries (``tensor(``,
``Array(`` / ``DeviceArray(`` of JAX, ``np.float32(``, ``tf.Tensor(``)."""
_SEPARATOR = re.compile(r"\s*(?:\||,|;|:|\t|\s-{1,2}\s|\s{2,}|[\]}]|\{|\[|>>|»|•|\((?=[^)]*$))\s*")
_QUOTES = str.maketrans("", "", "'\"`")
_DEVICE = re.compile(r"(?:^|\W)(?:cuda|xla|mps|npu|xpu|gpu)$", re.I)
_BRACKETED = re.compile(r"\[\s*([A-Za-z_][\w /.-]*?)\s*\]$")
_WORD = re.compile(r"[A-Za-z]{2,}")
_EVALUATION = frozenset({"val", "valid", "validation", "eval", "evaluation", "evaluating", "test", "testing"})
_LETTER = re.compile(r"[^\W\d_]")
_NESTED = re.compile(r"(?:^|[\s,|])([A-Za-z_][\w/.-]*)\s*[:=]\s*\[\s*[A-Za-z_]\w*\s*[:=]\s*$")
"""A label opening a bracket of labelled values (MetricLogger's ``predict_loss: [local: X | reduced: Y]``):
the first value is read under the outer label, the others as ``outer inner``."""
_COUNTED = re.compile(r"^\s+(batches|epochs|steps|iterations|iters|updates)(?=$|[\s,;:|.])", re.I)
"""A whole number followed by what it counts (``100 batches``, ``3 epochs``): on a loss line, a counter
named after the number instead of before it."""
_LOSS_AFTER = re.compile(r"^\s+((?:avg|average|mean|running)\s+loss|loss)(?=\s*(?:$|[,;|]))", re.I)
"""A value followed by its loss name (darknet's ``N: 2.41, 2.36 avg loss, 0.001 rate``): a label after
the number, as a counter may be (``100 batches``)."""
MAX_LABEL_WORDS = 4
"""Longer labels are prose: only their last words are kept (``... and the loss`` -> ``and the loss``)."""


class Role(enum.Enum):
    """What a number of a line is."""

    VALUE = "value"
    """A labelled value: a metric, or a counter named by its label."""
    COUNTER = "counter"
    """An ``N/M`` counter or a leading ``N:``: a counter whatever its label."""


@dataclass(frozen=True, eq=False)
class Template:
    """The grammar of one skeleton: which numbers are kept, under which labels.

    Attributes:
        kept: positions (among the line's numbers) of the kept values, in line order.
        labels: the label of each kept value (``""`` for an unlabelled counter).
        kinds: the counter kind of each kept value (None for a metric).
        totals: for each counter with a printed total, (index in ``kept``, position of the total).
        header: True when the line holds counters and no metric (``[step=12/100]``, ``Epoch 3/10``, a
            bare progress bar): the lines after it that lack those counters inherit them.
        errorish: the skeleton reads like an error message (a crash line naming a NaN).
        evaluation: the words before the first number name an evaluation (``Valid Metrics (step N)``,
            ``Test: [10/100]``): its loss is no training loss.
        key: what identifies the template across skeletons (labels and roles).
        skeleton: the text pieces joined by ``#`` (what ``--explain`` shows).
    """

    kept: tuple[int, ...]
    labels: tuple[str, ...]
    kinds: tuple[StepKind | None, ...]
    totals: tuple[tuple[int, int], ...]
    header: bool
    errorish: bool
    key: tuple
    evaluation: bool
    skeleton: str
    columns: tuple[tuple[int, int, bool], ...] = ()
    """The line's leading cells (between ``,``/whitespace separators): (number position, column, a
    ``/`` total follows) for each number in them, so a table header (``epoch  train_loss  valid_loss``,
    ultralytics' ``Epoch GPU_mem loss Instances Size``) can name them."""
    overflow: bool = False
    """The skeleton names an overflow (an fp16 skipped step: :mod:`.overflow` reads the line)."""
    percent: frozenset[int] = frozenset()
    """Indices (in ``kept``) of values printed with a ``%`` (``complete [10%]``): never a step counter."""


_COLUMN_BREAK = re.compile(r"[\s,;|]")


def _cells(texts: list[str], units: list[str], n: int, *, whole: bool) -> tuple[tuple[int, int, bool], ...]:
    """(number position, column, followed by ``/``) for the numbers of the line's leading cells.

    Cells are separated by whitespace, ``,``, ``;`` or ``|``; a unit (``3.41G``) or an ``N/M`` stays
    in its cell. With ``whole`` (a line of numbers only) every number is in a cell; otherwise the
    cells end at the first other text (ultralytics' ``224:   1%|...`` bar after the row)."""
    if texts[0].strip():
        return ()
    out, col = [], 0
    for i in range(n):
        after = texts[i + 1][len(units[i]):]
        slash = after.strip() == "/" and i + 1 < n
        out.append((i, col, slash))
        if slash:
            continue
        if i + 1 < n and (_COLUMN_BREAK.search(after) if whole else after and not after.strip()):
            col += 1
        elif not whole:
            break
    return tuple(out)


def _positional(texts: list[str], n: int, keep: tuple[int, ...] | None = None) -> Template:
    """A line of numbers only (a CSV pasted without its header, ``76930 2.6496577``): columns ``#1``, ``#2``...

    ``keep`` (default: every number) are the numbers kept, as ``#1``, ``#2`` in order."""
    keep = tuple(range(n)) if keep is None else keep
    labels = tuple(f"#{k + 1}" for k in range(len(keep)))
    kinds = (None,) * len(keep)
    cells = _cells(texts, [""] * n, n, whole=True) if len(keep) == n else ()
    return Template(kept=keep, labels=labels, kinds=kinds, totals=(), header=False, errorish=False,
                    key=(tuple(zip(labels, kinds, strict=True)), ()), evaluation=False,
                    skeleton="#".join(t.strip() for t in texts).strip(), columns=cells)


def with_header(tpl: Template, names: tuple[str, ...], at: dict[int, int] | None = None) -> Template | None:
    """A line whose leading cells are named by a table header (``epoch train_loss valid_loss``), or
    None when the header has another number of columns and ``at`` (cell -> header column, found by
    position: :mod:`.columns`) does not say where each cell goes. A cell ``N/M`` is a counter with its
    total; a cell of other several numbers (a ``00:12`` time) is not kept; numbers after the cells keep
    the labels of the line's own template."""
    if not tpl.columns or (at is None and tpl.columns[-1][1] + 1 != len(names)):
        return None
    cells: dict[int, list[tuple[int, bool]]] = {}
    for pos, col, slash in tpl.columns:
        cells.setdefault(col, []).append((pos, slash))
    named: dict[int, tuple[str, StepKind | None, int | None]] = {}
    for col, nums in cells.items():
        name = names[col if at is None else at[col]]
        if len(nums) == 1:
            named[nums[0][0]] = (name, step_kind(name), None)
        elif len(nums) == 2 and nums[0][1]:  # "1/6": the epoch out of 6
            named[nums[0][0]] = (name, step_kind(name) or StepKind.BATCH, nums[1][0])
    in_cells = {pos for pos, _, _ in tpl.columns}
    total_of = {tpl.kept[j]: at for j, at in tpl.totals}
    for j, pos in enumerate(tpl.kept):
        if pos not in in_cells:
            named[pos] = (tpl.labels[j], tpl.kinds[j], total_of.get(pos))
    kept = tuple(sorted(named))
    labels = tuple(named[p][0] for p in kept)
    kinds = tuple(named[p][1] for p in kept)
    totals = tuple((j, total) for j, total in enumerate(named[p][2] for p in kept) if total is not None)
    return Template(kept=kept, labels=labels, kinds=kinds, totals=totals, header=False, errorish=False,
                    key=(tuple(zip(labels, kinds, strict=True)), ("table",)), evaluation=False,
                    skeleton=" ".join(names) + " | " + tpl.skeleton)


def label_of(text: str) -> str:
    """The label a text piece gives the number right after it (``""`` when none)."""
    stripped = text.rstrip()
    t = _OPENERS.sub("", stripped)
    if t != stripped and not t.strip() and stripped.lower().endswith("tensor("):
        return "tensor"  # a bare print(loss): "tensor(2.3456, device='cuda:0')"
    t = t.rstrip(" :=\t'\"\uff1a\uff1d").translate(_QUOTES)  # full-width "：" / "＝" (CJK prints) too
    bracketed = _BRACKETED.search(t)
    if bracketed is not None:  # "[loss] 2.3"
        return bracketed.group(1).strip()
    t = _SEPARATOR.split(t)[-1].strip(" '\"()[]{}:=#*-")
    if not _LETTER.search(t):
        return ""  # "/" of a date, a lone symbol: no name
    words = t.split()
    if len(words) > MAX_LABEL_WORDS:
        t = " ".join(words[-MAX_LABEL_WORDS + 1:])
    return t


def parse(pieces: list[str]) -> Template:
    """The template of a line split into ``pieces`` (text, number, text, ..., text)."""
    texts = pieces[0::2]
    n = len(texts) - 1
    rest = list(texts)
    units = [""] * n
    for i in range(n):
        m = _UNIT.match(texts[i + 1])
        if m is not None:
            units[i] = m.group(0)
            rest[i + 1] = texts[i + 1][m.end():]
    if n > 1 and all(not _LETTER.search(t) for t in texts):
        # numbers only; a percentage among them (xLearn's "[ 10% ]  1  0.52 ...") is progress, not a column
        shares = tuple(i for i in range(n) if units[i] != "%")
        return _positional(texts, n) if len(shares) == n else _positional(texts, n, shares)
    kept: list[int] = []
    labels: list[str] = []
    kinds: list[StepKind | None] = []
    totals: list[tuple[int, int]] = []
    skip = set()
    after_counts: list[int] = []  # indices (in kept) of counters named after their number
    nest = None  # the label of an open "k: [a: v | b: w]" group
    piped = -1  # the next position of a leading "N|M|" chain of counters
    for i in range(n):
        if i in skip or (units[i] == "%" and rest[i + 1][:1] == "|"):
            continue  # a tqdm meter's "45%|": the bar's progress, even under a description ("Steps: 45%|")
        label = label_of(rest[i])
        outer = _NESTED.search(rest[i]) if "[" in rest[i] else None
        if outer is not None:  # "predict_loss: [local: 0.67 | reduced: 0.69]": the first is the value
            label = nest = outer.group(1).strip()
        elif nest is not None and label:
            label = f"{nest} {label}"
        if nest is not None and "]" in rest[i + 1]:
            nest = None
        after = rest[i + 1].strip().lower() if i + 1 < n else ""
        counter = slash = (i + 1 < n and after in ("/", "of") and not units[i] and not rest[i].rstrip().endswith("/")
                           and not (i + 2 <= n and rest[i + 2].lstrip().startswith("/")))  # "09/30/22" is a date
        counted = None if label or units[i] or not pieces[2 * i + 1].isdigit() else _COUNTED.match(rest[i + 1])
        if counted is not None:  # "0 completed epochs, 100 batches Average loss: nan"
            label, counter = counted.group(1), True
            after_counts.append(len(kept))
        elif not label and not units[i] and (named := _LOSS_AFTER.match(rest[i + 1])) is not None:
            label = " ".join(named.group(1).split())
        elif (not label and not units[i] and i + 2 <= n and rest[i + 1].strip() in (",", "")
              and (named := _LOSS_AFTER.match(rest[i + 2])) is not None and " " in named.group(1).strip()):
            label = named.group(1).split()[-1]  # "2.41, 2.36 avg loss": the value its running mean follows
        elif counter:
            skip.add(i + 1)
        elif (i == 0 and not label and rest[0].strip() in ("", "[", "(") and rest[1][:1] in (":", "]", ")")
              and not units[0]):
            counter = True  # a leading "N: ..." or "[N] ..." (accelerate's examples, CLU's writer, custom prints)
            piped = -2  # a bare whole number right after it is a counter too ("[  0]     520 || B: ...")
        elif piped == -2 and i == 1 and not _LETTER.search(rest[1]) and not units[i] and pieces[2 * i + 1].isdigit():
            label, counter = f"#{i + 1}", True  # epoch then iteration, before any label
        elif not label and not units[i] and rest[i + 1][:1] == "|" and (i == 0 and not rest[0].strip() or piped == i):
            # Leading integers joined by "|" ("1|12|Loss: 2.34", torchtune's bar description): counters
            # "#1", "#2", ...; the one that counts up on every line is taken as the step (choose.py).
            piped = i + 1
            label, counter = f"#{i + 1}", True
        elif not label:
            continue  # a clock time, a percentage, a running average in parentheses
        if label in ("(", ")") or _DEVICE.search(label):
            continue
        kind: StepKind | None
        if counter:  # "Epoch 3/10", "[step=12/100]", "'global_step/max_steps': '5/1500'"
            kind = (step_kind(label)
                    or (step_kind(label.split()[-1]) or step_kind(label.split("/")[0]) if label else None)
                    or StepKind.BATCH)
        else:
            kind = None if units[i] else step_kind(label)
        if slash:  # only an "N/M" or "N of M" counter prints its total (a leading "N:" does not)
            totals.append((len(kept), i + 1))
        kept.append(i)
        labels.append(label)
        kinds.append(kind)
    if after_counts and not any(k is None and (loss_rank(lab) is not None or is_ppl(lab))
                                for lab, k in zip(labels, kinds, strict=True)):
        # "after 10 iterations memory (MB)": a counted number is a counter only on a line that prints a loss
        drop = set(after_counts)
        totals = [(j - sum(1 for d in drop if d < j), at) for j, at in totals if j not in drop]
        kept = [x for j, x in enumerate(kept) if j not in drop]
        labels = [x for j, x in enumerate(labels) if j not in drop]
        kinds = [x for j, x in enumerate(kinds) if j not in drop]
    if not kept and n > 1 and not texts[0].strip():
        # A line that starts with a number and labels none (``35000 35% (1m 4s) 2.31 Nam / Russian``):
        # its bare numbers (no unit) are positional columns; a counter and a lone float among them
        # are the step and the loss (see choose.only_value).
        bare = tuple(i for i in range(n) if not units[i] and not label_of(rest[i]))
        if len(bare) >= 2:
            return _positional(texts, n, bare)
    columns = _cells(texts, units, n, whole=False) if not texts[0].strip() else ()
    if len(columns) < 2:
        columns = ()
    # A record header: counters and no loss (OLMo-core's "[step=10/1500,epoch=1,eta=47m11s]" also
    # prints an ETA; a bare tqdm bar its rate). A line that prints a loss is a record of its own.
    header = any(k is not None for k in kinds) and not any(
        k is None and (loss_rank(lab) is not None or is_ppl(lab)) for lab, k in zip(labels, kinds, strict=True))
    lead = tuple(w.lower() for w in _WORD.findall(texts[0])[:6])  # "Train Metrics" vs "Valid Metrics"
    key = (tuple(zip(labels, kinds, strict=True)), lead)
    return Template(kept=tuple(kept), labels=tuple(labels), kinds=tuple(kinds), totals=tuple(totals),
                    percent=frozenset(j for j, i in enumerate(kept) if units[i] == "%"),
                    header=header, errorish=bool(_ERRORISH.search("".join(texts))), key=key,
                    overflow="overflow" in "".join(texts).lower(),
                    evaluation=any(w in _EVALUATION for w in lead),
                    skeleton="#".join(t.strip() if len(t) < 200 else t[:200] for t in texts).strip(), columns=columns)

