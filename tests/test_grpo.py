"""`aura finetune --objective grpo` through the real CLI, its rewards, its sampler and the Spanish math set:
built-in and user rewards, exact resume (same completions, losses and rewards), full fine-tuning with a
frozen reference, bad input named by file, line, prompt and flag. Parity with TRL is in
tests/test_grpo_parity.py, DDP in tests/test_grpo_dist.py."""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_finetune import finetune
from tests.tiny_models import build_gpt2, build_llama, train_tokenizer

ROOT = Path(__file__).resolve().parents[1]
MATH = ROOT / "aura" / "resources" / "math_es"
FAST = [
    "--objective",
    "grpo",
    "--num-generations",
    4,
    "--batch-size",
    4,
    "--gradient-accumulation-steps",
    2,
    "--max-completion-length",
    12,
    "--log-interval",
    1,
    "--lora-r",
    8,
    "--lora-dropout",
    0,
    "--precision",
    "fp32",
    "--learning-rate",
    "5e-3",
    "--warmup-steps",
    0,
    "--save-steps",
    0,
]
USER_REWARD = """
def digits(completions, answer, **kwargs):
    return [sum(ch.isdigit() for ch in c) / max(len(c), 1) for c in completions]

def broken(completions, **kwargs):
    raise ValueError("no me gusta")

def not_numbers(completions, **kwargs):
    return ["alto" for _ in completions]

def vowel_first(completions, **kwargs):
    return [1.0 if c.lstrip()[:1] and c.lstrip()[0] in "aeiouAEIOU" else 0.0 for c in completions]
"""


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("grpo")
    tok = train_tokenizer(root / "tok", vocab_size=500)
    llama = build_llama(root / "llama", tok, hidden=64, layers=2)
    rows = [json.loads(ln) for ln in (MATH / "train.jsonl").read_text(encoding="utf-8").splitlines()[:6]]
    data = root / "prompts.jsonl"
    data.write_text(
        "".join(
            json.dumps({"prompt": r["prompt"][:60], "answer": r["answer"]}, ensure_ascii=False) + "\n" for r in rows
        ),
        encoding="utf-8",
    )
    rewards = root / "my_rewards.py"
    rewards.write_text(USER_REWARD, encoding="utf-8")
    return {"root": root, "tok": tok, "llama": llama, "data": data, "rewards": rewards}


def step_rows(run: Path) -> dict[int, dict]:
    with open(run / "training_log.csv", newline="") as f:
        return {int(r["step"]): r for r in csv.DictReader(f) if r["kind"] == "step"}


# ---------------------------------------------------------------------------------------------------
# Rewards and answers


@pytest.mark.parametrize(
    "text,values",
    [
        ("12,5", {12.5}),
        ("12.5", {12.5}),
        ("1.234,5", {1234.5}),
        ("1,234.5", {1234.5}),
        ("12 345", {12345.0}),
        ("1.234", {1.234, 1234.0}),
        ("42 €", {42.0}),
        ("2,80 €", {2.8}),
        ("-3", {-3.0}),
        ("0,5 litros", {0.5}),
        ("5, 7", set()),
        ("1.2.3", set()),
        ("abc", set()),
    ],
)
def test_number_values_read_spanish_and_english_numbers(text, values):
    from aura.data.rewards import number_values

    assert number_values(text) == values


