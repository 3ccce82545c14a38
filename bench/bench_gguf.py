"""GGUF export time and size per quantisation, and llama.cpp vs PyTorch generation speed on this CPU; with
``--archs``, export time per architecture: Aura's writer against llama.cpp's own converter run by hand.

    .venv/bin/python bench/bench_gguf.py [--out /tmp/bench_gguf] [--new-tokens 128] [--threads 2]
    .venv/bin/python bench/bench_gguf.py --archs [--llama-cpp-dir DIR] [--repeats 3]

``--archs``: one random model per architecture (d 512, 8 layers, 8 heads, 4 KV heads, MLP 1536, ~25M
parameters without the embeddings) with the same real SentencePiece tokenizer (``tokenizer.model``, 600 pieces,
so that llama.cpp's converter takes it), exported to f16 by two commands, each a new process as a user runs
it: ``python -m aura export gguf --converter aura --no-verify`` and ``python convert_hf_to_gguf.py MODEL
--outfile X --outtype f16`` (the converter of the installed llama-cpp-python's sdist, as Aura fetches it, or
--llama-cpp-dir). Interleaved, best of --repeats; the ratio is the converter's time over Aura's.

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
    ap.add_argument("--archs", action="store_true", help="export time per architecture, Aura vs llama.cpp")
    ap.add_argument("--llama-cpp-dir", default="")
    args = ap.parse_args()
    if args.archs:
        return export_per_arch(args)

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
    model_dir = build_llama(
        out / "llama", tok_dir, hidden=256, layers=4, heads=4, kv_heads=2, intermediate=768, ctx=256
    )
    tok = AutoTokenizer.from_pretrained(str(model_dir))
    print(f"model: {model_dir} ({len(tok)} tokens in the tokenizer)")

    quants = ["f32", "f16", "bf16", "q8_0"] + (["q4_k_m"] if find_quantizer() else [])
    rows = []
    files = {}
    for q in quants:
        t0 = time.perf_counter()
        export_gguf(
            GGUFConfig(
                model=str(model_dir), outfile=str(out / f"model-{q}.gguf"), quant=q, verify=False, overwrite=True
            )
        )
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
            y = model.generate(
                x, max_new_tokens=n, min_new_tokens=n, do_sample=False, eos_token_id=None, pad_token_id=tok.pad_token_id
            )
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
    print(
        f"CPU threads: {args.threads} | prompt {len(ids)} tokens | {n} new tokens, greedy, "
        f"best of {args.repeats} | load average at start {load_before:.1f}, at end {os.getloadavg()[0]:.1f}"
    )
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

ARCHS = ("llama", "mistral", "qwen2", "gemma2", "gemma3", "phi3", "smollm3", "olmo2")


def export_per_arch(args) -> None:
    import subprocess

    from aura.export.gguf_convert import locate
    from tests.tiny_models import build_arch, build_llama, train_sentencepiece

    load_before = os.getloadavg()[0]
    out = Path(args.out) / "archs"
    shutil.rmtree(out, ignore_errors=True)
    converter = locate(args.llama_cpp_dir, fetch=True)
    tok = train_sentencepiece(out / "tokenizer")
    size = dict(hidden=512, layers=8, heads=8, kv_heads=4, intermediate=1536)
    models = {}
    for arch in ARCHS:
        if arch in ("llama", "mistral"):
            models[arch] = build_llama(out / arch, tok, ctx=2048, arch=arch, **size)
        else:
            extra = {"head_dim": 64, "query_pre_attn_scalar": 64} if arch.startswith("gemma") else {}
            models[arch] = build_arch(out / arch, tok, arch, ctx=2048, **size, **extra)

    def timed(cmd: list[str], cwd: Path | None = None) -> float | str:
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd)
        if proc.returncode != 0:
            return (proc.stdout + proc.stderr).strip().splitlines()[-1][:90]
        return time.perf_counter() - t0

    best: dict[tuple[str, str], float | str] = {}
    for _ in range(args.repeats):
        for arch, model in models.items():
            runs = {
                "aura": [
                    sys.executable,
                    "-m",
                    "aura",
                    "export",
                    "gguf",
                    "--model",
                    str(model),
                    "--outfile",
                    str(out / f"{arch}-aura.gguf"),
                    "--quant",
                    "f16",
                    "--converter",
                    "aura",
                    "--no-verify",
                    "--overwrite",
                ],
                "llama.cpp": [
                    sys.executable,
                    str(converter / "convert_hf_to_gguf.py"),
                    str(model),
                    "--outfile",
                    str(out / f"{arch}-llama.cpp.gguf"),
                    "--outtype",
                    "f16",
                ],
            }
            for who, cmd in runs.items():
                got = timed(cmd, cwd=converter if who == "llama.cpp" else None)
                prev = best.get((arch, who))
                if isinstance(got, str) or prev is None or (not isinstance(prev, str) and got < prev):
                    best[(arch, who)] = got
    print(
        f"\nGGUF export, f16, best of {args.repeats} | load average at start {load_before:.1f}, at end "
        f"{os.getloadavg()[0]:.1f} | converter: {converter}"
    )
    print(f"{'arch':9} {'Aura s':>8} {'llama.cpp s':>12} {'ratio':>7}  size MB")
    for arch in ARCHS:
        a, c = best[(arch, "aura")], best[(arch, "llama.cpp")]
        size_mb = (out / f"{arch}-aura.gguf").stat().st_size / 2**20 if not isinstance(a, str) else 0
        if isinstance(a, str) or isinstance(c, str):
            print(
                f"{arch:9} {a if isinstance(a, str) else f'{a:8.2f}'} | llama.cpp: "
                f"{c if isinstance(c, str) else f'{c:.2f}'}"
            )
            continue
        print(f"{arch:9} {a:8.2f} {c:12.2f} {c / a:6.2f}x  {size_mb:7.1f}")
    print(f"(os.cpu_count()={os.cpu_count()})")


if __name__ == "__main__":
    main()
