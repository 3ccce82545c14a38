"""Where a distillation step's CPU time goes, Aura against TRL on identical inputs (``bench/bench_distill.py``'s
models and data, one thread, CPU seconds of this process: both sides alternate in it, so a shared machine's
load moves them together).

* Loss path: the same right-padded micro-batches (2 rows of the embedded instructions, <= 256 tokens, a fixed
  shuffle) through Aura's ``Distill.loss`` + backward and through TRL ``GKDTrainer.compute_loss``'s own
  passes (the student's and the teacher's full forwards, ``generalized_jsd_loss``) + backward, as its Trainer
  runs them, the same peft
  LoRA student (r 16 on every projection), beta 0.5. Aura three ways: as shipped (the teacher's and the
  student's frozen layers packed once for oneDNN), with the teacher's packing alone, with neither.
* Sampling: the same prompts (each micro-batch's), 64 new tokens a row with no early stop, temperature 0.9:
  Aura's keyed sampler one call per micro-batch, Aura one call per optimizer step of 2 micro-batches (what
  ``DistillSource`` does with ``--gradient-accumulation-steps 2``), and peft ``model.generate`` (TRL's GKD
  generation settings) one call per micro-batch.

    .venv/bin/python bench/distill_parts.py [--batches 12] [--repeats 3]
"""

from __future__ import annotations

import argparse
import copy
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import versus_trl  # noqa: E402  (bench/: the shared Aura-vs-TRL harness, which puts the repo on the path)
from bench_distill import build_teacher  # noqa: E402
from figures import figure, ratio  # noqa: E402

# reproduce: --batches 12 --repeats 3
# reproduce-quick: --batches 4 --repeats 1
# reproduce-needs: module:trl
# reproduce-quick-needs: module:trl


def micro_batches(tok, n: int) -> list[dict]:
    from aura.data import EMBEDDED_INSTRUCTIONS
    from aura.data.sft import load_conversations
    from aura.data.sft_batches import collate, encode_all

    ex = encode_all(
        load_conversations(EMBEDDED_INSTRUCTIONS), tok, max_length=256, truncation="drop", train_on_prompt=False
    )
    order = list(range(len(ex)))
    random.Random(0).shuffle(order)
    return [collate([[ex[order[2 * i]]], [ex[order[2 * i + 1]]]], pad_id=tok.pad_token_id) for i in range(n)]


def loss_paths(model, teacher, batches: list[dict]) -> dict:
    """Each side's (micro-batch -> loss + backward) on the same model and teacher."""
    import torch
    from trl.experimental.gkd import GKDTrainer

    from aura.train.objectives.distill import Distill

    plain = Distill(teacher=teacher, beta=0.5, pack=False)  # TRL's side and this one: the teacher as loaded
    packed_teacher = copy.deepcopy(teacher)
    shipped = Distill(teacher=packed_teacher, beta=0.5)  # packs (and keeps packed) its teacher
    teacher_only = Distill(teacher=packed_teacher, beta=0.5)
    teacher_only.student_layers = lambda m: None

    def aura(objective):
        def step(b):
            loss, _ = objective.loss(model, dict(b))
            (loss / objective.count(b)).backward()

        return step

    def trl(b):
        n = int((b["labels"][:, 1:] != -100).sum())
        # use_cache=False: transformers' Trainer sets the trained model's config.use_cache (TrainingArguments'
        # use_cache, default False); the teacher keeps its own config, as in GKDTrainer
        s = model(input_ids=b["input_ids"], attention_mask=b["attention_mask"], use_cache=False)
        teacher.eval()
        with torch.no_grad():
            t = teacher(input_ids=b["input_ids"], attention_mask=b["attention_mask"])
        labels = b["labels"][:, 1:]
        GKDTrainer.generalized_jsd_loss(
            s.logits[:, :-1], t.logits[:, :-1], labels=labels, beta=0.5, num_items_in_batch=n
        ).backward()

    return {"aura": aura(shipped), "aura_teacher_packed": aura(teacher_only), "aura_unpacked": aura(plain), "trl": trl}


