"""The text fast path's block matcher (lossguard.io.text.vector): every line it takes, it reads as the
hot line's regex reads it (the same numbers, to the character); what it does not take is left to the
regex. Checked on model lines of several trainers and on thousands of random variants of them."""
from __future__ import annotations

import random
import re

import pytest

from lossguard.io.text.hot import HotLine, compile_hot
from lossguard.io.text.records import Scanner
from lossguard.io.text.vector import Step, StepKind, match_block, merged

ESC = "\x1b"
MODELS = [
    f"[rank0]:[titan] 2025-01-01 10:00:00,000 - root - INFO - {ESC}[31mstep: {{n:2}}  {ESC}[32mloss: {{x:7.4f}}  "
    f"{ESC}[33mgrad_norm: {{x:7.4f}}  {ESC}[34mlr: {{e:.4e}}  memory: 41.2GiB(52.1%)  tps: 3,000  mfu: 41.2%{ESC}[39m",
    " iteration {n:8d}/  100000 | consumed samples: {n:12d} | learning rate: {e:.6E} | lm loss: {x:.6E} | "
    "loss scale: 1.0 | grad norm: {x:.3f} |",
    "step {n}: train loss {x:.4f}, val loss {x:.4f}",
    "{{'loss': {x:.4f}, 'grad_norm': {x}, 'learning_rate': {e}, 'epoch': {x:.2f}}}",
    "Epoch {n}\titer {n}\tloss\t{x:.5f}\tlr={e:.1e}  τ={x:.2f}",
]


def _hot(model: str) -> HotLine:
    """The hot line the fast path compiles for ``model`` after 100 rows of it."""
    rng = random.Random(0)
    scanner = Scanner()
    scanner.feed((n, model.format(n=n, x=rng.uniform(0, 10), e=rng.uniform(1e-5, 1e-3))) for n in range(1, 101))
    table = max(scanner.scan.tables, key=lambda t: t.rows)
    hot = compile_hot(table)
    assert hot is not None and hot.steps is not None
    return hot


def _steps(hot: HotLine) -> list[Step]:
    assert hot.steps is not None
    return hot.steps


def _variant(line: str, rng: random.Random) -> str:
    """``line`` with a few random edits of the kinds the matcher must get right or leave alone."""
    chars = list(line)
    for _ in range(rng.randint(0, 3)):
        at = rng.randrange(len(chars))
        edit = rng.choice(["digit", "digit", "digit", "sign", "dot", "e", "space", "tab", "nan", "drop", "uni",
                           "long"])
        if edit == "digit" and chars[at].isdigit():
            chars[at] = rng.choice("0123456789")
        elif edit == "sign":
            chars.insert(at, rng.choice("+-"))
        elif edit == "dot":
            chars.insert(at, ".")
        elif edit == "e":
            chars.insert(at, rng.choice(["e", "E", "e-", "e+5"]))
        elif edit == "space":
            chars.insert(at, " " * rng.randint(1, 3))
        elif edit == "tab":
            chars.insert(at, "\t")
        elif edit == "nan":
            chars.insert(at, rng.choice(["nan", "inf", "-Infinity"]))
        elif edit == "drop":
            del chars[at]
        elif edit == "uni":
            chars.insert(at, rng.choice(["٣", "é", "\ufffd"]))
        elif edit == "long":
            chars.insert(at, "7" * rng.randint(60, 80))
    return "".join(chars)


