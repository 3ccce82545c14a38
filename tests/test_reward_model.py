"""`aura finetune --objective reward` (a Bradley–Terry reward model) and GRPO's `--reward model:PATH`, through the
real CLI on a tiny Llama:

* parity with TRL's RewardTrainer (same pairs, template, initial weights, score head and hyper-parameters; CPU,
  fp32, no dropout): every step's loss, accuracy, margin and mean score within 1e-4 over the run, LoRA (the score
  head trained whole) and full fine-tuning with TRL's ``margin`` column and ``center_rewards_coefficient``; the
  full run's ``final/`` loads with ``AutoModelForSequenceClassification`` and scores as TRL's trained model does.
  Every step's update follows from the previous step's gradients, so equal values at steps 2..N say the
  gradients were equal too. By design Aura logs the mean chosen and rejected scores apart
  (``rewards/chosen``, ``rewards/rejected``); TRL logs their mean (``mean_reward``): compared as such.
* exact resume from a checkpoint, and the LoRA ``final/`` loading with peft and giving the logged validation loss;
* GRPO with ``--reward model:final/`` logging, step by step, the same ``rewards/model.<run>/mean`` as a user
  reward that scores the same texts with plain transformers one at a time;
* the refusals: a missing reward model folder, a policy objective's flag under ``--objective reward``.
"""

from __future__ import annotations

import csv
import json
import shutil

import pytest

from tests.conftest import run_aura, run_aura_here
from tests.test_preference import ragged_pairs
from tests.test_preference_parity import PAIRS, _tokenizer

STEPS, SEED, LR = 6, 7, 5e-3
COMMON = [
    "--objective",
    "reward",
    "--template",
    "mistral",
    "--learning-rate",
    LR,
    "--warmup-steps",
    0,
    "--min-lr",
    0,
    "--lora-dropout",
    0,
    "--precision",
    "fp32",
    "--seed",
    SEED,
    "--log-interval",
    1,
    "--max-length",
    128,
]
KEYS = {"loss": "train_loss", "accuracy": "rewards/accuracy", "margin": "rewards/margin"}


@pytest.fixture(scope="module")
def env(tiny_zoo, tmp_path_factory):
    """conftest's tiny Llama and tokenizer (shared, read-only)."""
    return {"root": tmp_path_factory.mktemp("reward_model"), "tok": tiny_zoo["tokenizer"], "llama": tiny_zoo["llama"]}


def _write_pairs(path, pairs, margins=None):
    rows = [{"prompt": p, "chosen": c, "rejected": r} for p, c, r in pairs]
    for row, m in zip(rows, margins or []):
        row["margin"] = m
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


def _aura(env, out, data, *args) -> list[dict]:
    r = run_aura("finetune", "--base-model", env["llama"], "--data", data, "--output-dir", out, *COMMON, *args)
    assert r.returncode == 0, r.stdout + r.stderr
    with open(out / "training_log.csv", newline="") as f:
        return [row for row in csv.DictReader(f) if row["kind"] == "step"]


def _reward_model(env, *, lora: bool):
    """Aura's model: the score head seeded by --seed, then LoRA seeded again (aura.train.finetune._load_model)."""
    import torch
    from transformers import AutoModelForSequenceClassification

    from aura.train.adapters import SEQ_CLS, setup_model

    torch.manual_seed(SEED)
    model = AutoModelForSequenceClassification.from_pretrained(env["llama"], num_labels=1, dtype=torch.float32)
    model.config.pad_token_id = _tokenizer(env).pad_token_id
    if not lora:
        return model
    torch.manual_seed(SEED)
    return setup_model(model, method="lora", lora_r=16, lora_alpha=32, lora_dropout=0.0, head=SEQ_CLS)


