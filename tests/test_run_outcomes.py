"""What a run ends with (issue 25): the last step is always validated and best/ is chosen among every
validation; intervals longer than the plan are said and evaluated at the end; a mixture says (and keeps)
its effective proportions; a command that fails before training leaves no half-made run dir; a resume
launched differently (world size, --ddp-comm) is refused unless --allow-plan-change, which run.json keeps."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from tests.conftest import run_aura, run_aura_here
from tests.test_mixing import (
    FLAGS as MIX_FLAGS,
    sources,  # noqa: F401  (fixture: prepared dirs of one tokenizer)
)
from tests.test_pretrain import TINY_FLAGS


def _rows(run: Path) -> list[dict]:
    with open(run / "training_log.csv", newline="") as f:
        return list(csv.DictReader(f))


def test_last_step_is_validated_and_best_is_chosen_among_all_validations(prepared_corpus, tmp_path):
    run = tmp_path / "run"
    r = run_aura(
        "pretrain",
        "--data",
        prepared_corpus,
        "-o",
        run,
        *TINY_FLAGS,
        "--max-steps",
        "7",
        "--eval-interval",
        "5",
        "--save-steps",
        "0",
    )
    assert r.returncode == 0, r.stderr + r.stdout
    vals = {int(x["step"]): float(x["val_loss"]) for x in _rows(run) if x["kind"] == "eval" and x["val_loss"]}
    assert sorted(vals) == [5, 7], vals  # the interval's and the last step's
    best = json.loads((run / "best" / "best.json").read_text())
    assert best["step"] == min(vals, key=vals.get) and best["val_loss"] == pytest.approx(min(vals.values()))


def test_intervals_longer_than_the_plan_are_said_and_evaluated_at_the_end(prepared_corpus, tmp_path):
    run = tmp_path / "run"
    r = run_aura(
        "pretrain",
        "--data",
        prepared_corpus,
        "-o",
        run,
        *TINY_FLAGS,
        "--max-steps",
        "3",
        "--eval-interval",
        "50",
        "--save-steps",
        "100",
        "--eval-suite",
        "aura-es",
        "--eval-suite-interval",
        "200",
        "--eval-suite-limit",
        "2",
    )
    assert r.returncode == 0, r.stderr + r.stdout
    for flag, value, what in (
        ("eval-interval", 50, "validation"),
        ("save-steps", 100, "the only checkpoint"),
        ("eval-suite-interval", 200, "the --eval-suite evaluation"),
    ):
        assert (
            f"--{flag} {value} is longer than the plan (3 steps): it is never reached; {what} will run at the "
            "end of the run (step 3)."
        ) in r.stderr, r.stderr
    rows = [x for x in _rows(run) if x["kind"] == "eval"]
    assert [int(x["step"]) for x in rows if x["val_loss"]] == [3]
    assert [int(x["step"]) for x in rows if x.get("aura-es/mean")] == [3]
    assert json.loads((run / "best" / "best.json").read_text())["step"] == 3


def test_mixture_says_and_keeps_its_effective_proportions_and_fills_per_source_columns(sources, tmp_path):  # noqa: F811
    run = tmp_path / "run"
    r = run_aura(
        "pretrain",
        "--data",
        f"es=3:{sources['a']}",
        f"otro=1:{sources['b']}",
        "-o",
        run,
        *MIX_FLAGS,
        "--max-tokens",
        "512",
    )  # 8 steps of 64 tokens: far less than an epoch, no --eval-interval
    assert r.returncode == 0, r.stderr + r.stdout
    assert "--data: the weights add up to 4, not 1: they are normalised" in r.stdout, r.stdout
    assert "Effective mixture of this plan (512 tokens over 8 steps):" in r.stdout
    assert "  es: weight 3 → 75.0 %: ~384 tokens" in r.stdout and "  otro: weight 1 → 25.0 %: ~128 tokens" in r.stdout
    mix = json.loads((run / "run.json").read_text())["mixture"]
    assert mix["weights_sum"] == 4 and [s["share"] for s in mix["sources"]] == [0.75, 0.25]
    from aura.data.tokens import TokenShards

    for s, d in zip(mix["sources"], ("a", "b")):
        shards = TokenShards(sources[d])
        assert (s["train_tokens"], s["documents"]) == (len(shards), shards.num_documents)
    last = {k: v for k, v in _rows(run)[-1].items() if v}
    assert "val_loss_es" in last and "val_loss_otro" in last, last  # the last step fills them, like --max-steps


def test_mixture_hint_never_prepares_into_the_raw_text_folder(sources, tmp_path):  # noqa: F811
    raw = tmp_path / "textos"
    raw.mkdir()
    (raw / "a.txt").write_text("Hola.\n", encoding="utf-8")
    r = run_aura_here(
        "pretrain",
        "--data",
        f"es=1:{sources['a']}",
        f"en=0.5:{raw}",
        "-o",
        tmp_path / "r",
        *MIX_FLAGS,
        "--max-steps",
        "1",
    )
    assert r.returncode == 2 and "not a prepared directory" in r.stderr, r.stderr
    assert f"--output-dir {raw}'" not in r.stderr and f"--output-dir {raw} " not in r.stderr, r.stderr
    target = tmp_path / "textos-en-tokens"
    assert f"aura data prepare {raw}/*.txt --tokenizer TOK --output-dir {target}" in r.stderr, r.stderr
    assert f"en=0.5:{target}" in r.stderr


@pytest.mark.parametrize("where", ["new", "nested", "empty"])
def test_a_command_that_fails_before_training_leaves_no_run_dir(tmp_path, where):
    out = {"new": tmp_path / "run", "nested": tmp_path / "runs" / "a" / "run", "empty": tmp_path / "empty"}[where]
    if where == "empty":
        out.mkdir()
    for args in (["--data", tmp_path / "missing"], ["--data", tmp_path / "missing.txt", "--tokenizer", "nothing"]):
        r = run_aura_here("pretrain", *args, "-o", out, *TINY_FLAGS, "--max-steps", "1")
        assert r.returncode == 2 and "does not exist" in r.stderr, r.stderr
        if where == "empty":
            assert out.is_dir() and not list(out.iterdir())  # the user's empty dir stays, untouched
        else:
            assert not out.exists() and not (tmp_path / "runs").exists(), list(tmp_path.rglob("*"))


def test_a_failure_in_an_existing_run_dir_removes_nothing(prepared_corpus, tmp_path):
    run = tmp_path / "run"
    assert (
        run_aura_here(
            "pretrain", "--data", prepared_corpus, "-o", run, *TINY_FLAGS, "--max-steps", "1", "--learning-rate", "0"
        ).returncode
        == 2
    )  # refused before the dir: no dir
    ok = run_aura("pretrain", "--data", prepared_corpus, "-o", run, *TINY_FLAGS, "--max-steps", "2")
    assert ok.returncode == 0, ok.stderr
    before = sorted(p.relative_to(run) for p in run.rglob("*"))
    r = run_aura_here(
        "pretrain",
        "--data",
        tmp_path / "missing",
        "-o",
        run,
        *TINY_FLAGS,
        "--max-steps",
        "4",
        "--resume-from",
        "latest",
    )
    assert r.returncode == 2
    assert sorted(p.relative_to(run) for p in run.rglob("*")) == before


def _as_if_launched(run: Path, checkpoint: Path, *, world: int, comm: str) -> None:
    """The checkpoint and run.json of this run as a `torchrun --nproc_per_node WORLD ... --ddp-comm COMM`
    run would have written them (the real two-process run: tests/test_launch_signals.py)."""
    state = json.loads((checkpoint / "trainer_state.json").read_text())
    state["world_size"] = world
    state["plan"]["flags"]["ddp_comm"] = comm
    (checkpoint / "trainer_state.json").write_text(json.dumps(state))
    info = json.loads((run / "run.json").read_text())
    info["launch"].update(
        launcher="torchrun",
        world_size=world,
        nproc_per_node=world,
        prefix=["torchrun", f"--nproc_per_node={world}", "-m", "aura"],
    )
    (run / "run.json").write_text(json.dumps(info))


def test_resume_with_another_world_size_or_communication_is_refused_unless_allowed(prepared_corpus, tmp_path):
    run = tmp_path / "run"
    args = [
        "pretrain",
        "--data",
        str(prepared_corpus),
        "-o",
        str(run),
        *TINY_FLAGS,
        "--save-steps",
        "2",
        "--keep-last",
        "0",
    ]
    first = run_aura(*args, "--max-steps", "2")
    assert first.returncode == 0, first.stderr
    launch = json.loads((run / "run.json").read_text())["launch"]
    assert launch["launcher"] == "aura" and launch["world_size"] == 1 and launch["argv"] == args + ["--max-steps", "2"]
    assert launch["nnodes"] == 1 and launch["ddp_comm"] == "none" and launch["local_steps"] is None
    _as_if_launched(run, run / "checkpoint-step-2", world=2, comm="powersgd")
    r = run_aura_here(*args, "--max-steps", "4", "--resume-from", "latest")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert (
        "was made with 2 processes (torchrun) and this resume has 1: the global batch would go from 8 to 4 "
        "sequences per step"
    ) in r.stderr, r.stderr
    assert "torchrun --nproc_per_node=2 -m aura pretrain" in r.stderr and "--allow-plan-change" in r.stderr
    comm = run_aura_here(
        *args, "--max-steps", "4", "--batch-size", "8", "--ddp-comm", "bf16", "--resume-from", "latest"
    )
    assert comm.returncode == 2 and "--ddp-comm bf16 does not match the checkpoint" in comm.stderr, comm.stderr
    assert "(powersgd)" in comm.stderr and "--allow-plan-change" in comm.stderr
    es = run_aura_here(*args, "--max-steps", "4", "--resume-from", "latest", env={"AURA_LANG": "es"})
    assert es.returncode == 2 and "se hizo con 2 procesos (torchrun) y esta reanudación tiene 1" in es.stderr
    forced = run_aura(*args, "--max-steps", "4", "--ddp-comm", "bf16", "--resume-from", "latest", "--allow-plan-change")
    assert forced.returncode == 0, forced.stderr + forced.stdout
    assert (
        "--allow-plan-change: --ddp-comm changed powersgd → bf16; the global batch 8 → 4 sequences per step; "
        "the processes 2 → 1; recorded in run.json's history."
    ) in forced.stderr, forced.stderr
    history = json.loads((run / "run.json").read_text())["history"]
    assert [h["step"] for h in history] == [0, 2]
    assert {"setting": "world_size", "old": 2, "new": 1} in history[1]["plan_changes"]
    assert {"setting": "--ddp-comm", "old": "powersgd", "new": "bf16"} in history[1]["plan_changes"]


def test_resume_command_reproduces_the_launcher():
    from aura.distributed.launcher import _torchrun_prefix, resume_command

    agent = [
        "/usr/bin/python3",
        "/usr/local/bin/torchrun",
        "--nproc_per_node",
        "2",
        "--master_port=29555",
        "-m",
        "aura",
        "pretrain",
        "--data",
        "d",
        "--ddp-comm",
        "powersgd",
    ]
    prefix = _torchrun_prefix(agent)
    assert prefix == ["torchrun", "--nproc_per_node", "2", "--master_port=29555", "-m", "aura"]
    assert _torchrun_prefix(["python", "-m", "torch.distributed.run", "--standalone", "-m", "aura", "x"]) == [
        "torchrun",
        "--standalone",
        "-m",
        "aura",
    ]
    record = {
        "prefix": prefix,
        "argv": ["pretrain", "--data", "d", "--ddp-comm", "powersgd", "--overwrite", "--resume-from", "old"],
    }
    assert resume_command(record, "latest") == (
        "torchrun --nproc_per_node 2 --master_port=29555 -m aura pretrain "
        "--data d --ddp-comm powersgd --resume-from latest"
    )
    launched = {
        "prefix": ["aura", "launch", "--gpus-per-node", "2"],
        "env": {"NNODES": "2", "MASTER_ADDR": "10.0.0.1"},
        "argv": ["pretrain", "--data", "my data"],
    }
    assert resume_command(launched, "run/interrupt-step-3") == (
        "NNODES=2 MASTER_ADDR=10.0.0.1 aura launch --gpus-per-node 2 pretrain --data 'my data' "
        "--resume-from run/interrupt-step-3"
    )


def test_runs_prints_the_recorded_launch(tmp_path):
    from aura.watch.runs import resume_command

    info = {
        "argv": ["/x/aura/__main__.py", "pretrain"],
        "launch": {
            "prefix": ["torchrun", "--nproc_per_node=2", "-m", "aura"],
            "argv": ["pretrain", "-o", "r"],
            "cwd": str(tmp_path),
        },
    }
    assert resume_command(info).endswith("torchrun --nproc_per_node=2 -m aura pretrain -o r --resume-from latest")
    assert resume_command(info).startswith(f"cd {tmp_path} && ")
