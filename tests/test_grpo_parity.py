"""Parity with TRL: for the same prompts, fixed completions, rewards and reference, Aura's GRPO objective
gives TRL GRPOTrainer's advantages, per-token log-probabilities, reference log-probabilities, loss, LoRA
gradients and clipped share, for every loss type (CISPO included) and both importance-sampling levels (token;
sequence = GSPO) (CPU, fp32, tiny Llama, no dropout).

TRL's own code path runs: ``_generate_and_score_completions`` (rewards, group-normalised advantages, the
reference pass with the adapter disabled) with its sampling replaced by the fixed completions, then
``_compute_loss`` and a backward pass. Aura's runs through the rollout source's scoring, advantages,
batching and reference pass, then ``GRPO.loss`` on the same PeftModel. The old log-probabilities are
perturbed (as after an earlier optimizer step) so the clipped ratio and its gradient are exercised too.
TRL's forward counts positions from the left padding, Aura's from each row's first token: RoPE depends
only on relative positions, so the two agree to float rounding.
"""

from __future__ import annotations

import pytest

from tests.tiny_models import build_llama, train_tokenizer

trl = pytest.importorskip("trl")

PROMPTS = ["¿Cuánto es dos más dos?", "Escribe un número:", "¿Qué idioma se habla en Chile?"]
COMPLETIONS = [
    "Son 4, claro.",
    "Cuatro",
    "Respuesta: 7",
    "El 12 y el 3",
    "Español.",
    "Se habla español",
    "Inglés",
    "No lo sé muy bien, la verdad",
]
G, C_MAX = 4, 12


def digits(*, completions, **_):
    return [float(sum(ch.isdigit() for ch in c)) for c in completions]


def short(*, completions, **_):
    return [-len(c) / 20 for c in completions]


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    root = tmp_path_factory.mktemp("grpo_parity")
    tok_dir = train_tokenizer(root / "tok", vocab_size=500, chat_template=False)
    return build_llama(root / "llama", tok_dir, hidden=64, layers=2)


@pytest.fixture(scope="module")
def trainer_tok(env, tmp_path_factory):
    """One TRL trainer for every case: each sets ``loss_type`` and ``scale_rewards``, the attributes TRL's
    scoring and loss read (from its config) at every call."""
    return _trainer(env, tmp_path_factory.mktemp("trl"), loss_type="dapo", scale_rewards="group")


def _trainer(model_dir, tmp_path, *, loss_type: str, scale_rewards: str):
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    tok = AutoTokenizer.from_pretrained(model_dir)
    args = GRPOConfig(
        output_dir=str(tmp_path / "trl"),
        per_device_train_batch_size=2 * G,
        num_generations=G,
        max_completion_length=C_MAX,
        loss_type=loss_type,
        scale_rewards=scale_rewards,
        beta=0.04,
        epsilon=0.2,
        epsilon_high=0.28,
        temperature=0.7,
        reward_weights=[1.0, 0.5],
        report_to=[],
        use_cpu=True,
        bf16=False,
        fp16=False,
        logging_steps=1,
        seed=3,
        gradient_accumulation_steps=1,
    )
    peft_config = LoraConfig(
        r=8, lora_alpha=16, lora_dropout=0.0, target_modules=["q_proj", "v_proj", "up_proj"], task_type="CAUSAL_LM"
    )
    data = Dataset.from_list([{"prompt": p} for p in PROMPTS])
    return GRPOTrainer(
        model=str(model_dir),
        reward_funcs=[digits, short],
        args=args,
        train_dataset=data,
        processing_class=tok,
        peft_config=peft_config,
    ), tok


