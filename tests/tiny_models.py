"""Tiny Hugging Face models and a real byte-level BPE tokenizer, built on the spot for tests and benches.

There is no model hub here, so tests make their own: a byte-level BPE trained with the ``tokenizers``
library on the embedded Spanish corpus (the same shape as Aura's tokenizers: ``<|endoftext|>`` as
EOS, ``<|pad|>``, ChatML chat tokens and template), and tiny ``LlamaForCausalLM`` /
``GPT2LMHeadModel`` / ``MistralForCausalLM`` dirs with random weights, saved as HF dirs
(config.json, model.safetensors, generation_config.json, tokenizer files). ``build_arch`` builds the other
architectures teams fine-tune (Qwen2, Gemma 2/3, Phi-3, SmolLM3, OLMo 2) with transformers' own config and model
classes, and ``train_tokenizer(split=...)`` / ``train_spm_tokenizer(family=...)`` give them a tokenizer of
their family (Qwen2's or Llama 3's pre-tokeniser regex; Gemma's or Phi-3's SentencePiece-style vocabulary).
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CORPUS_DIR = ROOT / "aura" / "resources" / "corpus_es"

EOS = "<|endoftext|>"
PAD = "<|pad|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
SPECIAL_TOKENS = [EOS, PAD, IM_START, IM_END]

# ChatML, as Aura's fine-tuning writes it; the generation prompt opens the assistant turn.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

# Sentences whose tokenisation differs between naive tokenizers: accents, ñ, ¿¡, emoji, digits, spaces.
SPANISH_PROBES = [
    "¿Dónde está el niño? ¡Allí, junto a la cigüeña!",
    "El año 2024 tuvo 366 días; 3,14159 no es 22/7.",
    "Mañana  (con  dos  espacios)  llegará el pingüino 🐧 a Logroño.",
    "—¿Qué tal?—preguntó Íñigo.\nÉl respondió: «¡Genial!» 😀👍",
    "ÁÉÍÓÚ áéíóú Üü Ññ ¿¡ 1234567890 \t tabulador",
]


# The pre-tokeniser regexes of Llama 3 (and SmolLM3) and of Qwen2/2.5, as in their tokenizer.json
LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def train_tokenizer(
    out_dir: str | Path,
    *,
    vocab_size: int = 800,
    chat_template: bool = True,
    split: str | None = None,
    digits: bool = False,
    extra: tuple[str, ...] = (),
) -> Path:
    """Train a byte-level BPE on the embedded corpus and save it as a HF tokenizer dir; ``split`` (a regex)
    pre-tokenises as Llama 3 / Qwen2 do (Split + ByteLevel without its own regex) instead of GPT-2's regex;
    ``digits`` splits digits one by one before GPT-2's regex, as SmolLM/SmolLM2 do; ``extra``: more texts to
    train on, after the corpus (a chat template's markup, so that it takes few tokens)."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    out_dir = Path(out_dir)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if digits:
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Digits(individual_digits=True),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
            ]
        )
    if split:
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(split), behavior="isolated", invert=False),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    files = [str(p) for p in sorted(CORPUS_DIR.glob("*.txt"))]
    if extra:
        tok.train_from_iterator([*(Path(f).read_text(encoding="utf-8") for f in files), *extra], trainer)
    else:
        tok.train(files, trainer)
    hf = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=EOS,
        bos_token=EOS,
        pad_token=PAD,
        unk_token=None,
        additional_special_tokens=[IM_START, IM_END],
    )
    if chat_template:
        hf.chat_template = CHAT_TEMPLATE
    hf.save_pretrained(out_dir)
    return out_dir


def _save_model(model, tok_dir: Path, out_dir: Path) -> Path:
    from transformers import AutoTokenizer, GenerationConfig

    tok = AutoTokenizer.from_pretrained(tok_dir)
    model.generation_config = GenerationConfig(
        eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id
    )
    model.save_pretrained(out_dir)
    tok.save_pretrained(out_dir)
    if (tok_dir / "tokenizer.model").is_file():  # a SentencePiece model: transformers 5 saves neither it nor
        import shutil  # its tokenizer_config's "legacy"

        for name in ("tokenizer.model", "tokenizer_config.json"):
            shutil.copy(tok_dir / name, out_dir / name)
    return out_dir


