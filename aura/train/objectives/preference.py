"""Preference tuning: the DPO and ORPO objectives of ``aura finetune --objective dpo|orpo``.

Both plug into the one training loop as an ``aura.train.objectives.objective.Objective`` whose unit is a *pair*: the
loop divides the summed loss of a window by the number of pairs on all ranks, so every pair weighs the
same whatever the batch, the accumulation or the number of ranks. A batch holds the B chosen sequences
then the B rejected ones (``aura.data.preference``), and both go through the model in one forward pass.

Log-probabilities are sums over answer tokens (labels -100 on the prompt and the padding); logits are
computed only from the first answer position on (``logits_to_keep``), not over the prompt.

DPO (Rafailov et al. 2023), with ``d = (log pi(c) - log ref(c)) - (log pi(r) - log ref(r))``:
``sigmoid``: ``-(1 - e) log s(beta d) - e log s(-beta d)`` (e = ``--label-smoothing``, conservative DPO);
``ipo``: ``(d' - 1/(2 beta))^2`` with ``d'`` the per-token-averaged log ratios (as TRL); ``hinge``:
``relu(1 - beta d)``. The reference is the base with the adapter disabled (LoRA/QLoRA: no second copy
in memory), a frozen copy of the starting model (full fine-tuning), or log-probabilities computed once
before training (``--precompute-ref``). Logged: rewards ``beta (log pi - log ref)`` of both answers,
their accuracy (chosen > rejected) and margin, and both log-probabilities.

ORPO (Hong et al. 2024) needs no reference: per pair, the chosen answer's token-mean NLL minus
``beta log s(log odds(c) - log odds(r))`` with odds computed from per-token-averaged log-probs; with
``--train-on-prompt`` the NLL also covers the chosen sequence's prompt tokens (TRL's ORPOTrainer does
so). The NLL is a mean per pair (TRL averages over the batch's tokens: the same with one pair per
micro-batch), which keeps the loop's rule that any split of the same pairs trains the same.
"""

from __future__ import annotations

import contextlib
import math

import torch
import torch.nn.functional as F

from aura.core import console
from aura.core.i18n import Messages
from aura.train.lora_views import adapters_off
from aura.train.objectives.objective import PREFERENCE_HEADLINE

M = Messages(
    "preference_train",
    {
        "prompt_once": (
            "Cada par pasa por el modelo en una sola fila: el prompt una vez, y cada respuesta lo ve sin ver la otra.",
            "Each pair goes through the model as one row: the prompt once, and each answer sees it "
            "without seeing the other.",
        ),
        "prompt_once_kto": (
            "La referencia de KTO pasa cada respuesta y su respuesta desemparejada (la del KL) en una "
            "sola fila: el prompt una vez, y cada respuesta lo ve sin ver la otra.",
            "KTO's reference runs each answer and its mismatched (KL) answer as one row: the prompt "
            "once, and each answer sees it without seeing the other.",
        ),
        "prompt_twice": (
            "Este modelo (atención {attn}) no admite la máscara de un par en una fila: el prompt pasa "
            "por el modelo con cada respuesta (dos filas por par).",
            "This model ({attn} attention) does not take the mask of a pair in one row: the prompt "
            "goes through the model with each answer (two rows per pair).",
        ),
    },
)
DPO_METRICS = (
    "rewards/chosen",
    "rewards/rejected",
    "rewards/accuracy",
    "rewards/margin",
    "logps/chosen",
    "logps/rejected",
)
ORPO_METRICS = DPO_METRICS + ("nll_loss", "log_odds_ratio", "log_odds_chosen")


def pair_stats(r_c: torch.Tensor, r_r: torch.Tensor, chosen: torch.Tensor, rejected: torch.Tensor) -> dict:
    """``DPO_METRICS`` summed over a batch's pairs: the chosen and rejected rewards (``r_c``, ``r_r``: (B,)), how
    often the chosen one wins and by how much, and the answers' log-probabilities (B,)."""
    return {
        "rewards/chosen": r_c.sum(),
        "rewards/rejected": r_r.sum(),
        "rewards/accuracy": (r_c > r_r).float().sum(),
        "rewards/margin": (r_c - r_r).sum(),
        "logps/chosen": chosen.detach().sum(),
        "logps/rejected": rejected.detach().sum(),
    }


