"""Tokenizers: load and hash (every stage), `aura tokenizer train` and `aura tokenizer extend`."""