def test_exact_answer_format_and_length_rewards():
    from aura.data.rewards import (
        DEFAULT_FORMAT,
        answers_match,
        exact_answer,
        final_answer,
        format_reward,
        length_reward,
    )

    assert final_answer("3 + 4 = 7.\nRespuesta: 7") == "7"
    assert final_answer("Respuesta: 42 euros en total.") == "42"
    assert final_answer("Son 12,5 euros") == "12,5" and final_answer("x #### 1,234") == "1,234"
    assert final_answer("\\boxed{3.5}") == "3.5" and final_answer("<answer>París</answer>") == "París"
    assert answers_match("12,50 €", "12,5") and answers_match("París.", "paris") and answers_match("7", "Sol... #### 7")
    assert not answers_match("8", "7") and not answers_match("", "7")
    assert exact_answer(completions=["Respuesta: 7", "Respuesta: 8", "7,0"], answer=["7", "7", "7"]) == [1.0, 0.0, 1.0]
    assert format_reward(DEFAULT_FORMAT)(completions=["3+4=7\nRespuesta: 7", "Respuesta: 7", "7"]) == [1.0, 0.0, 0.0]
    assert format_reward("tags:think,answer")(
        completions=["<think>a</think>\n<answer>7</answer>", "<answer>7</answer>"]
    ) == [1.0, 0.0]
    assert length_reward(10)(completion_ids=[[1] * 5, [1] * 10]) == [-0.5, -1.0]