def _vocab(tok_dir: Path) -> tuple[int, int, int]:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tok_dir)
    return len(tok), tok.eos_token_id, tok.pad_token_id


def build_llama(
    out_dir: str | Path,
    tok_dir: str | Path,
    *,
    hidden: int = 64,
    layers: int = 2,
    heads: int = 4,
    kv_heads: int = 2,
    intermediate: int = 256,
    ctx: int = 256,
    vocab_pad: int = 0,
    seed: int = 0,
    arch: str = "llama",
) -> Path:
    """A random tiny Llama (or Mistral / Qwen2 with ``arch='mistral'|'qwen2'``) with the tokenizer of ``tok_dir``.

    ``vocab_pad`` adds embedding rows beyond the tokenizer (as models padded to a multiple of 64 have).
    """
    import torch
    from transformers import (
        LlamaConfig,
        LlamaForCausalLM,
        MistralConfig,
        MistralForCausalLM,
        Qwen2Config,
        Qwen2ForCausalLM,
    )

    n, eos, pad = _vocab(Path(tok_dir))
    cfg_cls, model_cls = {"mistral": (MistralConfig, MistralForCausalLM), "qwen2": (Qwen2Config, Qwen2ForCausalLM)}.get(
        arch, (LlamaConfig, LlamaForCausalLM)
    )
    cfg = cfg_cls(
        vocab_size=n + vocab_pad,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        intermediate_size=intermediate,
        max_position_embeddings=ctx,
        bos_token_id=eos,
        eos_token_id=eos,
        pad_token_id=pad,
        tie_word_embeddings=False,
    )
    torch.manual_seed(seed)
    model = model_cls(cfg)
    _scale_up(model)
    return _save_model(model, Path(tok_dir), Path(out_dir))


def build_gpt2(
    out_dir: str | Path,
    tok_dir: str | Path,
    *,
    hidden: int = 64,
    layers: int = 2,
    heads: int = 4,
    ctx: int = 256,
    seed: int = 0,
) -> Path:
    """A random tiny GPT-2 (tied embeddings, learned positions) with the tokenizer of ``tok_dir``."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    n, eos, pad = _vocab(Path(tok_dir))
    cfg = GPT2Config(
        vocab_size=n,
        n_embd=hidden,
        n_layer=layers,
        n_head=heads,
        n_positions=ctx,
        bos_token_id=eos,
        eos_token_id=eos,
        pad_token_id=pad,
    )
    torch.manual_seed(seed)
    model = GPT2LMHeadModel(cfg)
    _scale_up(model)
    return _save_model(model, Path(tok_dir), Path(out_dir))


def _scale_up(model) -> None:
    """Random init at std 0.02 gives near-uniform logits; widen them so top-1 comparisons mean something."""
    import torch

    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 2:
                p.mul_(4.0)


def build_zoo(root: str | Path, *, vocab_size: int = 800) -> dict[str, Path]:
    """A tokenizer, a tiny Llama and a tiny GPT-2 under ``root`` (built once per test module)."""
    root = Path(root)
    tok = train_tokenizer(root / "tokenizer", vocab_size=vocab_size)
    return {"tokenizer": tok, "llama": build_llama(root / "llama", tok), "gpt2": build_gpt2(root / "gpt2", tok)}


def make_lora_adapter(base: str | Path, out_dir: str | Path, *, seed: int = 1, quantized: bool = False) -> Path:
    """A peft LoRA adapter on ``base`` with non-zero B (so it changes the logits); ``quantized``
    builds it on a bitsandbytes 4-bit (nf4) base, as QLoRA training does."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoConfig, AutoModelForCausalLM

    kwargs = {}
    if quantized:
        from transformers import BitsAndBytesConfig

        kwargs["quantization_config"] = BitsAndBytesConfig(
            load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=torch.float32
        )
    model = AutoModelForCausalLM.from_pretrained(str(base), **kwargs)
    is_gpt2 = AutoConfig.from_pretrained(str(base)).model_type == "gpt2"
    targets = (
        ["c_attn", "c_proj", "c_fc"]
        if is_gpt2
        else ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    )
    torch.manual_seed(seed)
    peft_model = get_peft_model(
        model, LoraConfig(r=4, lora_alpha=16, target_modules=targets, init_lora_weights=False, fan_in_fan_out=is_gpt2)
    )
    with torch.no_grad():  # random B/A at a scale where the update visibly moves the logits
        for name, p in peft_model.named_parameters():
            if "lora_" in name:
                p.copy_(torch.randn_like(p) * 0.1)
    peft_model.save_pretrained(str(out_dir))
    return Path(out_dir)


