"""``aura finetune``: LoRA, QLoRA or full fine-tuning on instruction data, a thin set-up around loop.py.

Data (``aura.data.sft``: every format -> conversations; ``aura.data.sft_batches``: masked token ids ->
``SFTDataSource``), model (``aura.train.adapters``: base model, LoRA/QLoRA/full, adapter files) and
hooks that save the adapter (or full model) with tokenizer and chat template at every checkpoint,
``checkpoint-epoch-N/`` at epoch ends and ``epoch_info.json``: ``FinetuneCommand.prepare``. The rest
(run dir, identity check, model_config.json, the loop, the summary) is the shared run setup,
``aura.train.run.session``, the same as pretraining's; ``--deepspeed ds_config.json`` swaps the loop's
optimizer-step engine for DeepSpeed ZeRO (``aura.train.optim.deepspeed``).

Without ``--data`` the embedded Spanish instruction sample is used; without ``--base-model`` the
model pretrained by the ``aura pretrain`` demo (``runs/aura/final``) is used when it exists.
"""

from __future__ import annotations

from pathlib import Path

from aura.core import console
from aura.core.rundir import EPOCH_INFO, step_of
from aura.train.args import with_defaults
from aura.train.finetune_config import FinetuneConfig, M, auto_epochs_line, check_output_beside_base, resolve_base_name
from aura.train.run.session import Run, TrainingJob, best_line, load_hf_weights, run_training


class EpochInfo:
    """``epoch_info.json``: a list with one object per finished epoch, rewritten atomically."""

    def __init__(self, path: Path, *, resume_step: int | None):
        from aura.core.atomic import read_json

        self.path = path
        old = read_json(path) if resume_step is not None and path.is_file() else []
        self.rows = [r for r in old if int(r.get("global_step", 0)) <= (resume_step or 0)]

    def __call__(self, end) -> None:
        from datetime import datetime, timezone

        from aura.core.atomic import atomic_write_json

        self.rows.append(
            {
                "epoch": end.epoch,
                "global_step": end.step,
                "train_loss": end.train_loss,
                "eval_loss": end.val_loss,
                "learning_rate": end.lr,
                "timestamp": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                "checkpoint": str(end.checkpoint) if end.checkpoint else None,
                "epoch_seconds": round(end.seconds, 3),
            }
        )
        atomic_write_json(self.path, self.rows)


def finetune(cfg: FinetuneConfig) -> int:
    """Run `aura finetune`; returns 0 when finished, EXIT_INTERRUPTED (3) when stopped by a signal with a
    checkpoint saved."""
    return run_training(cfg, FinetuneCommand())


