"""The one way a bench script publishes a figure: ``figure(key, value)`` prints ``FIGURE key = value``.

``bash bench/reproduce.sh`` collects these lines from every script it runs and sets each beside the value
docs/benchmarks.md publishes for the same key (its table "Every figure and the command that prints it"),
so a figure in the docs is always a line some script prints, never a sum done by hand.
"""

from __future__ import annotations


def figure(key: str, value: object) -> None:
    """Print one published figure. ``key``: dotted, stable (``grpo.steps_per_s.whole_run``); ``value``: the
    figure as the docs write it (``"1.56×"``, ``"153/153"``), units included."""
    print(f"FIGURE {key} = {value}", flush=True)


def ratio(x: float, digits: int = 2) -> str:
    """``1.5649`` -> ``"1.56×"``."""
    return f"{x:.{digits}f}×"
