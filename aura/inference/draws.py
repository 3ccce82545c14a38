"""What one sampling step draws, shared by Aura's generation engines (``aura.inference.decode`` and
``aura.inference.sampling``'s reference engine): the sampling parameters, the logits filter (temperature, top-k,
top-p), the keyed uniform numbers (splitmix64 of a row's key and the token's index: a completion depends only
on its key and the model) and the stop-string cut. See ``aura.inference.sampling`` for the whole contract.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class SamplingParams:
    max_new_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0: off
    stop_ids: tuple[int, ...] = ()
    stop_strings: tuple[str, ...] = ()


def filter_logits(logits: torch.Tensor, *, temperature: float, top_k: int, top_p: float) -> torch.Tensor:
    """(N, V) fp32 logits -> the sampling distribution's logits (masked entries at -inf)."""
    logits = logits / temperature
    if top_k and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]  # (N, 1)
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        probs = sorted_logits.softmax(-1)
        # drop a token once the ones before it already hold top_p of the mass (the first always stays)
        drop = probs.cumsum(-1) - probs > top_p
        logits = logits.masked_fill(drop.scatter(-1, order, drop), float("-inf"))
    return logits


_MASK64 = (1 << 64) - 1


def _signed(x: int) -> int:
    x &= _MASK64
    return x - (1 << 64) if x >= 1 << 63 else x


_GOLDEN, _MIX1, _MIX2 = _signed(0x9E3779B97F4A7C15), _signed(0xBF58476D1CE4E5B9), _signed(0x94D049BB133111EB)


def mix64(z: torch.Tensor) -> torch.Tensor:
    """splitmix64's finaliser on int64 tensors (wrapping products, logical shifts)."""
    z = z + _GOLDEN
    z = (z ^ ((z >> 30) & ((1 << 34) - 1))) * _MIX1
    z = (z ^ ((z >> 27) & ((1 << 37) - 1))) * _MIX2
    return z ^ ((z >> 31) & ((1 << 33) - 1))


def keyed_uniform(keys: torch.Tensor, step: int) -> torch.Tensor:
    """(N,) uniform numbers in [0, 1), a pure function of each row's int64 key and ``step``."""
    z = mix64(mix64(keys) ^ step)
    return ((z >> 11) & ((1 << 53) - 1)).double() / float(1 << 53)


def next_tokens(
    logits: torch.Tensor,
    params: SamplingParams,
    generator: torch.Generator | None,
    keys: torch.Tensor | None = None,
    step: int = 0,
) -> torch.Tensor:
    """(N, V) -> (N,) sampled (or greedy) token ids."""
    logits = logits.float()
    if params.temperature <= 0:
        return logits.argmax(-1)
    probs = filter_logits(logits, temperature=params.temperature, top_k=params.top_k, top_p=params.top_p).softmax(-1)
    if keys is None:
        return torch.multinomial(probs, 1, generator=generator).squeeze(1)
    cdf = probs.double().cumsum(-1)  # (N, V)
    u = keyed_uniform(keys, step).to(cdf.device).unsqueeze(1) * cdf[:, -1:]
    return torch.searchsorted(cdf, u, right=True).squeeze(1).clamp(max=probs.shape[-1] - 1)


def stop_cut(ids: list[int], tokenizer, stops: tuple[str, ...]) -> int | None:
    """Tokens to keep when one of ``stops`` appears in the decoded ``ids`` (None when none does)."""
    text = tokenizer.decode(ids, skip_special_tokens=False)
    if not any(s in text for s in stops):
        return None
    for n in range(1, len(ids) + 1):  # the shortest prefix that already holds a stop string
        if any(s in tokenizer.decode(ids[:n], skip_special_tokens=False) for s in stops):
            return n
    return len(ids)
