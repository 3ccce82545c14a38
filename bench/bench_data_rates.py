"""The data stages' rates that ``aura pipeline plan`` assumes (``aura/pipeline/estimate.py``: CURATE_BYTES_PER_S,
TOKENIZER_BYTES_PER_S, PREPARE_BYTES_PER_S): bytes of input text per CPU-second of one process.

Builds web-like Spanish documents (12 sentences drawn at random from the bundled corpus, so that few are
copies) laid out as FineWeb-2's ``spa_Latn`` (parquet with its columns, read by ``aura data curate
--hf-dataset DIR --hf-config spa_Latn``, the code that streams the hub), then runs, each in a fresh
``python -m aura`` with one worker: ``data curate`` (default filters and dedup), ``tokenizer train`` (32k) on
its output and ``data prepare`` of that output. Each is run on a small and a large corpus and the rate is
the difference of bytes over the difference of CPU seconds (user + system of the process tree), so the
interpreter's start-up and imports cancel out and the load of other jobs barely matters.

    .venv/bin/python bench/bench_data_rates.py [--docs 4000] [--small 200]
"""

from __future__ import annotations

import argparse
import os
import random
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (
    "---\nconfigs:\n- config_name: spa_Latn\n  data_files:\n  - split: train\n    path: data/spa_Latn/train/*\n---\n"
)


def sentences() -> list[str]:
    text = " ".join(p.read_text(encoding="utf-8") for p in sorted((ROOT / "aura/resources/corpus_es").glob("*.txt")))
    return [s for s in re.split(r"(?<=[.!?])\s+", " ".join(text.split())) if len(s.split()) >= 6]


def build(root: Path, n: int, seed: int) -> int:
    """n documents as FineWeb-2's layout under root; returns the bytes of their text."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng, pool = random.Random(seed), sentences()
    docs = [
        " ".join(rng.choice(pool) for _ in range(6)) + "\n" + " ".join(rng.choice(pool) for _ in range(6))
        for _ in range(n)
    ]
    (root / "data/spa_Latn/train").mkdir(parents=True)
    (root / "README.md").write_text(README, encoding="utf-8")
    rows = {
        "text": docs,
        "id": [f"<urn:uuid:{seed}-{i}>" for i in range(n)],
        "dump": ["CC-MAIN-2024-10"] * n,
        "url": [f"https://ejemplo.es/{i}" for i in range(n)],
        "language": ["spa"] * n,
        "language_score": [0.99] * n,
    }
    pq.write_table(pa.table(rows), root / "data/spa_Latn/train/000_00000.parquet")
    return sum(len(d.encode("utf-8")) for d in docs)


def cpu_of(args: list[str], env: dict) -> tuple[float, float]:
    """(CPU seconds of the process tree, wall seconds) of one ``python -m aura`` run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "aura", *args], env=env, cwd=ROOT, capture_output=True, text=True)
    wall = time.monotonic() - t0
    if proc.returncode != 0:
        sys.exit(f"aura {' '.join(args)} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), wall


def run_all(root: Path, env: dict) -> dict[str, tuple[float, float, int]]:
    """{stage: (cpu s, wall s, input bytes)} for one corpus under root."""
    out = {}
    cur, tok, prep = root / "curated", root / "tokenizer", root / "prepared"
    size = sum(f.stat().st_size for f in (root / "fw").rglob("*.parquet"))
    text_bytes = int((root / "text_bytes").read_text())
    cpu, wall = cpu_of(
        [
            "data",
            "curate",
            "--hf-dataset",
            str(root / "fw"),
            "--hf-config",
            "spa_Latn",
            "--workers",
            "1",
            "--tasks",
            "1",
            "--output-dir",
            str(cur),
        ],
        env,
    )
    out["curate"] = (cpu, wall, text_bytes)
    curated = sum(f.stat().st_size for f in cur.glob("*.jsonl.gz"))
    import gzip

    curated_text = sum(len(line) for f in cur.glob("*.jsonl.gz") for line in gzip.open(f, "rb"))
    cpu, wall = cpu_of(["tokenizer", "train", str(cur), "--vocab-size", "32000", "--output-dir", str(tok)], env)
    out["tokenizer"] = (cpu, wall, curated_text)
    cpu, wall = cpu_of(
        ["data", "prepare", str(cur), "--tokenizer", str(tok), "--workers", "1", "--output-dir", str(prep)], env
    )
    out["prepare"] = (cpu, wall, curated_text)
    print(
        f"  {root.name}: parquet {size:,} B, text {text_bytes:,} B, curated jsonl.gz {curated:,} B "
        f"({curated_text:,} B of JSON lines)"
    )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", type=int, default=4000)
    ap.add_argument("--small", type=int, default=200)
    args = ap.parse_args()
    env = {
        **os.environ,
        "AURA_LANG": "en",
        "AURA_PLAIN": "1",
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "PYTHONPATH": str(ROOT),
    }
    with tempfile.TemporaryDirectory() as tmp:
        results = {}
        for name, n in (("small", args.small), ("large", args.docs)):
            root = Path(tmp) / name
            root.mkdir()
            (root / "text_bytes").write_text(str(build(root / "fw", n, seed=len(name))))
            results[name] = run_all(root, env)
    print(f"CPU: {os.cpu_count()} cores; load {os.getloadavg()[0]:.2f}")
    for stage in ("curate", "tokenizer", "prepare"):
        (c0, w0, b0), (c1, w1, b1) = results["small"][stage], results["large"][stage]
        rate = (b1 - b0) / max(c1 - c0, 1e-9)
        print(
            f"{stage:10s} small {c0:6.1f} CPU-s ({w0:5.1f} s wall), large {c1:6.1f} CPU-s ({w1:5.1f} s wall): "
            f"{rate:,.0f} bytes per CPU-second"
        )
        from figures import figure

        figure(f"data_rates.{stage}.bytes_per_cpu_s", f"{rate:,.0f}")


# reproduce:
# reproduce-needs: module:datatrove
# reproduce-quick: --docs 60 --small 20
# reproduce-quick-needs: module:datatrove

if __name__ == "__main__":
    main()
