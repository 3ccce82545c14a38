"""``aura pretrain``: pretrain a GPT-2 or Llama-style model from scratch, a thin set-up around loop.py.

Without ``--data`` it is the demo: prepare the embedded Spanish corpus, train its tokenizer and a
tiny model in a few minutes on a laptop CPU. ``--data`` takes a prepared directory (``aura data
prepare``) or raw text files, prepared on the fly into ``RUN_DIR/data``. ``PretrainCommand.prepare``
builds the tokenizer, data and model; the shared run setup (``aura.train.run.session``) does the rest.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from aura.core import console
from aura.core.config import arg
from aura.core.errors import AuraError
from aura.core.i18n import Messages
from aura.models.presets import PRESETS
from aura.train.args import TrainArgs
from aura.train.run.session import Run, TrainingJob, best_line, load_hf_weights, run_training, save_hf

M = Messages(
    "pretrain",
    {
        "demo": (
            "Sin --data: demo con el corpus español incluido (tokenizador + datos + modelo pequeño).",
            "No --data: demo on the embedded Spanish corpus (tokenizer + data + a small model).",
        ),
        "auto": ("Preset automático: {reason}", "Automatic preset: {reason}"),
        "demo_plan": (
            "Demo: preset '{preset}', lote {batch}, tasa de aprendizaje {lr:g} (con un corpus tan pequeño "
            "como el incluido, más pasos y más pequeños aprenden más).",
            "Demo: preset '{preset}', batch {batch}, learning rate {lr:g} (on a corpus as small as the "
            "embedded one, more and smaller steps learn more).",
        ),
        "preset": (
            "Modelo: '{preset}' ({arch}), {params:parámetro|parámetros}; {tokens:token|tokens} por paso de "
            "optimización "
            "(lote {batch} x acumulación {accum} x contexto {seq} x {world:proceso|procesos}).",
            "Model: '{preset}' ({arch}), {params:parameter|parameters}; {tokens:token|tokens} per optimizer step "
            "(batch {batch} x accumulation {accum} x context {seq} x {world:process|processes}).",
        ),
        "tok_mismatch": (
            "Los datos de {data} se prepararon con otro tokenizador: meta.json dice {data_tok} (hash "
            "{data_hash}), pero --tokenizer {tok} tiene hash {tok_hash}. Usa el mismo tokenizador o "
            "vuelve a preparar los datos con 'aura data prepare ... --tokenizer {tok}'.",
            "The data in {data} was prepared with another tokenizer: meta.json says {data_tok} (hash "
            "{data_hash}), but --tokenizer {tok} has hash {tok_hash}. Use the same tokenizer or "
            "prepare the data again with 'aura data prepare ... --tokenizer {tok}'.",
        ),
        "vocab_small": (
            "El tokenizador tiene {tok:token|tokens} pero los datos usan ids hasta {data}.",
            "The tokenizer has {tok:token|tokens} but the data uses ids up to {data}.",
        ),
        "ckpt_differs": (
            "El checkpoint {path} no corresponde a esta configuración:\n  {diffs}\nReanuda con los "
            "mismos --model-preset, dimensiones y --tokenizer que lo crearon.",
            "The checkpoint {path} does not match this configuration:\n  {diffs}\nResume with the "
            "same --model-preset, dimensions and --tokenizer that created it.",
        ),
        "no_fit": (
            "'{preset}' con lote {batch} necesita ~{need:.1f} GiB y {device} tiene {have:.1f} GiB. Lo que "
            "cabe: {suggest}. (Ignora esta comprobación con --ignore-memory-check.)",
            "'{preset}' with batch {batch} needs ~{need:.1f} GiB and {device} has {have:.1f} GiB. What fits: "
            "{suggest}. (Skip this check with --ignore-memory-check.)",
        ),
        "suggest": (
            "--model-preset {preset} --batch-size {batch}{ckpt}",
            "--model-preset {preset} --batch-size {batch}{ckpt}",
        ),
        "sample": ("Muestra de generación ({prompt!r}):", "Sample generation ({prompt!r}):"),
        "out_final": ("  modelo final (Hugging Face): {path}", "  final model (Hugging Face): {path}"),
        "out_ckpt": ("  último checkpoint: {path}", "  latest checkpoint: {path}"),
        "out_csv": ("  registro CSV: {path}", "  CSV log: {path}"),
        "out_tb": ("  TensorBoard: tensorboard --logdir {path}", "  TensorBoard: tensorboard --logdir {path}"),
        "out_cfg": ("  hiperparámetros: {path}", "  hyperparameters: {path}"),
        "out_data": ("  datos y tokenizador: {data} , {tok}", "  data and tokenizer: {data} , {tok}"),
        "global_batch": (
            "Lote global: {sequences:secuencia|secuencias} ({tokens:token|tokens}) por paso = micro-lote {batch} x "
            "acumulación {accum} x {world:proceso|procesos}; cada proceso lee su propia parte de los datos.",
            "Global batch: {sequences:sequence|sequences} ({tokens:token|tokens}) per step = micro-batch {batch} x "
            "accumulation {accum} x {world:process|processes}; every rank reads its own part of the data.",
        ),
        "no_val": (
            "La validación de {data} tiene {tokens:token|tokens}, menos que una ventana de {window:,} "
            '(--seq-length {seq} + 1): no habrá pérdida de validación ("Pérdida de validación: -") ni best/. Prepara '
            "más "
            "validación (--val-fraction, aquí al preparar texto o en aura data prepare) o usa "
            "un --seq-length más corto.",
            "The validation split of {data} has {tokens:token|tokens}, fewer than one window of {window:,} "
            '(--seq-length {seq} + 1): there will be no validation loss ("Val loss: -") and no best/. '
            "Prepare more validation data (--val-fraction, here when preparing text or in aura data prepare) "
            "or use a shorter --seq-length.",
        ),
        "recipe": (
            "Receta: {optimizer}, tasa {lr:g} con {schedule} hasta {min_lr:g}.",
            "Recipe: {optimizer}, learning rate {lr:g} with {schedule} down to {min_lr:g}.",
        ),
        "muon": ("Muon (matrices ocultas) + AdamW (el resto)", "Muon (hidden matrices) + AdamW (the rest)"),
        "cosine": ("calentamiento y coseno", "warm-up and cosine"),
        "wsd": (
            "calentamiento, fase estable y enfriamiento 1-sqrt en el {pct} % final (WSD)",
            "warm-up, a stable phase and a 1-sqrt cooldown over the last {pct} % (WSD)",
        ),
        "bad_split": (
            "--val-fraction debe estar en [0, 0.5) (recibido: {value}).",
            "--val-fraction must be in [0, 0.5) (got: {value}).",
        ),
    },
)

DEMO_VOCAB = 4096
DEMO_EPOCHS = 8
DEMO_BATCH = 8
DEMO_LR = 2e-3


@dataclass
class PretrainConfig(TrainArgs):
    """`aura pretrain` flags: data, tokenizer and model shape on top of the shared training flags."""

    data: list[str] = arg(
        [],
        es="Directorio preparado (aura data prepare) o archivos de texto; una mezcla con pesos: "
        "NOMBRE=PESO:DIR ... (p. ej. es=0.8:datos/es en=0.2:datos/en). Sin --data: demo.",
        en="Prepared directory (aura data prepare) or text files; a weighted mixture: "
        "NAME=WEIGHT:DIR ... (e.g. es=0.8:data/es en=0.2:data/en). Without --data: demo.",
    )
    tokenizer: str | None = arg(
        None,
        es="Tokenizador (directorio). Por defecto: el de los datos preparados, o "
        "uno nuevo entrenado en RUN_DIR/tokenizer.",
        en="Tokenizer (directory). Default: the prepared data's, or a new one trained into RUN_DIR/tokenizer.",
    )
    model_preset: str = arg(
        "auto",
        choices=[*PRESETS, "manual", "auto"],
        aliases=["--preset"],
        es="Tamaño del modelo (auto: según el hardware).",
        en="Model size (auto: by hardware).",
    )
    arch: str | None = arg(
        None, choices=("llama", "gpt2", "qwen3"), es="Arquitectura (manual).", en="Architecture (manual)."
    )
    optimizer: str | None = arg(
        None,
        choices=("adamw", "muon"),
        es="Optimizador: adamw, o muon (Muon para las matrices ocultas, AdamW para embeddings, "
        "cabeza y normas; la misma --learning-rate). Por defecto, el del preset: muon con "
        "wsd en los qwen3-* (llegan a la pérdida final de AdamW con coseno con 0,25-0,32 "
        "veces los tokens en los dos tamaños de bench/bench_recipe.py), adamw con cosine "
        "en los demás (con el bloque Llama Muon no llega a 0,7 veces en el tamaño mayor; "
        "sin medir aún en GPU). Ver docs/training.md.",
        en="Optimizer: adamw, or muon (Muon for the hidden matrices, AdamW for embeddings, "
        "head and norms; the same --learning-rate). Default: the preset's: muon with wsd "
        "for qwen3-* (they reach AdamW + cosine's final loss in 0.25-0.32x the tokens at "
        "both sizes of bench/bench_recipe.py), adamw with cosine for the others (with the "
        "Llama block Muon misses 0.7x at the larger size; not yet measured on a GPU). See "
        "docs/training.en.md.",
    )
    embed_size: int | None = arg(None, es="d_model.", en="d_model.")
    num_layers: int | None = arg(None, es="Capas.", en="Layers.")
    num_heads: int | None = arg(None, es="Cabezas de atención.", en="Attention heads.")
    num_kv_heads: int | None = arg(None, es="Cabezas clave/valor (GQA, Llama).", en="Key/value heads (GQA, Llama).")
    seq_length: int | None = arg(None, es="Longitud de contexto.", en="Context length.")
    intermediate_size: int | None = arg(None, es="Tamaño del MLP.", en="MLP size.")
    vocab_size: int | None = arg(
        None,
        es="Vocabulario del tokenizador que se entrene (32000; demo: 4096).",
        en="Vocabulary of a tokenizer trained here (32000; demo: 4096).",
    )
    val_fraction: float = arg(
        0.01,
        aliases=["--validation-split"],
        es="Fracción de validación al preparar texto sin procesar.",
        en="Validation fraction when preparing raw text.",
    )
    ignore_memory_check: bool = arg(
        False, es="No comprobar que el modelo quepa en memoria.", en="Do not check that the model fits in memory."
    )
    sample_prompt: str = arg("Había una vez", es="Texto inicial de la muestra final.", en="Prompt of the final sample.")
    sample_tokens: int = arg(
        40, es="Tokens de la muestra final (0 = sin muestra).", en="Tokens of the final sample (0 = no sample)."
    )
    init_from: str | None = arg(
        None,
        es="Continúa el preentrenamiento de este modelo (directorio de Hugging Face o "
        "nombre del hub) en vez de empezar de cero.",
        en="Continue pretraining this model (Hugging Face directory or hub name) instead of starting from scratch.",
    )
    train_new_tokens_only: int = arg(
        0,
        es="Con --init-from y un --tokenizer ampliado: pasos iniciales en los que "
        "solo aprenden los tokens nuevos (0 = ninguno).",
        en="With --init-from and an extended --tokenizer: first steps during which "
        "only the new tokens learn (0 = none).",
    )
    new_tokens_scope: str = arg(
        "new-rows",
        choices=("new-rows", "embeddings"),
        es="Qué aprende durante --train-new-tokens-only: las filas nuevas o los embeddings "
        "y la cabeza de salida enteros.",
        en="What learns during --train-new-tokens-only: the new rows, or the whole embeddings and output head.",
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0 <= self.val_fraction < 0.5:
            raise AuraError(M("bad_split", value=self.val_fraction))
        if self.init_from is not None or self.train_new_tokens_only:
            from aura.train.init_from import check_flags

            check_flags(self)

    def explicit_shape(self) -> bool:
        return any(
            getattr(self, f) is not None
            for f in (
                "arch",
                "embed_size",
                "num_layers",
                "num_heads",
                "num_kv_heads",
                "seq_length",
                "intermediate_size",
            )
        )


def _prepare_inputs(cfg: PretrainConfig, out: Path, dist) -> tuple[Path, str]:
    """(prepared dir, tokenizer path): use a prepared dir, or prepare raw files (demo: the embedded corpus)."""
    from aura.data.mixture import is_mixture, parse_sources
    from aura.data.tokens import is_prepared_dir
    from aura.distributed import main_process_first

    if is_mixture(cfg.data):  # weighted prepared directories: the first one stands for them all here
        data = parse_sources(cfg.data)[0].path
        return data, cfg.tokenizer or cfg.init_from or str(data / "tokenizer")
    if len(cfg.data) == 1 and is_prepared_dir(cfg.data[0]):
        data = Path(cfg.data[0])
        return data, cfg.tokenizer or cfg.init_from or str(data / "tokenizer")
    inputs = cfg.data
    if not inputs:
        from aura.data import EMBEDDED_CORPUS

        console.info(M("demo"))
        inputs = [str(p) for p in sorted(Path(EMBEDDED_CORPUS).glob("*.txt"))]
    with main_process_first(dist):
        tok = cfg.tokenizer or cfg.init_from
        if tok is None:
            tok_dir = out / "tokenizer"
            if not (tok_dir / "tokenizer.json").is_file():
                from aura.tokenizer.train import train_bpe

                train_bpe(
                    inputs=inputs,
                    vocab_size=cfg.vocab_size or (DEMO_VOCAB if not cfg.data else 32000),
                    output_dir=tok_dir,
                    force=True,
                )
            tok = str(tok_dir)
        from aura.data.prepare import PrepareConfig, prepare

        data = prepare(
            PrepareConfig(
                inputs=inputs,
                tokenizer=tok,
                output_dir=str(out / "data"),
                val_fraction=cfg.val_fraction,
                seed=cfg.seed,
                workers=1 if not cfg.data else 0,
            )
        )
    return Path(data), tok


def _check_tokenizer(tok, tok_name: str, shards) -> None:
    from aura.tokenizer.loading import tokenizer_hash

    h = tokenizer_hash(tok)
    meta_tok = shards.meta["tokenizer"]
    if h != meta_tok["hash"]:
        raise AuraError(
            M(
                "tok_mismatch",
                data=shards.path,
                data_tok=meta_tok.get("name_or_path"),
                data_hash=meta_tok["hash"][:12],
                tok=tok_name,
                tok_hash=h[:12],
            )
        )
    if len(tok) < shards.vocab_size:
        raise AuraError(M("vocab_small", tok=len(tok), data=shards.vocab_size))


def _resolve(
    cfg: PretrainConfig, info, *, device_type: str | None = None, devices: int | None = None, keep: str | None = None
) -> tuple[PretrainConfig, object, dict]:
    """Apply the preset (or `auto`'s choice: with --time-budget, the size the budget can train on ``devices``
    processes' devices; ``keep``, a resumed checkpoint's preset, stays) under the explicit flags; returns (cfg,
    spec, auto info)."""
    from aura.models.hardware import choose_auto
    from aura.models.presets import preset_training, resolve_spec
    from aura.models.size_budget import budget_hours
    from aura.train.args import with_defaults

    demo = not cfg.data
    preset, defaults, auto = cfg.model_preset, {}, {}
    if preset == "auto":
        hours = budget_hours(cfg.time_budget, cfg.lr_schedule)
        choice = choose_auto(info, time_budget_h=hours, devices=devices, keep=keep)
        if not demo:  # the demo says what it trains below: its own batch and rate, not auto's
            unsound = choice.size is not None and not choice.size.sensible  # a budget too small for any size
            (console.warn if unsound else console.info)(M("auto", reason=choice.reason))
            for line in choice.size.lines() if choice.size else []:
                console.info("  " + line)
        preset, auto = choice.preset, choice.to_dict()
        defaults = dict(
            batch_size=choice.batch_size,
            gradient_accumulation_steps=choice.gradient_accumulation_steps,
            learning_rate=choice.learning_rate,
            save_steps=choice.save_steps,
            gradient_checkpointing=choice.gradient_checkpointing,
        )
    spec = resolve_spec(
        preset,
        arch=cfg.arch,
        embed_size=cfg.embed_size,
        num_layers=cfg.num_layers,
        num_heads=cfg.num_heads,
        num_kv_heads=cfg.num_kv_heads,
        seq_length=cfg.seq_length,
        intermediate_size=cfg.intermediate_size,
    )
    if preset in ("gpt2-medium", "manual") or cfg.explicit_shape():
        console.info(spec.describe())
    defaults = {**preset_training(preset).to_defaults(), "gradient_accumulation_steps": 1, **defaults}
    # compiled blocks on CUDA: MFU 48.6 % against 33.0 % eager for 1.3B on an H200 (docs/benchmarks.md)
    defaults.setdefault("compile", (device_type or info.device_type) == "cuda")
    if defaults["gradient_checkpointing"] is None:  # the 72-hour presets: from the memory model, on this device
        from aura.models.hardware import needs_checkpointing

        defaults["gradient_checkpointing"] = needs_checkpointing(
            spec,
            info,
            batch_size=cfg.batch_size or defaults["batch_size"],
            optimizer=cfg.optimizer or defaults["optimizer"],
        )
    if demo and cfg.epochs is None and cfg.max_steps is None and cfg.max_tokens is None:
        defaults["epochs"] = DEMO_EPOCHS
        defaults["save_steps"] = 0  # per epoch only: the demo's epochs are seconds long
    if demo:  # ~40k tokens: more, smaller updates learn more in the same compute (measured: loss 5.5 vs 6.2)
        defaults.update(batch_size=DEMO_BATCH, learning_rate=DEMO_LR)
    cfg = with_defaults(cfg, **defaults)
    if demo:
        console.info(M("demo_plan", preset=preset, batch=cfg.batch_size, lr=cfg.learning_rate))
    return cfg, spec, auto


def _memory_check(cfg: PretrainConfig, spec, info, vocab: int) -> None:
    from aura.models.hardware import GIB, choose_auto, estimate_memory
    from aura.train.optim.step_engine import resolve_precision

    if cfg.ignore_memory_check or info.device_type != "cuda":
        return
    import torch

    precision = resolve_precision(cfg.precision, torch.device("cuda"))
    est = estimate_memory(
        spec,
        vocab_size=vocab,
        batch_size=cfg.batch_size,
        precision=precision,
        gradient_checkpointing=bool(cfg.gradient_checkpointing),
        device_type="cuda",
        optimizer=cfg.optimizer or "adamw",
    )
    if est.total > info.memory_bytes:
        c = choose_auto(info, vocab_size=vocab)
        suggest = M(
            "suggest",
            preset=c.preset,
            batch=c.batch_size,
            ckpt=" --gradient-checkpointing" if c.gradient_checkpointing else "",
        )
        raise AuraError(
            M(
                "no_fit",
                preset=spec.name,
                batch=cfg.batch_size,
                need=est.total / GIB,
                device=info.name,
                have=info.memory_bytes / GIB,
                suggest=suggest,
            )
        )


def _sample(model, tok, prompt: str, tokens: int, *, device, seed: int) -> str:
    import torch

    from aura.inference.backends import fit_context
    from aura.models.presets import context_length

    model.eval()
    torch.manual_seed(seed)
    ids, tokens, _ = fit_context(
        lambda _: tok(prompt, return_tensors="pt")["input_ids"], None, tokens, context_length(model.config)
    )  # never past --seq-length
    ids = ids.to(device)
    with torch.no_grad():
        out = model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=tokens,
            do_sample=True,
            top_k=40,
            temperature=0.8,
            pad_token_id=tok.pad_token_id,
            eos_token_id=tok.eos_token_id,
        )
    return tok.decode(out[0], skip_special_tokens=True)


def pretrain(cfg: PretrainConfig) -> int:
    """Run `aura pretrain`; returns 0 when finished, EXIT_INTERRUPTED (3) when stopped by a signal with a
    checkpoint saved."""
    return run_training(cfg, PretrainCommand())


class PretrainCommand:
    """`aura pretrain` for the shared run setup (``aura.train.run.session.TrainingCommand``)."""

    kind = "pretrain"

    def inputs(self, cfg: PretrainConfig) -> list:
        from aura.data.mixture import input_paths, is_mixture

        if cfg.init_from or is_mixture(cfg.data):  # their user mistakes before the run dir exists
            from aura.train.continued import preflight

            preflight(cfg)
        return [*input_paths(cfg.data), cfg.tokenizer, cfg.init_from]

    def prepare(self, run: Run) -> TrainingJob:
        from aura.data.pretrain_data import open_splits
        from aura.tokenizer.loading import add_aura_chat_template, load_tokenizer, tokenizer_hash

        data_dir, tok_name = _prepare_inputs(run.cfg, run.out, run.dist)
        tok = load_tokenizer(tok_name)
        add_aura_chat_template(tok)  # final/ carries Aura's chat template (tokenizers trained before it had none)
        train_shards, val_shards = open_splits(data_dir)
        cfg, spec, auto, model, described, vocab, wrap_engine = _model(run, tok, tok_name, train_shards)
        data, val, evaluators = _batches(cfg, spec, train_shards, val_shards, run.dist, data_dir)
        plan = run.plan(
            cfg, batches_per_epoch=data.batches_per_epoch, tokens_per_micro_batch=cfg.batch_size * spec.seq_len
        )
        _announce(cfg, spec, plan, params=described["parameters"], dist=run.dist)
        from aura.data.mixture import is_mixture

        record = {}
        if is_mixture(cfg.data):  # the effective proportions, said and kept in run.json
            from aura.train.continued import mixture_proportions

            record["mixture"] = mixture_proportions(data, plan)
        tok_hash = tokenizer_hash(tok)
        out = run.out

        def finish(result) -> None:
            if cfg.sample_tokens > 0:
                _print_sample(model, result.final_dir, tok, cfg, device=run.dist.device)

        return TrainingJob(
            cfg=cfg,
            model=model,
            data=data,
            val_data=val,
            plan=plan,
            identity={"model": {**spec.to_dict(), "vocab_size": vocab}, "tokenizer_hash": tok_hash},
            stored={"preset": spec.name},
            mismatch=lambda path, diffs: M("ckpt_differs", path=path, diffs=diffs),
            save_model=save_hf,
            load_model=load_hf_weights,
            write_extras=lambda d: tok.save_pretrained(str(d)),
            describe={
                **described,
                "preset": spec.name,
                "model_spec": spec.to_dict(),
                "auto": auto,
                "vocab_size": vocab,
                "tokenizer": {"path": str(tok_name), "hash": tok_hash},
                "data": {
                    "path": str(data_dir),
                    "train_tokens": len(train_shards),
                    "val_tokens": len(val_shards) if val_shards is not None else 0,
                },
            },
            flops_per_token=described["flops_per_token"],
            finish=finish,
            summary=lambda result: _summary(result, out, data_dir=data_dir, tok_name=tok_name),
            evaluators=evaluators,
            wrap_engine=wrap_engine,
            record=record,
        )


def _model(run: Run, tok, tok_name, train_shards):
    """(config, spec, auto's choice, model, its described fields, vocabulary, engine wrapper or None): a base
    model's continued pretraining (``--init-from``, ``aura.train.continued``) or a new model of the preset."""
    if run.cfg.init_from:
        from aura.train.continued import from_base

        base = from_base(run, tok, tok_name, train_shards)
        return base.cfg, base.spec, {}, base.model, base.described, base.vocab, base.wrap_engine
    from aura.train.run import checkpoint as ckpt

    _check_tokenizer(tok, tok_name, train_shards)
    keep = ckpt.read_state(run.resume).get("preset") if run.resume is not None else None  # a run keeps its size
    cfg, spec, auto = _resolve(
        run.cfg, run.info, device_type=run.dist.device.type, devices=run.dist.world_size, keep=keep
    )
    vocab = max(len(tok), train_shards.vocab_size)
    _memory_check(cfg, spec, run.info, vocab)
    model, described = _build(cfg, spec, vocab, tok, run)
    return cfg, spec, auto, model, described, vocab, None


def _summary(result, out: Path, *, data_dir, tok_name) -> list:
    """The lines printed when the run ends: where the model, checkpoint, logs, config and data are."""
    return [
        M("out_final", path=result.final_dir),
        M("out_ckpt", path=result.checkpoint),
        best_line(out),
        M("out_csv", path=out / "training_log.csv"),
        M("out_tb", path=out / "tb") if (out / "tb").is_dir() else None,
        M("out_cfg", path=out / "model_config.json"),
        M("out_data", data=data_dir, tok=tok_name),
    ]


def _build(cfg: PretrainConfig, spec, vocab: int, tok, run: Run) -> tuple[object, dict]:
    """A new model of ``spec``, parallelised; (model, its model_config.json fields)."""
    import torch
    from transformers import GenerationConfig

    from aura.distributed import parallelize
    from aura.models.presets import build_model, count_parameters, flops_per_token

    torch.manual_seed(cfg.seed)
    ids = dict(bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    model = build_model(spec, vocab, **ids, device=run.dist.device)  # initialised where it trains
    model.generation_config = GenerationConfig(**ids)
    described = {
        "parameters": count_parameters(model),
        "flops_per_token": flops_per_token(model.config, spec.seq_len),
        "hf_config": model.config.to_dict(),
    }
    # from outside the model, once, in torchtitan's order: checkpointing -> compile -> FSDP2/DDP
    model = parallelize(
        model,
        dist=run.dist,
        strategy=cfg.strategy,
        compile=cfg.compile,
        gradient_checkpointing=bool(cfg.gradient_checkpointing),
        mixed_precision=run.precision if run.precision in ("bf16", "fp16") else None,
        comm=cfg,
        device_memory=run.device_memory,
    )
    return model, described


def _batches(cfg: PretrainConfig, spec, train_shards, val_shards, dist, data_dir: Path):
    """(training batches, validation batches or None, evaluators): every rank reads its own part."""
    from aura.data.mixture import is_mixture
    from aura.data.pretrain_data import EvalBatches, PretrainBatches

    if is_mixture(cfg.data):  # weighted sources (aura.data.mixture), per-source metrics
        from aura.train.continued import mixture_batches

        return mixture_batches(
            cfg,
            spec,
            dist,
            plan_interval=lambda d: (
                cfg.eval_interval or max(1, d.batches_per_epoch // (cfg.gradient_accumulation_steps or 1))
            ),
        )
    data = PretrainBatches(
        train_shards,
        seq_len=spec.seq_len,
        batch_size=cfg.batch_size,
        seed=cfg.seed,
        rank=dist.rank,
        world_size=dist.world_size,
        pin_memory=dist.device.type == "cuda",
    )
    if val_shards is None:
        return data, None, []
    val = EvalBatches(
        val_shards,
        seq_len=spec.seq_len,
        batch_size=cfg.batch_size,
        rank=dist.rank,
        world_size=dist.world_size,
        max_batches=cfg.eval_batches,
    )
    if not len(val):
        console.warn(M("no_val", data=data_dir, tokens=len(val_shards), window=spec.seq_len + 1, seq=spec.seq_len))
        return data, None, []
    return data, val, []


def _announce(cfg: PretrainConfig, spec, plan, *, params: int, dist) -> None:
    world = dist.world_size
    console.info(
        M(
            "preset",
            preset=spec.name,
            arch=spec.arch,
            params=params,
            tokens=plan.tokens_per_step,
            batch=cfg.batch_size,
            accum=cfg.gradient_accumulation_steps,
            seq=spec.seq_len,
            world=world,
        )
    )
    schedule = plan.schedule
    shape = M("wsd", pct=round(100 * schedule.cooldown_fraction)) if schedule.kind == "wsd" else M("cosine")
    console.info(
        M(
            "recipe",
            optimizer=M("muon") if cfg.optimizer == "muon" else "AdamW",
            lr=schedule.base,
            schedule=shape,
            min_lr=schedule.min_lr,
        )
    )
    if dist.is_distributed:
        console.info(
            M(
                "global_batch",
                sequences=cfg.batch_size * cfg.gradient_accumulation_steps * world,
                tokens=plan.tokens_per_step,
                batch=cfg.batch_size,
                accum=cfg.gradient_accumulation_steps,
                world=world,
            )
        )


def _print_sample(model, final_dir: Path, tok, cfg: PretrainConfig, *, device) -> None:
    from aura.distributed import strategy_of
    from aura.train.run import checkpoint as ckpt

    # FSDP2 holds shards: sample from the gathered final/ instead of the training model
    sampler = ckpt.unwrap_model(model) if strategy_of(model) != "fsdp" else _load_final(final_dir, device)
    console.info(M("sample", prompt=cfg.sample_prompt))
    console.info(_sample(sampler, tok, cfg.sample_prompt, cfg.sample_tokens, device=device, seed=cfg.seed))


def _load_final(path: Path, device):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(path)).to(device)
