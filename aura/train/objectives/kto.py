"""KTO: the objective of ``aura finetune --objective kto``, on single answers rated good or bad.

Kahneman-Tversky Optimisation (Ethayarajh et al. 2024), TRL ``KTOTrainer``'s ``kto`` loss: with the log ratio
``r = log pi(y|x) - log ref(y|x)`` of an answer (summed over its tokens) and the reference point ``z``,
a desirable answer costs ``w_d (1 - s(beta (r - z)))`` and an undesirable one ``w_u (1 - s(beta (z - r)))``
(``--desirable-weight``, ``--undesirable-weight``, ``--beta``). ``z`` estimates KL(pi || ref) from the
*mismatched* sequences of the batch (each prompt with another example's answer, ``aura.data.kto``): the mean
of their log ratios over the micro-batch on every rank (one all-reduce, like TRL's gather), clamped at 0 and
detached. The unit is an example: the loop divides the summed loss of a window by its examples on all ranks
(TRL: the mean over a micro-batch; the same when the micro-batches are equal).

The reference is the base with the adapter disabled (LoRA/QLoRA), a frozen copy (full) or log-probabilities
computed once before training (``--precompute-ref``), as for DPO. Per step the policy runs the mismatched
sequences without gradients and the real ones with; the reference runs both in one forward pass, and where
the model takes the mask (``preference.shares_prompt``) as one row per example, the prompt once (the
``ref_pair_`` rows of ``aura.data.kto``). The policy's two passes stay apart: in one row with the real
sequence, the mismatched answer would join the backward pass (about twice its forward) to save one forward
of the prompt, which costs more than it saves when prompts and answers have similar lengths.

Logged (TRL's names): ``rewards/chosen`` and ``logps/chosen`` averaged over the desirable answers,
``rewards/rejected`` and ``logps/rejected`` over the undesirable ones (their own denominators, ``#n``), and
``kl``, the reference point.
"""

from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F

from aura.core import console
from aura.core.errors import AuraError
from aura.core.i18n import Messages
from aura.train.objectives.objective import COUNT, Headline
from aura.train.objectives.preference import _peft_model, frozen_copy, sequence_logps

M = Messages("kto_train", {
    "demo_data": ("Sin --data: se usan las respuestas valoradas en español incluidas ({path}).",
                  "No --data: using the embedded Spanish rated answers ({path})."),
    "examples": ("Ejemplos: {train} de entrenamiento ({good:bueno|buenos}, {bad:malo|malos}), {val} de "
                 "validación; {tokens:token|tokens} de respuesta por época.",
                 "Examples: {train} for training ({good:good one|good ones}, {bad:bad one|bad ones}), {val} for "
                 "validation; {tokens:,} answer tokens per epoch."),
    "imbalance": ("Hay {good:respuesta buena|respuestas buenas} y {bad:mala|malas}, y los pesos no compensan la "
                  "diferencia. Según tus datos conviene O BIEN --desirable-weight en [{d_low!s}, {d_high!s}] O BIEN "
                  "--undesirable-weight en [{u_low!s}, {u_high!s}] (no ambos; ecuación 8 del artículo de KTO).",
                  "There are {good:good answer|good answers} and {bad:bad one|bad ones}, and the weights do not make "
                  "up for the difference. Based on your data, use EITHER --desirable-weight in [{d_low!s}, "
                  "{d_high!s}] OR --undesirable-weight in [{u_low!s}, {u_high!s}] (not both; Eq. 8 of the KTO paper)."),
    "batch": ("KTO necesita al menos 2 ejemplos por micro-lote entre todos los procesos (--batch-size {batch} x "
              "{world}): el punto de referencia (KL) es una media sobre el micro-lote y con uno solo sería una "
              "única muestra (TRL también lo exige). Usa --batch-size 2 o más.",
              "KTO needs at least 2 examples per micro-batch over all processes (--batch-size {batch} x {world}): "
              "the reference point (KL) is a mean over the micro-batch, and with one example it would be a single "
              "sample (TRL requires it too). Use --batch-size 2 or more."),
    "no_val": ("Sin ejemplos de validación (--val-fraction {fraction}): no habrá pérdida de validación ni best/.",
               "No validation examples (--val-fraction {fraction}): there will be no validation loss and no best/."),
})
KTO_METRICS = ("rewards/chosen", "rewards/rejected", "logps/chosen", "logps/rejected", "kl")


