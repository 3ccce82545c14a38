"""The objectives of ``aura finetune --objective NAME``: one registry, name -> the class that sets it up.

``aura.train.finetune.FinetuneCommand.prepare`` asks the registry for the chosen objective's
``ObjectiveSetup`` and calls its steps in order; nothing else lists the objectives (the ``--objective`` flag's
choices are ``NAMES``). Each entry is imported only when it is chosen (``aura finetune --objective sft`` never
imports GRPO's modules), so an entry's module keeps its heavy imports (torch, the loss) inside its methods:
``FinetuneConfig`` runs ``ObjectiveSetup.check_args`` while it parses the flags.

Adding an objective: one module with its ``ObjectiveSetup`` subclass (and, for flags of its own, an args
mixin of ``FinetuneConfig`` that checks only its own fields) and one line in ``OBJECTIVES``.
"""

from __future__ import annotations

import dataclasses
import importlib
import itertools
import math
from abc import ABC, abstractmethod

# name -> "module:class", in the order --help lists them
OBJECTIVES = {
    "sft": "aura.train.objectives.sft_setup:SFTSetup",
    "dpo": "aura.train.objectives.preference_setup:DPOSetup",
    "orpo": "aura.train.objectives.preference_setup:ORPOSetup",
    "grpo": "aura.train.objectives.grpo_setup:GRPOSetup",
    "simpo": "aura.train.objectives.simpo_setup:SimPOSetup",
    "cpo": "aura.train.objectives.simpo_setup:CPOSetup",
    "kto": "aura.train.objectives.kto_setup:KTOSetup",
    "reward": "aura.train.objectives.reward_setup:RewardSetup",
    "distill": "aura.train.objectives.distill_setup:DistillSetup",
}
NAMES = tuple(OBJECTIVES)


def setup_class(name: str) -> type[ObjectiveSetup]:
    """The ``ObjectiveSetup`` subclass registered as ``name`` (its module imported now)."""
    module, _, cls = OBJECTIVES[name].partition(":")
    return getattr(importlib.import_module(module), cls)


@dataclasses.dataclass(frozen=True)
class PlannedStep:
    """What one optimizer step of an objective costs, for ``aura pipeline plan`` (before anything runs)."""

    tokens: int  # tokens trained on per step, all processes (GRPO: prompts and completions at full length)
    flops_per_token: float | None  # training FLOPs per trained token; None: the model's size is unknown
    sample_flops: float  # generation FLOPs per step (GRPO's rollouts, distillation's own samples)
    rows: int  # data rows a step consumes (GRPO: prompts, each sampled G times)


class Limited:
    """Validation batches, at most ``n`` per evaluation (``--eval-batches``; 0 = all), re-iterable."""

    def __init__(self, source, n: int):
        self.source, self.n = source, n

    def __iter__(self):
        return itertools.islice(iter(self.source), self.n or None)


