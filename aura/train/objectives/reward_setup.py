"""The ``aura finetune`` side of reward models (``aura.train.objectives.reward``): DPO's pairs and steps
(``PreferenceSetup``: the data, the template, the split, the batches of whole sequences), the base loaded with
a one-output score head (``aura.train.adapters.SEQ_CLS``), no reference model, and the flags of the policy
objectives refused."""

from __future__ import annotations

from aura.core import console
from aura.core.errors import AuraError
from aura.core.i18n import Messages
from aura.train.objectives.preference_setup import PreferenceSetup

M = Messages(
    "reward_setup",
    {
        "not_here": (
            "--{flag} no se aplica a --objective reward: el modelo de recompensa puntúa secuencias enteras "
            "(prompt y respuesta) con la pérdida de Bradley–Terry, sin beta ni modelo de referencia. Quita --{flag}.",
            "--{flag} does not apply to --objective reward: the reward model scores whole sequences (prompt and "
            "answer) with the Bradley–Terry loss, without beta or a reference model. Drop --{flag}.",
        ),
        "packing": (
            "--packing no se puede usar con --objective reward: cada respuesta va en su propia fila.",
            "--packing cannot be used with --objective reward: each answer has a row of its own.",
        ),
        "some_margins": (
            "La columna 'margin' está en {have} de {total:par|pares} (p. ej. falta en {where}): o todos los pares "
            "la tienen o ninguno.",
            "The 'margin' column is in {have} of {total:pair|pairs} (e.g. missing at {where}): either every pair has "
            "it or none.",
        ),
        "model": (
            "Modelo de recompensa: la base con una cabeza 'score' de una salida (Bradley–Terry{extras}).",
            "Reward model: the base with a one-output 'score' head (Bradley–Terry{extras}).",
        ),
        "with_margin": (", con el margen de cada par", ", with each pair's margin"),
        "with_center": (", centrado con coeficiente {c}", ", centred with coefficient {c}"),
    },
)
REWARD_LR_LORA, REWARD_LR_FULL = 1e-4, 1e-5  # TRL RewardConfig's default is 1e-4


class RewardSetup(PreferenceSetup):
    """A Bradley–Terry reward model from preference pairs."""

    name, label = "reward", "Reward"
    sections = ("reward",)
    reference_free = True
    head = "sequence_classification"  # aura.train.adapters.SEQ_CLS (not imported here: light)

    @classmethod
    def check_across(cls, cfg) -> None:
        """No flag of the policy objectives (beta, DPO's loss, a reference, the prompt's NLL), no --packing,
        a valid --max-prompt-length."""
        from aura.train.objectives.preference_setup import M as PM

        if cfg.packing:
            raise AuraError(M("packing"))
        for flag, given in (
            ("beta", cfg.beta is not None),
            ("dpo-loss", cfg.dpo_loss != "sigmoid"),
            ("label-smoothing", cfg.label_smoothing),
            ("precompute-ref", cfg.precompute_ref),
            ("train-on-prompt", cfg.train_on_prompt),
        ):
            if given:
                raise AuraError(M("not_here", flag=flag))
        if cfg.max_prompt_length is not None and not 0 < cfg.max_prompt_length < cfg.max_length:
            raise AuraError(PM("prompt_length", value=cfg.max_prompt_length, max_length=cfg.max_length))

    @classmethod
    def learning_rate(cls, method: str) -> float:
        return REWARD_LR_FULL if method == "full" else REWARD_LR_LORA

    def may_pack(self, cfg) -> bool:
        """A score is each row's last real token's (``sequence_scores``): two rows per pair, unless it is one."""
        return False

    def load(self, cfg) -> list:
        """The pairs (``PreferenceSetup.load``); a ``margin`` column in every pair or in none."""
        pairs = super().load(cfg)
        missing = [p.where for p in pairs if p.margin is None]
        if missing and len(missing) < len(pairs):
            raise AuraError(M("some_margins", have=len(pairs) - len(missing), total=len(pairs), where=missing[0]))
        self.margins = not missing
        return pairs

    def shares_prompt(self, model) -> bool:
        """A pair in one row, its prompt once, where the scores agree with two rows (``preference.shares_prompt``
        with the reward model's scores)."""
        from aura.train.objectives import preference
        from aura.train.objectives.reward import sequence_scores

        pad_id = preference.peft_model(model).config.pad_token_id
        return preference.shares_prompt(model, values=sequence_scores, pad_id=pad_id)

    def make(self, cfg, *, ref_model, run):
        from aura.core.i18n import num
        from aura.train.objectives.reward import BradleyTerry

        center = cfg.center_rewards_coefficient or 0.0
        extras = (M("with_margin") if self.margins else "") + (M("with_center", c=num(center, "g")) if center else "")
        console.info(M("model", extras=extras))
        return BradleyTerry(center=center)