# Attention implementations that take a custom 4D mask as given (transformers' masking_utils returns a 4D
# mask unchanged): sdpa as a boolean mask, eager as an additive one. flash_attention_2 (no arbitrary masks,
# only varlen blocks, which cannot express "the rejected answer sees the prompt but not the chosen one"),
# flex_attention (BlockMask only) and others keep the two-row batches.
TREE_MASK_ATTENTION = ("sdpa", "eager")


def count_pairs(batch: dict[str, torch.Tensor]) -> int:
    if "pair_row" in batch:  # shared-prompt rows: several pairs may share a row
        return int(batch["pair_row"].shape[0])
    if "sequence_row" in batch:  # 2B sequences packed padding-free
        return int(batch["sequence_row"].shape[0]) // 2
    return int(batch["input_ids"].shape[0]) // 2


def pair_attention_mask(
    segments: torch.Tensor, pair: torch.Tensor, *, implementation: str, dtype: torch.dtype
) -> torch.Tensor:
    """The 4D mask (R, 1, T, T) of shared-prompt rows (``aura.data.preference.collate_pairs(shared=True)``):
    causal, and a token sees its own pair's prompt and its own part only, so each answer sees what it would see
    alone (padding sees padding only, never a pair). Boolean for sdpa, additive for eager."""
    from aura.data.preference import SHARED

    T = segments.shape[1]
    causal = torch.ones(T, T, dtype=torch.bool, device=segments.device).tril()  # (T, T)
    keys, queries = segments[:, None, :], segments[:, :, None]  # (R, 1, T), (R, T, 1)
    same_pair = pair[:, None, :] == pair[:, :, None]  # (R, T, T)
    allowed = (causal & same_pair & ((keys == SHARED) | (keys == queries)))[:, None]  # (R, 1, T, T)
    if implementation == "sdpa":
        return allowed
    return torch.zeros(allowed.shape, dtype=dtype, device=segments.device).masked_fill(~allowed, torch.finfo(dtype).min)


def per_pair(values: torch.Tensor, batch: dict[str, torch.Tensor], parts: tuple[int, ...]) -> torch.Tensor:
    """Sums of ``values`` (R, T), one per part of ``parts`` and pair, part-major ((len(parts) x B,): the chosen
    answers', then the rejected ones'), each position summed into its own pair's part (``batch``'s ``segments``,
    ``pair`` and ``pair_row``); no host sync."""
    segments, pair = batch["segments"], batch["pair"]  # (R, T)
    B = batch["pair_row"].shape[0]
    slot = torch.full_like(pair, len(parts) * B)  # positions of no listed part go to a slot thrown away
    for k, part in enumerate(parts):
        slot = torch.where(segments == part, k * B + pair, slot)
    out = torch.zeros(len(parts) * B + 1, dtype=values.dtype, device=values.device)
    return out.scatter_add(0, slot.reshape(-1), values.reshape(-1))[:-1]


