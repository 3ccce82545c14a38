"""`--report-to` (aura.train.run.trackers): each tracker's own record, read back with its own reader, equals
training_log.csv: a real MLflow tracking server (SQLite backend) across a SIGTERM + resume, W&B offline,
Trackio's local store; a tracker that is down only warns; `none` writes no TensorBoard; a bad name exits 2."""

from __future__ import annotations

import csv
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import run_aura, run_aura_here
from tests.evidence import importorskip

TINY = [
    "--model-preset",
    "manual",
    "--embed-size",
    "32",
    "--num-layers",
    "1",
    "--num-heads",
    "2",
    "--seq-length",
    "32",
    "--intermediate-size",
    "64",
    "--batch-size",
    "4",
    "--log-interval",
    "2",
    "--sample-tokens",
    "0",
    "--save-steps",
    "0",
    "--eval-interval",
    "4",
    "--eval-batches",
    "2",
]


def csv_metrics(run: Path) -> dict[str, list[tuple[int, float]]]:
    """What a tracker must hold, from training_log.csv alone: a step row's columns under their names, an
    eval/epoch row's value columns as eval/NAME, epoch/NAME; (step, value) in row order."""
    out: dict[str, list[tuple[int, float]]] = {}
    with open(run / "training_log.csv", newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            kind = row["kind"]
            for col, value in row.items():
                if col in ("time", "kind", "step") or value == "":
                    continue
                if kind != "step" and col in ("epoch", "tokens", "seconds"):
                    continue
                out.setdefault(col if kind == "step" else f"{kind}/{col}", []).append((int(row["step"]), float(value)))
    return out


def close(a: dict[str, list[tuple[int, float]]], b: dict[str, list[tuple[int, float]]]) -> None:
    assert sorted(a) == sorted(b)
    for key in a:
        steps_a, steps_b = [s for s, _ in a[key]], [s for s, _ in b[key]]
        assert steps_a == steps_b, key
        assert [v for _, v in a[key]] == pytest.approx([v for _, v in b[key]], rel=1e-6, abs=1e-9), key


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory):
    """`mlflow server` with a SQLite backend on a free loopback port, for this module; stopped after."""
    importorskip("mlflow", "mlflow")
    importorskip("sqlalchemy", "mlflow")
    importorskip("flask_cors", "mlflow")
    importorskip("alembic", "mlflow")
    root = tmp_path_factory.mktemp("mlflow")
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mlflow",
            "server",
            "--backend-store-uri",
            f"sqlite:///{root / 'mlflow.db'}",
            "--default-artifact-root",
            str(root / "artifacts"),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            "1",
        ],
        stdout=open(root / "server.log", "w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    uri = f"http://127.0.0.1:{port}"
    import urllib.request

    deadline = time.monotonic() + 120
    while True:
        try:
            urllib.request.urlopen(uri + "/health", timeout=2).read()
            break
        except Exception:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                pytest.fail("mlflow server did not start: " + (root / "server.log").read_text()[-2000:])
            time.sleep(0.5)
    yield uri
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)


def mlflow_metrics(uri: str, run_id: str) -> dict[str, list[tuple[int, float]]]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    keys = client.get_run(run_id).data.metrics.keys()
    return {
        k: [
            (m.step, m.value) for m in sorted(client.get_metric_history(run_id, k), key=lambda m: (m.step, m.timestamp))
        ]
        for k in keys
    }


def test_mlflow_server_equals_csv_across_sigterm_and_resume(prepared_corpus, mlflow_server, tmp_path):
    run = tmp_path / "run"
    env = dict(os.environ, AURA_LANG="en", AURA_PLAIN="1", PYTHONUNBUFFERED="1", MLFLOW_TRACKING_URI=mlflow_server)
    common = ["--data", str(prepared_corpus), *TINY, "--max-steps", "24", "--report-to", "tensorboard,mlflow"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "aura", "pretrain", "--output-dir", str(run), *common],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if "Step 9/24" in line or "Step 10/24" in line:
            proc.send_signal(signal.SIGTERM)
            break
    out = "".join(lines) + proc.stdout.read()
    assert proc.wait(timeout=300) == 3, out
    first = json.loads((run / "run.json").read_text())["trackers"]["mlflow"]
    resumed = run_aura("pretrain", "--output-dir", run, *common, "--resume-from", "latest", env=env)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "disabled" not in resumed.stdout + resumed.stderr
    record = json.loads((run / "run.json").read_text())["trackers"]["mlflow"]
    assert record["run_id"] == first["run_id"] and record["last_step"] == 24
    expected = csv_metrics(run)
    assert [s for s, _ in expected["train_loss"]] == list(range(2, 25, 2))  # no step lost or doubled
    close(mlflow_metrics(mlflow_server, record["run_id"]), expected)
    from mlflow.tracking import MlflowClient

    got = MlflowClient(tracking_uri=mlflow_server).get_run(record["run_id"])
    assert got.info.status == "FINISHED" and got.data.tags["aura.final"] == str(run.resolve() / "final")
    assert got.data.params["plan.total_steps"] == "24" and got.data.params["config.report_to"] == "tensorboard,mlflow"
    assert "hardware.name" in got.data.params
    assert MlflowClient(tracking_uri=mlflow_server).get_experiment(got.info.experiment_id).name == "run"