def _fixed(tok):
    """(prompt ids of each of the 2G rows, completion ids of each row): prompts 0 and 1, G rows each; some
    completions end with EOS, the longest is truncated at C_MAX tokens."""
    prompt_ids = [tok(PROMPTS[i // G])["input_ids"] for i in range(2 * G)]
    completion_ids = []
    for i, text in enumerate(COMPLETIONS):
        ids = tok(text, add_special_tokens=False)["input_ids"][:C_MAX]
        if len(ids) < C_MAX and i % 3 != 2:
            ids = ids + [tok.eos_token_id]
        completion_ids.append(ids)
    return prompt_ids, completion_ids


@pytest.mark.parametrize(
    "loss_type,scale,level",
    [
        ("grpo", "group", "token"),
        ("bnpo", "batch", "token"),
        ("dr_grpo", "none", "token"),
        ("dapo", "group", "token"),
        ("grpo", "group", "sequence"),  # GSPO as its paper sets it up
        ("dapo", "batch", "sequence"),
        ("cispo", "group", "token"),
        ("cispo", "group", "sequence"),
    ],
)
def test_grpo_matches_trl(trainer_tok, loss_type, scale, level):
    import torch

    from aura.data.prompts import EncodedPrompt, PromptItem
    from aura.data.rewards import Reward, RewardSet
    from aura.distributed import DistInfo
    from aura.inference.sampling import SamplingParams
    from aura.train.objectives.grpo import GRPO, completion_logps
    from aura.train.objectives.rollout import RolloutSource

    trainer, tok = trainer_tok
    trainer.loss_type, trainer.scale_rewards, trainer.importance_sampling_level = loss_type, scale, level
    # CISPO's epsilon_high bounds the ratio itself: 1.2 clips the ratios raised by the perturbation below
    eps_high = 1.2 if loss_type == "cispo" else 0.28
    trainer.epsilon_high = eps_high
    model = trainer.model
    model.train()
    prompt_ids, completion_ids = _fixed(tok)
    texts = tok.batch_decode(completion_ids, skip_special_tokens=True)
    trainer._generate = lambda prompts: (prompt_ids, completion_ids, None, texts, None, {}, None, None)
    out = trainer._generate_and_score_completions([{"prompt": PROMPTS[i // G]} for i in range(2 * G)])
    c = out["completion_ids"].shape[1]
    b, t = out["completion_mask"].shape
    # old log-probs 0.35 off in alternating directions: every row has tokens clipped below and above; plus
    # -0.3, 0 or 0.3 per row, so that whole completions' (sequence-level) ratios are clipped too
    old = 0.35 * ((torch.arange(b)[:, None] + torch.arange(t)[None]) % 2 * 2 - 1) + 0.3 * (
        torch.arange(b)[:, None] % 3 - 1
    )
    trl_logps, _, _ = trainer._get_per_token_logps_and_entropies(
        model,
        torch.cat([out["prompt_ids"], out["completion_ids"]], 1),
        torch.cat([out["prompt_mask"], out["completion_mask"]], 1),
        c,
    )
    out["old_per_token_logps"] = (trl_logps.detach() + old) * out["completion_mask"]
    model.zero_grad()
    trainer.current_gradient_accumulation_steps = 1  # set by Trainer's training loop, which does not run here
    trainer._metrics["train"].clear()
    try:
        trl_loss = trainer._compute_loss(model, out)
    finally:
        trainer.importance_sampling_level, trainer.epsilon_high = "token", 0.28
    trl_loss.backward()
    trl_grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}

    # Aura: the rollout source's scoring, advantages, batch and reference pass; then the objective
    prompts = [
        EncodedPrompt(tok(p)["input_ids"], PromptItem([{"role": "user", "content": p}], where=f"p{i}"))
        for i, p in enumerate(PROMPTS)
    ]
    rewards = RewardSet([Reward("digits", 1.0, digits), Reward("short", 0.5, short)])
    sampling = SamplingParams(max_new_tokens=C_MAX, temperature=0.7, stop_ids=(tok.eos_token_id,))
    source = RolloutSource(
        prompts,
        policy=model,
        rewards=rewards,
        tokenizer=tok,
        sampling=sampling,
        num_generations=G,
        batch_size=2 * G,
        accumulation=1,
        scale_rewards=scale,
        temperature=0.7,
        beta=0.04,
        dist=DistInfo(),
        precision="fp32",
    )
    rows = [i // G for i in range(2 * G)]
    advantages, _, fate = source._advantages(source._score(rows, completion_ids), completion_ids)
    assert advantages == pytest.approx(out["advantages"].tolist(), abs=1e-4)
    batch = source._collate(rows, completion_ids, advantages, fate)
    assert torch.equal(batch["completion_mask"], out["completion_mask"])
    batch["ref_logps"] = source._reference_logps(batch)
    torch.testing.assert_close(
        batch["ref_logps"] * batch["completion_mask"],
        out["ref_per_token_logps"] * out["completion_mask"],
        atol=1e-5,
        rtol=0,
    )
    aura_logps, _ = completion_logps(model, batch, temperature=0.7)
    torch.testing.assert_close(
        aura_logps * batch["completion_mask"], trl_logps * out["completion_mask"], atol=1e-5, rtol=0
    )
    batch["old_logps"] = out["old_per_token_logps"]
    objective = GRPO(
        loss_type=loss_type,
        epsilon=0.2,
        epsilon_high=eps_high,
        beta=0.04,
        temperature=0.7,
        max_completion_length=C_MAX,
        reward_names=rewards.names,
        importance_sampling_level=level,
    )
    model.zero_grad()
    total, stats = objective.loss(model, batch)
    loss = total / objective.count(batch)  # what the loop does with one micro-batch on one rank
    loss.backward()
    assert loss.item() == pytest.approx(trl_loss.item(), abs=1e-4)
    clip_share = stats["clip_ratio"].item() / objective.count(batch)  # the loop's per-unit average
    trl_clip = trainer._metrics["train"]["cispo_clip_ratio" if loss_type == "cispo" else "clip_ratio/region_mean"]
    assert clip_share == pytest.approx(trl_clip[-1], abs=1e-6) and clip_share > 0  # clipped somewhere
    for name, grad in trl_grads.items():
        aura_grad = dict(model.named_parameters())[name].grad
        torch.testing.assert_close(aura_grad, grad, atol=1e-4, rtol=0, msg=lambda m: f"{name}: {m}")
    assert sum(g.abs().sum() for g in trl_grads.values()) > 0


def test_sampler_importance_correction_matches_trl(trainer_tok):
    """GRPO with completions sampled by another engine (vLLM): TRL's ``vllm_importance_sampling_correction``
    in its default mode (``sequence_mask``, C_max 3) against Aura's ``sampler_logps``. The sampler's
    log-probs are the trainer's, shifted per completion so that the completions' ratios straddle 1 and one
    exceeds 3 (dropped): loss and LoRA gradients must agree."""
    import torch

    from aura.data.prompts import EncodedPrompt, PromptItem
    from aura.data.rewards import Reward, RewardSet
    from aura.distributed import DistInfo
    from aura.inference.sampling import SamplingParams
    from aura.train.objectives.grpo import GRPO, IS_MAX
    from aura.train.objectives.rollout import RolloutSource, pad_rows

    trainer, tok = trainer_tok
    trainer.loss_type, trainer.scale_rewards = "dapo", "group"
    model = trainer.model
    model.train()
    prompt_ids, completion_ids = _fixed(tok)
    texts = tok.batch_decode(completion_ids, skip_special_tokens=True)
    trainer._generate = lambda prompts: (prompt_ids, completion_ids, None, texts, None, {}, None, None)
    plain = trainer._generate_and_score_completions([{"prompt": PROMPTS[i // G]} for i in range(2 * G)])
    c = plain["completion_ids"].shape[1]
    with torch.no_grad():
        logps, _, _ = trainer._get_per_token_logps_and_entropies(
            model,
            torch.cat([plain["prompt_ids"], plain["completion_ids"]], 1),
            torch.cat([plain["prompt_mask"], plain["completion_mask"]], 1),
            c,
        )
    shift = torch.tensor([-1.5, -0.6, -0.2, 0.0, 0.3, 0.7, -0.9, 1.2])  # summed over each row: ratio e^-shift
    lengths = plain["completion_mask"].sum(1)
    sampler = [(logps[i, : int(n)] + shift[i] / n).tolist() for i, n in enumerate(lengths)]
    assert (torch.exp(-shift) > IS_MAX).sum() == 1  # one completion is dropped, the others weighted

    trainer.use_vllm, trainer.vllm_importance_sampling_correction = True, True
    trainer.vllm_importance_sampling_mode, trainer.vllm_importance_sampling_clip_max = "sequence_mask", IS_MAX
    trainer.vllm_importance_sampling_clip_min = None
    trainer._generate = lambda prompts: (prompt_ids, completion_ids, None, texts, sampler, {}, None, None)
    try:
        out = trainer._generate_and_score_completions([{"prompt": PROMPTS[i // G]} for i in range(2 * G)])
        model.zero_grad()
        trainer.current_gradient_accumulation_steps = 1
        trl_loss = trainer._compute_loss(model, out)
        trl_loss.backward()
    finally:
        trainer.use_vllm = False
    trl_grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}

    prompts = [
        EncodedPrompt(tok(p)["input_ids"], PromptItem([{"role": "user", "content": p}], where=f"p{i}"))
        for i, p in enumerate(PROMPTS)
    ]
    rewards = RewardSet([Reward("digits", 1.0, digits), Reward("short", 0.5, short)])
    source = RolloutSource(
        prompts,
        policy=model,
        rewards=rewards,
        tokenizer=tok,
        sampling=SamplingParams(max_new_tokens=C_MAX, temperature=0.7),
        num_generations=G,
        batch_size=2 * G,
        accumulation=1,
        scale_rewards="group",
        temperature=0.7,
        beta=0.04,
        dist=DistInfo(),
        precision="fp32",
    )
    rows = [i // G for i in range(2 * G)]
    advantages, _, fate = source._advantages(source._score(rows, completion_ids), completion_ids)
    batch = source._collate(rows, completion_ids, advantages, fate)
    batch["ref_logps"] = source._reference_logps(batch)
    batch["sampler_logps"] = pad_rows(sampler, width=batch["completion_mask"].shape[1])
    objective = GRPO(
        loss_type="dapo",
        epsilon=0.2,
        epsilon_high=0.28,
        beta=0.04,
        temperature=0.7,
        max_completion_length=C_MAX,
        reward_names=rewards.names,
    )
    model.zero_grad()
    total, _ = objective.loss(model, batch)
    loss = total / objective.count(batch)
    loss.backward()
    assert loss.item() == pytest.approx(trl_loss.item(), abs=1e-4)
    without = objective.loss(model, {k: v for k, v in batch.items() if k != "sampler_logps"})[0] / objective.count(
        batch
    )
    assert abs(without.item() - loss.item()) > 1e-3  # the correction changed the loss
    for name, grad in trl_grads.items():
        torch.testing.assert_close(dict(model.named_parameters())[name].grad, grad, atol=1e-4, rtol=0)


def test_an_external_engine_samples_outside_autocast_and_its_log_probs_reach_the_batch(trainer_tok):
    """vLLM keeps its own dtypes (the rollout source's bf16 autocast is for Aura's sampler only), and the
    log-probs it returns travel with each micro-batch as ``sampler_logps``."""
    import torch

    from aura.data.prompts import EncodedPrompt, PromptItem
    from aura.data.rewards import Reward, RewardSet
    from aura.distributed import DistInfo
    from aura.inference.sampling import SamplingParams
    from aura.train.objectives.rollout import RolloutSource

    trainer, tok = trainer_tok
    _, completion_ids = _fixed(tok)
    seen = []

    def engine(prompts, keys):
        seen.append(torch.is_autocast_enabled("cpu"))
        ids = [completion_ids[i % len(completion_ids)] for i in range(len(prompts))]
        return ids, [[-0.5 - j / 10 for j in range(len(c))] for c in ids]

    prompts = [
        EncodedPrompt(tok(p)["input_ids"], PromptItem([{"role": "user", "content": p}], where=f"p{i}"))
        for i, p in enumerate(PROMPTS)
    ]
    source = RolloutSource(
        prompts,
        policy=trainer.model,
        rewards=RewardSet([Reward("digits", 1.0, digits)]),
        tokenizer=tok,
        sampling=SamplingParams(max_new_tokens=C_MAX),
        num_generations=G,
        batch_size=G,
        accumulation=2,
        scale_rewards="group",
        temperature=1.0,
        beta=0.0,
        dist=DistInfo(),
        precision="bf16",
        generate=engine,
    )
    batches = source.window(0, 0)
    assert seen == [False] and len(batches) == 2
    for b in batches:
        mask = b["completion_mask"].bool()
        assert b["sampler_logps"].shape == mask.shape
        assert torch.all(b["sampler_logps"][~mask] == 0) and torch.all(b["sampler_logps"][:, 0] == -0.5)


def _dapo_source(model, tok, **dapo):
    """Aura's rollout source on ``PROMPTS`` with the parity tests' settings (group scaling, beta 0.04), plus
    DAPO's options (``mask_truncated``, ``dynamic_sampling``)."""
    from aura.data.prompts import EncodedPrompt, PromptItem
    from aura.data.rewards import Reward, RewardSet
    from aura.distributed import DistInfo
    from aura.inference.sampling import SamplingParams
    from aura.train.objectives.rollout import RolloutSource

    prompts = [
        EncodedPrompt(tok(p)["input_ids"], PromptItem([{"role": "user", "content": p}], where=f"p{i}"))
        for i, p in enumerate(PROMPTS)
    ]
    return RolloutSource(
        prompts,
        policy=model,
        rewards=RewardSet([Reward("digits", 1.0, digits), Reward("short", 0.5, short)]),
        tokenizer=tok,
        sampling=SamplingParams(max_new_tokens=C_MAX, temperature=0.7, stop_ids=(tok.eos_token_id,)),
        num_generations=G,
        batch_size=2 * G,
        accumulation=1,
        scale_rewards="group",
        temperature=0.7,
        beta=0.04,
        dist=DistInfo(),
        precision="fp32",
        **dapo,
    )


@pytest.mark.parametrize("loss_type", ["grpo", "dapo"])
def test_masked_truncated_completions_match_trl(trainer_tok, loss_type):
    """DAPO's overlong masking, TRL's ``mask_truncated_completions``: a completion cut at the length limit
    (no EOS) keeps its place in its group's advantage but none of its tokens in the loss; grpo still counts
    it as a completion of the mean (TRL's ``.mean()`` over rows), dapo counts only the tokens left."""
    import torch

    from aura.train.objectives.grpo import GRPO

    trainer, tok = trainer_tok
    trainer.loss_type, trainer.scale_rewards, trainer.mask_truncated_completions = loss_type, "group", True
    model = trainer.model
    model.train()
    prompt_ids = [tok(PROMPTS[i // G])["input_ids"] for i in range(2 * G)]
    completion_ids = []
    for i, text in enumerate(COMPLETIONS):  # every third cut at C_MAX tokens without EOS, the others ended
        ids = tok(text * 4 if i % 3 == 2 else text, add_special_tokens=False)["input_ids"]
        completion_ids.append(ids[:C_MAX] if i % 3 == 2 else ids[: C_MAX - 1] + [tok.eos_token_id])
    texts = tok.batch_decode(completion_ids, skip_special_tokens=True)
    trainer._generate = lambda prompts: (prompt_ids, completion_ids, None, texts, None, {}, None, None)
    try:
        out = trainer._generate_and_score_completions([{"prompt": PROMPTS[i // G]} for i in range(2 * G)])
        model.zero_grad()
        trainer.current_gradient_accumulation_steps = 1
        trl_loss = trainer._compute_loss(model, out)
    finally:
        trainer.mask_truncated_completions = False
    trl_loss.backward()
    trl_grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}

    source = _dapo_source(model, tok, mask_truncated=True)
    rows = [i // G for i in range(2 * G)]
    advantages, stats, fate = source._advantages(source._score(rows, completion_ids), completion_ids)
    assert advantages == pytest.approx(out["advantages"].tolist(), abs=1e-4)  # the cut ones count here
    assert fate == [1 if i % 3 == 2 else 0 for i in range(2 * G)] and stats[-1] == pytest.approx(2 / 8)
    batch = source._collate(rows, completion_ids, advantages, fate)
    assert torch.equal(batch["completion_mask"], out["completion_mask"])
    batch["ref_logps"] = source._reference_logps(batch)
    objective = GRPO(
        loss_type=loss_type, epsilon=0.2, epsilon_high=0.28, beta=0.04, temperature=0.7, max_completion_length=C_MAX
    )
    model.zero_grad()
    total, _ = objective.loss(model, batch)
    loss = total / objective.count(batch)
    loss.backward()
    assert loss.item() == pytest.approx(trl_loss.item(), abs=1e-4)
    for name, grad in trl_grads.items():
        torch.testing.assert_close(dict(model.named_parameters())[name].grad, grad, atol=1e-4, rtol=0)


@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dr_grpo", "dapo"])
def test_a_dropped_group_is_as_if_it_had_never_been_sampled(trainer_tok, loss_type):
    """DAPO's dynamic sampling: a group whose rewards are all equal (here: its G completions are the same) is
    dropped from the loss and from its normalisation, so the window's loss and gradients are those of the
    same window without that group (TRL has no such option; this is DAPO's definition)."""
    import torch

    from aura.train.objectives.grpo import GRPO
    from aura.train.objectives.rollout import RolloutSource

    trainer, tok = trainer_tok
    model = trainer.model
    model.train()
    _, completion_ids = _fixed(tok)
    completion_ids = completion_ids[:G] + [completion_ids[G]] * G  # the second group: one answer, G times

    def source(dynamic: str) -> RolloutSource:
        return _dapo_source(model, tok, dynamic_sampling=dynamic)

    objective = GRPO(
        loss_type=loss_type, epsilon=0.2, epsilon_high=0.28, beta=0.04, temperature=0.7, max_completion_length=C_MAX
    )

    def loss_and_grads(src: RolloutSource, rows: list[int], completions: list[list[int]]):
        advantages, stats, fate = src._advantages(src._score(rows, completions), completions)
        batch = src._collate(rows, completions, advantages, fate)
        batch["ref_logps"] = src._reference_logps(batch)
        batch["old_logps"] = batch["ref_logps"] + 0.2  # ratios off 1: the clipped terms act too
        model.zero_grad()
        total, _ = objective.loss(model, batch)
        loss = total / max(objective.count(batch), 1)
        loss.backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}
        return loss.item(), grads, stats, fate

    dropped = source("drop")
    loss, grads, stats, fate = loss_and_grads(dropped, [i // G for i in range(2 * G)], completion_ids)
    assert fate == [0] * G + [2] * G and dropped.groups_dropped == 1
    alone_loss, alone_grads, _, _ = loss_and_grads(source("off"), [0] * G, completion_ids[:G])
    assert loss == pytest.approx(alone_loss, abs=1e-5)
    for name, grad in alone_grads.items():
        torch.testing.assert_close(grads[name], grad, atol=1e-5, rtol=0)
    _, kept, _, _ = loss_and_grads(source("off"), [i // G for i in range(2 * G)], completion_ids)
    differ = sum((kept[n] - g).norm() ** 2 for n, g in alone_grads.items()) ** 0.5
    differ = differ / sum(g.norm() ** 2 for g in alone_grads.values()) ** 0.5
    assert differ > 0.05  # without dropping, the silent group weighs in (its tokens or rows, its KL)
