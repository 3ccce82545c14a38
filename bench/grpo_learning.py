"""GRPO learns on a CPU in minutes: a random tiny Llama, the Spanish math prompts, and a verifiable reward it
can reach (the ``format`` reward with ``--format-pattern '(?s)\\s*\\d.*'``: the answer starts with a number). The
reward mean per step rises from the chance level (a few digit tokens among 500) as the policy learns; the
script prints the first and last steps' means and draws reward and completion length per step.

    python bench/grpo_learning.py                        # 120 steps, writes docs/grpo_learning.svg
    python bench/grpo_learning.py --steps 30 --out /tmp/curve.svg
"""

from __future__ import annotations

import argparse
import csv
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def run(steps: int, out_dir: Path, *, lr: float) -> list[dict]:
    from aura.train.finetune import finetune
    from aura.train.finetune_config import FinetuneConfig
    from tests.tiny_models import build_llama, train_tokenizer

    tok = train_tokenizer(out_dir / "tok", vocab_size=500)
    model = build_llama(out_dir / "llama", tok, hidden=64, layers=2)
    cfg = FinetuneConfig(
        output_dir=out_dir / "run",
        base_model=str(model),
        objective="grpo",
        method="lora",
        max_steps=steps,
        num_generations=8,
        batch_size=8,
        gradient_accumulation_steps=4,
        max_completion_length=8,
        reward=["format"],
        format_pattern=r"(?s)\s*\d.*",
        lora_r=16,
        lora_dropout=0.0,
        learning_rate=lr,
        min_lr=lr,
        warmup_steps=0,
        val_fraction=0.0,
        save_steps=0,
        log_interval=1,
        precision="fp32",
        seed=0,
    )
    assert finetune(cfg) == 0
    with open(out_dir / "run" / "training_log.csv", newline="") as f:
        return [r for r in csv.DictReader(f) if r["kind"] == "step"]


def draw(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [int(r["step"]) for r in rows]
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.2))
    left.plot(steps, [float(r["reward"]) for r in rows], color="tab:green")
    left.set_title("reward mean (format: starts with a number)")
    left.set_xlabel("step")
    left.set_ylim(0, 1)
    right.plot(steps, [float(r["completion_length"]) for r in rows], color="tab:blue")
    right.set_title("completion length (tokens)")
    right.set_xlabel("step")
    fig.tight_layout()
    fig.savefig(path, metadata={"Date": None})
    plt.close(fig)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=120)
    p.add_argument("--learning-rate", type=float, default=5e-3)  # constant: --min-lr = --learning-rate
    p.add_argument("--out", type=Path, default=ROOT / "docs" / "grpo_learning.svg")
    a = p.parse_args()
    import torch

    torch.set_num_threads(1)
    t = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        rows = run(a.steps, Path(tmp), lr=a.learning_rate)
    seconds = time.perf_counter() - t
    draw(rows, a.out)
    first = sum(float(r["reward"]) for r in rows[:5]) / 5
    last = sum(float(r["reward"]) for r in rows[-5:]) / 5
    print(
        f"{len(rows)} steps in {seconds:.0f} s; reward mean, first 5 steps {first:.3f}, last 5 steps {last:.3f}; "
        f"plot: {a.out}"
    )
    from figures import figure

    figure("grpo_learning.reward_mean.first_5_steps", f"{first:.3f}")
    figure("grpo_learning.reward_mean.last_5_steps", f"{last:.3f}")
    for start in range(0, len(rows), 20):
        block = rows[start : start + 20]
        figure(
            f"grpo_learning.reward_mean.steps_{start + 1}-{start + len(block)}",
            f"{sum(float(r['reward']) for r in block) / len(block):.3f}",
        )


# reproduce: --out {tmp}/grpo_learning.svg
# reproduce-quick: --steps 5 --out {tmp}/g.svg

if __name__ == "__main__":
    main()
