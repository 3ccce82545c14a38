"""``--optimizer muon``: Muon for the hidden matrices and AdamW for the rest, as one optimizer.

Muon (Jordan et al. 2024; ``torch.optim.Muon``) replaces a weight matrix's update by the orthogonalised
Nesterov momentum (a few Newton-Schulz iterations push its singular values towards 1), so every
direction of the matrix learns at the same rate. It is defined for the 2-D weights of the hidden layers
only: embeddings (a lookup table), the output head (a per-token classifier) and the 1-D gains and biases
take AdamW, as in modded-nanogpt, nanochat and Moonlight. ``split_params`` decides which is which.

Learning rates transfer from AdamW through Moonlight's update-RMS matching (Liu et al. 2025, "Muon is
Scalable for LLM Training"; torch's ``adjust_lr_fn="match_rms_adamw"``): each orthogonalised update is
scaled by 0.2 * sqrt(max(A, B)), which gives it an RMS of 0.2, the RMS of a typical AdamW update. So
both groups use the same ``--learning-rate`` and ``--weight-decay`` (decoupled, as AdamW's), the schedule
sets both through the shared ``lr`` of every param group, and a preset's AdamW rate is a valid start.
Keller Jordan's own scaling (sqrt(max(1, A/B)), lr ~0.02) would need a second learning rate and its
own sweep per model.

Newton-Schulz runs in bf16 where bf16 is fast, as ``torch.optim.Muon``, modded-nanogpt and Moonlight do
(CUDA; a CPU with avx512_bf16 or AMX, where it is twice as fast as fp32), and in fp32 on any other CPU,
where a bf16 matmul is emulated (the ``tiny`` preset's Muon step took 4x as long in bf16 as in fp32 on an
AVX-512 Xeon without avx512_bf16: ``bench/bench_muon_cpu.py``). ``ns_dtype`` decides, from the probe behind
``--precision auto``, the same on every rank; same coefficients and steps either way
(``muon_dist.newton_schulz``). Orthogonalising the same-shape matrices as one batch (``bmm``) instead of
torch's loop over matrices was measured on CPU for the bench's two sizes: bit-for-bit the same updates and
the same time (0.99-1.03x), so torch's loop is kept. Muon's cost per token at the presets' batch is
measured by ``bench/bench_recipe.py --time-per-token`` (docs/benchmarks.md).

``MuonAdamW`` holds a ``torch.optim.Muon`` and a ``torch.optim.AdamW`` whose param groups and state are
its own (the same dict objects), so one ``step()``, ``zero_grad()``, ``state_dict()`` and
``load_state_dict()`` cover both: one ``optimizer.pt`` per checkpoint, exact resume, a GradScaler's
``unscale_`` and a DiLoCo inner optimizer's state work unchanged.

Several ranks share the orthogonalisation instead of repeating it (``aura.train.optim.muon_dist``), as
modded-nanogpt and nanochat do: the matrices are dealt out by shape, each rank runs Newton-Schulz on its
share, and the results travel in the dtype Newton-Schulz returns (bf16 or fp32).

* DDP (``process_group``, the wrapper's): every rank holds the same all-reduced gradient and updates every
  momentum buffer (elementwise, cheap; rank 0's ``optimizer.pt`` holds them all), orthogonalises its share
  and all-gathers the rest, so every rank applies the same bytes (``Sync=OK``) and the updates are exactly
  those one process computes from the same gradient.
* FSDP2 (DTensor parameters, ``fully_shard``): the momentum stays sharded (a DTensor: DCP saves and reshards
  it); per group of same-shape matrices one all-to-all brings each matrix's shards to the rank that
  orthogonalises it and a second sends every rank its rows of the results.
* One process, DiLoCo's replicas (each rank its own gradient) and DeepSpeed: ``torch.optim.Muon``'s step
  (bf16 Newton-Schulz), or the same step through ``muon_dist.muon_step`` where it runs in fp32.
"""

from __future__ import annotations

import torch

from aura.core.errors import AuraError
from aura.core.i18n import Messages
from aura.train.optim.muon_dist import is_sharded, muon_step

M = Messages(
    "muon",
    {
        "no_matrices": (
            "--optimizer muon: el modelo no tiene matrices ocultas entrenables (proyecciones de atención "
            "o MLP); usa --optimizer adamw.",
            "--optimizer muon: the model has no trainable hidden matrices (attention or MLP "
            "projections); use --optimizer adamw.",
        ),
    },
)

MUON_MOMENTUM = 0.95  # Nesterov, as torch.optim.Muon, modded-nanogpt, nanochat and Moonlight