def samplers(model, tok, batches: list[dict]) -> dict:
    import torch
    from transformers import GenerationConfig

    from aura.inference.sampling import SamplingParams
    from aura.train.objectives.distill import prompt_of
    from aura.train.objectives.rollout import row_key, sample_completions

    prompts = [[prompt_of(*r) for r in zip(b["input_ids"], b["labels"], b["attention_mask"])] for b in batches]
    sampling = SamplingParams(max_new_tokens=64, temperature=0.9, stop_ids=())
    cpu = torch.device("cpu")

    def aura(per_call: int):
        def run():
            for i in range(0, len(prompts), per_call):
                rows = [p for ps in prompts[i : i + per_call] for p in ps]
                keys = [row_key(0, 0, i, j) for j in range(len(rows))]
                sample_completions(model, rows, keys, sampling=sampling, tokenizer=tok, precision="fp32", device=cpu)

        return run

    config = GenerationConfig(
        max_new_tokens=64, min_new_tokens=64, temperature=0.9, do_sample=True, top_k=0, top_p=1.0, use_cache=True
    )
    config.pad_token_id = tok.pad_token_id

    def generate():
        for ps in prompts:
            w = max(map(len, ps))
            ids = torch.full((len(ps), w), tok.pad_token_id)
            mask = torch.zeros((len(ps), w), dtype=torch.long)
            for j, p in enumerate(ps):
                ids[j, w - len(p) :], mask[j, w - len(p) :] = torch.tensor(p), 1
            with torch.no_grad():
                model.generate(input_ids=ids, attention_mask=mask, generation_config=config)

    return {"aura_per_micro_batch": aura(1), "aura_per_step": aura(2), "generate": generate}


def clock(fn, *, repeats: int) -> float:
    """The fewest CPU seconds of ``repeats`` calls (after one warm-up call)."""
    fn()
    best = float("inf")
    for _ in range(repeats):
        c = time.process_time()
        fn()
        best = min(best, time.process_time() - c)
    return best


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--batches", type=int, default=12, help="micro-batches of 2 rows (even)")
    p.add_argument("--repeats", type=int, default=3)
    a = p.parse_args()
    import os

    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from aura.tokenizer.loading import load_tokenizer

    torch.set_num_threads(1)
    print(f"load average before: {os.getloadavg()[0]:.2f}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        student_dir = versus_trl.build_model(Path(tmp))
        teacher_dir = build_teacher(str(student_dir), tmp)
        tok = load_tokenizer(str(student_dir))
        lora = LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0, target_modules="all-linear", task_type="CAUSAL_LM")
        model = get_peft_model(AutoModelForCausalLM.from_pretrained(student_dir, dtype=torch.float32), lora)
        teacher = AutoModelForCausalLM.from_pretrained(teacher_dir, dtype=torch.float32).eval().requires_grad_(False)
    batches = micro_batches(tok, a.batches)
    real = sum(int(b["attention_mask"].sum()) for b in batches)
    print(f"{a.batches} micro-batches of 2 rows: {real} tokens, {sum(b['input_ids'].numel() for b in batches)} padded")

    model.train()
    paths = loss_paths(model, teacher, batches)

    def over_batches(step):
        def run():
            for b in batches:
                step(b)
                model.zero_grad(set_to_none=True)

        return run

    loss_s = {name: clock(over_batches(step), repeats=a.repeats) for name, step in paths.items()}
    for name, s in loss_s.items():
        print(f"loss path + backward, {name:20s} {s:.3f} CPU s  TRL / this x{loss_s['trl'] / s:.2f}", flush=True)
    model.eval()
    sample_s = {name: clock(fn, repeats=a.repeats) for name, fn in samplers(model, tok, batches).items()}
    for name, s in sample_s.items():
        print(f"sampling 64 tokens x 2 rows x {a.batches}, {name:20s} {s:.3f} CPU s", flush=True)
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    figure("distill_parts.loss_path_vs_trl", ratio(loss_s["trl"] / loss_s["aura"]))
    figure("distill_parts.loss_path_packing", ratio(loss_s["aura_unpacked"] / loss_s["aura"]))
    figure(
        "distill_parts.sampling_per_step_vs_per_micro_batch",
        ratio(sample_s["aura_per_micro_batch"] / sample_s["aura_per_step"]),
    )
    figure("distill_parts.sampling_vs_generate", ratio(sample_s["generate"] / sample_s["aura_per_step"]))


if __name__ == "__main__":
    main()
