"""The generation engine behind ``sample_batch``: one fixed batch, a preallocated KV cache, no host sync per token.

``decode_batch`` keeps the shape of the batch fixed from the first token to the last, so that the one-token
step can be replayed as a CUDA graph and costs the same host work at every step:

* the prompts are left-padded to one width W; each *distinct* prompt is prefilled once (GRPO's G rows of a
  prompt share it), and its keys and values are written into a cache of W + ``max_new_tokens`` columns per
  row (preallocated once, written in place by every step: no ``torch.cat``);
* the one-token step is ``aura.inference.lean``'s for the Llama family (the model's own modules over a cache of
  its own, without transformers' per-layer machinery), else the model's forward over a
  ``transformers.StaticCache``;
* the attention mask is preallocated at that width too: a step writes a column of ones, never grows it;
* a finished row keeps its slot (its later tokens are computed and thrown away): no compaction, no
  reindexing of the cache, and no row changes another row's tokens;
* the draw (``aura.inference.sampling.next_tokens``, the same keyed stream: a completion depends only on its
  key and the model), the stop ids, each row's length and "finished" stay on the device; the host reads
  them every ``check_every`` tokens (to stop early, and to look for stop *strings*, which need the text:
  a row that completed one is cut at the token that completed it, exactly as ``sample_batch_reference``
  cuts it, and the tokens it drew past it are dropped);
* on CUDA, asked with ``graphs`` (GRPO's rollouts), the one-token step runs through
  ``torch.compile(mode="reduce-overhead")`` (a CUDA graph, warmed at the first steps of each shape); the
  prompt width is rounded up to a multiple of 64 and the cache is kept from one rollout to the next, so a
  run of rollouts meets few shapes and the graph's addresses stay put; if compiling or capturing fails,
  the step runs eagerly and says so once.

With ``logps=True`` it also returns, per completion token, the log-probability the sampler gave it
(``log_softmax(logits / temperature)``, the loss's own definition): GRPO weighs its loss by the truncated
importance ratio when the sampling weights are not the trained ones (a merged bf16 copy, for instance).
"""

from __future__ import annotations

import inspect

import torch

from aura.core import console
from aura.core.i18n import Messages

M = Messages(
    "decode",
    {
        "eager": (
            "El paso de generación no se pudo compilar como grafo CUDA ({err}): sigue en modo eager, más lento.",
            "The generation step could not be compiled as a CUDA graph ({err}): it goes on eagerly, slower.",
        ),
    },
)

CHECK_EVERY = 8  # tokens between two looks of the host at the device's "finished" flags
_SAID: set[str] = set()
_COMPILED: dict[int, object] = {}  # id(model) -> its compiled forward (one warm-up per shape)
_KEPT: dict[tuple, object] = {}  # (id(model), rows, columns) -> its cache (or lean step), kept for the next rollout
BUCKET = 64  # with CUDA graphs, the prompt width is rounded up to a multiple of this: few shapes, few captures


def causal_lm(model):
    """The transformers ``*ForCausalLM`` inside a DDP/DeepSpeed wrapper and peft's model."""
    inner = getattr(model, "module", model)
    return inner.get_base_model() if hasattr(inner, "get_base_model") else inner


def cache_key(model) -> str:
    """The forward's name for its cache: ``cache`` from transformers 5.24, else ``past_key_values``."""
    return "cache" if "cache" in inspect.signature(type(causal_lm(model)).forward).parameters else "past_key_values"


def _kept(model, rows: int, total: int, kind: str, make):
    """The ``kind`` of object kept for this model and shape (``make()`` when none is kept yet), from rollout to
    rollout (one shape at a time holds its memory), so that a CUDA graph finds its tensors at the same addresses."""
    slot = (id(model), rows, total, kind)
    if slot not in _KEPT:
        _KEPT.clear()
        _KEPT[slot] = make()
    return _KEPT[slot]


