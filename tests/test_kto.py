"""`aura finetune --objective kto` through the real CLI: the embedded Spanish rated answers, the logged rewards,
KL and log-probs (CSV, TensorBoard, `aura plot`), exact resume after SIGTERM and then after kill -9, the
reference choices agreeing, TRL's imbalance warning in Spanish, every data form (CSV with a `--label-column` of
sí/no, conversational JSONL) giving the same examples and TRL's mismatched KL sequences, the Studio form, and 2
gloo ranks under DDP and FSDP2 equal to one process. Parity with TRL's KTOTrainer is in
tests/test_kto_parity.py; bad data in tests/bad_inputs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import run_aura, run_aura_here, run_aura_killed, run_aura_terminated
from tests.test_finetune import finetune
from tests.test_preference import FAST, step_rows, write_jsonl
from tests.tiny_models import build_llama, train_tokenizer

EMBEDDED = Path(__file__).resolve().parents[1] / "aura" / "resources" / "kto_es.jsonl"
COLUMNS = ("train_loss", "rewards/chosen", "rewards/rejected", "logps/chosen", "logps/rejected", "kl")


def embedded_records(n: int | None = None) -> list[dict]:
    import json

    return [json.loads(ln) for ln in EMBEDDED.read_text(encoding="utf-8").splitlines()[:n]]


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("kto")
    tok = train_tokenizer(root / "tok", vocab_size=500)
    llama = build_llama(root / "llama", tok, hidden=64, layers=2)
    data = write_jsonl(root / "kto.jsonl", embedded_records(16))
    return {"root": root, "tok": tok, "llama": llama, "data": data}


def test_embedded_sample_is_distinct_balanced_and_loads():
    from aura.data.kto import load_unpaired

    records = embedded_records()
    assert len(records) >= 60 and len({r["prompt"] for r in records}) == len(records)
    good = sum(r["label"] is True for r in records)
    assert sum(r["label"] is False for r in records) == len(records) - good and 0.4 < good / len(records) < 0.6
    examples = load_unpaired(None)
    assert [e.label for e in examples] == [r["label"] for r in records]


def test_kto_on_the_embedded_sample_logs_plots_and_resumes_exactly_after_sigterm_and_kill_9(env, tmp_path):
    common = [
        "--objective",
        "kto",
        "--base-model",
        env["llama"],
        *FAST,
        "--gradient-accumulation-steps",
        2,
        "--max-steps",
        8,
    ]
    straight = tmp_path / "straight"
    out = finetune(*common, "--output-dir", straight)
    assert "No --data: using the embedded Spanish rated answers" in out
    assert "KTO reference: the base model with the adapter disabled" in out
    assert "KTO's reference runs each answer and its mismatched (KL) answer as one row" in out
    rows = step_rows(straight)
    assert set(rows) == set(range(1, 9))
    # LoRA B = 0: policy == reference, every log ratio and the KL estimate are 0, each loss 1 - s(0); 0 up to
    # float rounding: the reference runs each mismatched answer in one row with the real one (the prompt
    # once), the policy alone
    # (the log prints 6 decimals: a znver3 EPYC logs 0.500001)
    assert float(rows[1]["train_loss"]) == pytest.approx(0.5, abs=5e-6) and abs(float(rows[1]["kl"])) < 1e-4
    assert all(rows[s]["kl"] != "" and rows[s]["logps/chosen"] + rows[s]["logps/rejected"] != "" for s in rows)
    assert float(rows[8]["kl"]) > 1e-2  # the policy moved away from its reference
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(straight / "tb"))
    acc.Reload()
    assert [e.step for e in acc.Scalars("kl")] == list(range(1, 9))
    r = run_aura_here("plot", straight, "--output-dir", tmp_path, "--out", "kto.svg")
    assert r.returncode == 0, r.stdout + r.stderr
    svg = (tmp_path / "kto.svg").read_text()
    assert "(Reward of good answers)" in svg and "(KL estimate)" in svg  # the rewards panel's legend

    run = tmp_path / "interrupted"
    text, stopped = run_aura_terminated("finetune", "--output-dir", run, *common, run=run, at="Step 3/8")
    # resumed, saving every step, then killed -9 once the first step after the interruption is saved: the
    # next command resumes from that periodic checkpoint, dropping the log rows written after it
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
    assert resumed_at and int(resumed_at[1]) > stopped, out  # the periodic checkpoint saved after the interruption
    again = step_rows(run)
    assert set(again) == set(range(1, 9))
    for step in again:  # exactly: the logged strings
        assert [again[step][k] for k in COLUMNS] == [rows[step][k] for k in COLUMNS], step


@pytest.mark.parametrize("method", ["lora", "full"])
def test_precomputed_reference_equals_the_live_reference_and_imbalance_is_warned_in_spanish(env, tmp_path, method):
    """LoRA: the base with the adapter disabled; full: a frozen copy. Either way the same values as the
    reference log-probs computed once before training (--precompute-ref). 10 good answers and 3 bad ones
    with equal weights: TRL's warning, with its ranges, in Spanish."""
    records = [dict(r, label=True) for r in embedded_records(10)] + [
        dict(r, label=False) for r in embedded_records(13)[10:]
    ]
    data = write_jsonl(tmp_path / "imbalanced.jsonl", records)
    common = [
        "--objective",
        "kto",
        "--base-model",
        env["llama"],
        "--data",
        data,
        *FAST,
        "--batch-size",
        3,
        "--max-steps",
        3,
        "--method",
        method,
        "--val-fraction",
        "0",
    ]
    if method == "full":
        common = [a for a in common if a not in ("--lora-r", "8", "--lora-dropout")]
        common.remove("0")  # --lora-dropout's value (the first "0" of FAST)
    live = run_aura("finetune", *map(str, common), "--output-dir", tmp_path / "live", env={"AURA_LANG": "es"})
    assert live.returncode == 0, live.stdout + live.stderr
    pre = finetune(*common, "--output-dir", tmp_path / "pre", "--precompute-ref")
    # TRL's ranges for 10 good / 3 bad, weights 1: desirable [0.3, 0.4], undesirable [2.51, 3.33]
    assert (
        "conviene O BIEN --desirable-weight en [0.3, 0.4] O BIEN --undesirable-weight en [2.51, 3.33]"
        in live.stdout + live.stderr
    ), live.stdout + live.stderr
    assert ("una copia congelada" if method == "full" else "adaptador desactivado") in live.stdout
    assert "computed once before training (--precompute-ref)" in pre
    a, b = step_rows(tmp_path / "live"), step_rows(tmp_path / "pre")
    for step in (1, 2, 3):
        for key in COLUMNS:
            if a[step][key] == "" or b[step][key] == "":
                assert a[step][key] == b[step][key], (step, key)  # no answer of that kind in the step
                continue
            assert float(a[step][key]) == pytest.approx(float(b[step][key]), rel=2e-4, abs=5e-5), (step, key)
    assert float(a[3]["kl"]) > 0  # the policy moved away from its reference


