"""The flags of ``aura finetune --objective kto`` (a part of ``FinetuneConfig``) and their checks."""

from __future__ import annotations

from dataclasses import dataclass

from aura.core.config import arg
from aura.core.errors import AuraError
from aura.core.i18n import Messages

M = Messages(
    "kto_args",
    {
        "kto_only": (
            "--{flag} solo se aplica a --objective kto (el objetivo es '{objective}').",
            "--{flag} only applies to --objective kto (the objective is '{objective}').",
        ),
        "not_kto": (
            "--{flag} no se aplica a --objective kto: {why}",
            "--{flag} does not apply to --objective kto: {why}",
        ),
        "why_dpo": ("es una opción de la pérdida de DPO.", "it is an option of DPO's loss."),
        "why_prompt": ("la pérdida valora solo la respuesta.", "the loss rates the answer only."),
        "weight": (
            "--{flag} debe ser mayor que 0 (recibido: {value}).",
            "--{flag} must be greater than 0 (got: {value}).",
        ),
    },
)


@dataclass
class KTOArgs:
    """KTO's flags (TRL KTOConfig's names and defaults)."""

    SECTION = "kto"  # its name for ObjectiveSetup.sections (a class attribute, not a flag)

    desirable_weight: float = arg(
        1.0,
        es="KTO: peso de la pérdida de las respuestas buenas (label verdadero).",
        en="KTO: weight of the loss of the good answers (label true).",
    )
    undesirable_weight: float = arg(
        1.0,
        es="KTO: peso de la pérdida de las respuestas malas (label falso).",
        en="KTO: weight of the loss of the bad answers (label false).",
    )
    label_column: str = arg(
        "label",
        es="KTO: columna de los datos con la valoración (true/false, 1/0, sí/no), p. ej. me_gusta.",
        en="KTO: the data column holding the verdict (true/false, 1/0, yes/no), e.g. me_gusta.",
    )

    def check_unused(self) -> None:
        """Under another objective: none of KTO's flags given."""
        for flag, changed in (
            ("desirable-weight", self.desirable_weight != 1.0),
            ("undesirable-weight", self.undesirable_weight != 1.0),
            ("label-column", self.label_column != "label"),
        ):
            if changed:
                raise AuraError(M("kto_only", flag=flag, objective=self.objective))

    def check_section(self) -> None:
        """Under --objective kto: positive weights."""
        for flag, value in (
            ("desirable-weight", self.desirable_weight),
            ("undesirable-weight", self.undesirable_weight),
        ):
            if not value > 0:
                raise AuraError(M("weight", flag=flag, value=value))