def test_overlong_reward_is_trls_soft_overlong_punishment():
    from trl.rewards import get_soft_overlong_punishment

    from aura.data.rewards import parse_reward

    for max_len, buffer in ((20, 5), (12, 1), (256, 0)):
        ours = parse_reward("overlong", max_completion_length=max_len, overlong_buffer=buffer).fn
        theirs = get_soft_overlong_punishment(max_completion_len=max_len, soft_punish_cache=buffer or max_len // 5)
        ids = [[7] * n for n in range(max_len + 3)]
        assert ours(completion_ids=ids) == pytest.approx(theirs(ids))
    assert min(ours(completion_ids=ids)) == -1.0 and max(ours(completion_ids=ids)) == 0.0


def test_dapo_dynamic_sampling_and_masking_resume_exactly(env, tmp_path):
    """--dynamic-sampling resample (groups without a reward signal sampled again with another prompt, then
    dropped), --mask-truncated-completions and the overlong reward: what they did is in the log and in
    reward_signal.json, and a resumed run redraws the very same replacements."""
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    common = [
        "--base-model",
        env["llama"],
        "--data",
        env["data"],
        *FAST,
        "--max-steps",
        4,
        "--reward",
        f"{env['rewards']}:vowel_first",
        "--reward",
        "overlong:0.5",
        "--overlong-buffer",
        4,
        "--dynamic-sampling",
        "resample",
        "--resample-rounds",
        2,
        "--mask-truncated-completions",
        "--val-fraction",
        0,
    ]
    out = finetune(*common, "--output-dir", straight, "--save-steps", 2)
    assert "Dynamic sampling (DAPO)" in out
    resumed.mkdir()
    shutil.copytree(straight / "checkpoint-step-2", resumed / "checkpoint-step-2")
    finetune(*common, "--output-dir", resumed, "--resume-from", "latest")
    a, b = step_rows(straight), step_rows(resumed)
    keys = ["train_loss", "reward", "groups_resampled", "groups_dropped", "completions_masked", "completion_length"]
    for step in (3, 4):
        assert [a[step][k] for k in keys] == [b[step][k] for k in keys]
    assert sum(float(r["groups_resampled"]) for r in a.values()) > 0  # a silent group was sampled again
    assert all(0 <= float(r["completions_masked"]) <= float(r["completions_truncated"]) for r in a.values())
    assert sum(float(r["completions_masked"]) for r in a.values()) > 0
    summary = json.loads((straight / "reward_signal.json").read_text())
    assert summary["groups_resampled"] == sum(int(float(r["groups_resampled"])) for r in a.values())
    assert summary["groups_dropped"] == sum(int(float(r["groups_dropped"])) for r in a.values())


def test_reward_specs_and_errors_name_the_prompt(env):
    from aura.core.errors import AuraError
    from aura.data.rewards import RewardSet, parse_reward

    assert [
        (r.name, r.weight)
        for r in (parse_reward("exact-answer"), parse_reward("format:0.2"), parse_reward(f"{env['rewards']}:digits:2"))
    ] == [("exact-answer", 1.0), ("format", 0.2), ("my_rewards.digits", 2.0)]
    for spec, words in (
        ("exactanswer", "expected NAME[:WEIGHT]"),
        ("nope.py:fn", "does not exist"),
        (f"{env['rewards']}:missing", "defines no function 'missing'"),
    ):
        with pytest.raises(AuraError, match=words.replace("[", r"\[").replace("]", r"\]")):
            parse_reward(spec)
    common = dict(
        prompt_text="¿Cuánto es 2 + 2?",
        where="datos.jsonl, line 3",
        completions=["4", "cinco"],
        completion_ids=[[1], [2]],
        fields={"answer": "4"},
    )
    assert RewardSet([parse_reward(f"{env['rewards']}:digits")]).scores(**common) == [[1.0, 0.0]]
    for name, words in (
        ("broken", "failed on datos.jsonl, line 3 .*¿Cuánto es 2 \\+ 2\\?.*ValueError: no me gusta"),
        ("not_numbers", "returned 'alto' for a completion of datos.jsonl, line 3"),
    ):
        with pytest.raises(AuraError, match=words):
            RewardSet([parse_reward(f"{env['rewards']}:{name}")]).scores(**common)


# ---------------------------------------------------------------------------------------------------
# Sampler


def test_batched_sampler_equals_transformers_generate_and_keys_fix_the_draws(env, tmp_path):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from aura.inference.sampling import SamplingParams, sample_batch

    tok = AutoTokenizer.from_pretrained(env["tok"])
    gpt2 = build_gpt2(tmp_path / "gpt2", env["tok"])
    prompts = [tok(t)["input_ids"] for t in ("Hola, ¿qué tal?", "El perro", "Había una vez en un lugar de la Mancha")]
    cpu = torch.device("cpu")
    for path in (env["llama"], gpt2):  # RoPE and learned positions: left padding must not move either
        model = AutoModelForCausalLM.from_pretrained(path).eval()
        greedy = SamplingParams(max_new_tokens=10, temperature=0, stop_ids=(tok.eos_token_id,))
        got = sample_batch(model, prompts, greedy, pad_id=tok.pad_token_id, device=cpu)
        for p, g in zip(prompts, got):
            ref = model.generate(
                torch.tensor([p]),
                max_new_tokens=10,
                do_sample=False,
                eos_token_id=tok.eos_token_id,
                pad_token_id=tok.pad_token_id,
            )[0, len(p) :].tolist()
            assert g == ref
    params = SamplingParams(max_new_tokens=12, temperature=1.0, top_p=0.9, top_k=40, stop_ids=(tok.eos_token_id,))
    keys = [11, 22, 33]
    a = sample_batch(model, prompts, params, pad_id=tok.pad_token_id, device=cpu, keys=keys)
    # the same key gives the same completion alone, in another batch, in another position
    alone = sample_batch(model, prompts[2:], params, pad_id=tok.pad_token_id, device=cpu, keys=keys[2:])
    swapped = sample_batch(model, prompts[::-1], params, pad_id=tok.pad_token_id, device=cpu, keys=keys[::-1])
    assert alone[0] == a[2] and swapped[::-1] == a
    other = sample_batch(model, [prompts[0]] * 4, params, pad_id=tok.pad_token_id, device=cpu, keys=[1, 2, 3, 4])
    assert len({tuple(c) for c in other}) > 1  # different keys, different draws
    stop = SamplingParams(max_new_tokens=30, temperature=1.0, stop_strings=("a",))
    for ids in sample_batch(model, prompts, stop, pad_id=tok.pad_token_id, device=cpu, tokenizer=tok, keys=keys):
        text = tok.decode(ids)
        assert "a" not in tok.decode(ids[:-1]) and ("a" in text or len(ids) == 30)


# ---------------------------------------------------------------------------------------------------
# The Spanish math set


def test_math_set_has_500_verified_problems_split_train_test():
    from aura.data.rewards import number_values

    train = [json.loads(ln) for ln in (MATH / "train.jsonl").read_text(encoding="utf-8").splitlines()]
    test = [json.loads(ln) for ln in (MATH / "test.jsonl").read_text(encoding="utf-8").splitlines()]
    assert len(train) >= 500 and len(test) >= 100
    assert not {r["id"] for r in train} & {r["id"] for r in test}
    assert len({r["prompt"] for r in train + test}) == len(train) + len(test)
    assert len({r["template"] for r in train}) >= 12
    assert sum("," in r["answer"] for r in train + test) > 100  # decimal commas
    sys.path.insert(0, str(ROOT / "scripts"))
    from build_math_es import evaluate

    for r in train + test:  # the answer is the value of the worked solution's expression
        expression = r["solution"].split(": ", 1)[1].rsplit(" = ", 1)[0]
        assert {float(evaluate(expression))} == number_values(r["answer"]), r["id"]
    check = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "build_math_es.py"), "--check"], capture_output=True, text=True
    )
    assert check.returncode == 0, check.stderr


