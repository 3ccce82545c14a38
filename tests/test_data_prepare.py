"""`aura data prepare`: every input format, cleaning, dedup, split, exact shards, bad input, atomicity."""

from __future__ import annotations

import csv
import gzip
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from aura.core.errors import AuraError
from aura.data.tokens import TokenShards, is_prepared_dir, load_meta
from aura.text.readers import clean_text
from tests.conftest import RESOURCES, run_aura, run_aura_here


@pytest.fixture(scope="module")
def tok_dir(tmp_path_factory):
    from aura.tokenizer.train import train_bpe

    return train_bpe(
        inputs=[str(RESOURCES / "corpus_es")],
        vocab_size=300,
        output_dir=tmp_path_factory.mktemp("tok") / "tok",
        doc_sep="blankline",
    )


@pytest.fixture(scope="module")
def docs() -> list[str]:
    """40 distinct Spanish documents, some with awkward whitespace, accents, ¿¡ and emoji."""
    paras = [
        p for p in (RESOURCES / "corpus_es" / "narrativa.txt").read_text(encoding="utf-8").split("\n\n") if p.strip()
    ]
    out = [p.replace("\n", " ")[:300] for p in paras[:36]]
    out += [
        "  ¿Dónde   está\tla  señora Núñez?  ¡Aquí! 🤖",
        "cafe\u0301 con leche\u00a0y churros",
        "Línea con control\x07 y BOM\ufeff dentro.",
        "Año 2024: 1.234,56 € — «comillas».",
    ]
    return out


def _prepare(inputs, tok_dir, out, **kw):
    from aura.data.prepare import PrepareConfig, prepare

    kw.setdefault("workers", 1)
    kw.setdefault("val_fraction", 0.1)
    return prepare(PrepareConfig(inputs=[str(i) for i in inputs], tokenizer=str(tok_dir), output_dir=str(out), **kw))


def _decoded_docs(out, split):
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(out / "tokenizer" / "tokenizer.json"))
    shards = TokenShards(out, split)
    ids = shards.read(0, len(shards)).tolist()
    docs, cur = [], []
    for i in ids:
        if i == shards.eos_id:
            docs.append(tok.decode(cur, skip_special_tokens=False))
            cur = []
        else:
            cur.append(i)
    assert not cur  # every document ends with EOS
    return docs


