"""DeepSpeed imported only where it is used, and without mlflow.

* transformers' ``PreTrainedModel.save_pretrained`` unwraps the model through accelerate's
  ``extract_model_from_parallel``, which imports ``deepspeed`` whenever it is installed, to test whether the
  model is a ``DeepSpeedEngine``. Every process that saved a full model (``aura pretrain``, full
  ``finetune``, ``merge``...) paid for that import although none of them used DeepSpeed. A model can only be
  wrapped in a ``DeepSpeedEngine`` once ``deepspeed`` is imported, so while it is not, ``deepspeed_hidden()``
  makes it read as not installed (``None`` in ``sys.modules``: ``find_spec`` then returns None) and restores
  it on exit; ``save_pretrained()`` saves inside it.
* DeepSpeed's own import loads its autotuner, which imports mlflow whenever that is installed (the
  ``mlflow`` extra), for autotuning runs of DeepSpeed's launcher that Aura never starts: importing DeepSpeed
  took 2.2 s of CPU instead of 0.5 s on a 2-core Xeon (a hand timing, not a bench figure: process time
  around ``import deepspeed`` after torch and transformers, three runs each at load 7-8), on every rank.
  ``import_deepspeed()`` imports it with
  mlflow hidden the same way (unless mlflow is already imported); ``--report-to mlflow`` imports mlflow
  afterwards as usual.

* On the CPU, DeepSpeed would also compile its shared-memory all-reduce for inference on first use; Aura does
  not need it and does not build it (``_no_inference_shm_op``).

``tests/test_deepspeed_import.py`` checks all three in a fresh interpreter.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def hidden(module: str) -> Iterator[None]:
    """Inside the block, ``module`` reads as not installed, unless it is already imported."""
    if module in sys.modules:
        yield
        return
    sys.modules[module] = None  # type: ignore[assignment]
    try:
        yield
    finally:
        if sys.modules.get(module, False) is None:
            del sys.modules[module]


def deepspeed_hidden() -> contextlib.AbstractContextManager[None]:
    """Inside the block, deepspeed reads as not installed, unless it is already imported."""
    return hidden("deepspeed")


def save_pretrained(model, directory: str | Path, **kwargs) -> None:
    """``model.save_pretrained(directory, **kwargs)``, importing DeepSpeed only if it is already in use."""
    with deepspeed_hidden():
        model.save_pretrained(str(directory), **kwargs)


def import_deepspeed():
    """The ``deepspeed`` module (ImportError when it is not installed); its first import skips mlflow, and its
    CPU shared-memory all-reduce is not built (``_no_inference_shm_op``)."""
    with hidden("mlflow"):  # (nothing to hide, and nothing imported, when deepspeed is already imported)
        import deepspeed
    _no_inference_shm_op()
    return deepspeed


def _no_inference_shm_op() -> None:
    """DeepSpeed's communication backend, when its accelerator is the CPU, compiles a C++ extension on first use
    (``deepspeed_shm_comm``, into ``~/.cache/torch_extensions``, once per Python environment: 30 s to
    minutes of both cores on a 2-core machine, and a compiler the user may not have) for ``inference_all_reduce`` alone,
    the collective
    of DeepSpeed's tensor-parallel inference. Aura never runs that: its training collectives go to
    ``torch.distributed``, and without the extension ``inference_all_reduce`` itself falls back to it. So the
    builder returns None (releases without it are left as they are)."""
    import importlib

    comm = importlib.import_module("deepspeed.comm.torch")
    if hasattr(comm, "build_shm_op"):
        comm.build_shm_op = lambda: None
