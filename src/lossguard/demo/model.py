"""A tiny byte-level GPT (nanoGPT spirit) with the stabilising techniques behind flags.

Pre-LayerNorm decoder: token + learned position embedding, ``n_layer`` blocks of causal attention
and a GELU MLP, final LayerNorm, LM head tied to the token embedding. Bytes are tokens
(``vocab_size`` 256), so any text trains it without a tokenizer. Sized for the CPU: the default
(2 layers, width 128, 64-token context) has 434,816 parameters; the demo model (width 64) has
119,104. Measured on the shared 2-core CI machine with one thread while other jobs were running, a
training step of the demo model at batch 16 x 64 tokens took 70-150 ms (400 steps incl. evaluation
in 31-58 s); the attention is written out (not SDPA) because the logits are also a statistic.

Technique flags (all off by default): ``qk_layernorm`` and ``qk_prescale``
(:mod:`lossguard.techniques.attention`), ``embedding_layernorm``
(:mod:`lossguard.techniques.embedding_norm`), ``embedding_grad_shrink``
(:mod:`lossguard.techniques.embedding_grad_shrink`), ``z_loss`` (:mod:`lossguard.techniques.z_loss`)
and ``init`` (:mod:`lossguard.techniques.init`). :func:`attention_logit_max` reads the largest
``q.k/sqrt(d)`` of each layer's last forward pass, the quantity whose growth Wortsman et al. 2023
tie to high-learning-rate divergence.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import cast

from lossguard.errors import raise_all, require

require("torch", "torch", "The tiny GPT")

import torch  # noqa: E402
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

from lossguard.techniques.attention import CausalSelfAttention  # noqa: E402
from lossguard.techniques.embedding_grad_shrink import shrink_embedding_gradient  # noqa: E402
from lossguard.techniques.embedding_norm import EmbeddingLayerNorm  # noqa: E402
from lossguard.techniques.init import SCHEMES, apply_init  # noqa: E402
from lossguard.techniques.z_loss import z_loss  # noqa: E402


@dataclass(frozen=True, kw_only=True)
class GPTConfig:
    """Shape of the tiny GPT and which stabilising techniques it uses."""

    vocab_size: int = 256
    """Number of token ids; 256 for raw bytes."""
    n_layer: int = 2
    """Transformer blocks."""
    n_head: int = 4
    """Attention heads per block; must divide ``n_embd``."""
    n_embd: int = 128
    """Model width ``H``."""
    block_size: int = 64
    """Longest context in tokens (learned position embeddings)."""
    dropout: float = 0.0
    """Dropout probability in ``[0, 1)``; 0 keeps runs deterministic and fast."""
    bias: bool = False
    """Biases in Linear and LayerNorm layers."""
    qk_layernorm: bool = False
    """LayerNorm on Q and K per head (Dehghani et al. 2023; Wortsman et al. 2023)."""
    qk_prescale: bool = False
    """Scale Q and K by ``d**-0.25`` before the matmul instead of dividing the product."""
    embedding_layernorm: bool = False
    """LayerNorm right after the token embedding (BLOOM)."""
    embedding_grad_shrink: float = 1.0
    """GLM-130B's alpha in ``(0, 1]``: the embedding's gradient is scaled by it; 1 = off."""
    z_loss: float = 0.0
    """PaLM's z-loss coefficient (PaLM: 1e-4); 0 = off. Added to the returned loss."""
    init: str = "normal"
    """One of ``normal`` (0.02), ``megatron``, ``small_init``, ``530b``."""

    def __post_init__(self) -> None:
        problems = []
        for field in ("vocab_size", "n_layer", "n_head", "n_embd", "block_size"):
            value = getattr(self, field)
            if not isinstance(value, int) or value <= 0:
                problems.append(f"field '{field}' must be a positive integer, got {value!r}")
        if isinstance(self.n_embd, int) and isinstance(self.n_head, int) and self.n_head > 0 \
                and self.n_embd % self.n_head:
            problems.append(f"field 'n_embd' ({self.n_embd}) must be divisible by "
                            f"field 'n_head' ({self.n_head})")
        if not 0.0 <= self.dropout < 1.0:
            problems.append(f"field 'dropout' must be in [0, 1), got {self.dropout!r}")
        if not 0.0 < self.embedding_grad_shrink <= 1.0:
            problems.append("field 'embedding_grad_shrink' must be in (0, 1], got "
                            f"{self.embedding_grad_shrink!r}")
        if self.z_loss < 0:
            problems.append(f"field 'z_loss' must be >= 0, got {self.z_loss!r}")
        if self.init not in SCHEMES:
            problems.append(f"field 'init' must be one of {', '.join(SCHEMES)}, got {self.init!r}")
        raise_all(problems, fix="correct the GPTConfig fields listed above")


