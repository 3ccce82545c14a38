"""GRPO's log-probabilities with each distinct prompt run once (``grpo._shared_prompt_logits``) equal the
whole rows' (one forward over prompt + completion): log-probs, entropy and the LoRA gradients of the GRPO
loss, with two prompts of different lengths (left padding), completions of different lengths (right
padding, one empty) and a one-token completion window; on Llama (RoPE, grouped KV heads) and GPT-2
(learned positions), in training mode and without gradients (the reference pass)."""

from __future__ import annotations

import pytest
import torch

from aura.train.objectives.grpo import GRPO, _can_share_prompts, completion_logps
from aura.train.objectives.rollout import collate
from tests.tiny_models import build_gpt2, build_llama, train_tokenizer

G = 3


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("shared_prompt")
    tok = train_tokenizer(root / "tok", vocab_size=300)
    return {"llama": build_llama(root / "llama", tok), "gpt2": build_gpt2(root / "gpt2", tok)}


def _lora(path):
    from aura.train import adapters

    model = adapters.setup_model(
        adapters.load_base_model(str(path)), method="lora", lora_r=4, lora_alpha=8, lora_dropout=0.0
    )
    gen = torch.Generator().manual_seed(0)
    for name, p in model.named_parameters():
        if "lora_B" in name:  # B starts at zero: give the adapter an effect
            p.data = torch.randn(p.shape, generator=gen) * 0.1
    for m in model.modules():  # GPT-2's dropout would draw different masks in the two passes
        if isinstance(m, torch.nn.Dropout):
            m.p = 0.0
    return model


def _batch(completion_lengths):
    gen = torch.Generator().manual_seed(1)
    prompts = [[5, 9, 14, 3, 22], [7, 8, 30, 31, 40, 41, 42, 12]]
    rows = [prompts[i // G] for i in range(2 * G)]
    completions = [torch.randint(3, 200, (n,), generator=gen).tolist() for n in completion_lengths]
    batch = collate(rows, completions, [0.5, -1.0, 0.25, 1.0, -0.5, 0.0], pad_id=0)
    whole = {k: v for k, v in batch.items() if k not in ("prompt_rows", "prompt_of_row")}
    return batch, whole


def _loss_and_grads(model, batch):
    model.zero_grad()
    objective = GRPO(loss_type="dapo", beta=0.0)
    loss, stats = objective.loss(model, batch)
    loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return loss.detach(), stats["entropy"].detach(), grads


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
@pytest.mark.parametrize("lengths", [(4, 7, 2, 7, 0, 5), (1, 1, 1, 1, 1, 1)])
def test_shared_prompt_pass_equals_whole_rows(models, arch, lengths):
    model = _lora(models[arch])
    batch, whole = _batch(lengths)
    assert batch["prompt_rows"].tolist() == [0, G] and batch["prompt_of_row"].tolist() == [0] * G + [1] * G
    model.train()
    assert _can_share_prompts(model, batch) and not _can_share_prompts(model, whole)
    loss_s, ent_s, grads_s = _loss_and_grads(model, batch)
    loss_w, ent_w, grads_w = _loss_and_grads(model, whole)
    torch.testing.assert_close(loss_s, loss_w, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(ent_s, ent_w, rtol=1e-5, atol=1e-6)
    assert grads_s.keys() == grads_w.keys() and any("lora_A" in n for n in grads_s)
    for name in grads_w:  # float rounding of a different summation order, relative to the gradient's scale
        scale = grads_w[name].abs().max().item()
        assert scale > 0, name
        torch.testing.assert_close(grads_s[name], grads_w[name], rtol=0, atol=1e-5 * scale, msg=name)
    model.eval()
    with torch.no_grad():  # the reference pass
        shared, _ = completion_logps(model, batch, temperature=0.7)
        plain, _ = completion_logps(model, whole, temperature=0.7)
    mask = batch["completion_mask"].bool()
    torch.testing.assert_close(shared[mask], plain[mask], rtol=1e-5, atol=1e-5)


def test_activation_checkpointing_keeps_whole_rows(models):
    """Checkpointed layers drop the KV cache while gradients flow: the whole-row pass is used then."""
    model = _lora(models["llama"])
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    batch, _ = _batch((4, 7, 2, 7, 3, 5))
    model.train()
    assert not _can_share_prompts(model, batch)
    with torch.no_grad():
        assert _can_share_prompts(model, batch)
