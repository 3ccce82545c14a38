"""The tokenizer half of a GGUF file, and the Ollama Modelfile written beside it.

Byte-level BPE tokenizers (Aura's, GPT-2's, Llama 3's) become ``tokenizer.ggml.model = "gpt2"`` with
tokens, merges and token types; the pre-tokeniser regex picks ``tokenizer.ggml.pre`` (``gpt-2`` for
GPT-2's regex, ``llama-bpe`` for Llama 3's and SmolLM3's, ``qwen2`` for Qwen2/2.5's, also when Aura has
extended it, ``smollm`` for SmolLM2's single digits before GPT-2's regex). SentencePiece-style BPE with byte fallback
(Llama 2,
Mistral 7B) becomes ``"llama"`` with scores. Anything else is refused before a byte is written: a
GGUF that tokenises differently from the model's tokenizer is the silent failure we exist to avoid.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from aura.core.errors import AuraError
from aura.core.i18n import Messages

M = Messages(
    "gguf_tokenizer",
    {
        "no_json": (
            "{path} no tiene tokenizer.json (tokenizador rápido de Hugging Face); es necesario para exportar a GGUF.",
            "{path} has no tokenizer.json (Hugging Face fast tokenizer); GGUF export needs it.",
        ),
        "vocab_big": (
            "El tokenizador tiene {tokens:token|tokens} pero la matriz de embeddings solo {rows:fila|filas}: "
            "los tokens {first}… no tendrían embedding. Redimensiona el modelo "
            "(model.resize_token_embeddings) o usa el tokenizador con el que se entrenó.",
            "The tokenizer has {tokens:token|tokens} but the embedding matrix only {rows:row|rows}: tokens "
            "{first}… would have no embedding. Resize the model (model.resize_token_embeddings) "
            "or use the tokenizer it was trained with.",
        ),
        "pre_unknown": (
            "El pre-tokenizador de {path} no es uno que llama.cpp reproduzca ({what}); la "
            "tokenización en GGUF sería distinta. Compatibles: ByteLevel de GPT-2, Llama 3, Qwen2, SmolLM2, "
            "SentencePiece BPE.",
            "The pre-tokenizer of {path} is not one llama.cpp reproduces ({what}); GGUF "
            "tokenisation would differ. Supported: GPT-2 ByteLevel, Llama 3, Qwen2, SmolLM2, SentencePiece BPE.",
        ),
        "model_unknown": (
            "El tokenizador de {path} es de tipo {kind}; la exportación GGUF admite BPE.",
            "The tokenizer of {path} is of type {kind}; GGUF export supports BPE.",
        ),
        "phi3_tokens": (
            "{path}: sus tokens especiales se tragan el espacio que les sigue (rstrip, como los de chat de "
            "Phi-3), y llama.cpp solo les da ese comportamiento con su regla para Phi-3 (cuando el nombre "
            "del modelo dice phi-3), que busca los tokens <s>, </s>, <unk> y <|endoftext|> por su texto: "
            'a este vocabulario le falta: {missing}; llama.cpp no cargaría el archivo ("error '
            'loading model vocabulary: unordered_map::at"). No se escribe nada. Lo que funciona: añade esos '
            "tokens al tokenizador (y redimensiona los embeddings) antes de entrenar, o usa tokens "
            "especiales sin rstrip (como los de aura tokenizer train).",
            "{path}: its special tokens swallow the whitespace after them (rstrip, as Phi-3's chat tokens "
            "do), and llama.cpp gives them that behaviour only through its Phi-3 rule (when the model's "
            "name says phi-3), which looks up the tokens <s>, </s>, <unk> and <|endoftext|> by their text: "
            'this vocabulary lacks {missing}, and llama.cpp would not load the file ("error loading model '
            'vocabulary: unordered_map::at"). Nothing is written. What works: add those tokens to the '
            "tokenizer (and resize the embeddings) before training, or use special tokens without rstrip "
            "(as aura tokenizer train makes).",
        ),
        "phi3_renamed": (
            "El nombre '{name}' activaría en llama.cpp la regla de Phi-3 (los tokens especiales se "
            "tragarían el espacio que les sigue, y un vocabulario sin <s>, </s>, <unk> o <|endoftext|> "
            "no cargaría), que este tokenizador no pide: el GGUF se llama '{written}'.",
            "The name '{name}' would trigger llama.cpp's Phi-3 rule (special tokens would swallow the "
            "whitespace after them, and a vocabulary without <s>, </s>, <unk> or <|endoftext|> would not "
            "load), which this tokenizer does not ask for: the GGUF is named '{written}'.",
        ),
        "no_eos": (
            "El tokenizador de {path} no define un token de fin (eos_token); sin él la generación "
            "no se detiene. Defínelo en tokenizer_config.json.",
            "The tokenizer of {path} defines no end token (eos_token); without it generation never "
            "stops. Set it in tokenizer_config.json.",
        ),
    },
)

GPT2_REGEX = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
LLAMA3_REGEX_START = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}"
# Qwen2/2.5's pre-tokeniser (llama.cpp's "qwen2"): Llama 3's, with single digits
QWEN2_REGEX = (
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"
    "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
)


@dataclass
class VocabPlan:
    model: str  # "gpt2" | "llama"
    pre: str | None
    tokens: list[str]
    types: list[int]
    scores: list[float] | None
    n_padded: int
    eos_id: int
    end_of_turn: list[int] = field(default_factory=list)
    add_bos: bool = False
    add_eos: bool = False
    add_space_prefix: bool = False  # SentencePiece: "▁" before the first word
    rstrip_special: bool = False  # special tokens swallow the whitespace after them (Phi-3's chat tokens)


def _pre_kind(tj: dict, path: Path) -> str:
    pre = tj.get("pre_tokenizer") or {}
    parts = pre.get("pretokenizers", [pre]) if pre.get("type") == "Sequence" else [pre]
    types = [p.get("type") for p in parts]
    if types == ["ByteLevel"] and parts[0].get("use_regex", True):
        return "gpt-2"
    if types == ["Digits", "ByteLevel"] and parts[0].get("individual_digits") and parts[1].get("use_regex", True):
        return "smollm"  # SmolLM/SmolLM2: single digits, then GPT-2's regex
    if types and types[-1] == "ByteLevel" and types[0] == "Split":
        regex = (parts[0].get("pattern") or {}).get("Regex", "")
        if regex == GPT2_REGEX:
            return "gpt-2"
        if regex.startswith(LLAMA3_REGEX_START):
            return "llama-bpe"
        if regex == QWEN2_REGEX:
            return "qwen2"
    if types == ["Metaspace"] or (not pre and tj.get("normalizer")):
        return "spm"
    raise AuraError(M("pre_unknown", path=path, what=json.dumps(pre)[:200]))


def plan_vocab(tok_dir: Path, tok, n_rows: int) -> VocabPlan:
    """Tokens/types/scores padded to the embedding rows; raise if the tokenizer does not fit."""
    import gguf

    from aura.inference.loading import end_of_turn_ids

    tj_path = tok_dir / "tokenizer.json"
    if not tj_path.is_file():
        raise AuraError(M("no_json", path=tok_dir))
    # The tokenizer as transformers runs it, not only as the file says: a tokenizer class may rebuild parts of
    # it (transformers 5's Qwen2Tokenizer applies Qwen2's pre-tokeniser to any tokenizer.json beside a Qwen2).
    backend = getattr(tok, "backend_tokenizer", None)
    tj = json.loads(backend.to_str() if backend is not None else tj_path.read_text(encoding="utf-8"))
    if tj.get("model", {}).get("type") != "BPE":
        raise AuraError(M("model_unknown", path=tok_dir, kind=tj.get("model", {}).get("type")))
    if tok.eos_token_id is None:
        raise AuraError(M("no_eos", path=tok_dir))
    vocab = tok.get_vocab()
    n_tok = max(vocab.values()) + 1
    if n_tok > n_rows:
        raise AuraError(M("vocab_big", tokens=n_tok, rows=n_rows, first=n_rows))
    pre = _pre_kind(tj, tok_dir)
    spm = pre == "spm" or tj["model"].get("byte_fallback", False)
    reverse = {i: t for t, i in vocab.items()}
    added = {a["id"]: a for a in tj.get("added_tokens", [])}
    tokens, types, scores = [], [], []
    for i in range(n_rows):
        if i not in reverse:
            tokens.append(f"<|reserved_{i}|>")  # rows past the tokenizer (padded embeddings)
            types.append(gguf.TokenType.UNUSED)
        else:
            text = reverse[i]
            tokens.append(text)
            if i in added:
                types.append(gguf.TokenType.CONTROL if added[i].get("special") else gguf.TokenType.USER_DEFINED)
            elif spm and re.fullmatch(r"<0x[0-9A-Fa-f]{2}>", text):
                types.append(gguf.TokenType.BYTE)
            else:
                types.append(gguf.TokenType.NORMAL)
        # SentencePiece BPE merges by score: earlier pieces first, as in the original .model file.
        scores.append(-float(i))
    probe = tok("a", add_special_tokens=True)["input_ids"]
    bare = tok("a", add_special_tokens=False)["input_ids"]
    add_bos = len(probe) > len(bare) and probe[0] == tok.bos_token_id
    add_eos = len(probe) > len(bare) and probe[-1] == tok.eos_token_id
    return VocabPlan(
        add_space_prefix=spm and _space_prefix(tj),
        model="llama" if spm else "gpt2",
        pre=None if spm else pre,
        tokens=tokens,
        types=[int(t) for t in types],
        scores=scores if spm else None,
        n_padded=n_rows - n_tok,
        eos_id=tok.eos_token_id,
        end_of_turn=end_of_turn_ids(tok),
        add_bos=add_bos,
        add_eos=add_eos,
        rstrip_special=any(a.get("special") and a.get("rstrip") for a in added.values()),
    )


# llama.cpp (llama-vocab.cpp, "set attributes by model/tokenizer/architecture name") gives every special token
# Phi-3's rstrip when general.name contains one of these, for any architecture, and looks these tokens up by
# their text to set or clear it: one missing and the file does not load ("unordered_map::at").
PHI3_NAME_MARKS = ("phi-3", "phi3")
PHI3_RULE_TOKENS = ("<s>", "</s>", "<unk>", "<|endoftext|>")


def general_name(name: str, *, phi3: bool, vocab: set[str] | dict, rstrip_special: bool, path: Path) -> str:
    """The ``general.name`` llama.cpp will read right. A phi3 model whose special tokens rstrip needs the name
    to say phi-3 (a fine-tune's folder is often just ``final``) and the four tokens the rule looks up, else it is
    refused here; any other model must not say it (its folder may well be ``phi3-es``), or llama.cpp would
    tokenise its chats differently or, without those tokens, not load it."""
    from aura.core import console

    marked = any(k in name.lower() for k in PHI3_NAME_MARKS)
    if phi3 and rstrip_special:
        missing = [t for t in PHI3_RULE_TOKENS if t not in vocab]
        if missing:
            raise AuraError(M("phi3_tokens", path=path, missing=", ".join(missing)))
        return name if marked else f"{name} (phi-3)"
    if marked:
        written = re.sub(r"(?i)(phi)-?3", r"\1 3", name)
        console.warn(M("phi3_renamed", name=name, written=written))
        return written
    return name


def rstrip_special(tok_dir: Path) -> bool:
    """Whether a special token of ``tok_dir``'s tokenizer.json swallows the whitespace after it."""
    try:
        tj = json.loads((tok_dir / "tokenizer.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return any(a.get("special") and a.get("rstrip") for a in tj.get("added_tokens", []))


def _space_prefix(tj: dict) -> bool:
    """Whether a SentencePiece-style tokenizer prepends "▁" (Metaspace scheme or a Prepend normaliser)."""
    pre = tj.get("pre_tokenizer") or {}
    if pre.get("type") == "Metaspace":
        return pre.get("prepend_scheme", "always") != "never" and pre.get("add_prefix_space", True)
    norm = tj.get("normalizer") or {}
    parts = norm.get("normalizers", [norm]) if norm.get("type") == "Sequence" else [norm]
    return any(p.get("type") == "Prepend" for p in parts)


def write_vocab(writer, plan: VocabPlan, tok_dir: Path, tok, *, arch: str = "") -> None:
    import gguf

    writer.add_tokenizer_model(plan.model)
    if plan.pre:
        writer.add_tokenizer_pre(plan.pre)
    if plan.model == "llama":
        writer.add_add_space_prefix(plan.add_space_prefix)
    writer.add_token_list(plan.tokens)
    writer.add_token_types(plan.types)
    if plan.scores is not None:
        writer.add_token_scores(plan.scores)
    special = gguf.SpecialVocab(tok_dir, load_merges=plan.model == "gpt2", n_vocab=len(plan.tokens))
    # The HF tokenizer is the authority on its special tokens (config.json ids may be stale).
    special.special_token_ids["eos"] = plan.eos_id
    for kind in ("bos", "pad", "unk"):
        tid = getattr(tok, f"{kind}_token_id", None)
        if tid is not None:
            special.special_token_ids[kind] = tid
    special.add_special_token["bos"] = plan.add_bos
    special.add_special_token["eos"] = plan.add_eos
    if chat_template := getattr(tok, "chat_template", None):
        if arch == "smollm3":  # as llama.cpp's converter: its C++ template engine has no `[:]` (a no-op copy)
            chat_template = chat_template.replace("[:]", "")
        special.chat_template = chat_template
    special.add_to_gguf(writer, quiet=True)
    eot = [t for t in plan.end_of_turn if t != plan.eos_id]
    if eot:
        writer.add_eot_token_id(eot[0])
