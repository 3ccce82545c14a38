"""Parity with TRL's GKDTrainer: Aura's generalised JSD equals ``GKDTrainer.generalized_jsd_loss`` for beta 0
(forward KL), 0.5 and 1 (reverse KL) at several temperatures, and one off-policy step (``lmbda`` 0: the
data's answers) gives ``GKDTrainer.compute_loss``'s loss and gradients on the same batch (CPU, fp32, a
tiny Llama student, whole or with LoRA, and a deeper teacher with the same tokenizer; Aura's side with the
teacher's and a LoRA student's frozen layers packed for oneDNN). Aura's objective runs only the answer
positions through the output heads (``logits_to_keep``); TRL runs them all: equal up to float rounding."""

from __future__ import annotations

import pytest
import torch

from tests.tiny_models import build_llama, train_tokenizer

trl = pytest.importorskip("trl")

CONVERSATIONS = [
    ("¿Cuál es la capital de España?", "Madrid es la capital."),
    ("Di un color.", "Azul"),
    ("¿Cuánto es dos más dos?", "Son cuatro, claro que sí."),
]


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    root = tmp_path_factory.mktemp("distill_parity")
    tok = train_tokenizer(root / "tok", vocab_size=500)
    student = build_llama(root / "student", tok, hidden=64, layers=2, seed=0)
    teacher = build_llama(root / "teacher", tok, hidden=64, layers=4, seed=1)
    return {"root": root, "student": student, "teacher": teacher}


@pytest.mark.parametrize("beta", [0.0, 0.5, 1.0])
@pytest.mark.parametrize("temperature", [1.0, 0.7, 2.0])
def test_generalized_jsd_equals_trls_on_random_logits(beta, temperature):
    from trl.experimental.gkd import GKDTrainer

    from aura.train.objectives.distill import generalized_jsd

    g = torch.Generator().manual_seed(int(beta * 10 + temperature * 100))
    student, teacher = torch.randn(3, 7, 50, generator=g) * 3, torch.randn(3, 7, 50, generator=g) * 3
    labels = torch.randint(0, 50, (3, 7), generator=g)
    labels[0, :3] = labels[2, 5:] = -100
    trl_loss = GKDTrainer.generalized_jsd_loss(student, teacher, labels=labels, beta=beta, temperature=temperature)
    mask = labels != -100
    ours = generalized_jsd(student[mask], teacher[mask], beta=beta, temperature=temperature)
    assert ours.shape == (int(mask.sum()),) and (ours >= -1e-6).all()
    torch.testing.assert_close(ours.sum() / mask.sum(), trl_loss, rtol=1e-6, atol=1e-7)
    if beta == 0:  # TRL's convention checked against the definitions: 0 = KL(teacher || student)
        s, t = (x[mask].div(temperature).log_softmax(-1) for x in (student, teacher))
        torch.testing.assert_close(ours, (t.exp() * (t - s)).sum(-1), rtol=1e-5, atol=1e-6)
    if beta == 1:  # 1 = KL(student || teacher)
        s, t = (x[mask].div(temperature).log_softmax(-1) for x in (student, teacher))
        torch.testing.assert_close(ours, (s.exp() * (s - t)).sum(-1), rtol=1e-5, atol=1e-6)


def sft_batch(model_dir, conversations=CONVERSATIONS):
    """Aura's SFT batch of ``conversations`` (right-padded, answers labelled) and its tokenizer."""
    from aura.data.sft import Conversation
    from aura.data.sft_batches import collate, encode_all
    from aura.tokenizer.loading import load_tokenizer

    tok = load_tokenizer(str(model_dir))
    convs = [
        Conversation(messages=[{"role": "user", "content": p}, {"role": "assistant", "content": a}], where=str(i))
        for i, (p, a) in enumerate(conversations)
    ]
    examples = encode_all(convs, tok, max_length=128, truncation="drop", train_on_prompt=False)
    return collate([[e] for e in examples], pad_id=tok.pad_token_id), tok


@pytest.mark.parametrize(("beta", "lora"), [(0.0, False), (0.5, False), (1.0, False), (0.5, True)])
def test_one_off_policy_step_gives_gkdtrainers_loss_and_gradients(env, beta, lora, tmp_path):
    """With ``lora`` the student is a peft LoRA model (adapters initialised away from zero, so that every
    adapter weight has a gradient) and Aura's side runs its frozen layers packed (``lora_views.frozen_packed``)."""
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM
    from trl.experimental.gkd import GKDConfig, GKDTrainer

    from aura.train.objectives.distill import Distill

    batch, tok = sft_batch(env["student"])
    student = AutoModelForCausalLM.from_pretrained(env["student"], dtype=torch.float32)
    teacher = AutoModelForCausalLM.from_pretrained(env["teacher"], dtype=torch.float32)
    args = GKDConfig(
        output_dir=str(tmp_path / "trl"),
        lmbda=0.0,
        beta=beta,
        per_device_train_batch_size=len(CONVERSATIONS),
        report_to=[],
        use_cpu=True,
        bf16=False,
        max_length=128,
    )
    data = Dataset.from_list(
        [{"messages": [{"role": "user", "content": p}, {"role": "assistant", "content": a}]} for p, a in CONVERSATIONS]
    )
    peft_config = (
        LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules="all-linear", init_lora_weights=False)
        if lora
        else None
    )
    trainer = GKDTrainer(
        model=student,
        teacher_model=teacher,
        args=args,
        train_dataset=data,
        processing_class=tok,
        peft_config=peft_config,
    )
    model = trainer.model
    model.train()
    n = int((batch["labels"][:, 1:] != -100).sum())
    trl_loss = trainer.compute_loss(model, dict(batch), num_items_in_batch=n)
    trl_loss.backward()
    trl_grads = {k: p.grad.clone() for k, p in model.named_parameters() if p.requires_grad}
    assert len(trl_grads) == (2 * 7 * 2 if lora else len(list(model.parameters())))  # 2 layers x 7 projections x (A, B)
    model.zero_grad(set_to_none=True)

    objective = Distill(teacher=trainer.teacher_model, beta=beta)
    from aura.inference.packed import PackedLinear

    assert (objective.student_layers(model) is not None) == lora
    assert isinstance(trainer.teacher_model.lm_head, PackedLinear)  # TRL's teacher, its forward already done
    assert objective.count(batch) == n
    summed, metrics = objective.loss(model, dict(batch, on_policy=torch.tensor(0.0)))
    (summed / n).backward()
    torch.testing.assert_close(summed / n, trl_loss, rtol=1e-5, atol=1e-6)
    assert float(metrics["on_policy"]) == 0.0
    for name, p in model.named_parameters():
        if p.requires_grad:
            torch.testing.assert_close(p.grad, trl_grads[name], rtol=1e-4, atol=1e-6, msg=name)
    assert all(g.abs().sum() > 0 for g in trl_grads.values())
