"""One optimizer step under torchrun (issue 38, items 3 and 7), CPU and gloo: the loop's one small collective
per step (counts and stop flag together), a signal on one rank stopping every rank at the same step, and
fp16 GradScaler decisions agreed over ranks under DDP and FSDP2."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from tests.distutil import SCRIPTS, output, torchrun
from tests.test_loop import cpu_fp16_or_skip

pytestmark = pytest.mark.dist


def _step_collectives(mode: str, data: Path, tmp_path: Path, *extra: str) -> list[dict]:
    result = tmp_path / "r.json"
    proc = torchrun(SCRIPTS / "step_collectives.py", mode, data, tmp_path / "run", result, *extra, timeout=400)
    assert proc.returncode == 0, output(proc)[-5000:]
    return [json.loads(Path(f"{result}.rank{r}").read_text()) for r in (0, 1)]


def _by_caller(per_step: dict) -> dict[str, int]:
    """Collectives of one step by who called them: the loop and engine (Aura) or DDP's comm hook (torch)."""
    out: dict[str, int] = {}
    for key, n in per_step.items():
        who = "aura" if " from aura." in key else "ddp_hook" if "ddp_comm_hooks" in key else key
        out[who] = out.get(who, 0) + n
    return out


@pytest.mark.parametrize("precision, aura_calls", [("fp32", 1), ("fp16", 2)])
def test_one_small_collective_per_step(prepared_corpus, tmp_path, precision, aura_calls):
    """fp32: the window's counts and the stop flag in one all-reduce (before: two, each draining the GPU under
    NCCL); fp16 adds the engine's loss + found-inf one (before: three in all). DDP's gradient buckets (the
    same number every step, through its comm hook) are the only other collectives."""
    if precision == "fp16":
        cpu_fp16_or_skip()
    ranks = _step_collectives("count", prepared_corpus, tmp_path, "--precision", precision)
    for r in ranks:
        assert r["code"] == 0 and r["steps"] == 6
        steps = [_by_caller(s) for s in r["per_step"]]
        assert len(steps) == 5 and all(s == steps[0] for s in steps), steps
        assert set(steps[0]) == {"aura", "ddp_hook"}, steps[0]
        assert steps[0]["aura"] == aura_calls, steps[0]
        assert all(key.startswith("all_reduce from ") for key in r["per_step"][0]), r["per_step"][0]


def test_a_signal_on_one_rank_stops_every_rank_at_the_same_step(prepared_corpus, tmp_path):
    """Rank 1 gets SIGTERM during step 2 (after the step's collective): every rank learns it from step 3's
    collective and stops after step 3, saving one checkpoint for all."""
    ranks = _step_collectives("signal", prepared_corpus, tmp_path)
    assert [r["code"] for r in ranks] == [3, 3]  # EXIT_INTERRUPTED on both
    assert [r["steps"] for r in ranks] == [3, 3]
    assert [p.name for p in (tmp_path / "run").glob("*step-*")] == ["interrupt-step-3"]


def test_fp16_grad_scaler_decisions_agree_over_ranks(tmp_path):
    """An inf in one rank's gradient only (DDP: planted after the all-reduce; FSDP2: in its shard): both ranks
    skip that update (FSDP2: the gathered weights do not move, so no shard did), back the scale off alike and
    keep identical weights; FSDP2's norm is global."""
    cpu_fp16_or_skip()
    out = tmp_path / "r.json"
    proc = torchrun(SCRIPTS / "fp16_agree.py", out)
    assert proc.returncode == 0, output(proc)[-5000:]
    r = json.loads(out.read_text())
    assert r["world"] == 2
    for case in ("ddp", "fsdp"):
        r0, r1 = (rank[case] for rank in r["ranks"])
        for key in ("scales", "changed", "digest"):
            assert r0[key] == r1[key], (case, key, r0[key], r1[key])
        # the same outcome, grad norm included, but for DDP's poisoned step: the planted inf is in rank 1's only
        assert [o[::2] for o in r0["outcomes"]] == [o[::2] for o in r1["outcomes"]], case
        assert [o[1] for o in r0["outcomes"]][::2] == [o[1] for o in r1["outcomes"]][::2], case
        if case == "fsdp":
            assert r0["outcomes"] == r1["outcomes"]  # FSDP2's norm is reduced over the shards: global
        assert r0["changed"] == [True, False, True], case  # the poisoned step was skipped everywhere
        assert r0["scales"][1] == r0["scales"][0] / 2, case
        applied, norm, loss = r1["outcomes"][1]  # rank 1 holds the inf
        assert applied and not math.isfinite(norm) and math.isfinite(loss), case  # an overflow, not a bad window
    # FSDP2's norm is the global one, DDP's (a shard's would be ~30 % smaller; fp16 autocast and reduce-scatter
    # against all-reduce differ in the last digits)
    ddp, fsdp = r["ranks"][0]["ddp"], r["ranks"][0]["fsdp"]
    assert fsdp["outcomes"][0][1] == pytest.approx(ddp["outcomes"][0][1], rel=1e-4)
