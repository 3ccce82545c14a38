"""On-policy distillation (GKD): the objective of ``aura finetune --objective distill`` and its batch source.

Generalised Knowledge Distillation (Agarwal et al. 2024), as TRL's ``GKDTrainer``: a frozen teacher with the
student's tokenizer scores every token of the answers, and the student minimises the generalised
Jensen-Shannon divergence between the two next-token distributions (``generalized_jsd``; ``--beta``: 0 is
the forward KL(teacher || student), 1 the reverse KL(student || teacher), in between the JSD with the mixture
``(1 - beta) student + beta teacher``), summed over the vocabulary and averaged over the answer tokens of
the accumulation window (TRL's ``num_items_in_batch``; the loop's unit is a target token).

Which answers: with probability ``--lmbda`` a micro-batch's answers are the student's own samples of its
prompts (on-policy), else the data's (or, with ``--seq-kd``, the teacher's samples). The choice is a keyed draw
of (seed, epoch, micro-batch): the same on every rank and after a resume; a sampled answer's tokens come from
its own key (``aura.train.objectives.rollout.row_key``, ``sample_completions``), so a resumed run samples
the very same answers. The prompt of a row is everything before its last trained answer (a multi-turn
conversation keeps its earlier turns as context, as TRL's ``messages[:-1]``).

The teacher runs without gradients, in eval mode, on the student's device, in the compute dtype; under FSDP2 it
is sharded like the student (``aura.distributed.place_frozen``) and the student samples from its gathered
weights (``rollout.sample_completions``). In fp32 on the CPU its linear layers are packed once for oneDNN and its
plain weights freed (``aura.inference.packed``: the same products up to float rounding, sooner), since its
weights never change; so are a LoRA student's frozen base layers, for its forward and its backward
(``aura.train.lora_views.frozen_packed``). Only the positions from the batch's first answer token on go through
either model's output head (``logits_to_keep``): the prompts' logits are never computed. As in TRL,
``--temperature`` shapes the sampling only; the loss compares
the distributions at temperature 1 (TRL's ``compute_loss`` calls ``generalized_jsd_loss`` without one).

Logged: ``on_policy``, the share of the interval's answer tokens that the student sampled.
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect

import torch
import torch.nn.functional as F

from aura.train.objectives.objective import Headline, count_targets

IGNORE = -100


def generalized_jsd(
    student_logits: torch.Tensor, teacher_logits: torch.Tensor, *, beta: float, temperature: float = 1.0
) -> torch.Tensor:
    """(N, V) logits of both models -> (N,) generalised JSD per token (fp32), TRL's ``generalized_jsd_loss``
    before its reduction: ``beta`` 0 = KL(teacher || student), 1 = KL(student || teacher)."""
    s = F.log_softmax(student_logits.float() / temperature, dim=-1)  # (N, V)
    t = F.log_softmax(teacher_logits.float() / temperature, dim=-1)  # (N, V)
    if beta == 0:
        return F.kl_div(s, t, reduction="none", log_target=True).sum(-1)
    if beta == 1:
        return F.kl_div(t, s, reduction="none", log_target=True).sum(-1)
    b = torch.tensor(beta, dtype=s.dtype, device=s.device)
    mixture = torch.logsumexp(torch.stack([s + torch.log1p(-b), t + torch.log(b)]), dim=0)  # (N, V)
    kl_teacher = F.kl_div(mixture, t, reduction="none", log_target=True).sum(-1)
    kl_student = F.kl_div(mixture, s, reduction="none", log_target=True).sum(-1)
    return beta * kl_teacher + (1 - beta) * kl_student


def _takes_logits_to_keep(model) -> bool:
    from aura.distributed.parallel import unwrap

    inner = unwrap(model)
    if hasattr(inner, "get_base_model"):  # peft passes its keyword arguments on
        inner = inner.get_base_model()
    return "logits_to_keep" in inspect.signature(inner.forward).parameters


def answer_logits(model, batch: dict[str, torch.Tensor], first: int) -> torch.Tensor:
    """(B, T - 1 - first, V) logits predicting the targets ``labels[:, first + 1:]`` (only those positions
    through the head where the model allows it)."""
    kwargs = {k: batch[k] for k in ("attention_mask", "position_ids") if k in batch}
    T = batch["input_ids"].shape[1]
    if _takes_logits_to_keep(model):
        kwargs["logits_to_keep"] = T - first
    logits = model(input_ids=batch["input_ids"], use_cache=False, **kwargs).logits  # (B, <=T, V)
    return logits[:, -(T - first) : -1]


class Distill:
    """The generalised JSD to a frozen teacher on the answer tokens (see the module docstring)."""

    name = "distill"
    metric_names = ("on_policy",)
    headline: tuple[Headline, ...] = ()  # the loss: the divergence from the teacher, the number to compare

    def __init__(
        self, *, teacher, beta: float = 0.5, temperature: float = 1.0, precision: str = "fp32", pack: bool = True
    ):
        """``pack``: the teacher's linear layers packed for good and the student's frozen ones at each forward
        (fp32 on the CPU; the module docstring); the teacher is modified in place."""
        from aura.inference.packed import pack_in_place

        self.teacher, self.beta, self.temperature, self.precision = teacher, beta, temperature, precision
        if pack:  # the teacher's weights never change: packed for good, its plain linear weights freed
            pack_in_place(teacher, precision=precision, device=next(teacher.parameters()).device)
        self.pack = pack
        self._student: tuple | None = None  # (the student, its frozen layers packed or None), made at first use

    def student_layers(self, model):
        """The student's frozen linear layers packed once (``aura.train.lora_views.frozen_packed``), or None."""
        from aura.distributed.parallel import unwrap
        from aura.train.lora_views import frozen_packed

        if not self.pack:
            return None
        inner = unwrap(model)
        if self._student is None or self._student[0] is not inner:
            device = next(inner.parameters()).device
            self._student = (inner, frozen_packed(inner, precision=self.precision, device=device))
        return self._student[1]

    def count(self, batch: dict[str, torch.Tensor]) -> int:
        return count_targets(batch)

    def loss(self, model, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        targets = batch["labels"][:, 1:]  # (B, T-1)
        trained = targets != IGNORE
        columns = trained.any(0).nonzero()
        first = int(columns[0]) if len(columns) else targets.shape[1] - 1
        mask = trained[:, first:]  # (B, T-1-first)
        packed = self.student_layers(model)
        with packed.view() if packed else contextlib.nullcontext():
            student = answer_logits(model, batch, first)[mask]  # (N, V)
        with torch.no_grad():
            self.teacher.eval()
            teacher = answer_logits(self.teacher, batch, first)[mask]  # (N, V)
        per_token = generalized_jsd(student, teacher, beta=self.beta, temperature=self.temperature)  # (N,)
        n = torch.tensor(float(per_token.numel()), device=per_token.device)
        on_policy = batch.get("on_policy", torch.zeros(())).to(per_token.device).float()
        return per_token.sum(), {"on_policy": on_policy * n}


def on_policy_draw(seed: int, epoch: int, index: int) -> float:
    """A uniform number in [0, 1) for micro-batch ``index`` of ``epoch``: the same on every rank and run."""
    digest = hashlib.sha256(f"aura-distill:{seed}:{epoch}:{index}".encode()).digest()
    return int.from_bytes(digest[:8], "little") / 2**64


def prompt_of(input_ids: torch.Tensor, labels: torch.Tensor, attention: torch.Tensor) -> list[int]:
    """The tokens of one padded row before its last trained answer."""
    n = int(attention.sum())
    trained = (labels[:n] != IGNORE).tolist()
    starts = [j for j in range(n) if trained[j] and (j == 0 or not trained[j - 1])]
    return input_ids[: starts[-1] if starts else n].tolist()


class DistillSource:
    """The SFT batches with, per micro-batch, the data's answers or freshly sampled ones (module docstring).

    A ``BatchSource`` (``aura.train.train_state``): its state is the SFT source's (the position decides the
    draws and the keys)."""

    def __init__(
        self,
        data,
        *,
        policy,
        teacher,
        tokenizer,
        sampling,
        lmbda: float,
        seq_kd: bool,
        seed: int,
        dist,
        precision,
        accumulation: int = 1,
    ):
        """``data``: the SFT source (``SFTDataSource``: its ``batch(epoch, index)`` is a pure function);
        ``accumulation``: the micro-batches of one optimizer step, whose answers are sampled together."""
        self.data, self.policy, self.teacher, self.tok, self.sampling = data, policy, teacher, tokenizer, sampling
        self.lmbda, self.seq_kd, self.seed, self.dist, self.precision = lmbda, seq_kd, seed, dist, precision
        self.rows, self.batches_per_epoch, self.accum = data.rows, data.batches_per_epoch, max(1, accumulation)
        self._ready: dict[tuple[int, int], dict] = {}  # (epoch, index) -> its sampled batch, made with its window

    def __len__(self) -> int:
        return self.batches_per_epoch

    @property
    def num_label_tokens(self) -> int:
        return self.data.num_label_tokens

    @property
    def epoch(self) -> int:
        return self.data.epoch

    @property
    def position(self) -> int:
        return self.data.position

    def next_batch(self) -> dict | None:
        epoch, index = self.data.epoch, self.data.position
        batch = self.data.next_batch()
        if batch is None:
            return None
        own = on_policy_draw(self.seed, epoch, index) < self.lmbda
        if own or self.seq_kd:
            if (epoch, index) not in self._ready:
                self._sample_window(epoch, index)
            batch = self._ready.pop((epoch, index))
        batch["on_policy"] = torch.tensor(float(own))
        return batch

    def start_epoch(self, epoch: int) -> None:
        self.data.start_epoch(epoch)
        self._ready.clear()

    def state_dict(self) -> dict:
        return self.data.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.data.load_state_dict(state)
        self._ready.clear()

    def _sample_window(self, epoch: int, index: int) -> None:
        """Sample the answers of micro-batch ``index`` and of the rest of its optimizer step's window in one
        call per model: the loop takes a whole window before it updates the weights, so every micro-batch of
        it is sampled with the same weights as alone, and a row's tokens come from its key alone; one decode
        of all the window's rows costs little more than one of a micro-batch's (a step's cost at a few rows is
        reading the weights)."""
        stop = min((index // self.accum + 1) * self.accum, self.batches_per_epoch)
        plan: dict[bool, list[int]] = {}  # the student's (True) or the teacher's answers -> micro-batch indices
        for j in range(index, stop):
            own = on_policy_draw(self.seed, epoch, j) < self.lmbda
            if own or self.seq_kd:
                plan.setdefault(own, []).append(j)
        for own, indices in plan.items():
            batches = [self.data.batch(epoch, j) for j in indices]
            sampled = self.sampled(batches, self.policy if own else self.teacher, epoch=epoch, indices=indices)
            self._ready.update({(epoch, j): b for j, b in zip(indices, sampled)})

    @torch.no_grad()
    def sampled(self, batches: list[dict], model, *, epoch: int, indices: list[int]) -> list[dict]:
        """Each of ``batches`` (micro-batches ``indices`` of ``epoch``) with every row's last answer replaced by
        ``model``'s keyed sample of its prompt, all rows sampled in one call."""
        from aura.data.sft_batches import Encoded, collate
        from aura.train.objectives.rollout import row_key, sample_completions
        from aura.train.optim.step_engine import autocast_context

        prompts, keys, sizes = [], [], []
        for batch, index in zip(batches, indices):
            rows = [prompt_of(*row) for row in zip(batch["input_ids"], batch["labels"], batch["attention_mask"])]
            first = self.dist.rank * len(rows)
            keys += [row_key(self.seed, epoch, index, first + i) for i in range(len(rows))]
            prompts += rows
            sizes.append(len(rows))
        was_training = model.training
        model.eval()
        try:
            with (
                autocast_context(self.precision, self.dist.device) if model is self.policy else contextlib.nullcontext()
            ):
                out = sample_completions(
                    model,
                    prompts,
                    keys,
                    sampling=self.sampling,
                    tokenizer=self.tok,
                    precision=self.precision,
                    device=self.dist.device,
                )
        finally:
            if was_training:
                model.train()
        completions = out[0] if isinstance(out, tuple) else out
        rows = [[Encoded(p + list(c), [IGNORE] * len(p) + list(c))] for p, c in zip(prompts, completions)]
        starts = [sum(sizes[:i]) for i in range(len(sizes))]
        return [collate(rows[s : s + n], pad_id=self.tok.pad_token_id) for s, n in zip(starts, sizes)]