def _trl(env, tmp_path, pairs, *, lora: bool, batch: int, accum: int, steps: int, margins=None, center=None):
    from datasets import Dataset
    from trl import RewardConfig, RewardTrainer

    rows = [
        {
            "prompt": [{"role": "user", "content": p}],
            "chosen": [{"role": "assistant", "content": c}],
            "rejected": [{"role": "assistant", "content": r}],
        }
        for p, c, r in pairs
    ]
    for row, m in zip(rows, margins or []):
        row["margin"] = m
    args = RewardConfig(
        output_dir=str(tmp_path / "trl"),
        per_device_train_batch_size=batch,
        gradient_accumulation_steps=accum,
        learning_rate=LR,
        lr_scheduler_type="cosine",
        warmup_steps=0,
        max_steps=steps,
        logging_steps=1,
        report_to=[],
        save_strategy="no",
        seed=SEED,
        max_grad_norm=1.0,
        weight_decay=0.0,
        adam_beta1=0.9,
        adam_beta2=0.999,
        adam_epsilon=1e-8,
        use_cpu=True,
        bf16=False,
        disable_tqdm=True,
        center_rewards_coefficient=center,
    )
    trainer = RewardTrainer(
        model=_reward_model(env, lora=lora),
        args=args,
        train_dataset=Dataset.from_list(rows),
        processing_class=_tokenizer(env),
    )
    trainer.train()
    return trainer


def _compare(aura_rows, trainer, steps: int):
    theirs = [h for h in trainer.state.log_history if "loss" in h and "train_runtime" not in h]
    assert len(aura_rows) == len(theirs) == steps
    for step, (mine, t) in enumerate(zip(aura_rows, theirs), 1):
        pairs = {a: float(t[k]) for k, a in KEYS.items()}
        pairs["mean"] = float(t["mean_reward"])
        mine_mean = (float(mine["rewards/chosen"]) + float(mine["rewards/rejected"])) / 2
        for key, value in pairs.items():
            got = mine_mean if key == "mean" else float(mine[key])
            assert abs(got - value) / max(1.0, abs(value)) < 1e-4, (step, key, got, value)
    assert float(aura_rows[-1]["train_loss"]) < float(aura_rows[0]["train_loss"])  # it learnt something


def test_lora_reward_model_matches_trl_reward_trainer(env, tmp_path):
    """LoRA r 16 on every projection and the score head trained whole; 2 pairs x 2 accumulation steps."""
    data = _write_pairs(tmp_path / "pairs.jsonl", PAIRS)
    rows = _aura(
        env,
        tmp_path / "aura",
        data,
        "--val-fraction",
        0,
        "--max-steps",
        STEPS,
        "--batch-size",
        2,
        "--gradient-accumulation-steps",
        2,
        "--save-steps",
        0,
    )
    _compare(rows, _trl(env, tmp_path, PAIRS, lora=True, batch=2, accum=2, steps=STEPS), STEPS)
    config = json.loads((tmp_path / "aura" / "final" / "adapter_config.json").read_text())
    assert config["task_type"] == "SEQ_CLS" and "score" in config["modules_to_save"]


def test_full_reward_model_with_margins_and_centering_matches_trl_and_its_final_folder_loads(env, tmp_path):
    """Full fine-tuning, TRL's margin column and center_rewards_coefficient 0.1; 1 pair x 2 accumulation steps.
    Aura's final/ read back by transformers scores the pairs as TRL's trained model does."""
    import torch
    from transformers import AutoModelForSequenceClassification

    pairs, margins, steps = PAIRS[:2], [0.5, 1.5], 5
    data = _write_pairs(tmp_path / "pairs.jsonl", pairs, margins)
    out = tmp_path / "aura"
    rows = _aura(
        env,
        out,
        data,
        "--method",
        "full",
        "--val-fraction",
        0,
        "--max-steps",
        steps,
        "--batch-size",
        1,
        "--gradient-accumulation-steps",
        2,
        "--save-steps",
        0,
        "--center-rewards-coefficient",
        0.1,
    )
    trainer = _trl(env, tmp_path, pairs, lora=False, batch=1, accum=2, steps=steps, margins=margins, center=0.1)
    _compare(rows, trainer, steps)
    mine = AutoModelForSequenceClassification.from_pretrained(out / "final").eval()
    assert mine.config.num_labels == 1 and mine.config.pad_token_id == _tokenizer(env).pad_token_id
    tok = _tokenizer(env)
    texts = [
        tok.apply_chat_template([{"role": "user", "content": p}, {"role": "assistant", "content": a}], tokenize=False)
        for p, c, r in pairs
        for a in (c, r)
    ]
    batch = tok(texts, add_special_tokens=False, padding=True, return_tensors="pt")
    with torch.no_grad():
        theirs = trainer.model.eval()(**batch).logits
        assert torch.allclose(mine(**batch).logits, theirs, atol=1e-4), (mine(**batch).logits, theirs)


