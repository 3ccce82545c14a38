"""Data: readers of raw text, ``aura data prepare``, token shards, pretraining and SFT data."""

from pathlib import Path

_RESOURCES = Path(__file__).resolve().parent.parent / "resources"
EMBEDDED_CORPUS = _RESOURCES / "corpus_es"
"""Directory of the embedded Spanish corpus (``*.txt``, documents separated by blank lines)."""
EMBEDDED_INSTRUCTIONS = _RESOURCES / "instrucciones_es.csv"
"""The embedded Spanish instruction sample (CSV)."""
