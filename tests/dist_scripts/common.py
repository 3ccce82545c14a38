"""Shared pieces of the scripts that the distributed tests run under torchrun (or alone)."""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

B, T = 4, 16  # global batch (sequences) and sequence length


def tiny_llama(seed: int = 0):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=256,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=256,
        max_position_embeddings=64,
    )
    return LlamaForCausalLM(cfg)


def batches(steps: int, seed: int = 1) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, 256, (B, T), generator=g) for _ in range(steps)]  # (B, T) each


def shard(batch: torch.Tensor, rank: int, world: int) -> torch.Tensor:
    per = batch.shape[0] // world
    return batch[rank * per : (rank + 1) * per]  # (B / world, T)


def loss_of(model, ids: torch.Tensor) -> torch.Tensor:
    return model(input_ids=ids, labels=ids).loss


def reference_run(model, data: list[torch.Tensor], *, lr: float = 1e-2):
    """Single-process training on the full batches: losses and first-step gradients."""
    model = copy.deepcopy(model)
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    losses, grads = [], None
    for i, ids in enumerate(data):
        loss = loss_of(model, ids)
        loss.backward()
        if i == 0:
            grads = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
    return losses, grads


def write_json(path: str, obj) -> None:
    Path(path).write_text(json.dumps(obj, indent=2))
