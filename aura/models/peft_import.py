"""peft without bitsandbytes when no model in the process has 4-bit or 8-bit layers.

peft imports bitsandbytes whenever it is installed: ``import peft`` does (``peft.helpers``, for a helper Aura
does not use), and so does every LoRA set-up (``get_peft_model``, ``PeftModel.from_pretrained``: the LoRA
dispatch asks ``is_bnb_available()`` and imports its bitsandbytes layer classes), even for a model with no
quantized layer. bitsandbytes' own import wraps its kernels in ``torch.compile``, which imports TorchDynamo
and Inductor: importing torch, transformers and peft took 5.9 s instead of 4.0 s and 430 MB instead of
385 MB on a 2-core EPYC (``bench/grpo_parts.py``), and it prints a
"Failed to load CPU gemm_4bit_forward" line on the terminal, for every ``aura finetune``, ``chat``, ``merge``
or ``export`` of a model that was never quantized.

``bitsandbytes_hidden()`` makes ``import bitsandbytes`` fail inside its block (``None`` in ``sys.modules``,
which peft's ``find_spec`` check and its ``try: import`` both read as "not installed") and restores it on
exit, clearing peft's cached answers. It hides nothing once bitsandbytes is imported: only then can a model
hold its layers, so while it is not imported peft's 4-bit and 8-bit dispatch has nothing to match and hiding
it changes only the import. QLoRA loads its base through transformers' 4-bit path, which imports it first.
``tests/test_peft_import.py`` checks LoRA then QLoRA, and the other order, in one process.
"""

from __future__ import annotations

import contextlib
import sys
import warnings
from collections.abc import Iterator


@contextlib.contextmanager
def bitsandbytes_hidden() -> Iterator[None]:
    """Inside the block, bitsandbytes reads as not installed, unless it is already imported."""
    if "bitsandbytes" in sys.modules:
        yield
        return
    sys.modules["bitsandbytes"] = None  # type: ignore[assignment]
    try:
        yield
    finally:
        if sys.modules.get("bitsandbytes", False) is None:
            del sys.modules["bitsandbytes"]
        utils = sys.modules.get("peft.import_utils")
        for check in ("is_bnb_available", "is_bnb_4bit_available"):  # answers given while it was hidden
            cached = getattr(utils, check, None)
            if hasattr(cached, "cache_clear"):
                cached.cache_clear()


def import_peft():
    """The ``peft`` module; its first import in the process does not import bitsandbytes."""
    if "peft" not in sys.modules:
        with bitsandbytes_hidden():
            import peft  # noqa: F401
    import peft

    return peft


@contextlib.contextmanager
def peft_quiet() -> Iterator[None]:
    """Around a peft call that sets up LoRA layers (``get_peft_model``, ``PeftModel.from_pretrained``):
    bitsandbytes hidden as above, and the FutureWarning transformers 5 raises when peft reads
    ``model.is_gradient_checkpointing`` (the user can do nothing about it) silenced."""
    with bitsandbytes_hidden(), warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.* is deprecated", category=FutureWarning)
        yield
