"""``aura studio``: the JSON API, its security (token, cross-site POSTs, run names) and the page in a real browser."""

from __future__ import annotations

import json
import os
import shutil
import socket
import threading
import time
from pathlib import Path

import pytest

from tests.evidence import importorskip, require_or_skip

importorskip("starlette", "studio")
from starlette.testclient import TestClient  # noqa: E402

from aura.studio.app import create_app  # noqa: E402
from aura.watch.runlog import read_log  # noqa: E402
from tests.conftest import run_aura_here  # noqa: E402

BASE = "http://127.0.0.1:7860"
HEADER = "epoch,step,tokens,train_loss,val_loss,lr,grad_norm,tokens_per_s,mfu,seconds,kind,time\n"


def make_run(root: Path, name: str, rows: int = 0, status: str = "finished") -> Path:
    d = root / name
    d.mkdir(parents=True)
    (d / "run.json").write_text(json.dumps({"kind": "pretrain", "status": status}))
    with open(d / "training_log.csv", "w") as f:
        f.write(HEADER)
        for s in range(1, rows + 1):
            f.write(f"1,{s},{s * 128},{5 - s / rows:.6f},{'' if s % 10 else 4.5},0.001,1.0,1000,,{s},step,\n")
    return d


def client(root: Path, token: str | None = None) -> tuple[TestClient, dict]:
    c = TestClient(create_app(root, token=token), base_url=BASE)
    csrf = c.get("/api/session", params={"token": token} if token else None).json()["csrf"]
    return c, {"X-Aura-CSRF": csrf, "Origin": BASE}


def test_token_required_off_loopback(tmp_path):
    make_run(tmp_path, "a", rows=3)
    app = create_app(tmp_path, token="s3cret")
    c = TestClient(app, base_url=BASE)
    for path in ("/", "/api/runs", "/api/runs/a/metrics", "/static/app.js", "/api/hardware"):
        assert c.get(path).status_code == 401, path
    assert c.get("/api/runs", params={"token": "wrong"}).status_code == 401
    assert c.get("/api/runs", headers={"Authorization": "Bearer s3cret"}).status_code == 200
    assert c.get("/", params={"token": "s3cret"}).status_code == 200  # the printed link sets the cookie
    assert [r["name"] for r in c.get("/api/runs").json()] == ["a"]
    # the command: loopback needs no token; any other address gets one generated
    from aura.studio.command import StudioConfig

    assert StudioConfig(dir=str(tmp_path)).token is None
    assert len(StudioConfig(dir=str(tmp_path), host="0.0.0.0").token) >= 24
    assert StudioConfig(dir=str(tmp_path), host="192.168.1.5", token="t").token == "t"


def test_cross_site_posts_are_refused(tmp_path):
    make_run(tmp_path, "a", status="interrupted")
    c, headers = client(tmp_path)
    body = {"command": "pretrain", "name": "x", "values": {}}
    for bad in ({}, {"Origin": BASE}, {"X-Aura-CSRF": headers["X-Aura-CSRF"]},
                {**headers, "Origin": "http://evil.example"}, {**headers, "X-Aura-CSRF": "0" * 64}):
        for path in ("/api/launch", "/api/runs/a/stop", "/api/runs/a/resume"):
            assert c.post(path, json=body, headers=bad).status_code == 403, (path, bad)
    other, _ = client(tmp_path)  # another browser session's CSRF token is not valid here
    assert c.post("/api/runs/a/stop", headers={**headers, "X-Aura-CSRF": other.get("/api/session").json()["csrf"]}
                  ).status_code == 403
    assert c.get("/api/launch").status_code == 405  # actions are POST only
    r = c.post("/api/runs/a/stop", headers=headers)  # the page's own request passes the guard
    assert r.status_code == 400 and "not running" in r.json()["error"]


