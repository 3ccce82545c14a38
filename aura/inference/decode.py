"""The generation engine behind ``sample_batch``: one fixed batch, a preallocated KV cache, no host sync per token.

``decode_batch`` keeps the shape of the batch fixed from the first token to the last, so that the one-token
step can be replayed as a CUDA graph and costs the same host work at every step:

* the prompts are left-padded to one width W; each *distinct* prompt is prefilled once (GRPO's G rows of a
  prompt share it), and its keys and values are written into a ``transformers.StaticCache`` of W +
  ``max_new_tokens`` columns per row (preallocated once, written in place by every step: no ``torch.cat``);
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
_CACHES: dict[tuple, object] = {}  # (id(model), rows, columns) -> its StaticCache, kept for the next rollout
BUCKET = 64  # with CUDA graphs, the prompt width is rounded up to a multiple of this: few shapes, few captures


def _inner(model):
    inner = getattr(model, "module", model)
    return inner.get_base_model() if hasattr(inner, "get_base_model") else inner


def cache_key(model) -> str:
    """The forward's name for its cache: ``cache`` from transformers 5.24, else ``past_key_values``."""
    return "cache" if "cache" in inspect.signature(type(_inner(model)).forward).parameters else "past_key_values"


def _layer_kv(cache, i: int) -> tuple[torch.Tensor, torch.Tensor]:
    layer = cache.layers[i]
    return layer.keys, layer.values


def _static_cache(model, *, prefill, expand: torch.Tensor, width: int, total: int, keep: bool):
    """A StaticCache of ``total`` columns per row holding each row's prompt (prefilled rows ``expand``);
    with ``keep`` the same one (same tensors, so the same addresses for a CUDA graph) from rollout to rollout."""
    from transformers import StaticCache

    slot = (id(model), int(expand.numel()), total)
    cache = _CACHES.get(slot) if keep else None
    if cache is None:
        cache = StaticCache(config=_inner(model).config, max_cache_len=total)
        if keep:
            _CACHES.clear()  # one rollout shape at a time holds its memory
            _CACHES[slot] = cache
    else:
        cache.reset()
    columns = torch.arange(width, device=expand.device)
    for i in range(len(prefill.layers)):
        k, v = _layer_kv(prefill, i)  # (U, heads, W, head_dim)
        cache.update(k[expand], v[expand], i, {"cache_position": columns})
    return cache


class _Step:
    """The model's forward for the one-token step: on CUDA (``graphs``) compiled for CUDA graphs, once per
    model; any failure to compile or capture falls back to the eager forward, said once."""

    def __init__(self, model, device: torch.device, graphs: bool):
        self.model = model
        self.fn = model
        if graphs and device.type == "cuda":
            if id(model) not in _COMPILED:
                try:
                    _COMPILED[id(model)] = torch.compile(model, mode="reduce-overhead", dynamic=False)
                except Exception as err:  # noqa: BLE001 - any failure falls back to eager (said once)
                    _say_eager(err)
                    _COMPILED[id(model)] = model
            self.fn = _COMPILED[id(model)]

    def __call__(self, **inputs):
        if self.fn is self.model:
            return self.model(**inputs)
        try:
            return self.fn(**inputs)
        except Exception as err:  # noqa: BLE001 - a graph that cannot be captured: eager from now on
            _say_eager(err)
            self.fn = _COMPILED[id(self.model)] = self.model
            return self.model(**inputs)


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
    attn, lengths, logits, cache = _prefill(
        model, prompts, key=key, pad_id=pad_id, device=device, width=width, total=total, graphs=graphs
    )
    step_fn = _Step(model, device, graphs)

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
        logits = step_fn(
            input_ids=tok[:, None],
            attention_mask=attn,
            position_ids=(lengths + step)[:, None],
            cache_position=torch.tensor([column], device=device),
            use_cache=True,
            **{key: cache},
        ).logits[:, -1]  # (N, V)
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
    graphs: bool,
):
    """The prompts left-padded to ``width`` and each distinct one prefilled once; returns the attention mask
    preallocated at ``total`` columns (N, total), the prompts' lengths (N,), the last prompt token's logits
    (N, V) and the StaticCache holding every row's prompt."""
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
    cache = _static_cache(model, prefill=prefill, expand=expand, width=width, total=total, keep=graphs)
    return attn, lengths, logits, cache


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
