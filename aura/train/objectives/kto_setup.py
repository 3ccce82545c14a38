"""The ``aura finetune`` side of KTO (``aura.train.objectives.kto``): DPO's steps (``PreferenceSetup``) on single
answers rated good or bad, and KTO's parts: its data, its batch check, its imbalance warning, its loss."""

from __future__ import annotations

from aura.core import console
from aura.core.errors import AuraError
from aura.core.i18n import Messages
from aura.train.objectives.kto_args import M as AM
from aura.train.objectives.preference_setup import PreferenceSetup

M = Messages(
    "kto_setup",
    {
        "demo_data": (
            "Sin --data: se usan las respuestas valoradas en español incluidas ({path}).",
            "No --data: using the embedded Spanish rated answers ({path}).",
        ),
        "examples": (
            "Ejemplos: {train} de entrenamiento ({good:bueno|buenos}, {bad:malo|malos}), {val} de "
            "validación; {tokens:token|tokens} de respuesta por época.",
            "Examples: {train} for training ({good:good one|good ones}, {bad:bad one|bad ones}), {val} for "
            "validation; {tokens:,} answer tokens per epoch.",
        ),
        "imbalance": (
            "Hay {good:respuesta buena|respuestas buenas} y {bad:mala|malas}, y los pesos no compensan la "
            "diferencia. Según tus datos conviene O BIEN --desirable-weight en [{d_low!s}, {d_high!s}] O BIEN "
            "--undesirable-weight en [{u_low!s}, {u_high!s}] (no ambos; ecuación 8 del artículo de KTO).",
            "There are {good:good answer|good answers} and {bad:bad one|bad ones}, and the weights do not make "
            "up for the difference. Based on your data, use EITHER --desirable-weight in [{d_low!s}, "
            "{d_high!s}] OR --undesirable-weight in [{u_low!s}, {u_high!s}] (not both; Eq. 8 of the KTO paper).",
        ),
        "batch": (
            "KTO necesita al menos 2 ejemplos por micro-lote entre todos los procesos (--batch-size {batch} x "
            "{world}): el punto de referencia (KL) es una media sobre el micro-lote y con uno solo sería una "
            "única muestra (TRL también lo exige). Usa --batch-size 2 o más.",
            "KTO needs at least 2 examples per micro-batch over all processes (--batch-size {batch} x {world}): "
            "the reference point (KL) is a mean over the micro-batch, and with one example it would be a single "
            "sample (TRL requires it too). Use --batch-size 2 or more.",
        ),
        "padding_free": (
            "Las respuestas de un micro-lote (y, aparte, las del KL) comparten fila cuando así se calcula menos "
            "(cada una solo se ve a sí misma): menos relleno, las mismas log-probabilidades.",
            "The answers of a micro-batch (and, apart, the KL answers) share a row where that computes less (each "
            "one sees only itself): less padding, the same log-probabilities.",
        ),
        "no_val": (
            "Sin ejemplos de validación (--val-fraction {fraction}): no habrá pérdida de validación ni best/.",
            "No validation examples (--val-fraction {fraction}): there will be no validation loss and no best/.",
        ),
    },
)


def imbalance_bounds(n_good: int, n_bad: int, desirable: float, undesirable: float) -> dict | None:
    """TRL's check (Eq. 8 of the KTO paper): None when the counts are equal or either weight is in its range,
    else the two ranges to choose from."""
    n_good, n_bad = max(n_good, 1), max(n_bad, 1)
    if n_good == n_bad:
        return None
    d_low, d_high = round(n_bad * undesirable / n_good, 2), round(n_bad * undesirable / n_good * 1.33, 2)
    u_low, u_high = round(n_good * desirable / n_bad / 1.33, 2), round(n_good * desirable / n_bad, 2)
    if d_low <= desirable <= d_high or u_low <= undesirable <= u_high:
        return None
    return {"d_low": d_low, "d_high": d_high, "u_low": u_low, "u_high": u_high}


class KTOSetup(PreferenceSetup):
    extra_forwards = 3  # the reference on the answers and on the KL pairs, the policy on the KL pairs
    """KTO: rated answers, each with a mismatched answer for the KL estimate; a reference as DPO's."""

    name, label = "kto", "KTO"
    sections = ("kto",)
    messages = M

    @classmethod
    def refuse(cls, cfg) -> None:
        """None of DPO's loss options; the loss rates the answer only."""
        for flag, bad, why in (
            ("dpo-loss", cfg.dpo_loss != "sigmoid", "why_dpo"),
            ("label-smoothing", cfg.label_smoothing, "why_dpo"),
            ("train-on-prompt", cfg.train_on_prompt, "why_prompt"),
        ):
            if bad:
                raise AuraError(AM("not_kto", flag=flag, why=AM(why)))

    def read(self, cfg, data) -> list:
        from aura.data.kto import load_unpaired

        return load_unpaired(data, label_column=cfg.label_column, split=cfg.split)

    def default_data(self):
        from aura.data.kto import DEFAULT_FEEDBACK

        return DEFAULT_FEEDBACK

    def answer(self, item) -> dict:
        return item.completion

    def encode_items(self, items: list, tok, **enc) -> list:
        """Token ids; each side's KL partners come from its own examples."""
        from aura.data.kto import encode_unpaired

        return encode_unpaired(items, tok, **enc)

    def source_class(self):
        from aura.data.kto import UnpairedSource

        return UnpairedSource

    def collate(self):
        from aura.data.kto import collate_unpaired

        return collate_unpaired

    def reference_view(self, batch):
        from aura.train.objectives.kto import reference_view

        return reference_view(batch)

    def shares_prompt(self, model) -> bool:
        """Whether the reference's rows (an answer and its mismatched one) take the prompt once."""
        from aura.train.objectives import preference

        return preference.shares_prompt(model, kto=True)

    def may_pack(self, cfg) -> bool:
        """The answers, and apart from them the KL answers, whatever the reference's rows."""
        return cfg.batch_size > 1

    def window(self, cfg) -> int:
        """One: the KL baseline is estimated per micro-batch, from the answers it holds, so they stay together."""
        return 1

    def check_batch(self, cfg, dist) -> None:
        if cfg.batch_size * dist.world_size < 2:
            raise AuraError(M("batch", batch=cfg.batch_size, world=dist.world_size))

    def say_sources(self, cfg, train_ex: list, val_ex: list, data) -> None:
        good = sum(e.label for e in train_ex)
        console.info(
            M(
                "examples",
                train=len(train_ex),
                good=good,
                bad=len(train_ex) - good,
                val=len(val_ex),
                tokens=data.num_label_tokens,
            )
        )
        bounds = imbalance_bounds(good, len(train_ex) - good, cfg.desirable_weight, cfg.undesirable_weight)
        if bounds:
            console.warn(M("imbalance", good=good, bad=len(train_ex) - good, **bounds))

    def make(self, cfg, *, ref_model, run):
        from aura.train.objectives.kto import KTO

        return KTO(
            beta=cfg.beta,
            desirable_weight=cfg.desirable_weight,
            undesirable_weight=cfg.undesirable_weight,
            ref_model=ref_model,
            dist=run.dist,
        )
