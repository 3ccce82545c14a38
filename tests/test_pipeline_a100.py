"""The ``a100-72h`` pipeline and ``aura pipeline plan``'s estimates.

The chain's first stages run as shipped, only smaller (a local copy of FineWeb-2's ``spa_Latn`` laid out as the
hub serves it, read through the streaming code; a few documents; a small vocabulary): curate -> tokenizer ->
prepare, the documents' FineWeb ids kept through curation. The plan's numbers follow from its inputs: twice the
steps is twice the time, an H100 is faster than an A100, a fine-tuning stage's steps follow its data and
epochs, and the pipeline's split of its 72 hours is printed and checked."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT, run_aura_here
from tests.evidence import importorskip
from tests.fineweb2 import write_fineweb2

A100 = ROOT / "aura" / "pipeline" / "pipelines" / "a100-72h.yaml"
OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}


def _plan(*args: str):
    """(stdout, {stage: {column: cell}}) of ``aura pipeline plan`` (English)."""
    proc = run_aura_here("pipeline", "plan", *args)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    head = next(i for i, ln in enumerate(lines) if ln.startswith("stage "))
    starts = [m.start() for m in re.finditer(r"(?<=  )\S|^\S", lines[head])]
    names = [lines[head][a:b].strip() for a, b in zip(starts, starts[1:] + [None])]
    rows = {}
    for ln in lines[head + 1 :]:
        if not ln.strip() or ln.startswith(("Estimated", "Assumptions", "Split", "All ")) or ln[0] == " ":
            break
        cells = [ln[a:b].strip() for a, b in zip(starts, starts[1:] + [None])]
        rows[cells[0]] = dict(zip(names, cells))
    return proc.stdout, rows


def _seconds(cell: str) -> float:
    """A duration as the plan prints it (``2d10h00m``, ``1:02:03``, ``4:05``, ``7 s``) in seconds."""
    if cell.endswith(" s"):
        return float(cell[:-2].replace(",", ""))
    m = re.fullmatch(r"(\d+)d(\d+)h(\d+)m", cell)
    if m:
        return int(m[1]) * 86400 + int(m[2]) * 3600 + int(m[3]) * 60
    parts = [int(x) for x in cell.split(":")]
    return sum(v * 60**i for i, v in enumerate(reversed(parts)))


def _count(cell: str) -> int:
    return int(cell.replace(",", ""))


def test_a100_plan_prints_the_split_of_72_hours_and_its_stages():
    out, rows = _plan("a100-72h", "--assume", "A100 80GB", "--price-per-hour", "1.5")
    spec = yaml.safe_load(A100.read_text(encoding="utf-8"))
    assert [s["name"] for s in spec["stages"]][:4] == ["curate", "tokenizer", "prepare", "pretrain"]
    assert spec["stages"][0]["options"]["hf_dataset"] == "HuggingFaceFW/fineweb-2"
    assert spec["stages"][0]["options"]["hf_config"] == "spa_Latn"
    hours = spec["hours"]
    assert hours["total"] == 72 and sum(v for k, v in hours.items() if k != "total") <= 72
    for stage in spec["stages"]:  # every training stage's budget is its share
        if "time_budget" in stage["options"]:
            assert stage["options"]["time_budget"] == hours[stage["name"]]
    assert "Split of 72 h: curate 1.5 h" in out and "0.5 h spare" in out
    assert rows["pretrain"]["hours allotted"] == "58" and _seconds(rows["pretrain"]["estimate"]) == 58 * 3600
    assert rows["curate"]["estimate"] == "no estimate"  # a hub stream's size is unknown before it runs
    # auto sizes the model for the 58 h (aura.models.size_budget): ~0.5 B at ~17 tokens per parameter, not the
    # 1.26 B that fits memory (2.7 per parameter); the plan's tokens are the chosen size's
    assert rows["pretrain"]["auto picks"].startswith("qwen3-500m (batch 8 × 4")
    chosen = re.search(
        r"^    pretrain: size for the budget: 'qwen3-500m' \(501 M parameters\), ~([\d.]+) B tokens in 58 h, "
        r"(\d+) per parameter \(compute-optimal ≈ 20, Chinchilla\)$",
        out,
        flags=re.M,
    )
    assert chosen and int(chosen[2]) == 17 and abs(_count(rows["pretrain"]["planned tokens"]) / 1e9 - 8.67) < 0.01
    assert "    pretrain: larger: 'qwen3-72h' (1.26 B): ~3.44 B tokens, 2.7 per parameter" in out
    assert "    pretrain: smaller: 'qwen3-medium' (349 M): ~12.5 B tokens, 36 per parameter" in out
    # SFT and DPO on public Spanish hub datasets (streamed; the bundled samples only offline): the plan names
    # each one's licence, size and source, and how much of the stage's budget the data fills
    assert spec["stages"][4]["options"]["data"] == "Iker/OpenHermes-2.5-Spanish"
    assert spec["stages"][5]["options"]["data"] == "SiguienteGlobal/orpo-es-v0.0.2"
    for stage, name, licence in (
        ("sft", "Iker/OpenHermes-2.5-Spanish", "apache-2.0"),
        ("dpo", "SiguienteGlobal/orpo-es-v0.0.2", "mit"),
    ):
        line = re.search(
            rf"^    {stage}: data {re.escape(name)} \(licence {licence}; (.+?); "
            rf"https://huggingface.co/datasets/{re.escape(name)}; streamed from the hub; offline: "
            rf"\S+aura/resources/\S+\)\.$",
            out,
            flags=re.M,
        )
        assert line, out
    # OpenHermes' ~1M conversations, one automatic epoch, on the 0.5 B model auto sized for the 58 h: half of the
    # 6 h budget (2.5x faster per token than on the 1.26 B model the memory alone would pick)
    ends_sft = re.search(
        r"^    sft: the data is 950,000 training examples \(tokens: ~[\d.]+ M\); 1 epoch fill (\d+) % of "
        r"the 6 h budget and the stage ends there\.$",
        out,
        flags=re.M,
    )
    assert ends_sft and 30 < int(ends_sft[1]) < 100, out
    assert _count(rows["sft"]["steps"]) > 0
    assert _seconds(rows["sft"]["estimate"]) == pytest.approx(int(ends_sft[1]) / 100 * 6 * 3600, abs=0.005 * 6 * 3600)
    # 7,190 pairs x 4 automatic epochs end before DPO's 4 h: the plan says how much of the budget they fill
    ends = re.search(
        r"^    dpo: the data is 6,830 training examples \(tokens: ~[\d.]+ M\); 4 epochs fill (\d+) % of "
        r"the 4 h budget and the stage ends there\.$",
        out,
        flags=re.M,
    )
    assert ends and 0 < int(ends[1]) < 100, out
    # the percentage is printed to two digits: within half a point
    assert _seconds(rows["dpo"]["estimate"]) == pytest.approx(int(ends[1]) / 100 * 4 * 3600, abs=0.005 * 4 * 3600)


def test_plan_estimates_follow_their_inputs(tmp_path):
    """Twice max_steps is twice the time; an H100 (989 TFLOP/s bf16) beats an A100 (312); DPO costs more per
    step than SFT on the same data (the reference model's forward); a LoRA step less than a full one."""
    pipe = tmp_path / "p.yaml"
    pipe.write_text(A100.read_text(encoding="utf-8"), encoding="utf-8")
    fixed = [
        "--set",
        "sft.time_budget=0",
        "--set",
        "sft.max_steps=1000",
        "--set",
        "pretrain.time_budget=0",
        "--set",
        "pretrain.max_steps=2000",
        "--set",
        "dpo.time_budget=0",
        "--set",
        "dpo.max_steps=1000",
    ]
    _, a = _plan(str(pipe), "--assume", "A100 80GB", *fixed)
    _, a2 = _plan(
        str(pipe), "--assume", "A100 80GB", *fixed, "--set", "sft.max_steps=2000", "--set", "pretrain.max_steps=4000"
    )
    _, h = _plan(str(pipe), "--assume", "H100 80GB", *fixed)
    for stage in ("pretrain", "sft"):
        assert _seconds(a2[stage]["estimate"]) == pytest.approx(2 * _seconds(a[stage]["estimate"]), rel=0.02)
        assert _count(a2[stage]["planned tokens"]) == 2 * _count(a[stage]["planned tokens"])
        assert _seconds(h[stage]["estimate"]) < _seconds(a[stage]["estimate"]) / 2.5
    assert _seconds(a["dpo"]["estimate"]) > _seconds(a["sft"]["estimate"])
    _, lora = _plan(str(pipe), "--assume", "A100 80GB", *fixed, "--set", "sft.method=lora")
    assert _seconds(lora["sft"]["estimate"]) < _seconds(a["sft"]["estimate"])
    _, ep = _plan(str(pipe), "--assume", "A100 80GB", "--set", "sft.time_budget=0", "--set", "sft.epochs=2")
    _, ep4 = _plan(str(pipe), "--assume", "A100 80GB", "--set", "sft.time_budget=0", "--set", "sft.epochs=4")
    assert _count(ep4["sft"]["steps"]) == 2 * _count(ep["sft"]["steps"])
    # a time budget shorter than the steps' time ends the stage: the estimate is the budget
    _, b = _plan(
        str(pipe),
        "--assume",
        "A100 80GB",
        *fixed,
        "--set",
        "pretrain.time_budget=0.01",
        "--set",
        "pretrain.lr_schedule=wsd",
    )
    assert _seconds(b["pretrain"]["estimate"]) == 36


def test_a_pretraining_budget_too_small_for_any_size_is_planned_on_the_smallest_with_a_warning():
    proc = run_aura_here("pipeline", "plan", "a100-72h", "--assume", "A100 80GB", "--set", "pretrain.time_budget=0.001")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "    pretrain: size for the budget: 'qwen3-tiny' (19.5 M parameters)" in proc.stdout
    assert "Warning: The 0.001 h budget gives no preset even 10 tokens per parameter" in proc.stderr


def test_hours_that_do_not_add_up_are_refused(tmp_path):
    text = A100.read_text(encoding="utf-8")
    bad = tmp_path / "bad.yaml"
    bad.write_text(text.replace("  pretrain: 58\n", "  pretrain: 70\n", 1), encoding="utf-8")
    proc = run_aura_here("pipeline", "plan", str(bad))
    assert proc.returncode == 2 and "'total'" in proc.stderr and "more than the total" in proc.stderr
    bad.write_text(text.replace("  gguf: 0.25\n", "  gguff: 0.25\n", 1), encoding="utf-8")
    proc = run_aura_here("pipeline", "plan", str(bad))
    assert proc.returncode == 2 and "'gguff'" in proc.stderr and "Traceback" not in proc.stderr


def test_a100_chain_first_stages_on_a_fineweb2_copy(tmp_path):
    """curate (streamed FineWeb-2 copy, --max-documents) -> tokenizer -> prepare, as a100-72h ships them."""
    importorskip("datatrove", "datatrove")
    importorskip("py3langid", "datatrove")
    from tests.test_curate import spanish_docs

    docs = spanish_docs()[:16]
    mirror = tmp_path / "fineweb-2"
    rows = write_fineweb2(mirror, docs, files=2)
    spec = yaml.safe_load(A100.read_text(encoding="utf-8"))
    spec["stages"] = spec["stages"][:3]
    spec["hours"] = {k: v for k, v in spec["hours"].items() if k in ("total", "curate", "tokenizer", "prepare")}
    small = tmp_path / "a100-small.yaml"
    small.write_text(yaml.safe_dump(spec, allow_unicode=True, sort_keys=False), encoding="utf-8")
    out = tmp_path / "run"
    args = (
        "pipeline",
        "run",
        str(small),
        "--output-dir",
        str(out),
        "--set",
        f"curate.hf_dataset={mirror}",
        "--set",
        "curate.max_documents=12",
        "--set",
        "curate.tasks=2",
        "--set",
        "curate.workers=1",
        "--set",
        "tokenizer.vocab_size=600",
        "--set",
        "prepare.val_fraction=0.2",
        "--set",
        "prepare.workers=1",
    )
    proc = run_aura_here(*args, env=OFFLINE)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    state = json.loads((out / "pipeline.json").read_text(encoding="utf-8"))
    assert [state["stages"][n]["status"] for n in state["order"]] == ["finished"] * 3
    curated = [
        json.loads(line)
        for f in sorted((out / "curate").glob("*.jsonl.gz"))
        for line in gzip.open(f, "rt", encoding="utf-8")
    ]
    ids = {r["id"] for r in rows}
    assert 0 < len(curated) <= 12 and {d["id"] for d in curated} <= ids
    assert all(
        d["metadata"]["dump"] == "CC-MAIN-2024-10" and d["metadata"]["url"].startswith("https://") for d in curated
    )
    meta = json.loads((out / "prepare" / "meta.json").read_text(encoding="utf-8"))
    assert meta["splits"]["train"]["documents"] + meta["splits"]["val"]["documents"] == len(curated)
    assert meta["splits"]["train"]["tokens"] > 0
    assert all(Path(s["path"]).parent == out / "curate" for s in meta["sources"])
    tok = json.loads((out / "tokenizer" / "aura_tokenizer.json").read_text(encoding="utf-8"))
    assert meta["tokenizer"]["hash"] == tok["hash"]

    # curate interrupted (the state a stop leaves): the same command resumes it in its folder, where
    # `aura data curate` runs only the unfinished tasks (here none), instead of starting it from scratch
    shards = {f: f.stat().st_mtime_ns for f in (out / "curate").glob("*.jsonl.gz")}
    state["stages"]["curate"]["status"] = "interrupted"
    (out / "pipeline.json").write_text(json.dumps(state), encoding="utf-8")
    again = run_aura_here(*args, env=OFFLINE)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert "curate: it was interrupted; resuming in its folder (only the unfinished tasks)" in again.stdout
    assert "Resuming the previous curation" in again.stdout + again.stderr
    assert {f: f.stat().st_mtime_ns for f in (out / "curate").glob("*.jsonl.gz")} == shards


def test_data_stage_estimates_are_bytes_over_the_measured_rates(tmp_path):
    """A data stage whose input exists: its bytes over the measured rate, times its workers; an input an
    earlier stage writes, or a hub stream, has no estimate."""
    from types import SimpleNamespace

    from aura.pipeline.estimate import CURATE_BYTES_PER_S, PREPARE_BYTES_PER_S, plan_data

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.txt").write_bytes(b"x" * PREPARE_BYTES_PER_S)
    (corpus / "b.txt").write_bytes(b"x" * PREPARE_BYTES_PER_S)
    one = plan_data(("data", "prepare"), SimpleNamespace(inputs=[str(corpus)], workers=1, hf_dataset=""))
    two = plan_data(("data", "prepare"), SimpleNamespace(inputs=[str(corpus)], workers=2, hf_dataset=""))
    assert one.seconds == pytest.approx(2.0) and two.seconds == pytest.approx(1.0)
    cur = plan_data(("data", "curate"), SimpleNamespace(inputs=[str(corpus / "a.txt")], workers=1, hf_dataset=""))
    assert cur.seconds == pytest.approx(PREPARE_BYTES_PER_S / CURATE_BYTES_PER_S)
    later = plan_data(
        ("data", "prepare"), SimpleNamespace(inputs=[str(tmp_path / "run" / "curate")], workers=1, hf_dataset="")
    )
    hub = plan_data(("data", "curate"), SimpleNamespace(inputs=[], workers=1, hf_dataset="HuggingFaceFW/fineweb-2"))
    assert later.seconds is None and hub.seconds is None
