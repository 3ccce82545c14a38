"""The ``aura finetune`` side of the preference objectives: ``PreferenceSetup``, the steps DPO, ORPO, SimPO, CPO
and KTO share (the data of --data or the embedded sample, the template's conversations, the --val-fraction split,
the batch sources with the prompt once per row where the model takes the mask, the reference: the base with the
adapter disabled, a frozen copy or log-probabilities precomputed), and the DPO and ORPO entries of the
registry. The losses are in ``aura.train.objectives.preference`` (imported when a run builds them)."""

from __future__ import annotations

from aura.core import console
from aura.core.errors import AuraError
from aura.core.i18n import Messages
from aura.train.objectives.registry import Limited, ObjectiveSetup

M = Messages(
    "preference_setup",
    {
        "demo_data": (
            "Sin --data: se usan los pares de preferencia en español incluidos ({path}).",
            "No --data: using the embedded Spanish preference pairs ({path}).",
        ),
        "pairs": (
            "Pares: {train} de entrenamiento, {val} de validación; {tokens:token|tokens} de respuesta por época.",
            "Pairs: {train} for training, {val} for validation; {tokens:,} answer tokens per epoch.",
        ),
        "no_val": (
            "Sin pares de validación (--val-fraction {fraction}): no habrá pérdida de validación ni best/.",
            "No validation pairs (--val-fraction {fraction}): there will be no validation loss and no best/.",
        ),
        "padding_free": (
            "Las respuestas de un micro-lote comparten fila cuando así se calcula menos (cada una solo se ve a sí "
            "misma): menos relleno, las mismas log-probabilidades.",
            "The answers of a micro-batch share a row where that computes less (each one sees only itself): less "
            "padding, the same log-probabilities.",
        ),
        "reference": ("Referencia de {objective}: {how}.", "{objective} reference: {how}."),
        "ref_adapter": (
            "el modelo base con el adaptador desactivado (sin segunda copia en memoria)",
            "the base model with the adapter disabled (no second copy in memory)",
        ),
        "ref_copy": ("una copia congelada del modelo inicial", "a frozen copy of the starting model"),
        "ref_pre": (
            "log-probabilidades calculadas una vez antes de entrenar (--precompute-ref)",
            "log-probabilities computed once before training (--precompute-ref)",
        ),
        "positive": (
            "--{flag} debe ser mayor que 0 (recibido: {value}).",
            "--{flag} must be greater than 0 (got: {value}).",
        ),
        "dpo_only": (
            "--{flag} solo se aplica a --objective dpo (el objetivo es '{objective}').",
            "--{flag} only applies to --objective dpo (the objective is '{objective}').",
        ),
        "pref_packing": (
            "--packing no se puede usar con --objective {objective}: cada par va en sus propias filas.",
            "--packing cannot be used with --objective {objective}: each pair has rows of its own.",
        ),
        "dpo_prompt": (
            "--train-on-prompt no se aplica a --objective dpo (la pérdida compara solo las respuestas); "
            "con orpo añade los tokens del prompt a la NLL.",
            "--train-on-prompt does not apply to --objective dpo (the loss compares answers only); with "
            "orpo it adds the prompt tokens to the NLL.",
        ),
        "smoothing": (
            "--label-smoothing debe estar en [0, 0.5) y solo se aplica a --dpo-loss sigmoid (recibido: {value}).",
            "--label-smoothing must be in [0, 0.5) and only applies to --dpo-loss sigmoid (got: {value}).",
        ),
        "prompt_length": (
            "--max-prompt-length ({value}) debe ser menor que --max-length ({max_length}): la "
            "respuesta necesita sitio.",
            "--max-prompt-length ({value}) must be smaller than --max-length ({max_length}): the answer needs room.",
        ),
    },
)
PREF_LR_LORA, PREF_LR_FULL = 5e-5, 5e-7  # DPO/ORPO move away from a reference: smaller steps