class FinetuneCommand:
    """`aura finetune` for the shared run setup (``aura.train.run.session.TrainingCommand``)."""

    kind = "finetune"
    base_name = ""  # --base-model, or the pretraining demo's final/ (set by inputs)

    def inputs(self, cfg: FinetuneConfig) -> list:
        from aura.train import adapters

        self.base_name = resolve_base_name(cfg)
        adapters.resolve_base(self.base_name)  # a missing path fails before anything is written
        check_output_beside_base(cfg.output_dir, self.base_name)
        if cfg.method == "qlora":
            adapters.require_bitsandbytes()
        from aura.train.objectives.registry import setup_class

        return [self.base_name, cfg.data, cfg.deepspeed, *setup_class(cfg.objective).inputs(cfg)]

    def prepare(self, run: Run) -> TrainingJob:
        """The run's job: the objective's data, batches and loss (``aura.train.objectives.registry``), the
        model, the plan and the hooks that save the adapter or the model."""
        from aura.models.presets import count_parameters, flops_per_token
        from aura.tokenizer.loading import load_tokenizer
        from aura.train import adapters
        from aura.train.objectives.registry import setup_class
        from aura.train.run.memory import finetune_defaults

        cfg, dist, base_name, out = run.cfg, run.dist, self.base_name, run.out
        setup = setup_class(cfg.objective)()
        items = setup.load(cfg)
        tok = load_tokenizer(base_name, trust_remote_code=cfg.trust_remote_code, flag="--base-model")
        template_name = _template(cfg, tok, setup.conversations(items))
        train_ex, val_ex = setup.encode(cfg, tok, items, templated=template_name is not None)
        cfg = finetune_defaults(cfg, run=run, base_name=base_name)  # CUDA `auto`: micro-batch, checkpointing
        cfg = setup.resolve(cfg, dist)  # e.g. GRPO's batch, lr and epochs where not given
        model, fingerprint, base_config = _load_model(cfg, base_name, tok, run, head=setup.head)
        packing = cfg.packing
        if packing and not adapters.packing_is_isolated(model):
            console.warn(M("packing_off"))
            packing = False
        cfg = _with_defaults(cfg, model, n_train=len(train_ex), run=run)
        data, val = setup.sources(cfg, tok, model, train_ex, val_ex, run=run, packing=packing, base_name=base_name)
        objective = setup.build(cfg, model, train_ex, val_ex, tok=tok, run=run)
        tokens_per_row = sum(len(e.input_ids) for e in train_ex) / max(len(data.rows), 1) + setup.completion_tokens(cfg)
        plan = run.plan(
            cfg, batches_per_epoch=data.batches_per_epoch, tokens_per_micro_batch=int(cfg.batch_size * tokens_per_row)
        )
        evaluators = setup.evaluators(cfg, tok, model, val_ex, data, steps_per_epoch=plan.steps_per_epoch)
        setup.announce(cfg, train_ex, val_ex, data)
        model, engine, io = _parallelise(cfg, model, run)
        lora = cfg.lora_settings() if cfg.method != "full" else None
        method = cfg.method
        return TrainingJob(
            cfg=cfg,
            model=model,
            data=data,
            val_data=val,
            plan=plan,
            engine=engine,
            io=io,
            identity={
                "method": method,
                "lora": lora,
                "template": template_name,
                **({"objective": cfg.objective} if setup.named_in_identity else {}),
            },
            # the base is checked by the adapter's own check when the checkpoint loads (aura.models.adapter_check)
            stored={"base_model": {k: fingerprint[k] for k in ("config_hash", "embed_hash")}},
            mismatch=lambda path, diffs: M("ckpt_differs", path=path, diffs=diffs),
            **_model_hooks(
                method, setup.head, tok=tok, template=template_name, fingerprint=fingerprint, base=base_name, out=out
            ),
            on_epoch_end=EpochInfo(out / EPOCH_INFO, resume_step=step_of(run.resume) if run.resume else None),
            epoch_checkpoint_name=lambda epoch, step: f"checkpoint-epoch-{epoch}",
            describe={
                "base_model": base_name,
                "base_fingerprint": fingerprint,
                "method": method,
                "lora": lora,
                "template": template_name,
                "trainable_parameters": None if cfg.deepspeed else count_parameters(model, trainable_only=True),
                "examples": {"train": len(train_ex), "val": len(val_ex)},
                "packing": packing,
                "objective": cfg.objective,
                "hf_config": base_config.to_dict(),
            },
            flops_per_token=flops_per_token(
                base_config,
                int(tokens_per_row) or None,
                trainable_parameters=None
                if cfg.method == "full" or cfg.deepspeed
                else count_parameters(model, trainable_only=True),
            )
            + setup.extra_flops_per_token(cfg),
            objective=objective,
            evaluators=evaluators,
            finish=setup.finish(data, out),
        )


def _model_hooks(method: str, head: str, *, tok, template: str | None, fingerprint: dict, base: str, out: Path) -> dict:
    """The job's hooks that save and load the adapter (or the full model) with the tokenizer and the chat
    template, and its summary lines (a reward model's next step is GRPO's ``--reward model:PATH``)."""
    from aura.train import adapters

    def save_model(m, d, state_dict):
        adapters.write_model_files(m, d, state_dict, method=method, template_name=template, fingerprint=fingerprint)

    def load_model(m, d):
        load_hf_weights(m, Path(d)) if method == "full" else adapters.load_adapter_weights(m, d)

    def summary(result) -> list:
        cmd = f"--model {result.final_dir}" if method == "full" else f"--model {base} --adapter {result.final_dir}"
        return [
            M("out_final", kind=M("kind_full" if method == "full" else "kind_adapter"), path=result.final_dir),
            best_line(out),
            M("out_epochs", path=out / EPOCH_INFO) if (out / EPOCH_INFO).is_file() else None,  # not mid-epoch
            M("out_logs", csv=out / "training_log.csv", tb=out / "tb")
            if (out / "tb").is_dir()
            else M("out_log", csv=out / "training_log.csv"),
            M("out_next_reward", path=result.final_dir) if head == adapters.SEQ_CLS else M("out_next", cmd=cmd),
        ]

    return {
        "save_model": save_model,
        "load_model": load_model,
        "summary": summary,
        "write_extras": lambda d: adapters.write_tokenizer_files(tok, d),
    }


