"""`aura finetune` through the real CLI: LoRA learns, adapters reload in peft with Aura's losses,
epoch_info.json, exact resume, every data format, bad inputs, QLoRA on CPU, 2-rank gloo = 1 process."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest
import torch

from tests.conftest import run_aura, run_aura_here
from tests.distutil import output, torchrun
from tests.test_loop import build_prepared, read_log
from tests.tiny_models import build_llama, train_tokenizer

EMBEDDED = Path(__file__).resolve().parents[1] / "aura" / "resources" / "instrucciones_es.csv"
FAST = [
    "--max-length",
    "96",
    "--truncation",
    "truncate",
    "--log-interval",
    "1",
    "--lora-r",
    "8",
    "--lora-dropout",
    "0",
    "--precision",
    "fp32",
    "--batch-size",
    "4",
    "--gradient-accumulation-steps",
    "1",
    "--learning-rate",
    "5e-3",
    "--save-steps",
    "0",
    "--warmup-steps",
    "0",
]


def short_records(n: int = 24) -> list[dict]:
    """Short instruction/response pairs from the embedded sample (first sentence of each answer)."""
    with open(EMBEDDED, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))[:n]
    return [{"instruction": r["instruction"], "response": r["response"].split(". ")[0][:120] + "."} for r in rows]


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> dict:
    """A tiny random Llama (tests/tiny_models), a tiny model pretrained by `aura pretrain`, short data."""
    root = tmp_path_factory.mktemp("finetune")
    tok = train_tokenizer(root / "tok", vocab_size=500)
    llama = build_llama(root / "llama", tok, hidden=64, layers=2)
    data = root / "data.jsonl"
    data.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in short_records()), encoding="utf-8")
    prepared = build_prepared(root / "prepared")
    pre = root / "pretrained"
    r = run_aura(
        "pretrain",
        "--data",
        prepared,
        "--output-dir",
        pre,
        "--model-preset",
        "manual",
        "--embed-size",
        "64",
        "--num-layers",
        "2",
        "--num-heads",
        "4",
        "--seq-length",
        "64",
        "--intermediate-size",
        "128",
        "--batch-size",
        "4",
        "--max-steps",
        "3",
        "--save-steps",
        "0",
        "--sample-tokens",
        "0",
        "--precision",
        "fp32",
    )  # the same base on every CPU (`auto` is bf16 where avx512_bf16 exists)
    assert r.returncode == 0, r.stdout + r.stderr
    return {"root": root, "tok": tok, "llama": llama, "aura": pre / "final", "data": data}


def finetune(*args, expect: int = 0) -> str:
    """``aura finetune ARGS``; refusals (``expect=2``, all before training) run in this process."""
    r = (run_aura_here if expect == 2 else run_aura)("finetune", *map(str, args))
    out = r.stdout + r.stderr
    assert r.returncode == expect, out
    if expect == 2:
        assert "Traceback" not in out, out
    return out


def losses_through_peft(
    base: Path, adapter: Path, data: Path, *, template: str | None, split: str = "val"
) -> tuple[float, float]:
    """The loss of base + adapter loaded by plain peft on Aura's validation (or training) split, and the
    base model's own loss on the same examples (the adapter disabled): (with adapter, without)."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from aura.data.sft import load_conversations, split_train_val
    from aura.data.sft_batches import SFTDataSource, encode_all
    from aura.distributed import DistInfo
    from aura.train.loop import evaluate

    tok = AutoTokenizer.from_pretrained(adapter)  # the saved tokenizer carries the template used
    assert tok.chat_template and (adapter / "chat_template.jinja").read_text(encoding="utf-8") == tok.chat_template
    if template:
        from aura.text.templates import get_template

        assert tok.chat_template == get_template(template)
    train, val = split_train_val(load_conversations(str(data)), val_fraction=0.05, seed=42)
    examples = encode_all(val if split == "val" else train, tok, max_length=96, truncation="truncate")
    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base), str(adapter)).eval()
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    source = SFTDataSource(examples, batch_size=4, pad_id=pad, shuffle=False)

    def loss():
        return evaluate(model, source, dist=DistInfo(device=torch.device("cpu")), precision="fp32")

    with_adapter = loss()
    with model.disable_adapter():
        without = loss()
    return with_adapter, without