class PreferenceSetup(ObjectiveSetup):
    """Pairs (or, for KTO, rated answers) -> token ids -> batches; the reference when the loss has one.

    A subclass names its data (``read``, ``encode_items``, ``answer``, ``source_class``, ``collate``), its
    messages (``messages``: a catalogue with ``demo_data``, ``no_val`` and ``padding_free``) and its loss (``make``)."""

    label = ""  # the objective's name in the log ("DPO")
    messages = M
    shared = False  # one row per pair, its prompt once (set by ``sources``)

    @classmethod
    def check_across(cls, cfg) -> None:
        """--beta (default 0.1) positive, no --packing, this objective's refusals (``refuse``), a valid
        --label-smoothing and --max-prompt-length."""
        if cfg.beta is None:
            cfg.beta = 0.1
        if cfg.beta <= 0:
            raise AuraError(M("positive", flag="beta", value=cfg.beta))
        if cfg.packing:
            raise AuraError(M("pref_packing", objective=cfg.objective))
        cls.refuse(cfg)
        if not 0 <= cfg.label_smoothing < 0.5 or (cfg.label_smoothing and cfg.dpo_loss != "sigmoid"):
            raise AuraError(M("smoothing", value=cfg.label_smoothing))
        if cfg.max_prompt_length is not None and not 0 < cfg.max_prompt_length < cfg.max_length:
            raise AuraError(M("prompt_length", value=cfg.max_prompt_length, max_length=cfg.max_length))

    @classmethod
    def refuse(cls, cfg) -> None:
        """The flags this objective cannot honour (DPO's: --train-on-prompt)."""
        if cfg.train_on_prompt:
            raise AuraError(M("dpo_prompt"))

    @classmethod
    def learning_rate(cls, method: str) -> float:
        return PREF_LR_FULL if method == "full" else PREF_LR_LORA

    # -- the data (preference pairs; KTO overrides these) -----------------------------------------------

    def read(self, cfg, data) -> list:
        from aura.data.preference import load_pairs

        return load_pairs(data, empty_responses=cfg.empty_responses, split=cfg.split)

    def default_data(self):
        from aura.data.preference import DEFAULT_PAIRS

        return DEFAULT_PAIRS

    def answer(self, item) -> dict:
        """The answer the template choice sees after the prompt."""
        return item.chosen

    def encode_items(self, items: list, tok, **enc) -> list:
        from aura.data.preference import encode_pairs

        return encode_pairs(items, tok, **enc)

    def source_class(self):
        from aura.data.preference import PairSource

        return PairSource

    def collate(self):
        from aura.data.preference import collate_pairs

        return collate_pairs

    def reference_view(self, batch):
        """The reference's rows of a collated batch (both sequences of each example)."""
        return batch

    def say_sources(self, cfg, train_ex: list, val_ex: list, data) -> None:
        console.info(M("pairs", train=len(train_ex), val=len(val_ex), tokens=data.num_label_tokens))

    def check_batch(self, cfg, dist) -> None:
        """Refuse a batch the loss cannot use (KTO's KL estimate needs two examples)."""

    def one_row(self, cfg) -> bool:
        """Whether this run may put a pair in one row (ORPO's NLL over the prompt needs two)."""
        return True

    def shares_prompt(self, model) -> bool:
        """Whether ``model`` takes a pair in one row (``preference.shares_prompt``, looked up now)."""
        from aura.train.objectives import preference

        return preference.shares_prompt(model)

    def may_pack(self, cfg) -> bool:
        """Whether this run's sequences may go padding-free, several to a row: a pair's two sequences where the pair
        cannot be one row (``shared``: a sliding window, flash-attention), unless the loss needs each sequence in
        a row of its own (ORPO's NLL over the prompt)."""
        return not self.shared and self.one_row(cfg)

    def packs_answers(self, cfg, model) -> bool:
        """``may_pack``, where the model keeps packed sequences apart (``packing_is_isolated``, as SFT): the
        sequences of a micro-batch then share rows where that computes less (``collate_padding_free``)."""
        from aura.train.adapters import packing_is_isolated

        if not self.may_pack(cfg) or not packing_is_isolated(model, say=False):
            return False
        console.info(self.messages("padding_free"))
        return True

    def window(self, cfg) -> int:
        """The micro-batches whose examples the source may reorder by length (``SFTDataSource``'s ``window``): an
        optimizer step's, as each example's loss is its own."""
        return cfg.gradient_accumulation_steps or 1

    # -- the steps ---------------------------------------------------------------------------------------

    def load(self, cfg) -> list:
        """The examples of --data (or the embedded sample, said so)."""
        from aura.data.hub_datasets import choose_data

        if not cfg.data:
            console.info(self.messages("demo_data", path=self.default_data()))
        return self.read(cfg, choose_data(cfg.data, cfg.data_fallback))

    def conversations(self, items: list) -> list:
        """Each example's prompt and answer, for the template choice (``finetune._template``)."""
        from aura.data.sft import Conversation

        return [Conversation(messages=e.prompt + [self.answer(e)], where=e.where) for e in items]

    def encode(self, cfg, tok, items: list, *, templated: bool) -> tuple[list, list]:
        """(training examples, validation examples) as token ids, split by --val-fraction (the SFT split)."""
        from aura.data.sft import split_train_val

        train, val = split_train_val(items, val_fraction=cfg.val_fraction, seed=cfg.seed)
        enc = dict(max_length=cfg.max_length, max_prompt_length=cfg.max_prompt_length)
        train_ex = self.encode_items(train, tok, **enc)
        val_ex = self.encode_items(val, tok, **enc) if val else []
        if not val_ex and cfg.val_fraction > 0:
            console.warn(self.messages("no_val", fraction=cfg.val_fraction))
        return train_ex, val_ex

    def sources(self, cfg, tok, model, train_ex: list, val_ex: list, *, run, packing: bool, base_name: str):
        """(training batches, validation batches or None), every rank reading its part; an example in one row,
        the prompt once, where the model takes the mask (``preference.shares_prompt``)."""
        from aura.data.sft_batches import length_buckets

        dist = run.dist
        self.shared = self.one_row(cfg) and self.shares_prompt(model)
        self.check_batch(cfg, dist)
        source = self.source_class()
        common = dict(
            batch_size=cfg.batch_size,
            pad_id=tok.pad_token_id,
            seed=cfg.seed,
            rank=dist.rank,
            world_size=dist.world_size,
            max_length=cfg.max_length,
            shared=self.shared,
            buckets=length_buckets(cfg.max_length) if cfg.compile else (),
            padding_free=self.packs_answers(cfg, model),
        )  # few shapes to compile
        data = source(train_ex, **common, window=self.window(cfg))
        val = Limited(source(val_ex, **common, shuffle=False), cfg.eval_batches) if val_ex else None
        self.say_sources(cfg, train_ex, val_ex, data)
        return data, val

    def reference(self, cfg, model, examples: list, *, tok, run):
        """The reference model for the loss (None: the policy with its adapter disabled, or log-probs stored in
        ``examples`` now with --precompute-ref), said in the log."""
        from aura.train.objectives.preference import frozen_copy, precompute_reference

        adapter = cfg.method != "full"
        ref_model, how = None, "ref_adapter" if adapter else "ref_copy"
        if cfg.precompute_ref:
            precompute_reference(
                model,
                examples,
                collate=self.collate(),
                view=self.reference_view,
                batch_size=cfg.batch_size,
                pad_id=tok.pad_token_id,
                device=run.dist.device,
                precision=run.precision,
                adapter=adapter,
                shared=self.shared,
            )
            how = "ref_pre"
        elif not adapter:
            ref_model = frozen_copy(model, run=run, cfg=cfg)
        console.info(M("reference", objective=self.label, how=M(how)))
        return ref_model

    def build(self, cfg, model, train_ex: list, val_ex: list, *, tok, run):
        ref_model = None if self.reference_free else self.reference(cfg, model, train_ex + val_ex, tok=tok, run=run)
        return self.make(cfg, ref_model=ref_model, run=run)

    def make(self, cfg, *, ref_model, run):
        """The loss object (``aura.train.objectives.objective.Objective``)."""
        raise NotImplementedError


