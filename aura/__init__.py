"""Aura: train Spanish language models end to end, on whatever hardware you have."""

__version__ = "0.1.0"
