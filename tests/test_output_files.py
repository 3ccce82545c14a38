"""Single-file outputs never replace what they should not (issue 24.6, issue 25.2).

`aura eval` keeps each configuration's results under its own name (a `--limit 20` run replaced the full
suite's `final.eval-aura-es.json`), and `aura runs` shows the full-suite figure; `aura eval`, `aura generate`
and `aura plot` refuse an output that is one of their inputs, lies inside a model or run folder they read,
or is an existing file Aura did not write (unless `--overwrite`), before any model is loaded.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest

from tests.conftest import run_aura_here


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def refused(r, *needles: str) -> None:
    assert r.returncode == 2, r.stdout + r.stderr
    assert "Traceback" not in r.stderr, r.stderr
    for n in needles:
        assert n in r.stderr, r.stderr


@pytest.fixture
def run_final(tiny_zoo, tmp_path) -> Path:
    """A run folder whose final/ is a (tiny) model, as `aura runs` finds it."""
    final = shutil.copytree(tiny_zoo["llama"], tmp_path / "runs" / "chat" / "final")
    (final.parent / "run.json").write_text(
        json.dumps({"kind": "finetune", "status": "finished", "last_step": 3, "aura_version": "0.1.0"}),
        encoding="utf-8",
    )
    return final


def test_names_say_the_configuration():
    from aura.evaluation.results import result_stem

    def stem(**kw):
        return result_stem(**{"suite": "", "tasks": "", "limit": 0, "adapter": "", **kw})

    assert stem(suite="aura-es") == "eval-aura-es"  # the full suite without an adapter, and only it
    assert stem(suite="aura-es", limit=20) == "eval-aura-es.limit20"
    assert stem(tasks="spanish_bench, global_mmlu_es") == "eval-tasks-spanish_bench+global_mmlu_es"
    assert stem(suite="aura-es", adapter="runs/chat/final") == "eval-aura-es.adapter-chat-final"
    assert stem(suite="aura-es", adapter="adapters/mi lora") == "eval-aura-es.adapter-mi_lora"
    # answers to --prompts ride in the suite's file (the full suite's name stays the one `aura runs` reads)
    assert stem(suite="aura-es", prompts="p.txt") == "eval-aura-es"
    assert stem(prompts="p.txt") == "eval-prompts" and stem(prompts="p.txt", limit=2) == "eval-prompts.limit2"
    many = stem(tasks=",".join(f"tarea_{i}" for i in range(30)))
    assert len(many) < 80 and many != stem(tasks=",".join(f"tarea_{i}" for i in range(31)))


def test_a_partial_evaluation_never_replaces_the_full_suite_result(run_final, tmp_path):
    partial = run_final.parent / "final.eval-aura-es.limit2.json"
    r = run_aura_here("eval", "--model", run_final, "--suite", "aura-es", "--limit", "2")
    assert r.returncode == 0, r.stdout + r.stderr
    report = json.loads(partial.read_text(encoding="utf-8"))
    assert report["limit"] == 2 and not (run_final.parent / "final.eval-aura-es.json").exists()
    runs = json.loads(run_aura_here("runs", tmp_path / "runs", "--json").stdout)
    assert runs[0]["aura_es_acc"] is None  # a partial result is not the suite's figure
    # the full suite's result, as `aura eval --suite aura-es` writes it, survives another partial run
    full = run_final.parent / "final.eval-aura-es.json"
    full.write_text(json.dumps({**report, "limit": 0}), encoding="utf-8")
    before = digest(full)
    r = run_aura_here("eval", "--model", run_final, "--suite", "aura-es", "--limit", "2")
    assert r.returncode == 0 and digest(full) == before, r.stdout + r.stderr
    accs = [row["value"] for row in report["rows"] if row["metric"] == "acc"]
    runs = json.loads(run_aura_here("runs", tmp_path / "runs", "--json").stdout)
    assert runs[0]["aura_es_acc"] == pytest.approx(sum(accs) / len(accs))
    table = run_aura_here("runs", tmp_path / "runs")
    assert "aura-es (acc)" in table.stdout and f"{sum(accs) / len(accs):.4f}" in table.stdout


def test_eval_output_is_never_an_input_nor_inside_one_nor_a_users_file(run_final, tmp_path):
    model = run_final
    suite = ["--suite", "aura-es", "--limit", "2"]
    config = digest(model / "config.json")
    refused(run_aura_here("eval", "--model", model, *suite, "--output", model / "config.json"), "lies inside the input")
    refused(
        run_aura_here("eval", "--model", model, *suite, "--output-dir", model / "resultados"), "lies inside the input"
    )
    assert digest(model / "config.json") == config and not (model / "resultados").exists()
    mine = tmp_path / "mis-notas"
    mine.mkdir()
    (mine / "eval-aura-es.limit2.json").write_text('{"mis": "notas"}', encoding="utf-8")
    r = run_aura_here("eval", "--model", model, *suite, "--output-dir", mine, env={"AURA_LANG": "es"})
    refused(r, "ya existe y no lo escribió Aura", "--overwrite")
    assert json.loads((mine / "eval-aura-es.limit2.json").read_text()) == {"mis": "notas"}
    data = tmp_path / "texto.txt"
    data.write_text("Había una vez un rey.\n", encoding="utf-8")
    refused(run_aura_here("eval", "--model", model, "--data", data, "--output", data), "is the input")
    r = run_aura_here("eval", "--model", model, *suite, "--output-dir", mine, "--overwrite")
    assert r.returncode == 0, r.stderr
    assert json.loads((mine / "eval-aura-es.limit2.json").read_text())["results"][0]["limit"] == 2


def test_generate_output_is_never_its_prompts_its_model_or_a_users_file(tiny_zoo, tmp_path):
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("Había una vez\nEl río\n", encoding="utf-8")
    before = digest(prompts)
    common = ["generate", "--model", tiny_zoo["llama"], "--prompts-file", prompts, "--max-new-tokens", "4"]
    refused(run_aura_here(*common, "--output", prompts), "is the input")
    refused(run_aura_here(*common, "--output", tiny_zoo["llama"] / "gen.jsonl"), "lies inside the input")
    users = tmp_path / "resultados.jsonl"
    users.write_text('{"prompt": "mío"}\n', encoding="utf-8")
    refused(run_aura_here(*common, "--output", users), "was not written by Aura")
    assert digest(prompts) == before and users.read_text() == '{"prompt": "mío"}\n'
    assert not (tiny_zoo["llama"] / "gen.jsonl").exists()
    ours = tmp_path / "gen.jsonl"
    for _ in range(2):  # Aura's own file is replaced without --overwrite
        r = run_aura_here(*common, "--output", ours)
        assert r.returncode == 0, r.stderr
    assert len(ours.read_text().splitlines()) == 2
    r = run_aura_here(*common, "--output", users, "--overwrite")
    assert r.returncode == 0 and len(users.read_text().splitlines()) == 2


def test_plot_never_writes_into_a_run_it_reads_nor_over_a_users_image(tmp_path):
    from tests.test_runs import _dead_pid, make_run

    run = tmp_path / "run"
    make_run(run, status="finished", steps=40, pid=_dead_pid())
    refused(run_aura_here("plot", run, "--output-dir", run), "lies inside the input")
    assert sorted(p.name for p in run.iterdir()) == ["run.json", "training_log.csv"]
    out = tmp_path / "plots"
    out.mkdir()
    photo = out / "loss.png"
    photo.write_bytes(os.urandom(2048))
    before = digest(photo)
    refused(run_aura_here("plot", run, "--output-dir", out), "was not written by Aura", "--overwrite")
    assert digest(photo) == before
    for fmt in ("svg", "pdf", "png"):  # Aura's own images are recognised and replaced
        for _ in range(2):
            r = run_aura_here("plot", run, "--output-dir", out, "--out", f"curvas.{fmt}")
            assert r.returncode == 0, r.stderr
    r = run_aura_here("plot", run, "--output-dir", out, "--overwrite")
    assert r.returncode == 0 and digest(photo) != before