def test_run_names_outside_the_runs_folder_are_404(tmp_path):
    root = tmp_path / "runs"
    make_run(root, "a", rows=3)
    make_run(root / "group", "nested", rows=3)
    outside = make_run(tmp_path, "outside", rows=3)
    (root / "link").symlink_to(outside)
    c, _ = client(root)
    assert c.get("/api/runs/a/metrics").status_code == 200
    for name in ("..", "%2e%2e", "..%2Foutside", "link", "group%2Fnested", "group", "%2Fetc", "missing", "%2e"):
        for suffix in ("", "/metrics"):
            assert c.get(f"/api/runs/{name}{suffix}").status_code == 404, name
    ids = {r["path"]: r["id"] for r in c.get("/api/runs").json()}
    assert ids[str(root / "a")] == "a" and ids[str(root / "group" / "nested")] is None


def test_launch_runs_only_aura_commands_with_list_arguments(tmp_path):
    c, headers = client(tmp_path)

    def post(body):
        return c.post("/api/launch", json=body, headers=headers)

    for command in ("sh", "chat", "../pretrain", None):
        r = post({"command": command, "name": "x", "values": {}})
        assert r.status_code == 400 and "pretrain, finetune" in r.json()["error"]
    for name in ("..", "../x", "a/b", ".hidden", "", "x y"):
        assert post({"command": "pretrain", "name": name, "values": {}}).status_code == 400, name
    r = post({"command": "pretrain", "name": "x", "values": {"output_dir": "/tmp/elsewhere"}})
    assert r.status_code == 400 and "output_dir" in r.json()["error"]  # the run folder is the studio's
    r = post({"command": "pretrain", "name": "x", "values": {"max_steps": "diez"}})
    assert r.status_code == 400 and "--max-steps" in r.json()["error"]  # the CLI's own validation
    assert not (tmp_path / "x").exists() and not (tmp_path / ".aura-studio").exists()
    prompt = "hola; rm -rf ~ $(id) `id`"
    r = c.post("/api/preview", json={"command": "pretrain", "name": "x",
                                     "values": {"sample_prompt": prompt, "max_steps": "7"}}, headers=headers)
    assert r.json()["argv"] == ["pretrain", "--sample-prompt", prompt, "--max-steps", "7",
                                "--output-dir", str((tmp_path / "x").resolve())]  # one list item, no shell
    r = c.post("/api/preview", json={"command": "pretrain", "name": "x", "values": {"data": "a.txt -rf"}},
               headers=headers)
    assert r.status_code == 400 and "-rf" in r.json()["error"]  # argparse's refusal, not a crash
    fields = {f["name"]: f for f in c.get("/api/forms/pretrain").json()["fields"]}
    assert fields["model_preset"]["default"] == "auto" and "manual" in fields["model_preset"]["choices"]
    assert fields["max_steps"]["help"]["es"] and "output_dir" not in fields


def test_metrics_read_incrementally_and_downsampled(tmp_path):
    d = make_run(tmp_path, "big", rows=10_000)
    with open(d / "training_log.csv", "a") as f:  # a loss spike must survive downsampling
        f.write("1,10001,0,99.5,,0.001,1.0,1000,,1,step,\n")
    c, _ = client(tmp_path)
    m = c.get("/api/runs/big/metrics", params={"max_points": 200}).json()
    assert m["rows"] == 10_001
    train = m["series"]["train_loss"]
    assert len(train["x"]) <= 200 and 99.5 in train["y"] and train["x"][-1] == 10_001
    assert len(m["series"]["val_loss"]["x"]) <= 200 and set(m["columns"]) >= {"train_loss", "val_loss", "lr"}
    full = c.get("/api/runs/big/metrics", params={"max_points": 100_000}).json()["series"]["train_loss"]
    assert full["y"] == [r["train_loss"] for r in read_log(d)]  # the same values `aura runs` reads
    with open(d / "training_log.csv", "a") as f:  # two new rows and one still being written
        f.write("1,10002,0,3.0,,0.001,1.0,1000,,1,step,\n1,10003,0,2.5,,0.001,1.0,1000,,1,step,\n1,10004,0,2.")
    m = c.get("/api/runs/big/metrics", params={"max_points": 100_000}).json()
    assert m["rows"] == 10_003 and m["series"]["train_loss"]["y"][-2:] == [3.0, 2.5]
    with open(d / "training_log.csv", "a") as f:
        f.write("25,,0.001,1.0,1000,,1,step,\n")
    assert c.get("/api/runs/big/metrics").json()["rows"] == 10_004
    make_run(tmp_path, "restarted", rows=50)
    c.get("/api/runs/restarted/metrics")
    (tmp_path / "restarted" / "training_log.csv").write_text(HEADER + "1,1,0,4.0,,0.001,1.0,1000,,1,step,\n")
    assert c.get("/api/runs/restarted/metrics").json()["rows"] == 1  # a log started over is read again
    assert c.get("/api/runs/big/metrics", params={"max_points": "x"}).status_code == 400