def test_every_data_form_gives_the_same_examples_and_trls_mismatched_kl_sequences(env, tmp_path):
    """Text JSONL with booleans, conversational JSONL, and a CSV whose verdicts are sí/no/1/0/true/false in a
    `me_gusta` column (--label-column): the same examples; each KL sequence is the example's prompt
    followed by the previous example's answer (the first takes the last's), TRL's rotation by one."""
    import csv

    from transformers import AutoTokenizer

    from aura.data.kto import encode_unpaired, load_unpaired
    from aura.text.templates import get_template

    records = embedded_records(6)
    text = load_unpaired(write_jsonl(tmp_path / "text.jsonl", records))
    conv = load_unpaired(
        write_jsonl(
            tmp_path / "conv.jsonl",
            [
                {
                    "prompt": [{"role": "user", "content": r["prompt"]}],
                    "completion": [{"role": "assistant", "content": r["completion"]}],
                    "label": r["label"],
                }
                for r in records
            ],
        )
    )
    words = {True: ["sí", "1", "True", "SI", "yes", "verdadero"], False: ["no", "0", "false", "No", "falso", "0"]}
    with open(tmp_path / "feedback.csv", "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=["prompt", "completion", "me_gusta"])
        w.writeheader()
        w.writerows(
            {"prompt": r["prompt"], "completion": r["completion"], "me_gusta": words[r["label"]][i]}
            for i, r in enumerate(records)
        )
    table = load_unpaired(tmp_path / "feedback.csv", label_column="me_gusta")

    def strip(exs):
        return [(e.prompt, e.completion, e.label) for e in exs]

    assert strip(text) == strip(conv) == strip(table)
    assert [e.label for e in text] == [r["label"] for r in records]

    tok = AutoTokenizer.from_pretrained(env["tok"])
    tok.chat_template = get_template("mistral")
    enc = encode_unpaired(text, tok, max_length=512)
    for i, e in enumerate(enc):
        prompt = [t for t, lab in zip(e.seq.input_ids, e.seq.labels) if lab == -100]
        partner = enc[i - 1]
        answer = [t for t, lab in zip(partner.seq.input_ids, partner.seq.labels) if lab != -100]
        assert e.kl.input_ids == prompt + answer
        assert [t for t, lab in zip(e.kl.input_ids, e.kl.labels) if lab != -100] == answer


def test_studio_form_offers_kto_and_its_options(tmp_path):
    from tests.test_studio import client

    c, headers = client(tmp_path)
    fields = {f["name"]: f for f in c.get("/api/forms/finetune").json()["fields"]}
    assert "kto" in fields["objective"]["choices"] and fields["objective"]["essential"]
    assert fields["desirable_weight"]["default"] == 1.0 and fields["label_column"]["default"] == "label"
    assert "buenas" in fields["desirable_weight"]["help"]["es"]
    r = c.post(
        "/api/preview",
        json={
            "command": "finetune",
            "name": "kto",
            "values": {"objective": "kto", "undesirable_weight": "1.5", "label_column": "me_gusta"},
        },
        headers=headers,
    )
    assert r.status_code == 200, r.text
    argv = r.json()["argv"]
    given = {argv[i]: argv[i + 1] for i in range(1, len(argv) - 1) if argv[i].startswith("--")}
    assert given["--objective"] == "kto" and given["--undesirable-weight"] == "1.5", argv
    assert given["--label-column"] == "me_gusta", argv


DIST = ["--max-steps", 3, "--val-fraction", "0"]


def ragged_answers(vocab: int) -> list:
    """Five rated answers of random tokens (TRL's rotation for the KL answers) whose lengths pack: the answers
    40, 8, 8, 8, 8 tokens (two rows of 40), the KL answers 26, 24, 7, 10, 5 (three rows of 26)."""
    import torch

    from aura.data.kto import EncodedUnpaired
    from aura.data.sft_batches import Encoded

    g = torch.Generator().manual_seed(2)
    parts = [
        (torch.randint(3, vocab, (p,), generator=g).tolist(), torch.randint(3, vocab, (c,), generator=g).tolist())
        for p, c in ((20, 20), (4, 4), (3, 5), (5, 3), (2, 6))
    ]

    def seq(prompt: list[int], answer: list[int]) -> Encoded:
        return Encoded(prompt + answer, [-100] * len(prompt) + answer)

    return [EncodedUnpaired(seq(p, c), seq(p, parts[i - 1][1]), label=i % 2 == 0) for i, (p, c) in enumerate(parts)]


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_padding_free_answers_give_the_padded_loss_and_gradients_in_fewer_rows(env, arch):
    """`collate_unpaired(padding_free=True)` packs the answers, and apart from them the KL answers, several to a
    row: each answer's log-probs, KTO's loss, its statistics and the adapter's gradients are those of the padded
    rows, with the reference in shared-prompt rows and stacked (both packed, or one packed and one padded)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from aura.data.kto import collate_unpaired
    from aura.train.adapters import packing_is_isolated
    from aura.train.objectives.kto import KTO
    from aura.train.objectives.preference import sequence_logps
    from tests.tiny_models import build_gpt2

    model_dir = env["root"] / arch
    if arch == "gpt2" and not model_dir.exists():
        build_gpt2(model_dir, env["tok"])
    base = AutoModelForCausalLM.from_pretrained(env["llama"] if arch == "llama" else model_dir)
    torch.manual_seed(0)
    lora = LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules="all-linear", init_lora_weights=False)
    model = get_peft_model(base, lora).eval()  # no dropout (GPT-2 has some): gradients flow all the same
    assert packing_is_isolated(model)
    answers = ragged_answers(base.get_input_embeddings().weight.shape[0])
    kto = KTO(beta=0.1, undesirable_weight=1.3)

    def run(batch: dict) -> tuple:
        model.zero_grad(set_to_none=True)
        loss, stats = kto.loss(model, batch)
        loss.backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        return loss.detach(), {k: v.detach() for k, v in stats.items()}, grads

    for shared in (True, False):
        padded = collate_unpaired(answers, pad_id=0, shared=shared)
        packed = collate_unpaired(answers, pad_id=0, shared=shared, padding_free=True)
        assert padded["input_ids"].shape[0] == 5 and packed["input_ids"].shape == (2, 40)
        assert packed["kl_input_ids"].shape == (3, 26) and packed["sequence_row"].tolist() == [0, 1, 1, 1, 1]
        assert "attention_mask" not in packed and int(packed["input_tokens"]) == int(padded["attention_mask"].sum())
        assert kto.count(packed) == kto.count(padded) == 5  # the loop's unit: examples, not rows
        with torch.no_grad():
            alone = sequence_logps(model, padded)
            together = sequence_logps(model, packed)
        torch.testing.assert_close(together[0], alone[0], atol=1e-5, rtol=1e-5)
        assert together[1].tolist() == alone[1].tolist() == [20, 4, 5, 3, 6]
        hybrid = {k: v for k, v in packed.items() if not k.startswith("kl_")}  # the KL answers padded
        hybrid.update((k, v) for k, v in padded.items() if k.startswith("kl_"))
        expected = run(padded)
        layouts = (packed, hybrid) if not shared else (packed,)
        for batch in layouts:
            loss, stats, grads = run(batch)
            torch.testing.assert_close(loss, expected[0], atol=1e-6, rtol=1e-5)
            for name, value in expected[1].items():
                torch.testing.assert_close(stats[name], value, atol=1e-4, rtol=1e-5)  # sums of ~100s of log-probs
            assert grads.keys() == expected[2].keys() and grads
            for name, grad in expected[2].items():
                torch.testing.assert_close(grads[name], grad, atol=1e-6, rtol=1e-4)


@pytest.fixture(scope="module")
def single(env) -> dict[int, dict]:
    """One process, 4 examples per step: the reference of every 2-rank run below."""
    run = env["root"] / "single"
    finetune(
        "--objective",
        "kto",
        "--base-model",
        env["llama"],
        "--data",
        env["data"],
        *FAST,
        *DIST,
        "--batch-size",
        4,
        "--output-dir",
        run,
    )
    return step_rows(run)


@pytest.mark.dist
@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_two_gloo_ranks_equal_one_process_with_the_same_global_batch(env, single, tmp_path, strategy):
    """DDP and FSDP2: 2 ranks x 2 examples == 1 process x 4 examples. The KL partners are fixed per example
    and the KL estimate is averaged over the ranks, the loss normalised by the examples of all ranks; the
    reference is the adapter disabled inside the sharded model. (DeepSpeed ZeRO-2 runs the same objective
    code: tests/test_simpo.py runs SimPO under it.)"""
    from tests.distutil import output, torchrun

    dist_run = tmp_path / "dist"
    r = torchrun(
        "-m",
        "aura",
        "finetune",
        "--objective",
        "kto",
        "--base-model",
        env["llama"],
        "--data",
        env["data"],
        *FAST,
        *DIST,
        "--strategy",
        strategy,
        "--batch-size",
        "2",
        "--output-dir",
        dist_run,
        "--backend",
        "gloo",
    )
    assert r.returncode == 0, output(r)
    assert f"Parallelism strategy: {strategy} (chosen with --strategy)" in output(r)
    assert "adapter disabled" in output(r)
    a, b = single, step_rows(dist_run)
    assert set(a) == set(b) == {1, 2, 3}
    for step in a:
        for key in COLUMNS:
            assert (a[step][key] == "") == (b[step][key] == ""), (step, key)
            if a[step][key]:
                assert float(b[step][key]) == pytest.approx(float(a[step][key]), abs=2e-4), (step, key)
    assert float(a[3]["kl"]) > 0