# ---------------------------------------------------------------------------------------------------
# The CLI


def test_grpo_with_user_reward_resumes_exactly(env, tmp_path):
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    common = [
        "--base-model",
        env["llama"],
        "--data",
        env["data"],
        *FAST,
        "--max-steps",
        4,
        "--beta",
        "0.04",
        "--reward",
        "exact-answer",
        "--reward",
        f"{env['rewards']}:digits:0.5",
        "--val-fraction",
        0,
    ]
    out = finetune(*common, "--output-dir", straight, "--save-steps", 2)
    assert "is your own code" in out and "reference: the base model with the adapter disabled" in out
    resumed.mkdir()
    shutil.copytree(straight / "checkpoint-step-2", resumed / "checkpoint-step-2")
    out = finetune(*common, "--output-dir", resumed, "--resume-from", "latest")
    assert "Resumed from" in out
    a, b = step_rows(straight), step_rows(resumed)
    assert set(a) == {1, 2, 3, 4} and set(b) == {3, 4}
    keys = [
        "train_loss",
        "reward",
        "reward_std",
        "rewards/exact-answer/mean",
        "rewards/my_rewards.digits/mean",
        "completion_length",
        "entropy",
        "kl",
        "clip_ratio",
    ]
    for step in (3, 4):
        assert [a[step][k] for k in keys] == [b[step][k] for k in keys]
    assert float(a[4]["kl"]) > 0 and float(a[1]["completion_length"]) > 0
    assert all(float(r["time/rollout_s"]) > 0 for r in a.values())
    assert (straight / "final" / "adapter_model.safetensors").is_file()
    from tests.conftest import run_aura_here

    r = run_aura_here("plot", straight, "--output-dir", tmp_path, "--out", "grpo.svg")  # the reward curve
    assert r.returncode == 0, r.stdout + r.stderr
    svg = (tmp_path / "grpo.svg").read_text()
    assert "Reward (GRPO)" in svg and "straight (Mean reward)" in svg


def test_format_pattern_scores_every_completion_as_a_plain_python_check_does(env, tmp_path):
    """`--format-pattern` reaches the format reward of a real run: on every step its mean and spread equal
    those of a user reward that checks the same property without a regex (the completion's first non-blank
    character is a vowel), and it is not the default pattern's score."""
    run = tmp_path / "fmt"
    finetune(
        "--base-model",
        env["llama"],
        "--data",
        env["data"],
        *FAST,
        "--max-steps",
        2,
        "--val-fraction",
        0,
        "--format-pattern",
        r"(?s)\s*[aeiouAEIOU].*",
        "--reward",
        "format:1",
        "--reward",
        f"{env['rewards']}:vowel_first",
        "--output-dir",
        run,
    )
    rows = step_rows(run)
    assert set(rows) == {1, 2}
    for row in rows.values():
        for stat in ("mean", "std"):
            assert row[f"rewards/format/{stat}"] == row[f"rewards/my_rewards.vowel_first/{stat}"], row
    # some completions start with a vowel (the default pattern, text ending in 'Respuesta: N', scores 0 here)
    assert max(float(r["rewards/format/mean"]) for r in rows.values()) > 0


