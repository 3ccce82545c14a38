"""How close each GGUF quantisation stays to PyTorch: ``aura export gguf``'s own verification, per quant.

    .venv/bin/python bench/gguf_accuracy.py [--quants f32,f16,bf16,q8_0,q4_k_m] [--train-steps 0]

Model: the tests' tiny Llama (``tests/tiny_models.py``: 2 layers, d 64, 4 heads, 2 KV heads, MLP 256, a
byte-level BPE of 800 tokens on the embedded corpus), random weights, or with ``--train-steps N`` first
pretrained N steps on the embedded corpus (``aura pretrain``: trained models have fewer near-ties between
their top logits, so top-1 agreement rises). Each quantisation is exported with the real CLI (``python -m
aura export gguf --quant Q``), which verifies the file in llama.cpp and writes ``NAME.verify.json``; this
script prints that record's figures: max |logit difference| relative to the spread of PyTorch's logits and
top-1 agreement over every verified position, and the greedy tokens that agree from the first.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def aura(*argv: str) -> None:
    env = dict(os.environ, AURA_PLAIN="1", AURA_LANG="en", PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, "-m", "aura", *argv], capture_output=True, text=True, env=env)
    if r.returncode:
        sys.exit(f"aura {' '.join(argv)} failed:\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quants", default="f32,f16,bf16,q8_0,q4_k_m")
    ap.add_argument("--train-steps", type=int, default=0, help="pretrain the model this many steps first")
    a = ap.parse_args()
    from figures import figure

    from tests.tiny_models import build_llama, train_tokenizer

    with tempfile.TemporaryDirectory(prefix="aura-gguf-accuracy-") as tmp:
        work = Path(tmp)
        tok = train_tokenizer(work / "tok")
        model = build_llama(work / "llama", tok)
        if a.train_steps:
            aura(
                "data",
                "prepare",
                str(ROOT / "aura" / "resources" / "corpus_es"),
                "--tokenizer",
                str(tok),
                "--output-dir",
                str(work / "data"),
            )
            aura(
                "pretrain",
                "--data",
                str(work / "data"),
                "--output-dir",
                str(work / "run"),
                "--init-from",
                str(model),
                "--max-steps",
                str(a.train_steps),
                "--save-steps",
                "0",
                "--sample-tokens",
                "0",
                "--precision",
                "fp32",
                "--device",
                "cpu",
            )
            model = work / "run" / "final"
        state = "random weights" if not a.train_steps else f"after {a.train_steps} pretraining steps"
        print(f"tiny Llama (2 layers, d 64, vocab 800), {state}")
        print(f"{'quant':8} {'rel. max |diff|':>16} {'top-1':>8} {'positions':>10} {'greedy agreeing':>16}")
        for q in a.quants.split(","):
            out = work / f"model-{q}.gguf"
            aura("export", "gguf", "--model", str(model), "--quant", q, "--outfile", str(out), "--verify")
            rec = json.loads(out.with_name(f"model-{q}.verify.json").read_text(encoding="utf-8"))
            print(
                f"{q:8} {100 * rec['rel_diff']:15.2f}% {100 * rec['top1']:7.1f}% {rec['texts']:>10} "
                f"{rec['agreeing']:>9}/{rec['generated']}",
                flush=True,
            )
            figure(
                f"gguf_accuracy.{'trained' if a.train_steps else 'random'}.{q}",
                f"{100 * rec['rel_diff']:.2f} % / {100 * rec['top1']:.1f} %",
            )


# reproduce:
# reproduce-needs: module:llama_cpp
# reproduce-quick: --quants f16
# reproduce-quick-needs: module:llama_cpp

if __name__ == "__main__":
    main()
