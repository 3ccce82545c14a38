"""The shipped GPU pipelines, each scaled to minutes, as checks of the GPU suite: `bash bench/gpu_suite.sh --pipelines`.

Each check runs ``aura pipeline run NAME --scale F`` on the pipeline as shipped: the same YAML, its budgets
multiplied by one factor (``--scale``: training hours, steps, tokens and documents; docs/pipelines.md). The factor is
chosen so that the pipeline's longest training stage gets
``STAGE_SECONDS`` seconds (a minute on a GPU, a few seconds in the ``--cpu`` mode CI runs). Only what cannot be
reached from a machine without a hub is replaced, each with ``--set``:

- a hub model -> a local model of the same architecture with random weights: the real shape on a GPU
  (``SHAPES``: Llama-3.2-3B for ``lora-12gb``, Qwen2.5-0.5B for ``adapt-open-model``, Mistral-7B with 4 of its
  32 layers for ``frida-8xh100``), a tiny one on the CPU; every one with the suite's tokenizer (``setup``);
- a hub dataset -> the suite's Spanish corpus (``a100-72h``'s curation reads it as local files); the
  fine-tuning stages fall back to the shipped data by themselves (``data_fallback``, the hub being offline);
- a launch block for 8 GPUs -> 1 GPU (``frida-8xh100``: FSDP2 at world size 1);
- on a GPU without bitsandbytes, QLoRA -> LoRA (said in the figure).

``lora-12gb`` runs with the process's CUDA memory capped to 12 GB (``torch.cuda.set_per_process_memory_fraction``).
A check passes when every stage finished; a stage that stopped for an optional package the machine lacks
(bitsandbytes, gguf, llama.cpp) makes it ``skipped`` with the stage named, never ``pass``. Its figure: each stage's
seconds, the pretraining MFU where the report has one; the report card is kept in the suite's ``--out``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys
from pathlib import Path

from gpu_harness import CORPUS, Context, Result, check

PIPELINES = ["pipeline_a100", "pipeline_lora12", "pipeline_frida", "pipeline_adapt", "pipeline_lan"]
STAGE_SECONDS = {"gpu": 60.0, "cpu": 6.0}  # what the longest training stage of a scaled pipeline gets

# Random-weight stand-ins for the hub models the pipelines name (transformers config class, its fields).
SHAPES = {
    "llama-3.2-3b": (
        "LlamaConfig",
        dict(
            hidden_size=3072,
            intermediate_size=8192,
            num_hidden_layers=28,
            num_attention_heads=24,
            num_key_value_heads=8,
            vocab_size=128256,
            rope_theta=500000.0,
            max_position_embeddings=8192,
            tie_word_embeddings=True,
        ),
    ),
    "qwen2.5-0.5b": (
        "Qwen2Config",
        dict(
            hidden_size=896,
            intermediate_size=4864,
            num_hidden_layers=24,
            num_attention_heads=14,
            num_key_value_heads=2,
            vocab_size=151936,
            max_position_embeddings=32768,
            tie_word_embeddings=True,
        ),
    ),
    "mistral-7b-4-layers": (
        "MistralConfig",
        dict(
            hidden_size=4096,
            intermediate_size=14336,
            num_hidden_layers=4,
            num_attention_heads=32,
            num_key_value_heads=8,
            vocab_size=32000,
            max_position_embeddings=32768,
        ),
    ),
}
TINY = dict(
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=2048,
)
OPTIONAL_STAGE_PACKAGES = {"gguf": "gguf", "llama_cpp": "llama-cpp-python", "bitsandbytes": "bitsandbytes"}


def stand_in(ctx: Context, shape: str) -> Path:
    """A local model folder of ``shape`` (``SHAPES``; tiny on the CPU) with random weights and the suite's
    tokenizer, made once per run (bf16 safetensors on a GPU)."""
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = ctx.work / "stand-ins" / shape
    if (path / "config.json").is_file():
        return path
    cls_name, fields = SHAPES[shape]
    tok = AutoTokenizer.from_pretrained(ctx.tok)
    fields = {**fields, **(TINY if ctx.cpu else {})}
    fields["vocab_size"] = max(fields["vocab_size"] if not ctx.cpu else 0, len(tok))
    config = getattr(transformers, cls_name)(
        **fields, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id
    )
    torch.manual_seed(0)
    dtype = torch.float32 if ctx.cpu else torch.bfloat16
    with torch.device("cpu" if ctx.cpu else "cuda"):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    tmp = path.with_name(path.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    del model
    tmp.rename(path)
    return path


def corpus(ctx: Context) -> Path:
    """The Spanish corpus the scaled pipelines read: the shipped one in numbered copies (as ``setup`` makes it),
    a folder of .txt files (2 copies on the CPU, 40 on a GPU: ~7 MB)."""
    out = ctx.work / "pipeline-corpus"
    if out.is_dir():
        return out
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    copies = 2 if ctx.cpu else 40
    for path in sorted(CORPUS.glob("*.txt")):
        paragraphs = [p for p in path.read_text(encoding="utf-8").split("\n\n") if p.strip()]
        (tmp / path.name).write_text(
            "".join(f"({i}) {p}\n\n" for i in range(copies) for p in paragraphs), encoding="utf-8"
        )
    tmp.rename(out)
    return out


def scale_for(name: str, ctx: Context) -> float:
    """``--scale`` that gives the pipeline's longest training stage ``STAGE_SECONDS`` (1 when none has a budget)."""
    from aura.pipeline.spec import load

    hours = [s.options.get("time_budget") or 0 for s in load(name).stages if s.command in ("pretrain", "finetune")]
    longest = max([h for h in hours if isinstance(h, (int, float))] or [0])
    target = STAGE_SECONDS["cpu" if ctx.cpu else "gpu"]
    return min(1.0, target / (longest * 3600)) if longest else 1.0


