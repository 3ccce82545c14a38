"""The bad-input catalogue: malformed and hostile inputs for every command, each of which must get a clear
refusal. Shared by ``tests/test_bad_inputs.py`` (one test per case) and ``bench/bench_bad_inputs.py``
(the ``N/M clear`` tally).

A case builds its own broken files under a fresh directory and returns the command line to run. A
refusal is *clear* when the command exits with code 2, prints no traceback, its message names the
offending file or field, and it leaves nothing a later command would take as complete (what the command
writes when it succeeds, ``COMPLETE``, or the case's own ``outputs``; no staging ``.tmp-*`` entry).

The cases live by command in ``cases_data`` (data prepare, tokenizer), ``cases_training`` (pretrain,
finetune), ``cases_models`` (generate, chat, eval, merge, export gguf), ``cases_tools`` (runs, plot,
launch, check-dist, monitor, doctor), ``cases_pipeline`` (aura pipeline) and ``cases_security`` (the security rules'
hostile files);
``hostile`` builds the files.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Fixtures:
    """Read-only inputs every case may copy: a tokenizer, tiny Llama and GPT-2 dirs, a LoRA adapter on
    the Llama, a prepared data dir and a pretraining run (checkpoint-step-1, checkpoint-step-2, final/)."""

    tokenizer: Path
    llama: Path
    gpt2: Path
    adapter: Path
    data: Path
    run: Path


@dataclass(frozen=True)
class Case:
    command: str  # as typed after `aura`, for the per-command tally
    build: Callable[[Fixtures, Path], list[str]]  # writes its files under the dir, returns the arguments
    names: str  # the message names this (a file name, a field, a flag): the offending input
    outputs: tuple[str, ...] | None = None  # globs under the case dir that must match nothing afterwards
    # (None: what the command writes when it succeeds, COMPLETE[command])
    slow: bool = False
    hostile: bool = False  # built by an attacker rather than a careless user


CASES: dict[str, Case] = {}

# What each command leaves when it succeeds, which a later command takes as complete (globs).
COMPLETE = {
    "data prepare": ("out/meta.json", "out/*.bin"),
    "data curate": ("out/*.jsonl*", "out/*.parquet", "out/*.json"),
    "tokenizer train": ("out/tokenizer.json",),
    "tokenizer extend": ("out/tokenizer.json",),
    "pretrain": ("out/final", "out/checkpoint-*", "out/run.json"),
    "finetune": ("out/final", "out/checkpoint-*", "out/run.json"),
    "generate": ("out/*.jsonl",),
    "chat": (),
    "eval": ("out/*.json",),
    "merge": ("out/config.json", "out/*.safetensors"),
    "export gguf": ("out/*.gguf", "out/Modelfile"),
    "plot": ("out/*.png",),
    "pipeline run": ("out/pipeline.json", "out/report.md", "out/*/"),
}


def case(name: str, command: str, names: str, **kw) -> Callable:
    def register(build):
        assert name not in CASES, name
        CASES[name] = Case(command=command, build=build, names=names, **kw)
        return build

    return register


# ---------------------------------------------------------------------------------------------------
# Judging


def verdict(name: str, code: int, stdout: str, stderr: str, tmp: Path) -> list[str]:
    """Why the refusal of case ``name`` is not clear (empty: it is)."""
    c = CASES[name]
    problems = []
    if code != 2:
        problems.append(f"exit code {code} (expected 2)")
    text = stdout + stderr
    if "Traceback" in text:
        problems.append("a traceback")
    if c.names not in stderr:
        problems.append(f"the message does not name {c.names!r}")
    globs = COMPLETE.get(c.command, ()) if c.outputs is None else c.outputs
    left = sorted({str(p.relative_to(tmp)) for g in globs for p in tmp.glob(g)})
    left += [str(p.relative_to(tmp)) for p in tmp.rglob(".tmp-*")]
    if left:
        problems.append("left behind: " + ", ".join(left))
    return problems


def run_case(name: str, fx: Fixtures, tmp: Path, runner) -> tuple[list[str], str]:
    """Build case ``name`` under ``tmp``, run it with ``runner(*args)`` (a CompletedProcess: ``run_aura_here``
    or ``run_aura``), return (problems, output)."""
    c = CASES[name]
    tmp.mkdir(parents=True, exist_ok=True)
    args = c.build(fx, tmp)
    r = runner(*args)
    return verdict(name, r.returncode, r.stdout, r.stderr, tmp), r.stdout + r.stderr


PRETRAIN_FLAGS = dict(
    model_preset="manual",
    arch="llama",
    embed_size=64,
    num_layers=2,
    num_heads=4,
    num_kv_heads=2,
    seq_length=32,
    intermediate_size=256,
    batch_size=4,
    sample_tokens=0,
)


def build_run(root: Path, data: Path) -> Path:
    """A 2-step pretraining on ``data`` saving every step: checkpoint-step-1, checkpoint-step-2, final/."""
    from aura.train.pretrain import PretrainConfig, pretrain

    assert (
        pretrain(PretrainConfig(data=[str(data)], output_dir=str(root), max_steps=2, save_steps=1, **PRETRAIN_FLAGS))
        == 0
    )
    return root


def build_fixtures(root: Path) -> Fixtures:
    """Every input the cases copy, built under ``root`` (about 20 s on 2 CPU cores)."""
    from tests.test_loop import build_prepared
    from tests.tiny_models import build_zoo, make_lora_adapter

    root = Path(root)
    zoo = build_zoo(root / "zoo")
    data = build_prepared(root / "prepared")
    return Fixtures(
        tokenizer=zoo["tokenizer"],
        llama=zoo["llama"],
        gpt2=zoo["gpt2"],
        adapter=make_lora_adapter(zoo["llama"], root / "adapter"),
        data=data,
        run=build_run(root / "run", data),
    )


from tests.bad_inputs import cases_data, cases_models, cases_pipeline, cases_security, cases_tools, cases_training  # noqa: E402,F401 (registers)
