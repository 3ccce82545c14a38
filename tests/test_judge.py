"""``aura eval --judge URL``: the Spanish chat judge. The verdict parser on real replies (well formed and not),
the two-order rule and Wilson's interval on a case worked by hand, the shipped prompt set's shape; then the
whole command against real servers: ``aura serve`` of the tiny model as the judge (it answers garbage, so the
plumbing shows: both orders asked, every call in the JSONL, malformed verdicts retried then invalid, the
counts adding up), a small HTTP server of the test's own that answers fixed verdicts and counts requests
(the rule end to end, the key from the environment, a model it lacks, resuming from a cut JSONL asking only
what is missing) and a port where nothing listens (a clear error, without traceback, in bounded time).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from aura.core.errors import AuraError
from aura.evaluation import judge_verdicts as jv
from aura.evaluation.judge import DEFAULT_PROMPTS, JudgeItem, read_answers, read_judge_prompts
from tests.conftest import run_aura_here
from tests.evidence import importorskip

BASE = {"cot-01": "Respuesta de referencia uno.", "cot-02": "Respuesta de referencia dos.", "cot-03": "Tres."}


@pytest.mark.parametrize(
    ("reply", "verdict", "error"),
    [
        ("La A responde mejor a la petición.\nVEREDICTO: A", "A", None),
        ("Ambas son correctas.\n\n**Veredicto:** empate.", "empate", None),
        ("La B usa el voseo que se pedía.\nVeredicto final: [[B]]", "B", None),
        ("VEREDICTO: B\nLo repito:\nveredicto: b", "B", None),
        ("Verdict: tie", "empate", None),
        ("La respuesta A es mejor.", None, "no_verdict"),  # prose is never read as a verdict
        ("VEREDICTO: A o B", None, "no_verdict"),
        ("VEREDICTO: A\nMejor dicho:\nVEREDICTO: B", None, "conflicting"),
        ("VEREDICTO:", None, "no_verdict"),
        ("", None, "no_verdict"),
        (" bien� sol}tal cincooc", None, "no_verdict"),  # what the tiny model says
    ],
)
def test_parse_verdict(reply, verdict, error):
    assert jv.parse_verdict(reply) == (verdict, error)


def test_api_root():
    from aura.evaluation.judge_client import api_root

    assert api_root("http://127.0.0.1:8000") == api_root("http://127.0.0.1:8000/v1/") == "http://127.0.0.1:8000/v1"
    assert api_root("http://h:8080/v1/chat/completions") == "http://h:8080/v1"
    assert api_root("https://example.org/api/openai") == "https://example.org/api/openai"  # a path is kept
    with pytest.raises(AuraError, match="is not an http or https URL"):
        api_root("127.0.0.1:8000")


def test_two_orders_rule_and_wilson_interval():
    # order AB: A is the model; BA: A is the baseline
    assert [jv.winner(v, "AB") for v in ("A", "B", "empate", None)] == ["model", "baseline", "tie", None]
    assert [jv.winner(v, "BA") for v in ("A", "B", "empate", None)] == ["baseline", "model", "tie", None]
    assert jv.outcome("model", "model") == "win" and jv.outcome("baseline", "baseline") == "loss"
    assert jv.outcome("model", "baseline") == "tie"  # "always A": position bias cancels to a tie
    assert jv.outcome("model", "tie") == "tie" and jv.outcome(None, "model") == "invalid"
    # 6 wins, 2 ties, 2 losses, 1 invalid: rate (6 + 1) / 10 = 0.7. Wilson, z = 1.96, n = 10:
    # centre (0.7 + 1.9208/10) / 1.38415 = 0.64449; half 1.96 × sqrt(0.021 + 0.00096) / 1.38415 = 0.24772
    t = jv.tally(["win"] * 6 + ["tie"] * 2 + ["loss"] * 2 + ["invalid"])
    assert (t["prompts"], t["valid"], t["wins"], t["ties"], t["losses"], t["invalid"]) == (11, 10, 6, 2, 2, 1)
    assert t["win_rate"] == pytest.approx(0.7)
    assert (t["ci_low"], t["ci_high"]) == (pytest.approx(0.3968, abs=1e-4), pytest.approx(0.8922, abs=1e-4))
    assert jv.tally(["invalid"])["win_rate"] is None


def test_shipped_prompt_set():
    items = read_judge_prompts(DEFAULT_PROMPTS)
    assert 40 <= len(items) <= 60 and len({i.id for i in items}) == len(items)
    by_cat = {
        c: [i for i in items if i.category == c] for c in ("cotidiano", "registro_formal", "variedades", "rechazo")
    }
    assert sum(map(len, by_cat.values())) == len(items) and all(len(v) >= 8 for v in by_cat.values())
    assert all(i.notes for i in by_cat["rechazo"])  # the judge is told what the better answer does


def test_baseline_answers_from_aura_eval_prompts(tiny_zoo, tmp_path):
    """The results JSON of ``aura eval --prompts FILE`` is a baseline: its answers, matched by prompt."""
    prompts, _ = _files(tmp_path)
    out = tmp_path / "base.json"
    r = run_aura_here("eval", "--model", tiny_zoo["gpt2"], "--prompts", prompts, "--output", out)
    assert r.returncode == 0, r.stdout + r.stderr
    answers = [a["answer"] for a in json.loads(out.read_text(encoding="utf-8"))["results"][0]["answers"]]
    items = read_judge_prompts(prompts)
    assert read_answers(out, items, str(prompts)) == answers and len(answers) == 3
    with pytest.raises(AuraError, match="has no answer for prompt extra"):
        read_answers(out, [*items, JudgeItem("extra", "cotidiano", "¿Otra?")], str(prompts))


def test_a_bad_prompts_file_names_its_line(tmp_path):
    bad = tmp_path / "mine.jsonl"
    bad.write_text('{"id": "a", "prompt": "Hola"}\n\n{"id": "b", "category": "cotidiano"}\n', encoding="utf-8")
    with pytest.raises(AuraError, match=r'mine\.jsonl, line 3: field "prompt" is missing'):
        read_judge_prompts(bad)
    bad.write_bytes('{"id": "a", "prompt": "Hola"}\n{"id": "b", "prompt": "Adiós"}\n'.encode("latin-1"))
    with pytest.raises(AuraError, match=r"mine\.jsonl, line 2: byte \d+ is not UTF-8"):
        read_judge_prompts(bad)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _files(tmp_path: Path) -> tuple[Path, Path]:
    prompts, base = tmp_path / "p3.jsonl", tmp_path / "base.jsonl"
    prompts.write_text("".join(DEFAULT_PROMPTS.read_text(encoding="utf-8").splitlines(True)[:3]), encoding="utf-8")
    base.write_text("".join(json.dumps({"id": k, "answer": v}) + "\n" for k, v in BASE.items()), encoding="utf-8")
    return prompts, base


class _FixedJudge(BaseHTTPRequestHandler):
    """A judge with fixed habits, by prompt: cot-01 always prefers the model (a win), cot-02 always says A
    (a tie once the orders are swapped), cot-03 never gives a verdict (invalid). Needs the token s3cret."""

    state: dict = {}

    def log_message(self, *args):
        pass

    def _reply(self, status: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.headers.get("Authorization") != "Bearer s3cret":
            return self._reply(401, {"error": "unauthorized"})
        self._reply(200, {"object": "list", "data": [{"id": "juez", "object": "model"}]})

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.headers.get("Authorization") != "Bearer s3cret":
            return self._reply(401, {"error": "unauthorized"})
        self.state["chats"] += 1
        msgs = body["messages"]
        self.state["reminders"] += msgs[-1]["content"] == jv.REMINDER
        user = msgs[1]["content"]
        first = user.split("[Respuesta A]\n")[1].split("\n\n[Respuesta B]")[0]
        if "arroz" in user:
            text = "La otra es mejor.\nVEREDICTO: B" if first == BASE["cot-01"] else "**Veredicto:** A"
        elif "oficina" in user:
            text = "Me quedo con la primera.\nVEREDICTO: A"
        else:
            text = "Quizá la A, o la B."
        self._reply(200, {"choices": [{"index": 0, "message": {"role": "assistant", "content": text}}]})


@contextlib.contextmanager
def _fixed_judge():
    _FixedJudge.state = {"chats": 0, "reminders": 0}
    server = ThreadingHTTPServer(("127.0.0.1", 0), _FixedJudge)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1", _FixedJudge.state
    finally:
        server.shutdown()
        server.server_close()


def test_fixed_judge_rule_key_model_and_resume(tiny_zoo, tmp_path, monkeypatch):
    for var in ("AURA_JUDGE_API_KEY", "OPENAI_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    prompts, base = _files(tmp_path)
    out = tmp_path / "out" / "v.jsonl"
    args = ["eval", "--model", tiny_zoo["llama"], "--baseline", base, "--judge-prompts", prompts, "--judge-out", out]
    args += ["--max-new-tokens", 4]
    key = {"AURA_JUDGE_API_KEY": "s3cret"}
    with _fixed_judge() as (url, state):
        r = run_aura_here(*args, "--judge", url)  # no key: refused at /models, before anything loads
        assert r.returncode == 2 and "HTTP 401" in r.stderr and "AURA_JUDGE_API_KEY" in r.stderr, r.stderr
        r = run_aura_here(*args, "--judge", url, "--judge-model", "otro", env=key)
        assert r.returncode == 2 and "no model otro" in r.stderr and "juez" in r.stderr, r.stderr
        assert "Traceback" not in r.stdout + r.stderr and state["chats"] == 0 and not out.exists()

        r = run_aura_here(*args, "--judge", url, env=key)
        assert r.returncode == 0, r.stdout + r.stderr
        # cot-01: 1 call per order; cot-02: 1 per order; cot-03: 3 per order (2 of them with the reminder)
        assert (state["chats"], state["reminders"]) == (2 + 2 + 6, 4)
        summary = json.loads(out.with_suffix(".json").read_text(encoding="utf-8"))
        assert summary["outcomes"] == {"cot-01": "win", "cot-02": "tie", "cot-03": "invalid"}
        o = summary["overall"]
        assert (o["wins"], o["ties"], o["losses"], o["invalid"], o["valid"]) == (1, 1, 0, 1, 2)
        assert o["win_rate"] == 0.75 and (o["ci_low"], o["ci_high"]) == pytest.approx(jv.wilson(1.5, 2))
        assert summary["positions"] == {"A": 3, "B": 1, "empate": 0} and summary["calls"]["asked"] == 6
        lines = out.read_text(encoding="utf-8").splitlines()
        records = [json.loads(line) for line in lines]
        assert [(r["id"], r["order"]) for r in records] == [(i, o) for i in BASE for o in ("AB", "BA")]
        bad = records[4:]
        assert all(r["attempts"] == 3 and len(r["replies"]) == 3 and r["error"] == "no_verdict" for r in bad)

        # cut short mid-line after 3 verdicts, as a kill would: the run asks only the 3 orders missing
        out.write_text("\n".join(lines[:3]) + "\n" + lines[3][:40], encoding="utf-8")
        state["chats"] = 0
        r = run_aura_here(*args, "--judge", url, env=key)
        assert r.returncode == 0, r.stdout + r.stderr
        assert state["chats"] == 1 + 3 + 3
        again = json.loads(out.with_suffix(".json").read_text(encoding="utf-8"))
        assert again["outcomes"] == summary["outcomes"] and again["calls"]["reused"] == 3
        state["chats"] = 0
        assert run_aura_here(*args, "--judge", url, env=key).returncode == 0 and state["chats"] == 0


@pytest.mark.parametrize("silent", [False, True], ids=["closed-port", "never-answers"])
def test_a_judge_that_is_down(tiny_zoo, tmp_path, silent):
    """Nothing listens (connection refused), or a socket accepts and never answers (timeout): a clear error in
    the user's language, without traceback, after the bounded retries, before any model is loaded."""
    prompts, base = _files(tmp_path)
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        if silent:
            listener.listen(8)  # the kernel accepts the connection; nobody reads or writes
        url = f"http://127.0.0.1:{listener.getsockname()[1]}/v1"
        if not silent:
            listener.close()
        t0 = time.monotonic()
        r = run_aura_here(
            *("eval", "--model", tiny_zoo["llama"], "--judge", url, "--baseline", base, "--judge-prompts", prompts),
            *("--judge-out", tmp_path / "v.jsonl", "--judge-attempts", 2, "--judge-timeout", 1),
            env={"AURA_LANG": "es"},
        )
        assert time.monotonic() - t0 < 30
    assert r.returncode == 2 and f"El juez {url} no responde tras 2 intentos" in r.stderr, r.stderr
    assert "aura serve" in r.stderr and ("timed out" in r.stderr) == silent, r.stderr
    assert "Traceback" not in r.stdout + r.stderr and not (tmp_path / "v.jsonl").exists()


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--judge", "http://127.0.0.1:9/v1"], "--judge needs --baseline"),
        (["--judge", "ftp://juez", "--baseline", "x"], "is not an http or https URL"),
        (["--prompts", "p.txt", "--judge-model", "juez"], "--judge-model only applies with --judge"),
        (["--judge", "http://127.0.0.1:9/v1", "--baseline", ".", "--output", "r.json"], "Use --judge-out"),
    ],
)
def test_refusals(tiny_zoo, extra, needle):
    r = run_aura_here("eval", "--model", tiny_zoo["llama"], *extra)
    assert r.returncode == 2 and needle in r.stderr, r.stderr


