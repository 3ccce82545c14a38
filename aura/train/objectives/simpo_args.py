"""The flags of ``aura finetune --objective simpo|cpo`` (a part of ``FinetuneConfig``) and their checks."""

from __future__ import annotations

from dataclasses import dataclass

from aura.core.config import arg
from aura.core.errors import AuraError
from aura.core.i18n import Messages

M = Messages(
    "simpo_args",
    {
        "gamma_only": (
            "--gamma solo se aplica a --objective simpo (el objetivo es '{objective}').",
            "--gamma only applies to --objective simpo (the objective is '{objective}').",
        ),
        "alpha_only": (
            "--cpo-alpha solo se aplica a --objective simpo o cpo (el objetivo es '{objective}').",
            "--cpo-alpha only applies to --objective simpo or cpo (the objective is '{objective}').",
        ),
        "no_reference": (
            "--precompute-ref no se aplica a --objective {objective}: {name} no usa modelo de referencia, "
            "no hay log-probabilidades que calcular antes de entrenar. Quita --precompute-ref.",
            "--precompute-ref does not apply to --objective {objective}: {name} uses no reference model, "
            "there are no log-probabilities to compute before training. Drop --precompute-ref.",
        ),
        "not_here": (
            "--{flag} no se aplica a --objective {objective} ({why}).",
            "--{flag} does not apply to --objective {objective} ({why}).",
        ),
        "why_loss": (
            "la pérdida de {name} es la sigmoide; --dpo-loss elige la de DPO",
            "{name}'s loss is the sigmoid one; --dpo-loss picks DPO's",
        ),
        "why_prompt": (
            "la pérdida y la NLL cubren solo las respuestas, como en TRL",
            "the loss and the NLL cover the answers only, as in TRL",
        ),
        "negative": (
            "--{flag} no puede ser negativo (recibido: {value}).",
            "--{flag} cannot be negative (got: {value}).",
        ),
    },
)
SIMPO_GAMMA, CPO_ALPHA = 0.5, 1.0  # TRL CPOConfig's simpo_gamma and cpo_alpha


@dataclass
class SimPOArgs:
    """SimPO's and CPO's flags (TRL CPOConfig's names and defaults)."""

    SECTION = "simpo"  # its name for ObjectiveSetup.sections (a class attribute, not a flag)

    gamma: float | None = arg(
        None,
        es="SimPO: margen objetivo entre las recompensas de la respuesta elegida y la "
        "rechazada (simpo_gamma de TRL; por defecto 0.5).",
        en="SimPO: target margin between the chosen and the rejected answer's rewards (TRL's "
        "simpo_gamma; default 0.5).",
    )
    cpo_alpha: float | None = arg(
        None,
        es="SimPO/CPO: peso de la NLL de la respuesta elegida (por defecto 1 con cpo, 0 con simpo).",
        en="SimPO/CPO: weight of the chosen answer's NLL (default 1 with cpo, 0 with simpo).",
    )

    def check_unused(self) -> None:
        """Under an objective without this section: neither --gamma nor --cpo-alpha given."""
        if self.gamma is not None:
            raise AuraError(M("gamma_only", objective=self.objective))
        if self.cpo_alpha is not None:
            raise AuraError(M("alpha_only", objective=self.objective))

    def check_section(self) -> None:
        """Under --objective simpo or cpo: --gamma only with simpo, no negative value; the defaults filled in."""
        if self.gamma is not None and self.objective != "simpo":
            raise AuraError(M("gamma_only", objective=self.objective))
        for flag, value in (("gamma", self.gamma), ("cpo-alpha", self.cpo_alpha)):
            if value is not None and value < 0:
                raise AuraError(M("negative", flag=flag, value=value))
        if self.objective == "simpo" and self.gamma is None:
            self.gamma = SIMPO_GAMMA
        if self.cpo_alpha is None:
            self.cpo_alpha = CPO_ALPHA if self.objective == "cpo" else 0.0