def test_studio_command_refusals(tmp_path):
    proc = run_aura_here("studio", tmp_path / "missing")
    assert proc.returncode == 2 and "is not a directory" in proc.stderr
    proc = run_aura_here("studio", tmp_path, "--port", "70000")
    assert proc.returncode == 2 and "--port" in proc.stderr


# ---------------------------------------------------------------------------------------- a real browser

CHROMIUM, DRIVER = shutil.which("chromium"), shutil.which("chromedriver")
TINY = {"model_preset": "manual", "embed_size": "64", "num_layers": "2", "num_heads": "4", "seq_length": "32",
        "intermediate_size": "256", "batch_size": "4", "log_interval": "1", "sample_tokens": "0",
        "max_steps": "1000", "save_steps": "20", "eval_interval": "100"}
# 1000 steps: long enough that the run is still training when the page comes back to stop it, even on a
# loaded machine (40 steps finished before the stop button could show, under a full parallel test run)


@pytest.fixture
def chromium():
    """Before the server starts: skipped without Debian's chromium and its driver, failed if CI requires them."""
    if not (CHROMIUM and DRIVER):
        require_or_skip("browser", "needs Debian's chromium and chromium-driver (apt-get install chromium chromium-driver)")


@pytest.fixture
def served(tmp_path, monkeypatch):
    """The studio on a free loopback port in this process (uvicorn), over an empty runs folder."""
    import uvicorn

    monkeypatch.setenv("AURA_LANG", "es")
    root = tmp_path / "runs"
    root.mkdir()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(create_app(root), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    yield root, f"http://127.0.0.1:{port}/"
    server.should_exit = True
    thread.join(10)
    from aura.core.rundir import lock_holder

    for d in root.iterdir():  # a run the test left going (it failed midway) must not outlive it
        pid = (lock_holder(d) or {}).get("pid") if d.is_dir() else None
        if isinstance(pid, int):
            os.kill(pid, 15)


@pytest.mark.browser
@pytest.mark.slow
def test_browser_launch_watch_stop_resume_in_spanish(chromium, served, tmp_path):
    """Chromium, AURA_LANG=es: the pretrain form starts a tiny run, its points grow on the run page, the runs
    page lists it (with tokens/s, ETA and the plan's length), Stop leaves it 'interrumpida' with its checkpoint,
    Resume takes it to 'terminada', then Try chats with its final model (the answer streamed piece by piece)
    and, side by side, with an earlier checkpoint, a too long message shows the context note; Delete (the
    name typed in the browser's prompt) moves the run to the studio's trash."""
    webdriver = importorskip("selenium.webdriver", "browser")
    from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import Select, WebDriverWait

    root, url = served
    shots = Path(os.environ.get("AURA_STUDIO_SCREENSHOTS") or tmp_path / "shots")
    shots.mkdir(parents=True, exist_ok=True)
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,1000", "--lang=es-ES"):
        opts.add_argument(a)
    driver = webdriver.Chrome(service=webdriver.ChromeService(executable_path=DRIVER), options=opts)
    # the page redraws parts of itself every 2 s: an element found just before a redraw goes stale
    wait = WebDriverWait(driver, 240, poll_frequency=0.5,
                         ignored_exceptions=(StaleElementReferenceException, NoSuchElementException))
    text = lambda css: driver.find_element(By.CSS_SELECTOR, css).text  # noqa: E731
    try:
        driver.get(url + "#/launch")
        wait.until(lambda d: d.find_elements(By.ID, "f_max_steps"))
        assert text("h1") == "Lanzar un comando de Aura"
        Select(driver.find_element(By.ID, "f_model_preset")).select_by_visible_text("manual")
        for name, value in TINY.items():
            if name != "model_preset":
                el = driver.find_element(By.ID, f"f_{name}")
                el.clear()
                el.send_keys(value)
        wait.until(lambda d: "--max-steps 1000" in text("#preview") and "--embed-size 64" in text("#preview"))
        assert text("#preview").startswith("aura pretrain --model-preset manual")
        driver.save_screenshot(str(shots / "lanzar.png"))
        driver.find_element(By.ID, "launch").click()
        wait.until(lambda d: d.current_url.endswith("#/run/demo"))

        def rows():
            el = driver.find_elements(By.ID, "points")
            return int(el[0].get_attribute("data-rows") or 0) if el else 0
        wait.until(lambda d: rows() >= 3)
        first = rows()
        wait.until(lambda d: rows() > first)  # new points appear without reloading
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "[data-chart] canvas"))
        driver.save_screenshot(str(shots / "ejecucion.png"))
        driver.get(url + "#/")
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "tr[data-run='demo'] .status"))
        wait.until(lambda d: text("tr[data-run='demo'] .status") == "en curso")
        step = lambda: int(text("tr[data-run='demo'] [data-col=step]").replace(".", "") or 0)  # noqa: E731
        before = wait.until(lambda d: step() or 1)
        wait.until(lambda d: step() > before)  # the list updates itself too
        wait.until(lambda d: text("tr[data-run='demo'] [data-col=eta]") and text("tr[data-run='demo'] [data-col=tps]"))
        assert text("tr[data-run='demo'] [data-col=plan]") == "/ 1000"
        driver.save_screenshot(str(shots / "ejecuciones.png"))

        driver.get(url + "#/run/demo")
        wait.until(lambda d: d.find_elements(By.ID, "stop"))
        driver.find_element(By.ID, "stop").click()
        wait.until(lambda d: text("#run-title .status") == "interrumpida")
        wait.until(lambda d: d.find_elements(By.ID, "resume-cmd"))
        wait.until(lambda d: "--resume-from latest" in text("#resume-cmd") and "checkpoint-step-" in text("#ckpts"))
        driver.save_screenshot(str(shots / "interrumpida.png"))
        driver.find_element(By.ID, "resume").click()
        WebDriverWait(driver, 900, poll_frequency=1, ignored_exceptions=(StaleElementReferenceException,
                      NoSuchElementException)).until(lambda d: text("#run-title .status") == "terminada")
        driver.save_screenshot(str(shots / "terminada.png"))

        # Try: chat with the final model, in Spanish, the answer streamed piece by piece; then side by side
        # with its last checkpoint
        wait.until(lambda d: d.find_elements(By.ID, "try-final"))
        driver.find_element(By.ID, "try-final").click()
        wait.until(lambda d: d.find_elements(By.ID, "try-prompt"))
        assert text("h1") == "Probar un modelo"
        assert Select(driver.find_element(By.ID, "try-model-0")).first_selected_option.get_attribute("value") == \
            "demo/final"
        driver.find_element(By.ID, "try-temp").clear()
        driver.find_element(By.ID, "try-temp").send_keys("0")
        driver.find_element(By.ID, "try-prompt").send_keys("Hola, ¿quién eres?")
        driver.find_element(By.ID, "try-send").click()
        answer = "#conv-0 [data-answer][data-done]"
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, answer))
        box = driver.find_element(By.CSS_SELECTOR, answer)
        assert int(box.get_attribute("data-pieces") or 0) >= 2 and box.text.strip()  # streamed, not one block
        assert "tokens/s" in text("#stats-0") and not text("#try-error")
        driver.find_element(By.ID, "try-two").click()
        ckpt = [o.get_attribute("value") for o in Select(driver.find_element(By.ID, "try-model-1")).options
                if "checkpoint-step-" in o.get_attribute("value")]
        Select(driver.find_element(By.ID, "try-model-1")).select_by_value(ckpt[-1])  # the oldest kept
        driver.find_element(By.ID, "try-prompt").send_keys("Cuéntame un cuento")
        driver.find_element(By.ID, "try-send").click()
        wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#conv-0 [data-done]")) == 2
                   and len(d.find_elements(By.CSS_SELECTOR, "#conv-1 [data-done]")) == 1)
        assert not text("#try-error")
        driver.save_screenshot(str(shots / "probar.png"))
        # a message far beyond the model's 32 positions: the note `aura chat` prints comes with the answer
        driver.find_element(By.ID, "try-prompt").send_keys(" ".join(["palabra"] * 60))
        driver.find_element(By.ID, "try-send").click()
        wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#conv-0 [data-done]")) == 3)
        notes = driver.find_elements(By.CSS_SELECTOR, "#conv-0 [data-notice]")
        assert notes and "contexto del modelo" in notes[-1].text and not text("#try-error")

        info = json.loads((root / "demo" / "run.json").read_text())
        assert info["status"] == "finished"
        assert [h["resumed_from"] is not None for h in info["history"]] == [False, True]
        assert (root / "demo" / "final").is_dir()
        # Delete, confirmed by typing the run's name: it leaves the list for the studio's trash
        driver.get(url + "#/run/demo")
        wait.until(lambda d: d.find_elements(By.ID, "delete"))
        driver.find_element(By.ID, "delete").click()
        alert = wait.until(expected_conditions.alert_is_present())
        assert "demo" in alert.text
        alert.send_keys("demo")
        alert.accept()
        wait.until(lambda d: d.current_url.endswith("#/") and d.find_elements(By.ID, "toast"))
        wait.until(lambda d: not d.find_elements(By.CSS_SELECTOR, "tr[data-run='demo']"))
    finally:
        driver.quit()
    assert not (root / "demo").exists()
    trashed = list((root / ".aura-studio" / "trash").iterdir())
    assert len(trashed) == 1 and trashed[0].name.startswith("demo-") and (trashed[0] / "final").is_dir()


