"""Supervised fine-tuning, ``aura finetune --objective sft`` (the default): instruction data, the next-token loss
over the answers (``aura.data.sft``: every format -> conversations; ``aura.data.sft_batches``: masked token ids
-> ``SFTDataSource``)."""

from __future__ import annotations

from aura.core import console
from aura.core.errors import AuraError
from aura.core.i18n import Messages
from aura.train.objectives.registry import Limited, ObjectiveSetup

M = Messages(
    "sft_setup",
    {
        "demo_data": (
            "Sin --data: se usa la muestra de instrucciones en español incluida ({path}).",
            "No --data: using the embedded Spanish instruction sample ({path}).",
        ),
        "examples": (
            "Ejemplos: {train} de entrenamiento, {val} de validación; {tokens:token|tokens} de respuesta "
            "entrenados por época{prompt}.",
            "Examples: {train} for training, {val} for validation; {tokens:,} response tokens trained per "
            "epoch{prompt}.",
        ),
        "with_prompt": (
            " (con --train-on-prompt también los del prompt)",
            " (with --train-on-prompt also the prompt's)",
        ),
        "no_val": (
            "Sin ejemplos de validación (--val-fraction {fraction} apartó {n} de {total}; los que superan "
            '--max-length {length} se descartan): no habrá pérdida de validación ("Pérdida de validación: -") ni '
            "best/. "
            "Sube --val-fraction, o --max-length, o usa --truncation truncate.",
            "No validation examples (--val-fraction {fraction} set aside {n} of {total}; those longer than "
            '--max-length {length} are dropped): there will be no validation loss ("Val loss: -") and no '
            "best/. Raise --val-fraction, or --max-length, or use --truncation truncate.",
        ),
        "padding_free": (
            "Los ejemplos cortos de un micro-lote comparten fila cuando así se calcula menos (cada uno solo se "
            "ve a sí mismo): menos relleno, las mismas pérdidas.",
            "Short examples of a micro-batch share a row where that computes less (each one sees only itself): "
            "less padding, the same losses.",
        ),
        "pref_only": (
            "--{flag} solo se aplica a --objective dpo u orpo (el objetivo es 'sft').",
            "--{flag} only applies to --objective dpo or orpo (the objective is 'sft').",
        ),
        "pref_grpo_only": (
            "--{flag} solo se aplica a --objective dpo, orpo o grpo (el objetivo es 'sft').",
            "--{flag} only applies to --objective dpo, orpo or grpo (the objective is 'sft').",
        ),
    },
)
LR_LORA, LR_FULL = 2e-4, 2e-5


class SFTSetup(ObjectiveSetup):
    """Instructions -> conversations -> masked token ids; the loop's next-token loss (no ``Objective``)."""

    name = "sft"
    named_in_identity = False
    padding_free = True  # a micro-batch's examples in fewer rows where that computes less (``SFTDataSource``)

    @classmethod
    def check_across(cls, cfg) -> None:
        """The preference flags (and GRPO's --beta, --max-prompt-length) do not apply."""
        for flag, value in (
            ("beta", cfg.beta is not None),
            ("dpo-loss", cfg.dpo_loss != "sigmoid"),
            ("label-smoothing", cfg.label_smoothing),
            ("max-prompt-length", cfg.max_prompt_length),
            ("precompute-ref", cfg.precompute_ref),
        ):
            if value:
                raise AuraError(
                    M("pref_grpo_only" if flag in ("beta", "max-prompt-length") else "pref_only", flag=flag)
                )

    @classmethod
    def learning_rate(cls, method: str) -> float:
        return LR_FULL if method == "full" else LR_LORA

    def load(self, cfg) -> list:
        from aura.data.hub_datasets import choose_data
        from aura.data.sft import load_conversations

        if not cfg.data:
            from aura.data import EMBEDDED_INSTRUCTIONS

            console.info(M("demo_data", path=EMBEDDED_INSTRUCTIONS))
        return load_conversations(
            choose_data(cfg.data, cfg.data_fallback), empty_responses=cfg.empty_responses, split=cfg.split
        )

    def conversations(self, items: list) -> list:
        return items

    def encode(self, cfg, tok, items: list, *, templated: bool) -> tuple[list, list]:
        """(training examples, validation examples): masked token ids, split by --val-fraction."""
        from aura.data.sft import split_train_val
        from aura.data.sft_batches import encode_all

        train_convs, val_convs = split_train_val(items, val_fraction=cfg.val_fraction, seed=cfg.seed)
        enc = dict(max_length=cfg.max_length, truncation=cfg.truncation, train_on_prompt=cfg.train_on_prompt)
        train_ex = encode_all(train_convs, tok, **enc)
        val_ex = encode_all(val_convs, tok, **enc) if val_convs else []
        if not val_ex and cfg.val_fraction > 0:
            console.warn(
                M("no_val", n=len(val_convs), total=len(items), fraction=cfg.val_fraction, length=cfg.max_length)
            )
        return train_ex, val_ex

    def sources(self, cfg, tok, model, train_ex: list, val_ex: list, *, run, packing: bool, base_name: str):
        """(training batches, validation batches or None): every rank reads its own part."""
        from aura.data.sft_batches import SFTDataSource, length_buckets
        from aura.train.adapters import packing_is_isolated

        dist = run.dist
        padding_free = self.padding_free and not packing and cfg.batch_size > 1
        padding_free = padding_free and packing_is_isolated(model, say=False)
        if padding_free:
            console.info(M("padding_free"))
        common = dict(
            batch_size=cfg.batch_size,
            pad_id=tok.pad_token_id,
            seed=cfg.seed,
            rank=dist.rank,
            world_size=dist.world_size,
            packing=packing,
            max_length=cfg.max_length,
            buckets=length_buckets(cfg.max_length) if cfg.compile else (),
            padding_free=padding_free,
        )  # few shapes to compile
        data = SFTDataSource(train_ex, **common, window=cfg.gradient_accumulation_steps or 1)  # a step's, by length
        val = Limited(SFTDataSource(val_ex, **common, shuffle=False), cfg.eval_batches) if val_ex else None
        return data, val

    def announce(self, cfg, train_ex: list, val_ex: list, data) -> None:
        console.info(
            M(
                "examples",
                train=len(train_ex),
                val=len(val_ex),
                tokens=data.num_label_tokens,
                prompt=M("with_prompt") if cfg.train_on_prompt else "",
            )
        )