@pytest.mark.slow
def test_grpo_full_finetuning_with_a_frozen_reference_then_chat(env, tmp_path):
    run = tmp_path / "full"
    args = [a for a in FAST if a not in ("--lora-r", 8, "--lora-dropout")]
    args.remove(0)  # --lora-dropout's value, the first 0
    out = finetune(
        "--base-model",
        env["llama"],
        "--data",
        env["data"],
        *args,
        "--max-steps",
        2,
        "--method",
        "full",
        "--beta",
        "0.1",
        "--reward",
        "format:1",
        "--reward",
        "length:0.1",
        "--output-dir",
        run,
        "--val-fraction",
        "0.34",
        "--eval-interval",
        1,
        "--loss-type",
        "grpo",
        "--scale-rewards",
        "batch",
    )
    assert "reference: a frozen copy of the starting model" in out
    with open(run / "training_log.csv", newline="") as f:
        evals = [r for r in csv.DictReader(f) if r["kind"] == "eval"]
    assert evals and all(r["val_reward/format"] != "" for r in evals)
    from tests.conftest import run_aura_here

    r = run_aura_here("plot", run, "--output-dir", tmp_path, "--out", "full.svg")
    assert r.returncode == 0 and "full (Validation reward)" in (tmp_path / "full.svg").read_text(), r.stdout + r.stderr
    from tests.conftest import run_aura

    r = run_aura("chat", "--model", run / "final", "--max-new-tokens", 4, "--temperature", 0, input="Hola\n")
    assert r.returncode == 0, r.stdout + r.stderr


def test_grpo_with_qlora_on_cpu(env, tmp_path):
    """QLoRA (bitsandbytes' 4-bit CPU kernels): rollouts through the unmerged 4-bit model, the reference as the
    4-bit base with the adapter disabled, gradients that move the adapter, and an adapter at the end."""
    pytest.importorskip("bitsandbytes")
    import math

    from safetensors.torch import load_file

    run = tmp_path / "qlora"
    out = finetune(
        "--base-model",
        env["llama"],
        "--data",
        env["data"],
        *FAST,
        "--max-steps",
        2,
        "--method",
        "qlora",
        "--beta",
        "0.04",
        "--reward",
        f"{env['rewards']}:digits",
        "--val-fraction",
        0,
        "--output-dir",
        run,
    )
    assert "reference: the base model with the adapter disabled" in out
    rows = step_rows(run)
    assert set(rows) == {1, 2} and float(rows[1]["completion_length"]) > 0
    for r in rows.values():
        assert float(r["grad_norm"]) > 0 and math.isfinite(float(r["train_loss"])) and float(r["kl"]) >= 0
    adapter = load_file(run / "final" / "adapter_model.safetensors")
    assert any(k.endswith("lora_B.weight") and v.abs().sum() > 0 for k, v in adapter.items())  # B moved off zero


def test_a_reward_that_fails_names_the_prompt(env, tmp_path):
    from tests.conftest import run_aura

    r = run_aura(
        "finetune",
        "--base-model",
        env["llama"],
        "--data",
        env["data"],
        *map(str, FAST),
        "--max-steps",
        "1",
        "--reward",
        f"{env['rewards']}:broken",
        "--output-dir",
        tmp_path / "r",
    )
    out = r.stdout + r.stderr
    assert r.returncode == 2, out
    assert "The reward 'my_rewards.broken' failed on" in out and "ValueError: no me gusta" in out
    assert "prompts.jsonl" in out and "Traceback" not in out


