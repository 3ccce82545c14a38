"""GGUF export time and size per quantisation, and llama.cpp vs PyTorch generation speed on this CPU.

    .venv/bin/python bench/bench_gguf.py [--out /tmp/bench_gguf] [--new-tokens 128] [--threads 2]

Model: the tiny Llama of the `tiny` preset (4 layers, d 256, 4 heads, 2 KV heads, MLP 768, ctx 256) with a
byte-level BPE tokenizer trained on the embedded corpus (vocab up to 8000), random weights (speed does
not depend on them). Generation: greedy, the same prompt, exactly --new-tokens tokens each (EOS
ignored), one sequence; llama.cpp through llama-cpp-python and PyTorch ``generate`` (fp32, KV cache)
with the same thread count. Prints one table; the ratio column is tokens/s relative to PyTorch.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="/tmp/bench_gguf")
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from aura.export.gguf import GGUFConfig, export_gguf, find_quantizer
    from aura.inference.loading import load_llama
    from tests.tiny_models import build_llama, train_tokenizer

    torch.set_num_threads(args.threads)
    load_before = os.getloadavg()[0]
    out = Path(args.out)
    shutil.rmtree(out, ignore_errors=True)
    tok_dir = train_tokenizer(out / "tokenizer", vocab_size=8000)
    model_dir = build_llama(out / "llama", tok_dir, hidden=256, layers=4, heads=4, kv_heads=2,
                            intermediate=768, ctx=256)
    tok = AutoTokenizer.from_pretrained(str(model_dir))
    print(f"model: {model_dir} ({len(tok)} tokens in the tokenizer)")

    quants = ["f32", "f16", "bf16", "q8_0"] + (["q4_k_m"] if find_quantizer() else [])
    rows = []
    files = {}
    for q in quants:
        t0 = time.perf_counter()
        export_gguf(GGUFConfig(model=str(model_dir), outfile=str(out / f"model-{q}.gguf"), quant=q,
                               verify=False, overwrite=True))
        files[q] = out / f"model-{q}.gguf"
        rows.append([q, time.perf_counter() - t0, files[q].stat().st_size])

    prompt = "¿Dónde está el niño? ¡Allí, junto a la cigüeña! El año 2024"
    ids = tok(prompt)["input_ids"]
    n = args.new_tokens

    # PyTorch: greedy generate with KV cache, EOS disabled so every run makes exactly n tokens
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    x = torch.tensor([ids])

    def torch_run() -> float:
        with torch.no_grad():
            t0 = time.perf_counter()
            y = model.generate(x, max_new_tokens=n, min_new_tokens=n, do_sample=False,
                               eos_token_id=None, pad_token_id=tok.pad_token_id)
            secs = time.perf_counter() - t0
        assert y.shape[1] - x.shape[1] == n
        return n / secs

    llms = {q: load_llama(files[q], n_ctx=len(ids) + n + 8, n_threads=args.threads) for q in quants}

    def llama_run(q: str) -> float:
        llm = llms[q]
        llm.reset()
        t0 = time.perf_counter()
        count = 0
        for _tok in llm.generate(ids, top_k=1, top_p=1.0, temp=0.0, reset=True):
            count += 1
            if count >= n:
                break
        return count / (time.perf_counter() - t0)

    # The machine is shared: interleave the runs and keep each one's best of --repeats.
    torch_run()
    for q in quants:
        llama_run(q)  # warm-up
    torch_tps, speeds = 0.0, {q: 0.0 for q in quants}
    for _ in range(args.repeats):
        torch_tps = max(torch_tps, torch_run())
        for q in quants:
            speeds[q] = max(speeds[q], llama_run(q))

    print()
    print(f"CPU threads: {args.threads} | prompt {len(ids)} tokens | {n} new tokens, greedy, "
          f"best of {args.repeats} | load average at start {load_before:.1f}, at end {os.getloadavg()[0]:.1f}")
    print(f"{'quant':8} {'export s':>9} {'size MB':>9} {'llama.cpp tok/s':>16} {'vs PyTorch':>11}")
    for q, secs, size in rows:
        print(f"{q:8} {secs:9.2f} {size / 2**20:9.2f} {speeds[q]:16.1f} {speeds[q] / torch_tps:10.2f}x")
    print(f"{'PyTorch fp32 generate':38} {torch_tps:16.1f} {1.0:10.2f}x")
    print(f"(os.cpu_count()={os.cpu_count()})")
    from figures import figure, ratio

    for q, _, _ in rows:
        figure(f"gguf.{q}.tokens_per_s_vs_pytorch", ratio(speeds[q] / torch_tps))


# reproduce: --new-tokens 128 --threads 2 --repeats 3
# reproduce-needs: module:llama_cpp
# reproduce-quick: --new-tokens 8 --repeats 1 --out {tmp}
# reproduce-quick-needs: module:llama_cpp

if __name__ == "__main__":
    main()