def test_delete_moves_a_stopped_run_to_the_trash_and_refuses_a_running_one(tmp_path):
    import subprocess
    import sys
    import time

    make_run(tmp_path, "vieja", rows=3)
    make_run(tmp_path, "viva", rows=3, status="running")
    c, headers = client(tmp_path)
    assert c.post("/api/runs/vieja/delete", json={"confirm": "vieja"}).status_code == 403  # no CSRF
    r = c.post("/api/runs/vieja/delete", json={"confirm": "otra"}, headers=headers)
    assert r.status_code == 400 and "exact name" in r.json()["error"]
    assert c.post("/api/runs/..%2Fx/delete", json={"confirm": "../x"}, headers=headers).status_code == 404

    holder = subprocess.Popen([sys.executable, "-c", "import sys, time\nfrom aura.core.rundir import RunLock\n"
                               f"assert RunLock({str(tmp_path / 'viva')!r}).acquire() is None\n"
                               "print('held', flush=True); time.sleep(60)"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        r = c.post("/api/runs/viva/delete", json={"confirm": "viva"}, headers=headers)
        assert r.status_code == 400 and "stop it before deleting" in r.json()["error"]
        assert (tmp_path / "viva" / "run.json").is_file()
    finally:
        holder.kill()
        holder.wait()

    r = c.post("/api/runs/vieja/delete", json={"confirm": "vieja"}, headers=headers)
    assert r.status_code == 200, r.text
    trash = tmp_path / r.json()["trash"]
    assert not (tmp_path / "vieja").exists() and (trash / "training_log.csv").is_file()
    assert trash.parent == tmp_path / ".aura-studio" / "trash"
    time.sleep(0.05)
    assert [x["name"] for x in c.get("/api/runs").json()] == ["viva"]  # the trash is not listed
    assert c.get("/api/runs/vieja").status_code == 404
