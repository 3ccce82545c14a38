"""On-policy distillation speed and memory: `aura finetune --objective distill --method lora` vs TRL GKDTrainer + peft.

Same tiny Llama student (bench/versus_trl.py's: 4 layers, hidden 256, vocab 2000) and a teacher built here
with the same tokenizer and twice the layers (8, seed 1; each side builds its own identical copy before its
clock starts), same data (the embedded Spanish instructions, ``aura/resources/instrucciones_es.csv``, as
``messages`` for TRL; the examples longer than --max-length left out on both sides, as Aura's default
``--truncation drop`` does) in the same order (TRL is given Aura's epoch shuffle and samples it in sequence:
the same micro-batches on both sides), same chat template (the model's ChatML), same LoRA (r 16, alpha 32, no dropout:
GKDConfig's ``disable_dropout``; every linear layer but the head), TRL GKDConfig's beta 0.5 and temperature
0.9, max_new_tokens 64, batch 2 x accumulation 2, lr 5e-5, cosine, fp32, the same number of optimizer steps,
this CPU, one thread a side. ``--lmbda`` (default 1: every micro-batch is the student's own samples; TRL draws
its batches with ``random.random()`` and Aura with its keyed draw, so a fraction in between would not sample
the same number of batches on both sides; 0: every batch is the data's: the teacher's forward and the loss
alone).

Both sides are timed as ``bench/bench_kto.py`` (``versus_trl.alternate``): whole command (the child's wall
time), steady state (end of step 1 to end of the last step), and both in CPU seconds of the child, which
move much less than wall time on a shared machine; memory is the child's peak RSS.

    .venv/bin/python bench/bench_distill.py [--steps 4] [--max-length 256] [--repeats 1] [--lmbda 1]
"""

from __future__ import annotations

import os
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import versus_trl  # noqa: E402  (bench/: the shared Aura-vs-TRL harness)

# reproduce: --steps 6 --lmbda 1 --repeats 2
# reproduce: --steps 16 --lmbda 0 --repeats 2
# reproduce-quick: --steps 2 --max-length 64 --lmbda 1
# reproduce-needs: module:trl
# reproduce-quick-needs: module:trl

LR, BATCH, ACCUM, MAX_NEW = 5e-5, 2, 2, 64  # a short run: sampling 128 tokens costs seconds per row here
LMBDA = float(os.environ.get("AURA_BENCH_LMBDA", "1"))


def build_teacher(student: str, out: str) -> str:
    """The teacher: the student's tokenizer, twice its layers (8), another seed."""
    from tests.tiny_models import build_llama

    tok = Path(student).parent / "tok"
    path = build_llama(
        Path(out) / "teacher", tok, hidden=256, layers=8, heads=4, kv_heads=2, intermediate=768, ctx=512, seed=1
    )
    return str(path)


def child_aura(a) -> list[tuple[float, float]]:
    """``aura finetune --objective distill ...`` through the program's own entry point, each step clocked."""
    teacher = build_teacher(a.model, a.out + "-teacher")
    argv = ["finetune", "--objective", "distill", "--method", "lora", "--base-model", a.model, "--teacher", teacher]
    argv += ["--lmbda", LMBDA, "--max-new-tokens", MAX_NEW, "--output-dir", a.out, "--max-steps", a.steps]
    argv += ["--batch-size", BATCH, "--gradient-accumulation-steps", ACCUM, "--max-length", a.max_length]
    argv += ["--lora-r", 16, "--lora-alpha", 32, "--lora-dropout", 0.0, "--precision", "fp32", "--lr", LR]
    argv += ["--warmup-steps", 0, "--val-fraction", 0.0, "--save-steps", 0, "--log-interval", 1, "--seed", 0]
    return versus_trl.clocked_aura(argv)


def child_trl(a) -> list[tuple[float, float]]:
    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl.experimental.gkd import GKDConfig, GKDTrainer

    from aura.data import EMBEDDED_INSTRUCTIONS
    from aura.data.sft import load_conversations

    teacher_dir = build_teacher(a.model, a.out + "-teacher")
    tok = AutoTokenizer.from_pretrained(a.model)
    convs = [c.messages for c in load_conversations(EMBEDDED_INSTRUCTIONS)]
    fits = [
        m
        for m in convs
        if len(tok(tok.apply_chat_template(m, tokenize=False), add_special_tokens=False).input_ids) <= a.max_length
    ]
    # Aura's order: SFTDataSource's epoch-0 shuffle of the same examples (seed 0), taken in sequence, so that both
    # sides train the very same micro-batches (the trained-token counts per step then agree)
    order = list(range(len(fits)))
    random.Random(0 * 1_000_003 + 0).shuffle(order)
    ds = Dataset.from_list([{"messages": fits[i]} for i in order])
    model = AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.float32)
    teacher = AutoModelForCausalLM.from_pretrained(teacher_dir, dtype=torch.float32)
    args = GKDConfig(
        output_dir=a.out,
        per_device_train_batch_size=BATCH,
        gradient_accumulation_steps=ACCUM,
        learning_rate=LR,
        lr_scheduler_type="cosine",
        warmup_steps=0,
        max_steps=a.steps,
        max_length=a.max_length,
        weight_decay=0.0,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        use_cpu=True,
        bf16=False,  # GKDConfig (SFTConfig) defaults to bf16 autocast, also on the CPU: fp32 as Aura's side
        seed=0,
        dataloader_num_workers=0,
        lmbda=LMBDA,
        beta=0.5,
        temperature=0.9,
        max_new_tokens=MAX_NEW,
        gradient_checkpointing=False,
        train_sampling_strategy="sequential",
    )
    lora = LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0, target_modules="all-linear", task_type="CAUSAL_LM")
    ends: list[tuple[float, float]] = []

    class StepClock(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            ends.append(versus_trl.step_end())

    trainer = GKDTrainer(
        model=model,
        teacher_model=teacher,
        args=args,
        train_dataset=ds,
        processing_class=tok,
        peft_config=lora,
        callbacks=[StepClock()],
    )
    trainer.train()
    trainer.save_model(a.out + "/final")
    return ends


if __name__ == "__main__":
    if "--lmbda" in sys.argv:  # this script's own flag: the children inherit it through the environment
        i = sys.argv.index("--lmbda")
        os.environ["AURA_BENCH_LMBDA"] = sys.argv[i + 1]
        del sys.argv[i : i + 2]
    LMBDA = float(os.environ.get("AURA_BENCH_LMBDA", "1"))
    name = {1.0: "distill_vs_trl", 0.0: "distill_offpolicy_vs_trl"}.get(LMBDA, f"distill_lmbda{LMBDA:g}_vs_trl")
    versus_trl.alternate(__file__, {"aura": child_aura, "trl": child_trl}, steps=4, per_step=BATCH * ACCUM, name=name)
