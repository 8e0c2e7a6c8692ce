"""Per-sample losses for the usual model shapes (the ``per_sample_loss`` convention of
:class:`lossguard.guard.sample_namer.SampleAttribution`: ``fn(model, batch) -> Tensor[B]``)."""
from __future__ import annotations

IGNORE_INDEX = -100
"""Label value that carries no loss (the torch / Hugging Face convention for padding)."""


def causal_lm_row_loss(model, inputs):
    """Each sequence's mean next-token cross-entropy, for a Hugging Face causal LM called as
    ``model(**inputs)`` with ``inputs["labels"]`` (``-100`` ignored), the way the model's own loss
    is computed, but per row. A row with no labelled token gets 0."""
    import torch

    inputs = dict(inputs)
    labels = inputs.pop("labels")
    logits = model(**inputs).logits[:, :-1].float()
    target = labels[:, 1:]
    tok = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1),
                                            ignore_index=IGNORE_INDEX, reduction="none").view(target.shape)
    counted = (target != IGNORE_INDEX).sum(dim=1)
    return tok.sum(dim=1) / counted.clamp(min=1)


def classification_row_loss(model, batch):
    """Each row's cross-entropy for a ``(inputs, labels)`` batch and a model returning logits."""
    import torch

    x, y = batch[0], batch[1]
    return torch.nn.functional.cross_entropy(model(x), y, reduction="none")