def _kl_view(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The mismatched sequences of a batch under the plain names."""
    return {k: batch["kl_" + k] for k in ("input_ids", "labels", "attention_mask")}


def _reference_view(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Both sequences for the reference: the shared-prompt rows when the batch has them, else the two stacked."""
    if "ref_pair_segments" in batch:
        return {k[len("ref_pair_"):]: v for k, v in batch.items() if k.startswith("ref_pair_")}
    return _stacked(batch, _kl_view(batch))


def _stacked(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Two right-padded batches as one (rows of ``a`` then ``b``), padded to the wider one."""
    width = max(a["input_ids"].shape[1], b["input_ids"].shape[1])
    fill = {"input_ids": 0, "labels": -100, "attention_mask": 0}
    return {k: torch.cat([F.pad(x[k], (0, width - x[k].shape[1]), value=fill[k]) for x in (a, b)])
            for k in fill}


class KTO:
    """Kahneman-Tversky Optimisation against a reference model, with TRL's KL estimate."""

    name = "kto"
    metric_names = KTO_METRICS
    headline = (Headline("kl", "KL", "KL"),  # the reference point of its value function, and the rewards
                Headline("rewards/chosen", "recompensa (deseables)", "reward (desirable)"),
                Headline("rewards/rejected", "recompensa (no deseables)", "reward (undesirable)"))
    counted_metrics = ("rewards/chosen", "rewards/rejected", "logps/chosen", "logps/rejected")

    def __init__(self, *, beta: float = 0.1, desirable_weight: float = 1.0, undesirable_weight: float = 1.0,
                 ref_model=None, dist=None):
        """``ref_model``: a frozen copy (full fine-tuning); None: the policy with its adapter disabled, unless
        the batch brings ``ref_logps`` (precomputed). ``dist``: the ranks the KL estimate is averaged over."""
        self.beta, self.desirable_weight, self.undesirable_weight = beta, desirable_weight, undesirable_weight
        self.ref_model, self.dist = ref_model, dist

    def count(self, batch):
        return int(batch["input_ids"].shape[0])

    @torch.no_grad()
    def reference_logps(self, model, batch) -> tuple[torch.Tensor, torch.Tensor]:
        """The reference's log-probs of the answers (B,) and of the mismatched answers (B,)."""
        if "ref_logps" in batch:
            return batch["ref_logps"], batch["ref_kl_logps"]
        both = _reference_view(batch)  # one forward pass for both
        if self.ref_model is not None:
            return sequence_logps(self.ref_model, both)[0].chunk(2)
        with _peft_model(model).disable_adapter():
            return sequence_logps(model, both)[0].chunk(2)

    def _kl(self, kl_ratios: torch.Tensor) -> torch.Tensor:
        """The mean of the mismatched log ratios over this micro-batch on every rank, clamped at 0."""
        total = torch.stack([kl_ratios.double().sum(), torch.tensor(float(kl_ratios.numel()), dtype=torch.float64,
                                                                    device=kl_ratios.device)])
        if self.dist is not None and self.dist.world_size > 1:
            total = self.dist.all_reduce(total.to(self.dist.comm_device), "sum").to(kl_ratios.device)
        return (total[0] / total[1]).float().clamp(min=0)

    def loss(self, model, batch):
        ref, ref_kl = (t.float() for t in self.reference_logps(model, batch))  # (B,) each, nothing traced
        with torch.no_grad():
            kl_logps = sequence_logps(model, _kl_view(batch))[0]  # (B,)
        kl = self._kl(kl_logps - ref_kl)  # () detached
        logps = sequence_logps(model, batch)[0]  # (B,)
        ratio = logps - ref
        good = batch["label"].to(logps.device)  # (B,) bool
        losses = torch.where(good, self.desirable_weight * (1 - torch.sigmoid(self.beta * (ratio - kl))),
                             self.undesirable_weight * (1 - torch.sigmoid(self.beta * (kl - ratio))))
        rewards, logps_d = self.beta * ratio.detach(), logps.detach()
        g, b = good.float(), (~good).float()
        n_good, n_bad = g.sum(), b.sum()
        return losses.sum(), {
            "rewards/chosen": (rewards * g).sum(), "rewards/chosen" + COUNT: n_good,
            "rewards/rejected": (rewards * b).sum(), "rewards/rejected" + COUNT: n_bad,
            "logps/chosen": (logps_d * g).sum(), "logps/chosen" + COUNT: n_good,
            "logps/rejected": (logps_d * b).sum(), "logps/rejected" + COUNT: n_bad,
            "kl": kl * logps.shape[0]}


@torch.no_grad()
def precompute_reference(model, examples: list, *, batch_size: int, pad_id: int, device, precision: str,
                         adapter: bool, shared: bool = False) -> None:
    """Store the reference's log-probs of both sequences in every example (``EncodedUnpaired.ref_logps``): the
    starting model (the base with the adapter disabled for LoRA/QLoRA), run once before training, in eval mode."""
    from aura.data.kto import collate_unpaired
    from aura.train.optim.engine import autocast_context

    was_training = model.training
    model.to(device)  # under --deepspeed the model is still on the CPU here
    model.eval()
    context = model.disable_adapter() if adapter else contextlib.nullcontext()
    with context, autocast_context(precision, device):
        for start in range(0, len(examples), batch_size):
            chunk = examples[start:start + batch_size]
            batch = {k: v.to(device) for k, v in collate_unpaired(chunk, pad_id=pad_id, shared=shared).items()}
            seq, kl = sequence_logps(model, _reference_view(batch))[0].double().cpu().chunk(2)
            for ex, a, b in zip(chunk, seq.tolist(), kl.tolist()):
                ex.ref_logps = (a, b)
    if was_training:
        model.train()


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


# ---------------------------------------------------------------------------------------------------
# The `aura finetune --objective kto` side (aura.train.finetune calls these)


def load(cfg) -> list:
    """The rated answers of --data (or the embedded sample, said so)."""
    from aura.data.kto import DEFAULT_FEEDBACK, load_unpaired

    if not cfg.data:
        console.info(M("demo_data", path=DEFAULT_FEEDBACK))
    from aura.data.hub_datasets import choose_data

    return load_unpaired(choose_data(cfg.data, cfg.data_fallback), label_column=cfg.label_column, split=cfg.split)


def template_conversations(examples: list) -> list:
    """Conversations for the template choice (``finetune._template``): each prompt + its answer."""
    from aura.data.sft import Conversation

    return [Conversation(messages=e.prompt + [e.completion], where=e.where) for e in examples]


def encode(cfg, tok, examples: list) -> tuple[list, list]:
    """(training examples, validation examples) as token ids, split by --val-fraction (the SFT split); each
    side's KL partners come from its own examples."""
    from aura.data.kto import encode_unpaired
    from aura.data.sft import split_train_val

    train, val = split_train_val(examples, val_fraction=cfg.val_fraction, seed=cfg.seed)
    enc = dict(max_length=cfg.max_length, max_prompt_length=cfg.max_prompt_length)
    train_ex = encode_unpaired(train, tok, **enc)
    val_ex = encode_unpaired(val, tok, **enc) if val else []
    if not val_ex and cfg.val_fraction > 0:
        console.warn(M("no_val", fraction=cfg.val_fraction))
    return train_ex, val_ex


def sources(cfg, tok, train_ex: list, val_ex: list, *, dist, limited, shared: bool = False):
    """(training batches, validation batches or None): ``UnpairedSource``s, every rank reading its part;
    ``shared``: the reference's rows with the prompt once (``preference.shares_prompt``)."""
    from aura.data.kto import UnpairedSource
    from aura.data.sft_batches import length_buckets

    if cfg.batch_size * dist.world_size < 2:
        raise AuraError(M("batch", batch=cfg.batch_size, world=dist.world_size))
    common = dict(batch_size=cfg.batch_size, pad_id=tok.pad_token_id, seed=cfg.seed, rank=dist.rank,
                  world_size=dist.world_size, max_length=cfg.max_length, shared=shared,
                  buckets=length_buckets(cfg.max_length) if cfg.compile else ())  # few shapes to compile
    data = UnpairedSource(train_ex, **common)
    val = limited(UnpairedSource(val_ex, **common, shuffle=False), cfg.eval_batches) if val_ex else None
    good = sum(e.label for e in train_ex)
    console.info(M("examples", train=len(train_ex), good=good, bad=len(train_ex) - good, val=len(val_ex),
                   tokens=data.num_label_tokens))
    bounds = imbalance_bounds(good, len(train_ex) - good, cfg.desirable_weight, cfg.undesirable_weight)
    if bounds:
        console.warn(M("imbalance", good=good, bad=len(train_ex) - good, **bounds))
    return data, val


def build_objective(cfg, model, *, pairs: list, pad_id: int, run, shared: bool = False) -> KTO:
    """The KTO objective for ``model`` (not yet parallelised); with --precompute-ref the reference log-probs
    are computed here, into the encoded examples ``pairs`` (the keyword of DPO's ``build_objective``)."""
    from aura.train.objectives.preference import M as PM

    adapter = cfg.method != "full"
    ref_model, how = None, "ref_adapter" if adapter else "ref_copy"
    if cfg.precompute_ref:
        precompute_reference(model, pairs, batch_size=cfg.batch_size, pad_id=pad_id, device=run.dist.device,
                             precision=run.precision, adapter=adapter, shared=shared)
        how = "ref_pre"
    elif not adapter:
        ref_model = frozen_copy(model, run=run, cfg=cfg)
    console.info(PM("reference", objective="KTO", how=PM(how)))
    return KTO(beta=cfg.beta, desirable_weight=cfg.desirable_weight, undesirable_weight=cfg.undesirable_weight,
               ref_model=ref_model, dist=run.dist)
