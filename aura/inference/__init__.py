"""Inference on Aura's models: load (HF dir, checkpoint, base + adapter, GGUF), generate, chat, eval.

Never imports ``aura.train``: a machine that only runs models needs none of the training code.
"""
