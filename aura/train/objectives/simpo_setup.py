"""The ``aura finetune`` side of SimPO and CPO (``aura.train.objectives.simpo``): DPO's pairs and steps
(``PreferenceSetup``), no reference model, and the flags that need one refused."""

from __future__ import annotations

from aura.core import console
from aura.core.errors import AuraError
from aura.core.i18n import Messages
from aura.train.objectives.preference_setup import PreferenceSetup
from aura.train.objectives.simpo_args import M as AM

M = Messages(
    "simpo_setup",
    {
        "no_reference": (
            "{objective}: sin modelo de referencia (ni copia congelada ni pasada con el adaptador desactivado).",
            "{objective}: no reference model (no frozen copy, no pass with the adapter disabled).",
        ),
    },
)


class SimPOSetup(PreferenceSetup):
    """SimPO: length-normalised log-probs and a target margin, no reference."""

    name, label = "simpo", "SimPO"
    sections = ("simpo",)
    reference_free = True

    @classmethod
    def refuse(cls, cfg) -> None:
        """No flag that needs a reference model or DPO's loss."""
        if cfg.precompute_ref:
            raise AuraError(AM("no_reference", objective=cls.name, name=cls.label))
        for flag, bad, why in (
            ("dpo-loss", cfg.dpo_loss != "sigmoid", "why_loss"),
            ("train-on-prompt", cfg.train_on_prompt, "why_prompt"),
        ):
            if bad:
                raise AuraError(AM("not_here", flag=flag, objective=cls.name, why=AM(why, name=cls.label)))

    def make(self, cfg, *, ref_model, run):
        from aura.train.objectives.simpo import SimPO

        console.info(M("no_reference", objective=self.label))
        return SimPO(
            name=self.name, beta=cfg.beta, gamma=cfg.gamma, cpo_alpha=cfg.cpo_alpha, label_smoothing=cfg.label_smoothing
        )


class CPOSetup(SimPOSetup):
    """CPO: summed log-probs and the chosen answer's NLL (``--cpo-alpha``), no reference."""

    name, label = "cpo", "CPO"