def wandb_history(run_dir: Path, path: Path | None = None) -> dict[str, list[tuple[int, float]]]:
    """The offline run's history records, read from its .wandb file (LevelDB log blocks of W&B's own protobuf
    `Record`s; wandb 0.31 reads them in its Go core and ships no Python reader of its own); ``path``: that
    file, when the folder holds several runs."""
    from wandb.proto import wandb_internal_pb2 as pb

    if path is None:
        (path,) = run_dir.glob("wandb/offline-run-*/run-*.wandb")
    data = path.read_bytes()
    block, pos, records, pending = 32768, 7, [], b""  # W&B's header: "WANDB" magic + version
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        chunk = data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind == 0 and length == 0:  # padding to the block's end
            pos += block - pos % block if pos % block else 0
            continue
        pending = chunk if kind in (1, 2) else pending + chunk
        if kind in (1, 4):
            record = pb.Record()
            record.ParseFromString(pending)
            records.append(record)
    out: dict[str, list[tuple[int, float]]] = {}
    for record in records:
        if record.WhichOneof("record_type") != "history":
            continue
        items = {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in record.history.item}
        step = record.history.step.num
        for key, value in items.items():
            if not key.startswith("_") and isinstance(value, (int, float)):
                out.setdefault(key, []).append((step, float(value)))
    return out


