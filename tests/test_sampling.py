"""Aura's sampling filter (``aura.inference.sampling.filter_logits``: GRPO's rollouts, the math task) against
transformers' own logits processors, the ones ``generate`` applies: temperature, then top-k, then top-p, on
random logits. The kept tokens and the resulting distribution must be the same."""

from __future__ import annotations

import pytest
import torch

from aura.inference.sampling import SamplingParams, filter_logits, next_tokens


def _reference(logits: torch.Tensor, *, temperature: float, top_k: int, top_p: float) -> torch.Tensor:
    """transformers' warpers in generate()'s order (GenerationMixin._get_logits_processor)."""
    from transformers import LogitsProcessorList, TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

    warpers = LogitsProcessorList([TemperatureLogitsWarper(temperature)])
    if top_k:
        warpers.append(TopKLogitsWarper(top_k))
    if top_p < 1.0:
        warpers.append(TopPLogitsWarper(top_p))
    return warpers(torch.zeros(logits.shape[0], 1, dtype=torch.long), logits.clone())


@pytest.mark.parametrize(
    "temperature,top_k,top_p",
    [(1.0, 40, 1.0), (0.7, 0, 0.9), (1.3, 50, 0.95), (1.0, 1, 0.5), (0.5, 0, 0.2), (1.0, 0, 1.0)],
)
def test_filter_equals_transformers_warpers_on_random_logits(temperature, top_k, top_p):
    gen = torch.Generator().manual_seed(1234 + top_k)
    # (N, V): rows of different spread, from nearly flat to peaked
    logits = torch.randn(64, 1000, generator=gen) * torch.linspace(0.5, 8.0, 64).unsqueeze(1)
    mine = filter_logits(logits, temperature=temperature, top_k=top_k, top_p=top_p)
    ref = _reference(logits, temperature=temperature, top_k=top_k, top_p=top_p)
    kept, ref_kept = torch.isfinite(mine), torch.isfinite(ref)
    assert torch.equal(kept, ref_kept), int((kept != ref_kept).sum())
    if top_k:
        assert int(kept.sum(-1).max()) <= top_k
    if top_p < 1.0 or top_k:  # the filters did something on these rows (the test is not between two no-ops)
        assert int(kept.sum()) < kept.numel()
    torch.testing.assert_close(mine.softmax(-1), ref.softmax(-1), rtol=0, atol=1e-7)
    # the draw takes its tokens from the kept set only, with generator and keyed draws alike
    params = SamplingParams(max_new_tokens=1, temperature=temperature, top_k=top_k, top_p=top_p)
    for _ in range(5):
        picked = next_tokens(logits, params, torch.Generator().manual_seed(_))
        assert bool(ref_kept.gather(1, picked.unsqueeze(1)).all())
        keyed = next_tokens(logits, params, None, keys=torch.arange(64, dtype=torch.long) * 7919, step=_)
        assert bool(ref_kept.gather(1, keyed.unsqueeze(1)).all())
