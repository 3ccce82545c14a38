"""``save_pretrained`` without importing DeepSpeed when no DeepSpeed engine exists in the process.

transformers' ``PreTrainedModel.save_pretrained`` unwraps the model through accelerate's
``extract_model_from_parallel``, which imports ``deepspeed`` whenever it is installed, to test whether the
model is a ``DeepSpeedEngine``. DeepSpeed's import pulls in its autotuner, which imports mlflow when that is
installed (the ``mlflow`` extra): 2.3 s of CPU on a 2-core Xeon, paid by every process that saves a full
model (``aura pretrain``, full ``finetune``, ``merge``...) although none of them uses DeepSpeed.

A model can only be wrapped in a ``DeepSpeedEngine`` once ``deepspeed`` is imported, so while it is not,
``deepspeed_hidden()`` makes it read as not installed (``None`` in ``sys.modules``: ``find_spec`` then
returns None) and restores it on exit. The DeepSpeed strategy imports it first (``aura.train.optim
.deepspeed``), and then nothing is hidden. ``tests/test_peft_import.py`` checks both cases.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def deepspeed_hidden() -> Iterator[None]:
    """Inside the block, deepspeed reads as not installed, unless it is already imported."""
    if "deepspeed" in sys.modules:
        yield
        return
    sys.modules["deepspeed"] = None  # type: ignore[assignment]
    try:
        yield
    finally:
        if sys.modules.get("deepspeed", False) is None:
            del sys.modules["deepspeed"]


def save_pretrained(model, directory: str | Path, **kwargs) -> None:
    """``model.save_pretrained(directory, **kwargs)``, importing DeepSpeed only if it is already in use."""
    with deepspeed_hidden():
        model.save_pretrained(str(directory), **kwargs)