def val_loss_through_peft(base: Path, adapter: Path, data: Path, *, template: str | None) -> float:
    """The validation loss of base + adapter loaded by plain peft, on Aura's validation split."""
    return losses_through_peft(base, adapter, data, template=template)[0]


@pytest.mark.parametrize("base", ["llama", "aura"])
def test_lora_learns_and_the_adapter_reloads_in_peft_with_auras_loss(env, tmp_path, base):
    run = tmp_path / "run"
    template = "aura" if base == "aura" else None  # Aura's pretrained tokenizer has no chat template
    # Aura's 3-step pretrained model has near-uniform logits and small weights: a larger LR moves it
    lr = ["--learning-rate", "3e-2"] if base == "aura" else []
    out = finetune(
        "--base-model",
        env[base],
        "--data",
        env["data"],
        "--output-dir",
        run,
        *FAST,
        "--max-steps",
        "10",
        "--eval-interval",
        "10",
        *lr,
        *(["--template", template] if template else []),
    )
    assert "Trainable params:" in out and "Epochs:" not in out  # --max-steps given: no auto epochs
    losses = read_log(run)
    first, last = sum(losses[s] for s in (1, 2, 3)) / 3, sum(losses[s] for s in (8, 9, 10)) / 3
    assert last < first - (0.3 if base == "llama" else 0.03), losses  # per batch: noisy; the reference below
    final = run / "final"
    for name in ("adapter_config.json", "adapter_model.safetensors", "tokenizer.json", "aura_adapter.json"):
        assert (final / name).is_file(), name
    assert not (final / "model.safetensors").exists()
    # Aura's validation loss at the last step equals plain peft's with the saved adapter
    peft_val, base_val = losses_through_peft(env[base], final, env["data"], template=template)
    assert peft_val == pytest.approx(read_log(run, "eval")[10], rel=1e-5)
    # Learned, against the reference that removes batch-to-batch noise: the same model with its adapter
    # disabled, on the same examples. Measured (fp32, 2026-11-28): llama 6.419 -> 5.893 on the training split
    # and 6.374 -> 5.984 on the validation one; Aura's near-uniform 3-step model (ln 800 = 6.68) 6.695 ->
    # 6.614 and 6.746 -> 6.600. The margins are half of those: an adapter that does not train, is not
    # saved or is not loaded gives exactly 0.
    peft_train, base_train = losses_through_peft(env[base], final, env["data"], template=template, split="train")
    train_gain, val_gain = (0.25, 0.19) if base == "llama" else (0.04, 0.07)
    assert peft_train < base_train - train_gain, (peft_train, base_train)
    assert peft_val < base_val - val_gain, (peft_val, base_val)


