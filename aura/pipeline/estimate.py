"""What ``aura pipeline plan`` says of each stage without running it, on the hardware (this one or
``--assume``'s): for a training stage the preset ``auto`` picks, tokens per step, planned steps and tokens and
a time estimate; for a data stage a time estimate from measured rates where its input's size is known now.

Training time: the time budget when the WSD schedule ends the run on it, or the planned tokens x the FLOPs per
token over the device's peak at ``ASSUMED_MFU``, whichever ends the run first (both when given). FLOPs per
token: pretraining and full SFT 6·N; LoRA/QLoRA 4·N (no weight gradients for the frozen base); DPO 8·N (the
policy's 6·N plus the reference model's forward, 2·N; a pair's text counted once, as its characters are); KTO
12·N (also the policy's and the reference's forwards on the mismatched KL pairs); ORPO, SimPO, CPO 6·N; GRPO 8·N on
prompt + completion tokens plus 2·N per sampled token at ``GENERATION_MFU`` (decoding one
token at a time is bound by memory, not FLOPs); distill the student's 4·N or 6·N plus the teacher's forward,
2·N_teacher, and 2·N per token the student samples (``lmbda`` x ``max_new_tokens`` per example). N: the
preset's parameters, the earlier stage's model for a base it trains (``pretrain.final``), a local model's
``config.json``, or a hub name's size ("Mistral-7B" -> 7e9) when nothing else says it. A fine-tuning stage's
tokens come from its data file (examples and characters, ``CHARS_PER_TOKEN``) and its epochs, or from
``max_steps``/``max_tokens`` x batch x length; no estimate where neither is known (a CPU without a known peak,
data an earlier stage writes)."""

from __future__ import annotations

import csv
import json
import re
from dataclasses import dataclass
from pathlib import Path

from aura.models.size_budget import ASSUMED_MFU  # training, of the device's peak FLOP/s (one home: auto's size rule)

GENERATION_MFU = 0.05  # GRPO's sampling
CHARS_PER_TOKEN = 4.0  # assumed for Spanish text and a BPE of tens of thousands of tokens (a stated assumption)
# Data stages: bytes of input text per CPU-second of one worker process, measured by
# `python bench/bench_data_rates.py` (Intel Xeon @ 2.50GHz, load 8.4; docs/pipelines.en.md).
CURATE_BYTES_PER_S = 140_000  # aura data curate, default filters and dedup
TOKENIZER_BYTES_PER_S = 2_400_000  # aura tokenizer train, 32k (5 MB measured: larger corpora are slower per byte)
PREPARE_BYTES_PER_S = 1_900_000  # aura data prepare
_SIZE_IN_NAME = re.compile(r"(?<![\d.])(\d+(?:\.\d+)?)\s*([bm])(?![a-z])", re.IGNORECASE)


@dataclass
class StagePlan:
    auto: str | None = None
    tokens_per_step: int | None = None
    steps: int | None = None
    tokens: int | None = None
    seconds: float | None = None
    params: int | None = None  # the model's parameters (what a later stage fine-tunes)
    seq_len: int | None = None
    examples: int | None = None  # a fine-tuning stage's training examples (pairs), when its data's size is known
    read: int | None = None  # the examples its planned steps read (more than ``examples``: it repeats them)
    size: object | None = None  # pretraining under auto with a time budget: the SizeChoice (size_budget)


def budget_seconds(cfg) -> float | None:
    """``--time-budget`` hours in seconds when the WSD schedule ends the run on it (cosine only warns)."""
    hours = getattr(cfg, "time_budget", None)
    if not hours or getattr(cfg, "lr_schedule", None) != "wsd":
        return None
    return float(hours) * 3600


def _input_bytes(paths) -> int | None:
    """Bytes of the inputs that exist now (None when one does not: an earlier stage writes it)."""
    total = 0
    for item in paths or []:
        p = Path(str(item)).expanduser()
        if p.is_file():
            total += p.stat().st_size
        elif p.is_dir():
            total += sum(f.stat().st_size for f in p.rglob("*") if f.is_file())
        else:
            return None
    return total or None


def _workers(cfg) -> int:
    from aura.models.hardware import cpu_count

    return max(int(getattr(cfg, "workers", 0) or 0) or cpu_count(), 1)


