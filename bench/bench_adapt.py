"""Adapting an English model to Spanish three ways, for the same number of training tokens.

    bash scripts/build_bench_corpus.sh /tmp/bench_es.txt; bash scripts/build_bench_corpus_en.sh /tmp/bench_en.txt
    .venv/bin/python bench/bench_adapt.py --es /tmp/bench_es.txt --en /tmp/bench_en.txt [--base-steps 300]
        [--adapt-tokens 300000] [--add-tokens 1000] [--work DIR]

1. An English byte-level BPE (``--vocab``, 4096) and a small Llama (``--dim`` 128, ``--layers`` 4, ``--seq``
   128, 4 heads, 2 KV heads, MLP 3 d) pretrained on English from scratch with ``aura pretrain``.
2. ``aura tokenizer extend`` adds ``--add-tokens`` Spanish tokens to the English tokenizer.
3. From that base, ``aura pretrain --init-from`` on Spanish for ``--adapt-tokens`` tokens: (a) with the base
   tokenizer; (b) with the extended tokenizer (new rows = mean of their pieces); (c) like (b) with 20 %
   English replay (``--data es=0.8:... en=0.2:...``).
Reports Spanish fertility and bytes per token before/after the extension, and the bits per byte of every
model on held-out Spanish and English (bits per byte compare models with different tokenizers).
The ratio printed last is (a)'s Spanish bits per byte over (b)'s: above 1 means the extension helped.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

COMMON = dict(batch_size=16, log_interval=50, save_steps=0, sample_tokens=0, precision="fp32", eval_batches=20, seed=0)


def split(corpus: Path, work: Path, name: str, *, train_mb: float, eval_kb: int) -> tuple[Path, Path, list[str]]:
    """Train / held-out files of a corpus (by a hash of each paragraph: the same split on every run)."""
    train, held, size, held_size = [], [], 0, 0
    for line in corpus.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        if int(hashlib.md5(line.encode()).hexdigest(), 16) % 20 == 0:
            if held_size < eval_kb * 1024:
                held.append(line)
                held_size += len(line.encode())
        elif size < train_mb * 2**20:
            train.append(line)
            size += len(line.encode())
    t, h = work / f"{name}_train.txt", work / f"{name}_heldout.txt"
    t.write_text("\n".join(train) + "\n", encoding="utf-8")
    h.write_text("\n".join(held) + "\n", encoding="utf-8")
    return t, h, held


def prepared(text: Path, tok: Path, out: Path) -> Path:
    from aura.data.prepare import PrepareConfig, prepare

    if not (out / "meta.json").is_file():
        prepare(
            PrepareConfig(inputs=[str(text)], tokenizer=str(tok), output_dir=str(out), val_fraction=0.02, workers=1)
        )
    return out


def pretrain(out: Path, **kw) -> float:
    from aura.train.pretrain import PretrainConfig, pretrain as run

    start = time.perf_counter()
    if not (out / "final" / "model.safetensors").is_file():
        assert run(PretrainConfig(output_dir=out, overwrite=True, **{**COMMON, **kw})) == 0
    return time.perf_counter() - start


def bits_per_byte(model_dir: Path, docs: list[str], *, seq: int = 128) -> float:
    """Bits per UTF-8 byte of ``docs`` (each followed by EOS) under the model, in windows of ``seq`` tokens."""
    import torch
    import torch.nn.functional as F
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    ids: list[int] = []
    for d in docs:
        ids += tok(d, add_special_tokens=False).input_ids + [tok.eos_token_id]
    stream = torch.tensor(ids)
    nats = 0.0
    with torch.no_grad():
        for start in range(0, len(stream) - 1, seq):
            window = stream[start : start + seq + 1]
            if len(window) < 2:
                break
            logits = model(window[None, :-1]).logits[0]
            nats += float(F.cross_entropy(logits.float(), window[1:], reduction="sum"))
    n_bytes = sum(len(d.encode("utf-8")) + 1 for d in docs)  # +1: the document boundary (EOS)
    return nats / math.log(2) / n_bytes


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--es", default="/tmp/bench_es.txt")
    ap.add_argument("--en", default="/tmp/bench_en.txt")
    ap.add_argument("--work", default="/tmp/bench_adapt")
    ap.add_argument("--base-steps", type=int, default=300)
    ap.add_argument("--adapt-tokens", type=int, default=300_000)
    ap.add_argument("--add-tokens", type=int, default=1000)
    ap.add_argument("--eval-kb", type=int, default=60)
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--seq", type=int, default=128)
    args = ap.parse_args()
    model = dict(
        model_preset="manual",
        arch="llama",
        embed_size=args.dim,
        num_layers=args.layers,
        num_heads=4,
        num_kv_heads=2,
        intermediate_size=3 * args.dim,
        seq_length=args.seq,
    )
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    from tokenizers import Tokenizer

    from aura.tokenizer.extend import TokenizerExtendConfig, extend_tokenizer, measure
    from aura.tokenizer.train import train_bpe

    es_train, _, es_held = split(Path(args.es), work, "es", train_mb=2.0, eval_kb=args.eval_kb)
    en_train, _, en_held = split(Path(args.en), work, "en", train_mb=2.0, eval_kb=args.eval_kb)
    tok = work / "tok_en"
    if not (tok / "tokenizer.json").is_file():
        train_bpe(inputs=[str(en_train)], vocab_size=args.vocab, output_dir=tok, force=True)
    ext = work / "tok_ext"
    if not (ext / "tokenizer.json").is_file():
        extend_tokenizer(
            TokenizerExtendConfig(
                base=str(tok), inputs=[str(es_train)], add_tokens=args.add_tokens, output_dir=str(ext), overwrite=True
            )
        )
    fert = {
        name: {
            lang: measure(Tokenizer.from_file(str(t / "tokenizer.json")), held)
            for lang, held in (("es", es_held), ("en", en_held))
        }
        for name, t in (("base", tok), ("ext", ext))
    }
    en_base = prepared(en_train, tok, work / "data_en_base")
    es_base = prepared(es_train, tok, work / "data_es_base")
    es_ext = prepared(es_train, ext, work / "data_es_ext")
    en_ext = prepared(en_train, ext, work / "data_en_ext")
    times = {
        "base": pretrain(work / "base", data=[str(en_base)], max_steps=args.base_steps, learning_rate=2e-3, **model)
    }
    base = work / "base" / "final"
    adapt = dict(init_from=str(base), seq_length=args.seq, max_tokens=args.adapt_tokens, learning_rate=1e-3)
    times["a"] = pretrain(work / "a", data=[str(es_base)], **adapt)
    times["b"] = pretrain(work / "b", data=[str(es_ext)], tokenizer=str(ext), **adapt)
    times["c"] = pretrain(work / "c", data=[f"es=0.8:{es_ext}", f"en=0.2:{en_ext}"], tokenizer=str(ext), **adapt)
    rows = {}
    for name, d in (
        ("base (English)", base),
        ("(a) base tokenizer", work / "a" / "final"),
        ("(b) extended + mean init", work / "b" / "final"),
        ("(c) (b) + 20 % English", work / "c" / "final"),
    ):
        rows[name] = {
            "es_bpb": bits_per_byte(d, es_held, seq=args.seq),
            "en_bpb": bits_per_byte(d, en_held, seq=args.seq),
        }
    result = {"fertility": fert, "bpb": rows, "seconds": times, "args": vars(args)}
    (work / "result.json").write_text(json.dumps(result, indent=1))
    print("\nFertility on held-out text (tokens/word, bytes/token):")
    for name in ("base", "ext"):
        print(
            f"  {name:5s} es {fert[name]['es']['tokens_per_word']:.3f} t/w {fert[name]['es']['bytes_per_token']:.3f} "
            f"B/t | en {fert[name]['en']['tokens_per_word']:.3f} t/w {fert[name]['en']['bytes_per_token']:.3f} B/t"
        )
    print("\n| Model | Spanish bpb | English bpb |\n|---|---|---|")
    for name, r in rows.items():
        print(f"| {name} | {r['es_bpb']:.4f} | {r['en_bpb']:.4f} |")
    a, b = rows["(a) base tokenizer"]["es_bpb"], rows["(b) extended + mean init"]["es_bpb"]
    print(f"\nSpanish bpb (a)/(b): {a / b:.3f}x; seconds: {json.dumps({k: round(v) for k, v in times.items()})}")
    from figures import figure

    figure("adapt.spanish_bpb.a_over_b", f"{a / b:.2f}×")
    for name, r in rows.items():
        figure(f"adapt.bpb.{name.split(' ')[0]}", f"es {r['es_bpb']:.3f}, en {r['en_bpb']:.3f}")


# reproduce: --es /tmp/bench_es.txt --en /tmp/bench_en.txt --work /tmp/bench_adapt_run --vocab 2048 --dim 64 \
#     --layers 2 --seq 64 --base-steps 150 --adapt-tokens 60000 --add-tokens 500 --eval-kb 20
# reproduce-needs: file:/tmp/bench_es.txt file:/tmp/bench_en.txt
# reproduce-quick: --es aura/resources/corpus_es/enciclopedia.txt --en README.en.md --work {tmp}/w --vocab 400 --dim \
#     32 --layers 1 --seq 32 --base-steps 2 --adapt-tokens 1500 --add-tokens 20 --eval-kb 2

if __name__ == "__main__":
    main()
