"""The aura-es suite on CPU: Aura's batched scorer (``aura eval --suite aura-es``) vs lm-evaluation-harness's
own Hugging Face backend (``HFLM`` + ``simple_evaluate``) on the same local task files.

Both sides score the same model object in the same process, with the same batch size, fp32, and must
report the same accuracies (checked). Timed: the scoring only (the model is loaded once; lm-eval's task
loading and request building are included on its side, Aura's file reading and tokenisation on its side).
Models, built here with random weights and the tests' byte-level BPE (vocab 800 unless --vocab): a tiny
Llama (2 layers, width 64) and a GPT-2 of 125M parameters (12 layers, width 768, vocab 50,257 rows).

    .venv/bin/python bench/bench_eval.py [--batch-size 16] [--limit 0] [--only tiny|125m]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def build_models(root: Path, only: str) -> dict[str, Path]:
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    from tests.tiny_models import _save_model, build_llama, train_tokenizer

    tok = train_tokenizer(root / "tok", vocab_size=800)
    models = {}
    if only in ("", "tiny"):
        models["tiny llama (0.2M)"] = build_llama(root / "tiny", tok)
    if only in ("", "125m"):
        torch.manual_seed(0)
        model = GPT2LMHeadModel(GPT2Config(vocab_size=50257, n_embd=768, n_layer=12, n_head=12, n_positions=1024))
        models["gpt2 125M"] = _save_model(model, tok, root / "gpt2-125m")
    return models


def run_aura(model, tok, limit: int, batch_size: int) -> tuple[float, dict]:
    from aura.evaluation.scorer import score_suite
    from aura.evaluation.suite import load_suite

    t = time.perf_counter()
    results = score_suite(model, tok, load_suite(limit), batch_size=batch_size)
    return time.perf_counter() - t, {r["task"]: (r["acc"], r["acc_norm"]) for r in results}


def run_lm_eval(model, tok, limit: int, batch_size: int) -> tuple[float, dict]:
    import logging

    from lm_eval import simple_evaluate
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager

    from aura.evaluation.suite import SUITE_DIR, TASKS

    logging.getLogger("lm_eval").setLevel(logging.ERROR)
    manager = TaskManager(include_path=[str(SUITE_DIR)], include_defaults=False)  # not timed: an index
    t = time.perf_counter()
    lm = HFLM(pretrained=model, tokenizer=tok, batch_size=batch_size)
    out = simple_evaluate(
        model=lm,
        tasks=list(TASKS),
        task_manager=manager,
        limit=limit or None,
        log_samples=False,
        bootstrap_iters=0,
        verbosity="ERROR",
    )
    seconds = time.perf_counter() - t
    return seconds, {t: (m["acc,none"], m["acc_norm,none"]) for t, m in out["results"].items() if t in TASKS}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--limit", type=int, default=0, help="items per task (0 = all)")
    parser.add_argument("--only", choices=("", "tiny", "125m"), default="")
    a = parser.parse_args()
    import os

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    print(f"torch threads: {torch.get_num_threads()}, cores: {os.cpu_count()}")
    with tempfile.TemporaryDirectory(prefix="aura-bench-eval-") as tmp:
        for name, path in build_models(Path(tmp), a.only).items():
            model = AutoModelForCausalLM.from_pretrained(str(path)).eval()
            tok = AutoTokenizer.from_pretrained(str(path))
            n_params = sum(p.numel() for p in model.parameters())
            aura_s, aura_acc = run_aura(model, tok, a.limit, a.batch_size)
            lm_s, lm_acc = run_lm_eval(model, tok, a.limit, a.batch_size)
            same = all(
                abs(aura_acc[t][0] - lm_acc[t][0]) < 1e-9 and abs(aura_acc[t][1] - lm_acc[t][1]) < 1e-9
                for t in aura_acc
            )
            print(
                f"{name} ({n_params / 1e6:.1f}M params): aura {aura_s:.2f} s, lm-eval HFLM {lm_s:.2f} s, "
                f"speed-up x{lm_s / aura_s:.2f}, same accuracies: {same}"
            )
            for task in aura_acc:
                print(
                    f"  {task}: acc {aura_acc[task][0]:.4f} / {lm_acc[task][0]:.4f}, "
                    f"acc_norm {aura_acc[task][1]:.4f} / {lm_acc[task][1]:.4f}"
                )
            from figures import figure

            tag = "tiny" if name.startswith("tiny") else "125m"
            figure(f"eval_vs_lm_eval.{tag}.speed_up", f"×{lm_s / aura_s:.2f}")
            figure(f"eval_vs_lm_eval.{tag}.same_accuracies", "yes" if same else "no")
            if not same:
                return 1
    return 0


# reproduce:
# reproduce-needs: module:lm_eval
# reproduce-quick: --only tiny --limit 2
# reproduce-quick-needs: module:lm_eval

if __name__ == "__main__":
    raise SystemExit(main())