def _validation_loss(env, final, data) -> float:
    """The Bradley–Terry loss of the validation pairs (Aura's split) through peft's own loading of final/."""
    import torch
    import torch.nn.functional as F
    from peft import PeftModel
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from aura.data.preference import load_pairs
    from aura.data.sft import split_train_val

    tok = AutoTokenizer.from_pretrained(final)
    base = AutoModelForSequenceClassification.from_pretrained(env["llama"], num_labels=1)
    base.config.pad_token_id = tok.pad_token_id
    model = PeftModel.from_pretrained(base, final).eval()
    _, val = split_train_val(load_pairs(data), val_fraction=0.25, seed=SEED)
    losses = []
    for pair in val:
        ids = [
            tok(
                tok.apply_chat_template(pair.prompt + [answer], tokenize=False).rstrip(), add_special_tokens=False
            ).input_ids
            for answer in (pair.chosen, pair.rejected)
        ]
        with torch.no_grad():
            r_c, r_r = (model(input_ids=torch.tensor([i])).logits[0, 0] for i in ids)
        losses.append(-F.logsigmoid(r_c - r_r))
    return float(torch.stack(losses).mean())


@pytest.fixture(scope="module")
def lora_run(env, tmp_path_factory):
    """8 pairs (2 for validation), LoRA, 4 steps with a checkpoint every 2; read-only."""
    root = tmp_path_factory.mktemp("reward_lora")
    data = _write_pairs(root / "pairs.jsonl", PAIRS + [(p + " Gracias.", c, r) for p, c, r in PAIRS])
    args = ["--val-fraction", 0.25, "--max-steps", 4, "--batch-size", 2, "--gradient-accumulation-steps", 1]
    rows = _aura(env, root / "run", data, *args, "--save-steps", 2)
    return {"root": root, "data": data, "args": args, "rows": rows, "run": root / "run"}


def test_reward_model_resumes_exactly_and_its_adapter_loads_with_peft(env, lora_run, tmp_path):
    resumed = tmp_path / "resumed"
    resumed.mkdir()
    shutil.copytree(lora_run["run"] / "checkpoint-step-2", resumed / "checkpoint-step-2")
    rows = _aura(env, resumed, lora_run["data"], *lora_run["args"], "--resume-from", "latest")
    straight = {int(r["step"]): r for r in lora_run["rows"]}
    assert [int(r["step"]) for r in rows] == [3, 4]
    keys = ["train_loss", "grad_norm", "rewards/chosen", "rewards/rejected", "rewards/accuracy", "rewards/margin"]
    for r in rows:
        assert [r[k] for k in keys] == [straight[int(r["step"])][k] for k in keys]
    with open(lora_run["run"] / "training_log.csv", newline="") as f:
        val = [r for r in csv.DictReader(f) if r["val_loss"]][-1]
    assert int(val["step"]) == 4
    loss = _validation_loss(env, lora_run["run"] / "final", lora_run["data"])
    assert loss == pytest.approx(float(val["val_loss"]), abs=1e-4)
    headline = json.loads((lora_run["run"] / "run.json").read_text())["headline"]  # the report card's
    assert [h["metric"] for h in headline] == ["rewards/accuracy", "rewards/margin"]
    r = run_aura_here("plot", lora_run["run"], "--output-dir", tmp_path, "--out", "rm.svg")
    assert r.returncode == 0, r.stdout + r.stderr
    svg = (tmp_path / "rm.svg").read_text()
    assert "Rewards (DPO/ORPO/KTO, reward model)" in svg and "run (Preference accuracy)" in svg


JUDGE = """
import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer

PATH = {path!r}
tok = AutoTokenizer.from_pretrained(PATH)
model = AutoModelForSequenceClassification.from_pretrained({base!r}, num_labels=1)
model.config.pad_token_id = tok.pad_token_id
from peft import PeftModel
model = PeftModel.from_pretrained(model, PATH).eval()

def same(prompts, completions, **kwargs):
    out = []
    for p, c in zip(prompts, completions):
        text = tok.apply_chat_template(
            [{{"role": "user", "content": p}}, {{"role": "assistant", "content": c}}], tokenize=False
        ).rstrip()
        ids = tok(text, add_special_tokens=False, return_tensors="pt").input_ids
        with torch.no_grad():
            out.append(float(model(input_ids=ids).logits[0, 0]))
    return out
"""