def ns_dtype(device: torch.device | str, info=None) -> torch.dtype:
    """The dtype Newton-Schulz runs in on ``device``: bf16 on CUDA (torch's choice) and on a CPU with fast
    bf16 (AMX or avx512_bf16: ``hardware.cpu_fast_bf16``, what ``--precision auto`` asks), else fp32.
    ``info``: the ``HardwareInfo`` every rank agreed on (``agree_hardware``: fast bf16 only if every rank
    has it), which decides for a CPU when given, so every rank makes the same choice."""
    kind = torch.device(device).type
    if kind != "cpu":
        return torch.bfloat16
    if info is not None and info.device_type == "cpu":
        return torch.bfloat16 if info.bf16 else torch.float32
    from aura.models.hardware import cpu_fast_bf16

    return torch.bfloat16 if cpu_fast_bf16() else torch.float32


def split_params(model) -> tuple[list, list, list]:
    """(hidden matrices -> Muon, other decayed tensors -> AdamW, undecayed -> AdamW) of the trainable
    parameters, each once. Decay: matrices only; never embeddings, norms' gains or biases."""
    embeddings = {id(m.weight) for m in model.modules() if isinstance(m, torch.nn.Embedding)}
    heads = set()
    for m in model.modules():
        head = m.get_output_embeddings() if hasattr(m, "get_output_embeddings") else None
        if head is not None and getattr(head, "weight", None) is not None:
            heads.add(id(head.weight))
    hidden, decay, no_decay, seen = [], [], [], set()
    for p in model.parameters():
        if not p.requires_grad or id(p) in seen:
            continue
        seen.add(id(p))
        if p.ndim < 2 or id(p) in embeddings:
            no_decay.append(p)
        elif p.ndim == 2 and id(p) not in heads:
            hidden.append(p)
        else:
            decay.append(p)
    return hidden, decay, no_decay


class MuonAdamW(torch.optim.Optimizer):
    """``torch.optim.Muon`` over ``hidden``, ``torch.optim.AdamW`` over the rest: one optimizer.

    Param groups: [Muon's (``"optimizer": "muon"``), AdamW decayed, AdamW undecayed]; the inner
    optimizers see the same group dicts and the same ``state``, re-linked after ``load_state_dict``.
    ``process_group``: under DDP the wrapper's group, whose ranks hold the same gradients and share the
    Newton-Schulz work; ``None`` where every rank's gradient is its own (one process, DiLoCo). FSDP2's
    DTensor parameters share it over their own mesh without being told. ``dtype``: Newton-Schulz's
    (``ns_dtype``; None: decided from the matrices' device)."""

    def __init__(
        self,
        hidden: list,
        decay: list,
        no_decay: list,
        *,
        lr: float,
        weight_decay: float,
        betas: tuple[float, float],
        eps: float,
        momentum: float = MUON_MOMENTUM,
        fused: bool = False,
        process_group: torch.distributed.ProcessGroup | None = None,
        dtype: torch.dtype | None = None,
    ):
        if not hidden:
            raise AuraError(M("no_matrices"))
        self.muon = torch.optim.Muon(
            [{"params": hidden, "weight_decay": weight_decay, "optimizer": "muon"}],
            lr=lr,
            momentum=momentum,
            nesterov=True,
            adjust_lr_fn="match_rms_adamw",
        )
        groups = [
            {"params": decay, "weight_decay": weight_decay, "optimizer": "adamw"},
            {"params": no_decay, "weight_decay": 0.0, "optimizer": "adamw"},
        ]
        kwargs = dict(lr=lr, betas=betas, eps=eps)
        self.adamw = (
            torch.optim.AdamW(groups, fused=True, **kwargs)
            if fused
            else torch.optim.AdamW(groups, foreach=True, **kwargs)
        )
        super().__init__(self.muon.param_groups + self.adamw.param_groups, {})
        self.process_group = process_group
        self.dtype = ns_dtype(hidden[0].device) if dtype is None else dtype
        # torch's own step where nothing is shared and Newton-Schulz is torch's bf16: exactly torch.optim.Muon
        self.shared = process_group is not None or any(is_sharded(p) for p in hidden)
        self._link()

    def _link(self) -> None:
        """The inner optimizers' groups and state are this optimizer's (after __init__ and every load)."""
        n = len(self.muon.param_groups)
        self.muon.param_groups, self.adamw.param_groups = self.param_groups[:n], self.param_groups[n:]
        self.muon.state = self.adamw.state = self.state

    def __setstate__(self, state: dict) -> None:  # load_state_dict installs new groups and state here
        super().__setstate__(state)
        if "muon" in self.__dict__:
            self._link()

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        if self.shared or self.dtype != torch.bfloat16:
            muon_step(self.muon, process_group=self.process_group, dtype=self.dtype)
        else:
            self.muon.step()
        self.adamw.step()
        return loss
