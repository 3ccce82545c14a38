"""``aura pretrain --init-from MODEL``: continue pretraining a causal LM that transformers loads.

The base (a local Hugging Face directory or a hub name: Llama, Mistral, Qwen2, GPT-2...) is loaded in
fp32 with its own config; the run trains it with ``aura pretrain``'s loop, checkpoints and resume, and
``final/`` keeps the base's config and chat template.

Tokenizers. The prepared data must have been tokenised with the tokenizer the run trains with: the base's
own, or (``--tokenizer TOK``) an extension of it (``aura tokenizer extend``): every token of the base at the
same id, new tokens after them. The embedding and (untied) output rows of each new token start as the mean
of the rows of the pieces the base tokenizer splits that token's text into (``mean_of_pieces``).

``--train-new-tokens-only K`` trains only the new rows (``--new-tokens-scope embeddings``: the whole
embedding and output matrices) for the first K optimizer steps; the ``FreezeEngine`` wraps the step engine,
drops the other gradients and restores the frozen rows after each of those steps (AdamW's weight decay
would move them otherwise), then steps aside.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from aura.core import console
from aura.core.errors import AuraError
from aura.core.files import check_model_files
from aura.core.i18n import Messages

M = Messages(
    "init_from",
    {
        "base_failed": (
            "--init-from {name}: no se pudo cargar como modelo causal de transformers ({err}). Indica un "
            "directorio de Hugging Face (config.json + pesos) o un nombre del hub.",
            "--init-from {name}: could not be loaded as a transformers causal LM ({err}). Give a Hugging "
            "Face directory (config.json + weights) or a hub name.",
        ),
        "not_causal": (
            "'{model_type}' no es un modelo causal (generativo) de transformers",
            "'{model_type}' is not a transformers causal (generative) model",
        ),
        "no_tokenizer": (
            "--init-from {name}: el modelo no trae tokenizador ({err}). Indica uno con --tokenizer.",
            "--init-from {name}: the model has no tokenizer ({err}). Give one with --tokenizer.",
        ),
        "data_tok": (
            "Los datos de {data} se tokenizaron con {data_tok} (hash {data_hash}), pero el modelo se entrena "
            "con el tokenizador {tok} (hash {tok_hash}). Prepara los datos con ese tokenizador: "
            "aura data prepare TEXTOS --tokenizer {tok} --output-dir DIR",
            "The data in {data} was tokenised with {data_tok} (hash {data_hash}), but the model trains with "
            "the tokenizer {tok} (hash {tok_hash}). Prepare the data with that tokenizer: "
            "aura data prepare TEXTS --tokenizer {tok} --output-dir DIR",
        ),
        "not_extension": (
            "--tokenizer {tok} no es una extensión del tokenizador de --init-from {base}: {why}. Crea "
            "una con: aura tokenizer extend {base} TEXTOS --add-tokens N --output-dir DIR",
            "--tokenizer {tok} is not an extension of the tokenizer of --init-from {base}: {why}. Create "
            "one with: aura tokenizer extend {base} TEXTS --add-tokens N --output-dir DIR",
        ),
        "why_id": (
            "el token {token!r} tiene el id {ext_id} y en la base {base_id}",
            "token {token!r} has id {ext_id} and {base_id} in the base",
        ),
        "why_missing": ("le falta el token {token!r} de la base", "it lacks the base's token {token!r}"),
        "why_model": (
            "usa otro modelo de tokenización (él: {ext}; la base: {base})",
            "it uses another tokenization model (it: {ext}; the base: {base})",
        ),
        "why_pretok": (
            "usa otra normalización o pre-tokenización que la base",
            "it uses another normalisation or pre-tokenization than the base",
        ),
        "data_vocab": (
            "Los datos de {data} usan ids hasta {ids} pero el modelo tiene {rows:fila|filas} de embedding.",
            "The data in {data} uses ids up to {ids} but the model has {rows:embedding row|embedding rows}.",
        ),
        "resized": (
            "Vocabulario ampliado de {old:,} a {new:fila|filas}: {added:token nuevo|tokens nuevos} inicializados "
            "con la media de las filas de sus piezas en el tokenizador base.",
            "Vocabulary grown from {old:,} to {new:row|rows}: {added:new token|new tokens} initialised with the mean "
            "of their pieces' rows under the base tokenizer.",
        ),
        "base": (
            "Modelo base: {name} ({arch}), {params:parámetro|parámetros}, contexto {seq}.",
            "Base model: {name} ({arch}), {params:parameter|parameters}, context {seq}.",
        ),
        "seq_too_long": (
            "--seq-length {seq} supera el contexto del modelo base ({max}).",
            "--seq-length {seq} exceeds the base model's context ({max}).",
        ),
        "preset_ignored": (
            "Con --init-from el modelo es el de la base: --model-preset y las dimensiones "
            "(--{flag}) no se aplican; quítalos.",
            "With --init-from the model is the base's: --model-preset and the dimensions (--{flag}) "
            "do not apply; remove them.",
        ),
        "freeze": (
            "Pasos 1-{steps}: solo se entrenan {what}; después, todo el modelo.",
            "Steps 1-{steps}: only {what} train; then the whole model.",
        ),
        "freeze_rows": ("las filas de los tokens nuevos", "the new tokens' rows"),
        "freeze_emb": ("los embeddings y la cabeza de salida", "the embeddings and the output head"),
        "freeze_needs_base": (
            "--train-new-tokens-only solo tiene sentido con --init-from (un modelo base y un --tokenizer ampliado).",
            "--train-new-tokens-only only makes sense with --init-from (a base model and an extended --tokenizer).",
        ),
        "freeze_negative": (
            "--train-new-tokens-only no puede ser negativo (recibido: {value}).",
            "--train-new-tokens-only cannot be negative (got: {value}).",
        ),
        "freeze_fsdp": (
            "--train-new-tokens-only no funciona con FSDP (los embeddings están repartidos); usa "
            "--strategy ddp o un solo proceso.",
            "--train-new-tokens-only does not work with FSDP (the embeddings are sharded); use "
            "--strategy ddp or a single process.",
        ),
        "freeze_nothing": (
            "--train-new-tokens-only {steps}: solo se entrenarían los tokens nuevos, pero --tokenizer no "
            "añade ninguno a la base. Quita la opción o usa --new-tokens-scope embeddings.",
            "--train-new-tokens-only {steps}: only the new tokens would train, but --tokenizer adds none "
            "to the base. Remove the option or use --new-tokens-scope embeddings.",
        ),
    },
)

DEFAULT_SEQ = 1024  # context when --seq-length is absent (capped by the base's)
DEFAULTS = dict(
    batch_size=4, learning_rate=1e-4, save_steps=500, gradient_accumulation_steps=1, gradient_checkpointing=False
)  # continued pretraining: a lower LR than from scratch


@dataclass(frozen=True)
class BaseSpec:
    """The model of a ``--init-from`` run as ``aura pretrain`` describes it (in place of a preset)."""

    name: str  # --init-from as given
    arch: str  # config.model_type
    seq_len: int
    max_positions: int | None

    def to_dict(self) -> dict:
        return asdict(self)

    def describe(self) -> str:
        return ""


def check_base(name: str, *, trust_remote_code: bool = False) -> None:
    """Before anything is written: ``name`` has a config of a causal LM that transformers knows."""
    from transformers import AutoConfig
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    from aura.core import hub

    source = hub.resolve(name, flag="--init-from")
    if source.local:
        check_model_files(source.name)  # a damaged config or cut-off weights: named before anything is written
    try:
        config = AutoConfig.from_pretrained(
            source.name, trust_remote_code=trust_remote_code, local_files_only=source.local_files_only
        )
    except Exception as e:  # OSError (no config.json), ValueError (unknown model_type), JSON errors
        offline = hub.offline_error(source, flag="--init-from")
        if offline is not None:
            raise offline from None
        err = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise AuraError(M("base_failed", name=name, err=err[:300])) from None
    if config.model_type not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES and not trust_remote_code:
        raise AuraError(M("base_failed", name=name, err=M("not_causal", model_type=config.model_type)))


def load_base(name: str, *, trust_remote_code: bool = False):
    """The base causal LM in fp32 on the CPU (a missing path or an unloadable model: one AuraError)."""
    import torch
    from transformers import AutoModelForCausalLM

    from aura.core import hub

    source = hub.resolve(name, flag="--init-from")
    try:
        return AutoModelForCausalLM.from_pretrained(
            source.name,
            dtype=torch.float32,
            trust_remote_code=trust_remote_code,
            local_files_only=source.local_files_only,
        )
    except Exception as e:  # OSError, ValueError (unknown architecture), KeyError, safetensors errors
        offline = hub.offline_error(source, flag="--init-from")
        if offline is not None:
            raise offline from None
        err = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise AuraError(M("base_failed", name=name, err=err[:300])) from None


def base_tokenizer(name: str):
    from aura.tokenizer.loading import load_tokenizer

    try:
        return load_tokenizer(name, flag="--init-from")
    except AuraError as e:
        raise AuraError(M("no_tokenizer", name=name, err=str(e).splitlines()[0][:200])) from None


def check_data_tokenizer(tok, tok_name: str, shards) -> None:
    """The prepared data was tokenised with ``tok`` (hash), naming both tokenizers otherwise."""
    from aura.tokenizer.loading import tokenizer_hash

    h, meta = tokenizer_hash(tok), shards.meta["tokenizer"]
    if h != meta["hash"]:
        raise AuraError(
            M(
                "data_tok",
                data=shards.path,
                data_tok=meta.get("name_or_path"),
                data_hash=meta["hash"][:12],
                tok=tok_name,
                tok_hash=h[:12],
            )
        )


def new_token_ids(base_tok, ext_tok, *, base_name: str, ext_name: str) -> list[int]:
    """Ids of the tokens ``ext_tok`` adds to ``base_tok``; refuses a tokenizer that is not an extension."""
    from aura.tokenizer.loading import backend_json

    def fail(why: str):
        raise AuraError(M("not_extension", tok=ext_name, base=base_name, why=why))

    b, e = backend_json(base_tok), backend_json(ext_tok)
    if (b.get("model") or {}).get("type") != (e.get("model") or {}).get("type"):
        fail(M("why_model", ext=(e.get("model") or {}).get("type"), base=(b.get("model") or {}).get("type")))
    if b.get("normalizer") != e.get("normalizer") or b.get("pre_tokenizer") != e.get("pre_tokenizer"):
        fail(M("why_pretok"))
    base_vocab, ext_vocab = base_tok.get_vocab(), ext_tok.get_vocab()
    for token, i in sorted(base_vocab.items(), key=lambda kv: kv[1]):
        if token not in ext_vocab:
            fail(M("why_missing", token=token))
        if ext_vocab[token] != i:
            fail(M("why_id", token=token, ext_id=ext_vocab[token], base_id=i))
    return sorted(i for t, i in ext_vocab.items() if t not in base_vocab)


def pieces_of(base_tok, ext_tok, token_id: int, *, backend=None, added: set | None = None) -> list[int]:
    """The base tokenizer's ids for the text of ``ext_tok``'s token ``token_id``.

    A model token (BPE vocabulary, in the model's own alphabet: byte-level or ``▁``) is split by the base's
    BPE model directly, which is exactly how the base would tokenise those bytes inside a word; an added
    token (special) by encoding its content.
    """
    from aura.tokenizer.loading import backend_of

    token = ext_tok.convert_ids_to_tokens(token_id)
    backend = backend if backend is not None else backend_of(base_tok)
    added = added if added is not None else added_contents(ext_tok)
    if token not in added:
        pieces = [t.id for t in backend.model.tokenize(token)]
        if pieces:
            return pieces
    return backend.encode(token, add_special_tokens=False).ids


def added_contents(tok) -> set[str]:
    """The added (special) tokens' texts of a fast tokenizer."""
    backend = tok.backend_tokenizer
    return (
        {t.content for t in backend.get_added_tokens_decoder().values()}
        if hasattr(backend, "get_added_tokens_decoder")
        else set()
    )


def mean_of_pieces(model, base_tok, ext_tok, new_ids: list[int]) -> dict[int, list[int]]:
    """Grow ``model``'s embeddings to cover every id of ``ext_tok`` (never shrink) and set each new token's input and
    (untied) output row to the mean of its pieces' rows; returns {new id: pieces}."""
    import torch

    emb = model.get_input_embeddings().weight
    old_rows = emb.shape[0]
    # the pieces' rows are read before resizing: a base padded beyond its tokenizer may hold new ids already
    with torch.no_grad():
        emb_old = emb.detach().clone()
        head = model.get_output_embeddings()
        tied = head is None or head.weight is emb
        head_old = None if tied else head.weight.detach().clone()
    needed = max(ext_tok.get_vocab().values()) + 1  # ids may have gaps (added tokens past the BPE vocabulary)
    if needed > old_rows:
        model.resize_token_embeddings(needed, mean_resizing=False)
    emb = model.get_input_embeddings().weight
    head = model.get_output_embeddings()
    from aura.tokenizer.loading import backend_of

    backend, added = backend_of(base_tok), added_contents(ext_tok)  # once: a large vocabulary takes a while
    pieces = {i: pieces_of(base_tok, ext_tok, i, backend=backend, added=added) for i in new_ids}
    with torch.no_grad():
        for i, ids in pieces.items():
            idx = torch.tensor(ids, dtype=torch.long)
            emb[i] = emb_old[idx].mean(dim=0)
            if not tied:
                head.weight[i] = head_old[idx].mean(dim=0)
                bias = getattr(head, "bias", None)
                if bias is not None:
                    bias[i] = 0.0
    if needed > old_rows:
        console.info(M("resized", old=old_rows, new=emb.shape[0], added=len(new_ids)))
    return pieces


def base_spec(name: str, model, seq_length: int | None) -> BaseSpec:
    cfg = model.config
    max_pos = getattr(cfg, "max_position_embeddings", None) or getattr(cfg, "n_positions", None)
    seq = seq_length or min(DEFAULT_SEQ, max_pos or DEFAULT_SEQ)
    if max_pos and seq > max_pos:
        raise AuraError(M("seq_too_long", seq=seq, max=max_pos))
    return BaseSpec(name=name, arch=cfg.model_type, seq_len=int(seq), max_positions=max_pos)


class FreezeEngine:
    """A step engine that, for the first ``steps`` optimizer steps, lets only ``rows`` of the embedding and
    output matrices learn (``rows=None``: the whole matrices), then behaves as the engine it wraps."""

    def __init__(self, inner, model, *, steps: int, rows: list[int] | None):
        import torch

        from aura.distributed import unwrap

        self.inner, self.steps, self.step = inner, steps, 0
        core = unwrap(model)
        mats = [core.get_input_embeddings().weight]
        head = core.get_output_embeddings()
        if head is not None and head.weight is not mats[0]:
            mats.append(head.weight)
        self._mats = mats
        self._others = [p for p in core.parameters() if p.requires_grad and all(p is not m for m in mats)]
        self._keep = None
        if rows is not None:
            n = mats[0].shape[0]
            mask = torch.ones(n, dtype=torch.bool)
            mask[torch.tensor(rows, dtype=torch.long)] = False
            self._keep = mask  # rows that stay frozen
        self.precision = inner.precision

    def __getattr__(self, name):  # optimizer, scaler, dist...: the wrapped engine's
        return getattr(self.inner, name)

    def describe(self) -> str:
        return self.inner.describe()

    def autocast(self):
        return self.inner.autocast()

    def set_lr(self, lr: float) -> None:
        self.inner.set_lr(lr)

    def backward(self, loss, *, last: bool) -> None:
        self.inner.backward(loss, last=last)

    def finish(self, window_loss):
        if self.step >= self.steps:
            self.step += 1
            return self.inner.finish(window_loss)
        saved = []
        for p in self._others:
            p.grad = None  # AdamW skips a parameter without a gradient (no update, no decay)
        for m in self._mats:
            if self._keep is not None:
                saved.append(m.detach()[self._keep].clone())
                if m.grad is not None:
                    m.grad[self._keep] = 0
        outcome = self.inner.finish(window_loss)
        import torch

        with torch.no_grad():  # weight decay and Adam's running moments must not move the frozen rows
            for m, rows in zip(self._mats, saved):
                m[self._keep] = rows
        self.step += 1
        return outcome

    def state_dict(self) -> dict:
        return {"inner": self.inner.state_dict(), "freeze_step": self.step}

    def load_state_dict(self, state: dict) -> None:
        if "freeze_step" in state:
            self.step = int(state["freeze_step"])
            state = state.get("inner") or {}
        self.inner.load_state_dict(state)


def check_flags(cfg) -> None:
    """``--init-from`` takes the base's model: no preset or dimension flags; the freeze needs a base."""
    if cfg.init_from is None:
        raise AuraError(M("freeze_needs_base"))
    if cfg.model_preset != "auto":
        raise AuraError(M("preset_ignored", flag="model-preset"))
    for field in ("arch", "embed_size", "num_layers", "num_heads", "num_kv_heads", "intermediate_size", "vocab_size"):
        if getattr(cfg, field) is not None:
            raise AuraError(M("preset_ignored", flag=field.replace("_", "-")))
    if cfg.train_new_tokens_only < 0:
        raise AuraError(M("freeze_negative", value=cfg.train_new_tokens_only))
