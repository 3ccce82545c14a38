"""`aura runs` and `aura plot` on run dirs laid out as docs/architecture.md describes."""

from __future__ import annotations

import json
import math
import os
import socket
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest

from tests.conftest import run_aura, run_aura_here

HEADER = "time,kind,epoch,step,tokens,train_loss,val_loss,lr,grad_norm,tokens_per_s,mfu,seconds\n"


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def make_run(
    run_dir: Path,
    *,
    status: str,
    steps: int,
    pid: int,
    checkpoints=(),
    extra_args=(),
    seq_tokens: int = 1024,
    speed: float = 5000.0,
) -> list[float]:
    """A run dir as aura pretrain writes it; returns the validation losses logged."""
    run_dir.mkdir(parents=True)
    argv = [
        str(Path(sys.prefix) / "bin" / "aura"),
        "pretrain",
        "--preset",
        "tiny",
        "--output-dir",
        str(run_dir),
        *extra_args,
    ]
    info = {
        "kind": "pretrain",
        "status": status,
        "argv": argv,
        "pid": pid,
        "host": socket.gethostname(),
        "started": _now(),
        "updated": _now(),
        "last_step": steps,
        "latest_checkpoint": str(run_dir / checkpoints[-1]) if checkpoints else None,
        "aura_version": "0.1.0",
    }
    (run_dir / "run.json").write_text(json.dumps(info), encoding="utf-8")
    vals = []
    with open(run_dir / "training_log.csv", "w", encoding="utf-8") as f:
        f.write(HEADER)
        for s in range(10, steps + 1, 10):
            lr = 1e-3 * min(1.0, s / 30)
            f.write(f"{_now()},step,0,{s},{s * seq_tokens},{9 - math.log(s):.5f},,{lr:.6g},1.1,{speed},,{s * 0.5}\n")
            if s % 40 == 0:
                val = 9.3 - math.log(s)
                vals.append(round(val, 5))
                f.write(f"{_now()},eval,0,{s},{s * seq_tokens},,{val:.5f},,,,,\n")
    for name in checkpoints:
        ck = run_dir / name
        ck.mkdir()
        (ck / "trainer_state.json").write_text(json.dumps({"step": int(name.rsplit("-", 1)[1])}))
        (ck / "model.safetensors").write_bytes(b"\0" * 4096)
    return vals


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


@pytest.fixture
def runs_dir(tmp_path):
    root = tmp_path / "runs"
    vals = {}
    vals["done"] = make_run(
        root / "done",
        status="finished",
        steps=200,
        pid=_dead_pid(),
        checkpoints=["checkpoint-step-100", "checkpoint-step-200"],
    )
    (root / "done" / "final").mkdir()
    vals["cut"] = make_run(
        root / "group" / "cut",
        status="interrupted",
        steps=130,
        pid=_dead_pid(),
        checkpoints=["checkpoint-step-100", "interrupt-step-130"],
        extra_args=["--resume-from", "runs/old", "--overwrite"],
    )
    # An unfinished checkpoint write: never "latest".
    (root / "group" / "cut" / ".tmp-checkpoint-step-140-abc").mkdir()
    vals["crashed"] = make_run(
        root / "crashed", status="running", steps=90, pid=_dead_pid(), checkpoints=["checkpoint-step-50"]
    )
    vals["live"] = make_run(root / "live", status="running", steps=50, pid=os.getpid())
    return root, vals


