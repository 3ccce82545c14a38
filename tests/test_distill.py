"""`aura finetune --objective distill` through the real CLI: on-policy and off-policy micro-batches both occur
with --lmbda 0.5, the run resumes exactly (the same logged losses and choices) after SIGTERM and then after
kill -9, the student's KL to the teacher on held-out answers falls, and a teacher with another tokenizer is
refused naming both folders. Parity with TRL's GKDTrainer is in tests/test_distill_parity.py."""

from __future__ import annotations

import re

import pytest
import torch

from tests.conftest import run_aura_killed, run_aura_terminated
from tests.test_finetune import finetune
from tests.test_preference import FAST, step_rows
from tests.tiny_models import build_llama, train_tokenizer

COLUMNS = ("train_loss", "grad_norm", "on_policy")
HELD_OUT = [
    ("¿Qué es un río?", "Un río es una corriente de agua que fluye hacia el mar."),
    ("Nombra una fruta.", "La manzana es una fruta."),
    ("¿Dónde vive un pez?", "Un pez vive en el agua, en ríos, lagos o en el mar."),
]


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("distill")
    tok = train_tokenizer(root / "tok", vocab_size=500)
    return {
        "root": root,
        "student": build_llama(root / "student", tok, hidden=64, layers=2, seed=0),
        "teacher": build_llama(root / "teacher", tok, hidden=64, layers=4, seed=1),
    }


def _common(env) -> list:
    return [
        "--objective",
        "distill",
        "--base-model",
        env["student"],
        "--teacher",
        env["teacher"],
        *FAST,
        "--max-new-tokens",
        12,
        "--lmbda",
        0.5,
        "--max-steps",
        8,
        "--val-fraction",
        0,
    ]


def _plots_on_policy(run, rows: dict[int, dict], tmp_path, monkeypatch) -> None:
    """`aura plot` of the run draws its on_policy column, step by step, in the objective's panel (the figure's
    data read back, as tests/test_runs.py does)."""
    from matplotlib.figure import Figure

    from tests.conftest import run_aura_here

    saved, save = [], Figure.savefig
    monkeypatch.setattr(Figure, "savefig", lambda self, *a, **k: (saved.append(self), save(self, *a, **k))[1])
    r = run_aura_here("plot", run, "--output-dir", tmp_path, "--out", "distill.png")
    assert r.returncode == 0, r.stdout + r.stderr
    panel = saved[-1].axes[3]
    assert panel.get_title() == "Student's own answers (distillation)"
    (line,) = panel.get_lines()
    assert line.get_label() == f"{run.name} (Student's own answers (share))"
    assert list(line.get_ydata()) == [float(rows[s]["on_policy"]) for s in sorted(rows)]


