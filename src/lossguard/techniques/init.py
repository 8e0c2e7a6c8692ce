"""Initialisation standard deviations that large runs use, and a helper that applies them.

* ``std_530b(H) = sqrt(1 / (3 H))``: Smith et al. 2022, "Using DeepSpeed and Megatron to Train
  Megatron-Turing NLG 530B"; adopted by BLOOM (Le Scao et al. 2022, "What Language Model to Train
  if You Have One Million GPU Hours?").
* ``std_small_init(H) = sqrt(2 / (5 H))``: Nguyen & Salazar 2019, "Transformers without Tears"
  ("SmallInit"; Xavier-normal for a ``H x 4H`` layer).
* depth scaling of the output projections (attention out, MLP down): ``std / sqrt(2 n_layers)``,
  GPT-2 (Radford et al. 2019) and Megatron-LM (Shoeybi et al. 2019); the two residual branches per
  layer each add variance, so the sum stays O(1) at any depth.

:func:`apply_init` re-initialises a model in place: Linear and Embedding weights ``N(0, std)``
(output projections depth-scaled), biases zero, LayerNorm weight 1 / bias 0.
"""
from __future__ import annotations

import math
from typing import Callable

from lossguard.errors import ConfigError

#: Schemes understood by :func:`apply_init`.
SCHEMES = ("normal", "small_init", "530b", "megatron")

#: Name suffixes of output projections in common code bases (nanoGPT, HF Llama/OPT, Megatron).
OUTPUT_PROJ_SUFFIXES = ("c_proj", "out_proj", "o_proj", "down_proj", "dense_4h_to_h", "fc2")


def std_530b(hidden: int) -> float:
    """``sqrt(1 / (3 H))``, the init std of MT-NLG 530B and BLOOM, for width ``hidden``."""
    _check_positive("hidden", hidden)
    return math.sqrt(1.0 / (3.0 * hidden))


def std_small_init(hidden: int) -> float:
    """``sqrt(2 / (5 H))``, SmallInit of "Transformers without Tears", for width ``hidden``."""
    _check_positive("hidden", hidden)
    return math.sqrt(2.0 / (5.0 * hidden))


def depth_scaled(std: float, n_layers: int) -> float:
    """``std / sqrt(2 * n_layers)``: the std of residual output projections (GPT-2, Megatron)."""
    _check_positive("n_layers", n_layers)
    return std / math.sqrt(2.0 * n_layers)


def scheme_std(scheme: str, hidden: int) -> float:
    """The base std of ``scheme`` for width ``hidden`` (``normal`` and ``megatron`` use 0.02)."""
    if scheme in ("normal", "megatron"):
        return 0.02
    if scheme == "small_init":
        return std_small_init(hidden)
    if scheme == "530b":
        return std_530b(hidden)
    raise ConfigError(f"init scheme {scheme!r} is unknown", where="field 'init'",
                      fix=f"use one of {', '.join(SCHEMES)}")


def apply_init(model, scheme: str, *, hidden: int, n_layers: int,
               is_output_proj: Callable[[str], bool] | None = None,
               generator=None) -> dict[str, float]:
    """Re-initialise ``model`` in place with ``scheme``; returns the std used per parameter name.

    Args:
        model: a ``torch.nn.Module``.
        scheme: ``"normal"`` (0.02 everywhere), ``"megatron"`` (0.02, output projections
            depth-scaled), ``"small_init"`` or ``"530b"`` (their std, output projections
            depth-scaled).
        hidden: model width ``H``.
        n_layers: number of transformer blocks (for depth scaling).
        is_output_proj: predicate on a module's qualified name; default: the name ends with one of
            :data:`OUTPUT_PROJ_SUFFIXES`.
        generator: optional ``torch.Generator`` for reproducible draws.

    Returns:
        ``{parameter name: std}`` for every weight drawn from a normal distribution.
    """
    import torch
    from torch import nn

    base = scheme_std(scheme, hidden)
    out_std = base if scheme == "normal" else depth_scaled(base, n_layers)
    if is_output_proj is None:
        def is_output_proj(name: str) -> bool:
            return name.endswith(OUTPUT_PROJ_SUFFIXES)
    used: dict[str, float] = {}
    with torch.no_grad():
        for name, module in model.named_modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                std = out_std if is_output_proj(name) else base
                module.weight.normal_(0.0, std, generator=generator)
                used[f"{name}.weight"] = std
                bias = getattr(module, "bias", None)  # nn.Embedding has none
                if bias is not None:
                    bias.zero_()
            elif isinstance(module, nn.LayerNorm):
                if module.weight is not None:
                    module.weight.fill_(1.0)
                if module.bias is not None:
                    module.bias.zero_()
    return used


def _check_positive(field: str, value: int) -> None:
    if not isinstance(value, int) or value <= 0:
        raise ConfigError(f"{field} must be a positive integer, got {value!r}",
                          where=f"field '{field}'", fix=f"pass the model's {field} (> 0)")
