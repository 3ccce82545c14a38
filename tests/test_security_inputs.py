"""What a file names stays inside its folder, copies keep links in, task files run no code unless trusted,
and memory is bounded by a record, not by the input (issue 24, "Security" items 3, 4, 5 and 8). Every
hostile input is built here; the refusal is exit 2 naming the file, and nothing outside is read or run."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import run_aura_here
from tests.test_pretrain import TINY_FLAGS
from tests.test_security import copy_run, trained_run  # noqa: F401 - the shared 2-step run fixture

OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}


def _task_dir(root: Path, name: str, *, doc_to_text: str = '"{{pregunta}}"', extra: str = "") -> Path:
    """A local lm-eval task directory: a YAML and its JSONL data."""
    root.mkdir(parents=True, exist_ok=True)
    data = root / "datos.jsonl"
    data.write_text(
        "".join(
            json.dumps(
                {"pregunta": f"¿{i} + 1?", "opciones": [str(i + 1), str(i + 2)], "correcta": 0}, ensure_ascii=False
            )
            + "\n"
            for i in range(4)
        ),
        encoding="utf-8",
    )
    (root / "tarea.yaml").write_text(
        f"task: {name}\ndataset_path: json\ndataset_kwargs:\n  data_files:\n    test: {data}\n"
        f"output_type: multiple_choice\ntest_split: test\ndoc_to_text: {doc_to_text}\n"
        f"doc_to_choice: opciones\ndoc_to_target: correcta\nmetric_list:\n  - metric: acc\n{extra}",
        encoding="utf-8",
    )
    return root


def _eval(model: Path, task: str, include: Path, *extra: str):
    return run_aura_here(
        "eval",
        "--model",
        model,
        "--tasks",
        task,
        "--include-path",
        include,
        "--limit",
        "2",
        "--batch-size",
        "2",
        *extra,
        env=OFFLINE,
    )


# ---- 3. evaluation task files -----------------------------------------------------------------------


def test_an_include_path_task_never_shadows_a_shipped_aura_es_task(tiny_zoo, tmp_path):
    tasks = _task_dir(tmp_path / "tareas", "aura_es_gramatica")
    r = _eval(tiny_zoo["gpt2"], "aura_es_gramatica", tasks)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "defines the task 'aura_es_gramatica'" in r.stderr and str(tasks / "tarea.yaml") in r.stderr
    assert "Traceback" not in r.stderr


def test_task_code_runs_only_with_trust_task_code(tiny_zoo, tmp_path):
    flag = tmp_path / "ejecutado"
    tasks = _task_dir(tmp_path / "tareas", "mi_tarea_py", extra="process_docs: !function utils.procesar\n")
    (tasks / "utils.py").write_text(
        f"open({str(flag)!r}, 'w').close()\n\ndef procesar(ds):\n    return ds\n", encoding="utf-8"
    )
    r = _eval(tiny_zoo["gpt2"], "mi_tarea_py", tasks)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "would run code" in r.stderr and "--trust-task-code" in r.stderr and "utils.py" in r.stderr
    assert not flag.exists()
    r = _eval(tiny_zoo["gpt2"], "mi_tarea_py", tasks, "--trust-task-code")
    assert r.returncode == 0, r.stdout + r.stderr
    assert flag.exists() and "mi_tarea_py" in r.stdout


def test_a_task_template_cannot_reach_python(tiny_zoo, tmp_path):
    """Jinja templates (doc_to_text) render in a sandbox unless --trust-task-code."""
    flag = tmp_path / "ejecutado"
    payload = f"\"{{{{ lipsum.__globals__['os'].system('touch {flag}') }}}}{{{{pregunta}}}}\""
    tasks = _task_dir(tmp_path / "tareas", "mi_plantilla", doc_to_text=payload)
    r = _eval(tiny_zoo["gpt2"], "mi_plantilla", tasks)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "mi_plantilla" in r.stderr and "unsafe" in r.stderr and "Traceback" not in r.stderr
    assert not flag.exists()


# ---- 4. names inside files stay inside their folder -----------------------------------------------


def _prepared_copy(prepared_corpus: Path, dest: Path) -> Path:
    shutil.copytree(prepared_corpus, dest)
    return dest


@pytest.mark.parametrize("where", ["dotdot", "absolute", "symlink"])
def test_meta_json_shard_outside_the_folder_is_refused(prepared_corpus, tmp_path, where):
    data = _prepared_copy(prepared_corpus, tmp_path / "data")
    meta = json.loads((data / "meta.json").read_text(encoding="utf-8"))
    shard = meta["splits"]["train"]["shards"][0]
    outside = tmp_path / "ajeno.bin"
    shutil.copy(data / shard["file"], outside)  # the right size: only the containment check can refuse it
    if where == "symlink":
        (data / shard["file"]).unlink()
        (data / shard["file"]).symlink_to(outside)
        name = shard["file"]
    else:
        name = "../ajeno.bin" if where == "dotdot" else str(outside)
        shard["file"] = name
        (data / "meta.json").write_text(json.dumps(meta), encoding="utf-8")
    r = run_aura_here("pretrain", "--data", data, "--output-dir", tmp_path / "run", *TINY_FLAGS, "--max-steps", "1")
    assert r.returncode == 2, r.stdout + r.stderr
    assert "meta.json names" in r.stderr and name in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "run" / "final").exists()


def test_token_ids_beyond_the_vocabulary_name_the_shard(prepared_corpus, tmp_path):
    data = _prepared_copy(prepared_corpus, tmp_path / "data")
    meta = json.loads((data / "meta.json").read_text(encoding="utf-8"))
    shard = data / meta["splits"]["train"]["shards"][0]["file"]
    ids = np.fromfile(shard, dtype=meta["dtype"])
    ids[len(ids) // 2] = meta["tokenizer"]["vocab_size"] + 7
    ids.tofile(shard)
    r = run_aura_here("pretrain", "--data", data, "--output-dir", tmp_path / "run", *TINY_FLAGS, "--max-steps", "2")
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"Shard {shard} holds token id {meta['tokenizer']['vocab_size'] + 7}" in r.stderr
    assert "Traceback" not in r.stderr


def test_safetensors_index_naming_a_file_outside_is_refused(tiny_zoo, tmp_path):
    from safetensors.torch import load_file, save_file

    model = tmp_path / "modelo"
    shutil.copytree(tiny_zoo["llama"], model)
    weights = load_file(model / "model.safetensors")
    (model / "model.safetensors").unlink()
    save_file(weights, tmp_path / "ajeno.safetensors", metadata={"format": "pt"})
    index = {"metadata": {}, "weight_map": {k: "../ajeno.safetensors" for k in weights}}
    (model / "model.safetensors.index.json").write_text(json.dumps(index), encoding="utf-8")
    r = run_aura_here("generate", "--model", model, "--prompt", "Hola", "--max-new-tokens", "2")
    assert r.returncode == 2, r.stdout + r.stderr
    assert "model.safetensors.index.json names '../ajeno.safetensors'" in r.stderr and "Traceback" not in r.stderr


def test_checkpoint_file_linked_outside_is_refused_on_resume(prepared_corpus, trained_run, tmp_path):  # noqa: F811
    run = copy_run(trained_run, tmp_path / "run")
    ck = run / "checkpoint-step-2"
    outside = tmp_path / "optimizer-ajeno.pt"
    shutil.move(ck / "optimizer.pt", outside)
    (ck / "optimizer.pt").symlink_to(outside)
    r = run_aura_here(
        "pretrain",
        "--data",
        prepared_corpus,
        "--output-dir",
        run,
        *TINY_FLAGS,
        "--max-steps",
        "3",
        "--resume-from",
        "latest",
    )
    assert r.returncode == 2, r.stdout + r.stderr
    assert "optimizer.pt is a symbolic link" in r.stderr and "outside" in r.stderr and "Traceback" not in r.stderr
    assert not (run / "checkpoint-step-3").exists()


# ---- 5. copies keep links in ----------------------------------------------------------------------


def _corpus(tmp_path: Path) -> Path:
    src = tmp_path / "docs.txt"
    src.write_text(
        "".join(f"Documento {i} de prueba, bastante largo para el corpus.\n" for i in range(20)), encoding="utf-8"
    )
    return src


@pytest.mark.parametrize("kind", ["outside", "loop"])
def test_tokenizer_folder_with_a_link_out_or_a_loop_is_not_copied(tiny_zoo, tmp_path, kind):
    tok = tmp_path / "tok"
    shutil.copytree(tiny_zoo["tokenizer"], tok)
    secret = tmp_path / "secreto.txt"
    secret.write_text("clave privada\n", encoding="utf-8")
    if kind == "outside":
        (tok / "notas.txt").symlink_to(secret)
    else:
        (tok / "a").symlink_to(tok / "b")
        (tok / "b").symlink_to(tok / "a")
    out = tmp_path / "data"
    r = run_aura_here("data", "prepare", _corpus(tmp_path), "--tokenizer", tok, "--output-dir", out, "--workers", "1")
    assert r.returncode == 2, r.stdout + r.stderr
    expected = "notas.txt is a symbolic link" if kind == "outside" else "symbolic link loop"
    assert expected in r.stderr and "Traceback" not in r.stderr
    assert not out.exists()


def test_a_link_inside_the_tokenizer_folder_is_copied_as_its_file(tiny_zoo, tmp_path):
    tok = tmp_path / "tok"
    shutil.copytree(tiny_zoo["tokenizer"], tok)
    (tok / "vocab-copia.json").symlink_to(tok / "tokenizer.json")
    out = tmp_path / "data"
    r = run_aura_here("data", "prepare", _corpus(tmp_path), "--tokenizer", tok, "--output-dir", out, "--workers", "1")
    assert r.returncode == 0, r.stdout + r.stderr
    copy = out / "tokenizer" / "vocab-copia.json"
    assert not copy.is_symlink() and copy.read_bytes() == (tok / "tokenizer.json").read_bytes()


# ---- 8. memory bounded by a record, not by the input ----------------------------------------------


@pytest.mark.parametrize("fmt", ["jsonl", "txt-utf16", "json", "txt-file"])
def test_a_record_over_max_record_bytes_names_file_and_line(tiny_zoo, tmp_path, fmt):
    big = "palabra " * 2000  # 16 KB
    if fmt == "jsonl":
        src = tmp_path / "datos.jsonl"
        src.write_text("".join(json.dumps({"text": t}) + "\n" for t in ["hola mundo", big, "adiós"]), encoding="utf-8")
        where = f"{src}, line 2: the record is larger than 4KiB"
    elif fmt == "txt-utf16":
        src = tmp_path / "datos.txt"
        src.write_text("hola mundo\n" + big + "\nadiós\n", encoding="utf-16")
        where = f"{src}, line 2: the record is larger than 4KiB"
    elif fmt == "json":
        src = tmp_path / "datos.json"
        src.write_text(
            json.dumps([{"text": "hola mundo"}, {"text": "hola", "n": list(range(2000))}], indent=1), encoding="utf-8"
        )  # record 2 spans 2,000 short lines
        where = f"{src}, record 2: it is larger than 4KiB"
    else:
        src = tmp_path / "datos.txt"
        src.write_text(("hola mundo\n" * 100 + "\n") * 10, encoding="utf-8")
        where = f"{src}: the whole file is one record"
    extra = ["--encoding", "utf-16"] if fmt == "txt-utf16" else ["--doc-sep", "file"] if fmt == "txt-file" else []
    out = tmp_path / "data"
    r = run_aura_here(
        "data",
        "prepare",
        src,
        "--tokenizer",
        tiny_zoo["tokenizer"],
        "--output-dir",
        out,
        "--workers",
        "1",
        "--max-record-bytes",
        "4096",
        *extra,
    )
    assert r.returncode == 2, r.stdout + r.stderr
    assert where in r.stderr and "--max-record-bytes" in r.stderr and "Traceback" not in r.stderr
    assert not out.exists()


def test_a_long_list_streams_and_a_record_under_the_limit_passes(tmp_path):
    """The JSON list reader gives the same records as json.load, element by element across blocks."""
    from collections import Counter

    from aura.text.readers import ReaderOptions, iter_documents
    from aura.text.sources import expand_inputs

    docs = [f"documento {i} " + "x" * (i % 50) for i in range(3000)] + ["1.5e3", ""]
    src = tmp_path / "lista.json"
    src.write_text(json.dumps([{"text": d, "n": i} for i, d in enumerate(docs)], indent=2), encoding="utf-8")
    (source,) = expand_inputs([str(src)])
    got = list(iter_documents(source, ReaderOptions(max_record_bytes=200), Counter()))
    assert got == docs


def test_a_single_line_gzip_is_refused_in_bounded_memory(tmp_path):
    """128 MiB without a line break, gzipped: refused at the 64 MiB default, never read whole (the old
    reader held the whole line, then its decoded copy)."""
    import gzip
    import tracemalloc
    from collections import Counter

    from aura.core.errors import AuraError
    from aura.text.readers import ReaderOptions, iter_documents
    from aura.text.sources import expand_inputs

    src = tmp_path / "una-linea.jsonl.gz"
    chunk = b"a" * (1 << 20)
    with gzip.open(src, "wb", compresslevel=1) as f:
        f.write(b'{"text": "')
        for _ in range(128):
            f.write(chunk)
    (source,) = expand_inputs([str(src)])
    tracemalloc.start()
    try:
        with pytest.raises(AuraError, match=r"una-linea.jsonl.gz, line 1: the record is larger than 64MiB"):
            list(iter_documents(source, ReaderOptions(), Counter()))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2.2 * (64 << 20), peak  # the pending line (64 MiB), one join of it, a block


def test_dedup_keeps_8_bytes_per_document(tmp_path):
    """DigestSet agrees with a Python set and holds 8 bytes per distinct document (16 at a merge);
    the figure for docs/benchmarks.md comes from bench/bench_dedup.py."""
    import tracemalloc

    from aura.data.dedup import DigestSet

    rng = np.random.default_rng(0)
    n_batches, batch = 400, 1000
    keys = rng.integers(0, 1 << 63, n_batches * batch // 2, dtype=np.uint64)
    stream = np.concatenate([keys, keys[rng.integers(0, len(keys), len(keys))]])  # half are repeats
    rng.shuffle(stream)
    seen, ref = DigestSet(), set()
    for b in range(n_batches):
        part = stream[b * batch : (b + 1) * batch]
        expected = []
        for k in part.tolist():
            expected.append(k not in ref)
            ref.add(k)
        assert seen.add(part).tolist() == expected
    assert len(seen) == len(ref) and seen.nbytes == 8 * len(ref)
    batches = [stream[b * batch : (b + 1) * batch] for b in range(n_batches)]
    tracemalloc.start()
    try:
        measured = DigestSet()
        for part in batches:
            measured.add(part)
        current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert current / len(measured) < 8.2 and peak / len(measured) < 17, (current, peak, len(measured))