@torch.no_grad()
def held_out_kl(student_dir, teacher_dir, adapter=None) -> float:
    """The mean per-token reverse KL(student || teacher) on HELD_OUT's answers (transformers and peft)."""
    from transformers import AutoModelForCausalLM

    from aura.train.objectives.distill import generalized_jsd
    from tests.test_distill_parity import sft_batch

    student = AutoModelForCausalLM.from_pretrained(student_dir, dtype=torch.float32)
    if adapter is not None:
        from peft import PeftModel

        student = PeftModel.from_pretrained(student, adapter)
    teacher = AutoModelForCausalLM.from_pretrained(teacher_dir, dtype=torch.float32)
    batch, _ = sft_batch(student_dir, HELD_OUT)
    mask = batch["labels"][:, 1:] != -100
    s, t = (
        m(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits[:, :-1]
        for m in (student, teacher)
    )
    return float(generalized_jsd(s[mask], t[mask], beta=1.0).mean())


def test_distill_mixes_own_and_data_answers_lowers_the_kl_and_resumes_exactly_after_sigterm_and_kill_9(
    env, tmp_path, monkeypatch
):
    common = _common(env)
    straight = tmp_path / "straight"
    out = finetune(*common, "--output-dir", straight)
    assert "Teacher:" in out and "beta 0.5" in out and "lmbda 0.5" in out, out
    rows = step_rows(straight)
    assert set(rows) == set(range(1, 9))
    kinds = {float(rows[s]["on_policy"]) for s in rows}
    assert kinds == {0.0, 1.0}, rows  # both kinds of micro-batch occurred
    _plots_on_policy(straight, rows, tmp_path, monkeypatch)
    before = held_out_kl(env["student"], env["teacher"])
    after = held_out_kl(env["student"], env["teacher"], adapter=straight / "final")
    assert after < 0.9 * before, (before, after)

    run = tmp_path / "interrupted"
    text, stopped = run_aura_terminated("finetune", "--output-dir", run, *common, run=run, at="Step 3/8")
    out = run_aura_killed(
        "finetune",
        "--output-dir",
        run,
        *common,
        "--save-steps",
        1,
        "--resume-from",
        "latest",
        saved_in=run,
    )
    assert "Resumed from" in out and not (run / "final").exists()
    out = finetune(*common, "--output-dir", run, "--resume-from", "latest")
    resumed_at = re.search(r"Resumed from \S+: step (\d+),", out)
    assert resumed_at and int(resumed_at[1]) > stopped, out
    again = step_rows(run)
    assert set(again) == set(range(1, 9))
    for step in again:  # exactly: the logged strings, sampled answers included
        assert [again[step][k] for k in COLUMNS] == [rows[step][k] for k in COLUMNS], step


def test_a_teacher_with_another_tokenizer_is_refused_naming_both_folders(env, tmp_path):
    other_tok = train_tokenizer(tmp_path / "tok", vocab_size=400)
    other = build_llama(tmp_path / "other", other_tok, hidden=32, layers=1)
    out = finetune(
        "--objective",
        "distill",
        "--base-model",
        env["student"],
        "--teacher",
        other,
        *FAST,
        "--output-dir",
        tmp_path / "run",
        expect=2,
    )
    assert "do not share a tokenizer" in out and str(other) in out and str(env["student"]) in out, out
    assert not (tmp_path / "run" / "final").exists()
    out = finetune("--base-model", env["student"], "--lmbda", 0.2, "--output-dir", tmp_path / "sft", expect=2)
    assert "--lmbda only applies to --objective distill" in out
    out = finetune("--objective", "distill", "--base-model", env["student"], "--output-dir", tmp_path / "x", expect=2)
    assert "--objective distill needs --teacher" in out
    zero3 = tmp_path / "zero3.json"  # FSDP2 and ZeRO-2 run: tests/test_sampling_sharded.py
    zero3.write_text('{"zero_optimization": {"stage": 3}}', encoding="utf-8")
    args = ["--objective", "distill", "--base-model", env["student"], "--teacher", env["teacher"], "--deepspeed", zero3]
    out = finetune(*args, "--output-dir", tmp_path / "z", expect=2)
    assert "--objective distill does not take DeepSpeed ZeRO-3" in out and str(zero3) in out


def test_the_teacher_is_in_the_memory_plan_and_the_pipeline_estimate(env, tmp_path):
    from transformers import AutoConfig, AutoModelForCausalLM, MistralConfig

    from aura.models.hardware import GIB, HardwareInfo
    from aura.train.run.memory import finetune_estimate, plan_finetune
    from tests.test_pipeline_a100 import _plan, _seconds

    teacher = AutoModelForCausalLM.from_pretrained(env["teacher"], dtype=torch.float32)
    config = AutoConfig.from_pretrained(env["student"])
    common = dict(method="lora", lora_r=8, batch_size=2, max_length=64, precision="fp32", checkpointing=False)
    alone = finetune_estimate(config, **common)
    with_teacher = finetune_estimate(config, **common, teacher_config=teacher.config)
    weights = sum(p.numel() for p in teacher.parameters()) * 4  # the real model's fp32 weights
    logits = 2 * 64 * config.vocab_size * (4 + 4)
    assert with_teacher.teacher == pytest.approx(weights + logits, rel=0.01) and alone.teacher == 0
    assert with_teacher.total > alone.total + weights
    # a 7B teacher (bf16: ~14.5 GB) beside a 7B LoRA student on a 40 GB GPU: `auto` needs gradient checkpointing
    big = MistralConfig()  # 7B shapes, no weights
    info = HardwareInfo(device_type="cuda", name="A100 40GB", count=1, memory_bytes=40 * GIB, bf16=True, fp16=True)
    plan = dict(info=info, method="lora", lora_r=16, max_length=2048, precision="bf16")
    (_, ckpt_alone, _, _), (_, ckpt, est, fits) = (
        plan_finetune(big, **plan),
        plan_finetune(big, **plan, teacher_config=big),
    )
    assert fits and ckpt and not ckpt_alone and est.teacher > 14 * GIB

    pipe = tmp_path / "p.yaml"  # sizes from the names (1B student, 7B teacher): nothing to download
    stage = "  - name: {name}\n    command: finetune\n    options:\n      base_model: {base}\n"
    stage += "      max_steps: 1000\n"
    distill = "      objective: distill\n      teacher: {teacher}\n      lmbda: {lmbda}\n"
    pipe.write_text(
        "stages:\n"
        + stage.format(name="big", base="org/maestro-7B")  # the teacher, tuned by an earlier stage
        + stage.format(name="sft", base="org/alumno-1B")
        + stage.format(name="distill", base="org/alumno-1B")
        + distill.format(teacher="org/maestro-7B", lmbda=0)
        + stage.format(name="onpolicy", base="org/alumno-1B")
        + distill.format(teacher="big.final", lmbda=1)
        + stage.format(name="named", base="org/alumno-1B")
        + distill.format(teacher="org/maestro-7B", lmbda=1),
        encoding="utf-8",
    )
    _, rows = _plan(str(pipe), "--assume", "A100 80GB")
    sft, off, on = (_seconds(rows[s]["estimate"]) for s in ("sft", "distill", "onpolicy"))
    # LoRA: 4·N per token; + the teacher's forward 2·N_teacher = 18e9 against 4e9; then the student's sampling
    assert off == pytest.approx(sft * 18 / 4, rel=0.05) and on > off, rows
    assert rows["named"]["estimate"] == rows["onpolicy"]["estimate"]  # `teacher: big.final` is the 7B stage


def test_studio_form_offers_distill_and_its_options(tmp_path):
    from tests.test_studio import client

    c, headers = client(tmp_path)
    fields = {f["name"]: f for f in c.get("/api/forms/finetune").json()["fields"]}
    assert "distill" in fields["objective"]["choices"]
    assert fields["lmbda"]["default"] == 0.5 and fields["max_new_tokens"]["default"] == 128
    assert "maestro" in fields["teacher"]["help"]["es"] and "teacher" in fields["teacher"]["help"]["en"]
    r = c.post(
        "/api/preview",
        json={
            "command": "finetune",
            "name": "distill",
            "values": {"objective": "distill", "teacher": "modelos/maestro", "lmbda": "0.8", "seq_kd": True},
        },
        headers=headers,
    )
    assert r.status_code == 200, r.text
    argv = r.json()["argv"]
    assert argv[argv.index("--teacher") + 1] == "modelos/maestro" and argv[argv.index("--lmbda") + 1] == "0.8"
    assert "--seq-kd" in argv, argv


@pytest.mark.dist
@pytest.mark.slow
def test_two_gloo_ranks_under_ddp_equal_one_process_with_the_same_global_batch(env, tmp_path):
    """DDP: 2 ranks x 1 row == 1 process x 2 rows. The on-policy draw depends on the micro-batch's index, not
    the rank, and each row's sampling key on its place in the global micro-batch: both layouts sample the
    same answers; the loss is normalised by the answer tokens of all ranks."""
    from tests.distutil import output, torchrun

    common = [*_common(env)[:-4], "--max-steps", 3, "--val-fraction", 0]  # --lmbda 0.5, 3 steps
    single = tmp_path / "single"
    finetune(*common, "--output-dir", single)
    dist_run = tmp_path / "dist"
    args = ["-m", "aura", "finetune", *map(str, common), "--strategy", "ddp", "--batch-size", "1"]
    r = torchrun(*args, "--output-dir", str(dist_run), "--backend", "gloo")
    assert r.returncode == 0, output(r)
    a, b = step_rows(single), step_rows(dist_run)
    assert set(a) == set(b) == {1, 2, 3}
    assert {float(a[s]["on_policy"]) for s in a} == {0.0, 1.0}  # the draws of seed 0: both kinds in 3 steps
    for step in a:
        assert a[step]["on_policy"] == b[step]["on_policy"], step
        for key in ("train_loss", "grad_norm"):
            assert float(b[step][key]) == pytest.approx(float(a[step][key]), abs=2e-4), (step, key)


def test_each_micro_batch_takes_the_data_the_students_or_with_seq_kd_the_teachers_keyed_answers(env):
    """The source's three kinds of batch against what they should hold: the SFT batch itself; each row's
    prompt followed by the student's (on-policy) or the teacher's (--seq-kd) sample drawn with that row's key
    (Aura's keyed sampler called directly)."""
    from transformers import AutoModelForCausalLM

    from aura.data.sft_batches import SFTDataSource
    from aura.distributed import DistInfo
    from aura.inference.sampling import SamplingParams
    from aura.train.objectives.distill import DistillSource, on_policy_draw, prompt_of
    from aura.train.objectives.rollout import row_key, sample_completions
    from tests.test_distill_parity import CONVERSATIONS, sft_batch

    student = AutoModelForCausalLM.from_pretrained(env["student"], dtype=torch.float32)
    teacher = AutoModelForCausalLM.from_pretrained(env["teacher"], dtype=torch.float32)
    _, tok = sft_batch(env["student"])
    from aura.data.sft import Conversation
    from aura.data.sft_batches import encode_all

    convs = [
        Conversation(messages=[{"role": "user", "content": p}, {"role": "assistant", "content": a}], where=str(i))
        for i, (p, a) in enumerate(CONVERSATIONS + HELD_OUT)
    ]
    examples = encode_all(convs, tok, max_length=128, truncation="drop", train_on_prompt=False)
    sampling = SamplingParams(max_new_tokens=6, temperature=0.9, stop_ids=(tok.eos_token_id,))
    dist = DistInfo()

    def source(lmbda: float, seq_kd: bool, accumulation: int = 1) -> tuple[DistillSource, SFTDataSource]:
        data = SFTDataSource(examples, batch_size=2, pad_id=tok.pad_token_id, seed=3)
        plain = SFTDataSource(examples, batch_size=2, pad_id=tok.pad_token_id, seed=3)
        common = dict(policy=student, teacher=teacher, tokenizer=tok, sampling=sampling, seed=3, dist=dist)
        src = DistillSource(data, lmbda=lmbda, seq_kd=seq_kd, precision="fp32", accumulation=accumulation, **common)
        return src, plain

    for lmbda, seq_kd in ((0.0, False), (1.0, False), (0.0, True), (0.5, False)):
        src, plain = source(lmbda, seq_kd)
        # an optimizer step of 2 micro-batches samples their rows in one call: the very same batches
        windowed, calls = source(lmbda, seq_kd, accumulation=2)[0], []
        sampled = windowed.sampled
        windowed.sampled = lambda batches, *a, **k: calls.append(len(batches)) or sampled(batches, *a, **k)
        for index in range(src.batches_per_epoch):
            batch, data, together = src.next_batch(), plain.next_batch(), windowed.next_batch()
            assert batch.keys() == together.keys() and all(torch.equal(batch[k], together[k]) for k in batch)
            own = on_policy_draw(3, 0, index) < lmbda
            assert float(batch["on_policy"]) == float(own)
            if not own and not seq_kd:
                assert all(torch.equal(batch[k], data[k]) for k in data), (lmbda, index)
                continue
            prompts = [prompt_of(*row) for row in zip(data["input_ids"], data["labels"], data["attention_mask"])]
            keys = [row_key(3, 0, index, i) for i in range(len(prompts))]
            model = student if own else teacher
            want = sample_completions(
                model, prompts, keys, sampling=sampling, tokenizer=tok, precision="fp32", device=dist.device
            )
            for i, (p, c) in enumerate(zip(prompts, want)):
                n = len(p) + len(c)
                assert batch["input_ids"][i, :n].tolist() == p + list(c)
                assert batch["labels"][i, :n].tolist() == [-100] * len(p) + list(c)
                assert int(batch["attention_mask"][i].sum()) == n
        assert src.next_batch() is None and windowed.next_batch() is None
        if lmbda == 1.0 or seq_kd:  # 3 micro-batches, windows of 2: one call for the first two, one for the last
            assert calls == [2, 1], calls


def test_seq_kd_trains_on_the_teachers_answers_through_the_cli(env, tmp_path):
    """--seq-kd with --lmbda 0: every micro-batch takes the teacher's sampled answers (the source's test above
    checks which tokens); the run ends, logs no on-policy batch and says its validation as a divergence."""
    common = _common(env)
    common[common.index("--lmbda") + 1] = 0
    common[common.index("--max-steps") + 1] = 2
    common[common.index("--val-fraction") + 1] = 0.05
    out = finetune(*common, "--seq-kd", "--temperature", 0.7, "--output-dir", tmp_path / "run")
    assert "the others with the teacher's answers" in out, out
    # the validation loss is the divergence from the teacher, said as such (no perplexity)
    assert "Validation at step 2: divergence from the teacher" in out and "perplexity" not in out, out
    rows = step_rows(tmp_path / "run")
    assert set(rows) == {1, 2} and all(float(r["on_policy"]) == 0.0 for r in rows.values())
    assert (tmp_path / "run" / "final").is_dir()