class _MLP(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.c_fc = nn.Linear(cfg.n_embd, 4 * cfg.n_embd, bias=cfg.bias)
        self.c_proj = nn.Linear(4 * cfg.n_embd, cfg.n_embd, bias=cfg.bias)
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, x):
        return self.dropout(self.c_proj(F.gelu(self.c_fc(x))))


class _Block(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.n_embd, bias=cfg.bias)
        self.attn = CausalSelfAttention(cfg.n_embd, cfg.n_head, bias=cfg.bias,
                                        dropout=cfg.dropout, qk_layernorm=cfg.qk_layernorm,
                                        qk_prescale=cfg.qk_prescale)
        self.ln_2 = nn.LayerNorm(cfg.n_embd, bias=cfg.bias)
        self.mlp = _MLP(cfg)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class TinyGPT(nn.Module):
    """The tiny GPT; ``forward(idx, targets=None) -> (logits, loss)``.

    Args:
        cfg: its :class:`GPTConfig`. Weights are drawn from torch's global RNG; seed it
            (``torch.manual_seed``) before construction for a reproducible model.
    """

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.cfg = cfg
        if cfg.embedding_layernorm:
            self.wte: nn.Module = EmbeddingLayerNorm(cfg.vocab_size, cfg.n_embd, bias=cfg.bias)
        else:
            self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.wpe = nn.Embedding(cfg.block_size, cfg.n_embd)
        self.drop = nn.Dropout(cfg.dropout)
        self.h = nn.ModuleList(_Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.n_embd, bias=cfg.bias)
        self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        apply_init(self, cfg.init, hidden=cfg.n_embd, n_layers=cfg.n_layer)
        self.lm_head.weight = self.wte.weight  # weight tying (GPT-2, nanoGPT)

    def num_params(self) -> int:
        """Number of distinct parameters (the tied embedding counted once)."""
        return sum(p.numel() for p in self.parameters())

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None):
        """Run the model.

        Args:
            idx: token ids, shape ``(B, T)`` int64, ``T <= block_size``.
            targets: next-token ids of the same shape, or ``None``.

        Returns:
            ``(logits, loss)``: logits ``(B, T, V)``; loss is the mean cross-entropy plus the
            z-loss term when ``cfg.z_loss > 0``, or ``None`` without targets.
        """
        B, T = idx.shape
        if T > self.cfg.block_size:
            raise ValueError(f"sequence length {T} exceeds block_size {self.cfg.block_size}")
        tok = self.wte(idx)
        if self.cfg.embedding_grad_shrink != 1.0:
            tok = shrink_embedding_gradient(tok, self.cfg.embedding_grad_shrink)
        pos = self.wpe(torch.arange(T, device=idx.device))
        x = self.drop(tok + pos)
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        if targets is None:
            return logits, None
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1))
        if self.cfg.z_loss > 0:
            loss = loss + z_loss(logits, self.cfg.z_loss)
        return logits, loss


def attention_logit_max(model: TinyGPT) -> list[float]:
    """Largest attention logit ``q.k / sqrt(d)`` of each layer in the last forward pass.

    Wortsman et al. 2023 track this maximum (it grows positive without bound before the attention
    entropy collapses); returned as host floats, one per layer.
    """
    return torch.stack([cast(_Block, b).attn.last_max_logit for b in model.h]).tolist()
