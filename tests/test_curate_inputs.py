"""``aura data curate`` inputs and executors beyond the mixed crawl of ``test_curate.py``: HTML pages
shipped inside JSONL/parquet text fields go through trafilatura like HTML files; the input walk is the
one ``aura data prepare`` uses; ``--executor slurm`` hands the user's options to datatrove's
``SlurmPipelineExecutor`` (the sbatch scripts are written and checked; only ``sbatch`` itself, which
needs a cluster, is replaced)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.conftest import run_aura_here
from tests.evidence import importorskip
from tests.test_curate import COOKIE, _html, curate_args, read_shards, spanish_docs

importorskip("datatrove", "datatrove")
importorskip("py3langid", "datatrove")

FAST = ("--no-minhash", "--no-exact-dedup", "--workers", "1")


def test_html_pages_inside_jsonl_and_parquet_are_extracted(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    es = spanish_docs()
    crawl = tmp_path / "crawl"
    crawl.mkdir()
    pages = [_html(f"Artículo {i}", es[i]) for i in range(3)]
    pages[1] = "\n  " + pages[1].replace("<!DOCTYPE html>", "")  # a page that opens with <html ...>
    rows = [{"url": f"https://ejemplo.es/{i}", "html": p} for i, p in enumerate(pages)]
    rows.append({"url": "https://ejemplo.es/texto", "html": es[3]})  # plain text in the same field
    with open(crawl / "crawl.jsonl", "w", encoding="utf-8") as f:
        f.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    pq.write_table(pa.table({"html": [_html("Página", es[4])]}), crawl / "pages.parquet")
    r = run_aura_here(*curate_args(crawl, tmp_path / "out", "--text-field", "html", *FAST))
    assert r.returncode == 0, r.stdout + r.stderr
    texts = [d["text"] for d in read_shards(tmp_path / "out")]
    assert len(texts) == 5
    for i in range(5):
        first = es[i].split("\n")[0][:60]
        assert sum(first in t for t in texts) == 1, first
    joined = "\n".join(texts)
    for furniture in ("<p>", "<html", "Inicio | Noticias", "Todos los derechos reservados", COOKIE[:30]):
        assert furniture not in joined
    report = json.loads((tmp_path / "out" / ".curate" / "report.json").read_text(encoding="utf-8"))
    extract = next(s for s in report["stages"] if s["stage"] == "extract")
    assert extract["docs_out"] == 5 and extract["chars_in"] - extract["chars_out"] > 4 * len(COOKIE)


def test_is_html_document_looks_at_the_start_only():
    from aura.data.curate.readers import is_html_document

    for page in (
        "<!DOCTYPE html><html>",
        "\ufeff  <!doctype HTML PUBLIC '-//W3C//DTD XHTML 1.0'>",
        "\n<html lang='es'><body>",
        "<HTML>",
        "<?xml version='1.0'?>\n<!DOCTYPE html>",
    ):
        assert is_html_document(page), page
    for text in ("Hola <b>mundo</b>", "<p>Un párrafo</p>", "<htmlx>", "El elemento <html> abre la página.", ""):
        assert not is_html_document(text), text


def test_one_walk_for_prepare_and_curate(tmp_path):
    """Curation walks inputs with the text layer's walk: same order, same hidden-entry rule, same
    patterns; it only adds its own formats (WARC/WET, HTML)."""
    from aura.core.errors import AuraError
    from aura.data.curate.readers import find_inputs
    from aura.text.sources import expand_inputs

    (tmp_path / "d" / "sub").mkdir(parents=True)
    (tmp_path / "d" / ".hidden").mkdir()
    for name in ("b.jsonl", "a.txt", "sub/c.jsonl.gz", ".hidden/x.txt", "sub/.y.txt", "notes.md"):
        (tmp_path / "d" / name).write_bytes(b"hola\n")
    (tmp_path / "d" / "sub" / "crawl.warc.gz").write_bytes(b"x")
    (tmp_path / "d" / "page.html").write_bytes(b"<html></html>")
    text_files = [s.path for s in expand_inputs([str(tmp_path / "d"), str(tmp_path / "d" / "*.txt")])]
    curate_files = find_inputs([str(tmp_path / "d"), str(tmp_path / "d" / "*.txt")])
    assert [Path(p).name for p in text_files] == ["a.txt", "b.jsonl", "c.jsonl.gz", "a.txt"]
    assert [Path(f.path).name for f in curate_files] == [
        "a.txt",
        "b.jsonl",
        "page.html",
        "c.jsonl.gz",
        "crawl.warc.gz",
    ]  # sorted walk, a path read once
    assert [f.kind for f in curate_files] == ["text", "text", "html", "text", "warc"]
    assert [f.path for f in curate_files if f.kind == "text"] == text_files[:3]
    with pytest.raises(AuraError, match="does not exist"):
        find_inputs([str(tmp_path / "nada" / "*.jsonl")])
    with pytest.raises(AuraError, match="Unsupported format.*WARC/WET"):
        find_inputs([str(tmp_path / "d" / "notes.md")])
    (tmp_path / "e").mkdir()
    (tmp_path / "e" / "notes.md").write_bytes(b"x")
    with pytest.raises(AuraError, match="holds no supported files.*WARC/WET"):
        find_inputs([str(tmp_path / "e")])


def test_slurm_executor_gets_the_users_options(tmp_path, monkeypatch):
    """`--executor slurm` writes one sbatch array job per stage with the user's partition, time, CPUs,
    memory, QOS and tasks running at once, each stage depending on the one before, activating this environment, and a
    pickled
    executor that unpickles into Aura's pipeline (what `launch_pickled_pipeline` does on the cluster).
    Never run on a real Slurm cluster: only `sbatch` is replaced, by a recorder that returns job ids."""
    import dill
    from datatrove.executor import slurm

    from aura.data.curate.readers import CurateReader

    submitted: list[dict] = []

    def fake_sbatch(script: str, job_id_retriever, *args: str) -> str:
        job_id = job_id_retriever(f"Submitted batch job {1000 + len(submitted)}")
        submitted.append({"script": script, "args": args, "id": job_id})
        return job_id

    monkeypatch.setattr(slurm, "launch_slurm_job", fake_sbatch)
    (tmp_path / "in.jsonl").write_text(json.dumps({"text": spanish_docs()[0]}) + "\n", encoding="utf-8")
    out = tmp_path / "out"
    r = run_aura_here(
        *curate_args(
            tmp_path / "in.jsonl",
            out,
            "--executor",
            "slurm",
            "--slurm-partition",
            "cpu-long",
            "--slurm-time",
            "02:30:00",
            "--slurm-cpus",
            "3",
            "--slurm-mem-gb",
            "5",
            "--slurm-qos",
            "high",
            "--slurm-max-running",
            "3",
            "--minhash-buckets",
            "4",
        )
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "submitted to Slurm" in r.stdout + r.stderr
    assert not list(out.glob("0*.jsonl.gz"))  # nothing is published before the jobs have run
    jobs = [j for j in submitted if "launch_pickled_pipeline" in j["script"]]
    merges = [j for j in submitted if "merge_stats" in j["script"]]
    names = ["filter", "exact_find", "minhash_signatures", "minhash_buckets", "minhash_cluster", "final"]
    assert [j["script"].split("--job-name=")[1].split("\n")[0] for j in jobs] == [f"aura-curate-{n}" for n in names]
    assert len(merges) == len(jobs)
    arrays = {
        "filter": 1,
        "exact_find": 1,
        "minhash_signatures": 1,
        "minhash_buckets": 4,
        "minhash_cluster": 1,
        "final": 1,
    }
    for i, (name, job) in enumerate(zip(names, jobs)):
        script = job["script"]
        for directive in (
            "--partition=cpu-long",
            "--time=02:30:00",
            "--cpus-per-task=3",
            "--mem-per-cpu=5G",
            "--qos=high",
            f"--array=0-{arrays[name] - 1}%3",
        ):  # at most 3 tasks at once
            assert f"#SBATCH {directive}\n" in script, (name, directive)
        assert f"source {Path(sys.prefix) / 'bin' / 'activate'}" in script
        deps = [a for a in job["args"] if a.startswith("--dependency=")]
        assert deps == ([f"--dependency=afterok:{jobs[i - 1]['id']}"] if i else []), (name, job["args"])
    pik = out / ".curate" / "work" / "logs" / "filter" / "executor.pik"
    with open(pik, "rb") as f:
        executor = dill.load(f)
    assert isinstance(executor, slurm.SlurmPipelineExecutor)
    assert (executor.partition, executor.time, executor.cpus_per_task, executor.mem_per_cpu_gb, executor.qos) == (
        "cpu-long",
        "02:30:00",
        3,
        5,
        "high",
    )
    reader = executor.pipeline[0]
    assert isinstance(reader, CurateReader) and [Path(f.path).name for f in reader.files] == ["in.jsonl"]


def test_language_codes_are_the_models_without_loading_it():
    """--languages is checked against a list of codes, not the loaded model (70 MB and a fraction of a
    second in the main process, which only forks workers); the list must be the model's labels."""
    from aura.data.curate.langid import LANGUAGES, identifier

    assert set(identifier().nb_classes) == LANGUAGES


def test_a_missing_html_cleaner_is_named_before_anything_runs(tmp_path, monkeypatch):
    """Without lxml_html_clean trafilatura cannot import (lxml >= 5.2 moved the cleaner out), and every HTML
    page would fail to extract, one by one: the command stops first and says what to install."""
    monkeypatch.setitem(sys.modules, "lxml_html_clean", None)  # what Python does when it is not installed
    (tmp_path / "in.jsonl").write_text(json.dumps({"text": spanish_docs()[0]}) + "\n", encoding="utf-8")
    r = run_aura_here(*curate_args(tmp_path / "in.jsonl", tmp_path / "out", *FAST))
    assert r.returncode == 2 and "lxml_html_clean is missing" in r.stderr and "aura-llm[curate]" in r.stderr, r
    assert not (tmp_path / "out").exists()
