"""``aura push``: a model, an adapter or GGUF files on the Hugging Face Hub, with Aura's model card."""
