"""fp16 under torchrun (issue 38, item 3), CPU and gloo: GradScaler decisions agreed over ranks under DDP and
FSDP2."""

from __future__ import annotations

import json
import math

import pytest
import torch

from tests.distutil import SCRIPTS, output, torchrun

pytestmark = pytest.mark.dist


def _cpu_fp16() -> None:
    try:
        torch.amp.GradScaler("cpu")
        with torch.autocast("cpu", dtype=torch.float16):
            torch.nn.Linear(4, 4)(torch.randn(2, 4))
    except Exception as e:  # noqa: BLE001
        pytest.skip(f"this PyTorch build has no CPU fp16 autocast/GradScaler: {e}")


def test_fp16_grad_scaler_decisions_agree_over_ranks(tmp_path):
    """An inf in one rank's gradient only (DDP: planted after the all-reduce; FSDP2: in its shard): both ranks
    skip that update (FSDP2: the gathered weights do not move, so no shard did), back the scale off alike and
    keep identical weights; FSDP2's norm is global."""
    _cpu_fp16()
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
