"""The checks of the GPU suite (``bench/gpu_suite.py`` runs them; see its docstring).

Each check is a function ``(ctx) -> Result`` registered with ``@check(name, timeout=..., ...)`` in the order
the suite runs them: the most telling first, so that a device lease that runs out still returns them. A check
runs in the suite's worker process (torch and Aura imported once) and returns its figure, its target and
whether it met it; an exception is a failed check, never a failed suite. Shapes come from ``ctx.cpu``: the
``--cpu`` mode (CI) runs the same code on tiny shapes so that none of it rots.

The training-step checks drive Aura's own step (``aura.train.loop.optimizer_step`` over a model from
``aura.models.presets.build_model``, wrapped by ``aura.distributed.parallelize``, with the ``TorchEngine``)
on random tokens, timed with CUDA events after a warm-up (``bench/gpu_harness.py``): the path every ``aura
pretrain`` step takes, with no data loading, logging or checkpoint writing in the figure. The CLI checks run ``aura``
commands in this
process (``aura.cli.main``) or, where signals or several processes are the point, as child processes.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import math
import shutil
import statistics
import sys
import time
from pathlib import Path

from gpu_harness import (  # noqa: F401
    CHECKS,
    CORPUS,
    GB,
    ROOT,
    Check,
    Context,
    Result,
    _gb,
    _Timer,
    build_for_steps,
    check,
    engine_for,
    log_rows,
    release,
    spec_of,
    time_steps,
)

# ---- the checks, in the order they run ---------------------------------------------------------------------


@check("environment", "Device, driver, torch, CUDA; optional packages", expect=10, timeout=30, cpu_timeout=60)
def environment(ctx: Context) -> Result:
    import torch

    info = {"torch": torch.__version__, "cuda": torch.version.cuda or "-"}
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        info.update(
            device=f"{torch.cuda.device_count()} x {p.name}",
            memory_gib=round(p.total_memory / 2**30, 1),
            capability=f"{p.major}.{p.minor}",
            sms=p.multi_processor_count,
        )
        try:
            import pynvml

            pynvml.nvmlInit()
            info["driver"] = pynvml.nvmlSystemGetDriverVersion()
        except Exception as e:  # noqa: BLE001
            info["driver"] = f"NVML failed: {e}"
    else:
        from aura.models.hardware import detect

        info["device"] = f"CPU: {detect().name}"
    info["optional"] = {name: importlib.util.find_spec(mod) is not None for name, mod in OPTIONAL.items()}
    missing = [n for n, ok in info["optional"].items() if not ok]
    figure = f"{info['device']}; torch {info['torch']}, CUDA {info['cuda']}, driver {info.get('driver', '-')}"
    return Result(figure + (f"; not installed: {', '.join(missing)}" if missing else ""), True, metrics=info)


OPTIONAL = {
    "bitsandbytes": "bitsandbytes",
    "deepspeed": "deepspeed",
    "vllm": "vllm",
    "liger-kernel": "liger_kernel",
    "flash-attn": "flash_attn",
    "gguf": "gguf",
    "llama-cpp-python": "llama_cpp",
    "datasets": "datasets",
}


@check(
    "setup", "Tokenizer trained and the tiled corpus tokenised once", expect=5, timeout=120, cpu_timeout=240, keep=True
)
def setup(ctx: Context) -> Result:
    """The embedded Spanish corpus in numbered copies, every paragraph marked with its copy's number (the
    prepare step deduplicates paragraphs: unmarked copies would be dropped), so that no check's run reaches
    the end of an epoch (which would validate and save inside the figure)."""
    src = ctx.work / "setup" / "corpus"
    src.mkdir(parents=True, exist_ok=True)
    copies = 2 if ctx.cpu else 40
    for path in sorted(CORPUS.glob("*.txt")):
        text = path.read_text(encoding="utf-8")
        paragraphs = [p for p in text.split("\n\n") if p.strip()]
        (src / path.name).write_text(
            "".join(f"({i}) {p}\n\n" for i in range(copies) for p in paragraphs), encoding="utf-8"
        )
    files = sorted(src.glob("*.txt"))
    assert (
        ctx.aura("tokenizer", "train", *files, "--vocab-size", 2000 if ctx.cpu else 8000, "--output-dir", ctx.tok) == 0
    ), "aura tokenizer train failed"
    assert (
        ctx.aura("data", "prepare", *files, "--tokenizer", ctx.tok, "--output-dir", ctx.data, "--val-fraction", "0.01")
        == 0
    ), "aura data prepare failed"
    shutil.rmtree(src)
    from aura.data.pretrain_data import open_splits

    tokens = len(open_splits(ctx.data)[0])
    return Result(f"{tokens:,} tokens ({copies} copies of the corpus)", tokens > 0, metrics={"tokens": tokens})


def _mfu_check(ctx: Context, *, ckpt: bool, compile_: bool, profile: bool = False) -> Result:
    spec = spec_of(ctx, "aura-72h-extended")
    vocab, batch = (2000, 2) if ctx.cpu else (32000, 4)
    model, fpt = build_for_steps(ctx, spec, vocab=vocab, ckpt=ckpt, compile_=compile_)
    engine = engine_for(ctx, model)
    f = time_steps(
        ctx,
        model,
        engine,
        fpt=fpt,
        batch=batch,
        seq=spec.seq_len,
        vocab=vocab,
        warmup=2 if ctx.cpu else 3,
        steps=2 if ctx.cpu else 6,
        profile=profile,
    )
    metrics = {
        "seconds_per_step": f.seconds_per_step,
        "tokens_per_s": f.tokens_per_s,
        "mfu": f.mfu,
        "peak_allocated": f.peak_allocated,
        "peak_reserved": f.peak_reserved,
        "batch": batch,
        "seq": spec.seq_len,
        "vocab": vocab,
        "profile": f.profile,
    }
    target = 0.35 if ckpt else (0.45 if compile_ else None)  # eager: the reference the others are read against
    text = (
        f"{f.tokens_per_s:,.0f} tok/s, MFU {'-' if f.mfu is None else f'{100 * f.mfu:.1f} %'}, "
        f"peak {_gb(f.peak_allocated)} allocated / {_gb(f.peak_reserved)} reserved"
    )
    if f.profile:
        p = f.profile
        if "gpu_idle_share" in p:
            text += f"; GPU idle {100 * p['gpu_idle_share']:.0f} %; top kernel {p['top_kernels'][0][0][:40]}"
        text += f"; SDPA: {', '.join(p['sdpa_ops']) or '-'} {p.get('attention_kernels', [])[:1]}"
    ok = True if ctx.cpu or target is None else (f.mfu or 0) >= target
    return Result(text, ok, "-" if target is None else f"MFU >= {100 * target:.0f} %", metrics)


@check(
    "mfu_eager",
    "1.3B (aura-72h-extended) bf16 eager, batch 4 x 2048: MFU, memory, profile, SDPA kernel",
    expect=15,
    timeout=100,
)
def mfu_eager(ctx: Context) -> Result:
    return _mfu_check(ctx, ckpt=False, compile_=False, profile=True)


@check("mfu_compile", "Same, --compile (each block compiled)", expect=15, timeout=180, gpu_only=True)
def mfu_compile(ctx: Context) -> Result:
    return _mfu_check(ctx, ckpt=False, compile_=True)


@check("mfu_ckpt", "Same, gradient checkpointing and --compile", expect=20, timeout=150, gpu_only=True)
def mfu_ckpt(ctx: Context) -> Result:
    """With --compile: recomputation costs a third more compute that MFU does not count, and eager HF
    blocks leave the GPU idle between small kernels (the eager check's profile), so a checkpointed run is
    meant to be compiled. 2026-11-28 on an H200, eager with checkpointing: MFU 24.3 % (docs/benchmarks.md)."""
    return _mfu_check(ctx, ckpt=True, compile_=True)


@check(
    "auto_memory",
    "aura-72h-max (or what auto picks here) at auto's batch vs the memory model",
    expect=10,
    timeout=120,
    gpu_only=True,
)
def auto_memory(ctx: Context) -> Result:
    """Like with like: the memory model's total less its CUDA context (1 GiB, outside the caching allocator)
    against the allocator's reserved peak, at the preset, batch, precision and checkpointing auto chose, with
    the vocabulary auto plans for."""
    from aura.models.hardware import GIB, PLANNING_VOCAB, choose_auto, detect, estimate_memory
    from aura.models.presets import PRESETS

    choice = choose_auto(detect())
    spec = PRESETS[choice.preset]
    est = estimate_memory(
        spec,
        vocab_size=PLANNING_VOCAB,
        batch_size=choice.batch_size,
        precision=choice.precision,
        gradient_checkpointing=choice.gradient_checkpointing,
    )
    model, fpt = build_for_steps(ctx, spec, vocab=PLANNING_VOCAB, ckpt=choice.gradient_checkpointing)
    engine = engine_for(ctx, model, precision=choice.precision)
    f = time_steps(
        ctx, model, engine, fpt=fpt, batch=choice.batch_size, seq=spec.seq_len, vocab=PLANNING_VOCAB, warmup=2, steps=3
    )
    model_bytes = est.total - GIB
    err = (f.peak_reserved - model_bytes) / model_bytes
    parts = {
        k: getattr(est, k) / GB for k in ("weights", "gradients", "optimizer", "activations", "logits", "overhead")
    }
    return Result(
        f"{choice.preset}, batch {choice.batch_size}, ckpt {choice.gradient_checkpointing}: reserved peak "
        f"{_gb(f.peak_reserved)} (allocated {_gb(f.peak_allocated)}) vs model {_gb(model_bytes)} "
        f"({100 * err:+.0f} %); MFU {100 * (f.mfu or 0):.1f} %",
        abs(err) <= 0.15,
        "within 15 % of the memory model",
        {
            "preset": choice.preset,
            "batch": choice.batch_size,
            "ckpt": choice.gradient_checkpointing,
            "peak_reserved": f.peak_reserved,
            "peak_allocated": f.peak_allocated,
            "model_bytes": model_bytes,
            "estimate_parts_gb": parts,
            "mfu": f.mfu,
            "tokens_per_s": f.tokens_per_s,
        },
    )


@check(
    "fp16_lora_resume",
    "fp16 LoRA with dropout: 8 steps against 4 + resume 4 (CUDA RNG restored)",
    expect=20,
    timeout=120,
)
def fp16_lora_resume(ctx: Context) -> Result:
    """GradScaler state, LoRA dropout masks from the restored CUDA RNG and the data position: the resumed
    steps' losses must equal the uninterrupted run's. On the CPU (no fp16 GradScaler): fp32."""
    base = small_base(ctx)
    data = sft_data(ctx)
    precision = "fp32" if ctx.cpu else "fp16"
    a, b = ctx.dir("lora_a"), ctx.dir("lora_b")
    flags = [
        "--base-model",
        base,
        "--data",
        data,
        "--method",
        "lora",
        "--lora-dropout",
        "0.1",
        "--precision",
        precision,
        "--batch-size",
        4,
        "--gradient-accumulation-steps",
        1,
        "--max-length",
        512,
        "--max-steps",
        8,
        "--save-steps",
        4,
        "--log-interval",
        1,
        "--learning-rate",
        "2e-4",
    ]
    assert ctx.aura("finetune", *flags, "--output-dir", a, "--overwrite") == 0, "the 8-step run failed"
    shutil.rmtree(b)
    shutil.copytree(
        a,
        b,
        ignore=lambda d, names: [
            n for n in names if n in ("final", "best") or n.endswith("-8") or n.startswith("interrupt")
        ],
    )
    ckpt = b / "checkpoint-step-4"
    assert ckpt.is_dir(), f"no checkpoint-step-4 in {sorted(p.name for p in a.iterdir())}"
    assert ctx.aura("finetune", *flags, "--output-dir", b, "--resume-from", ckpt) == 0, "the resumed run failed"
    la = {r["step"]: float(r["train_loss"]) for r in log_rows(a)}
    lb = {r["step"]: float(r["train_loss"]) for r in log_rows(b)}
    later = [k for k in la if int(k) > 4]
    worst = max(abs(la[k] - lb.get(k, math.inf)) for k in later)
    return Result(
        f"{precision}: steps 5-8 after resume differ by at most {worst:.2e}",
        worst <= 1e-6 and la.keys() == lb.keys(),
        "equal losses",
        {"a": la, "b": lb},
    )


def small_base(ctx: Context) -> Path:
    """A random Llama with the suite's tokenizer (fp32 safetensors): LoRA and GRPO checks start from it."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    out = ctx.work / "setup" / "base"
    if out.is_dir():
        return out
    tok = AutoTokenizer.from_pretrained(ctx.tok)
    d = 64 if ctx.cpu else 896  # the GPU's: Qwen2.5-0.5B's width and depth
    cfg = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=d,
        intermediate_size=4 * d if ctx.cpu else 4864,
        num_hidden_layers=2 if ctx.cpu else 24,
        num_attention_heads=4 if ctx.cpu else 14,
        num_key_value_heads=2,
        max_position_embeddings=1024,
        tie_word_embeddings=True,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    torch.manual_seed(0)
    with torch.device(ctx.device):
        model = LlamaForCausalLM(cfg)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


def _paragraphs(*, longer_than: int) -> list[str]:
    """The embedded corpus's paragraphs longer than ``longer_than`` characters, in file order."""
    return [
        p.strip()
        for f in sorted(CORPUS.glob("*.txt"))
        for p in f.read_text(encoding="utf-8").split("\n\n")
        if len(p.strip()) > longer_than
    ]


def _setup_jsonl(ctx: Context, name: str, rows) -> Path:
    """``setup/NAME``, written once from ``rows`` (an iterable of dicts, consumed only when the file is made)."""
    out = ctx.work / "setup" / name
    if not out.is_file():
        with open(out, "w", encoding="utf-8") as f:
            f.writelines(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
    return out


def sft_data(ctx: Context) -> Path:
    """Instruction rows (messages) made from the corpus's paragraphs: a question and the paragraph."""
    return _setup_jsonl(
        ctx,
        "sft.jsonl",
        (
            {
                "messages": [
                    {"role": "user", "content": f"Resume el texto {i}: {p[:60]}"},
                    {"role": "assistant", "content": p[:300]},
                ]
            }
            for i, p in enumerate(_paragraphs(longer_than=80)[:400])
        ),
    )


def _qwen2_lora(ctx: Context, *, dtype):
    """A random Qwen2 of Qwen2.5-1.5B's shape (CPU: tiny) with LoRA r 16 on every projection, as
    ``aura finetune --method lora`` builds it (frozen base in the compute dtype on the GPU)."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from aura.train import adapters

    cfg = (
        Qwen2Config(
            vocab_size=151936,
            hidden_size=1536,
            intermediate_size=8960,
            num_hidden_layers=28,
            num_attention_heads=12,
            num_key_value_heads=2,
            max_position_embeddings=4096,
            tie_word_embeddings=True,
        )
        if not ctx.cpu
        else Qwen2Config(
            vocab_size=512,
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=512,
            tie_word_embeddings=True,
        )
    )
    torch.manual_seed(0)
    with torch.device(ctx.device):
        model = Qwen2ForCausalLM(cfg).to(dtype)
    model.config.use_cache = False
    model = adapters.setup_model(model, method="lora", lora_r=16, lora_alpha=32, lora_dropout=0.05)
    return model.train(), cfg


def _hf_trainer_steps(ctx: Context, model, *, batch: int, seq: int, vocab: int, warmup: int, steps: int) -> dict:
    """HF ``Trainer`` + peft on the same random tokens: seconds per step after ``warmup`` steps (timed
    between two step ends, the device synchronised there only), and its peak memory."""
    import torch
    from transformers import Trainer, TrainerCallback, TrainingArguments

    gen = torch.Generator().manual_seed(0)
    rows = [
        {"input_ids": ids, "labels": ids.clone()}
        for ids in torch.randint(vocab, ((warmup + steps) * batch, seq), generator=gen)
    ]
    marks: dict[int, float] = {}

    class Clock(TrainerCallback):
        def on_step_end(self, args, state, control, **kw):
            if state.global_step in (warmup, warmup + steps):
                if ctx.device.type == "cuda":
                    torch.cuda.synchronize()
                    if state.global_step == warmup:
                        torch.cuda.reset_peak_memory_stats()
                marks[state.global_step] = time.perf_counter()

    args = TrainingArguments(
        output_dir=str(ctx.dir("hf_trainer")),
        per_device_train_batch_size=batch,
        max_steps=warmup + steps,
        learning_rate=1e-4,
        bf16=not ctx.cpu,
        logging_strategy="no",
        save_strategy="no",
        report_to=[],
        dataloader_num_workers=0,
        use_cpu=ctx.cpu,
        optim="adamw_torch_fused" if not ctx.cpu else "adamw_torch",
        seed=0,
    )
    Trainer(model=model, args=args, train_dataset=rows, callbacks=[Clock()]).train()
    seconds = (marks[warmup + steps] - marks[warmup]) / steps
    peak = float(torch.cuda.max_memory_allocated()) if ctx.device.type == "cuda" else None
    return {"seconds_per_step": seconds, "tokens_per_s": batch * seq / seconds, "peak": peak}


@check(
    "lora_sft_peer",
    "LoRA SFT step, Qwen2.5-1.5B shape x 2048 tokens bf16: Aura vs HF Trainer + peft "
    "(tokens/s, MFU, memory), Aura without its autocast-input fix, and compiled per block",
    expect=210,
    timeout=420,
)
def lora_sft_peer(ctx: Context) -> Result:
    """Issue 46's goal for LoRA SFT on a GPU: >= 1.5x HF Trainer + peft on the same GPU and MFU >= 30 %. Aura's
    step (``optimizer_step`` with the ``TorchEngine``, as ``aura finetune`` runs it) against ``Trainer``'s on the
    same model and random tokens; a third run is Aura's step with peft's own input casts
    (``aura.train.adapters.keep_autocast_inputs`` not applied), which measures that change alone; a fourth is
    Aura's step with every decoder block compiled, as ``--compile`` does: its ratio to the eager step is what
    would make ``--compile`` the default for fine-tuning on CUDA (today off: never measured on a GPU)."""
    import torch

    from aura.distributed.parallel import find_blocks
    from aura.models.presets import flops_per_token
    from aura.train import adapters

    batch, seq = (2, 64) if ctx.cpu else (4, 2048)
    dtype = torch.float32 if ctx.cpu else torch.bfloat16
    warmup, steps = (1, 2) if ctx.cpu else (3, 8)
    figures: dict = {}

    def aura_row(name: str) -> dict:
        model, cfg = _qwen2_lora(ctx, dtype=dtype)
        if name != "aura_peft_casts" and ctx.precision != "fp32":
            adapters.keep_autocast_inputs(model)
        if name == "aura_compiled":  # as --compile does (aura.distributed.parallelize); the CPU only traces it
            for block in find_blocks(model):
                block.compile(**({"backend": "aot_eager"} if ctx.cpu else {}))
        trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
        fpt = flops_per_token(cfg, seq, trainable_parameters=trainable)
        try:
            fig = time_steps(
                ctx,
                model,
                engine_for(ctx, model),
                fpt=fpt,
                batch=batch,
                seq=seq,
                vocab=cfg.vocab_size,
                warmup=warmup,
                steps=steps,
                profile=name == "aura" and not ctx.cpu,
            )
        finally:
            del model
            release()
        return {
            "tokens_per_s": fig.tokens_per_s,
            "mfu": fig.mfu,
            "peak": fig.peak_allocated,
            "gpu_idle_share": (fig.profile or {}).get("gpu_idle_share"),
        }

    for name in ("aura_peft_casts", "aura"):
        figures[name] = aura_row(name)
    model, cfg = _qwen2_lora(ctx, dtype=dtype)
    figures["hf_trainer"] = _hf_trainer_steps(
        ctx, model, batch=batch, seq=seq, vocab=cfg.vocab_size, warmup=warmup, steps=steps
    )
    del model
    release()
    try:  # last: a compile that fails here must not cost the figures above
        figures["aura_compiled"] = aura_row("aura_compiled")
    except Exception as e:  # noqa: BLE001 - reported in the row's text and figures
        figures["aura_compiled"] = {"error": f"{type(e).__name__}: {e}"[:300]}
        release()
    aura, hf = figures["aura"], figures["hf_trainer"]
    speed = aura["tokens_per_s"] / hf["tokens_per_s"]
    fix = aura["tokens_per_s"] / figures["aura_peft_casts"]["tokens_per_s"]
    compiled_tps = figures["aura_compiled"].get("tokens_per_s")
    compiled = compiled_tps / aura["tokens_per_s"] if compiled_tps else None  # decides --compile's default
    figures["compiled_vs_eager"] = compiled
    mem = aura["peak"] / hf["peak"] if aura["peak"] and hf["peak"] else None
    mfu = aura["mfu"]
    text = (
        f"Aura {aura['tokens_per_s']:,.0f} tok/s vs HF Trainer + peft {hf['tokens_per_s']:,.0f} ({speed:.2f}x), "
        f"MFU {'-' if mfu is None else f'{100 * mfu:.1f} %'}, memory x{'-' if mem is None else f'{mem:.2f}'}; "
        f"without the autocast-input fix x{1 / fix:.2f} of that; compiled per block "
        + (f"x{compiled:.2f}" if compiled else f"failed ({figures['aura_compiled'].get('error')})")
    )
    ok = True if ctx.cpu else (speed >= 1.5 and (mfu or 0) >= 0.30)
    return Result(text, ok, ">= 1.5x HF Trainer + peft, MFU >= 30 %", figures)


@check(
    "pairs_one_row",
    "Preference pairs in one row (4D mask) vs two rows: log-probs, step time, memory; aura finetune --objective dpo",
    expect=90,
    timeout=180,
)
def pairs_one_row(ctx: Context) -> Result:
    """The shared-prompt rows of DPO/ORPO/SimPO/CPO/KTO (``collate_pairs(shared=True)``, a boolean 4D mask: on
    an H200 sdpa ran cuDNN's attention with it, as with the two rows' padding) against the two rows per pair,
    on the 0.5B shape with prompts longer than their answers: the per-answer log-probs must agree (in bf16, no further
    apart than
    bf16's own distance from fp32 on the two rows), and a forward + backward is timed both ways. Then
    ``aura finetune --objective dpo`` (LoRA, bf16) must say that it uses one row and train."""
    import torch
    from transformers import AutoModelForCausalLM

    from aura.data.preference import EncodedPair, collate_pairs
    from aura.data.sft_batches import Encoded
    from aura.train.objectives.preference import sequence_logps, shares_prompt

    base = small_base(ctx)
    model = AutoModelForCausalLM.from_pretrained(base, attn_implementation="sdpa", dtype=torch.float32).to(ctx.device)
    vocab = model.get_input_embeddings().weight.shape[0]
    g = torch.Generator().manual_seed(0)
    n, prompt_len, answer_len = (4, 24, 12) if ctx.cpu else (8, 384, 160)

    def part(k: int) -> list[int]:
        return torch.randint(0, vocab, (k,), generator=g).tolist()

    pairs = []
    for i in range(n):  # lengths differ from pair to pair: padding inside and at the end of the rows
        prompt, a, b = part(prompt_len - 2 * i), part(answer_len - i), part(answer_len // 2 + 3 * i)
        pairs.append(
            EncodedPair(Encoded(prompt + a, [-100] * len(prompt) + a), Encoded(prompt + b, [-100] * len(prompt) + b))
        )
    batch = {
        s: {k: v.to(ctx.device) for k, v in collate_pairs(pairs, pad_id=0, shared=s).items()} for s in (False, True)
    }
    amp = torch.autocast(ctx.device.type, dtype=torch.bfloat16, enabled=not ctx.cpu)
    model.eval()
    tf32 = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False  # the fp32 reference is fp32
    with torch.no_grad():
        ref = sequence_logps(model, batch[False])[0].float()  # fp32, two rows
        one32 = sequence_logps(model, batch[True])[0].float()
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = tf32
        with amp:
            two16 = sequence_logps(model, batch[False])[0].float()
            one16 = sequence_logps(model, batch[True])[0].float()
    scale = ref.abs().max().item()
    err32 = (one32 - ref).abs().max().item() / scale
    err16 = (one16 - two16).abs().max().item() / scale
    floor16 = (two16 - ref).abs().max().item() / scale  # bf16's own distance on the two rows
    model.train()
    timing, profiles = {}, {}
    import aura.train.objectives.preference as preference

    bool_mask = preference.pair_attention_mask

    def additive_mask(segments, pair, *, implementation, dtype):  # the variant: sdpa given an additive bf16 mask
        return bool_mask(segments, pair, implementation="eager", dtype=torch.bfloat16 if not ctx.cpu else dtype)

    for name, shared, mask_fn in (
        ("two rows", False, bool_mask),
        ("one row", True, bool_mask),
        ("one row, additive mask", True, additive_mask),
    ):

        def step():
            with amp:
                logps = sequence_logps(model, batch[shared])[0]
            logps.sum().backward()
            model.zero_grad(set_to_none=True)

        preference.pair_attention_mask = mask_fn
        try:
            step()
            release()
            if not ctx.cpu:
                torch.cuda.reset_peak_memory_stats()
            with _Timer(ctx.device) as t:
                for _ in range(2 if ctx.cpu else 5):
                    step()
            timing[name] = (
                t.seconds / (2 if ctx.cpu else 5),
                torch.cuda.max_memory_allocated() if not ctx.cpu else None,
            )
            profiles[name] = _profile(ctx, step)
        finally:
            preference.pair_attention_mask = bool_mask
    timing[False], timing[True] = timing["two rows"], timing["one row"]
    packing = _packing(ctx, model, amp)
    model = None  # its memory back before the CLI runs
    release()
    speed = timing[False][0] / timing[True][0]
    speed_additive = timing[False][0] / timing["one row, additive mask"][0]
    memory = (timing[True][1] / timing[False][1]) if not ctx.cpu else None

    # the CLI, LoRA in bf16, pairs with long prompts: one row (said in the log), then two rows (the check
    # patched off) on the same data; seconds per step from the second step's end to the last's
    data = pref_data(ctx)
    steps = 3 if ctx.cpu else 16
    flags = [
        "finetune",
        "--objective",
        "dpo",
        "--base-model",
        base,
        "--data",
        data,
        "--method",
        "lora",
        "--precision",
        ctx.precision,
        "--batch-size",
        4 if ctx.cpu else 8,
        "--max-length",
        1024,
        "--max-steps",
        steps,
        "--log-interval",
        1,
        "--save-steps",
        0,
    ]
    out, printed = ctx.dir("dpo"), io.StringIO()
    with contextlib.redirect_stdout(printed):  # the console writes to sys.stdout when it is not a terminal
        rc = ctx.aura(*flags, "--output-dir", out)
    said = "Each pair goes through the model as one row" in printed.getvalue()
    rows = log_rows(out) if rc == 0 else []
    losses = [float(r["train_loss"]) for r in rows]
    trained = len(losses) == steps and all(math.isfinite(x) for x in losses)
    two_out = ctx.dir("dpo_two_rows")
    preference.shares_prompt = lambda model, kto=False: False
    try:
        two_rc = ctx.aura(*flags, "--output-dir", two_out)
    finally:
        preference.shares_prompt = shares_prompt
    two_rows = log_rows(two_out) if two_rc == 0 else []

    def per_step(rs: list[dict]) -> float:
        return (float(rs[-1]["seconds"]) - float(rs[1]["seconds"])) / (len(rs) - 2) if len(rs) > 2 else math.nan

    cli_speed = per_step(two_rows) / per_step(rows)
    # issue 46's goal for LoRA DPO: MFU >= 15 % (the log's column, steps 2 on: the first compiles and warms up)
    mfus = [float(r["mfu"]) for r in rows[1:] if r.get("mfu") not in (None, "", "nan")]
    mfu = statistics.median(mfus) if mfus else None
    cli_worst = max(
        (abs(float(a["train_loss"]) - float(b["train_loss"])) for a, b in zip(rows, two_rows)), default=math.nan
    )
    ok = err32 <= 1e-4 and err16 <= max(2 * floor16, 1e-3) and said and trained and two_rc == 0
    ok = ok and packing["err32"] <= 1e-4
    mem = f", memory x {memory:.2f}" if memory else ""
    if not ctx.cpu:  # the profiler's kernel time: what one row saves the GPU, whatever bounds the step
        mem += f", GPU time x {profiles['one row']['gpu_busy_ms'] / profiles['two rows']['gpu_busy_ms']:.2f}"
    return Result(
        f"{n} pairs, prompt {prompt_len} + answers <= {answer_len}: one row {speed:.2f}x "
        f"({speed_additive:.2f}x with an additive mask) the two rows' forward+backward speed{mem}; "
        f"log-probs apart by {err32:.1e} (fp32) and {err16:.1e} (bf16; bf16 vs fp32 on two rows "
        f"{floor16:.1e}); aura finetune --objective dpo: {'one row' if said else 'NOT one row'}, exit "
        f"{rc}, {cli_speed:.2f}x the steps/s of two rows (LoRA, long prompts), losses apart "
        f"by at most {cli_worst:.1e}; MFU {'-' if mfu is None else f'{100 * mfu:.1f} %'} (goal >= 15 %); "
        f"{packing['pairs']} pairs of varied lengths packed in {packing['rows']} rows: {packing['tokens']:.2f}x the "
        f"tokens, {packing['speed']:.2f}x the forward+backward speed of one pair per row, log-probs apart by "
        f"{packing['err32']:.1e} (fp32)",
        ok,
        "same log-probs; the CLI uses one row",
        {
            "speed": speed,
            "memory": memory,
            "err32": err32,
            "err16": err16,
            "floor16": floor16,
            "seconds": {str(k): v[0] for k, v in timing.items()},
            "profiles": profiles,
            "losses": losses,
            "cli_seconds_per_step": {"one": per_step(rows), "two": per_step(two_rows)},
            "cli_speed": cli_speed,
            "cli_mfu": mfu,
            "packing": packing,
            "tail": printed.getvalue()[-1500:] if not (said and trained) else "",
        },
    )


def _packing(ctx: Context, model, amp) -> dict:
    """Pairs of varied lengths (``bench_batch_packing.pairs``) several to a row against one pair per row, on
    ``model``: the log-probs must agree (fp32), and a forward + backward is timed both ways (under ``amp``)."""
    from unittest import mock

    import torch
    from bench_batch_packing import pairs as ragged

    from aura.data.preference import collate_pairs
    from aura.train.objectives.preference import sequence_logps

    n = 4 if ctx.cpu else 16
    chosen = ragged(n, seed=0, vocab=model.get_input_embeddings().weight.shape[0])
    with mock.patch("aura.data.preference.batch_grouping", lambda lengths, **shapes: [[i] for i in range(n)]):
        apart = collate_pairs(chosen, pad_id=0, shared=True)
    packed = collate_pairs(chosen, pad_id=0, shared=True)
    batches = {k: {key: v.to(ctx.device) for key, v in b.items()} for k, b in (("apart", apart), ("packed", packed))}
    model.eval()
    tf32 = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False  # the comparison in fp32
    try:
        with torch.no_grad():
            want, got = (sequence_logps(model, batches[k])[0].float() for k in ("apart", "packed"))
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = tf32
    model.train()
    seconds = {}
    for name, batch in batches.items():

        def step(batch=batch):
            with amp:
                logps = sequence_logps(model, batch)[0]
            logps.sum().backward()
            model.zero_grad(set_to_none=True)

        step()
        release()
        with _Timer(ctx.device) as t:
            for _ in range(2 if ctx.cpu else 5):
                step()
        seconds[name] = t.seconds
    return {
        "pairs": n,
        "rows": int(packed["input_ids"].shape[0]),
        "tokens": packed["input_ids"].numel() / apart["input_ids"].numel(),
        "speed": seconds["apart"] / seconds["packed"],
        "err32": ((got - want).abs().max() / want.abs().max()).item(),
    }


def pref_data(ctx: Context) -> Path:
    """Preference pairs with long prompts (a corpus paragraph to summarise) and shorter answers (other
    paragraphs' openings): where one row per pair saves the most."""
    paragraphs = _paragraphs(longer_than=300)
    return _setup_jsonl(
        ctx,
        "pref_long.jsonl",
        (
            {
                "prompt": f"Resume este texto: {p[:1500]}",
                "chosen": paragraphs[i - 1][:400],
                "rejected": paragraphs[i - 2][:250],
            }
            for i, p in enumerate(paragraphs[:200])
        ),
    )


def _profile(ctx: Context, step) -> dict:
    """One ``step()`` under torch.profiler: the SDPA operators that ran and the top kernels by device time."""
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if not ctx.cpu else [])
    t0 = time.perf_counter()
    with profile(activities=acts) as prof:
        step()
        release() if ctx.cpu else __import__("torch").cuda.synchronize()
    wall = time.perf_counter() - t0
    events = prof.key_averages()
    out = {
        "sdpa_ops": sorted({e.key for e in events if "attention" in e.key and e.key.startswith("aten::")}),
        "wall_ms": round(wall * 1e3, 1),
    }
    if not ctx.cpu:
        kernels = [e for e in events if e.device_type.name == "CUDA" and e.self_device_time_total > 0]
        busy = sum(e.self_device_time_total for e in kernels)
        out["gpu_busy_ms"] = round(busy / 1e3, 1)
        out["top_kernels"] = [
            (e.key[:60], round(e.self_device_time_total / max(busy, 1), 3))
            for e in sorted(kernels, key=lambda e: e.self_device_time_total, reverse=True)[:8]
        ]
    return out


@check(
    "muon_vs_adamw",
    "Muon vs AdamW: optimizer step time at the preset's accumulation (qwen3-72h)",
    expect=25,
    timeout=120,
)
def muon_vs_adamw(ctx: Context) -> Result:
    from aura.models.hardware import TARGET_TOKENS_PER_STEP
    from aura.models.presets import preset_training

    spec = spec_of(ctx, "qwen3-72h")
    batch = 2 if ctx.cpu else preset_training("qwen3-72h").batch_size
    accum = 2 if ctx.cpu else max(1, TARGET_TOKENS_PER_STEP // (batch * spec.seq_len))
    vocab = 2000 if ctx.cpu else 32000
    model, fpt = build_for_steps(ctx, spec, vocab=vocab)
    figures = {}
    for name in ("adamw", "muon"):
        engine = engine_for(ctx, model, optimizer=name)
        figures[name] = time_steps(
            ctx,
            model,
            engine,
            fpt=fpt,
            batch=batch,
            seq=spec.seq_len,
            vocab=vocab,
            accum=accum,
            warmup=1,
            steps=2 if ctx.cpu else 3,
        )
        figures[name + "_opt_s"] = _optimizer_only(ctx, model, engine.optimizer)
        engine = None  # the next optimizer's state replaces this one's
    ratio = figures["muon"].seconds_per_step / figures["adamw"].seconds_per_step
    return Result(
        f"batch {batch} x accumulation {accum}: {ratio:.2f}x AdamW's step time "
        f"({figures['muon'].seconds_per_step:.2f} s vs {figures['adamw'].seconds_per_step:.2f} s; optimizer "
        f"alone {figures['muon_opt_s'] * 1e3:.0f} ms vs {figures['adamw_opt_s'] * 1e3:.0f} ms); Muon "
        f"{figures['muon'].tokens_per_s:,.0f} tok/s",
        True if ctx.cpu else ratio <= 1.15,
        "Muon <= 1.15x AdamW's step time",
        {
            "ratio": ratio,
            "accum": accum,
            "batch": batch,
            **{k: (v if isinstance(v, float) else v.seconds_per_step) for k, v in figures.items()},
        },
    )


def _optimizer_only(ctx: Context, model, opt, reps: int = 3) -> float:
    """Seconds of one ``optimizer.step()`` with the gradients of the last step in place."""
    import torch

    for p in model.parameters():
        if p.requires_grad and p.grad is None:
            p.grad = torch.zeros_like(p)
    opt.step()
    with _Timer(ctx.device) as t:
        for _ in range(reps):
            opt.step()
    opt.zero_grad(set_to_none=True)
    return t.seconds / reps


@check("chunked_loss", "Chunked / fused cross entropy vs plain, vocab 128k", expect=12, timeout=60)
def chunked_loss(ctx: Context) -> Result:
    shape = (
        ["--vocab", "32000", "--d-model", "128", "--tokens", "2048", "--steps", "1"]
        if ctx.cpu
        else [
            "--vocab",
            "128256",
            "--d-model",
            "2048",
            "--tokens",
            "8192",
            "--steps",
            "5",
            "--device",
            "cuda",
            "--dtype",
            "bf16",
        ]
    )
    proc = ctx.aura_child(*shape, "--json", python=[sys.executable, str(ROOT / "bench" / "bench_loss.py")], timeout=55)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-600:]
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    return Result(
        f"peak memory x{r['memory']:.2f}, tokens/s x{r['speed']:.2f} (chunked / plain), loss difference "
        f"{r['loss_rel_diff']:.1e}",
        r["memory"] < 0.5 and r["loss_rel_diff"] < 1e-3,
        "less than half the memory, same loss",
        r,
    )


@check("doctor", "aura doctor / aura monitor --once (NVML)", expect=8, timeout=60, cpu_timeout=120)
def doctor(ctx: Context) -> Result:
    d = ctx.aura_child("doctor", "--json", "--output-dir", ctx.work, timeout=55)
    m = ctx.aura_child("monitor", "--once", "--json", timeout=55)
    doc = json.loads(d.stdout)
    mon = json.loads(m.stdout.strip().splitlines()[-1])
    gpus = len(mon.get("gpus") or [])
    cuda = doc["auto"]["hardware"]["device_type"] == "cuda"
    return Result(
        f"auto: {doc['auto']['preset']} (batch {doc['auto']['batch_size']}); GPUs read through NVML: {gpus}",
        ctx.cpu or (cuda and gpus > 0),
        "CUDA device seen, NVML reads it",
    )


@check("check_dist", "aura launch check-dist (NCCL on a GPU, gloo on the CPU)", expect=13, timeout=60, cpu_timeout=120)
def check_dist(ctx: Context) -> Result:
    import torch

    n = max(torch.cuda.device_count(), 1) if not ctx.cpu else 2
    backend = "gloo" if ctx.cpu else "nccl"
    proc = ctx.aura_child("launch", "--gpus-per-node", n, "check-dist", "--backend", backend, timeout=55)
    ok = "Sync=OK" in proc.stdout
    return Result(f"{n} x {backend}: " + ("Sync=OK" if ok else (proc.stdout + proc.stderr)[-200:]), ok, "Sync=OK")


def _losses(run: Path) -> dict[int, float]:
    return {int(r["step"]): float(r["train_loss"]) for r in log_rows(run)}


@check(
    "two_ranks_one_gpu",
    "Two ranks on one GPU over gloo (aura launch --share-gpu): refused without the switch, "
    "check-dist, DDP / FSDP2 bf16 / FSDP2 fp16 / Muon losses vs one rank, FSDP2 exact resume",
    expect=150,
    timeout=360,
    cpu_timeout=240,
)
def two_ranks_one_gpu(ctx: Context) -> Result:
    """NCCL refuses two ranks on one GPU; ``--share-gpu`` runs them over gloo so multi-rank code (DDP, FSDP2, DCP
    save and resume) runs on the one GPU a lease gives. Constant LR so runs of different lengths compare step by
    step; one rank at batch 8 is the reference of two ranks at batch 4. The CPU form (CI) runs check-dist and
    the DDP pair over gloo on CPU ranks (the switch changes nothing there; tests/test_dist_train.py covers the
    rest on the CPU)."""
    import shutil
    import socket

    import torch

    def port() -> int:  # a free one per launch: the default 29500 may be another job's
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            return sock.getsockname()[1]

    figures: dict = {}
    child = dict(timeout=240)
    if not ctx.cpu:  # more ranks than GPUs without the switch: refused before any process group starts
        n = torch.cuda.device_count()
        refused = ctx.aura_child("launch", "--gpus-per-node", n + 1, "--master-port", port(), "check-dist", **child)
        figures["refused_without_switch"] = refused.returncode != 0 and "--share-gpu" in refused.stdout + refused.stderr
    proc = ctx.aura_child("launch", "--share-gpu", "--gpus-per-node", 2, "--master-port", port(), "check-dist", **child)
    figures["check_dist"] = "Sync=OK" in proc.stdout
    steps, save = (4, 2) if ctx.cpu else (8, 4)
    common = [
        "pretrain",
        "--data",
        ctx.data,
        "--tokenizer",
        ctx.tok,
        "--model-preset",
        "tiny",
        "--sample-tokens",
        0,
        "--log-interval",
        1,
        "--save-steps",
        save,
        "--keep-last",
        0,
        "--warmup-steps",
        0,
        "--learning-rate",
        "1e-3",
        "--min-lr",
        "1e-3",
        "--max-steps",
        steps,
    ]
    # (name, strategy, extra flags, tolerance against one rank): bf16/fp16 sum in another order on two ranks
    variants = [("ddp", "ddp", ["--precision", ctx.precision], 2e-5 if ctx.cpu else 2e-2)]
    if not ctx.cpu:  # the CPU form keeps CI short: tests/test_dist_train.py covers gloo DDP/FSDP2/resume there
        variants += [
            ("fsdp_bf16", "fsdp", ["--precision", "bf16"], 2e-2),
            ("fsdp_fp16", "fsdp", ["--precision", "fp16"], 2e-2),  # the scaler's skip agreed by ranks
            ("ddp_muon", "ddp", ["--precision", "bf16", "--optimizer", "muon"], 2e-2),
        ]
    gaps = {}
    for name, strategy, extra, tol in variants:
        one, two = ctx.dir(f"one_{name}"), ctx.dir(f"two_{name}")
        assert ctx.aura(*common, *extra, "--batch-size", 8, "--output-dir", one, "--overwrite") == 0, (
            f"one rank, {name}: failed"
        )
        p = ctx.aura_child(
            "launch",
            "--share-gpu",
            "--gpus-per-node",
            2,
            "--master-port",
            port(),
            *common,
            *extra,
            "--batch-size",
            4,
            "--strategy",
            strategy,
            "--output-dir",
            two,
            "--overwrite",
            **child,
        )
        assert p.returncode == 0, f"two ranks, {name}: {(p.stdout + p.stderr)[-600:]}"
        reference, losses = _losses(one), _losses(two)
        gaps[name] = (max(abs(losses[k] - reference[k]) for k in reference), tol)
        if name == "fsdp_bf16":  # the DCP checkpoint of step `save`, resumed on two ranks: the same later losses
            resumed = ctx.dir("two_fsdp_resumed")
            shutil.rmtree(resumed)
            shutil.copytree(two / f"checkpoint-step-{save}", resumed / f"checkpoint-step-{save}")
            p = ctx.aura_child(
                "launch",
                "--share-gpu",
                "--gpus-per-node",
                2,
                "--master-port",
                port(),
                *common,
                *extra,
                "--batch-size",
                4,
                "--strategy",
                "fsdp",
                "--output-dir",
                resumed,
                "--resume-from",
                "latest",
                **child,
            )
            assert p.returncode == 0, f"FSDP2 resume: {(p.stdout + p.stderr)[-600:]}"
            after = _losses(resumed)
            figures["fsdp_resume_gap"] = max(abs(after[k] - losses[k]) for k in range(save + 1, steps + 1))
    figures["loss_gap"] = {k: g for k, (g, _) in gaps.items()}
    ok = (
        figures["check_dist"]
        and figures.get("refused_without_switch", True)
        and all(g < tol for g, tol in gaps.values())
        and figures.get("fsdp_resume_gap", 0.0) < 1e-6
    )
    text = ", ".join(f"{k} {g:.1e}" for k, (g, _) in gaps.items())
    if "fsdp_resume_gap" in figures:
        text += f"; FSDP2 resume {figures['fsdp_resume_gap']:.1e}"
    if not ctx.cpu:
        text += f"; refused without --share-gpu: {figures['refused_without_switch']}"
    return Result(
        f"check-dist {'Sync=OK' if figures['check_dist'] else 'FAILED'}; losses vs one rank: {text}",
        ok,
        "Sync=OK, losses within tolerance of one rank (2e-5 fp32, 2e-2 bf16/fp16), resume exact",
        figures,
    )


@check("grpo_torch", "GRPO, PyTorch engine: 0.5B shape (CPU: tiny), LoRA, G 8, 128 tokens", expect=115, timeout=180)
def grpo_torch(ctx: Context) -> Result:
    base = small_base(ctx)
    out = ctx.dir("grpo")
    g, tokens = (4, 16) if ctx.cpu else (8, 128)
    assert (
        ctx.aura(
            "finetune",
            "--objective",
            "grpo",
            "--base-model",
            base,
            "--rollout-engine",
            "torch",
            "--num-generations",
            g,
            "--batch-size",
            g,
            "--gradient-accumulation-steps",
            1,
            "--max-completion-length",
            tokens,
            "--max-steps",
            2 if ctx.cpu else 4,
            "--log-interval",
            1,
            "--precision",
            ctx.precision,
            "--save-steps",
            0,
            "--output-dir",
            out,
            "--overwrite",
        )
        == 0
    ), "aura finetune --objective grpo failed"
    rows = log_rows(out)[1:] or log_rows(out)  # the first step includes the warm-up
    gen = sum(float(r["completion_length"]) * g for r in rows)
    seconds = sum(float(r["time/rollout_s"]) for r in rows)
    return Result(
        f"{gen / seconds:,.0f} completion tokens/s in rollouts ({len(rows)} steps)",
        seconds > 0,
        "rollouts run",
        {"rollout_tokens_per_s": gen / seconds},
    )


@check(
    "rollout_engine",
    "Rollout engines: 0.5B shape (CPU: tiny), LoRA, G 8 x 128 tokens, previous vs new",
    expect=90,
    timeout=240,
)
def rollout_engine(ctx: Context) -> Result:
    """Completion tokens/s of one GRPO window's sampling (8 rows of one prompt, 128 new tokens, keyed draws, no
    stop) on the LoRA policy: the previous engine (``sample_batch_reference``: peft's wrappers under autocast, a
    growing cache, a host sync per token) against the new one as ``RolloutSource._sample`` runs it off fp32/CPU
    (``compute_view``: a merged copy in the compute dtype, no autocast; ``decode_batch``: its lean step for the
    Llama family compiled as a CUDA graph); and, to tell the parts apart, the new engine eager with its lean step
    and eager with transformers' forward; and a fully fine-tuned policy (fp32 weights, autocast) as GRPO samples it
    (``sample_completions``: a copy in the compute dtype, ``cast_view``). Goal on an H200: >= 3,000 tokens/s (the
    previous engine: 139 in GRPO's rollouts)."""
    import contextlib
    from unittest import mock

    import torch

    from aura.inference import decode
    from aura.inference.decode import decode_batch
    from aura.inference.sampling import SamplingParams, sample_batch_reference
    from aura.train import adapters
    from aura.train.lora_views import compute_view
    from aura.train.objectives.rollout import sample_completions
    from aura.train.optim.step_engine import autocast_context

    class _Pad:
        pad_token_id = 0

    g, tokens = (8, 16) if ctx.cpu else (8, 128)
    model = adapters.setup_model(
        adapters.load_base_model(str(small_base(ctx)), device=ctx.device),
        method="lora",
        lora_r=16,
        lora_alpha=32,
        lora_dropout=0.0,
    ).eval()
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(ctx.precision, torch.float32)
    prompt = list(range(10, 60))
    params = SamplingParams(max_new_tokens=tokens, temperature=1.0)
    common = dict(pad_id=0, device=ctx.device, keys=list(range(g)))

    def old():
        with autocast_context(ctx.precision, ctx.device):
            return sample_batch_reference(model, [prompt] * g, params, **common)

    def new(graphs: bool = True, lean: bool = True):
        def run():
            with contextlib.ExitStack() as stack:
                stack.enter_context(compute_view(model, dtype=dtype))
                stack.enter_context(torch.autocast(ctx.device.type, enabled=False))
                if not lean:
                    stack.enter_context(mock.patch("aura.inference.lean.lean_step", return_value=None))
                logps = dtype != torch.float32
                return decode_batch(model, [prompt] * g, params, logps=logps, graphs=graphs, **common)

        return run

    full = adapters.load_base_model(str(small_base(ctx)), method="full", device=ctx.device).eval()

    def full_fine_tuning():  # fp32 weights under autocast, as GRPO's full fine-tuning samples (cast_view)
        with autocast_context(ctx.precision, ctx.device):
            return sample_completions(
                full,
                [prompt] * g,
                list(range(g)),
                sampling=params,
                tokenizer=_Pad(),
                precision=ctx.precision,
                device=ctx.device,
            )

    figures = {}
    runs = {
        "previous": old,
        "new": new(),
        "new, lean step, eager": new(graphs=False),
        "new, transformers' forward, eager": new(graphs=False, lean=False),
        "full fine-tuning, new": full_fine_tuning,
    }
    for name, fn in runs.items():
        fn()  # warm-up: kernels, the CUDA graph's capture
        reps = 1 if ctx.cpu else 3
        with _Timer(ctx.device) as t:
            for _ in range(reps):
                fn()
        figures[name] = g * tokens * reps / t.seconds
    gap = figures["new"] / figures["previous"]
    graphed = ctx.device.type == "cuda" and "eager" not in decode._SAID  # the fallback says "eager" once
    goal = 1.0 if ctx.cpu else 3000.0
    lean_eager, hf_eager = figures["new, lean step, eager"], figures["new, transformers' forward, eager"]
    return Result(
        f"{figures['new']:,.0f} completion tokens/s with the new engine ({'CUDA graphs' if graphed else 'eager'}), "
        f"{figures['previous']:,.0f} with the previous one (x{gap:.1f}; {g} rows x {tokens} tokens); eager: "
        f"lean step {lean_eager:,.0f}, transformers' forward {hf_eager:,.0f}; a full fine-tuning's policy "
        f"{figures['full fine-tuning, new']:,.0f}",
        figures["new"] >= goal,
        f">= {goal:,.0f} tokens/s",
        {"tokens_per_s": figures, "speed_up": gap, "cuda_graphs": graphed},
    )


@check(
    "pretrain_cli",
    "aura pretrain gpt2-small bf16 --compile (CLI): MFU and memory columns, final/",
    expect=20,
    timeout=150,
    keep=True,
)
def pretrain_cli(ctx: Context) -> Result:
    """The whole command on the GPU: TF32 flags and inductor (the first compiled forward), the fused GELU, the
    memory columns of training_log.csv, and a final/ model."""
    out = ctx.dir("pretrain")
    args = (
        ["--model-preset", "tiny", "--precision", "fp32", "--batch-size", 4, "--max-steps", 8, "--log-interval", 2]
        if ctx.cpu
        else [
            "--model-preset",
            "gpt2-small",
            "--precision",
            "bf16",
            "--batch-size",
            16,
            "--max-steps",
            40,
            "--log-interval",
            10,
            "--compile",
        ]
    )
    assert (
        ctx.aura(
            "pretrain",
            "--data",
            ctx.data,
            "--tokenizer",
            ctx.tok,
            "--sample-tokens",
            0,
            "--save-steps",
            0,
            *args,
            "--output-dir",
            out,
            "--overwrite",
        )
        == 0
    ), "aura pretrain failed"
    rows = log_rows(out)
    last = rows[-1]
    mfu = float(last["mfu"]) if last.get("mfu") else None
    reserved = float(last["mem_reserved_gb"]) if last.get("mem_reserved_gb") else None
    ok = (out / "final" / "config.json").is_file() and bool(last.get("mem_peak_gb"))
    if not ctx.cpu:
        ok = ok and reserved is not None and mfu is not None
    return Result(
        f"{float(last['tokens_per_s']):,.0f} tok/s, MFU {'-' if mfu is None else f'{100 * mfu:.1f} %'}, "
        f"peak {last.get('mem_peak_gb') or '-'} GB allocated / {reserved or '-'} GB reserved, final/ saved",
        ok,
        "runs; memory columns logged",
        {"rows": rows[-2:]},
    )


@check("gguf", "GGUF export of the model trained above, verified in llama.cpp", expect=20, timeout=90)
def gguf(ctx: Context) -> Result:
    if importlib.util.find_spec("gguf") is None or importlib.util.find_spec("llama_cpp") is None:
        return Result("gguf / llama-cpp-python not installed here", None)
    src = ctx.work / "checks" / "pretrain" / "final"
    assert src.is_dir(), "pretrain_cli did not leave final/"
    assert ctx.aura("export", "gguf", "--model", src, "--outfile", ctx.dir("gguf") / "model.gguf") == 0, (
        "aura export gguf failed"
    )
    return Result("exported and verified in llama.cpp", True, "logits match")


def _needs(module: str) -> Result | None:
    if importlib.util.find_spec(module) is None:
        return Result(f"{module} not installed here", None)
    return None


@check("qlora", "QLoRA (bitsandbytes 4-bit), 4 steps", expect=10, timeout=90, gpu_only=True)
def qlora(ctx: Context) -> Result:
    if (skip := _needs("bitsandbytes")) is not None:
        return skip
    out = ctx.dir("qlora")
    assert (
        ctx.aura(
            "finetune",
            "--base-model",
            small_base(ctx),
            "--data",
            sft_data(ctx),
            "--method",
            "qlora",
            "--max-steps",
            4,
            "--log-interval",
            1,
            "--save-steps",
            0,
            "--output-dir",
            out,
        )
        == 0
    )
    return Result(f"loss {log_rows(out)[-1]['train_loss']}", True)


@check("deepspeed", "LoRA under DeepSpeed ZeRO-2, one GPU, 4 steps", expect=40, timeout=90, gpu_only=True)
def deepspeed(ctx: Context) -> Result:
    if (skip := _needs("deepspeed")) is not None:
        return skip
    out = ctx.dir("zero2")
    proc = ctx.aura_child(
        "finetune",
        "--base-model",
        small_base(ctx),
        "--data",
        sft_data(ctx),
        "--method",
        "lora",
        "--deepspeed",
        ROOT / "examples" / "ds_config_zero2.json",
        "--max-steps",
        4,
        "--log-interval",
        1,
        "--save-steps",
        0,
        "--output-dir",
        out,
        timeout=85,
    )
    return Result(f"exit {proc.returncode}", proc.returncode == 0)


@check("grpo_vllm", "GRPO rollouts with vLLM colocate", expect=60, timeout=120, gpu_only=True)
def grpo_vllm(ctx: Context) -> Result:
    if (skip := _needs("vllm")) is not None:
        return skip
    out = ctx.dir("grpo_vllm")
    # a child process: vLLM's engine (its process group, its share of the GPU) must not outlive the check
    p = ctx.aura_child(
        "finetune",
        "--objective",
        "grpo",
        "--base-model",
        small_base(ctx),
        "--rollout-engine",
        "vllm",
        "--num-generations",
        8,
        "--batch-size",
        8,
        "--max-completion-length",
        128,
        "--max-steps",
        3,
        "--log-interval",
        1,
        "--precision",
        "bf16",
        "--save-steps",
        0,
        "--output-dir",
        out,
        timeout=110,
    )
    assert p.returncode == 0, (p.stdout + p.stderr)[-800:]
    rows = log_rows(out)[1:]
    return Result(
        f"{sum(float(r['completion_length']) * 8 for r in rows) / sum(float(r['time/rollout_s']) for r in rows):,.0f}"
        " completion tokens/s in rollouts",
        True,
    )


@check(
    "liger",
    "Liger fused linear + cross entropy (picked when installed) vs Aura's chunks and the plain loss",
    expect=12,
    timeout=90,
    gpu_only=True,
)
def liger(ctx: Context) -> Result:
    """``linear_cross_entropy`` as training calls it (Liger's kernel when installed, on CUDA), against Aura's own
    chunks and the plain logits, at vocab 128k: the loss and the three gradients, time and peak memory."""
    if (skip := _needs("liger_kernel")) is not None:
        return skip
    import torch
    import torch.nn.functional as F

    from aura.train.objectives.chunked_loss import _liger_available, linear_cross_entropy

    n, d, vocab = 8192, 2048, 128256
    g = torch.Generator(device="cuda").manual_seed(0)
    h0 = torch.randn(n, d, device="cuda", dtype=torch.bfloat16, generator=g)
    w0 = torch.randn(vocab, d, device="cuda", generator=g) * d**-0.5
    t = torch.randint(0, vocab, (n,), device="cuda", generator=g)
    t[::7] = -100
    ways = {
        "liger": lambda h, w: linear_cross_entropy(h, w, None, t),
        "chunks": lambda h, w: linear_cross_entropy(h, w, None, t, chunk=2048),
        "plain": lambda h, w: F.cross_entropy(F.linear(h, w.to(h.dtype)).float(), t, reduction="sum"),
    }
    figures = {}
    for name, fn in ways.items():
        for rep in range(3):  # the first is the warm-up
            h, w = h0.clone().requires_grad_(), w0.clone().requires_grad_()
            release()
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
            with _Timer(ctx.device) as timer:
                loss = fn(h, w)
                loss.backward()
            figures[name] = dict(
                seconds=timer.seconds,
                peak=torch.cuda.max_memory_allocated() - base,
                loss=loss.item(),
                gh=h.grad.float(),
                gw=w.grad.float(),
            )
    ref = figures["plain"]

    def apart(a: dict) -> float:
        return max(
            abs(a["loss"] - ref["loss"]) / abs(ref["loss"]),
            *((a[k] - ref[k]).norm().item() / ref[k].norm().item() for k in ("gh", "gw")),
        )

    picked = _liger_available(h0)
    gap = {k: apart(v) for k, v in figures.items() if k != "plain"}
    text = "; ".join(
        f"{k}: time x{v['seconds'] / ref['seconds']:.2f}, memory x{v['peak'] / ref['peak']:.2f}, apart {gap[k]:.1e}"
        for k, v in figures.items()
        if k != "plain"
    )
    return Result(
        f"Liger {'picked' if picked else 'NOT picked'} (vocab {vocab:,}, {n:,} tokens, d {d}; against the "
        f"plain loss) {text}",
        picked and gap["liger"] < 1e-2,
        "picked; loss and gradients within 1 %",
        {
            "picked": picked,
            "gap": gap,
            **{k: {"seconds": v["seconds"], "peak": v["peak"], "loss": v["loss"]} for k, v in figures.items()},
        },
    )


# Run only with --selftest, right after setup (tests/test_gpu_suite.py): they prove the driver's timeouts, its
# restart of the worker for the checks after a timeout, and the budget's skipping.
SELFTEST = ("selftest_timeout", "selftest_budget")


@check("selftest_timeout", "Self-test: a check that outlives its timeout", expect=1, timeout=2, cpu_timeout=2)
def selftest_timeout(ctx: Context) -> Result:
    (ctx.dir("selftest_timeout") / "partial.bin").write_bytes(b"0" * 1000)  # removed by the driver
    time.sleep(60)
    return Result("never reached", False)


@check("selftest_budget", "Self-test: a check longer than the budget left", expect=1e6, cpu_expect=1e6)
def selftest_budget(ctx: Context) -> Result:
    return Result("never reached", False)


from gpu_pipelines import PIPELINES  # noqa: E402  (registers the pipeline checks: `gpu_suite.sh --pipelines`)

# The order of a run: the most telling first, so that a lease that runs out still returns them.
ORDER = [
    "environment",
    "setup",
    *PIPELINES,
    # never measured yet (issues 46 and 50) first, then what earlier leases measured
    "rollout_engine",
    "lora_sft_peer",
    "two_ranks_one_gpu",
    "grpo_torch",
    "pairs_one_row",
    "fp16_lora_resume",
    "mfu_eager",
    "mfu_compile",
    "pretrain_cli",
    "mfu_ckpt",
    "auto_memory",
    "qlora",
    "liger",
    "muon_vs_adamw",
    "chunked_loss",
    "doctor",
    "check_dist",
    "gguf",
    "deepspeed",
    "grpo_vllm",
    *SELFTEST,
]
CHECKS.sort(key=lambda c: ORDER.index(c.name))
