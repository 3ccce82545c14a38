"""The flags of ``aura finetune --objective reward`` (a part of ``FinetuneConfig``) and their checks."""

from __future__ import annotations

from dataclasses import dataclass

from aura.core.config import arg
from aura.core.errors import AuraError
from aura.core.i18n import Messages

M = Messages(
    "reward_args",
    {
        "reward_only": (
            "--{flag} solo se aplica a --objective reward (el objetivo es '{objective}').",
            "--{flag} only applies to --objective reward (the objective is '{objective}').",
        ),
        "negative": (
            "--{flag} no puede ser negativo (recibido: {value}).",
            "--{flag} cannot be negative (got: {value}).",
        ),
    },
)


@dataclass
class RewardArgs:
    """The reward model's flags (TRL RewardConfig's names)."""

    SECTION = "reward"  # its name for ObjectiveSetup.sections (a class attribute, not a flag)

    center_rewards_coefficient: float | None = arg(
        None,
        es="Modelo de recompensa: peso del término que centra las puntuaciones en 0, c·(r_elegida + r_rechazada)² "
        "(center_rewards_coefficient de TRL; p. ej. 0.01; por defecto sin él).",
        en="Reward model: weight of the term that centres the scores on 0, c·(r_chosen + r_rejected)² (TRL's "
        "center_rewards_coefficient; e.g. 0.01; default none).",
    )

    def check_unused(self) -> None:
        """Under another objective: --center-rewards-coefficient not given."""
        if self.center_rewards_coefficient is not None:
            raise AuraError(M("reward_only", flag="center-rewards-coefficient", objective=self.objective))

    def check_section(self) -> None:
        """Under --objective reward: no negative coefficient."""
        if self.center_rewards_coefficient is not None and self.center_rewards_coefficient < 0:
            raise AuraError(M("negative", flag="center-rewards-coefficient", value=self.center_rewards_coefficient))
