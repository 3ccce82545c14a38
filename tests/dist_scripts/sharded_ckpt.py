"""FSDP2 sharded checkpoints: save on 2 ranks, resume on 2 or 1, export a full model on rank 0.

Run: torchrun --nproc_per_node=2 sharded_ckpt.py save DIR OUT.json  (saves, resumes on 2 ranks)
     python sharded_ckpt.py load DIR OUT.json                       (resumes on 1 rank)
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from common import batches, loss_of, shard, tiny_llama, write_json

from aura import distributed as D
from aura.distributed.sharded import full_state_dict, load_sharded, save_sharded

STEPS_BEFORE, STEPS_AFTER = 2, 2


def steps(model, opt, dist, data) -> list[float]:
    losses = []
    for batch in data:
        loss = loss_of(model, shard(batch, dist.rank, dist.world_size))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(dist.mean_float(loss.item()))
    return losses


def main(mode: str, root: str, out: str) -> None:
    dist = D.init_distributed(backend="gloo")
    model = D.parallelize(
        tiny_llama(seed=0 if mode == "save" else 7), dist=dist, strategy="fsdp" if dist.world_size > 1 else "none"
    )
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    data = batches(STEPS_BEFORE + STEPS_AFTER)
    ckpt = Path(root) / "ckpt"
    result = {"world": dist.world_size, "strategy": D.strategy_of(model)}
    if mode == "save":
        result["before"] = steps(model, opt, dist, data[:STEPS_BEFORE])
        save_sharded(ckpt, model=model, optimizer=opt, dist=dist)
        result["after"] = steps(model, opt, dist, data[STEPS_BEFORE:])
        fresh = D.parallelize(tiny_llama(seed=7), dist=dist, strategy="fsdp")  # resume, same world
        fresh_opt = torch.optim.AdamW(fresh.parameters(), lr=1e-2)
        load_sharded(ckpt, model=fresh, optimizer=fresh_opt, dist=dist)
        result["reloaded_after"] = steps(fresh, fresh_opt, dist, data[STEPS_BEFORE:])
        sd = full_state_dict(model, dist=dist)
        probe = data[0][:2]  # (2, T)
        with torch.no_grad():
            logits = model(input_ids=probe).logits.float()  # (2, T, vocab)
        if dist.is_main:
            from transformers import LlamaForCausalLM

            result["export_keys"] = len(sd)  # save_pretrained consumes the dict
            D.unwrap(model).save_pretrained(Path(root) / "final", state_dict=sd)
            loaded = LlamaForCausalLM.from_pretrained(Path(root) / "final")
            with torch.no_grad():
                ref = loaded(input_ids=probe).logits.float()
            result["export_logit_diff"] = (ref - logits).abs().max().item()
            result["tmp_left"] = sorted(p.name for p in Path(root).iterdir() if p.name.startswith(".tmp"))
            result["files"] = sorted(p.name for p in ckpt.iterdir())
    else:
        load_sharded(ckpt, model=model, optimizer=opt, dist=dist)
        result["after"] = steps(model, opt, dist, data[STEPS_BEFORE:])
    if dist.is_main:
        write_json(out, result)
    D.teardown(dist)


if __name__ == "__main__":
    main(*sys.argv[1:4])
