"""``aura.models.peft_import``: a LoRA set-up imports peft without bitsandbytes, and 4-bit QLoRA still works
in the same process afterwards (and when bitsandbytes came first). Each order runs in a fresh interpreter:
what is imported first is the point."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import textwrap

import pytest

from tests.evidence import require_or_skip
from tests.tiny_models import build_llama, train_tokenizer

if importlib.util.find_spec("bitsandbytes") is None:
    require_or_skip("bitsandbytes", "needs bitsandbytes")

SCRIPT = """
import sys
import torch
from aura.train import adapters

model_dir = sys.argv[1]
if sys.argv[2] == "bnb-first":
    import bitsandbytes  # noqa: F401
lora = adapters.setup_model(adapters.load_base_model(model_dir), method="lora", lora_r=4, lora_alpha=8,
                            lora_dropout=0.0)
ids = torch.tensor([[3, 4, 5, 6]])
assert torch.isfinite(lora(input_ids=ids).logits).all()
print("after lora:", "bitsandbytes" in sys.modules)

import bitsandbytes as bnb
from peft.tuners.lora.bnb import Linear4bit

q = adapters.setup_model(adapters.load_base_model(model_dir, method="qlora"), method="qlora", lora_r=4,
                         lora_alpha=8, lora_dropout=0.0)
layer = q.base_model.model.model.layers[0].self_attn.q_proj
assert isinstance(layer, Linear4bit) and isinstance(layer.base_layer, bnb.nn.Linear4bit), type(layer)
loss = q(input_ids=ids, labels=ids).loss
loss.backward()
assert layer.lora_A["default"].weight.grad is not None
print("qlora ok")
"""


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    root = tmp_path_factory.mktemp("peft_import")
    return build_llama(root / "llama", train_tokenizer(root / "tok", vocab_size=300))


@pytest.mark.parametrize("order, bnb_after_lora", [("lora-first", False), ("bnb-first", True)])
def test_lora_without_bitsandbytes_then_qlora_in_the_same_process(llama, order, bnb_after_lora):
    r = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(SCRIPT), str(llama), order], capture_output=True, text=True, timeout=300
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert f"after lora: {bnb_after_lora}" in r.stdout and "qlora ok" in r.stdout, r.stdout