@contextlib.contextmanager
def _aura_serve(model: Path, log: Path):
    """``aura serve MODEL`` on a free port until /v1/models answers (as tests/test_serve.py starts it)."""
    port = _free_port()
    env = {**os.environ, "AURA_LANG": "en", "AURA_PLAIN": "1", "OMP_NUM_THREADS": "1"}
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "aura", "serve", str(model), "--port", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            try:
                urllib.request.urlopen(url + "/models", timeout=5).close()
                break
            except (urllib.error.URLError, OSError):
                time.sleep(0.3)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_aura_serve_as_the_judge(tiny_zoo, tmp_path):
    for module in ("fastapi", "sse_starlette", "starlette_context", "pydantic_settings", "openai"):
        importorskip(module, "serve")
    from tests.tiny_models import build_llama

    prompts, base = _files(tmp_path)
    out = tmp_path / "v.jsonl"
    # the judge reads the whole judging prompt (~460 tokens): a model whose context holds it (transformers serve
    # refuses longer prompts since 5.25)
    judge = build_llama(tmp_path / "judge", tiny_zoo["tokenizer"], ctx=1024)
    with _aura_serve(judge, tmp_path / "serve.log") as url:
        r = run_aura_here(
            *("eval", "--model", tiny_zoo["llama"], "--judge", url, "--judge-prompts", prompts),
            *("--baseline", tiny_zoo["gpt2"], "--judge-out", out),  # a baseline model: it answers too
            *("--judge-attempts", 2, "--judge-max-tokens", 8, "--max-new-tokens", 8),
        )
    assert r.returncode == 0, r.stdout + r.stderr
    records = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [(r["id"], r["order"]) for r in records] == [(i, o) for i in BASE for o in ("AB", "BA")]
    for rec in records:
        assert rec["judge_model"] == str(judge)
        assert len(rec["replies"]) == rec["attempts"] and rec["raw"] == rec["replies"][-1]
        assert jv.parse_verdict(rec["raw"])[0] == rec["verdict"]  # what was recorded is what the reply says
        if rec["verdict"] is None:  # garbage from a random model: asked again, then invalid, never guessed
            assert rec["attempts"] == 2 and rec["error"] == "no_verdict" and rec["winner"] is None
    summary = json.loads(out.with_suffix(".json").read_text(encoding="utf-8"))
    assert summary["baseline_kind"] == "model" and summary["judge"]["model"] == str(judge)
    o = summary["overall"]
    assert o["wins"] + o["ties"] + o["losses"] + o["invalid"] == o["prompts"] == 3
    assert o["valid"] == o["wins"] + o["ties"] + o["losses"]
    assert summary["calls"] == {"asked": 6, "reused": 0, "requests": 1 + sum(r["attempts"] for r in records)}
    assert sum(t["prompts"] for t in summary["categories"].values()) == 3
    assert "95% CI (Wilson)" in r.stdout


