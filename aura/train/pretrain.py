"""``aura pretrain``: pretrain a GPT-2 or Llama-style model from scratch, a thin set-up around loop.py.

Without ``--data`` it is the demo: prepare the embedded Spanish corpus, train its tokenizer and a
tiny model in a few minutes on a laptop CPU. ``--data`` takes a prepared directory (``aura data
prepare``) or raw text files, prepared on the fly into ``RUN_DIR/data``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from aura import console
from aura.config import arg, to_dict
from aura.errors import AuraError
from aura.i18n import Messages
from aura.models import PRESETS
from aura.rundir import BEST
from aura.train.args import TrainArgs, explicit_fields
from aura.train.best import read_best
from aura.train.plan import adopt_flags, continue_plan
from aura.train.setup import load_hf_weights, prepare_run_dir, release_run_dir

M = Messages("pretrain", {
    "demo": ("Sin --data: demo con el corpus español incluido (tokenizador + datos + modelo 'tiny').",
             "No --data: demo on the embedded Spanish corpus (tokenizer + data + 'tiny' model)."),
    "auto": ("Preset automático: {reason}", "Automatic preset: {reason}"),
    "preset": ("Modelo: '{preset}' ({arch}), {params:parámetro|parámetros}; {tokens:token|tokens} por paso de optimización "
               "(lote {batch} x acumulación {accum} x contexto {seq} x {world:proceso|procesos}).",
               "Model: '{preset}' ({arch}), {params:parameter|parameters}; {tokens:token|tokens} per optimizer step "
               "(batch {batch} x accumulation {accum} x context {seq} x {world:process|processes})."),
    "tok_mismatch": ("Los datos de {data} se prepararon con otro tokenizador: meta.json dice {data_tok} (hash "
                     "{data_hash}), pero --tokenizer {tok} tiene hash {tok_hash}. Usa el mismo tokenizador o "
                     "vuelve a preparar los datos con 'aura data prepare ... --tokenizer {tok}'.",
                     "The data in {data} was prepared with another tokenizer: meta.json says {data_tok} (hash "
                     "{data_hash}), but --tokenizer {tok} has hash {tok_hash}. Use the same tokenizer or "
                     "prepare the data again with 'aura data prepare ... --tokenizer {tok}'."),
    "vocab_small": ("El tokenizador tiene {tok:token|tokens} pero los datos usan ids hasta {data}.",
                    "The tokenizer has {tok:token|tokens} but the data uses ids up to {data}."),
    "ckpt_differs": ("El checkpoint {path} no corresponde a esta configuración:\n  {diffs}\nReanuda con los "
                     "mismos --model-preset, dimensiones y --tokenizer que lo crearon.",
                     "The checkpoint {path} does not match this configuration:\n  {diffs}\nResume with the "
                     "same --model-preset, dimensions and --tokenizer that created it."),
    "no_fit": ("'{preset}' con lote {batch} necesita ~{need:.1f} GiB y {device} tiene {have:.1f} GiB. Lo que "
               "cabe: {suggest}. (Ignora esta comprobación con --ignore-memory-check.)",
               "'{preset}' with batch {batch} needs ~{need:.1f} GiB and {device} has {have:.1f} GiB. What fits: "
               "{suggest}. (Skip this check with --ignore-memory-check.)"),
    "suggest": ("--model-preset {preset} --batch-size {batch}{ckpt}", "--model-preset {preset} --batch-size {batch}{ckpt}"),
    "sample": ("Muestra de generación ({prompt!r}):", "Sample generation ({prompt!r}):"),
    "outputs": ("Resultados en {run}:", "Outputs in {run}:"),
    "out_final": ("  modelo final (Hugging Face): {path}", "  final model (Hugging Face): {path}"),
    "out_ckpt": ("  último checkpoint: {path}", "  latest checkpoint: {path}"),
    "out_csv": ("  registro CSV: {path}", "  CSV log: {path}"),
    "out_tb": ("  TensorBoard: tensorboard --logdir {path}", "  TensorBoard: tensorboard --logdir {path}"),
    "out_cfg": ("  hiperparámetros: {path}", "  hyperparameters: {path}"),
    "out_data": ("  datos y tokenizador: {data} , {tok}", "  data and tokenizer: {data} , {tok}"),
    "global_batch": ("Lote global: {sequences:secuencia|secuencias} ({tokens:token|tokens}) por paso = micro-lote {batch} x "
                     "acumulación {accum} x {world:proceso|procesos}; cada proceso lee su propia parte de los datos.",
                     "Global batch: {sequences:sequence|sequences} ({tokens:token|tokens}) per step = micro-batch {batch} x "
                     "accumulation {accum} x {world:process|processes}; every rank reads its own part of the data."),
    "done_dist": ("Entrenamiento completado. Gradientes sincronizados.",
                  "Training complete. Gradients synchronised."),
    "no_val": ("La validación de {data} tiene {tokens:token|tokens}, menos que una ventana de {window:,} "
               "(--seq-length {seq} + 1): no habrá pérdida de validación (\"Val loss: -\") ni best/. Prepara más "
               "validación (--validation-split al preparar texto aquí, o aura data prepare --val-fraction) o usa "
               "un --seq-length más corto.",
               "The validation split of {data} has {tokens:token|tokens}, fewer than one window of {window:,} "
               "(--seq-length {seq} + 1): there will be no validation loss (\"Val loss: -\") and no best/. "
               "Prepare more validation data (--validation-split when preparing text here, or aura data prepare "
               "--val-fraction) or use a shorter --seq-length."),
    "out_best": ("  mejor validación (paso {step}, {val:.4f}): {path}", "  best validation (step {step}, {val:.4f}): {path}"),
    "bad_split": ("--validation-split debe estar en [0, 0.5) (recibido: {value}).",
                  "--validation-split must be in [0, 0.5) (got: {value})."),
})

DEMO_VOCAB = 4096
DEMO_EPOCHS = 8
DEMO_BATCH = 8
DEMO_LR = 2e-3


@dataclass
class PretrainConfig(TrainArgs):
    """`aura pretrain` flags: data, tokenizer and model shape on top of the shared training flags."""

    data: list[str] = arg([], es="Directorio preparado (aura data prepare) o archivos de texto. Sin --data: demo.",
                          en="Prepared directory (aura data prepare) or text files. Without --data: demo.")
    tokenizer: str | None = arg(None, es="Tokenizador (directorio). Por defecto: el de los datos preparados, o "
                                         "uno nuevo entrenado en RUN_DIR/tokenizer.",
                                en="Tokenizer (directory). Default: the prepared data's, or a new one trained "
                                   "into RUN_DIR/tokenizer.")
    model_preset: str = arg("auto", choices=[*PRESETS, "manual", "auto"],
                            es="Tamaño del modelo (auto: según el hardware).", en="Model size (auto: by hardware).")
    arch: str | None = arg(None, choices=("llama", "gpt2"), es="Arquitectura (manual).", en="Architecture (manual).")
    embed_size: int | None = arg(None, es="d_model.", en="d_model.")
    num_layers: int | None = arg(None, es="Capas.", en="Layers.")
    num_heads: int | None = arg(None, es="Cabezas de atención.", en="Attention heads.")
    num_kv_heads: int | None = arg(None, es="Cabezas clave/valor (GQA, Llama).", en="Key/value heads (GQA, Llama).")
    seq_length: int | None = arg(None, es="Longitud de contexto.", en="Context length.")
    intermediate_size: int | None = arg(None, es="Tamaño del MLP.", en="MLP size.")
    vocab_size: int | None = arg(None, es="Vocabulario del tokenizador que se entrene (32000; demo: 4096).",
                                 en="Vocabulary of a tokenizer trained here (32000; demo: 4096).")
    validation_split: float = arg(0.01, es="Fracción de validación al preparar texto sin procesar.",
                                  en="Validation fraction when preparing raw text.")
    ignore_memory_check: bool = arg(False, es="No comprobar que el modelo quepa en memoria.",
                                    en="Do not check that the model fits in memory.")
    sample_prompt: str = arg("Había una vez", es="Texto inicial de la muestra final.", en="Prompt of the final sample.")
    sample_tokens: int = arg(40, es="Tokens de la muestra final (0 = sin muestra).",
                             en="Tokens of the final sample (0 = no sample).")

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0 <= self.validation_split < 0.5:
            raise AuraError(M("bad_split", value=self.validation_split))

    def explicit_shape(self) -> bool:
        return any(getattr(self, f) is not None for f in ("arch", "embed_size", "num_layers", "num_heads",
                                                            "num_kv_heads", "seq_length", "intermediate_size"))


def _prepare_inputs(cfg: PretrainConfig, out: Path, dist) -> tuple[Path, str]:
    """(prepared dir, tokenizer path): use a prepared dir, or prepare raw files (demo: the embedded corpus)."""
    from aura.data.tokens import is_prepared_dir
    from aura.distributed import main_process_first

    if len(cfg.data) == 1 and is_prepared_dir(cfg.data[0]):
        data = Path(cfg.data[0])
        return data, cfg.tokenizer or str(data / "tokenizer")
    inputs = cfg.data
    if not inputs:
        from aura.data import EMBEDDED_CORPUS

        console.info(M("demo"))
        inputs = [str(p) for p in sorted(Path(EMBEDDED_CORPUS).glob("*.txt"))]
    with main_process_first(dist):
        tok = cfg.tokenizer
        if tok is None:
            tok_dir = out / "tokenizer"
            if not (tok_dir / "tokenizer.json").is_file():
                from aura.tokenizer import train_bpe

                train_bpe(inputs=inputs, vocab_size=cfg.vocab_size or (DEMO_VOCAB if not cfg.data else 32000),
                          output_dir=tok_dir, force=True)
            tok = str(tok_dir)
        from aura.data.prepare import PrepareConfig, prepare

        data = prepare(PrepareConfig(inputs=inputs, tokenizer=tok, output_dir=str(out / "data"),
                                     val_fraction=cfg.validation_split, seed=cfg.seed,
                                     workers=1 if not cfg.data else 0))
    return Path(data), tok


def _check_tokenizer(tok, tok_name: str, shards) -> None:
    from aura.tokenizer import tokenizer_hash

    h = tokenizer_hash(tok)
    meta_tok = shards.meta["tokenizer"]
    if h != meta_tok["hash"]:
        raise AuraError(M("tok_mismatch", data=shards.path, data_tok=meta_tok.get("name_or_path"),
                          data_hash=meta_tok["hash"][:12], tok=tok_name, tok_hash=h[:12]))
    if len(tok) < shards.vocab_size:
        raise AuraError(M("vocab_small", tok=len(tok), data=shards.vocab_size))


def _resolve(cfg: PretrainConfig, info) -> tuple[PretrainConfig, object, dict]:
    """Apply the preset (or `auto`'s choice) under the explicit flags; returns (cfg, spec, auto info)."""
    from aura.hardware import choose_auto, preset_learning_rate
    from aura.models import resolve_spec
    from aura.train.args import with_defaults

    demo = not cfg.data
    preset, defaults, auto = cfg.model_preset, {}, {}
    if preset == "auto":
        choice = choose_auto(info)
        console.info(M("auto", reason=choice.reason))
        preset, auto = choice.preset, choice.to_dict()
        defaults = dict(batch_size=choice.batch_size, gradient_accumulation_steps=choice.gradient_accumulation_steps,
                        learning_rate=choice.learning_rate, save_steps=choice.save_steps,
                        gradient_checkpointing=choice.gradient_checkpointing)
    spec = resolve_spec(preset, arch=cfg.arch, embed_size=cfg.embed_size, num_layers=cfg.num_layers,
                        num_heads=cfg.num_heads, num_kv_heads=cfg.num_kv_heads, seq_length=cfg.seq_length,
                        intermediate_size=cfg.intermediate_size)
    if preset in ("gpt2-medium", "manual") or cfg.explicit_shape():
        console.info(spec.describe())
    big = preset.startswith("aura-72h")
    defaults = {"batch_size": 16 if preset == "tiny" else (2 if big else 8), "gradient_accumulation_steps": 1,
                "learning_rate": preset_learning_rate(preset), "save_steps": 100 if preset == "tiny" else 500,
                "gradient_checkpointing": big, **defaults}
    if demo and cfg.epochs is None and cfg.max_steps is None and cfg.max_tokens is None:
        defaults["epochs"] = DEMO_EPOCHS
        defaults["save_steps"] = 0  # per epoch only: the demo's epochs are seconds long
    if demo:  # ~40k tokens: more, smaller updates learn more in the same compute (measured: loss 5.5 vs 6.2)
        defaults.update(batch_size=DEMO_BATCH, learning_rate=DEMO_LR)
    cfg = with_defaults(cfg, **defaults)
    return cfg, spec, auto


def _memory_check(cfg: PretrainConfig, spec, info, vocab: int) -> None:
    from aura.hardware import GIB, choose_auto, estimate_memory
    from aura.train.loop import resolve_precision

    if cfg.ignore_memory_check or info.device_type != "cuda":
        return
    import torch

    precision = resolve_precision(cfg.precision, torch.device("cuda"))
    est = estimate_memory(spec, vocab_size=vocab, batch_size=cfg.batch_size, precision=precision,
                          gradient_checkpointing=bool(cfg.gradient_checkpointing), device_type="cuda")
    if est.total > info.memory_bytes:
        c = choose_auto(info, vocab_size=vocab)
        suggest = M("suggest", preset=c.preset, batch=c.batch_size,
                    ckpt=" --gradient-checkpointing" if c.gradient_checkpointing else "")
        raise AuraError(M("no_fit", preset=spec.name, batch=cfg.batch_size, need=est.total / GIB, device=info.name,
                          have=info.memory_bytes / GIB, suggest=suggest))


def _save_hf(model, directory: Path, state_dict: dict | None) -> None:
    """config.json + model.safetensors + generation_config.json (loadable by from_pretrained)."""
    model.save_pretrained(str(directory), state_dict=state_dict, safe_serialization=True)


_load_hf = load_hf_weights  # shared with finetune (aura.train.setup)


def _sample(model, tok, prompt: str, tokens: int, *, device, seed: int) -> str:
    import torch

    model.eval()
    torch.manual_seed(seed)
    enc = tok(prompt, return_tensors="pt").to(device)
    with torch.no_grad():
        out = model.generate(**enc, max_new_tokens=tokens, do_sample=True, top_k=40, temperature=0.8,
                             pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
    return tok.decode(out[0], skip_special_tokens=True)


def pretrain(cfg: PretrainConfig) -> int:
    """Run `aura pretrain`; returns 0 when finished, EXIT_INTERRUPTED (3) when stopped by a signal with a
    checkpoint saved."""
    from aura.distributed import init_distributed, teardown

    explicit = sorted(explicit_fields(cfg))
    dist = init_distributed(backend=cfg.backend, device=cfg.device)
    console.set_quiet(not dist.is_main)  # one voice; other ranks still print warnings, errors, Sync
    try:
        return _pretrain(cfg, dist, explicit)
    finally:
        release_run_dir(cfg.output_dir)
        teardown(dist)


def _pretrain(cfg: PretrainConfig, dist, explicit: list[str]) -> int:
    import torch
    from transformers import GenerationConfig

    from aura.data.pretrain_data import EvalBatches, PretrainBatches, open_splits
    from aura.distributed import parallelize, strategy_of
    from aura.hardware import detect
    from aura.models import build_model, count_parameters, flops_per_token
    from aura.tokenizer import add_aura_chat_template, load_tokenizer, tokenizer_hash
    from aura.train import checkpoint as ckpt
    from aura.train.args import resolve_steps
    from aura.train.loop import EXIT_INTERRUPTED, TrainHooks, resolve_precision, train
    from aura.train.metrics import RunStatus
    from aura.utils.fsutil import atomic_write_json, check_writable

    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # "Writing model shards" bars at every checkpoint
    if dist.device.type == "cpu":
        import os

        os.environ.setdefault("DS_ACCELERATOR", "cpu")  # transformers may import deepspeed, which warns
    out = Path(cfg.output_dir)
    check_writable(out, flag="--output-dir")
    resume_path = prepare_run_dir(out, dist=dist, resume_from=cfg.resume_from, overwrite=cfg.overwrite,
                                  fork=cfg.fork, inputs=[*cfg.data, cfg.tokenizer])
    adopted = None
    if resume_path is not None:  # the run's plan comes from the checkpoint (aura.train.plan)
        adopted = adopt_flags(cfg, ckpt.read_state(resume_path), explicit=explicit, path=resume_path,
                              world_size=dist.world_size)
        cfg = adopted.cfg

    data_dir, tok_name = _prepare_inputs(cfg, out, dist)
    tok = load_tokenizer(tok_name)
    add_aura_chat_template(tok)  # final/ carries Aura's chat template (tokenizers trained before it had none)
    train_shards, val_shards = open_splits(data_dir)
    _check_tokenizer(tok, tok_name, train_shards)
    tok_hash = tokenizer_hash(tok)
    info = detect()
    cfg, spec, auto = _resolve(cfg, info)
    vocab = max(len(tok), train_shards.vocab_size)
    _memory_check(cfg, spec, info, vocab)

    torch.manual_seed(cfg.seed)
    model = build_model(spec, vocab, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                        pad_token_id=tok.pad_token_id)
    model.generation_config = GenerationConfig(bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                                               pad_token_id=tok.pad_token_id)
    n_params = count_parameters(model)
    fpt = flops_per_token(model.config, spec.seq_len)
    hf_config = model.config.to_dict()
    precision = resolve_precision(cfg.precision, dist.device)
    # from outside the model, once, in torchtitan's order: checkpointing -> compile -> FSDP2/DDP
    model = parallelize(model, dist=dist, strategy=cfg.strategy, compile=cfg.compile,
                        gradient_checkpointing=bool(cfg.gradient_checkpointing),
                        mixed_precision=precision if precision in ("bf16", "fp16") else None)

    data = PretrainBatches(train_shards, seq_len=spec.seq_len, batch_size=cfg.batch_size, seed=cfg.seed,
                           rank=dist.rank, world_size=dist.world_size, pin_memory=dist.device.type == "cuda")
    val = None
    if val_shards is not None:
        val = EvalBatches(val_shards, seq_len=spec.seq_len, batch_size=cfg.batch_size, rank=dist.rank,
                          world_size=dist.world_size, max_batches=cfg.eval_batches)
        if not len(val):
            console.warn(M("no_val", data=data_dir, tokens=len(val_shards), window=spec.seq_len + 1,
                           seq=spec.seq_len))
            val = None
    plan = resolve_steps(cfg, batches_per_epoch=data.batches_per_epoch,
                         tokens_per_micro_batch=cfg.batch_size * spec.seq_len, world_size=dist.world_size)
    if adopted is not None:
        plan = continue_plan(plan, adopted)
    console.info(M("preset", preset=spec.name, arch=spec.arch, params=n_params, tokens=plan.tokens_per_step,
                   batch=cfg.batch_size, accum=cfg.gradient_accumulation_steps, seq=spec.seq_len,
                   world=dist.world_size))
    if dist.is_distributed:
        console.info(M("global_batch", sequences=cfg.batch_size * cfg.gradient_accumulation_steps * dist.world_size,
                       tokens=plan.tokens_per_step, batch=cfg.batch_size, accum=cfg.gradient_accumulation_steps,
                       world=dist.world_size))
    identity = {"model": {**spec.to_dict(), "vocab_size": vocab}, "tokenizer_hash": tok_hash}
    if resume_path is not None:
        saved = ckpt.read_state(resume_path)
        diffs = ckpt.describe_differences({k: saved.get(k) for k in identity}, identity)
        if diffs:
            raise AuraError(M("ckpt_differs", path=resume_path, diffs="\n  ".join(diffs)))
    if dist.is_main:
        atomic_write_json(out / "model_config.json", {
            "kind": "pretrain", "config": to_dict(cfg), "explicit_flags": explicit, "preset": spec.name,
            "model_spec": spec.to_dict(), "auto": auto, "parameters": n_params, "vocab_size": vocab,
            "flops_per_token": fpt, "precision": precision, "plan": plan.to_dict(),
            "tokenizer": {"path": str(tok_name), "hash": tok_hash},
            "data": {"path": str(data_dir), "train_tokens": len(train_shards),
                     "val_tokens": len(val_shards) if val_shards is not None else 0},
            "hardware": info.to_dict(), "world_size": dist.world_size, "strategy": strategy_of(model),
            "hf_config": hf_config})

    hooks = TrainHooks(save_model=_save_hf, load_model=_load_hf, write_extras=lambda d: tok.save_pretrained(str(d)),
                       checkpoint_meta=lambda: {**identity, "preset": spec.name, "config": to_dict(cfg)},
                       io=ckpt.io_for(model))
    status = RunStatus(out, kind="pretrain", dist=dist)
    result = train(model=model, data=data, val_data=val, args=cfg, plan=plan, dist=dist, hooks=hooks,
                   run_status=status, flops_per_token=fpt, peak_flops=info.peak_flops(precision),
                   peak_name=info.peak_source, device_name=info.name, resume_from=resume_path)
    if result.status != "finished":
        return EXIT_INTERRUPTED
    if dist.is_main:
        if cfg.sample_tokens > 0:
            # FSDP2 holds shards: sample from the gathered final/ instead of the training model
            sampler = ckpt.unwrap_model(model) if strategy_of(model) != "fsdp" else \
                _load_final(result.final_dir, dist.device)
            console.info(M("sample", prompt=cfg.sample_prompt))
            console.info(_sample(sampler, tok, cfg.sample_prompt, cfg.sample_tokens, device=dist.device,
                                 seed=cfg.seed))
        console.success(M("outputs", run=out))
        console.info(M("out_final", path=result.final_dir))
        console.info(M("out_ckpt", path=result.checkpoint))
        best = read_best(out)
        if best is not None:
            console.info(M("out_best", step=best["step"], val=best["val_loss"], path=out / BEST))
        console.info(M("out_csv", path=out / "training_log.csv"))
        console.info(M("out_tb", path=out / "tb"))
        console.info(M("out_cfg", path=out / "model_config.json"))
        console.info(M("out_data", data=data_dir, tok=tok_name))
    if dist.is_distributed:
        dist.barrier()  # rank 0's sample first, so the line below is the last one of every rank
        console.always(M("done_dist"))
    return 0


def _load_final(path: Path, device):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(path)).to(device)