def _check_exact(out, tok_dir, expected_docs):
    """Shards hold exactly encode(doc) + EOS for every kept document, in input order, per split."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tok_dir / "tokenizer.json"))
    train, val = _decoded_docs(out, "train"), _decoded_docs(out, "val")
    assert sorted(train + val) == sorted(expected_docs)
    assert train == [d for d in expected_docs if d in set(train)]
    shards = TokenShards(out, "train")
    want = [t for d in train for t in tok.encode(d, add_special_tokens=False).ids + [shards.eos_id]]
    assert shards.read(0, len(shards)).tolist() == want
    meta = load_meta(out)
    assert meta["splits"]["train"]["documents"] == len(train) and meta["splits"]["val"]["documents"] == len(val)
    return train, val


def _write(fmt, path, docs):
    if fmt == "txt-line":
        path.write_text("\n".join(docs) + "\n", encoding="utf-8")
    elif fmt == "txt-blank":
        path.write_text("\n\n".join(d.replace(". ", ".\n", 1) for d in docs) + "\n", encoding="utf-8")
    elif fmt in ("jsonl", "jsonl.gz"):
        text = "".join(json.dumps({"id": i, "text": d}, ensure_ascii=False) + "\n" for i, d in enumerate(docs))
        path.write_bytes(gzip.compress(text.encode()) if fmt.endswith("gz") else text.encode())
    elif fmt == "json":
        path.write_text(json.dumps([{"text": d} for d in docs], ensure_ascii=False), encoding="utf-8")
    elif fmt in ("csv", "tsv"):
        with open(path, "w", newline="", encoding="utf-8") as f:
            w = csv.writer(f, dialect="excel-tab" if fmt == "tsv" else "excel")
            w.writerow(["id", "text"])
            w.writerows([i, d] for i, d in enumerate(docs))
    elif fmt == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.table({"text": docs, "n": list(range(len(docs)))}), path)
    elif fmt == "txt.zst":
        import zstandard

        path.write_bytes(zstandard.ZstdCompressor().compress(("\n".join(docs) + "\n").encode()))
    elif fmt == "hf_disk":
        import datasets

        datasets.Dataset.from_dict({"text": docs}).save_to_disk(str(path))


FORMATS = {
    "txt-line": ("c.txt", {}),
    "txt-blank": ("c.txt", {"doc_sep": "blankline"}),
    "jsonl": ("c.jsonl", {}),
    "jsonl.gz": ("c.jsonl.gz", {}),
    "json": ("c.json", {}),
    "csv": ("c.csv", {}),
    "tsv": ("c.tsv", {}),
    "parquet": ("c.parquet", {}),
    "txt.zst": ("c.txt.zst", {}),
    "hf_disk": ("ds", {}),
}


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_each_format_roundtrips_exactly(fmt, docs, tok_dir, tmp_path):
    name, kw = FORMATS[fmt]
    _write(fmt, tmp_path / name, docs)
    out = _prepare([tmp_path / name], tok_dir, tmp_path / "out", **kw)
    expected = [clean_text(d.replace(". ", ".\n", 1) if fmt == "txt-blank" else d) for d in docs]
    train, val = _check_exact(out, tok_dir, expected)
    assert val and train
    meta = load_meta(out)
    assert meta["cleaning"]["documents_read"] == len(docs) and meta["sources"][0]["sha256"]


def test_whole_file_documents_keep_layout(tok_dir, tmp_path):
    (tmp_path / "in").mkdir()
    texts = ["def f():\n\tif x:\n\t\treturn 1\n", "Primera línea.\n\n\n\nSegunda  línea con ñ.\n", "tercero " * 5]
    for i, t in enumerate(texts):
        (tmp_path / "in" / f"{i}.txt").write_text(t, encoding="utf-8")
    out = _prepare([tmp_path / "in"], tok_dir, tmp_path / "out", doc_sep="file", val_fraction=0.3)
    _check_exact(
        out,
        tok_dir,
        [
            "def f():\n\tif x:\n\t\treturn 1",
            "Primera línea.\n\nSegunda  línea con ñ.",
            "tercero tercero tercero tercero tercero",
        ],
    )


def test_dedup_split_determinism_and_workers(docs, tok_dir, tmp_path):
    src = tmp_path / "c.txt"
    src.write_text("\n".join(docs + docs[:7] + [docs[3]]) + "\n", encoding="utf-8")
    a = _prepare([src], tok_dir, tmp_path / "a", seed=0, workers=1, val_fraction=0.2)
    b = _prepare([src], tok_dir, tmp_path / "b", seed=0, workers=2, val_fraction=0.2)
    c = _prepare([src], tok_dir, tmp_path / "c", seed=1, workers=2, val_fraction=0.2)
    assert load_meta(a)["cleaning"]["duplicates"] == 8
    for split in ("train", "val"):
        assert (a / f"{split}_00000.bin").read_bytes() == (b / f"{split}_00000.bin").read_bytes()
    assert _decoded_docs(a, "val") != _decoded_docs(c, "val")
    # order-independent: the same documents reversed land in the same splits
    rev = tmp_path / "r.txt"
    rev.write_text("\n".join(reversed(docs)) + "\n", encoding="utf-8")
    r = _prepare([rev], tok_dir, tmp_path / "r", seed=0, val_fraction=0.2)
    assert sorted(_decoded_docs(r, "val")) == sorted(_decoded_docs(a, "val"))


def test_shards_max_tokens_and_forced_val(docs, tok_dir, tmp_path):
    src = tmp_path / "c.txt"
    src.write_text("\n".join(docs) + "\n", encoding="utf-8")
    out = _prepare([src], tok_dir, tmp_path / "s", shard_tokens=500, val_fraction=0.001)
    meta = load_meta(out)
    assert len(meta["splits"]["train"]["shards"]) > 3 and meta["splits"]["val"]["documents"] == 1
    assert all(s["tokens"] <= 500 for s in meta["splits"]["train"]["shards"])
    _check_exact(out, tok_dir, [clean_text(d) for d in docs])
    out = _prepare([src], tok_dir, tmp_path / "m", max_tokens=1000, val_fraction=0.0)
    meta = load_meta(out)
    total = meta["splits"]["train"]["tokens"]
    assert 1000 <= total < 1000 + 400 and meta["cleaning"]["stopped_at_max_tokens"]
    assert meta["splits"]["val"]["tokens"] == 0 and len(TokenShards(out, "val")) == 0
    assert meta["dtype"] == "uint16" and meta["tokenizer"]["vocab_size"] == 300


def _bad_json(p):
    p.write_text('{"text": "hola que tal"}\n{"text": "roto\n{"text": "fin del archivo"}\n', encoding="utf-8")


BAD = {
    "empty": (lambda p: p.write_text(""), "x.txt", [], "is empty"),
    "no_supported": (lambda p: (p.mkdir(), (p / "a.bin").write_bytes(b"x")), "dir", [], "no supported files"),
    "bad_json": (_bad_json, "x.jsonl", [], "line 2: invalid JSON"),
    "missing_field": (lambda p: p.write_text('{"texto": "hola", "id": 1}\n'), "x.jsonl", [], "Fields found: texto, id"),
    "csv_column": (lambda p: p.write_text("id,cuerpo\n1,hola\n"), "x.csv", [], "Columns found: id, cuerpo"),
    "non_utf8": (
        lambda p: p.write_bytes("buenos días\nadiós\n".encode() + b"caf\xe9 con leche\n"),
        "x.txt",
        [],
        "byte offset 23 (line 3)",
    ),  # "buenos días\n" 13 B + "adiós\n" 7 B + "caf"
    "missing": (lambda p: None, "nope.txt", [], "does not exist"),
    "too_small": (lambda p: p.write_text("un único documento\n"), "x.txt", [], "too small"),
    "no_tokenizer": (lambda p: p.write_text("hola\nadiós\n"), "x.txt", ["--tokenizer", ""], "--tokenizer is missing"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_input_clear_error_nothing_left(case, tok_dir, tmp_path):
    make, name, extra, message = BAD[case]
    make(tmp_path / name)
    out = tmp_path / "out"
    r = run_aura_here("data", "prepare", tmp_path / name, "--tokenizer", tok_dir, "--output-dir", out, *extra)
    assert r.returncode == 2, r.stdout + r.stderr
    assert message in r.stderr
    if case not in ("too_small", "no_tokenizer"):
        assert str(tmp_path / name) in r.stderr
    assert "Traceback" not in r.stderr
    assert not out.exists() and not list(tmp_path.glob(".tmp-*"))


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads /proc/PID/status (Linux)")
def test_workers_do_not_inherit_the_callers_signal_handlers(docs, tok_dir, tmp_path):
    """Called inside a process with threads and a Python SIGTERM handler (a pytest worker, a program that
    imports aura), the pool's workers must not be forks of it: a fork inherits the handler and any lock
    another thread holds at that instant, and a worker stuck on such a lock then survives the SIGTERM of
    ``Pool.terminate()``: a refused input hung CI for 15 minutes a test. Every descendant process seen while
    ``prepare`` runs must leave SIGTERM to the default action (SigCgt of /proc/PID/status)."""
    import threading

    import psutil

    src = tmp_path / "c.txt"
    src.write_text("\n".join(f"({k}) {d}" for k in range(400) for d in docs) + "\n", encoding="utf-8")
    previous = signal.signal(signal.SIGTERM, lambda *a: None)
    result: list = []
    worker = threading.Thread(target=lambda: result.append(_prepare([src], tok_dir, tmp_path / "o", workers=2)))
    seen: dict[int, bool] = {}
    try:
        worker.start()
        while worker.is_alive():
            for child in psutil.Process().children(recursive=True):
                try:
                    with open(f"/proc/{child.pid}/status") as f:
                        caught = int(next(ln for ln in f if ln.startswith("SigCgt:")).split()[1], 16)
                except (OSError, StopIteration):
                    continue
                seen[child.pid] = seen.get(child.pid, False) or bool(caught >> (signal.SIGTERM - 1) & 1)
            time.sleep(0.005)
        worker.join()
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert result and load_meta(result[0])["cleaning"]["documents_kept"] == 400 * len(docs)
    assert len(seen) >= 2, seen  # the two workers were seen
    assert not any(seen.values()), f"processes with this process's SIGTERM handler: {seen}"


def test_bad_records_and_replace_continue_counted(tok_dir, tmp_path):
    _bad_json(tmp_path / "x.jsonl")
    (tmp_path / "y.txt").write_bytes(b"buenos d\xedas\nadi\xf3s amigo\nhola mundo\n")
    r = run_aura(
        "data",
        "prepare",
        tmp_path / "x.jsonl",
        tmp_path / "y.txt",
        "--tokenizer",
        tok_dir,
        "--output-dir",
        tmp_path / "out",
        "--skip-bad-records",
        "--errors",
        "replace",
    )
    assert r.returncode == 0, r.stderr
    cleaning = load_meta(tmp_path / "out")["cleaning"]
    assert cleaning["bad_records"] == 1 and cleaning["bad_encoding"] == 2 and cleaning["documents_kept"] == 5
    r = run_aura(
        "data",
        "prepare",
        tmp_path / "y.txt",
        "--tokenizer",
        tok_dir,
        "--output-dir",
        tmp_path / "l",
        "--encoding",
        "latin-1",
    )
    assert r.returncode == 0 and "días" in "".join(
        _decoded_docs(tmp_path / "l", "train") + _decoded_docs(tmp_path / "l", "val")
    )


def test_rerun_is_noop_force_rebuilds_foreign_dir_refused(docs, tok_dir, tmp_path):
    src = tmp_path / "c.txt"
    src.write_text("\n".join(docs) + "\n", encoding="utf-8")
    args = ["data", "prepare", src, "--tokenizer", tok_dir, "--output-dir", tmp_path / "out"]
    assert run_aura(*args).returncode == 0
    first = (tmp_path / "out" / "meta.json").read_text()
    r = run_aura(*args)
    assert r.returncode == 0 and "Nothing to do" in r.stdout
    assert (tmp_path / "out" / "meta.json").read_text() == first
    r = run_aura_here(*args, "--seed", "3")
    assert r.returncode == 2 and "--overwrite" in r.stderr
    r = run_aura(*args, "--overwrite")
    assert r.returncode == 0 and "Nothing to do" not in r.stdout
    assert json.loads((tmp_path / "out" / "meta.json").read_text())["created"]
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.md").write_text("no borrar")
    r = run_aura_here(
        "data",
        "prepare",
        src,
        "--tokenizer",
        tok_dir,
        "--output-dir",
        tmp_path / "mine",
        "--overwrite",
        env={"AURA_LANG": "es"},
    )
    assert r.returncode == 2 and "no lo creó Aura" in r.stderr
    assert (tmp_path / "mine" / "notes.md").read_text() == "no borrar"


def test_spanish_messages(tok_dir, tmp_path):
    (tmp_path / "x.jsonl").write_text('{"texto": "hola"}\n', encoding="utf-8")
    r = run_aura_here(
        "data",
        "prepare",
        tmp_path / "x.jsonl",
        "--tokenizer",
        tok_dir,
        "--output-dir",
        tmp_path / "o",
        env={"AURA_LANG": "es"},
    )
    assert r.returncode == 2 and "no tiene el campo 'text'. Campos encontrados: texto" in r.stderr


def test_killed_midway_leaves_nothing_complete(docs, tok_dir, tmp_path):
    big = tmp_path / "big.txt"
    with open(big, "w", encoding="utf-8") as f:
        for i in range(60_000):
            f.write(f"{i} {docs[i % len(docs)]}\n")
    out = tmp_path / "out"
    env = dict(os.environ, AURA_PLAIN="1", AURA_LANG="en")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "aura",
            "data",
            "prepare",
            str(big),
            "--tokenizer",
            str(tok_dir),
            "--output-dir",
            str(out),
            "--workers",
            "1",
            "--shard-tokens",
            "20000",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + 120
    while time.time() < deadline and not any(p.glob("train_*.bin") for p in tmp_path.glob(".tmp-out-*")):
        assert proc.poll() is None, "prepare finished before it could be interrupted"
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not is_prepared_dir(out)
    with pytest.raises(AuraError):
        load_meta(out)
    with pytest.raises(AuraError):
        TokenShards(out, "train")
    r = run_aura("data", "prepare", big, "--tokenizer", tok_dir, "--output-dir", out, "--max-tokens", "50000")
    assert r.returncode == 0, r.stderr
    assert len(TokenShards(out, "train")) >= 49_000 and not list(tmp_path.glob(".tmp-*"))
