"""The lean one-token step (aura.inference.lean) against transformers' own forward: for Llama (with and without
biases), Mistral, Qwen2 (q/k/v biases) and Qwen3 (per-head q/k norms), reading the filled columns or every column
(the CUDA-graph shape), its next-token logits over ragged left-padded prompts equal those of the model's forward
over the whole sequence; what it does not cover is refused and runs through
the model's forward; GRPO's merged fp32 policy samples through it the tokens transformers' ``generate`` gives."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

CPU = torch.device("cpu")
VOCAB = 96


def _model(arch: str, **extra):
    import transformers

    names = {"llama": "Llama", "mistral": "Mistral", "qwen2": "Qwen2", "qwen3": "Qwen3", "gemma2": "Gemma2"}
    kw = dict(
        vocab_size=VOCAB,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=96,
        max_position_embeddings=128,
        initializer_range=0.2,
        pad_token_id=0,
    )
    kw.update(extra)
    torch.manual_seed(0)
    model = getattr(transformers, f"{names[arch]}ForCausalLM")(getattr(transformers, f"{names[arch]}Config")(**kw))
    with torch.no_grad():  # norms and biases away from their neutral init, so that a missed one shows
        for name, p in model.named_parameters():
            if "norm" in name or name.endswith("bias"):
                p.add_(torch.randn(p.shape) * 0.3)
    return model.eval()


ARCHS = {
    "llama": {},
    "mistral": {"sliding_window": None},
    "qwen2": {},  # q/k/v with biases
    "qwen3": {"head_dim": 16},  # per-head q/k RMSNorm
    "llama-bias": {"attention_bias": True, "mlp_bias": True},
}


class _Tok:
    pad_token_id = 0


def _count_lean_steps(monkeypatch) -> list:
    """A list that gets one item for every ``LeanStep`` built from now on (a rollout through the lean step)."""
    import aura.inference.lean as lean

    built = []
    original = lean.LeanStep.__init__

    def spy(self, *a, **k):
        built.append(1)
        original(self, *a, **k)

    monkeypatch.setattr(lean.LeanStep, "__init__", spy)
    return built


def _prompts() -> list[list[int]]:
    g = torch.Generator().manual_seed(3)
    return [torch.randint(1, VOCAB, (n,), generator=g).tolist() for n in (5, 9, 3, 9)]


@pytest.mark.parametrize("static", [False, True], ids=["filled-columns", "every-column"])
@pytest.mark.parametrize("name", list(ARCHS))
def test_lean_logits_equal_the_models_forward_over_the_whole_sequence(name, static):
    from transformers import DynamicCache

    from aura.inference.decode import cache_key
    from aura.inference.lean import LeanStep, covers

    model = _model(name.split("-")[0], **ARCHS[name])
    prompts, new = _prompts(), 6
    n, width = len(prompts), max(map(len, prompts))
    total = width + new
    assert covers(model, total=total)
    ids = torch.zeros((n, width), dtype=torch.long)
    attn = torch.zeros((n, total), dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, width - len(p) :] = torch.tensor(p)
        attn[i, width - len(p) : width] = 1
    lengths = torch.tensor([len(p) for p in prompts])
    step = LeanStep(model)
    with torch.no_grad():
        prefill = DynamicCache()
        mask = attn[:, :width]
        logits = model(
            input_ids=ids,
            attention_mask=mask,
            position_ids=(mask.cumsum(-1) - 1).clamp(min=0),
            **{cache_key(model): prefill},
        ).logits[:, -1]
        step.prime(prefill, torch.arange(n), width=width, total=total)
        seq = ids
        for s in range(new):
            tok = logits.argmax(-1)
            seq = torch.cat([seq, tok[:, None]], dim=1)
            column = width + s
            attn[:, column] = 1
            logits = step(tok, lengths + s, attn, torch.tensor([column]), upto=None if static else column + 1)  # (N, V)
            whole = attn[:, : column + 1]
            want = model(input_ids=seq, attention_mask=whole, position_ids=(whole.cumsum(-1) - 1).clamp(min=0)).logits[
                :, -1
            ]
            torch.testing.assert_close(logits, want, atol=2e-5, rtol=1e-5)
    assert len(set(seq[:, width:].flatten().tolist())) > 3  # the model says different things: not a degenerate check


def test_what_the_lean_step_does_not_cover_runs_through_the_models_forward():
    import transformers
    from peft import LoraConfig, get_peft_model

    from aura.inference.decode import decode_batch
    from aura.inference.lean import covers, lean_step
    from aura.inference.sampling import SamplingParams

    assert not covers(_model("gemma2", head_dim=16, query_pre_attn_scalar=16))
    gpt2 = transformers.GPT2LMHeadModel(transformers.GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=1, n_head=2))
    assert not covers(gpt2)
    windowed = _model("mistral", sliding_window=8)
    assert covers(windowed, total=8) and not covers(windowed, total=9)  # a window narrower than the rollout
    llama = _model("llama")
    peft = get_peft_model(llama, LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    assert not covers(peft.get_base_model())  # peft's wrappers: the views of aura.train.lora_views come first
    plain = _model("llama")
    with torch.autocast("cpu", dtype=torch.bfloat16):  # a full fine-tuning's rollouts in bf16 autocast
        assert not covers(plain)
        out = decode_batch(plain, _prompts(), SamplingParams(max_new_tokens=4, temperature=0), pad_id=0, device=CPU)
        assert all(len(o) == 4 for o in out)
    assert covers(plain)
    mixed = _model("llama")
    mixed.model.norm.to(torch.bfloat16)
    assert not covers(mixed)  # weights of two dtypes
    seen = []
    hook = plain.model.layers[0].register_forward_hook(lambda *_: seen.append(1))
    assert lean_step(plain, total=20) is None  # a hook (accelerate's offloading, FSDP2) must run: not bypassed
    out = decode_batch(plain, _prompts(), SamplingParams(max_new_tokens=4, temperature=0), pad_id=0, device=CPU)
    hook.remove()
    assert len(seen) == 1 + 3 and all(len(o) == 4 for o in out)  # the prefill, then the model's forward per step
    assert lean_step(plain, total=20) is not None


def test_grpo_samples_from_the_merged_policy_through_the_lean_step_what_generate_gives(monkeypatch):
    """GRPO's fp32 CPU rollout (``sample_completions``: the merged view, then the lean step over its plain layers)
    draws greedy tokens equal to ``generate`` on the policy merged for good."""
    import copy

    from peft import LoraConfig, get_peft_model

    from aura.inference.sampling import SamplingParams
    from aura.train.objectives.rollout import sample_completions

    policy = get_peft_model(_model("qwen2"), LoraConfig(r=4, lora_alpha=8, target_modules="all-linear"))
    with torch.no_grad():
        for name, p in policy.named_parameters():
            if "lora_B" in name:
                p.normal_(0.0, 0.3)
    merged = copy.deepcopy(policy).merge_and_unload().eval()

    built = _count_lean_steps(monkeypatch)
    prompts = _prompts()
    got = sample_completions(
        policy,
        prompts,
        list(range(len(prompts))),
        sampling=SamplingParams(max_new_tokens=8, temperature=0),
        tokenizer=_Tok(),
        precision="fp32",
        device=CPU,
    )
    assert built == [1]  # the rollout ran through one lean step
    for p, g in zip(prompts, got):
        ids = torch.tensor([p])
        want = merged.generate(
            input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=8, do_sample=False, eos_token_id=None
        )[0, len(p) :]
        assert g == want.tolist()


def test_a_fully_fine_tuned_bf16_policy_samples_through_the_lean_step_from_a_bf16_copy(monkeypatch):
    """GRPO's rollouts of a full fine-tuning in bf16 (fp32 weights, autocast, as ``_generate`` runs them): the
    policy is cast to bf16 for the call (``cast_view``), autocast is off, the lean step runs, and the draws are
    those of the same model held in bf16, with the sampler's log-probs (GRPO's importance-sampling correction);
    the fp32 weights are left as they were."""
    import copy

    from aura.inference.decode import decode_batch
    from aura.inference.sampling import SamplingParams
    from aura.train.objectives.rollout import sample_completions

    policy = _model("qwen2")
    before = {k: v.clone() for k, v in policy.state_dict().items()}
    twin = copy.deepcopy(policy)
    for param in twin.parameters():  # the weights in bf16, the rotary's buffer left in fp32 as a bf16 checkpoint has it
        param.data = param.data.to(torch.bfloat16)

    built = _count_lean_steps(monkeypatch)
    prompts, keys = _prompts(), [11, 12, 13, 14]
    params = SamplingParams(max_new_tokens=8, temperature=1.0)
    with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
        got, logps = sample_completions(
            policy, prompts, keys, sampling=params, tokenizer=_Tok(), precision="bf16", device=CPU
        )
    assert built == [1]  # one rollout, one lean step (autocast's path builds none)
    assert got == decode_batch(twin, prompts, params, pad_id=0, device=CPU, keys=keys)
    for p, c, lp in zip(prompts, got, logps):
        with torch.no_grad():
            logits = twin(input_ids=torch.tensor([p + c])).logits[0, len(p) - 1 : -1].float()
        want = logits.log_softmax(-1).gather(1, torch.tensor(c)[:, None]).squeeze(1)
        assert (torch.tensor(lp) - want).abs().max() < 0.1  # bf16's rounding, not another model
    after = policy.state_dict()
    assert all(after[k].dtype == torch.float32 and torch.equal(before[k], after[k]) for k in before)