def test_grpo_with_a_reward_model_logs_its_score(env, lora_run, tmp_path):
    """The reward model's column equals, step by step, a user reward scoring the same texts one by one."""
    final = lora_run["run"] / "final"
    judge = tmp_path / "judge.py"
    judge.write_text(JUDGE.format(path=str(final), base=str(env["llama"])), encoding="utf-8")
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(
        "".join(json.dumps({"prompt": p}, ensure_ascii=False) + "\n" for p, _, _ in PAIRS), encoding="utf-8"
    )
    out = tmp_path / "grpo"
    r = run_aura(
        "finetune",
        "--objective",
        "grpo",
        "--base-model",
        env["llama"],
        "--data",
        prompts,
        "--output-dir",
        out,
        "--template",
        "mistral",
        "--reward",
        f"model:{final}:0.5",
        "--reward",
        f"{judge}:same:0",
        "--num-generations",
        4,
        "--batch-size",
        4,
        "--gradient-accumulation-steps",
        1,
        "--max-completion-length",
        10,
        "--max-steps",
        2,
        "--log-interval",
        1,
        "--lora-dropout",
        0,
        "--precision",
        "fp32",
        "--learning-rate",
        5e-3,
        "--save-steps",
        0,
        "--val-fraction",
        0,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "model.run x 0.5" in r.stdout
    with open(out / "training_log.csv", newline="") as f:
        rows = [row for row in csv.DictReader(f) if row["kind"] == "step"]
    assert len(rows) == 2
    for row in rows:
        assert float(row["rewards/model.run/mean"]) == pytest.approx(float(row["rewards/judge.same/mean"]), abs=1e-5)
        assert float(row["rewards/model.run/std"]) > 0  # the completions score differently
        assert float(row["reward"]) == pytest.approx(0.5 * float(row["rewards/model.run/mean"]), abs=1e-5)


def test_refusals_name_the_flag_and_the_folder(env, tmp_path):
    missing = tmp_path / "nowhere" / "final"
    r = run_aura_here("finetune", "--objective", "grpo", "--base-model", env["llama"], "--reward", f"model:{missing}")
    assert r.returncode == 2 and f"the reward model's folder {missing} does not exist" in r.stdout + r.stderr
    r = run_aura_here("finetune", "--objective", "reward", "--base-model", env["llama"], "--beta", 0.1)
    assert r.returncode == 2 and "--beta does not apply to --objective reward" in r.stdout + r.stderr
    r = run_aura_here("finetune", "--objective", "dpo", "--center-rewards-coefficient", 0.1)
    assert (
        r.returncode == 2 and "--center-rewards-coefficient only applies to --objective reward" in r.stdout + r.stderr
    )


@pytest.mark.dist
@pytest.mark.slow
def test_reward_model_under_ddp_on_two_ranks_equals_one_process(env, lora_run, tmp_path):
    """2 gloo ranks x 1 pair == 1 process x 2 pairs: the same score head on both ranks (seeded), the same
    per-step loss, accuracy, margin and scores."""
    from tests.distutil import output, torchrun

    run = tmp_path / "ddp"
    r = torchrun(
        "-m",
        "aura",
        "finetune",
        *map(
            str,
            ["--base-model", env["llama"], "--data", lora_run["data"], "--output-dir", run, *COMMON, *lora_run["args"]],
        ),
        "--save-steps",
        "0",
        "--strategy",
        "ddp",
        "--batch-size",
        "1",
        "--backend",
        "gloo",
        timeout=600,
    )
    assert r.returncode == 0, output(r)
    with open(run / "training_log.csv", newline="") as f:
        ddp = [row for row in csv.DictReader(f) if row["kind"] == "step"]
    assert len(ddp) == len(lora_run["rows"]) == 4
    for a, b in zip(lora_run["rows"], ddp):
        for key in ("train_loss", "rewards/chosen", "rewards/rejected", "rewards/accuracy", "rewards/margin"):
            assert float(b[key]) == pytest.approx(float(a[key]), rel=1e-5, abs=1e-5), (a["step"], key)


def test_reward_spec_refuses_a_folder_that_is_no_reward_model(env, tmp_path):
    from aura.core.errors import AuraError
    from aura.data.rewards import parse_reward

    with pytest.raises(AuraError, match="has neither config.json nor adapter_config.json"):
        parse_reward(f"model:{tmp_path}")
    with pytest.raises(AuraError, match="is not a reward model .its architecture is LlamaForCausalLM"):
        parse_reward(f"model:{env['llama']}:0.5")
    with pytest.raises(AuraError, match=r"expected NAME\[:WEIGHT\]"):
        parse_reward("model:")


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_shared_prompt_rows_score_as_two_rows(env, attn):
    """A pair in one row ``[prompt | chosen | rejected]`` (the prompt once; several pairs in a row where they
    fit) gives each answer the score its own row gets from transformers' pooling, also when the answers end in
    the pad token (read before it)."""
    import torch
    from transformers import AutoModelForSequenceClassification

    from aura.data.preference import collate_pairs, encode_pairs, load_pairs
    from aura.train.objectives.reward import sequence_scores

    tok = _tokenizer(env)
    for pad in (tok.pad_token_id, tok.eos_token_id):  # Mistral's answers end with EOS: as pad, it is skipped
        torch.manual_seed(0)
        model = AutoModelForSequenceClassification.from_pretrained(env["llama"], num_labels=1, attn_implementation=attn)
        model.config.pad_token_id = pad
        pairs = encode_pairs(load_pairs(None)[:3], tok, max_length=96)
        two, one = (collate_pairs(pairs, pad_id=pad, shared=shared) for shared in (False, True))
        assert one["input_ids"].shape[0] == 3 and two["input_ids"].shape[0] == 6
        with torch.no_grad():
            assert torch.allclose(sequence_scores(model.eval(), one), sequence_scores(model, two), atol=1e-5)
        # several pairs in a row (short ones beside a long one): each still scored as in its own two rows
        ragged = ragged_pairs(model.get_input_embeddings().weight.shape[0])
        two, one = (collate_pairs(ragged, pad_id=pad, shared=shared) for shared in (False, True))
        assert one["input_ids"].shape[0] == 2
        with torch.no_grad():
            assert torch.allclose(sequence_scores(model, one), sequence_scores(model, two), atol=1e-5)


def test_studio_form_offers_the_reward_objective_and_its_option(tmp_path):
    from tests.test_studio import client

    c, headers = client(tmp_path)
    fields = {f["name"]: f for f in c.get("/api/forms/finetune").json()["fields"]}
    assert "reward" in fields["objective"]["choices"] and fields["center_rewards_coefficient"]["default"] is None
    assert "modelo de recompensa" in fields["objective"]["help"]["es"]
    r = c.post(
        "/api/preview",
        json={
            "command": "finetune",
            "name": "rm",
            "values": {"objective": "reward", "center_rewards_coefficient": "0.01"},
        },
        headers=headers,
    )
    assert r.status_code == 200, r.text
    argv = r.json()["argv"]
    given = {argv[i]: argv[i + 1] for i in range(1, len(argv) - 1) if argv[i].startswith("--")}
    assert given["--objective"] == "reward" and given["--center-rewards-coefficient"] == "0.01", argv


def test_a_pipeline_stage_trains_a_reward_model_that_a_later_grpo_stage_names(env, tmp_path):
    """``objective: reward`` is a stage like any other, and ``reward: [model:rm.final]`` names its output: the
    reference resolves to the stage's folder (checked when the stage starts, not when it is planned) and makes
    GRPO depend on it."""
    from aura.pipeline.spec import load, resolve

    yaml = tmp_path / "rm.yaml"
    yaml.write_text(
        f"""description: {{es: "recompensa", en: "reward"}}
stages:
  - name: rm
    command: finetune
    options: {{base_model: {env["llama"]}, data: aura:preference_es.jsonl, objective: reward, max_steps: 3}}
  - name: grpo
    command: finetune
    options: {{base_model: {env["llama"]}, objective: grpo, reward: ["model:rm.final:0.5", spanish], max_steps: 2}}
""",
        encoding="utf-8",
    )
    pipeline = resolve(load(str(yaml)), tmp_path / "out")
    rm, grpo = pipeline.stages
    assert rm.cfg.objective == "reward" and grpo.refs == ["rm"]
    assert grpo.cfg.reward == [f"model:{tmp_path / 'out' / 'rm' / 'final'}:0.5", "spanish"]
    r = run_aura_here("pipeline", "plan", yaml)
    assert r.returncode == 0 and "All 2 stages are valid" in r.stdout, r.stdout + r.stderr


def test_a_bf16_base_trains_its_score_head_in_fp32(env):
    """On a GPU the LoRA base is bf16: the score head's trained copy stays fp32 (as LoRA's adapters) and takes
    the backbone's bf16 hidden states outside autocast too (the shared-prompt check runs without it)."""
    import torch

    from aura.train import adapters

    model = adapters.load_base_model(str(env["llama"]), dtype=torch.bfloat16, head=adapters.SEQ_CLS)
    model.config.pad_token_id = _tokenizer(env).pad_token_id
    model = adapters.setup_model(model, method="lora", head=adapters.SEQ_CLS)
    trained = {n: p.dtype for n, p in model.named_parameters() if p.requires_grad and "score" in n}
    assert trained == {"base_model.model.score.modules_to_save.default.weight": torch.float32}
    assert next(model.base_model.model.model.parameters()).dtype == torch.bfloat16
    with torch.no_grad():
        assert model(input_ids=torch.tensor([[5, 6, 7, 8]])).logits.dtype == torch.float32


@pytest.mark.slow
def test_qlora_reward_model_on_cpu_trains_and_grpo_loads_it(env, tmp_path):
    """QLoRA (4-bit NF4 base, bitsandbytes' CPU kernels): the score head trained whole beside the adapter; GRPO's
    loader merges the adapter into the unquantised base and scores."""
    pytest.importorskip("bitsandbytes")
    from aura.data.rewards import parse_reward

    data = _write_pairs(tmp_path / "pairs.jsonl", PAIRS)
    args = ["--method", "qlora", "--val-fraction", 0, "--max-steps", 3, "--batch-size", 2, "--save-steps", 0]
    rows = _aura(env, tmp_path / "q", data, *args)
    assert len(rows) == 3 and all(0 < float(r["train_loss"]) < 5 for r in rows)
    reward = parse_reward(f"model:{tmp_path / 'q' / 'final'}:2")
    assert (reward.name, reward.weight, reward.model) == ("model.q", 2.0, True)
    scores = reward.fn(prompts=["¿Qué tal?"] * 2, completions=["Bien, gracias.", "No."], prompt_messages=[None] * 2)
    assert len(scores) == 2 and scores[0] != scores[1]


@pytest.mark.slow
def test_reward_model_resumes_exactly_after_sigterm_and_kill_9(env, lora_run, tmp_path):
    """SIGTERM after step 1 saves an interrupt checkpoint (exit 3); the resumed run, saving every step, is killed
    -9 once the next step is saved; the next resume finishes: every step's logged values are the uninterrupted
    run's."""

    from tests.conftest import run_aura_killed, run_aura_terminated

    run = tmp_path / "run"
    common = [
        "finetune",
        "--base-model",
        env["llama"],
        "--data",
        lora_run["data"],
        "--output-dir",
        run,
        *COMMON,
        *lora_run["args"],
    ]
    text, stopped = run_aura_terminated(*common, "--save-steps", 0, run=run, at="Step 1/4")
    run_aura_killed(*common, "--save-steps", 1, "--resume-from", "latest", saved_in=run)
    _aura(env, run, lora_run["data"], *lora_run["args"], "--save-steps", 0, "--resume-from", "latest")
    with open(run / "training_log.csv", newline="") as f:
        rows = {int(r["step"]): r for r in csv.DictReader(f) if r["kind"] == "step"}
    assert sorted(rows) == [1, 2, 3, 4]
    keys = ["train_loss", "rewards/chosen", "rewards/rejected", "rewards/accuracy", "rewards/margin"]
    for step, straight in ((int(r["step"]), r) for r in lora_run["rows"]):
        assert [rows[step][k] for k in keys] == [straight[k] for k in keys], step
