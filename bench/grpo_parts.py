"""Where GRPO's speed-ups against TRL come from, each against its own "before" in the same run on this machine:

1. imports: torch, transformers' Llama and peft, with peft imported plainly (it imports bitsandbytes when
   installed) and through ``aura.models.peft_import.import_peft`` (hidden): wall seconds and peak RSS of a
   fresh interpreter each, alternating;
2. exit: a fresh interpreter that imported the same, from its last line to its exit, with and without
   ``gc.freeze()`` before it (what ``aura.cli.entry`` does);
3. a full garbage collection after the model is built: plain, and with the heap frozen
   (``aura.core.heap.frozen_heap``, what the training loop does);
4. the parts of a GRPO step on the benchmark's model and shapes (bench/versus_trl_grpo.py: tiny Llama, LoRA
   r 16, 8 rows of one 21-token prompt, 64 new tokens), alternating, median CPU seconds: the rollout from
   the merged LoRA weights, without and with the packed linear layers (``aura.inference.packed``; the
   sampled tokens must be the same); the update (loss and backward) and the reference pass, over whole rows
   and with each distinct prompt run once (``grpo._shared_prompt_logits``).

    python bench/grpo_parts.py              # 5 alternations of the subprocess parts, 10 of the step parts
    python bench/grpo_parts.py --repeats 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import versus_trl  # noqa: E402  (bench/: the tiny Llama of the Aura-vs-TRL benchmarks)

IMPORTS = """
import resource, sys, time
t = time.perf_counter()
import torch
from transformers import LlamaForCausalLM
{peft}
rss_mb, bnb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "bitsandbytes" in sys.modules
print(json.dumps({{"seconds": time.perf_counter() - t, "rss_mb": rss_mb, "bitsandbytes": bnb}}))
"""
PLAIN_PEFT = "import peft"
HIDDEN_PEFT = "from aura.models.peft_import import import_peft\nimport_peft()"
EXIT = """
import gc, time
import torch
from transformers import LlamaForCausalLM
from aura.models.peft_import import import_peft
import_peft()
{freeze}
print(time.time(), flush=True)
"""


def child(code: str) -> tuple[str, float]:
    """(stdout, the wall time at which the process ended) of ``python -c code``."""
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(versus_trl.ROOT))
    r = subprocess.run([sys.executable, "-c", "import json\n" + code], capture_output=True, text=True, env=env)
    end = time.time()
    if r.returncode:
        sys.exit(r.stderr[-3000:])
    return r.stdout.strip().splitlines()[-1], end


def imports_and_exit(repeats: int) -> None:
    runs = {"peft (imports bitsandbytes)": [], "import_peft (hidden)": []}
    for _ in range(repeats):
        for name, peft in (("peft (imports bitsandbytes)", PLAIN_PEFT), ("import_peft (hidden)", HIDDEN_PEFT)):
            runs[name].append(json.loads(child(IMPORTS.format(peft=peft))[0]))
    for name, rs in runs.items():
        print(
            f"imports, {name:28s}: {min(r['seconds'] for r in rs):5.2f} s  peak RSS "
            f"{min(r['rss_mb'] for r in rs):4.0f} MB  bitsandbytes imported: {rs[0]['bitsandbytes']}"
        )
    a, b = runs["peft (imports bitsandbytes)"], runs["import_peft (hidden)"]
    print(
        f"imports: hidden / plain  time x{min(r['seconds'] for r in b) / min(r['seconds'] for r in a):.2f}  "
        f"RSS x{min(r['rss_mb'] for r in b) / min(r['rss_mb'] for r in a):.2f}"
    )
    exits = {"plain": [], "gc.freeze()": []}
    for _ in range(repeats):
        for name, freeze in (("plain", ""), ("gc.freeze()", "gc.freeze()")):
            out, end = child(EXIT.format(freeze=freeze))
            exits[name].append(end - float(out))
    for name, xs in exits.items():
        print(f"exit after the last line, {name:12s}: {min(xs):5.2f} s (min of {repeats})")
    print(f"exit: frozen / plain x{min(exits['gc.freeze()']) / min(exits['plain']):.2f}")
    from figures import figure

    figure(
        "grpo_parts.imports.hidden_over_plain", f"×{min(r['seconds'] for r in b) / min(r['seconds'] for r in a):.2f}"
    )
    figure("grpo_parts.exit.frozen_over_plain", f"×{min(exits['gc.freeze()']) / min(exits['plain']):.2f}")


def step_parts(repeats: int) -> None:
    import contextlib
    import gc

    import torch
    from transformers import AutoTokenizer

    from aura.inference.packed import packed_view
    from aura.inference.sampling import SamplingParams, sample_batch
    from aura.text.templates import CHATML
    from aura.train import adapters
    from aura.train.lora_views import base_view, merged_view
    from aura.train.objectives.grpo import GRPO, completion_logps
    from aura.train.objectives.rollout import collate

    torch.set_num_threads(1)
    cpu = torch.device("cpu")
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = versus_trl.build_model(Path(tmp))
        tok = AutoTokenizer.from_pretrained(model_dir)
        tok.chat_template = CHATML
        text = tok.apply_chat_template(
            [{"role": "user", "content": "¿Cuánto es 7 más 19?"}], add_generation_prompt=True, tokenize=False
        )
        prompt = tok(text, add_special_tokens=False)["input_ids"]
        model = adapters.setup_model(
            adapters.load_base_model(str(model_dir)), method="lora", lora_r=16, lora_alpha=32, lora_dropout=0.0
        )
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:  # an adapter that matters
                p.normal_(0.0, 0.02, generator=g)

    t = time.perf_counter()
    gc.collect()
    plain = time.perf_counter() - t
    tracked = len(gc.get_objects())
    gc.freeze()
    t = time.perf_counter()
    gc.collect()
    frozen = time.perf_counter() - t
    gc.unfreeze()
    print(
        f"full collection, {tracked:,} objects tracked: {plain * 1e3:.0f} ms plain, {frozen * 1e3:.1f} ms with the "
        f"heap frozen (x{frozen / plain:.3f})"
    )

    pad = tok.pad_token_id or 0
    params = SamplingParams(max_new_tokens=64, temperature=1.0)

    def sample(pack: bool):
        model.eval()
        with contextlib.ExitStack() as views:
            views.enter_context(merged_view(model, precision="fp32", device=cpu))
            if pack:
                views.enter_context(packed_view(model, precision="fp32", device=cpu))
            return sample_batch(model, [prompt] * 8, params, pad_id=pad, device=cpu, keys=list(range(8)))

    completions = sample(False)
    assert sample(True) == completions, "the packed layers sampled other tokens"
    shared = collate([prompt] * 8, completions, [0.5, -1.0, 1.0, 0.0, -0.5, 0.25, 1.0, -1.0], pad_id=pad)
    whole = {k: v for k, v in shared.items() if not k.startswith("prompt_")}
    objective = GRPO(loss_type="dapo", beta=0.0)

    def update(batch):
        model.train()
        model.zero_grad()
        objective.loss(model, batch)[0].backward()

    def reference(batch):
        model.eval()
        with torch.no_grad(), base_view(model):
            completion_logps(model, batch, temperature=1.0)

    pairs = {
        "rollout (merged LoRA weights)": (lambda: sample(False), lambda: sample(True), "packed layers"),
        "update (loss, backward)": (lambda: update(whole), lambda: update(shared), "prompt once"),
        "reference pass": (lambda: reference(whole), lambda: reference(shared), "prompt once"),
    }
    print(
        f"step parts: {len(prompt)}-token prompt, 8 rows, {max(map(len, completions))} new tokens; median CPU "
        f"seconds of {repeats} alternations"
    )
    for name, (before, after, what) in pairs.items():
        before(), after()
        times: dict[str, list[float]] = {"before": [], "after": []}
        for _ in range(repeats):
            for key, f in (("before", before), ("after", after)):
                c = time.process_time()
                f()
                times[key].append(time.process_time() - c)
        b, a = statistics.median(times["before"]), statistics.median(times["after"])
        print(f"  {name:30s} {b:.3f} s -> {a:.3f} s with {what} (x{b / a:.2f} faster)")
        from figures import figure

        figure(f"grpo_parts.{name.split(' ')[0]}.speed_up", f"×{b / a:.2f}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--repeats", type=int, default=5, help="alternations of the subprocess parts")
    p.add_argument("--step-repeats", type=int, default=10, help="alternations of the step parts")
    a = p.parse_args()
    print(f"load average before: {os.getloadavg()[0]:.2f}", flush=True)
    imports_and_exit(a.repeats)
    step_parts(a.step_repeats)
    print(f"load average after: {os.getloadavg()[0]:.2f}")


# reproduce:
# reproduce-quick: --repeats 1 --step-repeats 1

if __name__ == "__main__":
    main()
