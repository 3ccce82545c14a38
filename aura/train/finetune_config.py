"""The flags of ``aura finetune`` (``FinetuneConfig``), their checks, and the defaults chosen from the
data (epochs from the number of examples, the base model's name).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from aura.core import console
from aura.core.config import arg
from aura.core.errors import AuraError
from aura.core.i18n import Messages
from aura.train.adapters import LORA_PRESETS
from aura.train.args import TrainArgs
from aura.train.objectives.distill_args import DistillArgs
from aura.train.objectives.grpo_args import GRPOArgs
from aura.train.objectives.kto_args import KTOArgs
from aura.train.objectives.registry import NAMES, OBJECTIVES, setup_class
from aura.train.objectives.reward_args import RewardArgs
from aura.train.objectives.simpo_args import SimPOArgs

DEMO_BASES = (Path("runs/aura/final"), Path("runs/demo/final"))  # where the `aura pretrain` demo writes


M = Messages(
    "finetune",
    {
        "epochs_auto": (
            "Épocas: {epochs} ({reason}; {n:ejemplo|ejemplos}). Cámbialo con --epochs N.",
            "Epochs: {epochs} ({reason}; {n:example|examples}). Override with --epochs N.",
        ),
        "reason_small": (
            "dataset pequeño (< 1.000 ejemplos), necesita más pasadas",
            "small dataset (< 1,000 examples), needs more passes",
        ),
        "reason_small_medium": (
            "dataset pequeño-mediano (1.000 - 10.000 ejemplos)",
            "small-to-medium dataset (1,000 - 10,000 examples)",
        ),
        "reason_medium": (
            "dataset mediano (10.000 - 50.000 ejemplos, óptimo)",
            "medium dataset (10,000 - 50,000 examples, optimal)",
        ),
        "reason_large": ("dataset grande (50.000 - 100.000 ejemplos)", "large dataset (50,000 - 100,000 examples)"),
        "reason_very_large": (
            "dataset muy grande (> 100.000 ejemplos), evita el sobreajuste",
            "very large dataset (> 100,000 examples), avoids overfitting",
        ),
        "val_fraction": (
            "--val-fraction debe estar en [0, 1) (recibido: {value}).",
            "--val-fraction must be in [0, 1) (got: {value}).",
        ),
        "positive": (
            "--{flag} debe ser mayor que 0 (recibido: {value}).",
            "--{flag} must be greater than 0 (got: {value}).",
        ),
        "dropout": (
            "--lora-dropout debe estar en [0, 1) (recibido: {value}).",
            "--lora-dropout must be in [0, 1) (got: {value}).",
        ),
        "no_base": (
            "Falta --base-model: el ajuste fino parte de un modelo ya preentrenado. Indica un directorio "
            "de Hugging Face o un nombre del hub, o crea uno pequeño con 'aura pretrain' (su "
            "RUN_DIR/final sirve: aura finetune --base-model runs/aura/final).",
            "--base-model is missing: fine-tuning starts from a pretrained model. Give a Hugging Face "
            "directory or hub name, or make a small one with 'aura pretrain' (its RUN_DIR/final works: "
            "aura finetune --base-model runs/aura/final).",
        ),
        "demo_base": (
            "Sin --base-model: se usa el modelo de la demo de preentrenamiento, {path}.",
            "No --base-model: using the pretraining demo's model, {path}.",
        ),
        "template": (
            "Plantilla de chat: {name} (se guarda con el resultado como tokenizer.chat_template).",
            "Chat template: {name} (saved with the output as tokenizer.chat_template).",
        ),
        "template_own": (
            "Plantilla de chat: la del propio modelo (se guarda con el resultado como tokenizer.chat_template).",
            "Chat template: the model's own (saved with the output as tokenizer.chat_template).",
        ),
        "auto_batch": (
            "Lote automático: {batch} (cabe en {have:.1f} GiB de {device} con {length:token|tokens} por fila).",
            "Automatic batch: {batch} (fits in {have:.1f} GiB of {device} with {length:token|tokens} per row).",
        ),
        "ckpt_differs": (
            "El checkpoint {path} no corresponde a este ajuste fino:\n  {diffs}\nReanuda con el mismo "
            "--base-model, --method y ajustes de LoRA que lo crearon.",
            "The checkpoint {path} does not match this fine-tuning:\n  {diffs}\nResume with the same "
            "--base-model, --method and LoRA settings that created it.",
        ),
        "packing_off": (
            "--packing no es seguro con este modelo: se entrena sin empaquetar.",
            "--packing is not safe with this model: training without packing.",
        ),
        "out_final": ("  resultado ({kind}): {path}", "  result ({kind}): {path}"),
        "out_epochs": ("  épocas: {path}", "  epochs: {path}"),
        "out_logs": ("  registros: {csv} , tensorboard --logdir {tb}", "  logs: {csv} , tensorboard --logdir {tb}"),
        "out_log": ("  registro: {csv}", "  log: {csv}"),
        "out_next": ("  pruébalo: aura chat {cmd}", "  try it: aura chat {cmd}"),
        "out_next_reward": (
            "  úsalo: aura finetune --objective grpo '--reward model:{path}'",
            "  use it: aura finetune --objective grpo '--reward model:{path}'",
        ),
        "kind_adapter": ("adaptador LoRA", "LoRA adapter"),
        "kind_full": ("modelo completo", "full model"),
        "lora_full": (
            "--{flag} solo se aplica a --method lora o qlora (el método es 'full').",
            "--{flag} only applies to --method lora or qlora (the method is 'full').",
        ),
        "base_folder": (
            "--output-dir {out} {relation} (--base-model {base}). Un ajuste fino es una "
            "ejecución nueva: escribe sus checkpoints, sus registros y el resultado (final/, el adaptador "
            "o el modelo completo) en una carpeta propia, y aquí se mezclaría con el modelo base o lo "
            "sustituiría. Usa otra carpeta, por ejemplo --output-dir {suggest}: el modelo base no se toca "
            "y el resultado queda en {suggest}/final.",
            "--output-dir {out} {relation} (--base-model {base}). A fine-tune is a new "
            "run: it writes its checkpoints, its logs and its result (final/, the adapter or the full "
            "model) into a folder of its own, and here it would mix with the base model or replace it. "
            "Use another folder, for example --output-dir {suggest}: the base model is left untouched "
            "and the result goes to {suggest}/final.",
        ),
        "rel_is": ("es la carpeta del modelo base", "is the folder of the base model"),
        "rel_holds": (
            "es la carpeta de ejecución que contiene el modelo base",
            "is the run folder that holds the base model",
        ),
    },
)


# (upper bound exclusive, epochs, reason key): the original guide's table (frIdA).
_EPOCH_TABLE = (
    (1_000, 5, "reason_small"),
    (10_000, 4, "reason_small_medium"),
    (50_000, 3, "reason_medium"),
    (100_000, 2, "reason_large"),
)


def auto_epochs(n_examples: int) -> tuple[int, str]:
    """Epochs for a dataset of ``n_examples`` training examples, and why (the original guide's table:
    < 1,000 -> 5; 1,000-9,999 -> 4; 10,000-49,999 -> 3; 50,000-99,999 -> 2; 100,000 or more -> 1)."""
    for bound, epochs, reason in _EPOCH_TABLE:
        if n_examples < bound:
            return epochs, M(reason)
    return 1, M("reason_very_large")


@dataclass
class FinetuneConfig(DistillArgs, RewardArgs, KTOArgs, SimPOArgs, GRPOArgs, TrainArgs):
    """Flags of ``aura finetune``: TrainArgs plus the model, data, adapter and objective choices (GRPO's
    in ``GRPOArgs``, SimPO's and CPO's in ``SimPOArgs``, KTO's in ``KTOArgs``, the reward model's in
    ``RewardArgs``, distill's in ``DistillArgs``)."""

    # the objectives' args sections, each checking its own flags (aura.train.objectives.registry)
    OBJECTIVE_SECTIONS = (GRPOArgs, KTOArgs, SimPOArgs, RewardArgs, DistillArgs)

    base_model: str | None = arg(
        None,
        es="Modelo base: directorio Hugging Face (p. ej. runs/aura/final) o nombre del hub.",
        en="Base model: a Hugging Face directory (e.g. runs/aura/final) or a hub name.",
        short="-m",
    )
    data: str | None = arg(
        None,
        es="Datos de instrucciones: CSV/TSV, JSONL/JSON, Parquet, directorio de "
        "save_to_disk o nombre de dataset del hub (por defecto: la muestra en "
        "español incluida).",
        en="Instruction data: CSV/TSV, JSONL/JSON, Parquet, a save_to_disk directory or a "
        "hub dataset name (default: the embedded Spanish sample).",
    )
    split: str = arg("train", es="Partición de un dataset de Hugging Face.", en="Split of a Hugging Face dataset.")
    data_fallback: str | None = arg(
        None,
        es="Datos que se usan si --data es un dataset del hub y el hub no se puede "
        "alcanzar (sin red o HF_HUB_OFFLINE=1); se dice en el registro.",
        en="Data used when --data is a hub dataset and the hub cannot be reached (no "
        "network, or HF_HUB_OFFLINE=1); said in the log.",
    )
    method: Literal["lora", "qlora", "full"] = arg(
        "lora",
        es="lora (adaptador), qlora (base en 4 bits NF4 + adaptador) o full (todos los pesos).",
        en="lora (adapter), qlora (4-bit NF4 base + adapter) or full (all weights).",
    )
    lora_preset: Literal["frida"] | None = arg(
        None,
        aliases=["--preset"],
        es="Preset de LoRA: frida = r 64, alpha 128, dropout 0.05.",
        en="LoRA preset: frida = r 64, alpha 128, dropout 0.05.",
    )
    lora_r: int | None = arg(None, es="Rango de LoRA (por defecto 16).", en="LoRA rank (default 16).")
    lora_alpha: int | None = arg(None, es="Alpha de LoRA (por defecto 32).", en="LoRA alpha (default 32).")
    lora_dropout: float | None = arg(None, es="Dropout de LoRA (por defecto 0.05).", en="LoRA dropout (default 0.05).")
    target_modules: list[str] = arg(
        [],
        es="Capas con LoRA (por defecto: todas las proyecciones de atención y MLP).",
        en="Layers with LoRA (default: every attention and MLP projection).",
    )
    template: Literal["mistral", "llama3", "chatml", "alpaca", "aura"] | None = arg(
        None,
        es="Plantilla de chat si el modelo no trae una (o para sustituirla).",
        en="Chat template when the model has none (or to replace its own).",
    )
    train_on_prompt: bool = arg(
        False,
        es="Entrena también con los tokens del prompt (por defecto solo las respuestas).",
        en="Also train on prompt tokens (default: responses only).",
    )
    max_length: int = arg(
        2048,
        es="Tokens máximos por ejemplo (o por fila con --packing).",
        en="Maximum tokens per example (or per row with --packing).",
    )
    truncation: Literal["drop", "truncate"] = arg(
        "drop",
        es="Ejemplos más largos que --max-length: drop (descartar) o truncate (recortar).",
        en="Examples longer than --max-length: drop or truncate.",
    )
    packing: bool = arg(
        False,
        es="Junta varios ejemplos por fila de --max-length tokens (sin atención cruzada entre ejemplos). Sin "
        "él, los ejemplos cortos de un micro-lote ya comparten fila donde eso calcula menos.",
        en="Pack several examples per row of --max-length tokens (no attention across examples). Without it, "
        "the short examples of a micro-batch still share a row where that computes less.",
    )
    empty_responses: Literal["skip", "fail"] = arg(
        "skip",
        es="Ejemplos con la respuesta vacía: skip (saltar, con aviso) o fail (error).",
        en="Examples with an empty response: skip (with a warning) or fail (error).",
    )
    val_fraction: float = arg(
        0.05,
        es="Fracción de ejemplos para validación (al menos 1 si hay 2 o más).",
        en="Fraction of examples for validation (at least 1 when there are 2 or more).",
    )
    attn_implementation: Literal["auto", "eager", "sdpa", "flash_attention_2"] = arg(
        "auto",
        es="Atención: auto (flash_attention_2 si está instalada con GPU, si no sdpa).",
        en="Attention: auto (flash_attention_2 when installed with a GPU, else sdpa).",
    )
    trust_remote_code: bool = arg(
        False,
        es="Permite código del repositorio del modelo (solo si confías en él).",
        en="Allow code from the model's repository (only if you trust it).",
    )
    deepspeed: str | None = arg(
        None,
        es="Configuración de DeepSpeed (ds_config.json, ZeRO-2/3); el lote, la "
        "acumulación y el recorte salen de los flags de Aura.",
        en="DeepSpeed config (ds_config.json, ZeRO-2/3); batch, accumulation and clipping come from Aura's flags.",
    )
    # Fine-tuning defaults of the original guides (HF Trainer): no weight decay, beta2 0.999, cosine to 0.
    output_dir: Path = arg(
        Path("runs/finetune"),
        es="Directorio de la ejecución (checkpoints, logs, final/).",
        en="Run directory (checkpoints, logs, final/).",
        short="-o",
    )
    weight_decay: float = arg(0.0, es="Weight decay de AdamW.", en="AdamW weight decay.")
    adam_beta2: float = arg(0.999, es="beta2 de AdamW.", en="AdamW beta2.")
    min_lr: float | None = arg(0.0, es="Tasa final del coseno.", en="Final learning rate of the cosine.")
    objective: Literal[NAMES] = arg(  # the registry's names (aura.train.objectives.registry)
        "sft",
        es="Qué se optimiza: sft (instrucciones), dpo, orpo, simpo o cpo (pares de preferencia "
        "prompt/chosen/rejected; orpo, simpo y cpo sin modelo de referencia), grpo (aprendizaje por refuerzo "
        "con recompensas verificables sobre prompts), kto (respuestas sueltas valoradas buena/mala: "
        "prompt/completion/label), reward (un modelo de recompensa Bradley–Terry a partir de pares de preferencia, "
        "para --reward model:RUTA de grpo) o distill (destilación on-policy de un --teacher sobre datos de "
        "instrucciones); ver docs/finetuning.md.",
        en="What is optimised: sft (instructions), dpo, orpo, simpo or cpo (preference pairs prompt/chosen/rejected; "
        "orpo, simpo and cpo without a reference model), grpo (reinforcement learning with verifiable rewards "
        "on prompts), kto (single answers rated good/bad: prompt/completion/label), reward (a Bradley–Terry "
        "reward model from preference pairs, for grpo's --reward model:PATH) or distill (on-policy distillation "
        "of a --teacher on instruction data); see docs/finetuning.en.md.",
    )
    beta: float | None = arg(
        None,
        es="beta de DPO (fuerza de la referencia; por defecto 0.1), de ORPO (peso del "
        "término de odds ratio; 0.1), de SimPO/CPO (escala de la recompensa; 0.1), de "
        "KTO (0.1), de GRPO (peso del KL a la referencia; por defecto 0: sin pasada de "
        "referencia) o de distill (JSD generalizada: 0 = KL directa, 1 = KL inversa; 0.5).",
        en="DPO beta (strength of the reference; default 0.1), ORPO beta (weight of the "
        "odds-ratio term; 0.1), SimPO/CPO beta (scale of the reward; 0.1), KTO beta (0.1) or "
        "GRPO beta (weight of the KL to the reference; default 0: no reference pass) or distill beta (generalised "
        "JSD: 0 = forward KL, 1 = reverse KL; 0.5).",
    )
    dpo_loss: Literal["sigmoid", "ipo", "hinge"] = arg(
        "sigmoid",
        es="Pérdida de DPO: sigmoid (la del artículo), ipo o hinge.",
        en="DPO loss: sigmoid (the paper's), ipo or hinge.",
    )
    label_smoothing: float = arg(
        0.0,
        es="Suavizado de etiquetas de DPO sigmoid (cDPO: fracción de pares que se suponen invertidos).",
        en="Label smoothing of sigmoid DPO (cDPO: the fraction of pairs assumed flipped).",
    )
    max_prompt_length: int | None = arg(
        None,
        es="Tokens máximos del prompt de un par (se conservan los últimos; por "
        "defecto sin límite propio, solo --max-length).",
        en="Maximum prompt tokens of a pair (the last ones are kept; default no limit of its own, only --max-length).",
    )
    precompute_ref: bool = arg(
        False,
        es="DPO/KTO: calcula las log-probabilidades de la referencia una vez antes de "
        "entrenar (ahorra memoria y un forward por paso).",
        en="DPO/KTO: compute the reference log-probabilities once before training (saves memory "
        "and a forward pass per step).",
    )
    epochs: int | None = arg(
        None,
        es="Épocas sobre los datos (por defecto: auto, según el número de ejemplos; ver la tabla del README).",
        en="Epochs over the data (default: auto, by the number of examples; see the README's table).",
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0 <= self.val_fraction < 1:
            raise AuraError(M("val_fraction", value=self.val_fraction))
        for flag, value in (("max-length", self.max_length), ("lora-r", self.lora_r), ("lora-alpha", self.lora_alpha)):
            if value is not None and value <= 0:
                raise AuraError(M("positive", flag=flag, value=value))
        if self.lora_dropout is not None and not 0 <= self.lora_dropout < 1:
            raise AuraError(M("dropout", value=self.lora_dropout))
        self._check_objective()
        if self.method == "full":
            for flag, value in (
                ("lora-r", self.lora_r),
                ("lora-alpha", self.lora_alpha),
                ("lora-preset", self.lora_preset),
                ("target-modules", self.target_modules),
            ):
                if value:
                    raise AuraError(M("lora_full", flag=flag))

    def _check_objective(self) -> None:
        """The chosen objective's registry entry checks the objectives' flags (``ObjectiveSetup.check_args``)."""
        if self.objective not in OBJECTIVES:  # a config built in Python: the error of a YAML value
            from aura.core.config import coerce

            coerce("objective", Literal[NAMES], self.objective)
        setup_class(self.objective).check_args(self)

    def lora_settings(self) -> dict:
        """r, alpha, dropout: explicit flags > --lora-preset > the guide's defaults (16, 32, 0.05)."""
        out = {"lora_r": 16, "lora_alpha": 32, "lora_dropout": 0.05}
        if self.lora_preset:
            out.update(LORA_PRESETS[self.lora_preset])
        for key in out:
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        return out

    def optimisation_defaults(self) -> dict:
        """Values for ``aura.train.args.with_defaults``: batch 2 x accumulation 4, the objective's learning
        rate (``ObjectiveSetup.learning_rate``: SFT 2e-4 with LoRA, 2e-5 full; DPO/ORPO 5e-5, 5e-7); warm-up 3 %
        (optim.schedule.default_warmup) and cosine come from the loop."""
        return {
            "batch_size": 2,
            "gradient_accumulation_steps": 4,
            "learning_rate": setup_class(self.objective).learning_rate(self.method),
            "gradient_checkpointing": False,
        }


def auto_epochs_line(n_examples: int) -> tuple[int, str]:
    """(epochs, the line to print): "Epochs: 5 (small dataset ...; 251 examples). Override with --epochs N."."""
    epochs, reason = auto_epochs(n_examples)
    return epochs, M("epochs_auto", epochs=epochs, reason=reason, n=n_examples)


def check_output_beside_base(output_dir, base: str) -> None:
    """Refuse, with what to do instead, an --output-dir that is the base model's folder or the run folder
    holding it (``aura finetune --base-model runs/aura/final --output-dir runs/aura``)."""
    base_path = Path(base).expanduser()
    if not base_path.is_dir():  # a hub name
        return
    out, base_path = Path(output_dir).expanduser().resolve(), base_path.resolve()
    if out != base_path and out not in base_path.parents:
        return
    typed = Path(output_dir)
    in_run = base_path.name in ("final", "best") or base_path.name.startswith(("checkpoint-", "interrupt-"))
    home = typed.parent if out == base_path and in_run else typed  # the run folder, as the user wrote it
    suggest = home.parent / f"{home.name}-finetune"
    raise AuraError(
        M(
            "base_folder",
            out=output_dir,
            base=base,
            suggest=suggest,
            relation=M("rel_is" if out == base_path else "rel_holds"),
        )
    )


def resolve_base_name(cfg: FinetuneConfig) -> str:
    """--base-model, or the pretraining demo's final/ when it exists (said so), or a clear error."""
    if cfg.base_model:
        return cfg.base_model
    for path in DEMO_BASES:
        if (path / "config.json").is_file():
            console.info(M("demo_base", path=path))
            return str(path)
    raise AuraError(M("no_base"))
