"""A local copy of FineWeb-2's Spanish subset as the hub lays it out (``HuggingFaceFW/fineweb-2``: a README
whose YAML names each config's files, ``data/spa_Latn/train/*.parquet`` with FineWeb-2's columns), so
``datasets.load_dataset(DIR, "spa_Latn", split="train", streaming=True)`` runs the very code that streams
the hub, without a network."""

from __future__ import annotations

from pathlib import Path

README = """---
configs:
- config_name: spa_Latn
  data_files:
  - split: train
    path: data/spa_Latn/train/*
  - split: test
    path: data/spa_Latn/test/*
---
# FineWeb-2 (a local copy of the layout, for tests)
"""


def fineweb2_row(i: int, text: str) -> dict:
    """One record with FineWeb-2's columns (values shaped like the real ones)."""
    return {
        "text": text,
        "id": f"<urn:uuid:00000000-0000-4000-8000-{i:012d}>",
        "dump": "CC-MAIN-2024-10",
        "url": f"https://ejemplo.es/noticias/{i}",
        "date": "2024-02-21T10:11:12Z",
        "file_path": f"s3://commoncrawl/crawl-data/CC-MAIN-2024-10/segments/{i}.warc.gz",
        "language": "spa",
        "language_score": 0.99 - i / 1000,
        "language_script": "Latn",
        "minhash_cluster_size": 1 + i % 3,
        "top_langs": '{"spa_Latn_score": 0.99}',
    }


def write_fineweb2(root: Path, docs: list[str], *, files: int = 2) -> list[dict]:
    """``docs`` as FineWeb-2's ``spa_Latn`` train split in ``files`` parquet files (+ a one-row test split);
    returns the rows written."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    train = root / "data" / "spa_Latn" / "train"
    test = root / "data" / "spa_Latn" / "test"
    train.mkdir(parents=True)
    test.mkdir(parents=True)
    (root / "README.md").write_text(README, encoding="utf-8")
    rows = [fineweb2_row(i, t) for i, t in enumerate(docs)]
    per = -(-len(rows) // files)
    for k in range(files):
        part = rows[k * per : (k + 1) * per]
        pq.write_table(pa.Table.from_pylist(part), train / f"000_{k:05d}.parquet")
    pq.write_table(pa.Table.from_pylist([fineweb2_row(10**6, "Prueba.")]), test / "000_00000.parquet")
    return rows
