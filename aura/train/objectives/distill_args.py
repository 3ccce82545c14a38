"""The flags of ``aura finetune --objective distill`` (a part of ``FinetuneConfig``) and their checks.

Names and defaults are TRL ``GKDConfig``'s (``lmbda``, ``max_new_tokens``, ``seq_kd``; ``--beta`` and
``--temperature`` are shared with the other objectives, their distill defaults set by ``DistillSetup``)."""

from __future__ import annotations

from dataclasses import dataclass

from aura.core.config import arg
from aura.core.errors import AuraError
from aura.core.i18n import Messages

M = Messages(
    "distill_args",
    {
        "distill_only": (
            "--{flag} solo se aplica a --objective distill (el objetivo es '{objective}').",
            "--{flag} only applies to --objective distill (the objective is '{objective}').",
        ),
        "not_distill": (
            "--{flag} no se aplica a --objective distill: {why}",
            "--{flag} does not apply to --objective distill: {why}",
        ),
        "why_pref": ("es una opción de los objetivos de preferencia.", "it is an option of the preference objectives."),
        "why_grpo": (
            "es una opción de GRPO (distill usa --max-new-tokens y --temperature).",
            "it is an option of GRPO (distill uses --max-new-tokens and --temperature).",
        ),
        "why_rows": (
            "las respuestas muestreadas por el alumno sustituyen a las de los datos: cada fila es un prompt y "
            "su respuesta, sin prompt entrenado ni filas empaquetadas.",
            "the student's sampled completions replace the data's: each row is one prompt and its answer, with "
            "no trained prompt and no packed rows.",
        ),
        "no_teacher": (
            "--objective distill necesita --teacher: el directorio del modelo maestro (formato Hugging Face, "
            "con el mismo tokenizador que --base-model).",
            "--objective distill needs --teacher: the teacher model's directory (Hugging Face format, with the "
            "same tokenizer as --base-model).",
        ),
        "fraction": (
            "--{flag} debe estar entre 0 y 1 (recibido: {value}).",
            "--{flag} must be between 0 and 1 (got: {value}).",
        ),
        "zero3": (
            "--objective distill no admite DeepSpeed ZeRO-3 ({path}: zero_optimization.stage 3): el alumno genera "
            "sus respuestas con todos sus pesos, y ZeRO-3 los reparte. Usa la etapa 2 (o 0/1) o --strategy fsdp, "
            "que junta los pesos para generar.",
            "--objective distill does not take DeepSpeed ZeRO-3 ({path}: zero_optimization.stage 3): the student "
            "samples its answers with all of its weights, and ZeRO-3 partitions them. Use stage 2 (or 0/1) or "
            "--strategy fsdp, which gathers the weights to sample.",
        ),
        "positive": (
            "--{flag} debe ser mayor que 0 (recibido: {value}).",
            "--{flag} must be greater than 0 (got: {value}).",
        ),
    },
)


@dataclass
class DistillArgs:
    """On-policy distillation's flags (TRL GKDConfig's names and defaults)."""

    SECTION = "distill"  # its name for ObjectiveSetup.sections (a class attribute, not a flag)

    teacher: str | None = arg(
        None,
        es="distill: directorio del modelo maestro (Hugging Face, mismo tokenizador que --base-model); congelado, "
        "puntúa cada token de las respuestas.",
        en="distill: the teacher model's directory (Hugging Face, the same tokenizer as --base-model); frozen, it "
        "scores every token of the answers.",
    )
    lmbda: float = arg(
        0.5,
        es="distill: probabilidad de que las respuestas de un micro-lote sean muestras del propio alumno "
        "(on-policy); si no, las de los datos.",
        en="distill: probability that a micro-batch's answers are the student's own samples (on-policy); "
        "otherwise the data's.",
    )
    max_new_tokens: int = arg(
        128,
        es="distill: tokens máximos de cada respuesta muestreada.",
        en="distill: maximum tokens of each sampled answer.",
    )
    seq_kd: bool = arg(
        False,
        es="distill: en los micro-lotes que no son on-policy, las respuestas las genera el maestro (KD de "
        "secuencias) en lugar de tomarse de los datos.",
        en="distill: in the micro-batches that are not on-policy, the teacher generates the answers "
        "(sequence-level KD) instead of taking the data's.",
    )

    def check_unused(self) -> None:
        """Under another objective: none of distill's flags given."""
        for flag, changed in (
            ("teacher", self.teacher is not None),
            ("lmbda", self.lmbda != 0.5),
            ("max-new-tokens", self.max_new_tokens != 128),
            ("seq-kd", self.seq_kd),
        ):
            if changed:
                raise AuraError(M("distill_only", flag=flag, objective=self.objective))

    def check_section(self) -> None:
        """Under --objective distill: a teacher, a probability, a positive length."""
        if not self.teacher:
            raise AuraError(M("no_teacher"))
        if not 0 <= self.lmbda <= 1:
            raise AuraError(M("fraction", flag="lmbda", value=self.lmbda))
        if self.max_new_tokens <= 0:
            raise AuraError(M("positive", flag="max-new-tokens", value=self.max_new_tokens))
