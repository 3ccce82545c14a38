"""One streaming text-generation interface over two real backends: transformers and llama.cpp.

``open_engine(model, adapter)`` returns an engine for a HF dir / checkpoint / base + adapter
(transformers ``generate`` with ``TextIteratorStreamer``) or for a GGUF file (llama-cpp-python, whose
chat completion uses the chat template embedded in the GGUF). Both stream text pieces and report how
many tokens they produced. Models without a chat template get a plain "Usuario:/Asistente:" format.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from aura.core import console
from aura.core.i18n import Messages

M = Messages(
    "engine",
    {
        "turns_dropped": (
            "El contexto del modelo ({ctx:token|tokens}) no admite toda la conversación: se dejan "
            "fuera los mensajes más antiguos ({n:mensaje|mensajes}; /reset empieza de nuevo).",
            "The model's context ({ctx:token|tokens}) cannot hold the whole conversation: the oldest "
            "messages are left out ({n:message|messages}; /reset starts again).",
        ),
        "prompt_cut": (
            "El texto de entrada ({have:token|tokens}) no cabe en el contexto del modelo "
            "({ctx:token|tokens}): se usan sus últimos {kept:token|tokens}.",
            "The input text ({have:token|tokens}) does not fit the model's context ({ctx:token|tokens}): "
            "its last {kept:token is|tokens are} used.",
        ),
        "answer_capped": (
            "El contexto del modelo ({ctx:token|tokens}) deja sitio para {n:token nuevo|tokens nuevos} "
            "(se pidieron {asked}).",
            "The model's context ({ctx:token|tokens}) leaves room for {n:new token|new tokens} ({asked} "
            "were asked for).",
        ),
    },
)

USER, ASSISTANT = "Usuario", "Asistente"


@dataclass
class Sampling:
    max_new_tokens: int = 128
    temperature: float = 0.8
    top_k: int = 50
    top_p: float = 0.95
    repetition_penalty: float = 1.0
    seed: int = 0
    # max_new_tokens is what the user asked for (a flag they gave), not a default: only then is fitting the
    # answer to the model's context said (a default is an upper bound, silently fitted)
    asked: bool = True


@dataclass
class Result:
    text: str
    tokens: int


def plain_chat_prompt(messages: list[dict]) -> str:
    """A chat as plain text for models without a template: system line, then User:/Assistant: turns."""
    parts = []
    for m in messages:
        if m["role"] == "system":
            parts.append(m["content"].strip() + "\n")
        else:
            parts.append(f"{USER if m['role'] == 'user' else ASSISTANT}: {m['content'].strip()}")
    return "\n".join(parts) + f"\n{ASSISTANT}:"


PLAIN_STOPS = [f"\n{USER}:"]


def seed_everything(seed: int) -> None:
    """What ``transformers.set_seed`` does (Python's, NumPy's and torch's generators on every device),
    without importing ``transformers.trainer_utils``: that module imports peft, and peft bitsandbytes with
    TorchDynamo and Inductor: about a second of every ``aura generate`` and ``chat`` for a plain model."""
    import random

    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)  # every device's generator, CUDA's included


class HFEngine:
    kind = "hf"

    def __init__(self, source, *, dtype: str = "float32"):
        from aura.inference.loading import end_of_turn_ids, load_hf

        self.model, self.tok = load_hf(source, dtype=dtype)
        self.name = f"{source.base} + {source.path}" if source.kind == "adapter" else str(source.path)
        self.cancel = threading.Event()  # set by Ctrl+C in the chat to stop the current answer
        self.stop_ids = end_of_turn_ids(self.tok)
        self.has_template = bool(getattr(self.tok, "chat_template", None))
        self.said: set = set()  # context cuts already told to the user (aura.inference.backends.fit_context)

    def stream(
        self,
        *,
        prompt: str | None = None,
        messages: list[dict] | None = None,
        sampling: Sampling,
        out: list,
        notify=None,
    ) -> Iterator[str]:
        """Yield text pieces; append a Result to ``out`` when done. ``notify``: see ``fit_context`` (given,
        each call says its own context cuts; else the engine says each once)."""
        import torch
        from transformers import TextIteratorStreamer

        from aura.models.presets import context_length

        stops = PLAIN_STOPS if messages is not None and not self.has_template else None
        ids, max_new, _ = fit_context(
            lambda m: self._encode(prompt, m),
            messages,
            sampling.max_new_tokens,
            context_length(self.model.config),
            said=None if notify else self.said,
            asked=sampling.asked,
            notify=notify,
        )
        seed_everything(sampling.seed)
        streamer = TextIteratorStreamer(self.tok, skip_prompt=True, skip_special_tokens=True)
        kwargs = self._generate_kwargs(ids, max_new, sampling, stops=stops, streamer=streamer)
        cancel = self.cancel
        holder: dict = {}

        def run():
            try:
                with torch.no_grad():
                    holder["ids"] = self.model.generate(**kwargs)
            except BaseException as e:  # re-raised in the caller's thread
                holder["error"] = e
                streamer.end()

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        pieces = []
        try:
            for piece in streamer:
                pieces.append(piece)
                yield piece
        finally:
            if thread.is_alive():  # the caller stopped early (Ctrl+C): stop generate() too
                cancel.set()
            thread.join()
        if "error" in holder:
            raise holder["error"]
        new = holder["ids"][0, ids.shape[1] :]
        text = "".join(pieces)
        if stops:
            for s in stops:
                text = text.split(s)[0]
        out.append(Result(text=text, tokens=int(new.numel())))

    def _generate_kwargs(self, ids, max_new: int, sampling: Sampling, *, stops, streamer) -> dict:
        """``generate``'s arguments: greedy or sampled (a 0 turns top-k/top-p off), the stop ids and strings, and a
        stopping criterion that ends it when ``self.cancel`` is set (cleared here)."""
        import torch
        from transformers import StoppingCriteria, StoppingCriteriaList

        sample = sampling.temperature > 0
        kwargs = dict(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=max_new,
            do_sample=sample,
            repetition_penalty=sampling.repetition_penalty,
            eos_token_id=self.stop_ids,
            pad_token_id=self.tok.pad_token_id,
            streamer=streamer,
        )
        if sample:
            kwargs.update(temperature=sampling.temperature, top_k=sampling.top_k, top_p=sampling.top_p)
        if stops:
            kwargs.update(stop_strings=stops, tokenizer=self.tok)
        cancel = self.cancel
        cancel.clear()

        class _Cancel(StoppingCriteria):
            def __call__(self, input_ids, scores, **kw):
                return cancel.is_set()

        kwargs["stopping_criteria"] = StoppingCriteriaList([_Cancel()])
        return kwargs

    def batch(
        self, prompts: list[str], *, chats: list[list[dict]] | None, sampling: Sampling, batch_size: int = 16
    ) -> Iterator[tuple[list[int], list[Result], float]]:
        """Yield (indices, their Results, the batch's seconds) for batches of ``prompts`` run together through
        Aura's engine (``aura.inference.decode``), prompts of close lengths together. Greedy: each answer is
        the one the prompt gets alone (up to float rounding). Sampled: each prompt draws from its own key
        (``sampling.seed`` and its index), so its answer does not depend on the batch it ran in (another
        stream than ``stream``'s). No repetition penalty (``stream`` applies it)."""
        import hashlib
        import time

        from aura.inference.sampling import SamplingParams, sample_batch
        from aura.models.presets import context_length

        stops = tuple(PLAIN_STOPS) if chats is not None and not self.has_template else ()
        fitted = []
        for i, prompt in enumerate(prompts):
            ids, max_new, _ = fit_context(
                lambda m, p=prompt: self._encode(p, m),
                None if chats is None else chats[i],
                sampling.max_new_tokens,
                context_length(self.model.config),
                said=self.said,
                asked=sampling.asked,
            )
            fitted.append((ids[0].tolist(), max(1, max_new)))
        keys = [
            int.from_bytes(hashlib.sha256(f"aura-generate:{sampling.seed}:{i}".encode()).digest()[:8], "little")
            & ((1 << 63) - 1)
            for i in range(len(prompts))
        ]
        order = sorted(range(len(prompts)), key=lambda i: (fitted[i][1], len(fitted[i][0])))
        device = next(self.model.parameters()).device
        pad = self.tok.pad_token_id if self.tok.pad_token_id is not None else self.tok.eos_token_id
        start = 0
        while start < len(order):
            room = fitted[order[start]][1]
            chunk = [i for i in order[start : start + batch_size] if fitted[i][1] == room]
            start += len(chunk)
            params = SamplingParams(
                max_new_tokens=room,
                temperature=sampling.temperature,
                top_k=sampling.top_k,
                top_p=sampling.top_p,
                stop_ids=tuple(self.stop_ids),
                stop_strings=stops,
            )
            t0 = time.perf_counter()
            new = sample_batch(
                self.model,
                [fitted[i][0] for i in chunk],
                params,
                pad_id=pad,
                device=device,
                tokenizer=self.tok,
                keys=[keys[i] for i in chunk],
            )
            seconds = time.perf_counter() - t0
            results = []
            for ids in new:
                text = self.tok.decode(ids, skip_special_tokens=True)
                for s in stops:
                    text = text.split(s)[0]
                results.append(Result(text=text, tokens=len(ids)))
            yield chunk, results, seconds

    def _encode(self, prompt: str | None, messages: list[dict] | None):
        """(1, T) token ids of a prompt, or of a chat in the model's template (plain format without one)."""
        if messages is not None and self.has_template:
            text = self.tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
            return self.tok(text, add_special_tokens=False, return_tensors="pt")["input_ids"]
        if messages is not None:
            prompt = plain_chat_prompt(messages)
        return self.tok(prompt, return_tensors="pt")["input_ids"]


def fit_context(
    encode,
    messages: list[dict] | None,
    max_new: int,
    ctx: int | None,
    *,
    said: set | None = None,
    asked: bool = True,
    notify=None,
):
    """(ids, max_new_tokens, the messages kept) that fit a model of ``ctx`` positions, so generation never
    runs past them (learned positions, GPT-2's, fail there; rotary ones degrade; llama.cpp fails).
    ``encode(messages)`` gives the (1, T) ids.

    Room is kept for ``min(max_new, ctx // 2)`` new tokens: a chat first leaves out its oldest messages
    (never the system one, never the last), then any prompt keeps its last tokens; ``max_new`` shrinks to
    what is left. A cut of the user's text (turns left out, a prompt's start dropped) is said once per
    call, or once per ``said`` set (an engine's); a shorter answer only when ``asked`` (the user chose
    ``max_new``): a default length is an upper bound, fitted silently. ``notify(text)`` receives what is said
    (default: a warning on the terminal; ``aura studio`` shows it on the page).
    """
    said = set() if said is None else said
    notify = notify or console.warn

    def warn(key: str, **values) -> None:
        if key not in said:
            said.add(key)
            notify(M(key, **values))

    ids = encode(messages)
    if not ctx or ids.shape[1] + max_new <= ctx:
        return ids, max_new, messages
    room = ctx - min(max_new, ctx // 2)
    dropped = 0
    if messages is not None:
        system = [m for m in messages if m["role"] == "system"]
        turns = [m for m in messages if m["role"] != "system"]
        while ids.shape[1] > room and len(turns) > 1:
            turns = turns[1:]
            while len(turns) > 1 and turns[0]["role"] != "user":  # a chat starts with the user
                turns = turns[1:]
            dropped = len(messages) - len(system) - len(turns)
            ids = encode(system + turns)
        messages = system + turns
        if dropped:
            said.discard("turns_dropped")  # a chat says it again each time it drops more
            warn("turns_dropped", ctx=ctx, n=dropped)
    if ids.shape[1] > room:
        warn("prompt_cut", have=ids.shape[1], ctx=ctx, kept=room)
        ids = ids[:, -room:]
    if ids.shape[1] + max_new > ctx:
        if asked:
            warn("answer_capped", ctx=ctx, n=ctx - ids.shape[1], asked=max_new)
        max_new = ctx - ids.shape[1]
    return ids, max_new, messages


class LlamaCppEngine:
    kind = "gguf"

    def __init__(self, path: Path, *, n_ctx: int = 0, seed: int = 0):
        from aura.inference.loading import load_llama, validate_gguf

        meta = validate_gguf(path)
        self.template = meta.get("tokenizer.chat_template") or None
        self.has_template = bool(self.template)
        self.llm = load_llama(path, n_ctx=n_ctx, seed=seed)
        self.name = str(path)
        self.said: set = set()

    def _encode(self, prompt: str | None, messages: list[dict] | None):
        """(1, T) token ids as llama.cpp will see them: a chat rendered with the GGUF's own template."""
        import torch

        if messages is not None and self.has_template:
            from llama_cpp.llama_chat_format import Jinja2ChatFormatter

            def text(token: int) -> str:
                return self.llm.detokenize([token], special=True).decode("utf-8", "replace") if token >= 0 else ""

            rendered = Jinja2ChatFormatter(
                template=self.template, eos_token=text(self.llm.token_eos()), bos_token=text(self.llm.token_bos())
            )(messages=messages)
            ids = self.llm.tokenize(rendered.prompt.encode(), add_bos=not rendered.added_special, special=True)
        else:
            text = plain_chat_prompt(messages) if messages is not None else prompt
            ids = self.llm.tokenize(text.encode(), add_bos=True, special=messages is not None)
        return torch.tensor([ids])

    def stream(
        self,
        *,
        prompt: str | None = None,
        messages: list[dict] | None = None,
        sampling: Sampling,
        out: list,
        notify=None,
    ) -> Iterator[str]:
        # llama.cpp may round the context up; llama-cpp-python's own buffers keep the size asked for; and the
        # last sampled token is decoded too, so one slot stays free
        ctx = min(self.llm.n_ctx(), self.llm.context_params.n_ctx or self.llm.n_ctx()) - 1
        ids, max_new, kept = fit_context(
            lambda m: self._encode(prompt, m),
            messages,
            sampling.max_new_tokens,
            ctx,
            said=None if notify else self.said,
            asked=sampling.asked,
            notify=notify,
        )
        cut = ids.shape[1] < self._encode(prompt, kept).shape[1]  # even the last message alone is too long
        common = dict(
            max_tokens=max_new,
            temperature=sampling.temperature,
            top_k=sampling.top_k,
            top_p=sampling.top_p,
            repeat_penalty=sampling.repetition_penalty,
            seed=sampling.seed,
            stream=True,
        )
        pieces = []
        if cut:  # the kept tail of the prompt, as tokens (llama.cpp stops at the model's end-of-turn tokens)
            for ch in self.llm.create_completion(prompt=ids[0].tolist(), **common):
                piece = ch["choices"][0]["text"]
                if piece:
                    pieces.append(piece)
                    yield piece
        elif kept is not None and self.has_template:
            chunks = self.llm.create_chat_completion(messages=kept, **common)
            for ch in chunks:
                piece = ch["choices"][0].get("delta", {}).get("content")
                if piece:
                    pieces.append(piece)
                    yield piece
        else:
            stop = None
            if kept is not None:
                prompt, stop = plain_chat_prompt(kept), PLAIN_STOPS
            for ch in self.llm.create_completion(prompt=prompt, stop=stop, **common):
                piece = ch["choices"][0]["text"]
                if piece:
                    pieces.append(piece)
                    yield piece
        text = "".join(pieces)
        out.append(
            Result(text=text, tokens=len(self.llm.tokenize(text.encode(), add_bos=False, special=True)) if text else 0)
        )


def open_engine(
    model: str,
    adapter: str = "",
    *,
    dtype: str = "float32",
    n_ctx: int = 0,
    seed: int = 0,
    allow_other_base: bool = False,
):
    from aura.inference.loading import resolve_model

    source = resolve_model(model, adapter or None, allow_other_base=allow_other_base)
    if source.kind == "gguf":
        return LlamaCppEngine(source.path, n_ctx=n_ctx, seed=seed)
    return HFEngine(source, dtype=dtype)
