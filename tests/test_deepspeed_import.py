"""``aura.models.deepspeed_import``: saving a full model (``save_hf``, what pretrain and full fine-tuning
write) does not import DeepSpeed in a process that never used it, writes the same weights, and hides nothing
once DeepSpeed is imported; DeepSpeed's import for the DeepSpeed strategy skips mlflow, which still imports
afterwards, and builds no shared-memory all-reduce extension on the CPU. One fresh interpreter: what is imported first
is the point."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap

from tests.evidence import require_or_skip

SCRIPT = """
import importlib.util
import sys

import torch
from accelerate.utils import is_deepspeed_available
from transformers import LlamaConfig, LlamaForCausalLM

from aura.models.deepspeed_import import deepspeed_hidden, import_deepspeed
from aura.train.run.session import save_hf

out = sys.argv[1]
torch.manual_seed(0)
model = LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                     num_attention_heads=2, num_key_value_heads=1))
save_hf(model, out + "/aura", None)
print("aura save imported deepspeed:", "deepspeed" in sys.modules)
print("deepspeed findable after:", importlib.util.find_spec("deepspeed") is not None)
loaded = LlamaForCausalLM.from_pretrained(out + "/aura")
ref = model.state_dict()
print("same weights:", all(torch.equal(ref[k], v) for k, v in loaded.state_dict().items()))
print("accelerate would import it:", is_deepspeed_available())  # transformers' own save imports it then
deepspeed = import_deepspeed()
print("mlflow imported with it:", "mlflow" in sys.modules)
print("engine class:", deepspeed.DeepSpeedEngine.__name__)
import mlflow  # noqa: E402,F401  (--report-to mlflow, after the DeepSpeed set-up)
print("mlflow importable after:", "mlflow" in sys.modules)
with deepspeed_hidden():  # once imported, a model may be a DeepSpeedEngine: accelerate must see it
    print("available inside once imported:", is_deepspeed_available())
import os  # noqa: E402
comm = importlib.import_module("deepspeed.comm.torch")  # (deepspeed.comm.torch the attribute is torch itself)
print("shm op built:", comm.build_shm_op() is not None)  # what TorchBackend calls when its comm starts on a CPU
print("extensions compiled:", sorted(os.listdir(os.environ["TORCH_EXTENSIONS_DIR"])))
"""


def test_saving_a_model_imports_deepspeed_only_once_it_is_in_use_and_deepspeed_skips_mlflow(tmp_path):
    if importlib.util.find_spec("mlflow") is None:
        require_or_skip("mlflow", "needs mlflow (DeepSpeed imports it when installed)")
    (tmp_path / "ext").mkdir()
    env = dict(os.environ, TORCH_EXTENSIONS_DIR=str(tmp_path / "ext"))  # empty: a build would land here
    r = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(SCRIPT), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert r.returncode == 0, r.stderr
    lines = [line for line in r.stdout.splitlines() if ": " in line]
    assert lines == [
        "aura save imported deepspeed: False",
        "deepspeed findable after: True",
        "same weights: True",
        "accelerate would import it: True",
        "mlflow imported with it: False",
        "engine class: DeepSpeedEngine",
        "mlflow importable after: True",
        "available inside once imported: True",
        "shm op built: False",
        "extensions compiled: []",
    ], r.stdout
