"""The parts of ``aura pretrain`` for adapting an existing model: the model of a ``--init-from``
run (``from_base``) and the batches of a weighted ``--data`` mixture (``mixture_batches``) with its
per-source evaluators (validation loss and tokens seen per source, logged to console, CSV and TensorBoard).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from aura.core import console
from aura.train.init_from import (
    DEFAULTS,
    FreezeEngine,
    M,
    base_spec,
    base_tokenizer,
    check_data_tokenizer,
    load_base,
    mean_of_pieces,
    new_token_ids,
)


@dataclass
class BaseModel:
    cfg: object  # the flags with the continued-pretraining defaults applied
    spec: object  # init_from.BaseSpec
    model: object  # parallelised
    described: dict  # model_config.json fields
    vocab: int  # embedding rows
    wrap_engine: object  # None, or engine -> FreezeEngine for --train-new-tokens-only


def from_base(run, tok, tok_name: str, train_shards) -> BaseModel:
    """Load ``--init-from``, check the tokenizers, grow the vocabulary (mean of pieces), parallelise."""
    from aura.distributed import main_process_first, parallelize, strategy_of
    from aura.models.presets import count_parameters, flops_per_token
    from aura.train.args import with_defaults
    from aura.train.run.memory import memory_defaults

    cfg = run.cfg
    check_data_tokenizer(tok, tok_name, train_shards)
    base_tok = base_tokenizer(cfg.init_from) if cfg.tokenizer else tok
    new_ids = new_token_ids(base_tok, tok, base_name=cfg.init_from, ext_name=cfg.tokenizer) if cfg.tokenizer else []
    with main_process_first(run.dist):  # a hub download happens once
        model = load_base(cfg.init_from)
    rows = model.get_input_embeddings().weight.shape[0]
    if new_ids or max(tok.get_vocab().values()) + 1 > rows:
        mean_of_pieces(model, base_tok, tok, new_ids)
    vocab = model.get_input_embeddings().weight.shape[0]
    if train_shards.vocab_size > vocab:
        from aura.core.errors import AuraError

        raise AuraError(M("data_vocab", data=train_shards.path, ids=train_shards.vocab_size, rows=vocab))
    spec = base_spec(cfg.init_from, model, cfg.seq_length)
    # `auto` on CUDA: micro-batch and checkpointing from the memory model (every weight trains, as in full
    # fine-tuning), before the defaults
    cfg = memory_defaults(cfg, run=run, model_config=model.config, method="full", lora_r=0, max_length=spec.seq_len)
    cfg = with_defaults(cfg, **DEFAULTS)
    console.info(M("base", name=cfg.init_from, arch=spec.arch, params=count_parameters(model), seq=spec.seq_len))
    described = {
        "parameters": count_parameters(model),
        "flops_per_token": flops_per_token(model.config, spec.seq_len),
        "hf_config": model.config.to_dict(),
        "init_from": {
            "model": cfg.init_from,
            "new_tokens": len(new_ids),
            "train_new_tokens_only": cfg.train_new_tokens_only,
            "new_tokens_scope": cfg.new_tokens_scope,
        },
    }
    model = parallelize(
        model,
        dist=run.dist,
        strategy=cfg.strategy,
        compile=cfg.compile,
        gradient_checkpointing=bool(cfg.gradient_checkpointing),
        mixed_precision=run.precision if run.precision in ("bf16", "fp16") else None,
        comm=cfg,
        device_memory=run.device_memory,
    )
    wrap = None
    if cfg.train_new_tokens_only:
        from aura.core.errors import AuraError

        if strategy_of(model) == "fsdp":
            raise AuraError(M("freeze_fsdp"))
        rows_only = cfg.new_tokens_scope == "new-rows"
        if rows_only and not new_ids:
            raise AuraError(M("freeze_nothing", steps=cfg.train_new_tokens_only))
        console.info(M("freeze", steps=cfg.train_new_tokens_only, what=M("freeze_rows" if rows_only else "freeze_emb")))

        def wrap(engine):
            return FreezeEngine(engine, model, steps=cfg.train_new_tokens_only, rows=new_ids if rows_only else None)

    return BaseModel(cfg, spec, model, described, vocab, wrap)


# ---- weighted mixtures ---------------------------------------------------------------------------


def mixture_batches(cfg, spec, dist, *, plan_interval):
    """(training MixtureBatches, overall validation or None, per-source evaluators) of ``--data`` as a
    mixture; ``plan_interval(data)`` gives the evaluators' interval once the batches exist."""
    from aura.data.mixture import ChainedEval, MixtureBatches, check_same_tokenizer, parse_sources
    from aura.data.pretrain_data import EvalBatches, PretrainBatches, open_splits

    specs = parse_sources(cfg.data)
    check_same_tokenizer(specs)
    parts, vals = [], {}
    for i, s in enumerate(specs):
        train, val = open_splits(s.path)
        parts.append(
            (
                s,
                PretrainBatches(
                    train,
                    seq_len=spec.seq_len,
                    batch_size=cfg.batch_size,
                    seed=cfg.seed + i,
                    rank=dist.rank,
                    world_size=dist.world_size,
                    pin_memory=dist.device.type == "cuda",
                ),
            )
        )
        if val is not None:
            ev = EvalBatches(
                val,
                seq_len=spec.seq_len,
                batch_size=cfg.batch_size,
                rank=dist.rank,
                world_size=dist.world_size,
                max_batches=cfg.eval_batches,
            )
            if len(ev):
                vals[s.name] = ev
    data = MixtureBatches(parts, world_size=dist.world_size)
    val = ChainedEval(list(vals.values())) if vals else None
    evaluators = [TokensSeen(data, interval=cfg.log_interval)]
    if vals:
        evaluators.append(SourceLoss(vals, interval=plan_interval(data)))
    return data, val, evaluators


