"""``aura data curate`` keeps each input record's own ``id`` and ``url`` and its other fields (under
``metadata``, as datatrove's readers do) in every format that has them (issue 36, item 9), and reads a
Hugging Face dataset streamed by name: FineWeb-2's Spanish subset, here a local copy laid out as the hub
serves it (``tests/fineweb2.py``), shared between tasks and cut at ``--max-documents``."""

from __future__ import annotations

import csv
import json

import pytest

from tests.conftest import run_aura_here
from tests.evidence import importorskip
from tests.fineweb2 import write_fineweb2
from tests.test_curate import curate_args, read_shards, spanish_docs

importorskip("datatrove", "datatrove")
importorskip("py3langid", "datatrove")

FAST = ("--no-minhash", "--no-exact-dedup", "--no-pii", "--workers", "1")
OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}


def test_records_keep_their_id_url_and_fields_in_every_format(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    es = spanish_docs()
    crawl = tmp_path / "crawl"
    crawl.mkdir()
    planted: dict[str, dict] = {}  # first words of the text -> what the output must carry

    def plant(i: int, fmt: str) -> dict:
        row = {"id": f"{fmt}-doc-{i}", "url": f"https://ejemplo.es/{fmt}/{i}", "licencia": "CC-BY-4.0", "text": es[i]}
        planted[es[i][:60]] = row
        return row

    with open(crawl / "crawl.jsonl", "w", encoding="utf-8") as f:  # a nested metadata object too
        for i in (0, 1):
            row = plant(i, "jsonl")
            f.write(json.dumps({**row, "metadata": {"dominio": "ejemplo.es"}}, ensure_ascii=False) + "\n")
    (crawl / "lista.json").write_text(json.dumps([plant(2, "json")], ensure_ascii=False), encoding="utf-8")
    with open(crawl / "tabla.csv", "w", encoding="utf-8", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["id", "url", "licencia", "text"])
        w.writeheader()
        w.writerow(plant(3, "csv"))
    pq.write_table(pa.Table.from_pylist([plant(4, "parquet"), plant(5, "parquet")]), crawl / "web.parquet")
    (crawl / "libro.txt").write_text(es[6].replace("\n", " ") + "\n", encoding="utf-8")  # a .txt has no fields: FILE#N

    r = run_aura_here(*curate_args(crawl, tmp_path / "out", *FAST))
    assert r.returncode == 0, r.stdout + r.stderr
    docs = read_shards(tmp_path / "out")
    assert len(docs) == 7
    for doc in docs:
        row = planted.get(doc["text"][:60])
        if row is None:
            assert doc["id"] == "libro.txt#0" and doc["metadata"]["source"] == "libro.txt"
            continue
        assert doc["id"] == row["id"]
        assert doc["metadata"]["url"] == row["url"] and doc["metadata"]["licencia"] == "CC-BY-4.0"
        assert "text" not in doc["metadata"] and "id" not in doc["metadata"]
        if row["id"].startswith("jsonl"):
            assert doc["metadata"]["dominio"] == "ejemplo.es"
    assert sorted(d["id"] for d in docs) == sorted([*(r["id"] for r in planted.values()), "libro.txt#0"])


def test_fineweb2_streamed_shared_between_tasks_and_limited(tmp_path):
    es = spanish_docs()[:12]
    mirror = tmp_path / "fineweb-2"
    rows = write_fineweb2(mirror, es, files=2)
    by_id = {r["id"]: r for r in rows}
    args = ("--hf-dataset", str(mirror), "--hf-config", "spa_Latn", "--tasks", "2", *FAST)
    r = run_aura_here("data", "curate", "--output-dir", str(tmp_path / "all"), *args, env=OFFLINE)
    assert r.returncode == 0, r.stdout + r.stderr
    docs = read_shards(tmp_path / "all")
    assert sorted(d["id"] for d in docs) == sorted(by_id)  # each record once, over two tasks
    for d in docs:
        row = by_id[d["id"]]
        assert d["text"][:60] == row["text"][:60]
        for key in ("url", "dump", "date", "file_path", "language_script", "minhash_cluster_size", "top_langs"):
            assert d["metadata"][key] == row[key], key
        assert d["metadata"]["language"] == "es"  # language and its score: this curation's own identification

    three = ("--hf-dataset", str(mirror), "--hf-config", "spa_Latn", "--tasks", "3", *FAST)  # more tasks than files
    r = run_aura_here("data", "curate", "--output-dir", str(tmp_path / "three"), *three, env=OFFLINE)
    assert r.returncode == 0, r.stdout + r.stderr
    assert sorted(d["id"] for d in read_shards(tmp_path / "three")) == sorted(by_id)

    r = run_aura_here(
        "data", "curate", "--output-dir", str(tmp_path / "five"), *args, "--max-documents", "5", env=OFFLINE
    )
    assert r.returncode == 0, r.stdout + r.stderr
    five = read_shards(tmp_path / "five")
    assert len(five) == 5 and {d["id"] for d in five} <= set(by_id)
    report = json.loads((tmp_path / "five" / ".curate" / "report.json").read_text(encoding="utf-8"))
    assert report["stages"][0]["docs_in"] == 5


def test_a_dataset_that_cannot_be_loaded_is_named(tmp_path):
    r = run_aura_here(
        "data",
        "curate",
        "--hf-dataset",
        str(tmp_path / "no-such-dataset"),
        "--output-dir",
        str(tmp_path / "out"),
        *FAST,
        env=OFFLINE,
    )
    assert r.returncode == 2 and "no-such-dataset" in r.stdout + r.stderr
    assert "Traceback" not in r.stdout + r.stderr


def test_parquet_output_keeps_the_fields_and_is_published(tmp_path):
    """``--output-format parquet``: records with different fields (a JSONL's url and metadata, another's score,
    a .txt without any) in one file, their metadata as JSON text (one schema for every row), and the shards
    published where ``aura data prepare`` finds them (datatrove names them 000_00000.parquet)."""
    import pyarrow.parquet as pq

    es = spanish_docs()
    crawl = tmp_path / "crawl"
    crawl.mkdir()
    rows = [
        {"id": "x1", "url": "https://ejemplo.es/1", "text": es[0], "metadata": {"dominio": "ejemplo.es"}},
        {"id": "x2", "text": es[1], "puntos": 3},
    ]
    (crawl / "a.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    (crawl / "b.txt").write_text(es[2].replace("\n", " ") + "\n", encoding="utf-8")
    r = run_aura_here(*curate_args(crawl, tmp_path / "out", "--output-format", "parquet", "--tasks", "1", *FAST))
    assert r.returncode == 0, r.stdout + r.stderr
    shards = sorted((tmp_path / "out").glob("*.parquet"))
    assert [s.name for s in shards] == ["00000.parquet"]
    got = {d["id"]: json.loads(d["metadata"]) for d in pq.read_table(shards[0]).to_pylist()}
    assert set(got) == {"x1", "x2", "b.txt#0"}
    assert got["x1"]["url"] == "https://ejemplo.es/1" and got["x1"]["dominio"] == "ejemplo.es"
    assert got["x2"]["puntos"] == 3 and got["b.txt#0"]["source"] == "b.txt"


def test_a_saved_dataset_keeps_its_ids_over_two_tasks(tmp_path):
    """A dataset saved with save_to_disk: each task reads its share, every record once, with its id and url."""
    import datasets

    es = spanish_docs()[:6]
    rows = [{"text": t, "id": f"guardado-{i}", "url": f"https://ejemplo.es/g/{i}"} for i, t in enumerate(es)]
    datasets.Dataset.from_list(rows).save_to_disk(str(tmp_path / "saved"))
    r = run_aura_here(
        "data",
        "curate",
        "--hf-dataset",
        str(tmp_path / "saved"),
        "--tasks",
        "2",
        "--output-dir",
        str(tmp_path / "out"),
        *FAST,
        env=OFFLINE,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    docs = read_shards(tmp_path / "out")
    assert sorted(d["id"] for d in docs) == sorted(r["id"] for r in rows)
    assert all(d["metadata"]["url"] == f"https://ejemplo.es/g/{d['id'].split('-')[1]}" for d in docs)


def _curate_ids(tmp_path, name: str, docs: dict[str, str], *extra: str) -> dict[str, dict]:
    """``aura data curate`` over one JSONL of ``docs`` (id -> text): the kept documents by id."""
    crawl = tmp_path / f"{name}-in"
    crawl.mkdir()
    (crawl / "docs.jsonl").write_text(
        "".join(json.dumps({"id": i, "text": t}, ensure_ascii=False) + "\n" for i, t in docs.items()), encoding="utf-8"
    )
    out = tmp_path / f"{name}-out"
    r = run_aura_here(*curate_args(crawl, out, *FAST, *extra))
    assert r.returncode == 0, r.stdout + r.stderr
    if "parquet" in extra:
        import pyarrow.parquet as pq

        rows = [row for s in sorted(out.glob("*.parquet")) for row in pq.read_table(s).to_pylist()]
        return {row["id"]: {**row, "metadata": json.loads(row["metadata"])} for row in rows}
    return {d["id"]: d for d in read_shards(out)}


def test_lang_threshold_keeps_what_py3langid_scores_above_it_written_as_parquet(tmp_path):
    """`--lang-threshold T`: exactly the documents py3langid itself (its own model, normalised probabilities)
    labels Spanish with probability >= T are kept, T chosen between the scores of these documents (two
    Spanish sentences followed by 0-3 sentences of Portuguese, Catalan, Italian or English); the output in
    `--output-format parquet` holds their texts unchanged and the score each was given."""
    from py3langid.langid import MODEL_FILE, LanguageIdentifier

    from tests.test_curate import OTHER

    es = spanish_docs()
    docs = {}
    for n, (lang, other) in enumerate(sorted(OTHER.items())):
        for k in range(4):
            docs[f"{lang}{k}"] = ". ".join(es[n * 4 + k].split(". ")[:2] + other.split(". ")[:k])
    ident = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
    scores = {i: ident.classify(t.replace("\n", " ")) for i, t in docs.items()}
    spanish = sorted(p for lang, p in scores.values() if lang == "es")
    assert len(spanish) >= 4 and len(spanish) < len(docs)  # some Spanish, some not
    mid = len(spanish) // 2
    threshold = round((spanish[mid - 1] + spanish[mid]) / 2, 6)
    assert spanish[mid - 1] < threshold < spanish[mid]
    kept = _curate_ids(
        tmp_path, "lang", docs, "--no-quality", "--lang-threshold", str(threshold), "--output-format", "parquet"
    )
    expected = {i for i, (lang, p) in scores.items() if lang == "es" and p >= threshold}
    assert set(kept) == expected and 0 < len(expected) < len(spanish)
    for i, row in kept.items():
        assert row["text"] == docs[i]
        assert row["metadata"]["language"] == "es"
        assert row["metadata"]["language_score"] == pytest.approx(scores[i][1], abs=1e-4)


def test_min_words_drops_exactly_the_documents_below_it(tmp_path):
    """`--min-words`: raising it from 40 to 80 removes exactly the documents kept at 40 that have fewer than 80
    words (counted here without datatrove: whitespace pieces holding a letter or digit), every other filter
    unchanged; documents of 25 to 130 words of real Spanish prose, none within 3 words of either limit."""
    import re

    sentences = [s.strip() + "." for p in spanish_docs()[:30] for s in p.replace("\n", " ").split(". ") if s.strip()]

    def words(t):
        return sum(bool(re.search(r"\w", w)) for w in t.split())

    docs, i = {}, 0
    for target in (25, 35, 50, 60, 70, 90, 100, 130, 30, 55, 75, 110):
        text = ""
        while words(text) < target:
            text = f"{text} {sentences[i % len(sentences)]}".strip()
            i += 1
        if all(abs(words(text) - limit) > 3 for limit in (40, 80)):
            docs[f"d{len(docs)}"] = text
    assert len(docs) >= 8
    low = _curate_ids(tmp_path, "w40", docs, "--min-words", "40", "--min-sentences", "1")
    high = _curate_ids(tmp_path, "w80", docs, "--min-words", "80", "--min-sentences", "1")
    assert all(words(docs[d]) >= 40 for d in low)
    assert set(high) == {d for d in low if words(docs[d]) >= 80}
    assert len(high) >= 2 and len(set(low) - set(high)) >= 2  # the limit decided something both ways