def stamp_adapter_base(adapter_dir: str | Path, base: str | Path) -> Path:
    """Write ``aura_adapter.json`` (the base's fingerprint) beside an adapter, as ``aura finetune`` does."""
    import json

    from transformers import AutoModelForCausalLM

    from aura.models.adapter_check import ADAPTER_META, base_fingerprint

    meta = {"method": "lora", "template": None, **base_fingerprint(AutoModelForCausalLM.from_pretrained(str(base)))}
    (Path(adapter_dir) / ADAPTER_META).write_text(json.dumps(meta), encoding="utf-8")
    return Path(adapter_dir)


GEMMA_CHAT_TEMPLATE = (  # Gemma's: the system message opens the first user turn; "model" answers
    "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{% set sys = messages[0]['content'] + '\n\n' %}"
    "{% set msgs = messages[1:] %}{% else %}{% set sys = '' %}{% set msgs = messages %}{% endif %}"
    "{% for m in msgs %}{{ '<start_of_turn>' + ('model' if m['role'] == 'assistant' else 'user') + '\n' "
    "+ (sys if loop.first else '') + m['content'] + '<end_of_turn>\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<start_of_turn>model\n' }}{% endif %}"
)
PHI3_CHAT_TEMPLATE = (  # Phi-3's
    "{% for m in messages %}{{ '<|' + m['role'] + '|>\n' + m['content'] + '<|end|>\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% else %}{{ eos_token }}{% endif %}"
)


