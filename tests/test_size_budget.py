"""`auto` under --time-budget: the size whose tokens in the budget are about its compute-optimal ~20 per parameter
(aura.models.size_budget), against numbers worked out here from the Chinchilla rule (C = 6·N·D, D ≈ 20·N), on
hardware constructed directly (its memory and its data-sheet peak)."""

from __future__ import annotations

import math

import pytest

from aura.models.hardware import GIB, HardwareInfo, choose_auto
from aura.models.presets import PRESETS, spec_parameters
from aura.models.size_budget import (
    COMPUTE_OPTIMAL_TOKENS_PER_PARAM,
    MIN_TOKENS_PER_PARAM,
    SizeOption,
    budget_hours,
    pick_size,
)

A100 = HardwareInfo(
    "cuda", "NVIDIA A100-SXM4-80GB", 1, int(79.2 * GIB), bf16=True, fp16=True, peak_flops_16bit=312e12,
    capability=(8, 0),
)  # fmt: skip
SUSTAINED = 312e12 * 0.4  # the data sheet's bf16 peak at the plan's 40 % MFU


def _tokens_per_param(preset: str, hours: float) -> float:
    n = spec_parameters(PRESETS[preset], 32000)
    return SUSTAINED * hours * 3600 / (6 * n) / n


def test_72_hour_plan_picks_the_size_its_58_hours_can_train_near_20_tokens_per_parameter():
    c = choose_auto(A100, time_budget_h=58)
    compute = SUSTAINED * 58 * 3600  # ~2.6e19 FLOPs
    optimal_n = math.sqrt(compute / (6 * COMPUTE_OPTIMAL_TOKENS_PER_PARAM))  # ~4.7e8
    assert c.preset == "qwen3-500m" and c.size is not None and c.size.sensible
    n = c.size.chosen.params
    assert 0.8 < n / optimal_n < 1.25  # within the ladder's steps of the compute-optimal size
    assert c.size.chosen.tokens_per_param == pytest.approx(_tokens_per_param("qwen3-500m", 58), rel=1e-9)
    assert 15 < c.size.chosen.tokens_per_param < 20
    # the neighbours: the memory-only choice (1.26 B) gets ~2.7 tokens per parameter, the next smaller ~36
    assert (c.size.above.preset, c.size.below.preset) == ("qwen3-72h", "qwen3-medium")
    assert c.size.above.tokens_per_param < MIN_TOKENS_PER_PARAM < 20 < c.size.below.tokens_per_param
    assert round(_tokens_per_param("qwen3-72h", 58), 1) == 2.7
    assert c.estimated_bytes <= 0.9 * A100.memory_bytes and "17 per parameter" in c.reason


def test_a_shorter_budget_picks_a_smaller_model_and_no_budget_keeps_the_memory_choice():
    short = choose_auto(A100, time_budget_h=6)
    assert short.preset == "qwen3-small"  # 29 tokens per parameter; qwen3-medium would get 3.7
    assert round(_tokens_per_param("qwen3-small", 6)) == 29 and round(_tokens_per_param("qwen3-medium", 6), 1) == 3.7
    memory_only = choose_auto(A100)
    assert memory_only.preset == "qwen3-72h" and memory_only.size is None
    assert choose_auto(A100, time_budget_h=None) == memory_only
    # under cosine the budget only warns (the run does not end on it): no size by budget
    assert budget_hours(58, "cosine") is None and budget_hours(58, None) == 58 == budget_hours(58, "wsd")


def test_a_budget_too_small_for_any_size_takes_the_smallest_with_a_warning():
    c = choose_auto(A100, time_budget_h=0.001)  # 3.6 s
    assert c.preset == "qwen3-tiny" and c.size is not None and not c.size.sensible
    assert c.size.chosen.tokens_per_param < MIN_TOKENS_PER_PARAM
    warning = c.size.warning()
    assert warning == c.reason and "--time-budget" in warning and "qwen3-tiny" in warning


def test_without_a_known_peak_the_budget_does_not_choose_the_size():
    cpu = HardwareInfo("cpu", "Some CPU", 1, 16 * GIB, bf16=False, fp16=False)
    c = choose_auto(cpu, time_budget_h=1)
    assert c.preset == "qwen3-tiny" and c.size is None and "not chosen by --time-budget" in c.reason


def test_pick_size_is_the_closest_to_20_on_a_log_scale_among_those_not_far_below():
    opts = [SizeOption("a", 100, 1_200), SizeOption("b", 300, 9_000), SizeOption("c", 30, 27_000)]
    # a: 12 per parameter (|ln 0.6| = 0.51), b: 30 (0.41), c: 900 -> b; any order of the options
    assert pick_size(opts, 1).chosen.preset == "b" == pick_size(opts[::-1], 1).chosen.preset
    assert [o.preset for o in pick_size(opts, 1).options] == ["b", "a", "c"]  # largest first
    below = [SizeOption("big", 1000, 9_000), SizeOption("small", 10, 600)]  # 9 per parameter: too few; 60
    assert pick_size(below, 1).chosen.preset == "small"
    none = [SizeOption("big", 1000, 5_000), SizeOption("small", 100, 800)]
    choice = pick_size(none, 1)
    assert choice.chosen.preset == "small" and not choice.sensible and choice.below is None


def test_pretrain_says_the_reason_under_auto_and_a_time_budget(capsys):
    """`aura pretrain --model-preset auto --time-budget 58` resolves its preset with the same rule and says why
    (the resolution step of the command, on the constructed A100: nothing trains here)."""
    from aura.train.pretrain import PretrainConfig, _resolve

    cfg = PretrainConfig(data=["prepared"], output_dir="run", model_preset="auto", time_budget=58)
    resolved, spec, auto = _resolve(cfg, A100, device_type="cpu", devices=1)
    out = capsys.readouterr().out
    assert spec.name == "qwen3-500m" and resolved.lr_schedule == "wsd" and auto["size"]["chosen"]["preset"] == spec.name
    assert "'qwen3-500m' (501 M parameters) trains ~8.67 B tokens, 17 per parameter" in out
    assert "larger: 'qwen3-72h' (1.26 B): ~3.44 B tokens, 2.7 per parameter" in out
    assert "smaller: 'qwen3-medium' (349 M): ~12.5 B tokens, 36 per parameter" in out
    two = _resolve(cfg, A100, device_type="cpu", devices=2)[1]  # twice the compute: a larger optimum
    assert spec_parameters(two, 32000) >= spec_parameters(spec, 32000)


def test_a_resumed_run_keeps_its_size_whatever_its_budget_now_says(capsys):
    """A WSD branch point may change --time-budget on resume; the model cannot change: the checkpoint's preset
    (``keep``) stays, and the reason says so."""
    longer = choose_auto(A100, time_budget_h=300)
    assert longer.preset == "qwen3-72h"  # 300 h: 14 tokens per parameter for 1.26 B (0.5 B: 90)
    kept = choose_auto(A100, time_budget_h=300, keep="qwen3-500m")
    assert kept.preset == "qwen3-500m" and kept.size.chosen.preset == "qwen3-500m"
    assert kept.size.chosen.tokens_per_param == pytest.approx(_tokens_per_param("qwen3-500m", 300), rel=1e-9)
    assert "resuming the checkpoint's model, 'qwen3-500m'" in kept.reason
    assert choose_auto(A100, time_budget_h=58, keep="qwen3-500m").reason == choose_auto(A100, time_budget_h=58).reason