def test_runs_json_reports_status_steps_best_val_and_checkpoints(runs_dir):
    root, vals = runs_dir
    proc = run_aura("runs", root, "--json")
    assert proc.returncode == 0, proc.stderr
    runs = {Path(r["path"]).name: r for r in json.loads(proc.stdout)}
    assert set(runs) == {"done", "cut", "crashed", "live"}
    assert runs["done"]["status"] == "finished"
    assert runs["cut"]["status"] == "interrupted"
    assert runs["crashed"]["status"] == "stale"  # run.json says running; its process is gone
    assert runs["live"]["status"] == "running"  # this test process holds the pid
    for name in runs:
        assert runs[name]["last_step"] == {"done": 200, "cut": 130, "crashed": 90, "live": 50}[name]
        assert runs[name]["best_val_loss"] == pytest.approx(min(vals[name]), abs=1e-6)
    assert Path(runs["done"]["latest_checkpoint"]).name == "checkpoint-step-200"
    assert Path(runs["cut"]["latest_checkpoint"]).name == "interrupt-step-130"
    assert runs["live"]["latest_checkpoint"] is None
    assert runs["done"]["final_model"].endswith("final")
    sizes = sum(p.stat().st_size for p in (root / "done").rglob("*") if p.is_file())
    assert runs["done"]["size_bytes"] == sizes
    # Resume: the run's own flags, an earlier --resume-from replaced, --overwrite dropped.
    assert runs["cut"]["resume_command"] == (
        f"aura pretrain --preset tiny --output-dir {root / 'group' / 'cut'} --resume-from latest"
    )
    assert runs["crashed"]["resume_command"].endswith("--resume-from latest")
    assert runs["done"]["resume_command"] is None and runs["live"]["resume_command"] is None


def test_runs_table_plain_and_spanish(runs_dir):
    root, _ = runs_dir
    live = root / "live" / "run.json"  # a 2-node run of 120 planned steps, at step 50, 0.5 s per step
    info = json.loads(live.read_text(encoding="utf-8"))
    info.update(total_steps=120, launch={"world_size": 4, "nnodes": 2, "nproc_per_node": 2, "launcher": "torchrun"})
    live.write_text(json.dumps(info), encoding="utf-8")
    proc = run_aura("runs", cwd=root.parent)  # default DIR: ./runs
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    row = next(line for line in lines if line.startswith("group/cut") or line.startswith("group\\cut"))
    assert "interrupted" in row and "interrupt-step-130" in row and "130" in row
    assert any(line.startswith("crashed") and "stale" in line for line in lines)
    header = next(line for line in lines if line.startswith("run "))
    assert all(h in header for h in ("tokens/s", "time left", "nodes × processes"))
    live_row = next(line for line in lines if line.startswith("live"))
    assert "50/120" in live_row and "5,000" in live_row and "0:35" in live_row and "2 × 2" in live_row, live_row
    assert "To resume:" in proc.stdout and "--resume-from latest" in proc.stdout
    es = run_aura("runs", root, env={"AURA_LANG": "es"})
    assert "interrumpida" in es.stdout and "Para reanudar:" in es.stdout and "terminada" in es.stdout


def test_runs_empty_and_missing_dirs(tmp_path):
    proc = run_aura("runs", tmp_path)
    assert proc.returncode == 0 and "There are no Aura runs" in proc.stdout
    proc = run_aura_here("runs", tmp_path / "nope")
    assert proc.returncode == 2 and "nope" in proc.stderr and "Traceback" not in proc.stderr


def _colour_present(img, hex_colour: str) -> bool:
    import numpy as np

    rgb = np.array([int(hex_colour[i : i + 2], 16) / 255 for i in (1, 3, 5)])
    return bool((np.abs(img[..., :3] - rgb).max(axis=-1) < 0.02).sum() > 50)


def test_plot_writes_png_with_requested_size_and_both_runs(runs_dir, tmp_path):
    import matplotlib.image as mpimg

    root, _ = runs_dir
    out_dir = tmp_path / "plots"
    proc = run_aura(
        "plot",
        root / "done",
        root / "group" / "cut",
        "--output-dir",
        out_dir,
        "--out",
        "curves.png",
        "--width",
        "640",
        "--height",
        "320",
        "--dpi",
        "80",
    )
    assert proc.returncode == 0, proc.stderr
    img = mpimg.imread(out_dir / "curves.png")
    assert img.shape[:2] == (320, 640)
    # One colour per run: matplotlib's first two cycle colours are both drawn.
    assert _colour_present(img, "#1f77b4") and _colour_present(img, "#ff7f0e")
    assert [p.name for p in out_dir.iterdir()] == ["curves.png"]  # atomic: no temp files left


