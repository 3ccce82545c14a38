"""Public Spanish fine-tuning datasets on the Hugging Face hub that Aura's pipelines name, with what their
cards say (licence, size, columns, source), and the offline fallback when the hub cannot be reached.

One entry per dataset (a registry: ``aura pipeline plan`` reads it to print the licence and size and how much
of a stage's budget the data fills; ``aura finetune`` to name the licence in its log). Figures are the
dataset cards' (rows, bytes); ``chars_per_example`` is an estimate where the card gives no characters, and
says how it was made. Read with ``datasets.load_dataset(..., streaming=True)`` (``aura.data.sft``): nothing
is downloaded whole before training reads it.
"""

from __future__ import annotations

from dataclasses import dataclass

from aura.core import console
from aura.core.i18n import Messages

M = Messages(
    "hub_datasets",
    {
        "fallback": (
            "--data {name} es un dataset del hub y el hub ({host}) no se puede alcanzar (sin red, o "
            "HF_HUB_OFFLINE=1): se usa --data-fallback {fallback} en su lugar. El modelo se ajusta con "
            "esos datos, no con {name}; reanuda o repite la etapa con red para usar el dataset.",
            "--data {name} is a hub dataset and the hub ({host}) cannot be reached (no network, or "
            "HF_HUB_OFFLINE=1): using --data-fallback {fallback} instead. The model is tuned on that data, "
            "not on {name}; rerun the stage with a network to use the dataset.",
        ),
        "card": ("Datos: {name} ({licence}; {size}; {source}).", "Data: {name} ({licence}; {size}; {source})."),
    },
)


@dataclass(frozen=True)
class HubDataset:
    """One dataset's card, as far as a plan and a log need it."""

    name: str  # owner/name on the hub
    kind: str  # "sft" (conversations) or "preference" (prompt/chosen/rejected)
    licence: str  # the card's licence field
    examples: int  # rows of the split a stage reads (the card's)
    size: tuple[str, str]  # the card's size in words (files, bytes): (Spanish, English)
    columns: str  # the columns Aura reads, as they are named there
    chars_per_example: int  # characters of text per row (see ``basis``)
    basis: str  # how chars_per_example was found
    provenance: str  # where the text comes from (translation, synthetic, ...)

    @property
    def size_text(self) -> str:
        from aura.core.i18n import bi

        return bi(*self.size)

    @property
    def source(self) -> str:
        return f"https://huggingface.co/datasets/{self.name}"


CATALOGUE: dict[str, HubDataset] = {
    d.name: d
    for d in (
        HubDataset(
            name="Iker/OpenHermes-2.5-Spanish",
            kind="sft",
            licence="apache-2.0",
            examples=1_000_000,
            size=(
                "~1 millón de conversaciones (según el visor del hub), 4 ficheros parquet, 905 MB",
                "~1M conversations (the hub viewer's count), 4 parquet files, 905 MB",
            ),
            columns="conversations: [{from: system|human|gpt, value}] (ShareGPT)",
            chars_per_example=1_900,
            basis="the English original (teknium/OpenHermes-2.5: 1,683,920,876 bytes over 1,001,551 rows, ~1,680 "
            "per row) plus ~13 % for Spanish's longer wording: an estimate",
            provenance="teknium/OpenHermes-2.5 (synthetic, mostly GPT-4) machine-translated to Spanish with "
            "Iker/TowerInstruct-13B-v0.1-EN2ES",
        ),
        HubDataset(
            name="SiguienteGlobal/orpo-es-v0.0.2",
            kind="preference",
            licence="mit",
            examples=7_190,
            size=(
                "7190 pares de entrenamiento + 147 de prueba, 87 MB de texto (entrenamiento), 45 MB de descarga",
                "7,190 train + 147 test pairs, 87 MB of text (train), 45 MB download",
            ),
            columns="prompt, chosen, rejected (text)",
            chars_per_example=12_000,
            basis="the card's 87,151,300 bytes of the train split over its 7,190 rows (bytes ~ characters in "
            "Spanish text)",
            provenance="Spanish preference pairs for DPO/ORPO published by SiguienteGlobal (the card gives no "
            "further provenance)",
        ),
    )
}


def card(name: str | None) -> HubDataset | None:
    return CATALOGUE.get(str(name or ""))


def choose_data(data: str | None, fallback: str | None, *, flag: str = "--data") -> str | None:
    """``data``, or ``fallback`` (said in the log) when ``data`` is a hub name that cannot be read now: the hub
    is unreachable (or ``HF_HUB_OFFLINE=1``). A local path is always used as it is."""
    from pathlib import Path

    from aura.core.hub import hub_host, hub_reachable, looks_like_path

    if not data or not fallback or Path(str(data)).expanduser().exists() or looks_like_path(str(data)):
        return data
    if hub_reachable():
        known = card(data)
        if known is not None:
            console.info(M("card", name=known.name, licence=known.licence, size=known.size_text, source=known.source))
        return data
    console.warn(M("fallback", name=data, host=hub_host(), fallback=fallback))
    return fallback
