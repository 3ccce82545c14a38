"""Aura's training loop vs Hugging Face ``Trainer`` on the identical model, data, batch, precision, steps.

    .venv/bin/python bench/bench_pretrain.py [--steps 60] [--corpus /tmp/bench_es.txt] [--precision auto]

Model: the tiny Llama of the `tiny` preset (4 layers, d 256, 4 heads, 2 KV heads, MLP 768, context 256), batch 16,
AdamW (0.9, 0.95, wd 0.1), clip 1.0, warm-up + cosine to 10 %. Both runs start from the same weights
and read the same 256-token windows. Throughput is measured after 3 warm-up steps; the final loss is
the mean of the last 10 steps. Prints tokens/s of each, the ratio, and both final losses.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def prepare_data(work: Path, corpus: str | None) -> Path:
    from aura.data import EMBEDDED_CORPUS
    from aura.data.prepare import PrepareConfig, prepare
    from aura.tokenizer.train import train_bpe

    inputs = (
        [corpus] if corpus and Path(corpus).is_file() else [str(p) for p in sorted(Path(EMBEDDED_CORPUS).glob("*.txt"))]
    )
    tok = train_bpe(inputs=inputs, vocab_size=8000, output_dir=work / "tok")
    return prepare(
        PrepareConfig(
            inputs=inputs, tokenizer=str(tok), output_dir=str(work / "data"), max_tokens=2_000_000, val_fraction=0.001
        )
    )


def run_aura(data: Path, out: Path, *, steps: int, precision: str) -> tuple[float, float]:
    from aura.train.pretrain import PretrainConfig, pretrain

    pretrain(
        PretrainConfig(
            data=[str(data)],
            output_dir=out,
            model_preset="tiny",
            batch_size=16,
            max_steps=steps,
            learning_rate=1e-3,
            warmup_steps=3,
            log_interval=1,
            save_steps=0,
            precision=precision,
            sample_tokens=0,
            eval_batches=1,
            seed=0,
        )
    )
    rows = [r for r in csv.DictReader(open(out / "training_log.csv")) if r["kind"] == "step"]
    a, b = rows[2], rows[-1]  # steps 3 .. N
    tps = (int(b["tokens"]) - int(a["tokens"])) / (float(b["seconds"]) - float(a["seconds"]))
    return tps, sum(float(r["train_loss"]) for r in rows[-10:]) / 10


def run_hf(data: Path, out: Path, *, steps: int, precision: str) -> tuple[float, float]:
    import torch
    from transformers import Trainer, TrainerCallback, TrainingArguments

    from aura.data.pretrain_data import PretrainBatches, open_splits
    from aura.models.presets import PRESETS, build_model
    from aura.tokenizer.loading import load_tokenizer

    tok = load_tokenizer(str(data / "tokenizer"))
    split, _ = open_splits(data)
    source = PretrainBatches(split, seq_len=256, batch_size=1, seed=0)

    class Windows(torch.utils.data.Dataset):
        def __len__(self):
            return source.batches_per_epoch

        def __getitem__(self, i):
            ids = source.batch_at(0, i)["input_ids"][0]
            return {"input_ids": ids, "labels": ids}

    torch.manual_seed(0)
    model = build_model(PRESETS["tiny"], len(tok), eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    marks: dict[str, float] = {}

    class Clock(TrainerCallback):
        def on_step_end(self, args, state, control, **kw):
            if state.global_step == 3:
                marks["start"] = time.perf_counter()
            marks["end"] = time.perf_counter()

    losses: list[float] = []

    class Losses(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kw):
            if logs and "loss" in logs:
                losses.append(float(logs["loss"]))

    args = TrainingArguments(
        output_dir=str(out),
        per_device_train_batch_size=16,
        max_steps=steps,
        learning_rate=1e-3,
        warmup_steps=3,
        lr_scheduler_type="cosine_with_min_lr",
        lr_scheduler_kwargs={"min_lr_rate": 0.1},
        weight_decay=0.1,
        adam_beta1=0.9,
        adam_beta2=0.95,
        max_grad_norm=1.0,
        logging_steps=10,
        save_strategy="no",
        report_to=[],
        use_cpu=not torch.cuda.is_available(),
        bf16=precision == "bf16",
        dataloader_num_workers=0,
        seed=0,
        disable_tqdm=True,
    )
    Trainer(model=model, args=args, train_dataset=Windows(), callbacks=[Clock(), Losses()]).train()
    tps = (steps - 3) * 16 * 256 / (marks["end"] - marks["start"])
    return tps, losses[-1]


def run_bare(data: Path, *, steps: int, precision: str) -> float:
    """The ceiling: a bare PyTorch loop (forward, cross entropy, backward, clip, fused AdamW) on the same
    model and batch shape, one host sync at the end. Tells overhead apart from compute."""
    import torch
    import torch.nn.functional as F

    from aura.models.presets import PRESETS, build_model
    from aura.train.optim.step_engine import autocast_context

    vocab = json.loads((data / "meta.json").read_text())["tokenizer"]["vocab_size"]
    torch.manual_seed(0)
    model = build_model(PRESETS["tiny"], vocab)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
    x = torch.randint(0, vocab, (16, 257))
    cpu = torch.device("cpu")

    def step():
        with autocast_context(precision, cpu):
            logits = model(input_ids=x[:, :-1], use_cache=False).logits  # (B, T, V)
        loss = F.cross_entropy(logits.reshape(-1, vocab).float(), x[:, 1:].reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    for _ in range(3):
        step()
    n = max(steps - 3, 5)
    start = time.perf_counter()
    for _ in range(n):
        loss = step()
    loss.item()
    return n * x[:, :-1].numel() / (time.perf_counter() - start)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--corpus", default="/tmp/bench_es.txt", help="text file (falls back to the embedded corpus)")
    p.add_argument("--precision", default="auto", choices=("auto", "fp32", "bf16"))
    a = p.parse_args()
    import torch

    from aura.train.optim.step_engine import resolve_precision

    precision = resolve_precision(a.precision, torch.device("cpu"))
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        data = prepare_data(work, a.corpus)
        hf_tps, hf_loss = run_hf(data, work / "hf", steps=a.steps, precision=precision)
        aura_tps, aura_loss = run_aura(data, work / "aura", steps=a.steps, precision=precision)
        bare_tps = run_bare(data, steps=a.steps, precision=precision)
    print()
    print(
        f"precision {precision}, {a.steps} steps, batch 16 x 256 tokens, torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads"
    )
    print(f"{'':<22}{'tokens/s':>12}{'final loss':>12}")
    print(f"{'Hugging Face Trainer':<22}{hf_tps:>12,.0f}{hf_loss:>12.4f}")
    print(f"{'Aura':<22}{aura_tps:>12,.0f}{aura_loss:>12.4f}")
    print(f"{'bare PyTorch loop':<22}{bare_tps:>12,.0f}{'-':>12}")
    print(
        f"ratio Aura / HF: {aura_tps / hf_tps:.2f}x; final loss difference "
        f"{100 * (aura_loss - hf_loss) / hf_loss:+.2f} %"
    )
    print(f"ratio Aura / bare loop (overhead check): {aura_tps / bare_tps:.2f}x")
    from figures import figure, ratio

    figure("pretrain_vs_hf.tokens_per_s", ratio(aura_tps / hf_tps))
    figure("pretrain_vs_hf.final_loss_diff", f"{100 * (aura_loss - hf_loss) / hf_loss:+.2f} %")
    figure("pretrain_vs_bare_loop.tokens_per_s", ratio(aura_tps / bare_tps))


# reproduce: --steps 40 --corpus /tmp/bench_es.txt
# reproduce-needs: file:/tmp/bench_es.txt
# reproduce-quick: --steps 10

if __name__ == "__main__":
    main()