@pytest.mark.parametrize(
    "flags,words",
    [
        (["--num-generations", 1], "--num-generations must be at least 2"),
        (["--reward", "nope.py:fn"], "does not exist"),
        (["--reward", "exactanswer"], "expected NAME[:WEIGHT]"),
        (["--batch-size", 3, "--gradient-accumulation-steps", 1], "must be a multiple of --num-generations (4)"),
        (["--deepspeed", "ZERO3"], "GRPO does not take DeepSpeed ZeRO-3 ("),  # FSDP2 and ZeRO-2: test_sampling_sharded
        (
            ["--strategy", "fsdp", "--rollout-engine", "vllm"],
            "--rollout-engine vllm does not combine with --strategy fsdp: every step copies",
        ),
        (["--precompute-ref"], "--precompute-ref does not apply to --objective grpo"),
        (["--top-p", 0], "--top-p must be in (0, 1]"),
        (["--max-completion-length", 250], "does not fit the model's context (256 tokens)"),
        (["--method", "qlora", "--rollout-engine", "vllm"], "does not take --method qlora"),
    ],
)
def test_grpo_refusals(env, tmp_path, flags, words):
    zero3 = tmp_path / "zero3.json"
    zero3.write_text('{"zero_optimization": {"stage": 3}}', encoding="utf-8")
    flags = [zero3 if f == "ZERO3" else f for f in flags]
    out = finetune(
        "--base-model", env["llama"], "--data", env["data"], *FAST, *flags, "--output-dir", tmp_path / "r", expect=2
    )
    assert words in out
    if "ZeRO-3" in words:
        assert str(zero3) in out and "zero_optimization.stage 3" in out


def test_grpo_flags_belong_to_grpo_and_answers_are_required(env, tmp_path):
    out = finetune("--base-model", env["llama"], "--epsilon", "0.3", "--output-dir", tmp_path / "a", expect=2)
    assert "--epsilon only applies to --objective grpo (the objective is 'sft')" in out
    no_answer = tmp_path / "q.jsonl"
    no_answer.write_text('{"prompt": "Hola"}\n{"prompt": "Adiós"}\n', encoding="utf-8")
    out = finetune("--base-model", env["llama"], "--data", no_answer, *FAST, "--output-dir", tmp_path / "b", expect=2)
    assert "compares with each prompt's 'answer' field, but" in out and "q.jsonl" in out
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "Hola", "answer": "1"}\n{"texto": "x"}\n', encoding="utf-8")
    out = finetune("--base-model", env["llama"], "--data", bad, *FAST, "--output-dir", tmp_path / "c", expect=2)
    assert "the prompt is missing" in out and "bad.jsonl" in out


def test_math_task_of_aura_eval_scores_exact_answers(env):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from aura.evaluation.math_task import MATH_TASK, load_problems, math_row, score_answers

    problems = load_problems()
    assert len(problems) >= 100
    answers = [p["answer"] for p in problems]
    assert score_answers([p["solution"] for p in problems], answers) == len(problems)  # worked solutions: all right
    wrong = [p["solution"].rsplit("Respuesta:", 1)[0] + "Respuesta: 100000" for p in problems]
    assert score_answers(wrong, answers) == 0
    model = AutoModelForCausalLM.from_pretrained(env["llama"]).eval()
    row = math_row(model, AutoTokenizer.from_pretrained(env["llama"]), limit=4, batch_size=3, max_new_tokens=8)
    assert row["task"] == MATH_TASK and row["metric"] == "exact_match" and row["n"] == 4 and 0 <= row["value"] <= 1