class TokensSeen:
    """Input tokens drawn from each source so far (``tokens_NAME``), every log interval."""

    def __init__(self, data, *, interval: int):
        self.data, self.interval = data, interval
        self.names = tuple(f"tokens_{n}" for n in data.names)

    def __call__(self, model, *, dist) -> dict[str, float]:
        return {f"tokens_{n}": float(t) for n, t in self.data.tokens_seen().items()}


class SourceLoss:
    """Validation loss of each source (``val_loss_NAME``, nats per token), every ``interval`` steps."""

    def __init__(self, vals: dict, *, interval: int):
        self.vals, self.interval = vals, interval
        self.names = tuple(f"val_loss_{n}" for n in vals)

    @torch.no_grad()
    def __call__(self, model, *, dist) -> dict[str, float]:
        from aura.train.loop import evaluate

        out = {}
        for name, batches in self.vals.items():
            out[f"val_loss_{name}"] = evaluate(model, batches, dist=dist, precision="fp32")
        return out


def preflight(cfg) -> None:
    """The checks of a mixture and of ``--init-from`` that need no run dir, made before one is created:
    a user mistake leaves nothing behind."""
    from pathlib import Path

    from aura.data.mixture import check_same_tokenizer, is_mixture, parse_sources
    from aura.data.tokens import TokenShards, is_prepared_dir

    data_dirs: list[Path] = []
    if is_mixture(cfg.data):
        specs = parse_sources(cfg.data)
        check_same_tokenizer(specs)
        data_dirs = [s.path for s in specs]
    elif len(cfg.data) == 1 and is_prepared_dir(cfg.data[0]):
        data_dirs = [Path(cfg.data[0])]
    if not cfg.init_from:
        return
    from aura.tokenizer.loading import load_tokenizer
    from aura.train.init_from import check_base

    check_base(cfg.init_from)
    tok_name = cfg.tokenizer or cfg.init_from
    tok = load_tokenizer(tok_name) if cfg.tokenizer else base_tokenizer(cfg.init_from)
    if cfg.tokenizer:
        new_token_ids(base_tokenizer(cfg.init_from), tok, base_name=cfg.init_from, ext_name=cfg.tokenizer)
    if data_dirs:
        check_data_tokenizer(tok, tok_name, TokenShards(data_dirs[0]))


def mixture_proportions(data, plan) -> dict:
    """What a mixture (``MixtureBatches``) will really draw, said at the start and kept in run.json: each
    source's weight as given and its effective share (the weights are normalised to sum to 1), the tokens
    and documents of its train split, and the tokens and documents this plan draws from it (passes over
    it)."""
    from aura.data.mixture import M as MIX

    given = [s.given if s.given is not None else s.weight for s in data.specs]
    total_weight = sum(given)
    planned_tokens = plan.tokens_per_step * plan.total_steps
    sources = []
    for spec, batches, weight in zip(data.specs, data.sources, given):
        tokens, docs = len(batches.shards), batches.shards.num_documents
        drawn = round(spec.weight * planned_tokens)
        sources.append(
            {
                "name": spec.name,
                "path": str(spec.path),
                "weight": weight,
                "share": spec.weight,
                "train_tokens": tokens,
                "documents": docs,
                "planned_tokens": drawn,
                "planned_documents": round(drawn * docs / tokens) if tokens else 0,
                "passes": drawn / tokens if tokens else 0.0,
            }
        )
    if abs(total_weight - 1.0) > 1e-9:
        console.info(MIX("normalised", total=f"{total_weight:g}"))
    console.info(MIX("proportions", tokens=planned_tokens, steps=plan.total_steps))
    for s in sources:
        console.info(
            MIX(
                "source",
                name=s["name"],
                weight=f"{s['weight']:g}",
                pct=100 * s["share"],
                planned=s["planned_tokens"],
                pdocs=s["planned_documents"],
                tokens=s["train_tokens"],
                docs=s["documents"],
                passes=s["passes"],
            )
        )
    return {"weights_sum": total_weight, "sources": sources}
