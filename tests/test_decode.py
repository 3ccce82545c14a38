"""Aura's fixed-shape generation engine (aura.inference.decode) against transformers' ``generate`` and against the
engine it replaced (``sample_batch_reference``): greedy tokens equal to ``generate``'s for Llama, Qwen2, Qwen3,
Gemma 2 (a sliding window the completions cross) and GPT-2, plain and with a LoRA adapter, ragged prompts in one
batch; keyed samples equal to the previous engine's, stop ids and stop strings included; the sampler's
log-probs equal the model's own; the compute-dtype merged view GRPO samples from off fp32/CPU."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

ARCHS = ("llama", "qwen2", "qwen3", "gemma2", "gpt2")
CPU = torch.device("cpu")


def _model(arch: str, vocab: int, *, pad: int, eos: int, layers: int = 2):
    """A random tiny ``arch`` (weights wide enough that the greedy token is never a near tie)."""
    import transformers

    common = dict(vocab_size=vocab, pad_token_id=pad, eos_token_id=eos, bos_token_id=eos, initializer_range=0.2)
    if arch == "gpt2":
        cfg = transformers.GPT2Config(n_embd=64, n_layer=layers, n_head=4, n_positions=128, **common)
        cls = transformers.GPT2LMHeadModel
    else:
        names = {"llama": "Llama", "qwen2": "Qwen2", "qwen3": "Qwen3", "gemma2": "Gemma2"}
        kw = dict(
            hidden_size=64,
            num_hidden_layers=layers,
            num_attention_heads=4,
            num_key_value_heads=2,
            intermediate_size=128,
            max_position_embeddings=128,
            **common,
        )
        if arch == "gemma2":  # a window shorter than prompt + completion: the static cache's sliding layers work
            kw.update(head_dim=16, query_pre_attn_scalar=16, sliding_window=8)
        cfg = getattr(transformers, f"{names[arch]}Config")(**kw)
        cls = getattr(transformers, f"{names[arch]}ForCausalLM")
    torch.manual_seed(0)
    return cls(cfg).eval()


def _lora(model, *, seed: int = 0):
    from peft import LoraConfig, get_peft_model

    from aura.train.adapters import resolve_target_modules

    conv1d = model.config.model_type == "gpt2"
    peft = get_peft_model(
        model,
        LoraConfig(
            task_type="CAUSAL_LM",
            r=8,
            lora_alpha=16,
            lora_dropout=0.0,
            fan_in_fan_out=conv1d,
            target_modules=resolve_target_modules(model, None),
        ),
    )
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in peft.named_parameters():
            if "lora_B" in name:
                p.normal_(0.0, 0.3, generator=g)
    return peft.eval()


@pytest.fixture(scope="module")
def tok(tiny_zoo):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_zoo["tokenizer"])


def _prompts(tok) -> list[list[int]]:
    texts = ("Hola, ¿qué tal?", "El perro", "Había una vez en un lugar de la Mancha", "El perro")
    return [tok(t)["input_ids"] for t in texts]


@pytest.mark.parametrize("lora", [False, True], ids=["plain", "lora"])
@pytest.mark.parametrize("arch", ARCHS)
def test_greedy_tokens_equal_transformers_generate_with_ragged_prompts(tok, arch, lora):
    from aura.inference.decode import decode_batch
    from aura.inference.sampling import SamplingParams

    model = _model(arch, len(tok), pad=tok.pad_token_id, eos=tok.eos_token_id)
    if lora:
        model = _lora(model)
    prompts = _prompts(tok)
    params = SamplingParams(max_new_tokens=12, temperature=0)
    got = decode_batch(model, prompts, params, pad_id=tok.pad_token_id, device=CPU, check_every=4)
    refs: dict[tuple[int, ...], list[int]] = {}
    for p, g in zip(prompts, got):  # each prompt alone, no padding: transformers' own loop and cache
        if tuple(p) not in refs:
            ids = torch.tensor([p])
            refs[tuple(p)] = model.generate(
                input_ids=ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=12,
                do_sample=False,
                pad_token_id=tok.pad_token_id,
                eos_token_id=None,
            )[0, len(p) :].tolist()
        assert g == refs[tuple(p)]
    assert len({tuple(g) for g in got}) > 1  # not a degenerate model that says the same thing to everyone


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_keyed_samples_and_stops_equal_the_previous_engine(tok, arch):
    from aura.inference.decode import decode_batch
    from aura.inference.sampling import SamplingParams, sample_batch_reference

    model = _model(arch, len(tok), pad=tok.pad_token_id, eos=tok.eos_token_id)
    prompts = [p for p in _prompts(tok)[:3] for _ in range(2)]  # G = 2 rows per prompt, prefilled once
    keys = [1000 + 17 * i for i in range(len(prompts))]
    free = SamplingParams(max_new_tokens=20, temperature=1.0, top_k=40, top_p=0.9)
    drawn = sample_batch_reference(model, prompts, free, pad_id=tok.pad_token_id, device=CPU, keys=keys)
    # the model's frequent tokens as stops, so that rows finish at different steps while the others go on
    counts: dict[int, int] = {}
    for c in drawn:
        for t in c:
            counts[t] = counts.get(t, 0) + 1
    frequent = sorted(counts, key=counts.get, reverse=True)
    text = tok.decode([frequent[1]]).strip() or "a"
    cases = [
        free,
        SamplingParams(max_new_tokens=20, temperature=0.8, stop_ids=(frequent[0], tok.eos_token_id)),
        SamplingParams(max_new_tokens=16, temperature=1.0, stop_strings=(text[-1], "la")),
    ]
    refs = []
    for params in cases:
        ref = (
            drawn
            if params is free
            else sample_batch_reference(
                model, prompts, params, pad_id=tok.pad_token_id, device=CPU, tokenizer=tok, keys=keys
            )
        )
        for every in (1, 5) if params.stop_ids or params.stop_strings else (8,):
            got = decode_batch(
                model, prompts, params, pad_id=tok.pad_token_id, device=CPU, tokenizer=tok, keys=keys, check_every=every
            )
            assert got == ref, (params, every)
        refs.append(ref)
        if params.stop_ids or params.stop_strings:  # rows ended at different steps; the others went on
            assert len({len(c) for c in ref}) > 1
        if params.stop_ids:
            assert any(c and c[-1] in params.stop_ids for c in ref)  # the stop id is the completion's last token
        if params.stop_strings:
            for c in ref:
                assert not any(s in tok.decode(c[:-1]) for s in params.stop_strings)
    # a row alone gives what it gave in the batch
    alone = decode_batch(model, prompts[4:5], cases[1], pad_id=tok.pad_token_id, device=CPU, keys=keys[4:5])
    assert alone[0] == refs[1][4]


def test_sampler_logps_are_the_models_own(tok):
    from aura.inference.decode import decode_batch
    from aura.inference.sampling import SamplingParams

    model = _model("qwen2", len(tok), pad=tok.pad_token_id, eos=tok.eos_token_id)
    prompts = _prompts(tok)
    params = SamplingParams(max_new_tokens=10, temperature=0.7, top_k=20)
    completions, logps = decode_batch(
        model, prompts, params, pad_id=tok.pad_token_id, device=CPU, keys=[3, 4, 5, 6], logps=True
    )
    for p, c, lp in zip(prompts, completions, logps):
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([p + c])).logits[0, len(p) - 1 : -1].float() / 0.7
        want = logits.log_softmax(-1).gather(1, torch.tensor(c)[:, None]).squeeze(1)
        torch.testing.assert_close(torch.tensor(lp), want, rtol=0, atol=1e-4)


def test_compute_view_merges_in_the_compute_dtype_and_restores_the_policy(tok):
    from peft.tuners.lora import LoraLayer

    from aura.inference.decode import decode_batch
    from aura.inference.sampling import SamplingParams
    from aura.train.lora_views import compute_view

    model = _lora(_model("llama", len(tok), pad=tok.pad_token_id, eos=tok.eos_token_id))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    prompts = _prompts(tok)
    params = SamplingParams(max_new_tokens=12, temperature=1.0)
    keys = [7, 8, 9, 10]
    unmerged = decode_batch(model, prompts, params, pad_id=tok.pad_token_id, device=CPU, keys=keys)
    ids = torch.tensor([prompts[2]])
    with torch.no_grad():
        want = model(input_ids=ids).logits
        with compute_view(model, dtype=torch.float32):  # fp32: the unmerged tokens, up to fp32 rounding
            assert decode_batch(model, prompts, params, pad_id=tok.pad_token_id, device=CPU, keys=keys) == unmerged
        with compute_view(model, dtype=torch.bfloat16):
            assert not any(isinstance(m, LoraLayer) for m in model.modules())
            assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
            got = model(input_ids=ids).logits.float()
            _, logps = decode_batch(model, prompts, params, pad_id=tok.pad_token_id, device=CPU, keys=keys, logps=True)
    assert (got - want).abs().max() < 0.05 * want.abs().max()  # bf16's rounding, not another model
    assert all(len(lp) > 0 for lp in logps)
    after = model.state_dict()
    assert before.keys() == after.keys() and all(torch.equal(before[k], after[k]) for k in before)
    assert any(isinstance(m, LoraLayer) for m in model.modules())


def test_sample_batch_keeps_one_batch_shape_and_a_preallocated_cache(tok):
    """Rows that finish early keep their slot: every one-token step sees the same (N, 1) ids, the same
    (N, W + max_new) mask and the same StaticCache (the previous engine grew the mask and the cache by
    concatenation and dropped finished rows)."""
    from transformers import StaticCache

    from aura.inference.sampling import SamplingParams, sample_batch

    model = _model("llama", len(tok), pad=tok.pad_token_id, eos=tok.eos_token_id)
    prompts = [p for p in _prompts(tok)[:3] for _ in range(4)]
    keys = list(range(len(prompts)))
    free = SamplingParams(max_new_tokens=16, temperature=1.0)
    first = [c[2] for c in sample_batch(model, prompts, free, pad_id=tok.pad_token_id, device=CPU, keys=keys)]
    params = SamplingParams(max_new_tokens=16, temperature=1.0, stop_ids=(max(set(first), key=first.count),))
    seen = []
    hook = model.register_forward_pre_hook(
        lambda _m, args, kwargs: seen.append(
            (
                tuple(kwargs["input_ids"].shape),
                tuple(kwargs["attention_mask"].shape),
                kwargs.get("cache", kwargs.get("past_key_values")),
            )
        ),
        with_kwargs=True,
    )
    out = sample_batch(model, prompts, params, pad_id=tok.pad_token_id, device=CPU, keys=keys)
    hook.remove()
    assert min(map(len, out)) == 3 and max(map(len, out)) > 3  # some rows stopped at step 3, others went on
    steps = seen[1:]  # after the prefill
    assert len({(ids, mask) for ids, mask, _ in steps}) == 1
    assert steps[0][0] == (len(prompts), 1) and steps[0][1][1] == max(map(len, prompts)) + 16
    assert len({id(c) for _, _, c in steps}) == 1 and isinstance(steps[0][2], StaticCache)