class ObjectiveSetup(ABC):
    """One objective's part of ``aura finetune``: its flags' checks, its data, its batches, its ``Objective``.

    ``prepare`` calls, in order: ``load`` (data -> items), ``conversations`` (for the chat-template choice),
    ``encode`` (items -> training and validation examples), ``resolve`` (the config with the objective's own
    defaults), ``sources`` (training and validation batches), ``build`` (the loop's ``Objective``; None: the
    next-token loss), ``evaluators``, ``announce`` (after the plan) and ``finish`` (the job's end). One
    instance serves one run, so a step may keep what a later one needs.
    """

    name = ""
    sections: tuple[str, ...] = ()  # the FinetuneConfig args sections this objective uses (see check_args)
    named_in_identity = True  # a checkpoint's identity names the objective (SFT's never did)
    reference_free = False  # no reference model: nothing to precompute
    head = "causal_lm"  # the model it trains (aura.train.adapters: CAUSAL_LM, or SEQ_CLS for a reward model)
    # forward passes per trained token beyond the policy's own training pass, each 2 x params FLOPs: DPO's
    # reference (1); KTO's reference on the answers and on its mismatched KL pairs, and the policy on those (3)
    extra_forwards = 0

    # -- its flags (FinetuneConfig.__post_init__; light: no torch) --------------------------------------

    @classmethod
    def check_args(cls, cfg) -> None:
        """Every args section checks itself: its own values where this objective uses it, else that none of
        its flags was given; then this objective's checks across sections (``check_across``)."""
        for section in cfg.OBJECTIVE_SECTIONS:
            if section.SECTION in cls.sections:
                section.check_section(cfg)
            else:
                section.check_unused(cfg)
        cls.check_across(cfg)

    @classmethod
    def check_across(cls, cfg) -> None:
        """Checks of flags that belong to other sections (or to FinetuneConfig) under this objective, and
        the defaults this objective fills in."""

    @classmethod
    def inputs(cls, cfg) -> list:
        """Paths the run reads besides --base-model and --data (GRPO's reward models), checked when the run
        starts, before anything is written."""
        return []

    @classmethod
    def plan_step(cls, cfg, *, params: int | None, rows: int, example_tokens: float | None, params_of) -> PlannedStep:
        """One step's cost for the plan: ``rows`` examples per step (all processes), each ``example_tokens``
        long (None: unknown, so ``--max-length``; packed rows are always full), the model's ``params``;
        ``params_of(path)`` counts another model's (a teacher's), None when unknown. Training costs 6 x params
        FLOPs per token (4 with LoRA: no weight gradients), plus ``extra_forwards``."""
        length = cfg.max_length
        per_row = length if cfg.packing or not example_tokens else min(length, math.ceil(example_tokens))
        flops = None
        if params:
            flops = ((4.0 if cfg.method in ("lora", "qlora") else 6.0) + 2.0 * cls.extra_forwards) * params
        return PlannedStep(tokens=rows * per_row, flops_per_token=flops, sample_flops=0.0, rows=rows)

    @classmethod
    @abstractmethod
    def learning_rate(cls, method: str) -> float:
        """The default --learning-rate for ``method`` (lora, qlora or full)."""

    # -- the run (FinetuneCommand.prepare) ---------------------------------------------------------------

    @abstractmethod
    def load(self, cfg) -> list:
        """The objective's data: its items (conversations, pairs, rated answers, prompts)."""

    @abstractmethod
    def conversations(self, items: list) -> list:
        """``aura.data.sft.Conversation``s of ``items``, for the chat-template choice."""

    @abstractmethod
    def encode(self, cfg, tok, items: list, *, templated: bool) -> tuple[list, list]:
        """(training examples, validation examples): token ids with their masks."""

    def resolve(self, cfg, dist):
        """``cfg`` with this objective's defaults (before the model loads); unchanged by default."""
        return cfg

    @abstractmethod
    def sources(self, cfg, tok, model, train_ex: list, val_ex: list, *, run, packing: bool, base_name: str):
        """(training batches, validation batches or None) for ``model`` (not yet parallelised)."""

    def build(self, cfg, model, train_ex: list, val_ex: list, *, tok, run):
        """The loop's ``Objective`` (None: next-token cross entropy)."""
        return None

    def completion_tokens(self, cfg) -> int:
        """Tokens a training row gains while training (GRPO's completions), for the plan's throughput."""
        return 0

    def extra_flops_per_token(self, cfg) -> float:
        """FLOPs per trained token beyond the policy's own (a teacher's forward), for MFU; after ``sources``."""
        return 0.0

    def evaluators(self, cfg, tok, model, val_ex: list, data, *, steps_per_epoch: int) -> list:
        return []

    def announce(self, cfg, train_ex: list, val_ex: list, data) -> None:
        """Lines said after the plan."""

    def finish(self, data, out):
        """The job's ``finish`` (rank 0, a finished run), or None."""
        return None
