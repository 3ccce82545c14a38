"""The garbage collector and the objects a command makes before its real work (``gc.freeze``).

Importing torch, transformers and peft and building a model leave ~445,000 objects that the collector
tracks and that live until the process ends. Every full collection walks all of them (272 ms each on a
2-core EPYC), and so does the interpreter's finalisation at exit (1.32 s after the last line; 0.20 s with
the heap frozen): ``bench/grpo_parts.py``, figures in docs/benchmarks.md. ``gc.freeze()`` moves every tracked object
to a permanent generation that collections skip; they are still freed when their last reference goes. Two
uses, as vLLM freezes its heap after start-up:

* ``frozen_heap()``, around the training loop: what exists when training starts (modules, the model, the
  data) is collected once and frozen; collections during training walk only what training makes. On exit
  the objects go back to the collector, so a process that trains twice (tests, the studio) keeps nothing
  frozen.
* ``freeze_for_exit()``, by the command-line entry point after the command has returned and its files are
  closed: finalisation then skips the walk (atexit handlers and ``weakref.finalize`` still run).
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def frozen_heap() -> Iterator[None]:
    """Collect once, then freeze every tracked object for the block; unfreeze on exit."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def freeze_for_exit() -> None:
    """Freeze the heap before the interpreter's finalisation (the process is about to end)."""
    gc.freeze()
