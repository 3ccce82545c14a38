"""``aura studio``: Try (chat with a run's model, streamed), the data prepare / eval / GGUF forms, and the
per-run cache that keeps ``/api/runs`` cheap."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

from tests.evidence import importorskip

importorskip("starlette", "studio")
from starlette.testclient import TestClient  # noqa: E402

from aura.studio.app import create_app  # noqa: E402
from tests.test_studio import BASE, HEADER, client, make_run  # noqa: E402


@pytest.fixture(scope="module")
def runs(tiny_zoo, tmp_path_factory) -> Path:
    """A runs folder: 'demo' (finished, tiny_zoo's Llama as its final model), 'gpt' (tiny GPT-2 as final/)."""
    root = tmp_path_factory.mktemp("runs")
    for name, model in (("demo", "llama"), ("gpt", "gpt2")):
        make_run(root, name, rows=5)
        shutil.copytree(tiny_zoo[model], root / name / "final")
    return root


def sse(response) -> list[tuple[str, dict]]:
    """The Server-Sent Events of a streamed response, in order."""
    events, event = [], None
    for line in response.iter_lines():
        if line.startswith("event: "):
            event = line[7:]
        elif line.startswith("data: "):
            events.append((event, json.loads(line[6:])))
    return events


def greedy_reference(model_dir: Path, messages: list[dict], max_new: int) -> str:
    """transformers' own greedy decoding of the conversation in the model's chat template."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    ids = tok(text, add_special_tokens=False, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        out = model.generate(
            ids,
            max_new_tokens=max_new,
            do_sample=False,
            pad_token_id=tok.pad_token_id,
            eos_token_id=[tok.eos_token_id, tok.convert_tokens_to_ids("<|im_end|>")],
        )
    return tok.decode(out[0, ids.shape[1] :], skip_special_tokens=True)


def test_chat_streams_the_greedy_answer_of_the_runs_final_model(runs):
    c, headers = client(runs)
    listed = {m["id"]: m for m in c.get("/api/models").json()["models"]}
    assert listed["demo/final"]["kind"] == "final" and "gpt/final" in listed
    messages = [{"role": "user", "content": "Hola, ¿qué tal?"}]
    body = {"model": "demo/final", "messages": messages, "temperature": 0, "max_new_tokens": 12}
    with c.stream("POST", "/api/chat", json=body, headers=headers) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        events = sse(r)
    kinds = [e for e, _ in events]
    assert kinds[:2] == ["loading", "start"] and kinds[-1] == "done", events
    pieces = [d["text"] for e, d in events if e == "piece"]
    done = events[-1][1]
    assert len(pieces) >= 2 and "".join(pieces) == done["text"]  # streamed piece by piece
    assert done["text"] == greedy_reference(runs / "demo" / "final", messages, 12)
    assert 0 < done["tokens"] <= 12 and events[1][1]["template"] is True
    # the engine `aura chat` uses gives the same answer, and the model stays loaded (second answer, no load)
    from aura.inference.backends import Sampling, open_engine

    out: list = []
    list(
        open_engine(str(runs / "demo" / "final")).stream(
            messages=messages, sampling=Sampling(max_new_tokens=12, temperature=0, seed=1), out=out
        )
    )
    assert out[0].text == done["text"]
    assert c.get("/api/models").json()["loaded"] == [str((runs / "demo" / "final").resolve())]


def test_a_context_cut_is_told_on_the_page_at_every_answer_not_on_the_terminal(runs, capsys):
    """A message longer than the model's context: each answer carries the notice ``aura chat`` prints
    (the engine is cached across answers, the notice is not said only once), and the studio's terminal
    stays quiet."""
    c, headers = client(runs)
    long = " ".join(["palabra"] * 600)  # far beyond the tiny model's 256 positions
    body = {
        "model": "demo/final",
        "messages": [{"role": "user", "content": long}],
        "temperature": 0,
        "max_new_tokens": 8,
    }
    for _ in range(2):
        with c.stream("POST", "/api/chat", json=body, headers=headers) as r:
            events = sse(r)
        notices = [d["text"] for e, d in events if e == "notice"]
        assert len(notices) == 1 and "does not fit the model's context (256 tokens)" in notices[0], events
        assert events[-1][0] == "done"
    assert "does not fit" not in capsys.readouterr().err


def test_two_models_side_by_side_and_a_bounded_cache(runs):
    from aura.studio.try_chat import Engines, chat_config

    c, headers = client(runs)
    messages = [{"role": "user", "content": "Cuéntame algo"}]
    answers = {}
    for model in ("demo/final", "gpt/final"):
        with c.stream(
            "POST",
            "/api/chat",
            json={"model": model, "messages": messages, "temperature": 0, "max_new_tokens": 6},
            headers=headers,
        ) as r:
            answers[model] = sse(r)[-1]
    assert all(e == "done" for e, _ in answers.values())
    assert answers["gpt/final"][1]["text"] == greedy_reference(runs / "gpt" / "final", messages, 6)
    engines = Engines(size=1)  # the least recently used model is dropped
    for model in ("demo/final", "gpt/final"):
        engines.get(chat_config(runs / model, {}))
    assert engines.loaded() == [str((runs / "gpt" / "final").resolve())]


def test_chat_refuses_models_outside_the_list_and_cross_site_posts(runs, tmp_path):
    c, headers = client(runs)
    body = {"model": "demo/final", "messages": [{"role": "user", "content": "hola"}], "max_new_tokens": 2}
    for bad in ({}, {"Origin": BASE}, {**headers, "Origin": "http://evil.example"}):
        assert c.post("/api/chat", json=body, headers=bad).status_code == 403
    (runs / "link").symlink_to(runs / "demo", target_is_directory=True)
    try:
        for model in (
            "../demo/final",
            "demo/../demo/final",
            "/etc/passwd",
            str(runs / "demo" / "final"),
            "link/final",
            "demo",
            "demo/training_log.csv",
            None,
        ):
            r = c.post("/api/chat", json={**body, "model": model}, headers=headers)
            assert r.status_code == 400 and "runs folder" in r.json()["error"], model
    finally:
        (runs / "link").unlink()
    r = c.post("/api/chat", json={**body, "temperature": -1}, headers=headers)
    assert r.status_code == 400 and "--temperature" in r.json()["error"]  # aura chat's own validation
    for messages in (
        [],
        [{"role": "system", "content": "x"}],
        [{"role": "user"}],
        "hola",
        [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}],
    ):
        assert c.post("/api/chat", json={**body, "messages": messages}, headers=headers).status_code == 400


def test_forms_of_data_prepare_eval_and_gguf_export(runs, tmp_path):
    c, headers = client(runs)

    def preview(command, values, name="out"):
        return c.post("/api/preview", json={"command": command, "name": name, "values": values}, headers=headers)

    fields = {f["name"]: f for f in c.get("/api/forms/export gguf").json()["fields"]}
    assert "f16" in fields["quant"]["choices"] and "outfile" not in fields and "output_dir" not in fields
    assert fields["converter"]["choices"] == ["auto", "aura", "llama.cpp"] and "llama_cpp_dir" not in fields
    assert "output" not in {f["name"] for f in c.get("/api/forms/eval").json()["fields"]}
    assert c.get("/api/forms/data prepare").json()["fields"][0]["positional"]
    r = preview("export gguf", {"model": "demo/final", "quant": "q8_0"}, "demo-gguf").json()
    assert r["argv"] == [
        "export",
        "gguf",
        "--model",
        "demo/final",
        "--quant",
        "q8_0",
        "--output-dir",
        str((runs / "demo-gguf").resolve()),
    ]
    assert r["command"].startswith("aura export gguf --model demo/final")
    r = preview("eval", {"model": "demo/final gpt/final", "suite": "aura-es", "limit": "2"}).json()
    assert r["argv"][:6] == ["eval", "--model", "demo/final", "gpt/final", "--suite", "aura-es"]
    r = preview("data prepare", {"inputs": "corpus.txt", "tokenizer": "tok"}).json()
    assert r["argv"][:4] == ["data", "prepare", "corpus.txt", "--tokenizer"]
    # models read from outside the runs folder, and output names that leave it, are refused
    for command, values in (
        ("export gguf", {"model": "../elsewhere"}),
        ("export gguf", {"model": "/etc"}),
        ("eval", {"model": "demo/final", "compare": "../../x", "suite": "aura-es"}),
    ):
        r = preview(command, values)
        assert r.status_code == 400 and "outside the runs folder" in r.json()["error"], values
    for name in ("../x", "a/b", ".."):
        assert preview("export gguf", {"model": "demo/final"}, name).status_code == 400
    for path, field in (("export gguf", "outfile"), ("export gguf", "llama_cpp_dir"), ("eval", "output")):
        r = preview(path, {field: "/tmp/x", "model": "demo/final"})
        assert r.status_code == 400 and field in r.json()["error"]
    r = preview("eval", {"model": "demo/final"})  # the CLI's own validation: data, suite or tasks needed
    assert r.status_code == 400
    for bad in ({}, {**headers, "Origin": "http://evil.example"}):  # cross-site: refused before anything
        r = c.post(
            "/api/launch", json={"command": "export gguf", "name": "g", "values": {"model": "demo/final"}}, headers=bad
        )
        assert r.status_code == 403
    assert not (runs / "g").exists()


def test_gguf_export_launched_from_the_form_then_chat_with_it(runs):
    """The export form starts `aura export gguf` (a detached process); its GGUF appears among the models and
    answers through llama.cpp with the template embedded in it."""
    importorskip("llama_cpp", "llama-cpp")
    c, headers = client(runs)
    r = c.post(
        "/api/launch",
        json={"command": "export gguf", "name": "demo-gguf", "values": {"model": "demo/final", "quant": "f16"}},
        headers=headers,
    )
    assert r.status_code == 200 and r.json()["run"] is False
    deadline = time.time() + 240
    while (job := c.get("/api/jobs/demo-gguf").json())["running"] and time.time() < deadline:
        time.sleep(1)
    assert job["returncode"] == 0, job["log"]
    assert "demo-gguf/model-f16.gguf" in {m["id"] for m in c.get("/api/models").json()["models"]}
    with c.stream(
        "POST",
        "/api/chat",
        json={
            "model": "demo-gguf/model-f16.gguf",
            "temperature": 0,
            "max_new_tokens": 6,
            "messages": [{"role": "user", "content": "Hola"}],
        },
        headers=headers,
    ) as r:
        events = sse(r)
    assert events[1] == ("start", {"backend": "llama.cpp", "template": True}) and events[-1][0] == "done", events
    assert c.get("/api/jobs/nothing").status_code == 400


def test_runs_list_follows_new_rows_and_costs_a_stat_when_unchanged(tmp_path, monkeypatch):
    d = make_run(tmp_path, "live", rows=4, status="finished")
    info = json.loads((d / "run.json").read_text())
    info.update(total_steps=100, launch={"world_size": 4, "nnodes": 2, "nproc_per_node": 2, "launcher": "torchrun"})
    (d / "run.json").write_text(json.dumps(info))
    c, _ = client(tmp_path)
    rec = c.get("/api/runs").json()[0]
    assert rec["last_step"] == 4 and rec["tokens_per_s"] == 1000 and rec["total_steps"] == 100
    assert rec["layout"] == {"world_size": 4, "nnodes": 2, "nproc_per_node": 2, "launcher": "torchrun"}
    from aura.watch import runlog, runs as reader

    calls = []
    real = runlog.read_log_since
    monkeypatch.setattr("aura.studio.page_data.read_log_since", lambda *a, **k: calls.append(a) or real(*a, **k))
    monkeypatch.setattr(reader, "read_log", lambda *a: pytest.fail("the whole log is read again"))
    assert c.get("/api/runs").json()[0] == rec and calls == []  # unchanged: nothing read
    with open(d / "training_log.csv", "a") as f:
        f.write("1,5,640,3.5,3.25,0.001,1.0,2000,,5,step,\n")
    rec = c.get("/api/runs").json()[0]
    assert rec["last_step"] == 5 and rec["best_val_loss"] == 3.25 and rec["tokens_per_s"] == 2000
    assert len(calls) == 1 and calls[0][1] > len(HEADER)  # from where the last read stopped
    (d / "run.json").write_text(json.dumps({**info, "status": "interrupted"}))
    assert c.get("/api/runs").json()[0]["status"] == "unsaved"  # interrupted before any checkpoint (issue 36.3)


def test_run_record_matches_aura_runs_json(tmp_path):
    from aura.watch.runs import describe_run

    d = make_run(tmp_path, "a", rows=300)
    c = TestClient(create_app(tmp_path), base_url=BASE)
    got = c.get("/api/runs").json()[0]
    got.pop("id")
    assert got == describe_run(d)  # one reader: the same record as `aura runs --json`


def test_eta_of_a_running_run_and_its_end_seen_without_a_file_change(tmp_path):
    """A run whose lock is held is running: ETA from the log's seconds per step and run.json's plan length.
    When its process ends without a word (kill -9), the page sees it at once although no file changed: 'unsaved',
    since it died before its first checkpoint (nothing to resume)."""
    from aura.core.rundir import RunLock

    d = make_run(tmp_path, "live", rows=10, status="running")  # one logged second per step
    (d / "run.json").write_text(json.dumps({"kind": "pretrain", "status": "running", "total_steps": 100}))
    lock = RunLock(d)
    assert lock.acquire() is None
    c, _ = client(tmp_path)
    try:
        rec = c.get("/api/runs").json()[0]
        assert rec["status"] == "running" and rec["eta_s"] == 90.0 and rec["last_step"] == 10
    finally:
        lock.release()
    rec = c.get("/api/runs").json()[0]
    assert rec["status"] == "unsaved" and rec["eta_s"] is None and rec["resume_command"] is None
