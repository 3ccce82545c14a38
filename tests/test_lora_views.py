"""The LoRA views GRPO's rollouts and reference pass use (aura.train.lora_views), against peft itself, and the
sampler's shared prefill of repeated prompts: the merged view samples the very tokens the unmerged peft model
samples (same keys) and leaves every weight bit for bit as it was; the base view gives exactly peft's
``disable_adapter()`` logits; models the views do not cover are refused (peft's own path is kept)."""

from __future__ import annotations

import pytest

from tests.evidence import importorskip

torch = pytest.importorskip("torch")


def _peft(path, *, seed: int = 0, **config):
    """A peft LoRA model of ``path`` with random (non-zero) LoRA B matrices, in eval mode."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from aura.train.adapters import resolve_target_modules

    base = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    conv1d = base.config.model_type == "gpt2"
    config = {
        "r": 8,
        "lora_alpha": 16,
        "lora_dropout": 0.0,
        "fan_in_fan_out": conv1d,
        "target_modules": resolve_target_modules(base, None),
        **config,
    }
    model = get_peft_model(base, LoraConfig(task_type="CAUSAL_LM", **config))
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0.0, 0.05, generator=g)
    return model.eval()


def _prompts(tok_dir) -> list[list[int]]:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tok_dir)
    texts = ("¿Cuánto es 3 más 4?", "El perro", "Había una vez en un lugar de la Mancha")
    return [tok(t)["input_ids"] for t in texts]


@pytest.mark.parametrize("arch", ["llama", "gpt2"])  # GPT-2: Conv1D weights, stored transposed
def test_merged_view_samples_the_unmerged_tokens_and_restores_every_weight(tiny_zoo, arch):
    from aura.inference.sampling import SamplingParams, sample_batch
    from aura.train.lora_views import base_view, merged_view

    model = _peft(tiny_zoo[arch])
    cpu = torch.device("cpu")
    before = {k: v.clone() for k, v in model.state_dict().items()}
    params_before = dict(model.named_parameters())
    prompts = _prompts(tiny_zoo["tokenizer"]) * 2
    keys = [5, 6, 7, 8, 9, 10]
    sampling = SamplingParams(max_new_tokens=16, temperature=1.0, top_k=50, top_p=0.95)
    unmerged = sample_batch(model, prompts, sampling, pad_id=0, device=cpu, keys=keys)
    view, wrapped = merged_view(model, precision="fp32", device=cpu), _first_lora(model)
    assert view is not None
    with view:
        from peft.tuners.lora import LoraLayer

        assert not isinstance(model.get_submodule(wrapped), LoraLayer)  # the wrapper is out of the way
        merged = sample_batch(model, prompts, sampling, pad_id=0, device=cpu, keys=keys)
    assert merged == unmerged
    ids = torch.tensor([prompts[2][:6], prompts[0][:6]])
    with torch.no_grad():
        lora = model(input_ids=ids).logits
        with merged_view(model, precision="fp32", device=cpu):
            fused = model(input_ids=ids).logits
        with model.disable_adapter():
            plain = model(input_ids=ids).logits
        with base_view(model):
            bare = model(input_ids=ids).logits
    assert (lora - plain).abs().max() > 1e-2  # the adapter matters, and the merged view keeps it
    torch.testing.assert_close(fused, lora, rtol=0, atol=1e-4)
    assert torch.equal(bare, plain)  # the base view is peft's disabled adapter, bit for bit
    after = model.state_dict()
    assert set(after) == set(before) and all(torch.equal(before[k], after[k]) for k in before)
    assert all(p is params_before[n] for n, p in model.named_parameters())  # the same Parameter objects


def _first_lora(model) -> str:
    from peft.tuners.lora import LoraLayer

    return next(name for name, m in model.named_modules() if isinstance(m, LoraLayer))


def test_a_failing_forward_inside_a_view_still_restores_the_model(tiny_zoo):
    from aura.train.lora_views import merged_view

    model = _peft(tiny_zoo["llama"])
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(IndexError), merged_view(model, precision="fp32", device=torch.device("cpu")):
        model(input_ids=torch.tensor([[10**6]]))  # an id beyond the vocabulary
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    from peft.tuners.lora import LoraLayer

    assert isinstance(model.get_submodule(_first_lora(model)), LoraLayer)


def test_views_refuse_what_they_do_not_cover(tiny_zoo):
    from transformers import AutoModelForCausalLM

    from aura.train.lora_views import base_view, merged_view

    cpu = torch.device("cpu")
    model = _peft(tiny_zoo["llama"])
    # 16-bit compute would round the adapter's small update away in W + dW; the GPU would hold a second copy
    assert merged_view(model, precision="bf16", device=cpu) is None
    assert merged_view(model, precision="fp32", device=torch.device("cuda")) is None
    dora = _peft(tiny_zoo["llama"], use_dora=True)  # a LoRA variant: the plain delta is not its merge
    assert merged_view(dora, precision="fp32", device=cpu) is None and base_view(dora) is not None
    saved = _peft(tiny_zoo["llama"], modules_to_save=["lm_head"])  # peft swaps these itself
    assert merged_view(saved, precision="fp32", device=cpu) is None and base_view(saved) is None
    plain = AutoModelForCausalLM.from_pretrained(tiny_zoo["llama"])
    assert merged_view(plain, precision="fp32", device=cpu) is None and base_view(plain) is None
    model.merge_adapter()  # already merged by peft: leave it alone
    assert merged_view(model, precision="fp32", device=cpu) is None and base_view(model) is None


def test_repeated_prompts_are_prefilled_once_and_sample_as_alone(tiny_zoo):
    from transformers import AutoModelForCausalLM

    from aura.inference.sampling import SamplingParams, sample_batch

    model = AutoModelForCausalLM.from_pretrained(tiny_zoo["llama"]).eval()
    p = _prompts(tiny_zoo["tokenizer"])
    prompts = [p[0], p[0], p[2], p[0], p[2]]  # a GRPO window: groups of repeated prompts
    keys = [1, 2, 3, 4, 5]
    seen: list[int] = []
    hook = model.register_forward_pre_hook(lambda _m, _a, kw: seen.append(kw["input_ids"].shape), with_kwargs=True)
    sampling = SamplingParams(max_new_tokens=8, temperature=1.0)
    got = sample_batch(model, prompts, sampling, pad_id=0, device=torch.device("cpu"), keys=keys)
    hook.remove()
    assert seen[0] == (2, max(map(len, prompts)))  # the prefill ran the two distinct prompts only
    assert all(s[0] == 5 for s in seen[1:])  # then every row decodes from its own copy of the cache
    for prompt, key, completion in zip(prompts, keys, got):
        assert sample_batch(model, [prompt], sampling, pad_id=0, device=torch.device("cpu"), keys=[key]) == [completion]


def test_qlora_keeps_the_unmerged_rollouts_and_an_exact_wrapper_free_reference(tiny_zoo):
    importorskip("bitsandbytes", "bitsandbytes")
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig

    from aura.train.lora_views import base_view, merged_view

    q = BitsAndBytesConfig(
        load_in_4bit=True,
        bnb_4bit_quant_type="nf4",
        bnb_4bit_use_double_quant=True,
        bnb_4bit_compute_dtype=torch.float32,
    )
    base = AutoModelForCausalLM.from_pretrained(tiny_zoo["llama"], quantization_config=q, device_map={"": "cpu"})
    model = get_peft_model(
        base,
        LoraConfig(
            r=8,
            lora_alpha=16,
            lora_dropout=0.0,
            task_type="CAUSAL_LM",
            target_modules=["q_proj", "v_proj", "down_proj"],
        ),
    ).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0.0, 0.05)
    # 4-bit weights: W + dW cannot be stored exactly, so rollouts keep peft's unmerged 4-bit path
    assert merged_view(model, precision="fp32", device=torch.device("cpu")) is None
    ids = torch.tensor([[5, 17, 42, 99, 7, 3]])
    with torch.no_grad():
        with model.disable_adapter():
            plain = model(input_ids=ids).logits
        with base_view(model):
            bare = model(input_ids=ids).logits
        adapted = model(input_ids=ids).logits
    assert torch.equal(bare, plain) and (adapted - plain).abs().max() > 1e-3


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_merged_weights_for_an_engine_copy_are_peft_merge_and_unload_by_name(tiny_zoo, arch):
    import copy

    from aura.train.lora_views import merged_weights

    model = _peft(tiny_zoo[arch])
    before = {k: v.clone() for k, v in model.state_dict().items()}
    reference = copy.deepcopy(model).merge_and_unload()  # peft writes the merge into its copy's weights
    expected = dict(reference.named_parameters())
    got = dict(merged_weights(model))
    assert set(got) == set(expected)  # the base model's own names, no adapter tensors
    for name, tensor in got.items():
        assert torch.equal(tensor, expected[name]), name
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())  # the policy is untouched
    from transformers import AutoModelForCausalLM

    plain = AutoModelForCausalLM.from_pretrained(tiny_zoo[arch])
    assert sum(not torch.equal(t, plain.get_parameter(n)) for n, t in got.items()) > 0  # the adapted ones
    assert merged_weights(plain) is None


def test_dpo_and_kto_reference_passes_are_peft_disabled_adapter_bit_for_bit_without_its_switch(tiny_zoo, monkeypatch):
    """DPO's and KTO's reference log-probs, taken in training mode with LoRA dropout on, equal peft's
    ``disable_adapter()`` bit for bit, through ``adapters_off`` (the base view: peft's switch is not called);
    a model the base view does not cover (``modules_to_save``) still gets peft's switch."""
    from peft import PeftModel

    from aura.data.preference import EncodedPair, collate_pairs
    from aura.data.sft_batches import Encoded
    from aura.train.objectives.kto import KTO
    from aura.train.objectives.preference import DPO, sequence_logps

    g = torch.Generator().manual_seed(0)

    def part(n: int) -> list[int]:
        return torch.randint(3, 200, (n,), generator=g).tolist()

    pairs = []
    for n in (7, 4):
        prompt, a, b = part(n), part(5), part(n - 1)
        pairs.append(EncodedPair(Encoded(prompt + a, [-100] * n + a), Encoded(prompt + b, [-100] * n + b)))
    batch = collate_pairs(pairs, pad_id=0, shared=True)
    for saved in ([], ["lm_head"]):
        model = _peft(tiny_zoo["llama"], lora_dropout=0.3, modules_to_save=saved or None).train()
        with torch.no_grad(), model.disable_adapter():
            want = sequence_logps(model, batch)[0]
        switched = []
        original = PeftModel.disable_adapter

        def spy(self, *a, _switched=switched, _original=original, **k):
            _switched.append(1)
            return _original(self, *a, **k)

        monkeypatch.setattr(PeftModel, "disable_adapter", spy)
        got = DPO().reference_logps(model, batch)
        # KTO's reference pass over the same rows (its shared-prompt view: an answer and a mismatched one)
        kto = KTO().reference_logps(model, {f"ref_pair_{k}": v for k, v in batch.items()})
        monkeypatch.setattr(PeftModel, "disable_adapter", original)
        assert torch.equal(got, want) and torch.equal(torch.cat(kto), want)
        assert len(switched) == (2 if saved else 0)  # peft's switch only where the base view refuses
