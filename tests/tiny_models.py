"""Tiny Hugging Face models and a real byte-level BPE tokenizer, built on the spot for tests and benches.

There is no model hub here, so tests make their own: a byte-level BPE trained with the ``tokenizers``
library on the embedded Spanish corpus (the same shape as Aura's tokenizers: ``<|endoftext|>`` as
EOS, ``<|pad|>``, ChatML chat tokens and template), and tiny ``LlamaForCausalLM`` /
``GPT2LMHeadModel`` / ``MistralForCausalLM`` dirs with random weights, saved as HF dirs
(config.json, model.safetensors, generation_config.json, tokenizer files).
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


def train_tokenizer(out_dir: str | Path, *, vocab_size: int = 800, chat_template: bool = True) -> Path:
    """Train a byte-level BPE on the embedded corpus and save it as a HF tokenizer dir."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    out_dir = Path(out_dir)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train([str(p) for p in sorted(CORPUS_DIR.glob("*.txt"))], trainer)
    hf = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS, bos_token=EOS, pad_token=PAD,
                                 unk_token=None, additional_special_tokens=[IM_START, IM_END])
    if chat_template:
        hf.chat_template = CHAT_TEMPLATE
    hf.save_pretrained(out_dir)
    return out_dir


def _save_model(model, tok_dir: Path, out_dir: Path) -> Path:
    from transformers import AutoTokenizer, GenerationConfig

    tok = AutoTokenizer.from_pretrained(tok_dir)
    model.generation_config = GenerationConfig(eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
                                               bos_token_id=tok.bos_token_id)
    model.save_pretrained(out_dir)
    tok.save_pretrained(out_dir)
    return out_dir


def _vocab(tok_dir: Path) -> tuple[int, int, int]:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tok_dir)
    return len(tok), tok.eos_token_id, tok.pad_token_id


def build_llama(out_dir: str | Path, tok_dir: str | Path, *, hidden: int = 64, layers: int = 2,
                heads: int = 4, kv_heads: int = 2, intermediate: int = 256, ctx: int = 256,
                vocab_pad: int = 0, seed: int = 0, arch: str = "llama") -> Path:
    """A random tiny Llama (or Mistral / Qwen2 with ``arch='mistral'|'qwen2'``) with the tokenizer of ``tok_dir``.

    ``vocab_pad`` adds embedding rows beyond the tokenizer (as models padded to a multiple of 64 have).
    """
    import torch
    from transformers import (LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM, Qwen2Config,
                              Qwen2ForCausalLM)

    n, eos, pad = _vocab(Path(tok_dir))
    cfg_cls, model_cls = {"mistral": (MistralConfig, MistralForCausalLM), "qwen2": (Qwen2Config, Qwen2ForCausalLM)
                          }.get(arch, (LlamaConfig, LlamaForCausalLM))
    cfg = cfg_cls(vocab_size=n + vocab_pad, hidden_size=hidden, num_hidden_layers=layers,
                  num_attention_heads=heads, num_key_value_heads=kv_heads, intermediate_size=intermediate,
                  max_position_embeddings=ctx, bos_token_id=eos, eos_token_id=eos, pad_token_id=pad,
                  tie_word_embeddings=False)
    torch.manual_seed(seed)
    model = model_cls(cfg)
    _scale_up(model)
    return _save_model(model, Path(tok_dir), Path(out_dir))


def build_gpt2(out_dir: str | Path, tok_dir: str | Path, *, hidden: int = 64, layers: int = 2,
               heads: int = 4, ctx: int = 256, seed: int = 0) -> Path:
    """A random tiny GPT-2 (tied embeddings, learned positions) with the tokenizer of ``tok_dir``."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    n, eos, pad = _vocab(Path(tok_dir))
    cfg = GPT2Config(vocab_size=n, n_embd=hidden, n_layer=layers, n_head=heads, n_positions=ctx,
                     bos_token_id=eos, eos_token_id=eos, pad_token_id=pad)
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
    return {"tokenizer": tok, "llama": build_llama(root / "llama", tok),
            "gpt2": build_gpt2(root / "gpt2", tok)}


def make_lora_adapter(base: str | Path, out_dir: str | Path, *, seed: int = 1, quantized: bool = False) -> Path:
    """A peft LoRA adapter on ``base`` with non-zero B (so it changes the logits); ``quantized``
    builds it on a bitsandbytes 4-bit (nf4) base, as QLoRA training does."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoConfig, AutoModelForCausalLM

    kwargs = {}
    if quantized:
        from transformers import BitsAndBytesConfig

        kwargs["quantization_config"] = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                                                           bnb_4bit_compute_dtype=torch.float32)
    model = AutoModelForCausalLM.from_pretrained(str(base), **kwargs)
    is_gpt2 = AutoConfig.from_pretrained(str(base)).model_type == "gpt2"
    targets = ["c_attn", "c_proj", "c_fc"] if is_gpt2 else ["q_proj", "k_proj", "v_proj", "o_proj",
                                                             "gate_proj", "up_proj", "down_proj"]
    torch.manual_seed(seed)
    peft_model = get_peft_model(model, LoraConfig(r=4, lora_alpha=16, target_modules=targets,
                                                  init_lora_weights=False, fan_in_fan_out=is_gpt2))
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


def train_spm_tokenizer(out_dir: str | Path, *, vocab_size: int = 600) -> Path:
    """A SentencePiece-style BPE (Metaspace "▁", byte fallback, <s>/</s>/<unk>) like Llama 2 / Mistral 7B."""
    from tokenizers import Tokenizer, decoders, models, normalizers, trainers
    from transformers import PreTrainedTokenizerFast

    out_dir = Path(out_dir)
    tok = Tokenizer(models.BPE(byte_fallback=True, unk_token="<unk>", fuse_unk=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                     decoders.Strip(" ", 1, 0)])
    byte_tokens = [f"<0x{i:02X}>" for i in range(256)]
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<unk>", "<s>", "</s>", *byte_tokens],
                                  show_progress=False)
    tok.train([str(p) for p in sorted(CORPUS_DIR.glob("*.txt"))], trainer)
    hf = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                                 pad_token="</s>")
    hf.chat_template = ("{{ bos_token }}{% for m in messages %}{% if m['role'] == 'user' %}[INST] "
                        "{{ m['content'] }} [/INST]{% else %}{{ m['content'] }}{{ eos_token }}{% endif %}"
                        "{% endfor %}")
    hf.save_pretrained(out_dir)
    return out_dir
