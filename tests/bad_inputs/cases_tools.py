"""`aura runs`, `plot`, `launch`, `check-dist`, `monitor` and `doctor`: damaged run folders, bad flags, configs."""

from __future__ import annotations

import json

from tests.bad_inputs import case
from tests.bad_inputs.hostile import GOOD_LOG, YAML_DEEP, nested_json, random_bytes, run_dir_with, write


@case("runs_log_non_numeric", "runs", "training_log.csv", outputs=())
def _(fx, tmp):
    run_dir_with(tmp, GOOD_LOG.replace(",6.5,", ",seis,"))
    return ["runs", str(tmp / "runs")]


@case("runs_log_non_utf8", "runs", "training_log.csv", outputs=())
def _(fx, tmp):
    run_dir_with(tmp, GOOD_LOG.encode() + b"2026-01-01T00:00:01,step,0,2,256,6.\xff,,0.0003,1.2,5000,,0.1\n")
    return ["runs", str(tmp / "runs")]


@case("runs_run_json_garbage", "runs", "run.json", outputs=())
def _(fx, tmp):
    run_dir_with(tmp, GOOD_LOG, run_json="{ roto")
    return ["runs", str(tmp / "runs")]


@case("runs_run_json_deep", "runs", "run.json", outputs=(), hostile=True)
def _(fx, tmp):
    run_dir_with(tmp, GOOD_LOG, run_json=nested_json())
    return ["runs", str(tmp / "runs")]


@case("runs_run_json_wrong_types", "runs", "run.json", outputs=())
def _(fx, tmp):
    run_dir_with(
        tmp,
        GOOD_LOG,
        run_json=json.dumps({"status": 3, "step": "dos", "max_steps": [2], "pid": "x", "started": "ayer"}),
    )
    return ["runs", str(tmp / "runs")]


@case("runs_run_json_list", "runs", "run.json", outputs=())
def _(fx, tmp):
    run_dir_with(tmp, GOOD_LOG, run_json="[]")
    return ["runs", str(tmp / "runs")]


@case("runs_best_json_garbage", "runs", "best.json", outputs=())
def _(fx, tmp):
    run = run_dir_with(tmp, GOOD_LOG)
    write(run / "best" / "best.json", "{ roto")
    return ["runs", str(tmp / "runs")]


@case("plot_log_non_numeric", "plot", "training_log.csv")
def _(fx, tmp):
    return ["plot", str(run_dir_with(tmp, GOOD_LOG.replace(",6.5,", ",seis,"))), "--output-dir", str(tmp / "out")]


@case("plot_log_infinite", "plot", "training_log.csv")
def _(fx, tmp):
    return [
        "plot",
        str(run_dir_with(tmp, GOOD_LOG.replace("step,0,1,128", "step,0,inf,128"))),
        "--output-dir",
        str(tmp / "out"),
    ]


@case("plot_log_huge_number", "plot", "training_log.csv")
def _(fx, tmp):
    return ["plot", str(run_dir_with(tmp, GOOD_LOG.replace(",128,", ",1e999,"))), "--output-dir", str(tmp / "out")]


@case("plot_log_non_utf8", "plot", "training_log.csv")
def _(fx, tmp):
    return [
        "plot",
        str(run_dir_with(tmp, GOOD_LOG.encode().replace(b"step,0,1", b"st\xffp,0,1"))),
        "--output-dir",
        str(tmp / "out"),
    ]


@case("plot_log_binary", "plot", "training_log.csv", hostile=True)
def _(fx, tmp):
    return ["plot", str(run_dir_with(tmp, random_bytes())), "--output-dir", str(tmp / "out")]


@case("plot_missing_log", "plot", "training_log.csv")
def _(fx, tmp):
    run = run_dir_with(tmp, GOOD_LOG)
    (run / "training_log.csv").unlink()
    return ["plot", str(run), "--output-dir", str(tmp / "out")]


# ---------------------------------------------------------------------------------------------------
# aura launch / check-dist / monitor / doctor (flag validation; bad environments of `aura launch` are
# tested with that command)


@case("launch_bad_nnodes_flag", "launch", "--nnodes", outputs=())
def _(fx, tmp):
    return ["launch", "--nnodes", "dos", "--dry-run", "doctor"]


@case("check_dist_bad_size", "check-dist", "--size-mb", outputs=())
def _(fx, tmp):
    return ["check-dist", "--size-mb", "-1"]


@case("monitor_bad_interval", "monitor", "--interval", outputs=())
def _(fx, tmp):
    return ["monitor", "--interval", "0", "--once"]


@case("doctor_config_yaml_deep", "doctor", "cfg.yaml", outputs=(), hostile=True)
def _(fx, tmp):
    return ["doctor", "--config", str(write(tmp / "cfg.yaml", "x: " + nested_json(YAML_DEEP) + "\n"))]


@case("studio_missing_runs_dir", "studio", "no-such-runs", outputs=())
def _(fx, tmp):
    return ["studio", str(tmp / "no-such-runs")]


@case("studio_runs_dir_is_a_file", "studio", "runs.txt", outputs=())
def _(fx, tmp):
    return ["studio", str(write(tmp / "runs.txt", "not a folder\n"))]


@case("studio_bad_port", "studio", "--port", outputs=())
def _(fx, tmp):
    return ["studio", str(tmp), "--port", "70000"]


@case("push_repo_id_without_owner", "push", "tiny-es", outputs=())
def _(fx, tmp):
    return ["push", str(fx.run), "tiny-es", "--dry-run"]


@case("push_pickle_weights_only", "push", "pytorch_model.bin", outputs=())
def _(fx, tmp):
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "config.json").write_text('{"model_type": "llama"}', encoding="utf-8")
    (tmp / "pytorch_model.bin").write_bytes(random_bytes(64))
    return ["push", str(tmp), "team/tiny-es", "--dry-run"]


@case("serve_missing_model", "serve", "no-such-model", outputs=())
def _(fx, tmp):
    return ["serve", str(tmp / "no-such-model")]


@case("serve_gguf_with_adapter", "serve", "--adapter", outputs=())
def _(fx, tmp):
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "m.gguf").write_bytes(b"GGUF" + random_bytes(60))
    return ["serve", str(tmp / "m.gguf"), "--adapter", str(fx.adapter)]
