"""WSD (warm-up, stable, 1-sqrt cooldown) and ``--time-budget``: the schedule is a pure function of the step
and of the fields a checkpoint keeps; a checkpoint before the cooldown is a branch point (resumed with a
longer plan it equals a run planned that long from the start); the budget starts the cooldown within one
log interval of the planned moment (fake clock), and through the real CLI the run ends cooled down and
saved when the budget ends."""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import time

import pytest

from aura.train.optim.schedule import CooldownClock, Schedule, schedule_for
from tests.conftest import run_aura, run_aura_here
from tests.test_loop import read_log
from tests.test_pretrain import TINY_FLAGS

WSD = dict(base=1e-3, min_lr=0.0, warmup=10, total=100, kind="wsd", cooldown_fraction=0.2)


def test_wsd_shape_is_a_pure_function_of_the_step_and_of_the_checkpointed_fields():
    s = Schedule(**WSD)
    lrs = [s.lr(i) for i in range(100)]
    assert lrs[:10] == pytest.approx([1e-3 * (i + 1) / 10 for i in range(10)])  # linear warm-up
    assert s.decay_start == 80 and lrs[10:80] == [1e-3] * 70  # stable until the last 20 %
    assert lrs[80:] == pytest.approx([1e-3 * (1 - math.sqrt((i - 80) / 20)) for i in range(80, 100)])  # 1-sqrt
    assert all(a > b for a, b in zip(lrs[80:], lrs[81:])) and lrs[99] < 0.11 * 1e-3
    # what a checkpoint stores (trainer_state.json) gives back the same rates, with a recorded start too
    for sched in (s, dataclasses.replace(s, cooldown_start=57, total=70)):
        again = Schedule.from_dict(json.loads(json.dumps(sched.to_dict())))
        assert [again.lr(i) for i in range(100)] == [sched.lr(i) for i in range(100)]
    cut = dataclasses.replace(s, cooldown_start=57, total=70)
    assert cut.lr(56) == 1e-3 and cut.lr(57) == 1e-3 and cut.lr(69) < cut.lr(58) < 1e-3
    # a checkpoint written before WSD existed is a cosine, as it was trained
    old = {k: v for k, v in s.to_dict().items() if k not in ("kind", "cooldown_fraction", "cooldown_start")}
    assert Schedule.from_dict(old).kind == "cosine"


def test_flags_pick_the_shape_and_min_lr_defaults():
    class Flags:
        learning_rate, min_lr, warmup_steps, lr_schedule, cooldown_fraction = 2e-3, None, None, "wsd", 0.1

    s = schedule_for(Flags, 200)
    assert (s.kind, s.min_lr, s.warmup, s.decay_start) == ("wsd", 0.0, 6, 180)
    Flags.lr_schedule = None
    assert schedule_for(Flags, 200).kind == "cosine" and schedule_for(Flags, 200).min_lr == pytest.approx(2e-4)


def test_branch_point_continues_the_stable_phase_and_cooldown_replans_without_a_jump():
    s = Schedule(**WSD)
    longer = s.replanned(step=50, total=200)  # before the cooldown: a branch point
    assert [longer.lr(i) for i in range(50)] == [s.lr(i) for i in range(50)]
    assert longer == Schedule(**{**WSD, "total": 200})  # as if planned that long from the start
    shorter = s.replanned(step=70, total=75)  # the new plan would already be cooling: it starts now
    assert shorter.lr(69) == 1e-3 and shorter.decay_start == 70 and shorter.lr(74) < shorter.lr(71) < 1e-3
    cooling = s.replanned(step=90, total=150)  # inside the cooldown: from the rate it had, downwards
    assert cooling.lr(90) == pytest.approx(s.lr(90)) and cooling.lr(149) < cooling.lr(120) < s.lr(90)


