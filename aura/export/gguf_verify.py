"""Prove a GGUF file in llama.cpp before it is called done: tokenisation, logits, end of generation.

Checks, each against the Hugging Face model and tokenizer it came from:
1. Tokenisation of Spanish sentences (accents, ñ, ¿¡, emoji, digits, double spaces) and of a chat
   prompt with special tokens is identical.
2. llama.cpp's EOS id equals the tokenizer's, and EOS and the chat template's end-of-turn tokens are
   end-of-generation tokens for llama.cpp (so a chat stops where it should).
3. Next-token logits on a Spanish sentence: top-1 agreement and max |difference|, within a tolerance
   relative to the logits' spread (stricter for f32/f16/bf16 than for q8_0; lower quantisations are
   reported, not judged).
4. A greedy generation of a fixed number of tokens (past any end-of-generation token, so that a model
   that ends at once still compares something) in llama.cpp and PyTorch: how many agree.

The figures are written beside the file as ``NAME.verify.json`` (``verify_record``), which the pipeline's
report card reads.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from aura.core import console
from aura.core.errors import AuraError
from aura.core.i18n import Messages

M = Messages(
    "gguf_verify",
    {
        "start": ("Verificando {path} en llama.cpp…", "Verifying {path} in llama.cpp…"),
        "tok_ok": (
            "Tokenización idéntica a la de Hugging Face en {n:texto|textos}.",
            "Tokenisation identical to Hugging Face's on {n:text|texts}.",
        ),
        "tok_bad": (
            "La tokenización en llama.cpp difiere de la de Hugging Face en {text!r}:\n  HF:        "
            "{hf}\n  llama.cpp: {ll}",
            "llama.cpp tokenises {text!r} differently from Hugging Face:\n  HF:        {hf}\n  llama.cpp: {ll}",
        ),
        "eos_bad": (
            "EOS en llama.cpp es {ll} pero en el tokenizador es {hf}.",
            "llama.cpp's EOS is {ll} but the tokenizer's is {hf}.",
        ),
        "eog_bad": (
            "llama.cpp no trata el token {token!r} ({id}) como fin de generación.",
            "llama.cpp does not treat token {token!r} ({id}) as end of generation.",
        ),
        "eog_ok": ("Fin de generación reconocido: {tokens}.", "End of generation recognised: {tokens}."),
        "logits": (
            "Logits ({quant}): top-1 coincide en {agree:.1%} de {n:posición|posiciones}; max |dif| = {diff:.3g} "
            "({rel:.2%} del rango; tolerancia {tol:.0%}).",
            "Logits ({quant}): top-1 agrees at {agree:.1%} of {n:position|positions}; max |diff| = {diff:.3g} "
            "({rel:.2%} of the range; tolerance {tol:.0%}).",
        ),
        "logits_info": (
            "Logits ({quant}): top-1 coincide en {agree:.1%} de {n:posición|posiciones}; max |dif| = {diff:.3g} "
            "({rel:.2%} del rango; informativo: {quant} pierde precisión a propósito).",
            "Logits ({quant}): top-1 agrees at {agree:.1%} of {n:position|positions}; max |diff| = {diff:.3g} "
            "({rel:.2%} of the range; for information: {quant} trades precision by design).",
        ),
        "logits_bad": (
            "Los logits de llama.cpp difieren demasiado de los de PyTorch ({quant}): top-1 "
            "{agree:.1%}, max |dif| {rel:.2%} del rango (tolerancia {tol:.0%}).",
            "llama.cpp's logits differ too much from PyTorch's ({quant}): top-1 {agree:.1%}, "
            "max |diff| {rel:.2%} of the range (tolerance {tol:.0%}).",
        ),
        "gen": (
            "Generación voraz en llama.cpp y PyTorch ({n:token|tokens}, sin parar en el fin de generación "
            "para que siempre haya algo que comparar): tokens iguales desde el principio: {same} de {n}.{eos}",
            "Greedy generation in llama.cpp and PyTorch ({n:token|tokens}, not stopping at end of generation "
            "so that there is always something to compare): identical tokens from the start: {same} of {n}.{eos}",
        ),
        "gen_eos": (
            " El modelo terminaría su respuesta en el token {k}.",
            " The model would end its answer at token {k}.",
        ),
    },
)

VERIFY_TEXTS = [
    "¿Dónde está el niño? ¡Allí, junto a la cigüeña!",
    "El año 2024 tuvo 366 días; 3,14159 no es 22/7.",
    "Mañana  (con  dos  espacios)  llegará el pingüino 🐧 a Logroño.",
    "—¿Qué tal?—preguntó Íñigo.\nÉl respondió: «¡Genial!» 😀👍",
    "ÁÉÍÓÚ áéíóú Üü Ññ ¿¡ 1234567890 \t tabulador   fin",
]
# max |diff| / (max - min of the reference logits); top-1 agreement floor
GEN_TOKENS = 12
TOLERANCE = {"f32": (0.01, 0.99), "f16": (0.02, 0.95), "bf16": (0.05, 0.9), "q8_0": (0.08, 0.8)}


@dataclass
class VerifyReport:
    texts: int
    top1: float
    max_abs_diff: float
    rel_diff: float
    generated: int  # tokens compared (always GEN_TOKENS: generation does not stop at EOS)
    stop_reason: str  # "eos" when the model would have ended its answer within them
    agreeing: int  # how many of them, from the first, llama.cpp and PyTorch agree on


def verify_gguf(
    path: Path, *, model_dir: Path, quant: str, model=None, tok=None, shown: Path | None = None
) -> VerifyReport:
    """Run the checks; raise AuraError with the first failure."""
    from aura.inference.loading import load_hf, load_llama, resolve_model
    from aura.models.presets import context_length

    console.info(M("start", path=shown or path))  # the name the user asked for, not the staging file
    if model is None or tok is None:
        model, tok = load_hf(resolve_model(model_dir))
    model = model.float().eval()
    texts = _check_tokenizer(path, tok)  # 1-2. tokenizer only

    # 3. logits (within the model's context: past it a GPT-2 fails in both, llama.cpp by aborting)
    ctx = context_length(model.config) or 2048
    ids = tok(VERIFY_TEXTS[0] + " " + VERIFY_TEXTS[3], add_special_tokens=True)["input_ids"][:ctx]
    llm = load_llama(path, n_ctx=max(64, len(ids) + 32), logits_all=True)
    agree, diff, rel = _check_logits(llm, model, tok, ids=ids, quant=quant)

    # 4. greedy generation of GEN_TOKENS tokens in both, end-of-generation tokens included: a model that
    # answers EOS at once must still compare something, not pass on zero tokens
    prompt = tok(VERIFY_TEXTS[1], add_special_tokens=True)["input_ids"][: max(1, ctx // 2)]
    out, first_eog, same = _compare_greedy(llm, model, prompt=prompt, gen_tokens=min(GEN_TOKENS, ctx - len(prompt)))
    console.info(M("gen", n=len(out), same=same, eos=M("gen_eos", k=first_eog) if first_eog else ""))
    llm.close()
    return VerifyReport(
        texts=texts,
        top1=agree,
        max_abs_diff=diff,
        rel_diff=rel,
        generated=len(out),
        stop_reason="eos" if first_eog else "max_tokens",
        agreeing=same,
    )


def _check_tokenizer(path: Path, tok) -> int:
    """The GGUF's vocabulary alone tokenises the verification texts (and a chat turn) as ``tok`` does and
    names the same end-of-sequence and end-of-turn tokens; returns how many texts were compared."""
    from aura.inference.loading import end_of_turn_ids, load_llama

    llm = load_llama(path, vocab_only=True)
    texts = list(VERIFY_TEXTS)
    if getattr(tok, "chat_template", None):
        texts.append(
            tok.apply_chat_template(
                [{"role": "system", "content": "Eres útil."}, {"role": "user", "content": "¿Cuánto es 2+2?"}],
                tokenize=False,
                add_generation_prompt=True,
            )
        )
    for text in texts:
        hf = tok(text, add_special_tokens=False)["input_ids"]
        ll = llm.tokenize(text.encode("utf-8"), add_bos=False, special=True)
        if list(hf) != list(ll):
            raise AuraError(M("tok_bad", text=text, hf=hf, ll=ll))
    console.info(M("tok_ok", n=len(texts)))
    if llm.token_eos() != tok.eos_token_id:
        raise AuraError(M("eos_bad", ll=llm.token_eos(), hf=tok.eos_token_id))
    eog = end_of_turn_ids(tok)
    for tid in eog:
        if not _is_eog(llm, tid):
            raise AuraError(M("eog_bad", token=tok.convert_ids_to_tokens(tid), id=tid))
    console.info(M("eog_ok", tokens=", ".join(tok.convert_ids_to_tokens(t) for t in eog)))
    llm.close()
    return len(texts)


def _check_logits(llm, model, tok, *, ids: list[int], quant: str) -> tuple[float, float, float]:
    """llama.cpp's logits of ``ids`` against PyTorch's, within the quantisation's tolerance when it has one;
    returns (top-1 agreement, max absolute difference, that difference relative to PyTorch's logit range)."""
    import numpy as np
    import torch

    llm.eval(ids)
    ll_logits = np.asarray(llm.scores[: len(ids)], dtype=np.float32)  # (T, vocab)
    with torch.no_grad():
        hf_logits = model(torch.tensor([ids])).logits[0].float().numpy()  # (T, vocab)
    n_tok = len(tok.get_vocab())
    ll_logits, hf_logits = ll_logits[:, :n_tok], hf_logits[:, :n_tok]
    agree = float((ll_logits.argmax(-1) == hf_logits.argmax(-1)).mean())
    diff = float(np.abs(ll_logits - hf_logits).max())
    rel = diff / float(hf_logits.max() - hf_logits.min() + 1e-9)
    if quant in TOLERANCE:
        tol, floor = TOLERANCE[quant]
        console.info(M("logits", quant=quant, agree=agree, n=len(ids), diff=diff, rel=rel, tol=tol))
        if rel > tol or agree < floor:
            raise AuraError(M("logits_bad", quant=quant, agree=agree, rel=rel, tol=tol))
    else:
        console.info(M("logits_info", quant=quant, agree=agree, n=len(ids), diff=diff, rel=rel))
    return agree, diff, rel


def _compare_greedy(llm, model, *, prompt: list[int], gen_tokens: int) -> tuple[list[int], int | None, int]:
    """``gen_tokens`` greedy tokens from llama.cpp and as many from PyTorch after ``prompt``; returns
    llama.cpp's tokens, the position of its first end-of-generation token (None if none) and how many tokens,
    from the first, both agree on."""
    import torch

    llm.reset()
    out: list[int] = []
    first_eog = None
    for t in llm.generate(prompt, top_k=1, top_p=1.0, temp=0.0, reset=True):
        out.append(int(t))
        if first_eog is None and _is_eog(llm, t):
            first_eog = len(out)
        if len(out) >= gen_tokens:
            break
    ref = torch.tensor([prompt])  # (1, T)
    with torch.no_grad():
        for _ in range(len(out)):
            nxt = model(ref).logits[0, -1].argmax()
            ref = torch.cat([ref, nxt.view(1, 1)], dim=1)
    ref_ids = ref[0, len(prompt) :].tolist()
    same = next((i for i, (a, b) in enumerate(zip(out, ref_ids)) if a != b), len(out))
    return out, first_eog, same


VERIFY_SUFFIX = ".verify.json"


def verify_path(gguf: Path) -> Path:
    """``NAME.verify.json`` beside ``NAME.gguf``: what the last verification of that file measured."""
    return gguf.with_name(f"{gguf.name.removesuffix('.gguf')}{VERIFY_SUFFIX}")


def verify_record(
    report: VerifyReport, *, gguf: Path, quant: str, writer: str = "aura", model: Path | None = None
) -> dict:
    """The JSON of ``NAME.verify.json``: the file it is about (name and size), which writer wrote it (``aura``
    or ``llama.cpp``'s converter), the model it came from, what was measured, the tolerance it was judged by
    (None for the quantisations that are reported, not judged), the versions."""
    from dataclasses import asdict
    from importlib import metadata

    from aura import __version__

    try:
        llama_version = metadata.version("llama_cpp_python")
    except metadata.PackageNotFoundError:
        llama_version = None
    tol = TOLERANCE.get(quant)
    return {
        "gguf": gguf.name,
        "bytes": gguf.stat().st_size,
        "quant": quant,
        "writer": writer,
        "verified": True,
        "model": str(model.resolve()) if model is not None else None,
        **asdict(report),
        "tolerance": {"rel_diff": tol[0], "top1": tol[1]} if tol else None,
        "llama_cpp_python": llama_version,
        "aura_version": __version__,
    }


# why a GGUF was written without verification (a key: the report says it in its reader's language)
UNVERIFIED_REASONS = ("no_llama_cpp", "no_verify")


def unverified_record(*, gguf: Path, quant: str, writer: str, model: Path, reason: str, command: str) -> dict:
    """``NAME.verify.json`` for a GGUF written without verification: which file, why (``reason``: one of
    ``UNVERIFIED_REASONS``), the model it came from and the command that verifies it later (which reads that
    model from here); no figures."""
    from aura import __version__

    return {
        "gguf": gguf.name,
        "bytes": gguf.stat().st_size,
        "quant": quant,
        "writer": writer,
        "verified": False,
        "reason": reason,
        "model": str(model.resolve()),
        "verify_command": command,
        "aura_version": __version__,
    }


def is_verify_file(path: Path) -> bool:
    """True for a file ``verify_record`` wrote (so an export may replace it)."""
    import json

    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return False
    return (
        isinstance(data, dict)
        and "aura_version" in data
        and "gguf" in data
        and ("top1" in data or data.get("verified") is False)
    )


def _is_eog(llm, token_id: int) -> bool:
    import llama_cpp

    return bool(llama_cpp.llama_vocab_is_eog(llama_cpp.llama_model_get_vocab(llm.model), int(token_id)))
