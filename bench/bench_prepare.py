"""Benchmark: ``aura data prepare`` tokens/s against a plain single-process ``tokenizers`` loop.

Corpus (not shippable, mixed licences; ~7.5 MB, one paragraph per line, ~2 min, root + apt):

    bash scripts/build_bench_corpus.sh /tmp/bench_es.txt
    .venv/bin/python bench/bench_prepare.py /tmp/bench_es.txt

The script repeats the corpus until it holds at least --min-mb MB; every copy after the first gets a
"(k) " prefix on each paragraph so that deduplication keeps them and both sides tokenise exactly the
same documents. It trains one byte-level BPE tokenizer (aura.tokenizer.train.train_bpe), then times:

  peer:  for doc in docs: tok.encode(doc)       (tokenizers, one process, the documents in memory)
  aura:  python -m aura data prepare CORPUS ... (the real CLI, wall clock including start-up, reading,
         cleaning, dedup, split, shard writing, meta.json)

and prints tokens/s of each and the ratio. Both runs see the same documents and the same tokenizer.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path


def build_corpus(src: Path, dst: Path, min_mb: float) -> int:
    lines = [ln for ln in src.read_text(encoding="utf-8").splitlines() if ln.strip()]
    copies, size = 0, 0
    with open(dst, "w", encoding="utf-8") as f:
        while size < min_mb * 1e6:
            prefix = "" if copies == 0 else f"({copies}) "
            for ln in lines:
                f.write(prefix + ln + "\n")
            copies += 1
            size = f.tell()
    return copies


def run_prepare(corpus: Path, tok: Path, out: Path, workers: int) -> tuple[float, dict]:
    env = dict(os.environ, AURA_PLAIN="1", AURA_LANG="en")
    t = time.perf_counter()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "aura",
            "data",
            "prepare",
            str(corpus),
            "--tokenizer",
            str(tok),
            "--output-dir",
            str(out),
            "--doc-sep",
            "line",
            "--workers",
            str(workers),
            "--overwrite",
        ],
        env=env,
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - t
    if proc.returncode:
        sys.exit(proc.stdout + proc.stderr)
    return wall, json.loads((out / "meta.json").read_text())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("corpus", type=Path, help="Spanish text, one paragraph per line (scripts/build_bench_corpus.sh)")
    ap.add_argument("--min-mb", type=float, default=20.0)
    ap.add_argument("--vocab-size", type=int, default=32000)
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/aura_bench_prepare"))
    ap.add_argument(
        "--workers",
        type=int,
        nargs="+",
        default=[0, 1],
        help="aura --workers values to time (0 = all cores in worker processes; 1 = in-process)",
    )
    ap.add_argument("--repeats", type=int, default=2, help="alternating rounds; best time of each side")
    args = ap.parse_args()

    from tokenizers import Tokenizer

    from aura.tokenizer.train import train_bpe

    work = args.workdir
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    corpus = work / "corpus.txt"
    copies = build_corpus(args.corpus, corpus, args.min_mb)
    mb = corpus.stat().st_size / 1e6
    t = time.perf_counter()
    tok_dir = train_bpe(inputs=[str(args.corpus)], vocab_size=args.vocab_size, output_dir=work / "tok")
    print(
        f"corpus: {mb:.1f} MB ({copies} copies of {args.corpus}); tokenizer trained in {time.perf_counter() - t:.1f} s"
    )

    # Peer: a plain loop over the same documents (already in memory: reading is not charged to it).
    # The machine is shared, so peer and aura runs alternate and each keeps its best of --repeats.
    tok = Tokenizer.from_file(str(tok_dir / "tokenizer.json"))
    docs = [ln for ln in corpus.read_text(encoding="utf-8").splitlines() if ln.strip()]
    peer_s, aura_s, aura_meta = float("inf"), {w: float("inf") for w in args.workers}, {}
    for rep in range(args.repeats):
        t = time.perf_counter()
        peer_tokens = 0
        for doc in docs:
            peer_tokens += len(tok.encode(doc, add_special_tokens=False).ids) + 1  # + EOS, as aura writes
        peer_s = min(peer_s, time.perf_counter() - t)
        for w in args.workers:
            wall, aura_meta[w] = run_prepare(corpus, tok_dir, work / f"prepared-w{w}", w)
            aura_s[w] = min(aura_s[w], wall)
        print(
            f"round {rep + 1}: peer {peer_s:.2f} s, aura " + ", ".join(f"w{w} {aura_s[w]:.2f} s" for w in args.workers)
        )
    peer_rate = peer_tokens / peer_s
    print(f"peer  tokenizers loop (1 process): {peer_tokens:,} tokens in {peer_s:.2f} s = {peer_rate:,.0f} tokens/s")
    for w in args.workers:
        meta = aura_meta[w]
        tokens = sum(s["tokens"] for s in meta["splits"].values())
        rate = tokens / aura_s[w]
        print(
            f"aura  data prepare --workers {w}: {tokens:,} tokens in {aura_s[w]:.2f} s wall = {rate:,.0f} tokens/s"
            f"  ratio {rate / peer_rate:.2f}x (docs {meta['cleaning']['documents_kept']:,}, "
            f"dups {meta['cleaning']['duplicates']})"
        )
        from figures import figure, ratio

        figure(f"prepare_vs_tokenizers.workers_{w}.tokens_per_s", ratio(rate / peer_rate))
    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}"
    )


# reproduce: /tmp/bench_es.txt
# reproduce-needs: file:/tmp/bench_es.txt
# reproduce-quick: aura/resources/corpus_es/enciclopedia.txt --min-mb 0.1 --vocab-size 1000 --repeats 1 --workdir \
#     {tmp}/w

if __name__ == "__main__":
    main()