def test_epoch_info_checkpoints_and_val_loss_match_peft(env, tmp_path):
    run = tmp_path / "run"
    out = finetune("--base-model", env["llama"], "--data", env["data"], "--output-dir", run, *FAST, "--epochs", "2")
    assert "Epoch 2/2" in out
    info = json.loads((run / "epoch_info.json").read_text())
    assert [e["epoch"] for e in info] == [1, 2]
    steps_per_epoch = -(-23 // 4)  # 24 examples, 1 for validation, batch 4
    assert [e["global_step"] for e in info] == [steps_per_epoch, 2 * steps_per_epoch]
    for e in info:
        ckpt = Path(e["checkpoint"])
        assert ckpt.name == f"checkpoint-epoch-{e['epoch']}"
        for name in ("adapter_config.json", "adapter_model.safetensors", "tokenizer.json", "trainer_state.json"):
            assert (ckpt / name).is_file(), name
        assert e["train_loss"] > 0 and e["eval_loss"] > 0 and e["learning_rate"] >= 0 and e["timestamp"]
    assert info[1]["train_loss"] < info[0]["train_loss"]
    # the epoch-2 validation loss Aura computed equals plain peft's on the saved adapter
    assert val_loss_through_peft(env["llama"], run / "final", env["data"], template=None) == pytest.approx(
        info[1]["eval_loss"], rel=1e-5
    )
    assert read_log(run, "epoch")[2 * steps_per_epoch] == pytest.approx(info[1]["eval_loss"], rel=1e-5)


def test_resume_reproduces_losses_exactly(env, tmp_path):
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    common = [
        "--base-model",
        env["llama"],
        "--data",
        env["data"],
        *FAST,
        "--max-steps",
        "8",
        "--gradient-accumulation-steps",
        "2",
        "--batch-size",
        "2",
    ]
    finetune(*common, "--output-dir", straight, "--save-steps", "4")
    resumed.mkdir()
    shutil.copytree(straight / "checkpoint-step-4", resumed / "checkpoint-step-4")
    out = finetune(*common, "--output-dir", resumed, "--resume-from", "latest")
    assert "Resumed from" in out
    a, b = read_log(straight), read_log(resumed)
    assert set(b) == {5, 6, 7, 8}
    assert [a[s] for s in b] == [b[s] for s in b]


def test_max_steps_run_lists_only_what_exists_and_says_which_limit_wins(env, tmp_path):
    run = tmp_path / "run"
    out = finetune(
        "--base-model",
        env["llama"],
        "--data",
        env["data"],
        "--output-dir",
        run,
        *FAST,
        "--epochs",
        "2",
        "--max-steps",
        "2",
    )
    assert (
        "Several limits at once (--epochs 2, --max-steps 2): the run ends at the first one reached (step 2)" in out
    ), out
    assert not (run / "epoch_info.json").exists() and "epoch_info.json" not in out, out
    help_text = run_aura("finetune", "--help").stdout
    epochs_help = help_text.split("--epochs EPOCHS", 2)[2].split("--max-steps")[0]
    assert "default: auto" in epochs_help and "default 1" not in epochs_help, epochs_help


def _formats(root: Path) -> dict[str, tuple[Path, list[str]]]:
    recs = short_records(12)
    out: dict[str, tuple[Path, list[str]]] = {}
    p = root / "d.csv"
    with open(p, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=["instruction", "input", "response"])
        w.writeheader()
        w.writerows({**r, "input": "Responde breve." if i % 2 else ""} for i, r in enumerate(recs))
    out["csv"] = (p, [])
    p = root / "d.jsonl"  # multi-turn messages with a system prompt
    p.write_text(
        "".join(
            json.dumps(
                {
                    "messages": [
                        {"role": "system", "content": "Eres breve."},
                        {"role": "user", "content": a["instruction"]},
                        {"role": "assistant", "content": a["response"]},
                        {"role": "user", "content": b["instruction"]},
                        {"role": "assistant", "content": b["response"]},
                    ]
                },
                ensure_ascii=False,
            )
            + "\n"
            for a, b in zip(recs[::2], recs[1::2])
        ),
        encoding="utf-8",
    )
    out["messages"] = (p, [])
    p = root / "d.json"  # ShareGPT
    p.write_text(
        json.dumps(
            [
                {
                    "conversations": [
                        {"from": "human", "value": r["instruction"]},
                        {"from": "gpt", "value": r["response"]},
                    ]
                }
                for r in recs
            ],
            ensure_ascii=False,
        ),
        encoding="utf-8",
    )
    out["sharegpt"] = (p, ["--template", "chatml"])
    import pyarrow as pa
    import pyarrow.parquet as pq

    p = root / "d.parquet"
    pq.write_table(pa.Table.from_pylist([{"prompt": r["instruction"], "completion": r["response"]} for r in recs]), p)
    out["parquet"] = (p, ["--template", "alpaca", "--max-length", "256"])  # Alpaca's system text is long
    p = root / "d.txt"  # already formatted (Mistral)
    p.write_text(
        "".join(f"<|endoftext|>[INST] {r['instruction']} [/INST] {r['response']}<|endoftext|>\n" for r in recs),
        encoding="utf-8",
    )
    out["text"] = (p, [])
    return out


@pytest.mark.parametrize("fmt", ["csv", "messages", "sharegpt", "parquet", "text"])
def test_every_data_format_end_to_end(env, tmp_path, fmt):
    path, extra = _formats(tmp_path)[fmt]
    run = tmp_path / "run"
    out = finetune("--base-model", env["llama"], "--data", path, "--output-dir", run, *FAST, "--max-steps", "2", *extra)
    assert (run / "final" / "adapter_model.safetensors").is_file()
    if fmt == "text":
        assert "no response marker" not in out  # the [/INST] markers located the responses
    if extra:
        assert f"Chat template: {extra[1]}" in out


def _bad_inputs(env, root: Path) -> dict[str, tuple[list[str], str]]:
    recs = short_records(6)
    no_cols = root / "no_cols.csv"
    no_cols.write_text("pregunta,respuesta\nhola,adiós\n", encoding="utf-8")
    empty = root / "empty.jsonl"
    empty.write_text(
        "".join(
            json.dumps(
                {"instruction": r["instruction"], "response": "" if i == 2 else r["response"]}, ensure_ascii=False
            )
            + "\n"
            for i, r in enumerate(recs)
        ),
        encoding="utf-8",
    )
    role = root / "role.jsonl"
    role.write_text(
        json.dumps({"messages": [{"role": "user", "content": "hola"}, {"role": "bot", "content": "hola"}]}) + "\n",
        encoding="utf-8",
    )
    alt = root / "alt.jsonl"
    alt.write_text(
        json.dumps({"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]})
        + "\n"
        + json.dumps({"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]})
        + "\n",
        encoding="utf-8",
    )
    no_tpl_tok = train_tokenizer(root / "tok_plain", vocab_size=400, chat_template=False)
    no_tpl = build_llama(root / "no_template", no_tpl_tok)
    d, llama = str(env["data"]), str(env["llama"])
    return {
        "columns": (["--base-model", llama, "--data", str(no_cols)], "Columns found: pregunta, respuesta"),
        "empty": (
            ["--base-model", llama, "--data", str(empty), "--empty-responses", "fail"],
            "1 example has an empty response (e.g. " + str(empty) + ", line 3",
        ),
        "too_long": (["--base-model", llama, "--data", d, "--max-length", "4"], "No example fits in --max-length 4"),
        "role": (["--base-model", llama, "--data", str(role)], "line 1, message 2: unknown role 'bot'"),
        "alternate": (["--base-model", llama, "--data", str(alt)], "line 2, message 2: expected role 'assistant'"),
        "template": (["--base-model", str(no_tpl), "--data", d], "no chat template"),
        "base": (["--base-model", str(root / "nope"), "--data", d], "does not exist"),
        "targets": (
            ["--base-model", llama, "--data", d, "--target-modules", "query_key_value"],
            "linear layers: q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj",
        ),
    }


BAD = ["columns", "empty", "too_long", "role", "alternate", "template", "base", "targets"]


@pytest.mark.parametrize("case", BAD)
def test_bad_input_is_a_clear_error(env, tmp_path, case):
    args, expected = _bad_inputs(env, tmp_path)[case]
    out = finetune(*args, "--output-dir", tmp_path / "run", expect=2)
    assert expected in out, out
    assert not (tmp_path / "run" / "final").exists()


def test_qlora_without_bitsandbytes_is_a_clear_error(env, tmp_path):
    fake = tmp_path / "site"
    (fake / "bitsandbytes").mkdir(parents=True)
    (fake / "bitsandbytes" / "__init__.py").write_text("raise ImportError('no bitsandbytes here')\n")
    r = run_aura(
        "finetune",
        "--base-model",
        env["llama"],
        "--data",
        env["data"],
        "--method",
        "qlora",
        "--output-dir",
        tmp_path / "run",
        env={"PYTHONPATH": str(fake)},
    )
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "QLoRA needs bitsandbytes" in r.stdout + r.stderr


def test_adapter_resumed_onto_another_base_names_both(env, tmp_path):
    run = tmp_path / "run"
    finetune("--base-model", env["llama"], "--data", env["data"], "--output-dir", run, *FAST, "--max-steps", "2")
    other = build_llama(tmp_path / "other_base", env["tok"], seed=7)
    out = finetune(
        "--base-model",
        other,
        "--data",
        env["data"],
        "--output-dir",
        run,
        *FAST,
        "--max-steps",
        "4",
        "--resume-from",
        "latest",
        expect=2,
    )
    assert "was trained on" in out and str(env["llama"]) in out and str(other) in out, out


def test_qlora_on_cpu_learns_and_reloads(env, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig

    run = tmp_path / "run"
    finetune(
        "--base-model",
        env["llama"],
        "--data",
        env["data"],
        "--output-dir",
        run,
        *FAST,
        "--method",
        "qlora",
        "--max-steps",
        "10",
    )
    losses = read_log(run)
    assert sum(losses[s] for s in (8, 9, 10)) < sum(losses[s] for s in (1, 2, 3)) - 0.6, losses
    q = BitsAndBytesConfig(
        load_in_4bit=True,
        bnb_4bit_quant_type="nf4",
        bnb_4bit_use_double_quant=True,
        bnb_4bit_compute_dtype=torch.float32,
    )
    base = AutoModelForCausalLM.from_pretrained(env["llama"], quantization_config=q, device_map={"": "cpu"})
    ids = torch.tensor([[5, 17, 42, 99, 7, 3]])
    with torch.no_grad():
        before = base(input_ids=ids).logits.clone()
        after = PeftModel.from_pretrained(base, str(run / "final"))(input_ids=ids).logits
    assert (after - before).abs().max() > 1e-3  # the trained adapter changes the quantized model


@pytest.mark.dist
def test_two_gloo_ranks_equal_one_process_with_double_batch(env, tmp_path):
    common = ["--base-model", env["llama"], "--data", env["data"], *FAST, "--max-steps", "4"]
    single = tmp_path / "single"
    finetune(*common, "--output-dir", single)  # batch 4
    dist_run = tmp_path / "dist"
    r = torchrun(
        "-m",
        "aura",
        "finetune",
        *map(str, common),
        "--batch-size",
        "2",
        "--output-dir",
        str(dist_run),
        "--backend",
        "gloo",
    )
    assert r.returncode == 0, output(r)
    # one voice: rank 1 says nothing of its own (aura.train.run.session), then every rank ends with one line
    assert r.stdout.count("Examples: ") == 1 and r.stdout.count("Outputs in ") == 1, output(r)
    assert r.stdout.count("Training complete. Gradients synchronised.") == 2, output(r)
    a, b = read_log(single), read_log(dist_run)
    assert set(a) == set(b) == {1, 2, 3, 4}
    for s in a:
        assert b[s] == pytest.approx(a[s], abs=2e-4), (a, b)


@pytest.mark.slow
@pytest.mark.dist
def test_lora_with_fsdp2_on_two_ranks_equals_one_process_and_saves_a_loadable_adapter(env, tmp_path):
    """LoRA under FSDP2 (fully_shard per block, then the root) on 2 gloo ranks: same losses as one process
    with double batch, and final/ is a peft adapter written from the sharded model."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    common = ["--base-model", env["llama"], "--data", env["data"], *FAST, "--max-steps", "4"]
    single = tmp_path / "single"
    finetune(*common, "--output-dir", single)
    sharded = tmp_path / "fsdp"
    r = torchrun(
        "-m",
        "aura",
        "finetune",
        *map(str, common),
        "--batch-size",
        "2",
        "--output-dir",
        str(sharded),
        "--backend",
        "gloo",
        "--strategy",
        "fsdp",
    )
    assert r.returncode == 0, output(r)
    assert "Sync=FSDP" in r.stdout
    a, b = read_log(single), read_log(sharded)
    for s in a:
        assert b[s] == pytest.approx(a[s], abs=2e-4), (a, b)
    ids = torch.tensor([[5, 17, 42, 99, 7, 3]])
    with torch.no_grad():
        ref = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(env["llama"]), str(single / "final"))
        got = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(env["llama"]), str(sharded / "final"))
        assert torch.allclose(ref(input_ids=ids).logits, got(input_ids=ids).logits, atol=1e-3)


def test_output_dir_on_the_base_models_folder_says_what_to_do_instead(tmp_path):
    """Issue 25.15: fine-tuning into the base model's folder (or the run folder holding it) named no way out."""
    base = build_llama(
        tmp_path / "pre" / "final", train_tokenizer(tmp_path / "tok", vocab_size=300), hidden=32, layers=1
    )
    before = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*"))
    for out, relation in (
        (tmp_path / "pre", "is the run folder that holds the base model"),
        (base, "is the folder of the base model"),
    ):
        text = finetune("--base-model", base, "--output-dir", out, expect=2)
        assert relation in text and f"--output-dir {tmp_path / 'pre-finetune'}" in text, text
        assert "the base model is left untouched" in text
    es = run_aura_here("finetune", "--base-model", base, "--output-dir", tmp_path / "pre", env={"AURA_LANG": "es"})
    assert es.returncode == 2 and "es la carpeta de ejecución que contiene el modelo base" in es.stderr, es.stderr
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")) == before  # nothing written


def test_keep_last_help_says_epoch_checkpoints_and_best_are_kept():
    """Issue 25.15: --keep-last said "Checkpoints to keep", yet it never prunes epoch checkpoints nor best/."""
    for lang, words in (
        ("en", ("Step checkpoints", "checkpoint-epoch-N", "always kept")),
        ("es", ("Checkpoints de paso", "checkpoint-epoch-N", "se conservan siempre")),
    ):
        r = run_aura_here("finetune", "--help", env={"AURA_LANG": lang})
        text = " ".join(r.stdout.split()).split("--keep-last KEEP_LAST ")[-1]  # the option's help, unwrapped
        assert all(w in text[:250] for w in words), text[:250]


def test_a_hub_dataset_without_a_network_falls_back_to_data_fallback_and_says_so(env, tmp_path):
    """The 72-hour pipeline's SFT names a hub dataset with the bundled sample as its fallback: with the hub
    unreachable (HF_HUB_OFFLINE=1) the stage trains on the fallback and the log says which and why; without
    a fallback the same command is refused, naming the dataset."""
    from tests.conftest import run_aura

    offline = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    args = [
        "finetune",
        "--base-model",
        env["llama"],
        "--data",
        "Iker/OpenHermes-2.5-Spanish",
        *FAST,
        "--max-steps",
        "1",
    ]
    r = run_aura(*args, "--output-dir", tmp_path / "fb", "--data-fallback", env["data"], env=offline)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert (
        "--data Iker/OpenHermes-2.5-Spanish is a hub dataset and the hub (https://huggingface.co) cannot be "
        f"reached (no network, or HF_HUB_OFFLINE=1): using --data-fallback {env['data']} instead."
    ) in out, out
    assert (tmp_path / "fb" / "final").is_dir()
    r = run_aura(*args, "--output-dir", tmp_path / "none", env=offline)
    assert r.returncode != 0 and "Iker/OpenHermes-2.5-Spanish" in r.stdout + r.stderr
    assert "Traceback" not in r.stdout + r.stderr, r.stdout + r.stderr