def _finish(
    out: StagePlan,
    cfg,
    info,
    flops_per_token: float | None,
    *,
    devices: int,
    extra_flops_per_step: float = 0.0,
    extra_mfu: float = GENERATION_MFU,
) -> StagePlan:
    """Seconds from the planned tokens and FLOPs (or tokens from the time budget), whichever ends first."""
    budget = budget_seconds(cfg)
    peak = info.peak_flops(_precision(cfg, info))
    devices = max(devices, 1)
    step_s = None
    if peak and flops_per_token and out.tokens_per_step:
        step_s = (
            flops_per_token * out.tokens_per_step / (peak * ASSUMED_MFU) + extra_flops_per_step / (peak * extra_mfu)
        ) / devices  # a step's tokens: every device's
    if out.steps is None and out.tokens and out.tokens_per_step:
        out.steps = -(-out.tokens // out.tokens_per_step)
    if out.steps is not None and out.tokens is None and out.tokens_per_step:
        out.tokens = out.steps * out.tokens_per_step
    by_steps = out.steps * step_s if (out.steps is not None and step_s) else None
    if budget is not None and (by_steps is None or budget <= by_steps):
        out.seconds = budget
        if step_s:
            out.steps = int(budget / step_s)
            out.tokens = out.steps * out.tokens_per_step
    elif by_steps is not None:
        out.seconds = by_steps
    return out


def _precision(cfg, info) -> str:
    from aura.models.hardware import default_precision

    p = getattr(cfg, "precision", "auto")
    return default_precision(info) if p in (None, "auto") else str(p)


def plan_pretrain(cfg, info, *, devices: int) -> StagePlan:
    from aura.models.hardware import PLANNING_VOCAB, choose_auto
    from aura.models.presets import preset_training, resolve_spec, spec_parameters
    from aura.models.size_budget import budget_hours

    out = StagePlan()
    if getattr(cfg, "init_from", None):
        out.seconds = budget_seconds(cfg)
        return out
    preset = cfg.model_preset
    batch, accum = cfg.batch_size, cfg.gradient_accumulation_steps
    if preset == "auto":
        hours = budget_hours(getattr(cfg, "time_budget", None), getattr(cfg, "lr_schedule", None))
        choice = choose_auto(info, time_budget_h=hours, devices=devices)
        preset, out.size = choice.preset, choice.size
        batch, accum = batch or choice.batch_size, accum or choice.gradient_accumulation_steps
        out.auto = (
            f"{choice.preset} (batch {choice.batch_size} × {choice.gradient_accumulation_steps}, {choice.precision})"
        )
    try:
        spec = resolve_spec(
            preset,
            arch=cfg.arch,
            embed_size=cfg.embed_size,
            num_layers=cfg.num_layers,
            num_heads=cfg.num_heads,
            num_kv_heads=cfg.num_kv_heads,
            seq_length=cfg.seq_length,
            intermediate_size=cfg.intermediate_size,
        )
    except Exception:  # an incomplete manual spec: the stage's own checks say what is missing when it runs
        out.seconds = budget_seconds(cfg)
        return out
    batch = batch or preset_training(preset).batch_size
    out.tokens_per_step = batch * (accum or 1) * spec.seq_len * max(devices, 1)  # the global batch
    out.params, out.seq_len = spec_parameters(spec, cfg.vocab_size or PLANNING_VOCAB), spec.seq_len
    if cfg.max_steps:
        out.steps = int(cfg.max_steps)
    elif cfg.max_tokens:
        out.tokens = int(cfg.max_tokens)
    return _finish(out, cfg, info, 6.0 * out.params, devices=devices)


def _params_of_model(base: str, earlier: dict[str, StagePlan], refs: list[str]) -> int | None:
    """N of the model a fine-tuning stage starts from (see the module's docstring)."""
    for ref in refs:
        plan = earlier.get(ref)
        if plan is not None and plan.params and f"/{ref}" in base.replace("\\", "/"):
            return plan.params
    p = Path(base).expanduser()
    config = p / "config.json"
    if config.is_file():
        try:
            from transformers import AutoConfig

            from aura.models.presets import matmul_parameters

            return matmul_parameters(AutoConfig.from_pretrained(str(p)))
        except Exception:  # a config transformers cannot read: the stage's own checks name it
            return None
    m = _SIZE_IN_NAME.search(Path(base).name)
    if m and not p.exists():
        return int(float(m.group(1)) * (1e9 if m.group(2).lower() == "b" else 1e6))
    return None


def data_size(path) -> tuple[int, int] | None:
    """(examples, characters of their text) of a fine-tuning data file: JSONL/JSON records or CSV rows;
    None for anything else (a folder, a hub dataset, a file an earlier stage writes)."""
    p = Path(str(path or "")).expanduser()
    if not p.is_file():
        return None
    name = p.name.lower()
    try:
        with p.open(encoding="utf-8", errors="replace", newline="") as f:
            if name.endswith(".jsonl"):
                rows = [json.loads(line) for line in f if line.strip()]
            elif name.endswith(".json"):
                data = json.load(f)
                rows = data if isinstance(data, list) else [data]
            elif name.endswith((".csv", ".tsv")):
                rows = list(csv.DictReader(f, dialect="excel-tab" if name.endswith(".tsv") else "excel"))
            else:
                return None
    except (OSError, ValueError):
        return None
    chars = sum(len(v) for r in rows if isinstance(r, dict) for v in _strings(r))
    return len(rows), chars


def _strings(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def plan_finetune(cfg, info, *, earlier: dict[str, StagePlan], refs: list[str], devices: int) -> StagePlan:
    from aura.train.finetune_config import auto_epochs
    from aura.train.objectives.registry import setup_class

    out = StagePlan()
    defaults = cfg.optimisation_defaults()
    batch = cfg.batch_size or defaults["batch_size"]
    accum = cfg.gradient_accumulation_steps or (defaults["gradient_accumulation_steps"] if not cfg.batch_size else 1)
    n = _params_of_model(str(cfg.base_model or ""), earlier, refs)
    out.params = n
    size = data_size(cfg.data) or hub_data_size(cfg.data)
    rows = batch * accum * max(devices, 1)  # examples (pairs; GRPO: completions) per step, all processes
    example_tokens = size[1] / max(size[0], 1) / CHARS_PER_TOKEN if size else None  # one example's text
    step = setup_class(cfg.objective).plan_step(  # each objective says what its step costs
        cfg,
        params=n,
        rows=rows,
        example_tokens=example_tokens,
        params_of=lambda path: _params_of_model(str(path), earlier, refs) if path else None,
    )
    out.tokens_per_step, train_fpt, sample_flops, per_step = (
        step.tokens,
        step.flops_per_token,
        step.sample_flops,
        step.rows,
    )
    if cfg.max_steps:
        out.steps = int(cfg.max_steps)
    elif cfg.max_tokens:
        out.tokens = int(cfg.max_tokens)
    elif size:
        train_examples = max(1, int(size[0] * (1 - (cfg.val_fraction or 0))))
        epochs = cfg.epochs or auto_epochs(train_examples)[0]
        out.steps = epochs * -(-train_examples // per_step)
    out = _finish(out, cfg, info, train_fpt, devices=devices, extra_flops_per_step=sample_flops)
    if size and out.steps:
        out.examples = max(1, int(size[0] * (1 - (cfg.val_fraction or 0))))
        out.read = out.steps * per_step
    return out


def hub_data_size(name) -> tuple[int, int] | None:
    """(examples, characters) of a hub dataset Aura's catalogue knows (``aura.data.hub_datasets``)."""
    from aura.data.hub_datasets import card

    known = card(name)
    return (known.examples, known.examples * known.chars_per_example) if known else None


def plan_data(key: tuple[str, ...], cfg) -> StagePlan:
    """Curation, tokenizer training and data preparation: their input's bytes over a measured rate, when the
    input exists now (for a curation cut at ``max_documents``, an upper bound); a dataset streamed from the
    hub or a folder an earlier stage writes has no known size before it runs."""
    out = StagePlan()
    inputs = list(getattr(cfg, "inputs", None) or [])
    hf = getattr(cfg, "hf_dataset", "")
    if hf and not Path(hf).expanduser().is_dir():
        return out  # streamed from the hub: its size is not known here
    size = _input_bytes(inputs + ([hf] if hf else []))
    if not size:
        return out
    if key == ("data", "curate"):
        rate = CURATE_BYTES_PER_S * _workers(cfg)
    elif key == ("tokenizer", "train"):
        rate = TOKENIZER_BYTES_PER_S
    else:
        rate = PREPARE_BYTES_PER_S * _workers(cfg)
    out.seconds = size / rate
    return out


def plan_stage(
    key: tuple[str, ...],
    cfg,
    info,
    *,
    earlier: dict[str, StagePlan] | None = None,
    refs: list[str] = (),
    launch: dict | None = None,
    nnodes: int = 1,
) -> StagePlan:
    """One stage's plan; ``earlier`` holds the plans of the stages before it (by name), ``refs`` the
    earlier stages it reads, ``launch`` its ``launch:`` block and ``nnodes`` its nodes (the block's value,
    else $NNODES): processes per node (the block's, else the hardware's count) x nodes devices."""
    devices = info.count
    if launch is not None:
        devices = int(launch.get("gpus_per_node") or info.count) * max(int(launch.get("nnodes") or 1), nnodes)
    if key == ("pretrain",):
        return plan_pretrain(cfg, info, devices=devices)
    if key == ("finetune",):
        return plan_finetune(cfg, info, earlier=earlier or {}, refs=list(refs), devices=devices)
    if key in (("data", "curate"), ("tokenizer", "train"), ("data", "prepare")):
        return plan_data(key, cfg)
    return StagePlan()