class DPOSetup(PreferenceSetup):
    extra_forwards = 1  # the reference's forward
    """DPO (sigmoid, IPO or hinge loss) against a reference."""

    name, label = "dpo", "DPO"

    def make(self, cfg, *, ref_model, run):
        from aura.train.objectives.preference import DPO

        return DPO(beta=cfg.beta, loss_type=cfg.dpo_loss, label_smoothing=cfg.label_smoothing, ref_model=ref_model)


class ORPOSetup(PreferenceSetup):
    """ORPO: the chosen answer's NLL plus an odds-ratio term, no reference."""

    name, label = "orpo", "ORPO"
    reference_free = True

    @classmethod
    def refuse(cls, cfg) -> None:
        for flag, value in (
            ("dpo-loss", cfg.dpo_loss != "sigmoid"),
            ("label-smoothing", cfg.label_smoothing),
            ("precompute-ref", cfg.precompute_ref),
        ):
            if value:
                raise AuraError(M("dpo_only", flag=flag, objective=cfg.objective))

    def one_row(self, cfg) -> bool:
        return not cfg.train_on_prompt  # the NLL over the chosen sequence's prompt needs it in its own row

    def make(self, cfg, *, ref_model, run):
        from aura.train.objectives.preference import ORPO

        return ORPO(beta=cfg.beta, train_on_prompt=cfg.train_on_prompt)