def _step(model, prefill, expand: torch.Tensor, *, key: str, width: int, total: int, device, graphs: bool):
    """The one-token step, ``(tokens (N,), positions (N,), attn (N, total), column) -> logits (N, V)``, its cache
    holding every row's prompt (prefilled rows ``expand``): the lean step (``aura.inference.lean``) where it
    applies, else the model's forward over a ``transformers.StaticCache``; with ``graphs`` (CUDA) the same cache
    from rollout to rollout and the step compiled for CUDA graphs (each row reads every column then, so that
    every step has one shape)."""
    from aura.inference.lean import lean_step

    rows, inner = int(expand.numel()), causal_lm(model)
    lean = lean_step(inner, total=total)
    if lean is not None:
        if graphs:  # the kept step's cache tensors, this rollout's modules
            lean = _kept(model, rows, total, "lean", lambda: lean).adopt(lean)
        lean.prime(prefill, expand, width=width, total=total)
        run = _Graphed(lean, lean, graphs)

        def step(tok, positions, attn, column):
            at = torch.tensor([column], device=device)
            return run(tok, positions, attn, at, upto=None if graphs else column + 1)

        return step
    from transformers import StaticCache

    def fresh():
        return StaticCache(config=inner.config, max_cache_len=total)

    cache = _kept(model, rows, total, "static", fresh) if graphs else fresh()
    cache.reset()
    columns = torch.arange(width, device=expand.device)
    for i, layer in enumerate(prefill.layers):  # (U, heads, W, head_dim) each
        cache.update(layer.keys[expand], layer.values[expand], i, {"cache_position": columns})
    forward = _Graphed(model, model, graphs)

    def hf_step(tok, positions, attn, column):
        return forward(
            input_ids=tok[:, None],
            attention_mask=attn,
            position_ids=positions[:, None],
            cache_position=torch.tensor([column], device=device),
            use_cache=True,
            **{key: cache},
        ).logits[:, -1]

    return hf_step


class _Graphed:
    """``fn`` as it is, or (``graphs``) compiled for CUDA graphs once per ``owner``; any failure to compile or
    capture falls back to the eager ``fn`` from then on, said once."""

    def __init__(self, owner, fn, graphs: bool):
        self.owner, self.eager, self.fn = owner, fn, fn
        if graphs:
            if id(owner) not in _COMPILED:
                try:
                    _COMPILED.clear()  # one model's graphs at a time
                    _COMPILED[id(owner)] = torch.compile(fn, mode="reduce-overhead", dynamic=False)
                except Exception as err:  # noqa: BLE001 - any failure falls back to eager (said once)
                    _say_eager(err)
                    _COMPILED[id(owner)] = fn
            self.fn = _COMPILED[id(owner)]

    def __call__(self, *args, **kwargs):
        if self.fn is self.eager:
            return self.eager(*args, **kwargs)
        try:
            return self.fn(*args, **kwargs)
        except Exception as err:  # noqa: BLE001 - a graph that cannot be captured: eager from now on
            _say_eager(err)
            self.fn = _COMPILED[id(self.owner)] = self.eager
            return self.eager(*args, **kwargs)