def run_pipeline(
    ctx: Context,
    check_name: str,
    pipeline: str,
    sets: list[str],
    *,
    memory_gb: float | None = None,
    notes: list[str] = (),
) -> Result:
    """``aura pipeline run PIPELINE --scale F --set ...`` in a child process (offline), then its report read."""
    out = ctx.dir(check_name) / pipeline
    scale = scale_for(pipeline, ctx)
    args = ["pipeline", "run", pipeline, "--output-dir", out, "--scale", f"{scale:.6g}"]
    for item in sets:
        args += ["--set", item]
    python = [sys.executable, "-m", "aura"]
    if memory_gb is not None and not ctx.cpu:  # the whole process sees a 12 GB card
        python = [
            sys.executable,
            "-c",
            "import sys, torch; total = torch.cuda.get_device_properties(0).total_memory; "
            f"torch.cuda.set_per_process_memory_fraction(min(1.0, {memory_gb} * 2**30 / total)); "
            "from aura.cli import entry; sys.argv[0] = 'aura'; entry()",
        ]
    proc = ctx.aura_child(
        *args,
        timeout=None,  # the suite's driver stops a check at its own timeout, its whole process group with it
        python=python,
        env={"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "AURA_LANG": "en"},
    )
    report = json.loads((out / "report.json").read_text(encoding="utf-8")) if (out / "report.json").is_file() else {}
    stages = report.get("stages") or []
    suite_out = os.environ.get("AURA_SUITE_OUT")  # the suite's --out: the report card is kept there
    keep = Path(suite_out) / f"{check_name}-report.md" if suite_out else None
    if keep is not None and (out / "report.md").is_file():
        shutil.copyfile(out / "report.md", keep)
    parts = [
        f"{s['name']} {s['status']}" + (f" {s['seconds']:.0f} s" if isinstance(s.get("seconds"), (int, float)) else "")
        for s in stages
    ]
    mfu = [(s.get("training") or {}).get("mfu") for s in stages if s.get("command_name") == "pretrain"]
    if mfu and mfu[0] is not None:
        parts.append(f"pretrain MFU {100 * mfu[0]:.1f} %")
    figure = f"--scale {scale:.3g}: " + ", ".join(parts) + "".join(f"; {n}" for n in notes)
    metrics = {
        "scale": scale,
        "returncode": proc.returncode,
        "stages": [{k: s.get(k) for k in ("name", "command_name", "status", "seconds", "reason")} for s in stages],
        "report": str(keep) if keep else str(out / "report.md"),
    }
    unfinished = [s for s in stages if s.get("status") != "finished"]
    missing = {mod: pkg for mod, pkg in OPTIONAL_STAGE_PACKAGES.items() if importlib.util.find_spec(mod) is None}
    tail = (proc.stdout + proc.stderr)[-1500:]
    if proc.returncode == 0 and stages and not unfinished:
        return Result(figure, True, "every stage finished", metrics)
    said = tail + json.dumps(unfinished)  # the stage's reason ("missing module llama_cpp") or its error
    lacking = [
        pkg
        for mod, pkg in missing.items()
        if any(t in said for t in (f"missing module {mod}", f"No module named '{mod}'", f"install {pkg}"))
    ]
    if unfinished and lacking:
        return Result(
            figure + f"; stopped at '{unfinished[0]['name']}' for want of {', '.join(lacking)}",
            None,
            "every stage finished",
            metrics,
        )
    metrics["output_tail"] = tail
    return Result(
        figure + f"; exit {proc.returncode}: {tail.strip().splitlines()[-1][:300] if tail.strip() else ''}",
        False,
        "every stage finished",
        metrics,
    )


def _tiny_pretraining(ctx: Context, *stages: str) -> list[str]:
    """On the CPU, the pretraining stages train the tiny preset (``auto`` would pick one for the CPU's memory)."""
    return [f"{s}.model_preset=tiny" for s in stages] if ctx.cpu else []


def _shipped_size(ctx: Context, pipeline: str, stage: str) -> list[str]:
    """On a GPU, the size ``auto`` picks for the shipped pipeline's unscaled time budget on this GPU: a scaled
    budget of a minute would make ``auto`` pick a tiny model (aura.models.size_budget), and the check is
    that the shipped size trains here."""
    if ctx.cpu:
        return []
    from aura.models.hardware import choose_auto
    from aura.pipeline.spec import load

    hours = load(pipeline).stage(stage).options.get("time_budget")
    return [f"{stage}.model_preset={choose_auto(time_budget_h=hours).preset}"]


def _budget_checked_every_step(ctx: Context, *stages: str) -> list[str]:
    """On the CPU, a scaled time budget of a second or two is checked at every step (at every logged one)."""
    return [f"{s}.log_interval=1" for s in stages] if ctx.cpu else []


def _few_steps(ctx: Context, *stages: str) -> list[str]:
    """On the CPU, the fine-tuning stages that run whole epochs (no time budget to scale) stop after 4 steps."""
    return [f"{s}.max_steps=4" for s in stages] if ctx.cpu else []


def _few_items(ctx: Context, stage: str = "eval") -> list[str]:
    """On the CPU, the eval stage scores 4 items per task of its suite (all of them on a GPU)."""
    return [f"{stage}.limit=4"] if ctx.cpu else []


@check(
    "pipeline_a100",
    "a100-72h scaled: curate -> tokenizer -> prepare -> pretrain auto -> SFT -> DPO -> eval -> GGUF",
    expect=200,
    timeout=420,
    cpu_timeout=900,
    cpu_expect=150,
)
def pipeline_a100(ctx: Context) -> Result:
    sets = [
        "curate.hf_dataset=",
        f"curate.inputs=[{corpus(ctx)}]",
        "curate.workers=2",
        "curate.tasks=2",
        *_tiny_pretraining(ctx, "pretrain"),
        *_shipped_size(ctx, "a100-72h", "pretrain"),
        *_budget_checked_every_step(ctx, "sft", "dpo"),
        *_few_items(ctx),
    ]
    if ctx.cpu:
        sets.append("tokenizer.vocab_size=2000")
    return run_pipeline(ctx, "pipeline_a100", "a100-72h", sets)


@check(
    "pipeline_lora12",
    "lora-12gb scaled: QLoRA of Llama-3.2-3B's shape in 12 GB -> merge -> GGUF q4_k_m",
    expect=150,
    timeout=360,
    cpu_timeout=600,
    cpu_expect=90,
)
def pipeline_lora12(ctx: Context) -> Result:
    model = stand_in(ctx, "llama-3.2-3b")
    sets = [f"sft.base_model={model}", f"merge.base_model={model}", *_few_steps(ctx, "sft")]
    notes = []
    if not ctx.cpu and importlib.util.find_spec("bitsandbytes") is None:
        sets.append("sft.method=lora")
        notes.append("LoRA instead of QLoRA: bitsandbytes is not installed")
    return run_pipeline(ctx, "pipeline_lora12", "lora-12gb", sets, memory_gb=12, notes=notes)


@check(
    "pipeline_frida",
    "frida-8xh100 on 1 GPU: LoRA of Mistral-7B's shape (4 layers), FSDP2 -> eval -> merge -> GGUF",
    expect=150,
    timeout=360,
    cpu_timeout=600,
    cpu_expect=90,
)
def pipeline_frida(ctx: Context) -> Result:
    model = stand_in(ctx, "mistral-7b-4-layers")
    sets = [
        f"sft.base_model={model}",
        f"merge.base_model={model}",
        "sft.launch.gpus_per_node=1",
        *_few_steps(ctx, "sft"),
        *_few_items(ctx),
    ]
    return run_pipeline(ctx, "pipeline_frida", "frida-8xh100", sets, notes=["1 GPU instead of 8"])


@check(
    "pipeline_adapt",
    "adapt-open-model scaled: extend Qwen2.5-0.5B's tokenizer -> continued pretraining -> LoRA SFT",
    expect=150,
    timeout=360,
    cpu_timeout=600,
    cpu_expect=90,
)
def pipeline_adapt(ctx: Context) -> Result:
    model = stand_in(ctx, "qwen2.5-0.5b")
    sets = [
        f"tokenizer.base={model}",
        f"pretrain.init_from={model}",
        f"eval.model=[{model}]",
        *_few_steps(ctx, "sft"),
        *_few_items(ctx),
    ]
    if ctx.cpu:
        sets.append("tokenizer.add_tokens=200")
    return run_pipeline(ctx, "pipeline_adapt", "adapt-open-model", sets)


@check(
    "pipeline_lan",
    "lan-5-nodes on 1 node: tokenizer -> prepare -> check-dist + launched DDP pretraining -> SFT -> DPO",
    expect=200,
    timeout=420,
    cpu_timeout=900,
    cpu_expect=150,
)
def pipeline_lan(ctx: Context) -> Result:
    sets = [
        *_tiny_pretraining(ctx, "pretrain"),
        *_shipped_size(ctx, "lan-5-nodes", "pretrain"),
        *_budget_checked_every_step(ctx, "sft", "dpo"),
        *_few_items(ctx),
    ]
    if ctx.cpu:
        sets.append("tokenizer.vocab_size=2000")
    return run_pipeline(ctx, "pipeline_lan", "lan-5-nodes", sets, notes=["1 node"])