def test_wandb_offline_history_equals_csv(prepared_corpus, tmp_path):
    importorskip("wandb", "wandb")
    run = tmp_path / "run"
    env = {"WANDB_MODE": "offline", "WANDB_SILENT": "true", "WANDB_DIR": str(run)}
    r = run_aura(
        "pretrain",
        "--data",
        prepared_corpus,
        "--output-dir",
        run,
        *TINY,
        "--max-steps",
        "8",
        "--report-to",
        "wandb",
        env=env,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "disabled" not in r.stdout + r.stderr
    assert not (run / "tb").exists()
    record = json.loads((run / "run.json").read_text())["trackers"]["wandb"]
    assert record["last_step"] == 8
    close(wandb_history(run), csv_metrics(run))


def test_trackio_local_store_equals_csv(prepared_corpus, tmp_path):
    importorskip("trackio", "trackio")
    run = tmp_path / "run"
    store = tmp_path / "trackio"
    r = run_aura(
        "pretrain",
        "--data",
        prepared_corpus,
        "--output-dir",
        run,
        *TINY,
        "--max-steps",
        "8",
        "--report-to",
        "trackio,tensorboard",
        env={"TRACKIO_DIR": str(store), "TRACKIO_PROJECT": "aura-test"},
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "disabled" not in r.stdout + r.stderr
    assert (run / "tb").is_dir()
    record = json.loads((run / "run.json").read_text())["trackers"]["trackio"]
    code = (
        "import json, sys; from trackio.sqlite_storage import SQLiteStorage; "
        "print(json.dumps(SQLiteStorage.get_logs('aura-test', sys.argv[1]), default=str))"
    )
    got = subprocess.run(
        [sys.executable, "-c", code, record["run_id"]],
        capture_output=True,
        text=True,
        env=dict(os.environ, TRACKIO_DIR=str(store)),
        timeout=120,
    )
    assert got.returncode == 0, got.stderr
    history: dict[str, list[tuple[int, float]]] = {}
    for log in json.loads(got.stdout):
        for key, value in log.items():
            if key not in ("step", "timestamp") and isinstance(value, (int, float)) and not key.startswith("_"):
                history.setdefault(key, []).append((int(log["step"]), float(value)))
    close(history, csv_metrics(run))


def once_each(history: dict[str, list[tuple[int, float]]]) -> None:
    for key, points in history.items():
        steps = [s for s, _ in points]
        assert len(steps) == len(set(steps)), (key, steps)


def after(history: dict[str, list[tuple[int, float]]], step: int, *, upto: bool = False) -> dict:
    out = {k: [(s, v) for s, v in pts if (s <= step if upto else s > step)] for k, pts in history.items()}
    return {k: v for k, v in out.items() if v}


def test_kill9_then_resume_from_an_older_checkpoint_shows_no_step_twice(prepared_corpus, mlflow_server, tmp_path):
    """A run killed with kill -9 (run.json still says running, the trackers hold steps past the checkpoint) and
    resumed from an older checkpoint: TensorBoard's readers drop the steps the first writer logged after it
    (EventAccumulator), and MLflow, W&B (offline) and Trackio, which cannot rewind, get a new run linked to the
    first that holds the steps after the checkpoint once each (their own stores read back); the log says so."""
    importorskip("wandb", "wandb")
    importorskip("trackio", "trackio")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run, store = tmp_path / "run", tmp_path / "trackio"
    env = dict(
        os.environ,
        AURA_LANG="en",
        AURA_PLAIN="1",
        PYTHONUNBUFFERED="1",
        MLFLOW_TRACKING_URI=mlflow_server,
        WANDB_MODE="offline",
        WANDB_SILENT="true",
        WANDB_DIR=str(run),
        TRACKIO_DIR=str(store),
        TRACKIO_PROJECT="aura-kill",
    )
    common = [
        "--data",
        str(prepared_corpus),
        *TINY,
        "--max-steps",
        "100",
        "--save-steps",
        "4",
        "--keep-last",
        "0",
        "--report-to",
        "tensorboard,mlflow,wandb,trackio",
    ]
    proc = subprocess.Popen(
        [sys.executable, "-m", "aura", "pretrain", "--output-dir", str(run), *common],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    lines, ready = [], False
    for line in proc.stdout:
        lines.append(line)
        step = int(line.split("Step ")[1].split("/")[0]) if "Step " in line and "/100" in line else 0
        if ready and step % 4 == 2:  # between two saves (checkpoint, best/): a kill -9 mid-training
            proc.kill()  # SIGKILL: no checkpoint, no run.json update
            break
        # every tracker has started (run.json names its run) and MLflow's server holds steps past checkpoint 8
        trackers = json.loads((run / "run.json").read_text()).get("trackers", {}) if step >= 12 else {}
        ready = ready or (
            len(trackers) == 3
            and max(
                (s for s, _ in mlflow_metrics(mlflow_server, trackers["mlflow"]["run_id"]).get("train_loss", [])),
                default=0,
            )
            >= 12
        )
    proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL, "".join(lines)
    first = json.loads((run / "run.json").read_text())
    assert first["status"] == "running"
    resumed = run_aura(
        "pretrain", "--output-dir", run, *common, "--resume-from", run / "checkpoint-step-8", "--fork", env=env
    )  # an older checkpoint: the later ones are moved aside
    log = resumed.stdout + resumed.stderr
    assert resumed.returncode == 0, log
    assert "disabled" not in log
    for name in ("mlflow", "wandb", "trackio"):
        assert f"{name}: resuming at step 8, but run {first['trackers'][name]['run_id']} may hold later steps" in log
    record = json.loads((run / "run.json").read_text())["trackers"]
    expected = csv_metrics(run)
    assert [s for s, _ in expected["train_loss"]] == list(range(2, 101, 2))
    # TensorBoard: one value per step, the resumed run's
    acc = EventAccumulator(str(run / "tb"))
    acc.Reload()
    tb = [(e.step, e.value) for e in acc.Scalars("Loss/train_step")]
    close({"train_loss": tb}, {"train_loss": expected["train_loss"]})
    for name in ("mlflow", "wandb", "trackio"):
        assert record[name]["run_id"] != first["trackers"][name]["run_id"] and record[name]["last_step"] == 100
    # MLflow: the first run holds steps past 8 (the case at hand), the new one exactly the steps after 8
    old = mlflow_metrics(mlflow_server, first["trackers"]["mlflow"]["run_id"])
    assert max(s for s, _ in old["train_loss"]) > 8
    once_each(old)
    close(after(old, 8, upto=True), after(expected, 8, upto=True))
    close(mlflow_metrics(mlflow_server, record["mlflow"]["run_id"]), after(expected, 8))
    from mlflow.tracking import MlflowClient

    tags = MlflowClient(tracking_uri=mlflow_server).get_run(record["mlflow"]["run_id"]).data.tags
    assert tags["aura.parent_run"] == first["trackers"]["mlflow"]["run_id"] and tags["aura.parent_step"] == "8"
    # W&B offline: a second run (another id) with the steps after 8; the first keeps what its core had written
    files = {p.parent.name.rsplit("-", 1)[-1]: p for p in run.glob("wandb/offline-run-*/run-*.wandb")}
    assert set(files) == {first["trackers"]["wandb"]["run_id"], record["wandb"]["run_id"]}
    once_each(wandb_history(run, files[first["trackers"]["wandb"]["run_id"]]))  # what its core wrote before the kill
    close(wandb_history(run, files[record["wandb"]["run_id"]]), after(expected, 8))
    # Trackio's local store: likewise
    code = (
        "import json, sys; from trackio.sqlite_storage import SQLiteStorage; "
        "print(json.dumps([SQLiteStorage.get_logs('aura-kill', n) for n in sys.argv[1:]], default=str))"
    )
    got = subprocess.run(
        [sys.executable, "-c", code, first["trackers"]["trackio"]["run_id"], record["trackio"]["run_id"]],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert got.returncode == 0, got.stderr
    histories = []
    for logs in json.loads(got.stdout):
        history: dict[str, list[tuple[int, float]]] = {}
        for entry in logs:
            for key, value in entry.items():
                if key not in ("step", "timestamp") and isinstance(value, (int, float)) and not key.startswith("_"):
                    history.setdefault(key, []).append((int(entry["step"]), float(value)))
        histories.append(history)
    once_each(histories[0])  # what Trackio had stored before the kill
    close(histories[1], after(expected, 8))


def test_unreachable_mlflow_only_warns_and_none_writes_no_tensorboard(prepared_corpus, tmp_path):
    importorskip("mlflow", "mlflow")
    run = tmp_path / "run"
    r = run_aura(
        "pretrain",
        "--data",
        prepared_corpus,
        "--output-dir",
        run,
        *TINY,
        "--max-steps",
        "6",
        "--report-to",
        "mlflow",
        env={"MLFLOW_TRACKING_URI": f"http://127.0.0.1:{free_port()}"},
    )
    assert r.returncode == 0, r.stdout + r.stderr
    both = r.stdout + r.stderr
    assert both.count("Tracking to mlflow is disabled") == 1, both
    assert "MLFLOW_TRACKING_URI" in both
    assert [s for s, _ in csv_metrics(run)["train_loss"]] == [2, 4, 6]
    assert "trackers" not in json.loads((run / "run.json").read_text())
    quiet = tmp_path / "quiet"
    r = run_aura(
        "pretrain", "--data", prepared_corpus, "--output-dir", quiet, *TINY, "--max-steps", "2", "--report-to", "none"
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert not (quiet / "tb").exists() and (quiet / "training_log.csv").is_file()


def test_bad_report_to_exits_2_with_a_hint(tmp_path):
    r = run_aura_here("pretrain", "--output-dir", tmp_path / "run", "--report-to", "wandbb")
    assert r.returncode == 2, r.stdout + r.stderr
    assert "did you mean 'wandb'" in r.stderr and "Traceback" not in r.stderr
    r = run_aura_here(
        "pretrain", "--output-dir", tmp_path / "run", "--report-to", "none,mlflow", env={"AURA_LANG": "es"}
    )
    assert r.returncode == 2 and "no se combina" in r.stderr
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text("report_to: mlflow,trakio\n", encoding="utf-8")
    r = run_aura_here("pretrain", "--output-dir", tmp_path / "run", "--config", cfg)
    assert r.returncode == 2 and "did you mean 'trackio'" in r.stderr


def test_pipeline_stage_report_to_is_checked_by_the_command(tmp_path):
    """A pipeline stage's report_to goes through the command's own config: a bad name is refused before anything
    runs, naming the stage."""
    tiny = Path(__file__).parent / "pipelines" / "tiny.yaml"
    text = tiny.read_text(encoding="utf-8").replace(
        "    command: pretrain\n    options:\n", "    command: pretrain\n    options:\n      report_to: mlfow\n", 1
    )
    assert "report_to: mlfow" in text
    bad = tmp_path / "bad.yaml"
    bad.write_text(text, encoding="utf-8")
    r = run_aura_here("pipeline", "run", bad, "--output-dir", tmp_path / "out")
    assert r.returncode == 2, r.stdout + r.stderr
    assert "did you mean 'mlflow'" in r.stderr and "pretrain" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "out").exists()


def test_run_json_trackers_are_type_checked_when_read_back(tmp_path):
    """run.json's trackers keep a resumed run's tracker ids only when their shape is Aura's; a hand edit that
    breaks it starts new tracker runs (and `aura runs` drops the field with a warning, like any other)."""
    import torch

    from aura.distributed import DistInfo
    from aura.train.run.metrics import RunStatus
    from aura.watch.runs import _typed

    dist = DistInfo(device=torch.device("cpu"))
    good = {"mlflow": {"run_id": "abc", "last_step": 12}}
    for trackers, kept in (
        (good, good),
        ({"mlflow": {"run_id": 5, "last_step": 12}}, None),
        ({"mlflow": {"run_id": "abc", "last_step": "12"}}, None),
        ({"neptune": {"run_id": "abc", "last_step": 1}}, None),
        ([1, 2], None),
    ):
        (tmp_path / "run.json").write_text(json.dumps({"kind": "pretrain", "trackers": trackers}))
        assert RunStatus(tmp_path, kind="pretrain", dist=dist).data.get("trackers") == kept
    info, warning = _typed({"kind": "pretrain", "trackers": "abc"}, tmp_path / "run.json")
    assert "trackers" not in info and "trackers" in warning
