"""The memory model's estimates for the guides' cases (computed, not measured): `auto`'s fine-tuning plan
(aura.train.run.memory) and pretraining presets (aura.models.hardware.estimate_memory), as a markdown table.

    python bench/memory_estimates.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _configs():
    from transformers import LlamaConfig, MistralConfig

    llama_1b = LlamaConfig(
        vocab_size=128256,
        hidden_size=2048,
        intermediate_size=8192,
        num_hidden_layers=16,
        num_attention_heads=32,
        num_key_value_heads=8,
        head_dim=64,
        tie_word_embeddings=True,
    )
    mistral_7b = MistralConfig(
        vocab_size=32768,
        hidden_size=4096,
        intermediate_size=14336,
        num_hidden_layers=32,
        num_attention_heads=32,
        num_key_value_heads=8,
        tie_word_embeddings=False,
    )
    return llama_1b, mistral_7b


def main() -> None:
    from figures import figure

    from aura.models.hardware import GIB, assumed_hardware, choose_auto, estimate_memory
    from aura.models.presets import PRESETS, preset_training
    from aura.train.run.memory import finetune_estimate, plan_finetune

    llama_1b, mistral_7b = _configs()
    cases = [  # (guide, config, method, LoRA rank, device, batch fixed or None)
        ("12 GB QLoRA guide: Llama-3.2-1B", llama_1b, "qlora", 16, "RTX 3060 12GB", None),
        ("frida: Mistral-7B LoRA r64, batch 8", mistral_7b, "lora", 64, "A100 80GB", 8),
        ("frida: Mistral-7B QLoRA r64, batch 8", mistral_7b, "qlora", 64, "RTX 4090 24GB", 8),
    ]
    print(
        "| Case | Device | batch x 2048, checkpointing | base | LoRA states | activations | logits | total |"
        " plain-loss total | old default (batch 2, no ckpt, plain loss) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, cfg, method, r, device, batch in cases:
        info = assumed_hardware(device)
        b, ckpt, est, fits = plan_finetune(
            cfg, info=info, method=method, lora_r=r, max_length=2048, precision="bf16", batch_size=batch
        )
        plain = finetune_estimate(
            cfg,
            method=method,
            lora_r=r,
            batch_size=b,
            max_length=2048,
            precision="bf16",
            checkpointing=ckpt,
            chunked_loss=False,
        )
        old = finetune_estimate(
            cfg,
            method=method,
            lora_r=r,
            batch_size=batch or 2,
            max_length=2048,
            precision="bf16",
            checkpointing=False,
            chunked_loss=False,
        )

        def g(x):
            return f"{x / GIB:.1f}"

        print(
            f"| {name} | {device} ({info.memory_bytes / GIB:.1f} GiB) | {b}, {'yes' if ckpt else 'no'}"
            f"{'' if fits else ' (does not fit)'} | {g(est.base_weights)} | {g(est.trainable_states)} | "
            f"{g(est.activations)} | {g(est.logits)} | {g(est.total)} | {g(plain.total)} | {g(old.total)} |"
        )
    print()
    print("| Pretraining preset | GPU | auto: batch, checkpointing | estimate (GiB) | without checkpointing |")
    print("|---|---|---|---|---|")
    for gpu in ("H100 80GB", "A100 40GB", "RTX 4090 24GB", "RTX 3060 12GB"):
        info = assumed_hardware(gpu)
        c = choose_auto(info)
        nock = estimate_memory(
            PRESETS[c.preset],
            vocab_size=32000,
            batch_size=c.batch_size,
            precision=c.precision,
            gradient_checkpointing=False,
            optimizer=preset_training(c.preset).optimizer,
        ).total
        print(
            f"| {c.preset} | {gpu} | {c.batch_size}, {'yes' if c.gradient_checkpointing else 'no'} | "
            f"{c.estimated_bytes / GIB:.1f} | {nock / GIB:.1f} |"
        )
        figure(f"memory_model.{c.preset}.{gpu.replace(' ', '_')}", f"{c.estimated_bytes / GIB:.1f} GiB")


# reproduce:
# reproduce-quick:

if __name__ == "__main__":
    main()
