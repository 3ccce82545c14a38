"""Several `aura pretrain` runs under ONE torchrun launch (tests/test_lan.py): the slow-LAN modes.

Usage: torchrun --nproc_per_node=2 lan_runs.py ROOT DATA BASE_MODEL SFT_DATA PORT... (one free port per run;
BASE_MODEL and SFT_DATA for the two `aura finetune` runs at the end). Each run calls
``aura.cli.main`` (what the ``aura`` command runs) with its own --output-dir under ROOT; the process group
is set up and torn down by every run, on a store of its own (MASTER_PORT = the run's port, not torchrun's
agent store, whose keys the previous group left behind), as in separate launches, but Python, torch and
transformers are imported once, which keeps the test fast. Before each run a line ``=== RUN name ===``
marks where its output starts.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

ROOT_DIR = Path(__file__).resolve().parents[2]
if str(ROOT_DIR) not in sys.path:
    sys.path.insert(0, str(ROOT_DIR))

from aura.cli import main  # noqa: E402

STEPS, SAVE = 12, 5
TINY = [
    "--model-preset",
    "manual",
    "--arch",
    "llama",
    "--embed-size",
    "64",
    "--num-layers",
    "2",
    "--num-heads",
    "4",
    "--num-kv-heads",
    "2",
    "--seq-length",
    "32",
    "--intermediate-size",
    "128",
    "--log-interval",
    "1",
    "--sample-tokens",
    "0",
    "--learning-rate",
    "3e-3",
    "--precision",
    "fp32",
    "--backend",
    "gloo",
    "--save-steps",
    str(SAVE),
    "--keep-last",
    "0",
    "--warmup-steps",
    "0",
    "--min-lr",
    "3e-3",
    "--batch-size",
    "4",
    "--max-steps",
    str(STEPS),
]

RUNS = {
    "ddp": ["--ddp-comm", "none"],
    "bf16": ["--ddp-comm", "bf16"],
    "powersgd": ["--ddp-comm", "powersgd", "--powersgd-rank", "2", "--powersgd-warmup", "3"],
    "local": ["--local-steps", "3"],
}


def run(
    name: str, root: Path, data: str, extra: list[str], *, rank: int, port: str, argv: list[str] | None = None
) -> None:
    import os

    os.environ.update(MASTER_PORT=port, TORCHELASTIC_USE_AGENT_STORE="False")
    if rank == 0:
        print(f"=== RUN {name} ===", flush=True)
    rc = main(argv or ["pretrain", "--data", data, "--output-dir", str(root / name), *TINY, *extra])
    if rank == 0:
        print(f"=== RC {name} {rc} ===", flush=True)


def main_script() -> None:
    import os

    root, data, base, sft, ports = Path(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4], iter(sys.argv[5:])
    rank = int(os.environ["RANK"])
    for name, extra in RUNS.items():
        run(name, root, data, extra, rank=rank, port=next(ports))
    for name in ("powersgd", "local"):  # resumed from the step-5 checkpoint in a fresh run dir
        resumed = root / f"{name}-resumed"
        if rank == 0:  # before the run: rank 1 touches nothing until the process group (rank 0) is up
            shutil.copytree(root / name / f"checkpoint-step-{SAVE}", resumed / f"checkpoint-step-{SAVE}")
        run(f"{name}-resumed", root, data, [*RUNS[name], "--resume-from", "latest"], rank=rank, port=next(ports))
    run(
        "check-dist",
        root,
        data,
        [],
        rank=rank,
        port=next(ports),
        argv=["check-dist", "--size-mb", "1", "--iters", "3", "--model-preset", "gpt2-medium"],
    )
    for name, extra in (
        ("ft-powersgd", ["--ddp-comm", "powersgd", "--powersgd-rank", "2", "--powersgd-warmup", "2"]),
        ("ft-local", ["--local-steps", "2"]),
    ):  # LoRA fine-tuning through the same engines
        run(
            name,
            root,
            data,
            [],
            rank=rank,
            port=next(ports),
            argv=[
                "finetune",
                "--base-model",
                base,
                "--data",
                sft,
                "--method",
                "lora",
                "--output-dir",
                str(root / name),
                "--max-steps",
                "4",
                "--batch-size",
                "2",
                "--log-interval",
                "1",
                "--save-steps",
                "0",
                "--backend",
                "gloo",
                "--precision",
                "fp32",
                *extra,
            ],
        )


if __name__ == "__main__":
    main_script()