def test_vllm_engine_set_up_for_a_single_process_its_context_and_its_memory_share():
    """What a single-GPU `aura finetune --objective grpo --rollout-engine vllm` hands vLLM (vLLM itself needs
    CUDA and never ran here): the launch variables its external_launcher reads when torchrun set none, a
    context of the longest prompt and completion, and the GPU share it takes out of the training plan."""
    from types import SimpleNamespace

    from aura.models.hardware import assumed_hardware
    from aura.train.objectives.vllm_rollout import LAUNCH_VARS, model_len, single_process_env
    from aura.train.run.memory import training_share

    env = single_process_env({})
    assert set(env) == set(LAUNCH_VARS) and env["WORLD_SIZE"] == "1" and 0 < int(env["MASTER_PORT"]) < 65536
    torchrun = {k: "7" for k in LAUNCH_VARS}
    assert single_process_env(torchrun) == {}  # under torchrun its own values stay
    from aura.train.objectives.vllm_rollout import launch_env

    before = dict(os.environ)
    with launch_env():  # set while the engine starts, then out again: nothing after it thinks it is under torchrun
        assert all(k in os.environ for k in LAUNCH_VARS)
    assert dict(os.environ) == before
    assert model_len(100, 256) == 368 and model_len(112, 256) == 368 and model_len(113, 256) == 384
    gpu = assumed_hardware("RTX 4090 24GB")
    grpo = SimpleNamespace(objective="grpo", rollout_engine="vllm", vllm_gpu_memory=0.3)
    assert training_share(gpu, grpo).memory_bytes == int(gpu.memory_bytes * 0.7)
    assert training_share(gpu, SimpleNamespace(objective="grpo", rollout_engine="torch")) is gpu


def test_vllm_sleeps_between_rollouts_and_takes_every_current_weight_when_it_wakes(env):
    """`--vllm-sleep` (CUDA; vLLM's sleep mode does not exist on its CPU build, so vLLM's `LLM` is a recording
    stand-in here, the policy a real LoRA model): before each rollout the engine wakes its weights, takes every
    merged weight of the policy (level 2 kept none, even when no step changed them), wakes its KV cache, samples,
    and sleeps again, also when sampling fails; awake (the default, or no CUDA) it takes the weights only after a
    step changed them. The flag without vLLM is refused."""
    from types import SimpleNamespace

    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from aura.core.errors import AuraError
    from aura.train.finetune_config import FinetuneConfig
    from aura.train.objectives.vllm_rollout import VLLMGenerator

    policy = get_peft_model(
        AutoModelForCausalLM.from_pretrained(env["llama"]), LoraConfig(r=4, target_modules="all-linear")
    )
    names = {n for n, _ in policy.named_parameters() if "lora_" not in n}

    class Recorder:  # what VLLMGenerator calls on vLLM's LLM, in order
        def __init__(self):
            self.calls, worker = [], SimpleNamespace(reload_weights=True)
            self.llm_engine = SimpleNamespace(model_executor=SimpleNamespace(driver_worker=worker))

        def sleep(self, level):
            self.calls.append(f"sleep {level}")

        def wake_up(self, tags):
            self.calls.append(f"wake {','.join(tags)}")

        def collective_rpc(self, method, kwargs):
            self.calls.append(f"{method} {len(list(kwargs['weights_iterator']))}")

        def reset_prefix_cache(self):
            self.calls.append("reset")

    def engine(sleeps: bool) -> VLLMGenerator:
        gen = VLLMGenerator.__new__(VLLMGenerator)
        gen.model, gen.llm, gen.sleeps, gen._synced_version = policy, Recorder(), sleeps, None
        gen._generate = lambda prompts, keys: gen.llm.calls.append("generate") or ([[1]], [[-0.5]])
        return gen

    every = f"reload_weights {len(names)}"
    asleep = engine(True)
    for _ in range(2):  # no optimizer step between the two: level 2 still needs every weight
        assert asleep([[5, 6]], [0]) == ([[1]], [[-0.5]])
    once = ["wake weights", every, "reset", "wake kv_cache", "generate", "sleep 2"]
    assert asleep.llm.calls == once * 2
    awake = engine(False)
    awake([[5, 6]], [0])
    awake([[5, 6]], [0])
    with torch.no_grad():
        next(p for n, p in policy.named_parameters() if "lora_B" in n).add_(0.1)  # what a step does
    awake([[5, 6]], [0])
    assert awake.llm.calls == [every, "reset", "generate", "generate", every, "reset", "generate"]
    failing = engine(True)
    failing._generate = lambda prompts, keys: 1 / 0
    with pytest.raises(ZeroDivisionError):
        failing([[5, 6]], [0])
    assert failing.llm.calls[-1] == "sleep 2"
    with pytest.raises(AuraError, match="--vllm-sleep"):
        FinetuneConfig(base_model="b", objective="grpo", vllm_sleep=True)


