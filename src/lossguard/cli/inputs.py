"""The options every verb that reads logs shares, and the read itself: one definition for
``analyze``, ``info``, ``report`` and ``simulate`` (``--format``, ``--only``, ``--logging-steps``,
``--step-key``, ``--loss-key``)."""
from __future__ import annotations

import argparse


def add_reader_options(p: argparse.ArgumentParser) -> None:
    """Add ``--format``, ``--only``, ``--logging-steps``, ``--step-key`` and ``--loss-key`` to a verb's parser."""
    p.add_argument("--format", default=None, metavar="NAME",
                   help="force a reader instead of detecting the format from the content")
    p.add_argument("--only", action="append", default=None, metavar="GLOB",
                   help="read only the files of a directory matching GLOB (file name or path inside it); repeatable")
    p.add_argument("--logging-steps", type=int, default=None, metavar="N",
                   help="HF Trainer's logging_steps, to number the loss dicts of a pasted Trainer log (they "
                        "print no step); default: the logging_steps=N the paste shows, else 1, 2, 3, ...")
    add_grammar_options(p)


def add_grammar_options(p: argparse.ArgumentParser) -> None:
    """Add ``--step-key`` and ``--loss-key`` (the text grammar's choices, see ``info --explain``)."""
    p.add_argument("--step-key", default=None, metavar="LABEL",
                   help="text logs: the printed counter that is the step (e.g. 'iteration', 'global_step'; "
                        "'epoch*batch' combines two; 'order' numbers the loss lines; a '/N' suffix divides it "
                        "by N, e.g. '/4096' for a counter of samples with 4096 per step); default: the best counter")
    p.add_argument("--loss-key", default=None, metavar="LABEL",
                   help="the printed label (text logs) or series (other formats) that is the training loss "
                        "(e.g. 'lm loss', 'xent'); default: the best-ranked loss name")


def read_inputs(args: argparse.Namespace):
    """``read_log`` of the verb's ``paths`` with the options :func:`add_reader_options` added."""
    from ..io import read_log

    return read_log(args.paths, format=args.format, only=args.only or (), logging_steps=args.logging_steps,
                    step_key=getattr(args, "step_key", None), loss_key=getattr(args, "loss_key", None))
