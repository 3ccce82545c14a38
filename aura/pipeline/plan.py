"""What ``aura pipeline plan`` says of a pretraining stage without running it: the preset ``auto`` picks on
the hardware (this one or ``--assume``'s), tokens per step, planned steps and tokens, and a time estimate:
the time budget when the WSD schedule ends the run on it, else 6·N FLOPs per token at an assumed 40 % MFU
of the device's peak (None when the peak is unknown, as on most CPUs)."""

from __future__ import annotations

from dataclasses import dataclass

ASSUMED_MFU = 0.4


@dataclass
class StagePlan:
    auto: str | None = None
    tokens_per_step: int | None = None
    steps: int | None = None
    tokens: int | None = None
    seconds: float | None = None


def budget_seconds(cfg) -> float | None:
    """``--time-budget`` hours in seconds when the WSD schedule ends the run on it (cosine only warns)."""
    hours = getattr(cfg, "time_budget", None)
    if not hours or getattr(cfg, "lr_schedule", None) != "wsd":
        return None
    return float(hours) * 3600


def plan_stage(key: tuple[str, ...], cfg, info) -> StagePlan:
    from aura.models.hardware import PLANNING_VOCAB, choose_auto, default_precision
    from aura.models.presets import preset_training, resolve_spec, spec_parameters

    out = StagePlan(seconds=budget_seconds(cfg))
    if key != ("pretrain",) or getattr(cfg, "init_from", None):
        return out
    preset = cfg.model_preset
    batch, accum, precision = cfg.batch_size, cfg.gradient_accumulation_steps, default_precision(info)
    if preset == "auto":
        choice = choose_auto(info)
        preset, precision = choice.preset, choice.precision
        batch, accum = batch or choice.batch_size, accum or choice.gradient_accumulation_steps
        out.auto = f"{choice.preset} (batch {choice.batch_size} × {choice.gradient_accumulation_steps}, {precision})"
    try:
        spec = resolve_spec(preset, arch=cfg.arch, embed_size=cfg.embed_size, num_layers=cfg.num_layers,
                            num_heads=cfg.num_heads, num_kv_heads=cfg.num_kv_heads, seq_length=cfg.seq_length,
                            intermediate_size=cfg.intermediate_size)
    except Exception:  # an incomplete manual spec: the stage's own checks say what is missing when it runs
        return out
    batch = batch or preset_training(preset).batch_size
    out.tokens_per_step = batch * (accum or 1) * spec.seq_len
    if cfg.max_steps:
        out.steps = int(cfg.max_steps)
        out.tokens = out.steps * out.tokens_per_step
    elif cfg.max_tokens:
        out.tokens = int(cfg.max_tokens)
        out.steps = -(-out.tokens // out.tokens_per_step)
    peak = info.peak_flops(precision)
    if out.seconds is None and out.tokens and peak:
        params = spec_parameters(spec, cfg.vocab_size or PLANNING_VOCAB)
        out.seconds = 6 * params * out.tokens / (peak * ASSUMED_MFU * max(info.count, 1))
    elif out.seconds is not None and out.steps is None and peak:
        params = spec_parameters(spec, cfg.vocab_size or PLANNING_VOCAB)
        out.tokens = int(out.seconds * peak * ASSUMED_MFU * max(info.count, 1) / (6 * params))
        out.steps = out.tokens // out.tokens_per_step
    return out
