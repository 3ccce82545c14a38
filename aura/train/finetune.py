"""``aura finetune``: LoRA, QLoRA or full fine-tuning on instruction data, a thin set-up around loop.py.

Phase 1 (this draft): the config and the automatic epoch count. The set-up (data -> SFTDataSource,
model -> aura.train.adapters, TrainHooks that save adapters) is wired around ``aura.train.loop.train``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from aura.config import arg
from aura.errors import AuraError
from aura.i18n import Messages
from aura.train.adapters import LORA_PRESETS
from aura.train.args import TrainArgs

M = Messages("finetune", {
    "epochs_auto": ("Épocas: {epochs} ({reason}; {n:,} ejemplos). Cámbialo con --epochs N.",
                    "Epochs: {epochs} ({reason}; {n:,} examples). Override with --epochs N."),
    "reason_small": ("dataset pequeño (< 1.000 ejemplos), necesita más pasadas",
                     "small dataset (< 1,000 examples), needs more passes"),
    "reason_small_medium": ("dataset pequeño-mediano (1.000 - 10.000 ejemplos)",
                            "small-to-medium dataset (1,000 - 10,000 examples)"),
    "reason_medium": ("dataset mediano (10.000 - 50.000 ejemplos, óptimo)",
                      "medium dataset (10,000 - 50,000 examples, optimal)"),
    "reason_large": ("dataset grande (50.000 - 100.000 ejemplos)", "large dataset (50,000 - 100,000 examples)"),
    "reason_very_large": ("dataset muy grande (> 100.000 ejemplos), evita el sobreajuste",
                          "very large dataset (> 100,000 examples), avoids overfitting"),
    "val_fraction": ("--val-fraction debe estar en [0, 1) (recibido: {value}).",
                     "--val-fraction must be in [0, 1) (got: {value})."),
    "positive": ("--{flag} debe ser mayor que 0 (recibido: {value}).", "--{flag} must be greater than 0 (got: {value})."),
    "dropout": ("--lora-dropout debe estar en [0, 1) (recibido: {value}).",
                "--lora-dropout must be in [0, 1) (got: {value})."),
    "lora_full": ("--{flag} solo se aplica a --method lora o qlora (el método es 'full').",
                  "--{flag} only applies to --method lora or qlora (the method is 'full')."),
})

# (upper bound exclusive, epochs, reason key): the original guide's table (frIdA).
_EPOCH_TABLE = ((1_000, 5, "reason_small"), (10_000, 4, "reason_small_medium"), (50_000, 3, "reason_medium"),
                (100_000, 2, "reason_large"))
LR_LORA, LR_FULL = 2e-4, 2e-5


def auto_epochs(n_examples: int) -> tuple[int, str]:
    """Epochs for a dataset of ``n_examples`` training examples, and why (the original guide's table:
    < 1,000 -> 5; 1,000-9,999 -> 4; 10,000-49,999 -> 3; 50,000-99,999 -> 2; 100,000 or more -> 1)."""
    for bound, epochs, reason in _EPOCH_TABLE:
        if n_examples < bound:
            return epochs, M(reason)
    return 1, M("reason_very_large")


@dataclass
class FinetuneConfig(TrainArgs):
    """Flags of ``aura finetune``: TrainArgs plus the model, data and adapter choices."""

    base_model: str | None = arg(None, es="Modelo base: directorio Hugging Face (p. ej. runs/aura/final) o "
                                          "nombre del hub.",
                                 en="Base model: a Hugging Face directory (e.g. runs/aura/final) or a hub name.",
                                 short="-m")
    data: str | None = arg(None, es="Datos de instrucciones: CSV/TSV, JSONL/JSON, Parquet, directorio de "
                                    "save_to_disk o nombre de dataset del hub (por defecto: la muestra en "
                                    "español incluida).",
                           en="Instruction data: CSV/TSV, JSONL/JSON, Parquet, a save_to_disk directory or a "
                              "hub dataset name (default: the embedded Spanish sample).")
    split: str = arg("train", es="Partición de un dataset de Hugging Face.", en="Split of a Hugging Face dataset.")
    method: Literal["lora", "qlora", "full"] = arg(
        "lora", es="lora (adaptador), qlora (base en 4 bits NF4 + adaptador) o full (todos los pesos).",
        en="lora (adapter), qlora (4-bit NF4 base + adapter) or full (all weights).")
    preset: Literal["frida"] | None = arg(None, es="Preset de LoRA: frida = r 64, alpha 128, dropout 0.05.",
                                          en="LoRA preset: frida = r 64, alpha 128, dropout 0.05.")
    lora_r: int | None = arg(None, es="Rango de LoRA (por defecto 16).", en="LoRA rank (default 16).")
    lora_alpha: int | None = arg(None, es="Alpha de LoRA (por defecto 32).", en="LoRA alpha (default 32).")
    lora_dropout: float | None = arg(None, es="Dropout de LoRA (por defecto 0.05).", en="LoRA dropout (default 0.05).")
    target_modules: list[str] = arg([], es="Capas con LoRA (por defecto: todas las proyecciones de atención y MLP).",
                                    en="Layers with LoRA (default: every attention and MLP projection).")
    template: Literal["mistral", "llama3", "chatml", "alpaca", "aura"] | None = arg(
        None, es="Plantilla de chat si el modelo no trae una (o para sustituirla).",
        en="Chat template when the model has none (or to replace its own).")
    train_on_prompt: bool = arg(False, es="Entrena también con los tokens del prompt (por defecto solo las "
                                          "respuestas).",
                                en="Also train on prompt tokens (default: responses only).")
    max_length: int = arg(2048, es="Tokens máximos por ejemplo (o por fila con --packing).",
                          en="Maximum tokens per example (or per row with --packing).")
    truncation: Literal["drop", "truncate"] = arg(
        "drop", es="Ejemplos más largos que --max-length: drop (descartar) o truncate (recortar).",
        en="Examples longer than --max-length: drop or truncate.")
    packing: bool = arg(False, es="Junta varios ejemplos por fila de --max-length tokens (sin atención "
                                  "cruzada entre ejemplos).",
                        en="Pack several examples per row of --max-length tokens (no attention across "
                           "examples).")
    empty_responses: Literal["skip", "fail"] = arg(
        "skip", es="Ejemplos con la respuesta vacía: skip (saltar, con aviso) o fail (error).",
        en="Examples with an empty response: skip (with a warning) or fail (error).")
    val_fraction: float = arg(0.05, es="Fracción de ejemplos para validación (al menos 1 si hay 2 o más).",
                              en="Fraction of examples for validation (at least 1 when there are 2 or more).")
    attn_implementation: Literal["auto", "eager", "sdpa", "flash_attention_2"] = arg(
        "auto", es="Atención: auto (flash_attention_2 si está instalada con GPU, si no sdpa).",
        en="Attention: auto (flash_attention_2 when installed with a GPU, else sdpa).")
    trust_remote_code: bool = arg(False, es="Permite código del repositorio del modelo (solo si confías en él).",
                                  en="Allow code from the model's repository (only if you trust it).")
    # Fine-tuning defaults of the original guides (HF Trainer): no weight decay, beta2 0.999, cosine to 0.
    output_dir: Path = arg(Path("runs/finetune"), es="Directorio de la ejecución (checkpoints, logs, final/).",
                           en="Run directory (checkpoints, logs, final/).", short="-o")
    weight_decay: float = arg(0.0, es="Weight decay de AdamW.", en="AdamW weight decay.")
    adam_beta2: float = arg(0.999, es="beta2 de AdamW.", en="AdamW beta2.")
    min_lr: float | None = arg(0.0, es="Tasa final del coseno.", en="Final learning rate of the cosine.")

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0 <= self.val_fraction < 1:
            raise AuraError(M("val_fraction", value=self.val_fraction))
        for flag, value in (("max-length", self.max_length), ("lora-r", self.lora_r),
                            ("lora-alpha", self.lora_alpha)):
            if value is not None and value <= 0:
                raise AuraError(M("positive", flag=flag, value=value))
        if self.lora_dropout is not None and not 0 <= self.lora_dropout < 1:
            raise AuraError(M("dropout", value=self.lora_dropout))
        if self.method == "full":
            for flag, value in (("lora-r", self.lora_r), ("lora-alpha", self.lora_alpha),
                                ("preset", self.preset), ("target-modules", self.target_modules)):
                if value:
                    raise AuraError(M("lora_full", flag=flag))

    def lora_settings(self) -> dict:
        """r, alpha, dropout: explicit flags > --preset > the guide's defaults (16, 32, 0.05)."""
        out = {"lora_r": 16, "lora_alpha": 32, "lora_dropout": 0.05}
        if self.preset:
            out.update(LORA_PRESETS[self.preset])
        for key in out:
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        return out

    def optimisation_defaults(self) -> dict:
        """Values for ``aura.train.args.with_defaults``: batch 2 x accumulation 4, lr 2e-4 (LoRA) or
        2e-5 (full); warm-up 3 % (args.default_warmup) and cosine come from the loop."""
        return {"batch_size": 2, "gradient_accumulation_steps": 4,
                "learning_rate": LR_FULL if self.method == "full" else LR_LORA,
                "gradient_checkpointing": False}


def auto_epochs_line(n_examples: int) -> tuple[int, str]:
    """(epochs, the line to print): "Epochs: 5 (small dataset ...; 251 examples). Override with --epochs N."."""
    epochs, reason = auto_epochs(n_examples)
    return epochs, M("epochs_auto", epochs=epochs, reason=reason, n=n_examples)