def test_plot_yaml_config_and_flags_win(runs_dir, tmp_path):
    import matplotlib.image as mpimg

    root, _ = runs_dir
    cfg = tmp_path / "plot.yaml"
    cfg.write_text("width: 500\nheight: 250\nout: from_yaml.png\n", encoding="utf-8")
    proc = run_aura("plot", root / "done", "--config", cfg, "--width", "400", "--output-dir", tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert mpimg.imread(tmp_path / "from_yaml.png").shape[:2] == (250, 400)


def test_plot_clear_errors(runs_dir, tmp_path):
    root, _ = runs_dir
    empty = tmp_path / "empty_run"
    empty.mkdir()
    proc = run_aura_here("plot", empty, "--output-dir", tmp_path)
    assert proc.returncode == 2 and "empty_run" in proc.stderr and "training_log.csv" in proc.stderr
    (empty / "training_log.csv").write_text(HEADER, encoding="utf-8")
    proc = run_aura_here("plot", empty, "--output-dir", tmp_path)
    assert proc.returncode == 2 and "has not logged a step yet" in proc.stderr
    (empty / "training_log.csv").write_text(HEADER + "t,step,0,10,100,abc,,,,,,\n", encoding="utf-8")
    proc = run_aura_here("plot", empty, "--output-dir", tmp_path, env={"AURA_LANG": "es"})
    assert proc.returncode == 2 and "línea 2" in proc.stderr and "train_loss" in proc.stderr
    assert not (tmp_path / "loss.png").exists()
    proc = run_aura_here("plot", root / "done", "--out", "x.jpg")
    assert proc.returncode == 2 and ".png" in proc.stderr


@pytest.mark.slow
def test_real_pretrain_run_interrupted_then_listed_and_plotted(tmp_path):
    """A real tiny `aura pretrain`, stopped with Ctrl+C after its first checkpoint."""
    import signal
    import time

    args = [
        "pretrain",
        "-o",
        "runs/real",
        "--model-preset",
        "manual",
        "--embed-size",
        "64",
        "--num-layers",
        "2",
        "--num-heads",
        "2",
        "--seq-length",
        "32",
        "--vocab-size",
        "400",
        "--batch-size",
        "4",
        "--max-steps",
        "500",
        "--log-interval",
        "1",
        "--eval-interval",
        "2",
        "--save-steps",
        "2",
        "--sample-tokens",
        "0",
    ]
    env = dict(os.environ, AURA_LANG="en", AURA_PLAIN="1", PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(
        [sys.executable, "-m", "aura", *args],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    run_dir = tmp_path / "runs" / "real"
    deadline = time.monotonic() + 240
    # Any complete checkpoint will do: with --save-steps 2 and --keep-last 3 an early one may already be pruned.
    while (
        not any(run_dir.glob("checkpoint-step-*/trainer_state.json"))
        and proc.poll() is None
        and time.monotonic() < deadline
    ):
        time.sleep(0.5)
    listed_live = json.loads(run_aura("runs", "--json", cwd=tmp_path).stdout)
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=240)
    assert sorted(run_dir.glob("checkpoint-step-*")) or sorted(run_dir.glob("interrupt-step-*")), out
    assert listed_live[0]["status"] == "running"
    assert listed_live[0]["total_steps"] == 500 and listed_live[0]["tokens_per_s"] > 0  # step of plan, speed

    r = json.loads(run_aura("runs", "--json", cwd=tmp_path).stdout)[0]
    assert r["status"] == "interrupted", out
    assert r["eta_s"] is None and r["layout"] is None  # no time left for a stopped run; one process
    rows = list(csv_rows(run_dir / "training_log.csv"))
    vals = [float(x["val_loss"]) for x in rows if x["val_loss"]]
    assert r["best_val_loss"] == pytest.approx(min(vals))
    assert r["last_step"] == max(int(x["step"]) for x in rows if x["kind"] == "step")
    assert Path(r["latest_checkpoint"]).name.startswith(("interrupt-step-", "checkpoint-step-"))
    assert r["resume_command"] == " ".join(["aura", *args, "--resume-from", "latest"])
    proc = run_aura("plot", "runs/real", "--width", "300", "--height", "200", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "loss.png").stat().st_size > 1000


def csv_rows(path: Path):
    import csv

    with open(path, newline="", encoding="utf-8") as f:
        yield from csv.DictReader(f)


def test_runs_and_resume_ignore_a_checkpoint_without_its_state_file(prepared_corpus, tmp_path):
    """`aura runs` and `--resume-from latest` agree: a checkpoint dir without trainer_state.json (an
    unfinished or damaged write) is no checkpoint for either."""
    from tests.test_pretrain import TINY_FLAGS

    prepared = prepared_corpus
    run = tmp_path / "runs" / "r"
    args = ["pretrain", "--data", prepared, "--output-dir", run, *TINY_FLAGS, "--save-steps", "2"]
    assert run_aura(*args, "--max-steps", "4").returncode == 0
    half = run / "checkpoint-step-9"
    half.mkdir()
    (half / "model.safetensors").write_bytes((run / "checkpoint-step-4" / "model.safetensors").read_bytes())
    listed = json.loads(run_aura("runs", "--json", tmp_path / "runs").stdout)
    assert [Path(r["latest_checkpoint"]).name for r in listed] == ["checkpoint-step-4"]
    resumed = run_aura(*args, "--max-steps", "5", "--resume-from", "latest")
    assert resumed.returncode == 0, resumed.stderr
    assert f"Resumed from {run / 'checkpoint-step-4'}: step 4" in resumed.stdout


def test_plot_runs_that_log_different_columns(tmp_path):
    """Issue 25.7: `aura plot` of a pretraining (per-source validation, the aura-es suite) beside a DPO
    fine-tune (rewards, no suite) crashed with KeyError: each column is drawn for the runs that log it, and
    the columns only some runs log are said."""
    import matplotlib.image as mpimg

    pre, dpo = tmp_path / "pre", tmp_path / "dpo"
    make_run(pre, status="finished", steps=80, pid=_dead_pid())
    make_run(dpo, status="finished", steps=80, pid=_dead_pid())
    extra = {
        pre: ["val_loss_es", "val_loss_en", "aura-es/gramatica", "aura-es/mean"],
        dpo: ["rewards/margin", "rewards/accuracy"],
    }
    for run, cols in extra.items():
        lines = (run / "training_log.csv").read_text(encoding="utf-8").splitlines()
        out = [lines[0] + "," + ",".join(cols)]
        for line in lines[1:]:
            kind = line.split(",")[1]
            wanted = (run == pre) == (kind == "eval")  # suite and per-source rows are evals; rewards are steps
            out.append(line + "," + ",".join("0.5" if wanted else "" for _ in cols))
        (run / "training_log.csv").write_text("\n".join(out) + "\n", encoding="utf-8")
    r = run_aura_here("plot", pre, dpo, "--output-dir", tmp_path / "plots", "--width", "800", "--height", "300")
    assert r.returncode == 0, r.stdout + r.stderr
    assert (
        "Not every run logs aura-es/gramatica, aura-es/mean, val_loss_en, val_loss_es: drawn only for pre." in r.stdout
    ), r.stdout
    assert "Not every run logs rewards/accuracy, rewards/margin: drawn only for dpo." in r.stdout
    img = mpimg.imread(tmp_path / "plots" / "loss.png")
    assert img.shape[:2] == (300, 800) and _colour_present(img, "#1f77b4") and _colour_present(img, "#ff7f0e")
    es = run_aura_here("plot", pre, dpo, "--output-dir", tmp_path / "plots", env={"AURA_LANG": "es"})
    assert es.returncode == 0 and "No todas las ejecuciones registran rewards/accuracy" in es.stdout, es.stdout


def test_every_field_read_back_from_run_json_is_type_checked(tmp_path):
    """Issue 36.8: a hand-edited run.json whose "updated" is a number made `aura runs` crash (exit 1). A Unix
    time is a time (shown as one); any field of another type, the launcher's record included, is named and
    shown as unknown (exit 2, the table still shown); never a crash."""
    from aura.watch.runs import LAUNCH_FIELDS, RUN_FIELDS

    root = tmp_path / "runs"
    make_run(root / "r", status="interrupted", steps=20, pid=_dead_pid(), checkpoints=["checkpoint-step-20"])
    run_json = root / "r" / "run.json"
    good = json.loads(run_json.read_text())
    stamp = datetime(2026, 3, 1, 12, 30, 5).timestamp()  # local time, as the table shows it
    run_json.write_text(json.dumps({**good, "updated": stamp, "started": int(stamp)}))
    r = run_aura_here("runs", root)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "2026-03-01 12:30:05" in r.stdout and "--resume-from latest" in r.stdout, r.stdout
    launch = {
        "argv": ["pretrain"],
        "world_size": 2,
        "nnodes": 1,
        "nproc_per_node": 2,
        "launcher": "torchrun",
        "prefix": ["torchrun"],
        "env": {},
        "cwd": str(tmp_path),
    }
    wrong = {str: 7, int: "7", list: "a b", dict: [1], (str, int, float): [2026]}
    cases = [(k, {**good, k: wrong[types if len(types) > 1 else types[0]]}) for k, types in RUN_FIELDS.items()]
    cases += [(f"launch.{k}", {**good, "launch": {**launch, k: wrong[types[0]]}}) for k, types in LAUNCH_FIELDS.items()]
    cases += [
        ("updated", {**good, "updated": "ayer"}),
        ("updated", {**good, "updated": float("nan")}),
        ("updated", {**good, "updated": 1e300}),
    ]
    for field, info in cases:
        run_json.write_text(json.dumps(info))
        for flags in ((), ("--json",)):
            r = run_aura_here("runs", root, *flags)
            assert r.returncode == 2, (field, r.stdout + r.stderr)
            said = r.stderr if not flags else json.loads(r.stdout)[0]["warning"]  # --json: in the record
            assert f"the field '{field}' does not have the expected type" in said, (field, r.stdout + r.stderr)
            assert "Traceback" not in r.stderr and "our bug" not in r.stderr


def test_plot_draws_one_point_and_epoch_averages_as_their_own_series(tmp_path, monkeypatch):
    """Issue 36, items 12 and 14: a run with a single logged step is drawn (a line through one point drew
    nothing); the per-epoch average rows are their own series (joined to the per-step values, the curve
    jumped at every epoch's end), named from the columns' label catalogue, in the user's language."""
    from matplotlib.figure import Figure

    saved, save = [], Figure.savefig
    monkeypatch.setattr(Figure, "savefig", lambda self, *a, **k: (saved.append(self), save(self, *a, **k))[1])
    one, ft = tmp_path / "one", tmp_path / "ft"
    one.mkdir()
    (one / "run.json").write_text(json.dumps({"kind": "pretrain", "status": "finished"}), encoding="utf-8")
    (one / "training_log.csv").write_text(HEADER + f"{_now()},step,1,1,128,5.5,,0.001,1.0,900,,0.5\n", encoding="utf-8")
    r = run_aura_here("plot", one, "--output-dir", tmp_path, "--out", "one.png")
    assert r.returncode == 0, r.stdout + r.stderr
    drawn = [line for ax in saved[-1].axes for line in ax.get_lines()]
    assert len(drawn) == 3 and all(len(line.get_xdata()) == 1 for line in drawn)  # loss, lr, speed
    assert all(line.get_marker() not in (None, "", "None", " ") for line in drawn)  # each visible

    make_run(ft, status="finished", steps=80, pid=_dead_pid())
    with open(ft / "training_log.csv", "a", encoding="utf-8") as f:
        f.write(f"{_now()},epoch,1,80,{80 * 1024},9.5,,,,,,40\n")
    r = run_aura_here("plot", ft, "--output-dir", tmp_path, "--out", "ft.png", env={"AURA_LANG": "es"})
    assert r.returncode == 0, r.stdout + r.stderr
    loss = {line.get_label(): line for line in saved[-1].axes[0].get_lines()}
    per_step, per_epoch = (
        loss["ft (Pérdida de entrenamiento)"],
        loss["ft (Pérdida de entrenamiento (media de la época))"],
    )
    assert 9.5 not in list(per_step.get_ydata()) and list(per_epoch.get_ydata()) == [9.5]
    assert per_epoch.get_linestyle() == "None" and per_epoch.get_marker() == "D"  # markers, no line