def _template(cfg: FinetuneConfig, tok, convs: list) -> str | None:
    """The chat template set on ``tok`` (saved with the output), or None for plain text data."""
    from aura.data.sft_batches import detect_text_family
    from aura.text.templates import missing_template_tokens, resolve_chat_template

    fallback = detect_text_family(c.text for c in convs if c.text) or ("aura" if not cfg.data else None)
    if not (any(c.messages for c in convs) or cfg.template or getattr(tok, "chat_template", None) or fallback):
        return None
    _, template_name = resolve_chat_template(tok, cfg.template, fallback=fallback)
    # "model" names the model's own template in the run's metadata; the user reads it in words
    console.info(M("template_own") if template_name == "model" else M("template", name=template_name))
    missing = missing_template_tokens(tok, template_name)
    if missing:
        from aura.text.templates import M as TM

        console.warn(TM("missing_tokens", tokens=", ".join(missing), name=template_name))
    return template_name


def _load_model(cfg: FinetuneConfig, base_name: str, tok, run: Run, *, head: str):
    """(model with LoRA/QLoRA or all weights trainable, the base's fingerprint, the base's config); ``head``:
    the objective's (``ObjectiveSetup.head``: a reward model's one-output score head, seeded by --seed so
    every rank and every run of the seed starts from the same one)."""
    import torch

    from aura.distributed import main_process_first
    from aura.models.hardware import attention_implementation
    from aura.train import adapters

    # LoRA on a GPU keeps the frozen base in the compute dtype; full fine-tuning keeps fp32 master weights
    dtype = (
        torch.bfloat16
        if (run.precision == "bf16" and cfg.method != "full" and run.dist.device.type == "cuda")
        else torch.float32
    )
    if head == adapters.SEQ_CLS:
        torch.manual_seed(cfg.seed)  # the new score head's initial weights
    with main_process_first(run.dist):  # a hub download happens once
        model = adapters.load_base_model(
            base_name,
            method=cfg.method,
            dtype=dtype,
            device=run.dist.device if not cfg.deepspeed else None,
            attn_implementation=attention_implementation(cfg.attn_implementation, run.info, run.precision),
            trust_remote_code=cfg.trust_remote_code,
            head=head,
        )
    adapters.match_vocab(model, tok)
    if head == adapters.SEQ_CLS:  # the score is read at each row's last token that is not padding
        model.config.pad_token_id = tok.pad_token_id
    fingerprint = adapters.base_fingerprint(model)
    base_config = model.config
    torch.manual_seed(cfg.seed)  # LoRA A matrices: the same on every rank and in every run of this seed
    model = adapters.setup_model(
        model,
        method=cfg.method,
        **cfg.lora_settings(),
        target_modules=cfg.target_modules or None,
        gradient_checkpointing=bool(cfg.gradient_checkpointing),
        head=head,
    )
    if cfg.method != "full" and run.precision in ("bf16", "fp16"):
        adapters.keep_autocast_inputs(model)  # no fp32 round trip of each projection's input (docstring)
    console.info(adapters.trainable_line(model))
    return model, fingerprint, base_config


def _with_defaults(cfg: FinetuneConfig, model, *, n_train: int, run: Run) -> FinetuneConfig:
    """Optimisation defaults, the automatic batch (CUDA) and epochs for the flags the user did not give."""
    defaults = cfg.optimisation_defaults()
    if cfg.batch_size is None and cfg.gradient_accumulation_steps is None:
        from aura.models.hardware import GIB, finetune_batch

        batch = finetune_batch(
            model,
            info=run.info,
            max_length=cfg.max_length,
            precision=run.precision,
            checkpointing=bool(cfg.gradient_checkpointing),
        )
        if batch is not None:
            console.info(
                M(
                    "auto_batch",
                    batch=batch,
                    have=run.info.memory_bytes / GIB,
                    device=run.info.name,
                    length=cfg.max_length,
                )
            )
            defaults.update(batch_size=batch, gradient_accumulation_steps=max(1, 8 // batch))
    if cfg.epochs is None and cfg.max_steps is None and cfg.max_tokens is None:
        epochs, line = auto_epochs_line(n_train)
        console.info(line)
        defaults["epochs"] = epochs
    defaults.setdefault("save_steps", 500)
    return with_defaults(cfg, **defaults)


def _parallelise(cfg: FinetuneConfig, model, run: Run):
    """(model, step engine, checkpoint io): DDP/FSDP2 from outside (engine None: the setup's TorchEngine),
    or DeepSpeed ZeRO with its own."""
    from aura.distributed import parallelize
    from aura.train.run import checkpoint as ckpt

    if cfg.deepspeed:
        from aura.train.optim.deepspeed import setup_deepspeed

        return setup_deepspeed(model, args=cfg, dist=run.dist, config_path=cfg.deepspeed, precision=run.precision)
    model = parallelize(
        model, dist=run.dist, strategy=cfg.strategy, compile=cfg.compile, comm=cfg, device_memory=run.device_memory
    )
    return model, None, ckpt.io_for(model)