@pytest.mark.parametrize("resumed", [False, True])
def test_time_budget_starts_the_cooldown_within_one_log_interval(resumed):
    """Fake clock: 1 s per step, budget 100 s, cooldown 20 %: the cooldown is due at 80 s (step 80) and the
    run must end at 100 s. Logging every 7 steps, the loop asks at 7, 14, ...; a resumed run (50 s and
    50 steps already behind it) must land at the same moment."""
    now = [0.0]
    sched = Schedule(base=1e-3, min_lr=0.0, warmup=5, total=10_000, kind="wsd", cooldown_fraction=0.2)
    start = 50 if resumed else 0
    clock = CooldownClock(budget_s=100, fraction=0.2, elapsed_s=float(start), step=start, clock=lambda: now[0])
    new = None
    for step in range(start + 1, 200):
        now[0] += 1.0  # one step
        if step % 7 == 0 and new is None:
            new = clock.due(sched, step)
    assert new is not None and 80 <= new.cooldown_start < 80 + 7
    assert new.total == 100 and new.decay_start == new.cooldown_start  # the budget's end, at 1 s per step
    assert new.lr(new.cooldown_start - 1) == 1e-3 and new.lr(new.total - 1) < 0.3e-3
    assert (
        CooldownClock(budget_s=100, fraction=0.2, clock=lambda: 0.0).due(dataclasses.replace(sched, kind="cosine"), 90)
        is None
    )  # only WSD has a cooldown to move
    # a budget that runs out inside the warm-up cools down from the rate reached, never up to the peak
    now[0] = 0.0
    clock = CooldownClock(budget_s=10, fraction=0.5, clock=lambda: now[0])
    now[0] = 8.0
    early = clock.due(dataclasses.replace(sched, warmup=100), 8)
    assert early.total == 10 and early.lr(8) == pytest.approx(9e-5)
    assert all(early.lr(i) <= 9e-5 for i in range(8, early.total))


def test_branch_point_resume_with_a_longer_plan_equals_the_longer_run(prepared_corpus, tmp_path):
    """A 20-step WSD run saved at step 10 (stable: its cooldown starts at 16), resumed with --max-steps 40:
    every per-step loss and rate equals a run planned for 40 steps from the start."""
    common = [
        "--data",
        str(prepared_corpus),
        *TINY_FLAGS,
        "--lr-schedule",
        "wsd",
        "--warmup-steps",
        "2",
        "--precision",
        "fp32",
    ]
    ref = tmp_path / "ref"
    assert run_aura("pretrain", "--output-dir", ref, *common, "--max-steps", "40", "--save-steps", "0").returncode == 0
    run = tmp_path / "run"
    r = run_aura("pretrain", "--output-dir", run, *common, "--max-steps", "20", "--save-steps", "10")
    assert r.returncode == 0, r.stderr
    r = run_aura(
        "pretrain",
        "--output-dir",
        run,
        *common,
        "--max-steps",
        "40",
        "--save-steps",
        "0",
        "--resume-from",
        run / "checkpoint-step-10",
        "--fork",
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "the plan goes from 20 to 40 steps" in r.stdout
    a, b = read_log(ref), read_log(run)
    assert [a[s] for s in range(1, 41)] == [b[s] for s in range(1, 41)]
    lr = {
        int(row["step"]): float(row["lr"])
        for row in csv.DictReader(open(run / "training_log.csv"))
        if row["kind"] == "step"
    }
    assert lr[11] == lr[33] == 3e-3 and lr[34] < 3e-3 and lr[40] < 3e-4  # row N logs step N-1's rate


@pytest.mark.slow
def test_time_budget_ends_the_run_cooled_down_and_saved(prepared_corpus, tmp_path):
    """The real CLI with a 30-second budget and a plan of 100 000 steps: it stops on its own, cooled down,
    with final/ written, and the checkpoint keeps the cooldown it started."""
    budget = 30  # seconds: hundreds of tiny steps, the cooldown half of them
    run = tmp_path / "run"
    t0 = time.monotonic()
    r = run_aura_here(
        "pretrain",
        "--data",
        prepared_corpus,
        "--output-dir",
        run,
        *TINY_FLAGS,
        "--lr-schedule",
        "wsd",
        "--time-budget",
        str(budget / 3600),
        "--cooldown-fraction",
        "0.5",
        "--max-steps",
        "100000",
        "--save-steps",
        "0",
        "--precision",
        "fp32",
        "--log-interval",
        "2",
        "--warmup-steps",
        "3",
    )
    took = time.monotonic() - t0
    assert r.returncode == 0, r.stdout + r.stderr
    assert "the WSD cooldown starts at step" in r.stdout, r.stdout
    assert (run / "final" / "model.safetensors").is_file()
    last = max(run.glob("checkpoint-step-*"), key=lambda p: int(p.name.rsplit("-", 1)[1]))
    state = json.loads((last / "trainer_state.json").read_text())
    schedule = state["plan"]["schedule"]
    assert schedule["cooldown_start"] is not None and schedule["total"] == state["step"] < 100000
    rows = [row for row in csv.DictReader(open(run / "training_log.csv")) if row["kind"] == "step"]
    assert float(rows[-1]["lr"]) < 0.5 * 3e-3  # cooled down (the last logged rate, 1-sqrt near its end)
    assert float(rows[-1]["seconds"]) < budget * 1.25 and took < budget + 140  # on budget (plus set-up and saving)
    # ...and not early: the cooldown is due at half the budget, so a run that ends before that has
    # misread its budget (a unit, a clock), whatever its final rate
    assert float(rows[-1]["seconds"]) >= budget * 0.5, rows[-1]