def train_spm_tokenizer(out_dir: str | Path, *, vocab_size: int = 600, family: str = "llama") -> Path:
    """A SentencePiece-style BPE with byte fallback: ``llama`` as Llama 2 / Mistral 7B (Metaspace "▁" before the
    first word, <s>/</s>/<unk>, [INST] template); ``phi3`` the same pieces plus Phi-3's chat tokens
    (<|endoftext|> EOS, <|user|>/<|assistant|>/<|system|>/<|end|>); ``gemma`` as Gemma 2/3 (no "▁" before the
    first word, <pad>/<eos>/<bos>/<unk> first, <start_of_turn>/<end_of_turn>)."""
    from tokenizers import Tokenizer, decoders, models, normalizers, trainers
    from transformers import PreTrainedTokenizerFast

    out_dir = Path(out_dir)
    tok = Tokenizer(models.BPE(byte_fallback=True, unk_token="<unk>", fuse_unk=True))
    gemma = family == "gemma"
    tok.normalizer = (
        normalizers.Replace(" ", "▁")
        if gemma
        else normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    )
    tok.decoder = decoders.Sequence(
        [
            decoders.Replace("▁", " "),
            decoders.ByteFallback(),
            decoders.Fuse(),
            *([] if gemma else [decoders.Strip(" ", 1, 0)]),
        ]
    )
    byte_tokens = [f"<0x{i:02X}>" for i in range(256)]
    specials = (
        ["<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>"] if gemma else ["<unk>", "<s>", "</s>"]
    )
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[*specials, *byte_tokens], show_progress=False)
    tok.train([str(p) for p in sorted(CORPUS_DIR.glob("*.txt"))], trainer)
    if gemma:
        hf = PreTrainedTokenizerFast(
            tokenizer_object=tok,
            bos_token="<bos>",
            eos_token="<eos>",
            unk_token="<unk>",
            pad_token="<pad>",
            additional_special_tokens=["<start_of_turn>", "<end_of_turn>"],
        )
        hf.chat_template = GEMMA_CHAT_TEMPLATE
    elif family == "phi3":
        from tokenizers import AddedToken

        # as in Phi-3's tokenizer.json, the chat tokens swallow the whitespace after them (rstrip)
        chat = [
            AddedToken(t, rstrip=True, special=True, normalized=False)
            for t in ("<|assistant|>", "<|end|>", "<|user|>", "<|system|>")
        ]
        hf = PreTrainedTokenizerFast(
            tokenizer_object=tok,
            bos_token="<s>",
            eos_token="<|endoftext|>",
            unk_token="<unk>",
            pad_token="<|endoftext|>",
            additional_special_tokens=chat,
        )
        hf.chat_template = PHI3_CHAT_TEMPLATE
    else:
        hf = PreTrainedTokenizerFast(
            tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>", pad_token="</s>"
        )
        hf.chat_template = (
            "{{ bos_token }}{% for m in messages %}{% if m['role'] == 'user' %}[INST] "
            "{{ m['content'] }} [/INST]{% else %}{{ m['content'] }}{{ eos_token }}{% endif %}"
            "{% endfor %}"
        )
    hf.save_pretrained(out_dir)
    return out_dir


LLAMA2_CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}{% if m['role'] == 'user' %}[INST] "
    "{{ m['content'] }} [/INST]{% else %}{{ m['content'] }}{{ eos_token }}{% endif %}{% endfor %}"
)