def test_a_pipeline_eval_stage_with_the_judge_puts_its_tally_on_the_report_card(tiny_zoo, tmp_path, monkeypatch):
    """An ``eval`` stage with ``judge:`` writes its summary in the stage folder; the report card reads it back
    into a table of its own: the model's stage, the baseline, the judge's model, the tally and the rate."""
    for var in ("AURA_JUDGE_API_KEY", "OPENAI_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    prompts, base = _files(tmp_path)
    spec, out = tmp_path / "juez.yaml", tmp_path / "out"
    with _fixed_judge() as (url, state):
        spec.write_text(
            f"""description: {{es: "juez", en: "judge"}}
stages:
  - name: chat
    command: eval
    options: {{model: [{tiny_zoo["llama"]}], judge: "{url}", baseline: {base}, judge_prompts: {prompts},
               max_new_tokens: 4}}
""",
            encoding="utf-8",
        )
        r = run_aura_here("pipeline", "run", spec, "-o", out, env={"AURA_JUDGE_API_KEY": "s3cret", "AURA_LANG": "en"})
        assert r.returncode == 0, r.stdout + r.stderr
        assert state["chats"] == 2 + 2 + 6  # the stage judged every prompt in both orders
    summary = json.loads((out / "chat" / "eval-judge.json").read_text(encoding="utf-8"))
    [row] = json.loads((out / "report.json").read_text(encoding="utf-8"))["judges"]
    assert row["overall"] == summary["overall"] and row["judge"] == "juez" and row["baseline"] == str(base)
    low, high = jv.wilson(1.5, 2)
    md = (out / "report.md").read_text(encoding="utf-8")
    assert "## Spanish chat judge" in md, md
    assert f"| base.jsonl | juez | 3 | 1 / 1 / 0 / 1 | 0.750 [{low:.3f}, {high:.3f}] |" in md, md