def _say_eager(err: BaseException) -> None:
    if "eager" not in _SAID:
        _SAID.add("eager")
        console.warn(M("eager", err=f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"[:200]))


def _cut_strings(
    seq: list[int], *, start: int, end: int, stop_ids: set[int], tokenizer, stops: tuple[str, ...], window: int
) -> int | None:
    """The length of ``seq`` kept when a stop string completes at a token of ``seq[start:end]`` (None if none),
    each token checked as ``sample_batch_reference`` checks it (the last ``window`` tokens decoded)."""
    from aura.inference.draws import stop_cut

    for j in range(start, end):
        if seq[j] in stop_ids:
            return None
        tail = seq[max(0, j + 1 - window) : j + 1]
        cut = stop_cut(tail, tokenizer, stops)
        if cut is not None:
            return j + 1 - len(tail) + cut
    return None


@torch.no_grad()
def decode_batch(
    model,
    prompts: list[list[int]],
    params,
    *,
    pad_id: int,
    device,
    tokenizer=None,
    generator: torch.Generator | None = None,
    keys: list[int] | None = None,
    logps: bool = False,
    check_every: int = CHECK_EVERY,
    graphs: bool = False,
):
    """The completion ids of every prompt (and, with ``logps``, the sampler's log-prob of each token).

    Same contract as ``aura.inference.sampling.sample_batch``; see the module docstring for how it runs.
    ``graphs``: on CUDA, the one-token step as a CUDA graph (worth it for a loop of rollouts, not for one
    command's few batches: the first capture of each shape costs seconds)."""
    from aura.inference.draws import next_tokens

    device = torch.device(device)
    graphs = graphs and device.type == "cuda"
    n, width = len(prompts), max(len(p) for p in prompts)
    if graphs:
        width = -(-width // BUCKET) * BUCKET
    total = width + params.max_new_tokens
    key = cache_key(model)
    attn, lengths, logits, prefill, expand = _prefill(
        model, prompts, key=key, pad_id=pad_id, device=device, width=width, total=total
    )
    step_fn = _step(model, prefill, expand, key=key, width=width, total=total, device=device, graphs=graphs)

    out = torch.full((n, params.max_new_tokens), pad_id, dtype=torch.long, device=device)  # (N, max_new)
    out_logps = torch.zeros((n, params.max_new_tokens), dtype=torch.float32, device=device) if logps else None
    done_len = torch.zeros(n, dtype=torch.long, device=device)  # tokens kept per row so far
    finished = torch.zeros(n, dtype=torch.bool, device=device)
    stop_ids = torch.tensor(params.stop_ids or [-1], device=device)
    row_keys = torch.tensor(keys, dtype=torch.long, device=device) if keys is not None else None
    strings = _StopStrings(n, params, tokenizer) if params.stop_strings and tokenizer is not None else None
    one = torch.ones((n,), dtype=attn.dtype, device=device)
    for step in range(params.max_new_tokens):
        tok = next_tokens(logits, params, generator, row_keys, step)  # (N,)
        if out_logps is not None:
            scaled = logits.float() / (params.temperature if params.temperature > 0 else 1.0)
            out_logps[:, step] = scaled.log_softmax(-1).gather(1, tok[:, None]).squeeze(1)
        out[:, step] = tok
        done_len += (~finished).long()
        finished |= torch.isin(tok, stop_ids)
        last = step == params.max_new_tokens - 1
        if last or (step + 1) % check_every == 0:
            if strings is not None:  # the host decodes the new tokens of the live rows
                strings.look(out, done_len, finished, end=step + 1)
            if last or bool(finished.all()):
                break
        column = width + step  # the column the token just drawn goes to
        attn[:, column] = one
        logits = step_fn(tok, lengths + step, attn, column)  # (N, V)
    lens = done_len.tolist()
    rows = out.tolist()
    cut = strings.cut if strings is not None else {}
    completions = [row[: cut.get(r, lens[r])] for r, row in enumerate(rows)]
    if out_logps is None:
        return completions
    lp = out_logps.tolist()
    return completions, [row[: len(c)] for row, c in zip(lp, completions)]


def _prefill(
    model,
    prompts: list[list[int]],
    *,
    key: str,
    pad_id: int,
    device: torch.device,
    width: int,
    total: int,
):
    """The prompts left-padded to ``width`` and each distinct one prefilled once; returns the attention mask
    preallocated at ``total`` columns (N, total), the prompts' lengths (N,), the last prompt token's logits
    (N, V), the prefill's cache (one row per distinct prompt) and each row's row in it (N,)."""
    from transformers import DynamicCache

    n = len(prompts)
    ids = torch.full((n, width), pad_id, dtype=torch.long)
    attn = torch.zeros((n, total), dtype=torch.long)  # (N, W + max_new): preallocated, written column by column
    for i, p in enumerate(prompts):  # left padding: every row's last prompt token is at column W - 1
        ids[i, width - len(p) :] = torch.tensor(p, dtype=torch.long)
        attn[i, width - len(p) : width] = 1
    ids, attn = ids.to(device), attn.to(device)
    lengths = torch.tensor([len(p) for p in prompts], dtype=torch.long, device=device)  # (N,)
    place: dict[tuple[int, ...], int] = {}  # each distinct prompt -> its row in the prefill: repeats run once
    of_row = [place.setdefault(tuple(p), len(place)) for p in prompts]
    first = torch.tensor([of_row.index(u) for u in range(len(place))], device=device)  # (U,)
    expand = torch.tensor(of_row, device=device)  # (N,)
    prefill = DynamicCache()  # every layer whole (a sliding layer's window is applied by the static cache)
    mask_p = attn[first, :width]
    pos_p = (mask_p.cumsum(-1) - 1).clamp(min=0)
    logits = model(
        input_ids=ids[first],
        attention_mask=mask_p,
        position_ids=pos_p,
        use_cache=True,
        logits_to_keep=1,
        **{key: prefill},
    ).logits[:, -1][expand]  # (N, V)
    return attn, lengths, logits, prefill, expand


class _StopStrings:
    """The host's look for stop strings: the new tokens of the rows not cut yet are decoded, and a row whose
    stop string completed is cut (``cut``: row -> its length) and marked finished on the device."""

    def __init__(self, n: int, params, tokenizer):
        self.params = params
        self.tokenizer = tokenizer
        self.window = 8 + max(map(len, params.stop_strings), default=0)
        self.cut: dict[int, int] = {}  # row -> its length, cut at a stop string
        self.seqs: list[list[int]] = [[] for _ in range(n)]
        self.checked = 0  # tokens already looked at

    def look(self, out: torch.Tensor, done_len: torch.Tensor, finished: torch.Tensor, *, end: int) -> None:
        """Look at the tokens drawn since the last look, up to column ``end`` of ``out`` (N, max_new)."""
        fresh = out[:, self.checked : end].tolist()
        lens = done_len.tolist()
        newly = []
        for r in range(len(self.seqs)):
            if r in self.cut:
                continue
            self.seqs[r].extend(fresh[r])
            c = _cut_strings(
                self.seqs[r],
                start=self.checked,
                end=min(end, lens[r]),
                stop_ids=set(self.params.stop_ids),
                tokenizer=self.tokenizer,
                stops=self.params.stop_strings,
                window=self.window,
            )
            if c is not None:
                self.cut[r] = c
                newly.append(r)
        if newly:
            finished[torch.tensor(newly, device=finished.device)] = True
        self.checked = end