def train_sentencepiece(out_dir: str | Path, *, vocab_size: int = 600) -> Path:
    """A real SentencePiece model (``tokenizer.model``, BPE with byte fallback, trained with the
    ``sentencepiece`` library on the embedded corpus) with Llama 2's HF tokenizer around it (legacy spaces:
    "▁" after every special token, as Llama 2's and as llama.cpp's), as Llama 2 / Mistral 7B ship it."""
    import sentencepiece as spm
    from transformers import LlamaTokenizer

    out_dir = Path(out_dir)
    raw = out_dir / "spm"
    raw.mkdir(parents=True, exist_ok=True)
    spm.SentencePieceTrainer.train(
        input=",".join(str(p) for p in sorted(CORPUS_DIR.glob("*.txt"))),
        model_prefix=str(raw / "tokenizer"),
        vocab_size=vocab_size,
        model_type="bpe",
        byte_fallback=True,
        character_coverage=1.0,
        unk_id=0,
        bos_id=1,
        eos_id=2,
        pad_id=-1,
        num_threads=1,
        minloglevel=2,
    )
    tok = LlamaTokenizer.from_pretrained(
        str(raw),
        legacy=True,
        add_bos_token=True,
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        pad_token="</s>",
    )
    tok.chat_template = LLAMA2_CHAT_TEMPLATE
    tok.save_pretrained(out_dir)
    import json

    config = json.loads((out_dir / "tokenizer_config.json").read_text(encoding="utf-8"))
    # as Llama 2's: transformers 5 saves neither (reloaded, the "▁" after special tokens and <s> would be lost)
    config.update(legacy=True, add_bos_token=True, add_eos_token=False)
    (out_dir / "tokenizer_config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
    (raw / "tokenizer.model").replace(out_dir / "tokenizer.model")
    for leftover in raw.iterdir():
        leftover.unlink()
    raw.rmdir()
    return out_dir


def build_arch(
    out_dir: str | Path,
    tok_dir: str | Path,
    arch: str,
    *,
    hidden: int = 64,
    layers: int = 2,
    heads: int = 4,
    kv_heads: int = 2,
    intermediate: int = 128,
    ctx: int = 256,
    seed: int = 0,
    tied: bool | None = None,
    vision: bool = False,
    **extra,
) -> Path:
    """A random tiny ``arch`` (qwen2, gemma2, gemma3, phi3, smollm3, olmo2) from transformers' own config and model
    classes, with the tokenizer of ``tok_dir``; ``extra`` goes to the config (e.g. ``sliding_window``);
    ``vision`` wraps a gemma3 text model in Gemma 3's image-text checkpoint (Gemma3ForConditionalGeneration)."""
    import torch
    import transformers

    classes = {
        "qwen2": ("Qwen2Config", "Qwen2ForCausalLM"),
        "gemma2": ("Gemma2Config", "Gemma2ForCausalLM"),
        "gemma3": ("Gemma3TextConfig", "Gemma3ForCausalLM"),
        "phi3": ("Phi3Config", "Phi3ForCausalLM"),
        "smollm3": ("SmolLM3Config", "SmolLM3ForCausalLM"),
        "olmo2": ("Olmo2Config", "Olmo2ForCausalLM"),
    }
    cfg_name, model_name = classes[arch]
    n, eos, pad = _vocab(Path(tok_dir))
    from transformers import AutoTokenizer

    bos = AutoTokenizer.from_pretrained(tok_dir).bos_token_id
    kw = dict(
        vocab_size=n,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        intermediate_size=intermediate,
        max_position_embeddings=ctx,
        bos_token_id=bos,
        eos_token_id=eos,
        pad_token_id=pad,
    )
    if arch.startswith("gemma"):
        kw.update(head_dim=hidden // heads, query_pre_attn_scalar=hidden // heads)
    if tied is not None:
        kw["tie_word_embeddings"] = tied
    cfg = getattr(transformers, cfg_name)(**{**kw, **extra})
    if vision:  # Gemma 3 4B/12B/27B: the text model inside an image-text checkpoint with a SigLIP tower
        vision_cfg = transformers.SiglipVisionConfig(
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=1,
            num_attention_heads=2,
            image_size=32,
            patch_size=8,
        )
        cfg = transformers.Gemma3Config(
            text_config=cfg.to_dict(),
            vision_config=vision_cfg.to_dict(),
            mm_tokens_per_image=4,
            eos_token_id=eos,
            pad_token_id=pad,
        )
        model_name = "Gemma3ForConditionalGeneration"
    torch.manual_seed(seed)
    model = getattr(transformers, model_name)(cfg)
    _scale_up(model)
    with torch.no_grad():  # norm gains and biases away from their init, so a wrong +1 or a lost bias shows
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.add_(torch.randn_like(p) * 0.3)
    return _save_model(model, Path(tok_dir), Path(out_dir))


# ChatML with tools in the Hermes/Qwen way (the tools' names and arguments in the system turn, short for a tiny
# model; Qwen's templates write the whole JSON schemas), <tool_call> blocks in the assistant's
# turn, each tool output in a user turn inside <tool_response>.
TOOL_TEMPLATE = (
    "{% if tools %}<|im_start|>system\n"
    "{% if messages[0]['role'] == 'system' %}{{ messages[0]['content'] }}\n\n{% endif %}"
    "Herramientas:{% for t in tools %} {{ t['function']['name'] }}"
    "({{ t['function']['parameters']['properties'] | list | join(', ') }}){% endfor %}<|im_end|>\n"
    "{% elif messages[0]['role'] == 'system' %}<|im_start|>system\n{{ messages[0]['content'] }}<|im_end|>\n"
    "{% endif %}"
    "{% for m in messages %}"
    "{% if m['role'] == 'system' %}"
    "{% elif m['role'] == 'tool' %}<|im_start|>user\n<tool_response>\n{{ m['content'] }}\n</tool_response><|im_end|>\n"
    "{% else %}<|im_start|>{{ m['role'] }}\n{{ m['content'] or '' }}"
    "{% for c in m.get('tool_calls') or [] %}<tool_call>\n"
    '{"name": "{{ c.function.name }}", "arguments": {{ c.function.arguments | tojson }}}\n</tool_call>'
    "{% endfor %}<|im_end|>\n"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
TOOL_CALL = '<tool_call>\n{"name": "calcular", "arguments": {"expresion": "12 + 3"}}\n</tool_call>'
TOOL_ANSWER = "Son 15.\nRespuesta: 15"


def build_tool_caller(
    root: str | Path, prompts: list[str], *, steps: int = 30, lr: float = 1e-2, copies: int = 0
) -> Path:
    """A tiny Llama (d 64, 2 layers, context 1024) with ``TOOL_TEMPLATE``, trained for ``steps`` AdamW steps on
    ``prompts`` each answered by ``TOOL_CALL`` (Aura's calculator, ``12 + 3``), its output 15 and
    ``TOOL_ANSWER``: a model that calls the tool, more or less reliably as ``steps`` grows (GRPO's ``--tools``
    tests and bench). ``copies`` > 0: instead, each prompt ``copies`` times with a made-up tool output (a random
    number from 20 to 99, never 15) that the answer repeats: the model learns to call and to copy the tool's
    output, never to say 15 unless a real call returns it."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from aura.inference.tools import load_tools

    root = Path(root)
    tok_dir = train_tokenizer(root / "tok", vocab_size=500)
    tok = AutoTokenizer.from_pretrained(tok_dir)
    tok.chat_template = TOOL_TEMPLATE
    tok.save_pretrained(tok_dir)
    model_dir = build_llama(root / "llama", tok_dir, hidden=64, layers=2, ctx=1024)
    schemas = [t.schema for t in load_tools(ROOT / "aura" / "resources" / "tools" / "calculadora.py")]
    call = {"type": "function", "function": {"name": "calcular", "arguments": {"expresion": "12 + 3"}}}
    import random

    draw = random.Random(0)
    shown = [(p, "15") for p in prompts] if not copies else [(p, str(draw.randint(20, 99))) for p in prompts * copies]
    texts = [
        tok.apply_chat_template(
            [
                {"role": "user", "content": p},
                {"role": "assistant", "content": "", "tool_calls": [call]},
                {"role": "tool", "name": "calcular", "content": out},
                {"role": "assistant", "content": TOOL_ANSWER.replace("15", out)},
            ],
            tools=schemas,
            tokenize=False,
        )
        for p, out in shown
    ]
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).train()
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    batch = tok(texts, return_tensors="pt", padding=True)
    labels = batch["input_ids"].masked_fill(batch["attention_mask"] == 0, -100)
    torch.manual_seed(0)
    for _ in range(steps):
        model(**batch, labels=labels).loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    model.save_pretrained(model_dir)
    return model_dir


def train_briefly(
    model_dir: str | Path,
    out_dir: str | Path,
    *,
    held_out: str = "narrativa.txt",
    steps: int = 30,
    batch: int = 8,
    seq: int = 64,
    lr: float = 8e-3,
    seed: int = 0,
) -> Path:
    """``model_dir`` trained for a few AdamW steps on the embedded corpus (every file but ``held_out``), saved
    to ``out_dir``: a model whose predictions are peaked like a real one's, so that top-1 and greedy-token
    comparisons (a quantised export against PyTorch) measure something random weights cannot."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    text = "\n\n".join(p.read_text(encoding="utf-8") for p in sorted(CORPUS_DIR.glob("*.txt")) if p.name != held_out)
    ids = torch.tensor(tok(text)["input_ids"])  # (N,)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).train()
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    gen = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        start = torch.randint(0, len(ids) - seq - 1, (batch,), generator=gen)
        x = torch.stack([ids[s : s + seq] for s in start.tolist()])  # (B, T)
        model(input_ids=x, labels=x).loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    model.eval()
    model.save_pretrained(out_dir)
    tok.save_pretrained(out_dir)
    return Path(out_dir)