def test_grpo_on_one_process_says_no_strategy_it_was_not_given_and_spanish_weights(env, tmp_path):
    """Issue 36.7: without --strategy, one process said "ninguna (--strategy ddp necesita varios procesos ...)"
    (auto had silently become ddp), and the default weights read "format x 0.2" in Spanish."""
    from tests.conftest import run_aura

    r = run_aura(
        "finetune",
        "--base-model",
        env["llama"],
        "--data",
        env["data"],
        *map(str, FAST),
        "--max-steps",
        "1",
        "--val-fraction",
        "0",
        "--output-dir",
        tmp_path / "r",
        env={"AURA_LANG": "es"},
    )
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert "Recompensas: exact-answer x 1, format x 0,2." in out, out
    assert "Estrategia de paralelismo: ninguna (un solo proceso)" in out, out
    assert "--strategy ddp" not in out, out


def test_a_stage_without_reward_signal_says_the_model_did_not_change_and_spanish_moves_it(env, tmp_path):
    """Issue 51: a reward the model never earns (the default format: text ending in 'Respuesta: N') gives every
    group equal rewards, so every advantage is 0: the run says "0 of N groups had a reward signal: the model did
    not change", writes it for the report card, and its adapter is the untouched one (LoRA's B matrices are still
    0). The built-in `spanish` reward is earned in part: groups differ, the adapter moves, and the report card's
    headline is the mean reward and its change, not the loss."""
    from safetensors.torch import load_file

    dead, live = tmp_path / "dead", tmp_path / "live"
    common = ["--base-model", env["llama"], "--data", env["data"], *FAST, "--max-steps", 2, "--val-fraction", 0]
    out = finetune(*common, "--reward", "format", "--output-dir", dead)
    assert "0 of 4 groups had a reward signal: the model did not change" in out
    assert json.loads((dead / "reward_signal.json").read_text()) == {
        "groups": 4,
        "groups_with_signal": 0,
        "num_generations": 4,
    }
    assert [float(r["groups_with_signal"]) for r in step_rows(dead).values()] == [0.0, 0.0]
    weights = load_file(dead / "final" / "adapter_model.safetensors")
    assert all(not t.any() for k, t in weights.items() if "lora_B" in k)  # the adapted model is the base
    from aura.pipeline.report_card import stage_notes, training_summary
    from aura.pipeline.report_render import headline_text

    assert stage_notes(dead) == {"groups": 4, "groups_with_signal": 0}

    out = finetune(*common, "--reward", "spanish", "--output-dir", live)
    rows = step_rows(live)
    signal = json.loads((live / "reward_signal.json").read_text())
    assert (
        signal["groups"] == 4
        and signal["groups_with_signal"] == sum(float(r["groups_with_signal"]) for r in rows.values()) > 0
    )
    assert f"{signal['groups_with_signal']} of 4 groups had a reward signal" in out
    weights = load_file(live / "final" / "adapter_model.safetensors")
    assert any(t.any() for k, t in weights.items() if "lora_B" in k)
    t = training_summary(live)
    assert [(h["metric"], h["change"]) for h in t["headline"]] == [("reward", False), ("reward", True)]
    assert t["headline"][0]["value"] == float(rows[2]["reward"])
    assert t["headline"][1]["value"] == float(rows[2]["reward"]) - float(rows[1]["reward"])
    from aura.core.i18n import set_lang

    try:
        set_lang("en")
        text = headline_text(t)
    finally:
        set_lang(None)
    assert text.startswith("mean reward ") and "reward change " in text and "loss" not in text