@pytest.mark.parametrize("model", [re.sub(r"\x1b\[\d+m", "", m) for m in MODELS])
def test_every_line_taken_is_read_as_the_regex_reads_it(model):
    hot = _hot(model)
    rng = random.Random(1)
    lines = []
    for n in range(1, 3001):
        line = model.format(n=n * 37, x=rng.uniform(-20, 20), e=rng.uniform(1e-9, 1.0))
        lines.append(line if n % 3 == 0 else _variant(line, rng))
    data = "".join(line + "\n" for line in lines).encode()
    ok, starts, ends = match_block(_steps(hot), data)
    assert len(ok) == len(lines)
    got = iter(zip(starts.tolist(), ends.tolist(), strict=True))
    for line, taken in zip(lines, ok.tolist(), strict=True):
        m = hot.regex.match(line + "\n")
        if not taken:
            continue
        assert m is not None, line
        spans = next(got)
        mine = [data[a:b].decode() for a, b in zip(*spans, strict=True)]
        assert mine == list(m.groups()), line
    assert ok[2::3].all()  # the unedited lines are all taken (nothing falls back on a plain log)
    assert ok.mean() > 0.5


def test_a_line_in_colour_is_read_with_its_colour_codes_as_text():
    hot = _hot(MODELS[0])
    assert hot.colored is not None
    lines = [MODELS[0].format(n=n, x=n / 7, e=n / 1e6) for n in range(1, 2001)]
    data = "".join(line + "\n" for line in lines).encode()
    ok, starts, ends = match_block(hot.colored, data)
    assert ok.all()
    for line, a, b in zip(lines[::97], starts[::97].tolist(), ends[::97].tolist(), strict=True):
        m = hot.regex.match(re.sub(r"\x1b\[\d+m", "", line) + "\n")
        assert m is not None and [data[i:j].decode() for i, j in zip(a, b, strict=True)] == list(m.groups())


def test_blanks_next_to_numbers_stay_loose_and_blanks_between_words_are_as_printed():
    hot = _hot("step: {n:5d}  mean loss: {x:7.4f}")
    data = b"step:     7  mean loss:  2.5000\nstep: 12345 mean loss:12.5000\nstep: 7  mean  loss: 2.5\n"
    ok, starts, ends = match_block(_steps(hot), data)
    assert ok.tolist() == [True, True, False]  # the third goes to the regex (which reads it too)
    assert hot.regex.match("step: 7  mean  loss: 2.5\n") is not None
    assert [data[a:b] for a, b in zip(starts[1], ends[1], strict=True)] == [b"12345", b"12.5000"]


@pytest.mark.parametrize("kept", [True, False])
def test_steps_of_a_number_follow_the_regex_first_choice(kept):
    steps = merged([Step(StepKind.TEXT, b"x="), Step(StepKind.NUMBER, captured=True), Step(StepKind.TEXT, b";"),
                    Step(StepKind.NUMBER, captured=kept), Step(StepKind.TEXT, b";")])
    number = r"[-+]?(?:\d++(?:\.\d*+)?|\.\d++)(?:[eE][-+]?\d++)?+"
    words = r"|-?(?:[Nn][Aa][Nn]|[Ii]nfinity|[Ii]nf|INF)"  # only a kept number reads these
    second = f"({number}{words})" if kept else f"(?:{number})"
    regex = re.compile(f"x=({number}{words});{second};\n")
    values = ["1", "-2.5", "+.5", "5.", "1e5", "1E-07", "2e", "3e+", ".", "-", "1.2.3", "nan", "1e5e5", "00",
              "-nan", "NaN", "nAn", "+nan", "inf", "Inf", "-Infinity", "infinity", "INF", "iNF", "Infinit", "nanx"]
    lines = [f"x={v};{v};" for v in values]
    data = "".join(line + "\n" for line in lines).encode()
    ok, starts, ends = match_block(steps, data)
    taken = iter(zip(starts.tolist(), ends.tolist(), strict=True))
    for line, t in zip(lines, ok.tolist(), strict=True):
        m = regex.match(line + "\n")
        if t:
            spans = next(taken)
            assert m is not None and [data[a:b].decode() for a, b in zip(*spans, strict=True)] == list(m.groups())
        else:
            assert m is None, line  # nothing the regex reads is left out in these spellings
    assert ok.sum() == (16 if kept else 7)
