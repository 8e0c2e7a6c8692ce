"""What the GPU self-check's checks share (:mod:`lossguard.testing.gpu_check`): the result type,
the small models and batches they train, and where a host sync came from."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Result:
    """One check's outcome."""

    name: str
    status: str
    """``"PASS"``, ``"DIFF"`` (close, not bitwise), ``"SKIP"`` or ``"FAIL"``."""
    detail: str = ""


def where_synced(exc: BaseException) -> str:
    """The innermost lossguard frame (outside the self-check itself) of ``exc``'s traceback: the call that synced."""
    import traceback
    from pathlib import Path

    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if "lossguard" in Path(f.filename).parts and "testing" not in Path(f.filename).parts]
    if not frames:
        return "a call outside lossguard"
    f = frames[-1]
    parts = Path(f.filename).parts
    return f"{'/'.join(parts[parts.index('lossguard'):])}:{f.lineno} ({f.name}: {f.line})"


def mlp(device, seed: int = 0):
    """A small MLP on ``device``, seeded."""
    import torch

    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 4)).to(device)


def batch(step: int, device):
    """The MLP's regression batch of ``step`` (same on every device)."""
    import torch

    g = torch.Generator().manual_seed(step)
    return torch.randn(16, 32, generator=g).to(device), torch.randn(16, 4, generator=g).to(device)


def gpt(device, seed: int = 0, dropout: float = 0.0):
    """The shipped tiny GPT (2 layers, width 64, context 32) on ``device``, seeded."""
    import torch

    from ..demo.model import GPTConfig, TinyGPT

    torch.manual_seed(seed)
    return TinyGPT(GPTConfig(n_layer=2, n_head=4, n_embd=64, block_size=32, dropout=dropout)).to(device)


def tokens(step: int, device):
    """``(x, y)`` byte tokens of ``step`` for :func:`gpt` (same on every device)."""
    import torch

    g = torch.Generator().manual_seed(1000 + step)
    x = torch.randint(0, 256, (8, 32), generator=g)
    return x.to(device), x.roll(-1, dims=1).to(device)


def all_tensors(model, opt) -> list:
    """Every parameter and optimizer-state tensor, in a fixed order (what a bitwise check compares)."""
    out = [p.detach() for p in model.parameters()]
    for st in opt.state.values():
        out += [v for _, v in sorted(st.items()) if hasattr(v, "clone")]
    return out


def train_gpt(model, opt, state, n: int, device) -> None:
    """``n`` plain steps of :func:`gpt` on :func:`tokens`, each numbered by (and advancing) ``state.step``."""
    for _ in range(n):
        x, y = tokens(state.step, device)
        opt.zero_grad(set_to_none=True)
        model(x, y)[1].backward()
        opt.step()
        state.step += 1
