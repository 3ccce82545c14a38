"""Hostile and damaged files for the bad-input cases, and the command lines the cases share."""

from __future__ import annotations

import gzip
import json
import random
import shutil
import struct
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tests.bad_inputs import Fixtures

DEEP = 100_000  # nesting levels: far past Python's recursion limit (json recurses once per level)
YAML_DEEP = 700  # PyYAML recurses at least twice per level, and slowly: 700 levels are enough


def nested_json(depth: int = DEEP) -> str:
    return "[" * depth + "]" * depth


def write(path: Path, data: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, bytes):
        path.write_bytes(data)
    else:
        path.write_text(data, encoding="utf-8")
    return path


def random_bytes(n: int = 4096, seed: int = 7) -> bytes:
    return random.Random(seed).randbytes(n)


def copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst, symlinks=True)
    return dst


def truncate(path: Path, keep: float = 0.5) -> Path:
    size = path.stat().st_size
    with open(path, "r+b") as f:
        f.truncate(int(size * keep))
    return path


def edit_json(path: Path, change: Callable[[object], object]) -> Path:
    data = json.loads(path.read_text(encoding="utf-8"))
    path.write_text(json.dumps(change(data)), encoding="utf-8")
    return path


def one_line_gzip(path: Path, n_bytes: int) -> Path:
    """A gzip holding one line of ``n_bytes`` 'a's, as one compressed 1 MiB member repeated (a gzip
    stream may hold several members): 1 GiB takes about 1 MB on disk and no time to build."""
    member = gzip.compress(b"a" * (1 << 20), compresslevel=9)
    with open(path, "wb") as f:
        for _ in range(n_bytes >> 20):
            f.write(member)
        f.write(gzip.compress(b"\n"))
    return path


def safetensors_header_lie(path: Path) -> Path:
    """A safetensors file whose header claims more bytes than the file holds (a hostile length)."""
    header = json.dumps({"w": {"dtype": "F32", "shape": [1 << 20], "data_offsets": [0, 4 << 20]}}).encode()
    return write(path, struct.pack("<Q", len(header)) + header + b"\0" * 16)


def sft_file(tmp: Path, name: str, body: str | bytes) -> Path:
    return write(tmp / name, body)


def pair_line(**rec) -> str:
    return json.dumps(rec, ensure_ascii=False) + "\n"


def docs(n: int = 40) -> str:
    return "".join(f"Documento número {i}: el perro corre por el campo de Castilla.\n" for i in range(n))


def prepare_args(fx: Fixtures, tmp: Path, *inputs, extra=()) -> list[str]:
    return [
        "data",
        "prepare",
        *map(str, inputs),
        "--tokenizer",
        str(fx.tokenizer),
        "--output-dir",
        str(tmp / "out"),
        *extra,
    ]


def finetune_args(fx: Fixtures, tmp: Path, *args) -> list[str]:
    return [
        "finetune",
        "--base-model",
        str(fx.llama),
        "--output-dir",
        str(tmp / "out"),
        "--max-steps",
        "1",
        "--batch-size",
        "1",
        *map(str, args),
    ]


def dpo_args(fx: Fixtures, tmp: Path, data: Path, *args) -> list[str]:
    return finetune_args(fx, tmp, "--objective", "dpo", "--data", data, *args)


PRETRAIN_TINY = [
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
    "256",
    "--batch-size",
    "4",
    "--sample-tokens",
    "0",
]


def pretrain_args(fx: Fixtures, tmp: Path, *args, data: Path | None = None) -> list[str]:
    return [
        "pretrain",
        "--data",
        str(data or fx.data),
        "--output-dir",
        str(tmp / "out"),
        *PRETRAIN_TINY,
        "--max-steps",
        "1",
        *map(str, args),
    ]


def resume_args(fx: Fixtures, tmp: Path, damage: Callable[[Path], object]) -> list[str]:
    """A copy of the fixture run without final/, its newest checkpoint damaged, resumed for 2 more steps."""
    run = copy(fx.run, tmp / "run")
    shutil.rmtree(run / "final")
    damage(run / "checkpoint-step-2")
    return [
        "pretrain",
        "--data",
        str(fx.data),
        "--output-dir",
        str(run),
        *PRETRAIN_TINY,
        "--max-steps",
        "4",
        "--save-steps",
        "1",
        "--resume-from",
        "latest",
    ]


RESUME_OUT = ("run/final", "run/checkpoint-step-3")  # the damaged run must not grow


def damaged_model(fx: Fixtures, tmp: Path, damage: Callable[[Path], object], src: Path | None = None) -> Path:
    model = copy(src or fx.llama, tmp / "model")
    damage(model)
    return model


def damaged_adapter(fx: Fixtures, tmp: Path, damage: Callable[[Path], object]) -> Path:
    adapter = copy(fx.adapter, tmp / "adapter")
    damage(adapter)
    return adapter


def run_dir_with(tmp: Path, log: bytes | str, run_json: str | None = None) -> Path:
    run = tmp / "runs" / "r1"
    write(
        run / "run.json",
        run_json
        if run_json is not None
        else json.dumps({"status": "finished", "command": "pretrain", "step": 2, "max_steps": 2, "pid": 1}),
    )
    write(run / "training_log.csv", log)
    return run


GOOD_LOG = (
    "time,kind,epoch,step,tokens,train_loss,val_loss,lr,grad_norm,tokens_per_s,mfu,seconds\n"
    "2026-01-01T00:00:00,step,0,1,128,6.5,,0.0003,1.2,5000,,0.1\n"
)


def damaged_data(
    fx: Fixtures, tmp: Path, change: Callable[[dict], object] | None = None, text: str | None = None
) -> Path:
    data = copy(fx.data, tmp / "data")
    if text is not None:
        write(data / "meta.json", text)
    elif change is not None:
        edit_json(data / "meta.json", change)
    return data