def _shared_logps(model, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """``sequence_logps`` of shared-prompt rows (R, T): (chosen then rejected log-prob sums (2B,), answer
    tokens (2B,)), from one forward of ``[prompt | chosen | rejected]`` per pair, several pairs in a row. Logits
    are computed only at the positions whose next token is an answer's, in some row."""
    from aura.data.preference import CHOSEN, REJECTED

    inner = peft_model(model)
    mask = pair_attention_mask(
        batch["segments"],
        batch["pair"],
        implementation=inner.config._attn_implementation,
        dtype=inner.get_input_embeddings().weight.dtype,
    )  # (R, 1, T, T)
    token_logps, tgt, keep = _labelled_logps(model, batch, attention_mask=mask)
    where = {  # each target's part and pair
        "segments": batch["segments"][:, 1:][:, keep],
        "pair": batch["pair"][:, 1:][:, keep],
        "pair_row": batch["pair_row"],
    }
    answer = tgt != -100
    return (
        per_pair(token_logps * answer, where, (CHOSEN, REJECTED)),
        per_pair(answer.long(), where, (CHOSEN, REJECTED)),
    )


def _labelled_logps(model, batch: dict[str, torch.Tensor], **forward) -> tuple[torch.Tensor, ...]:
    """(log-prob of each labelled target (R, K), 0 elsewhere; the targets (R, K); the positions ``keep`` (K,)) of
    rows holding several sequences (``position_ids`` given, ``forward``: the mask, if any): logits only at the K
    positions whose next token is labelled in some row."""
    targets = batch["labels"][:, 1:]  # (R, T-1): the target of each position
    keep = (targets != -100).any(0).nonzero().squeeze(1)  # (K,) one host sync per micro-batch
    logits = model(
        input_ids=batch["input_ids"],
        position_ids=batch["position_ids"],
        use_cache=False,
        logits_to_keep=keep,
        **forward,
    ).logits  # (R, K, V)
    tgt = targets[:, keep]  # (R, K)
    token_logps = -F.cross_entropy(
        logits.reshape(-1, logits.size(-1)).float(), tgt.reshape(-1), ignore_index=-100, reduction="none"
    ).view(tgt.shape)  # 0 off-mask
    return token_logps, tgt, keep


def _packed_logps(model, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """``sequence_logps`` of rows packed padding-free (``aura.data.sft_batches.collate_padding_free(owners=True)``:
    positions restarting at each sequence, no attention mask, so each sequence sees only itself): (log-prob sums
    (N,), labelled tokens (N,)), in the order of the sequences; no host sync besides the kept positions'."""
    token_logps, tgt, keep = _labelled_logps(model, batch)
    n = batch["sequence_row"].shape[0]
    labelled = tgt != -100
    slot = torch.where(labelled, batch["sequence"][:, 1:][:, keep], n)  # a target's sequence; n: thrown away
    sums = torch.zeros(n + 1, dtype=token_logps.dtype, device=tgt.device)
    counts = torch.zeros(n + 1, dtype=torch.long, device=tgt.device)
    return (
        sums.scatter_add(0, slot.reshape(-1), token_logps.reshape(-1))[:-1],
        counts.scatter_add(0, slot.reshape(-1), labelled.long().reshape(-1))[:-1],
    )


def sequence_logps(
    model, batch: dict[str, torch.Tensor], *, whole: bool = False
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """(sum of answer-token log-probs (2B,), answer tokens (2B,), and with ``whole`` the same two over every
    non-padding target token).

    Only the positions from the first answer token of the batch on get logits (``logits_to_keep``; in
    shared-prompt rows only the positions that predict an answer token). Shared-prompt batches (``segments``: a
    pair in one row, several where they fit) and rows packed padding-free (``sequence``: KTO's answers, several in
    a row where they fit) give the same values, one per sequence in the batch's order; ``whole`` needs one
    sequence per row (the shared prompt's log-probs belong to both sequences).
    """
    if "segments" in batch or "sequence" in batch:
        if whole:
            raise ValueError("whole=True needs one sequence per row (collate_pairs(shared=False))")
        return (*(_shared_logps if "segments" in batch else _packed_logps)(model, batch), None, None)
    input_ids, labels = batch["input_ids"], batch["labels"]  # (2B, T)
    T = input_ids.shape[1]
    targets = labels[:, 1:]  # (2B, T-1): the target of each position
    mask = targets != -100
    first = 0 if whole else int(mask.any(0).to(torch.int8).argmax())  # one host sync per micro-batch
    keep = T - first  # logits of positions first .. T-1 predict targets first .. T-2 (shifted)
    kwargs = {"attention_mask": batch["attention_mask"]} if "attention_mask" in batch else {}
    logits = model(input_ids=input_ids, use_cache=False, logits_to_keep=keep, **kwargs).logits  # (2B, keep, V)
    logits = logits[:, :-1]  # (2B, keep-1, V)
    tgt = targets[:, first:]  # (2B, keep-1)
    if whole:  # every non-padding target: prompt and answer
        tgt_all = input_ids[:, 1:].masked_fill(batch["attention_mask"][:, 1:] == 0, -100)
        token_logps = -F.cross_entropy(
            logits.reshape(-1, logits.size(-1)).float(), tgt_all.reshape(-1), ignore_index=-100, reduction="none"
        ).view(tgt_all.shape)
        all_mask = tgt_all != -100
        answer_mask = tgt != -100
        return (
            (token_logps * answer_mask).sum(1),
            answer_mask.sum(1),
            (token_logps * all_mask).sum(1),
            all_mask.sum(1),
        )
    token_logps = -F.cross_entropy(
        logits.reshape(-1, logits.size(-1)).float(), tgt.reshape(-1), ignore_index=-100, reduction="none"
    ).view(tgt.shape)  # (2B, keep-1), 0 off-mask
    answer_mask = tgt != -100
    return token_logps.sum(1), answer_mask.sum(1), None, None


def shares_prompt(model, *, kto: bool = False, values=None, pad_id: int = 0) -> bool:
    """Whether ``model`` takes a pair as one shared-prompt row (``collate_pairs(shared=True)``) with the same
    answer log-probs as the two rows: the attention implementation must take a custom 4D mask
    (``TREE_MASK_ATTENTION``), and a random pair is run both ways to check it (a few tokens of compute).
    False (said once) keeps today's two rows per pair. ``kto``: said of KTO's reference pass. ``values``: what
    must agree, ``(model, batch) -> (2B,)`` (default: the answers' log-probs; a reward model's scores), on
    batches padded with ``pad_id``."""
    from aura.data.preference import EncodedPair, collate_pairs
    from aura.data.sft_batches import Encoded

    inner = peft_model(model)
    attn = getattr(inner.config, "_attn_implementation", None)
    # a custom 4D mask replaces the sliding-window masks too (Mistral, Gemma 2/3): beyond the window the
    # answers would see more than alone, which a check on a few tokens cannot reveal
    layers = set(getattr(inner.config, "layer_types", None) or ())
    sliding = layers - {"full_attention"} if layers else getattr(inner.config, "sliding_window", None)
    if attn not in TREE_MASK_ATTENTION or sliding:
        console.info(M("prompt_twice", attn=attn))
        return False
    device = next(model.parameters()).device
    vocab = inner.get_input_embeddings().weight.shape[0]
    g = torch.Generator().manual_seed(0)
    prompt, a, b = (torch.randint(0, vocab, (n,), generator=g).tolist() for n in (6, 4, 3))
    pairs = [
        EncodedPair(Encoded(prompt + a, [-100] * 6 + a), Encoded(prompt + b, [-100] * 6 + b)),
        EncodedPair(Encoded(prompt[:4] + b, [-100] * 4 + b), Encoded(prompt[:4] + a, [-100] * 4 + a)),
    ]
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            two, one = (
                {k: v.to(device) for k, v in collate_pairs(pairs, pad_id=pad_id, shared=shared).items()}
                for shared in (False, True)
            )
            values = values or (lambda m, b: sequence_logps(m, b)[0])
            ok = torch.allclose(values(model, one).float(), values(model, two).float(), atol=1e-2, rtol=1e-3)
    finally:
        model.train(was_training)
    console.info(M("prompt_once_kto" if kto else "prompt_once") if ok else M("prompt_twice", attn=attn))
    return ok


def peft_model(model):
    """The peft model inside DDP/DeepSpeed/compile wrappers (FSDP2 shards in place)."""
    from aura.distributed import unwrap

    return unwrap(model)


class DPO:
    """Direct Preference Optimisation (sigmoid, IPO or hinge loss) against a reference model."""

    name = "dpo"
    metric_names = DPO_METRICS
    headline = PREFERENCE_HEADLINE  # its loss reaches 0 when it overfits: the rewards' ranking is the number

    def __init__(self, *, beta: float = 0.1, loss_type: str = "sigmoid", label_smoothing: float = 0.0, ref_model=None):
        """``ref_model``: a frozen copy (full fine-tuning); None: the policy with its adapter disabled, unless
        the batch brings ``ref_logps`` (precomputed)."""
        self.beta, self.loss_type, self.label_smoothing, self.ref_model = beta, loss_type, label_smoothing, ref_model

    def count(self, batch):
        return count_pairs(batch)

    @torch.no_grad()
    def reference_logps(self, model, batch) -> torch.Tensor:
        """The reference's answer log-probs (2B,)."""
        if "ref_logps" in batch:
            return batch["ref_logps"]
        if self.ref_model is not None:
            return sequence_logps(self.ref_model, batch)[0]
        with adapters_off(peft_model(model)):
            return sequence_logps(model, batch)[0]

    def loss(self, model, batch):
        ref = self.reference_logps(model, batch).float()  # (2B,), before the policy: nothing of it is traced
        logps, n_tokens, _, _ = sequence_logps(model, batch)  # (2B,)
        chosen, rejected = logps.chunk(2)
        ref_chosen, ref_rejected = ref.chunk(2)
        chosen_ratio, rejected_ratio = chosen - ref_chosen, rejected - ref_rejected  # (B,)
        beta = self.beta
        if self.loss_type == "ipo":
            n_c, n_r = n_tokens.chunk(2)
            delta = chosen_ratio / n_c.clamp(min=1) - rejected_ratio / n_r.clamp(min=1)
            losses = (delta - 1 / (2 * beta)) ** 2
        elif self.loss_type == "hinge":
            losses = torch.relu(1 - beta * (chosen_ratio - rejected_ratio))
        else:  # sigmoid, with conservative-DPO label smoothing
            z = beta * (chosen_ratio - rejected_ratio)
            eps = self.label_smoothing
            losses = -(1 - eps) * F.logsigmoid(z) - eps * F.logsigmoid(-z)
        r_c, r_r = beta * chosen_ratio.detach(), beta * rejected_ratio.detach()
        return losses.sum(), pair_stats(r_c, r_r, chosen, rejected)


def log1mexp(x: torch.Tensor) -> torch.Tensor:
    """log(1 - exp(x)) for x < 0, stable on both sides of -ln 2."""
    return torch.where(x < -math.log(2), torch.log1p(-torch.exp(x)), torch.log(-torch.expm1(x)))


class ORPO:
    """Odds Ratio Preference Optimisation: NLL of the chosen answer plus an odds-ratio term, no reference."""

    name = "orpo"
    metric_names = ORPO_METRICS
    headline = PREFERENCE_HEADLINE

    def __init__(self, *, beta: float = 0.1, train_on_prompt: bool = False):
        self.beta, self.train_on_prompt = beta, train_on_prompt

    def count(self, batch):
        return count_pairs(batch)

    def loss(self, model, batch):
        logps, n_tokens, all_logps, n_all = sequence_logps(model, batch, whole=self.train_on_prompt)
        mean_logps = logps / n_tokens.clamp(min=1)  # (2B,) per-token average
        chosen, rejected = mean_logps.chunk(2)
        if self.train_on_prompt:
            nll = -(all_logps.chunk(2)[0] / n_all.chunk(2)[0].clamp(min=1))  # (B,)
        else:
            nll = -chosen
        log_odds = (chosen - rejected) - (log1mexp(chosen) - log1mexp(rejected))  # (B,)
        ratio = F.logsigmoid(log_odds)
        losses = nll - self.beta * ratio
        r_c, r_r = self.beta * chosen.detach(), self.beta * rejected.detach()
        return losses.sum(), {
            **pair_stats(r_c, r_r, chosen, rejected),
            "nll_loss": nll.detach().sum(),
            "log_odds_ratio": ratio.detach().sum(),
            "log_odds_chosen": log_odds.detach().sum(),
        }


@torch.no_grad()
def precompute_reference(
    model,
    examples: list,
    *,
    collate,
    view=None,
    batch_size: int,
    pad_id: int,
    device,
    precision: str,
    adapter: bool,
    shared: bool = False,
) -> None:
    """Store the reference's log-probs of each example's two sequences in it (``ref_logps``: a pair's chosen and
    rejected answers, ``EncodedPair``; a KTO example's answer and its mismatched one, ``EncodedUnpaired``): the
    starting model (the base with the adapter disabled for LoRA/QLoRA), run once before training, in eval mode.
    ``collate`` batches the examples (``collate_pairs``, ``collate_unpaired``); ``view``: the batch's rows
    for the reference, both sequences stacked (default: the batch itself)."""
    from aura.train.optim.step_engine import autocast_context

    was_training = model.training
    model.to(device)  # under --deepspeed the model is still on the CPU here (DeepSpeed's setup moves it there too)
    model.eval()
    context = adapters_off(model) if adapter else contextlib.nullcontext()
    with context, autocast_context(precision, device):
        for start in range(0, len(examples), batch_size):
            chunk = examples[start : start + batch_size]
            batch = {k: v.to(device) for k, v in collate(chunk, pad_id=pad_id, shared=shared).items()}
            first, second = sequence_logps(model, view(batch) if view else batch)[0].double().cpu().chunk(2)
            for example, a, b in zip(chunk, first.tolist(), second.tolist()):
                example.ref_logps = (a, b)
    if was_training:
        model.train()


def frozen_copy(model, *, run, cfg):
    """The reference for full fine-tuning: a frozen, eval-mode copy of the starting model, on the run's device,
    sharded like the model under FSDP2 (``aura.distributed.place_frozen``), never whole on every rank there.
    Under --deepspeed (ZeRO owns the model's memory) the copy stays whole, as before."""
    import copy

    from aura.distributed import place_frozen

    strategy = "none" if getattr(cfg, "deepspeed", None) else cfg.strategy
    ref = place_frozen(
        copy.deepcopy(model), like=model, dist=run.dist, strategy=strategy, device_memory=run.device_memory
    )
    return ref.eval()
