"""Every CUDA path of Aura in one run, with MFU and memory figures: `bash bench/gpu_suite.sh`.

Random-weight models built from configs, data from the embedded Spanish corpus, nothing downloaded. Writes a
markdown table (device, driver, torch and CUDA versions; each check's figure, target and pass/fail) to
``WORKDIR/gpu_suite.md`` and, on a GPU, appends it to docs/benchmarks.md. ``--cpu`` runs the same checks
with tiny shapes on the CPU (the GPU-only ones are listed as skipped), which CI runs so the script never
rots. Exit status: 0 when no check failed.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "aura" / "resources" / "corpus_es"
ENV = {**os.environ, "AURA_LANG": "en", "AURA_PLAIN": "1", "PYTHONUNBUFFERED": "1",
       "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
GiB = 1024 ** 3


class Suite:
    def __init__(self, work: Path, *, cpu: bool):
        self.work, self.cpu, self.rows = work, cpu, []

    def aura(self, *args: str, env: dict | None = None, timeout: float = 1800, check: bool = True,
             prefix: list[str] | None = None) -> subprocess.CompletedProcess:
        cmd = [*(prefix or [sys.executable, "-m", "aura"]), *map(str, args)]
        proc = subprocess.run(cmd, capture_output=True, text=True, env={**ENV, **(env or {})}, timeout=timeout,
                              cwd=self.work)
        if check and proc.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd[2:5])}... exit {proc.returncode}: {(proc.stdout + proc.stderr)[-1500:]}")
        return proc

    def check(self, name: str, fn, *, gpu_only: bool = False, target: str = "") -> None:
        if gpu_only and self.cpu:
            self.rows.append((name, "-", target, "skipped (GPU only)"))
            return
        start = time.time()
        try:
            figure, ok = fn()
            status = "pass" if ok else "FAIL"
        except Exception as err:  # noqa: BLE001 - one failed check must not hide the others
            figure, status = str(err).strip().splitlines()[-1][:160] if str(err).strip() else type(err).__name__, "FAIL"
        self.rows.append((name, figure, target, f"{status} ({time.time() - start:.0f} s)"))
        print(f"[{status}] {name}: {figure}", flush=True)


def _log_rows(run: Path) -> list[dict]:
    with open(run / "training_log.csv", newline="") as f:
        return [r for r in csv.DictReader(f) if r["kind"] == "step"]


def _mfu(run: Path) -> float | None:
    rows = [float(r["mfu"]) for r in _log_rows(run) if r.get("mfu")]
    return max(rows[-2:]) if rows else None  # the first interval includes compilation and warm-up


def _mem_gb(text: str) -> float | None:
    found = re.findall(r"Mem ([0-9.]+) GB", text)
    return float(found[-1]) if found else None


def environment() -> dict:
    import torch

    info = {"torch": torch.__version__, "cuda": torch.version.cuda or "-", "device": "CPU", "driver": "-"}
    if torch.cuda.is_available():
        info["device"] = f"{torch.cuda.device_count()} x {torch.cuda.get_device_name(0)}"
        try:
            import pynvml

            pynvml.nvmlInit()
            info["driver"] = pynvml.nvmlSystemGetDriverVersion()
        except Exception:  # noqa: BLE001
            pass
    else:
        from aura.models.hardware import detect

        info["device"] = f"CPU: {detect().name}"
    return info


def run_suite(work: Path, *, cpu: bool) -> Suite:
    s = Suite(work, cpu=cpu)
    files = sorted(str(p) for p in CORPUS.glob("*.txt"))
    s.aura("tokenizer", "train", *files, "--vocab-size", 2000 if cpu else 8000, "--output-dir", "tok")
    s.aura("data", "prepare", *files, "--tokenizer", "tok", "--output-dir", "data", "--val-fraction", "0.05")
    tiny = ["--model-preset", "tiny", "--precision", "fp32", "--batch-size", "4", "--seq-length", "64",
            "--max-steps", "8"]
    common = ["--data", "data", "--tokenizer", "tok", "--sample-tokens", "0", "--save-steps", "0", "--log-interval"]

    def doctor():
        d = json.loads(s.aura("doctor", "--json", "--output-dir", ".", check=False).stdout)
        mon = json.loads(s.aura("monitor", "--once", "--json").stdout.strip().splitlines()[-1])
        gpu = d["auto"]["hardware"]["device_type"] == "cuda"
        nvml = len(mon.get("gpus") or [])
        return f"auto: {d['auto']['preset']}; GPUs read through NVML: {nvml}", cpu or (gpu and nvml > 0)
    s.check("aura doctor / aura monitor --once (NVML)", doctor)

    def pretrain_mfu(compile_: bool, batch: int):
        def run():
            out = work / f"pt-{'c' if compile_ else 'e'}{batch}"
            args = tiny if cpu else \
                ["--model-preset", "gpt2-small", "--precision", "bf16", "--batch-size", batch, "--max-steps", "60"]
            s.aura("pretrain", *common, "1" if cpu else "20", *args, *(["--compile"] if compile_ else []),
                   "--output-dir", out)
            mfu = _mfu(out)
            return ("-" if mfu is None else f"MFU {100 * mfu:.1f} %"), cpu or (mfu or 0) >= (0.45 if compile_ else 0)
        return run
    for compile_ in (False, True):
        for batch in ((8,) if cpu else (8, 32)):
            if cpu and compile_:
                continue
            s.check(f"{'tiny fp32' if cpu else 'gpt2-small bf16'} pretrain, batch {batch}, "
                    f"{'--compile' if compile_ else 'eager'}",
                    pretrain_mfu(compile_, batch), target="compiled MFU >= 45 %" if compile_ else "")

    def resume_equal():
        args = [*common, "1", *(tiny if cpu else ["--model-preset", "gpt2-small", "--precision", "fp16",
                                                  "--batch-size", "8", "--max-steps", "12"])]
        ref = work / "pt-e8"  # on the CPU the eager run above has these very flags
        if not cpu:
            ref = work / "fp16-ref"
            s.aura("pretrain", *args, "--output-dir", ref)
        out = work / "fp16-stop"
        proc = subprocess.Popen([sys.executable, "-m", "aura", "pretrain", *map(str, args), "--output-dir", str(out)],
                                env=ENV, cwd=work, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 600
        while time.time() < deadline and proc.poll() is None:
            if (out / "training_log.csv").exists() and len(_log_rows(out)) >= 3:
                proc.send_signal(signal.SIGTERM)
                break
            time.sleep(0.2)
        code = proc.wait(timeout=600)
        s.aura("pretrain", *args, "--output-dir", out, "--resume-from", "latest")
        a = {r["step"]: float(r["train_loss"]) for r in _log_rows(ref)}
        b = {r["step"]: float(r["train_loss"]) for r in _log_rows(out)}
        worst = max(abs(a[k] - b[k]) for k in a)
        return f"exit {code} on SIGTERM, resumed; largest loss difference {worst:.2e} over {len(a)} steps", \
            code == 3 and a.keys() == b.keys() and worst <= (1e-6 if cpu else 5e-3)
    s.check(f"{'fp32 (CPU)' if cpu else 'fp16 + GradScaler'}: SIGTERM, resume, same per-step losses", resume_equal,
            target="exit 3, equal losses")

    def big_preset(preset: str, ckpt: bool | None, batch: int = 2):
        def run():
            from aura.models.hardware import estimate_memory
            from aura.models.presets import PRESETS

            out = work / f"{preset}-{ckpt}"
            flag = [] if ckpt is None else ["--gradient-checkpointing" if ckpt else "--no-gradient-checkpointing"]
            proc = s.aura("pretrain", *common, "5", "--model-preset", preset, "--precision", "bf16", "--batch-size",
                          batch, "--max-steps", "20", *flag, "--output-dir", out)
            mfu, mem = _mfu(out), _mem_gb(proc.stdout)
            used = json.loads((out / "run.json").read_text()).get("config", {}).get("gradient_checkpointing", ckpt)
            est = estimate_memory(PRESETS[preset], vocab_size=8000, batch_size=batch, precision="bf16",
                                  gradient_checkpointing=bool(used)).total / 1e9
            text = f"MFU {100 * (mfu or 0):.1f} %, peak {mem} GB, memory model {est:.1f} GB (ckpt {used})"
            ok = (mfu or 0) >= 0.40 if preset == "aura-72h-extended" else \
                mem is not None and mem <= 60 and abs(mem - est) <= 0.1 * est
            return text, ok
        return run
    s.check("aura-72h-extended (1.3B) with checkpointing", big_preset("aura-72h-extended", True), gpu_only=True,
            target="MFU >= 40 %")
    s.check("aura-72h-extended (1.3B) without checkpointing", big_preset("aura-72h-extended", False), gpu_only=True,
            target="MFU >= 40 %")
    s.check("aura-72h-max, batch 2 x 2048, checkpointing from the model", big_preset("aura-72h-max", None),
            gpu_only=True, target="peak <= 60 GB, within 10 % of the model")

    def muon_wsd(preset: str, batch: int, peer: str = ""):
        """--optimizer muon --lr-schedule wsd (issue 26): tokens/s, MFU and peak memory, and the ratio of
        tokens/s to the AdamW + cosine run of the same preset and batch (``peer``) when one ran above."""
        def run():
            out = work / f"muon-wsd-{preset}-{batch}"
            args = tiny if cpu else ["--model-preset", preset, "--precision", "bf16", "--batch-size", batch,
                                     "--max-steps", "30"]
            proc = s.aura("pretrain", *common, "1" if cpu else "10", *args, "--optimizer", "muon",
                          "--lr-schedule", "wsd", "--output-dir", out)
            tps = [float(r["tokens_per_s"]) for r in _log_rows(out)][-2:]
            mfu, mem = _mfu(out), _mem_gb(proc.stdout)
            text = f"{max(tps, default=0):,.0f} tok/s, MFU {100 * (mfu or 0):.1f} %, peak {mem} GB"
            if peer and (work / peer / "training_log.csv").is_file():
                base = max(float(r["tokens_per_s"]) for r in _log_rows(work / peer)[-2:])
                text += f", {max(tps, default=0) / base:.2f}x AdamW's tokens/s"
            return text, bool(tps) and max(tps) > 0
        return run
    s.check(f"Muon + WSD, {'tiny fp32' if cpu else 'gpt2-small bf16'}, batch 8 (tokens/s, MFU, peak)",
            muon_wsd("gpt2-small", 8, peer="pt-e8"), target="tokens/s within 10 % of AdamW's")
    s.check("Muon + WSD, aura-72h-extended (1.3B), batch 2, checkpointing from the model",
            muon_wsd("aura-72h-extended", 2), gpu_only=True, target="MFU >= 40 %")
    s.check("Muon + WSD, qwen3-72h (Qwen3 block, 1.3B), batch 2, checkpointing from the model",
            muon_wsd("qwen3-72h", 2), gpu_only=True, target="MFU >= 40 %")

    def qlora_12gb():
        base = _base_model(work / "llama1b", arch="llama", vocab=128256, hidden=2048, layers=16, inter=8192,
                           heads=32, kv=8)
        cap = ("import sys, torch; torch.cuda.set_per_process_memory_fraction(12e9 / "
               "torch.cuda.get_device_properties(0).total_memory); from aura.cli import main; sys.exit(main())")
        proc = s.aura("finetune", "--base-model", base, "--method", "qlora", "--packing", "--max-length", "2048",
                      "--max-steps", "10", "--log-interval", "5", "--output-dir", work / "qlora",
                      env={"AURA_ASSUME_HARDWARE": "RTX 3060 12GB"}, prefix=[sys.executable, "-c", cap, "aura"])
        mem = _mem_gb(proc.stdout)
        return f"peak {mem} GB under a 12 GB cap", mem is not None and mem <= 12
    s.check("QLoRA Llama-3.2-1B shape, vocab 128k, 2048-token packed rows, 12 GB cap", qlora_12gb, gpu_only=True,
            target="auto fits 12 GB")

    def lora_zero2():
        base = _base_model(work / "mistral8", arch="mistral", vocab=32768, hidden=4096, layers=8, inter=14336,
                           heads=32, kv=8)
        proc = s.aura("finetune", "--base-model", base, "--method", "lora", "--lora-r", "64", "--max-length", "1024",
                      "--deepspeed", ROOT / "examples" / "ds_config_zero2.json", "--max-steps", "10",
                      "--log-interval", "5", "--output-dir", work / "zero2")
        return f"peak {_mem_gb(proc.stdout)} GB", "Traceback" not in proc.stdout + proc.stderr
    s.check("LoRA r64, Mistral-7B width, 8 layers, DeepSpeed ZeRO-2, one GPU", lora_zero2, gpu_only=True)

    def chunked_loss():
        shape = ["--vocab", "32000", "--d-model", "128", "--tokens", "2048", "--steps", "1"] if cpu else \
            ["--vocab", "128256", "--d-model", "2048", "--tokens", "8192", "--steps", "5", "--device", "cuda",
             "--dtype", "bf16"]
        r = json.loads(s.aura(*shape, "--json", prefix=[sys.executable, str(ROOT / "bench" / "bench_loss.py")])
                       .stdout.strip().splitlines()[-1])
        return f"peak memory x{r['memory']:.2f}, tokens/s x{r['speed']:.2f} (chunked / plain)", \
            r["memory"] < 0.5 and r["loss_rel_diff"] < 1e-3
    s.check(f"chunked / fused cross entropy vs plain, vocab {'32k (tiny)' if cpu else '128k'}", chunked_loss,
            target="less than half the memory")

    def grpo(engine: str):
        def run():
            if engine == "vllm":
                import importlib.util

                if importlib.util.find_spec("vllm") is None:
                    return "vLLM not installed", True
            base = _base_model(work / "qwen05", arch="llama", vocab=151936, hidden=896, layers=24, inter=4864,
                               heads=14, kv=2)  # Qwen2.5-0.5B's shape
            out = work / f"grpo-{engine}"
            s.aura("finetune", "--objective", "grpo", "--base-model", base, "--rollout-engine", engine,
                   "--num-generations", "8", "--batch-size", "8", "--gradient-accumulation-steps", "2",
                   "--max-completion-length", "256", "--max-steps", "6", "--log-interval", "1", "--precision", "bf16",
                   "--output-dir", out)
            rows = _log_rows(out)[1:]  # the first step includes warm-up
            tokens = sum(float(r["completion_length"]) * 16 for r in rows)
            seconds = sum(float(r["time/rollout_s"]) for r in rows)
            return f"{tokens / seconds:,.0f} completion tokens/s in rollouts", seconds > 0
        return run
    s.check("GRPO rollouts, 0.5B (Qwen2.5-0.5B shape), LoRA, G 8, 256 tokens, PyTorch engine", grpo("torch"),
            gpu_only=True, target="rollout tokens/s")
    s.check("GRPO rollouts, same model, vLLM colocate (when installed)", grpo("vllm"), gpu_only=True,
            target="rollout tokens/s vs the PyTorch engine")

    def check_dist():
        import torch

        n = max(torch.cuda.device_count(), 1)
        proc = s.aura("launch", "--gpus-per-node", n, "check-dist", "--backend", "nccl")
        return "Sync=OK" if "Sync=OK" in proc.stdout else proc.stdout[-200:], "Sync=OK" in proc.stdout
    s.check("aura check-dist with NCCL", check_dist, gpu_only=True)

    def gguf():
        src = work / ("pt-e8" if cpu else "pt-c8") / "final"
        proc = s.aura("export", "gguf", "--model", src, "--outfile", work / "model.gguf")
        return "exported and verified in llama.cpp", proc.returncode == 0
    s.check("GGUF export of a model trained here, verified in llama.cpp", gguf)
    return s


def _base_model(out: Path, *, arch: str, vocab: int, hidden: int, layers: int, inter: int, heads: int,
                kv: int) -> Path:
    """A random-weight base model dir of the given shape, with the suite's tokenizer."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM

    if out.exists():
        return out
    tok = AutoTokenizer.from_pretrained(out.parent / "tok")
    cls, cfg_cls = (LlamaForCausalLM, LlamaConfig) if arch == "llama" else (MistralForCausalLM, MistralConfig)
    cfg = cfg_cls(vocab_size=vocab, hidden_size=hidden, intermediate_size=inter, num_hidden_layers=layers,
                  num_attention_heads=heads, num_key_value_heads=kv, tie_word_embeddings=arch == "llama",
                  bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, torch_dtype="bfloat16")
    torch.manual_seed(0)
    model = cls(cfg).to(torch.bfloat16)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


def table(s: Suite, env: dict) -> str:
    lines = [f"### GPU suite, {time.strftime('%Y-%m-%d')}{' (--cpu, tiny shapes)' if s.cpu else ''}", "",
             f"Device: {env['device']}; driver {env['driver']}; torch {env['torch']}; CUDA {env['cuda']}. "
             f"Command: `bash bench/gpu_suite.sh{' --cpu' if s.cpu else ''}`.", "",
             "| Check | Figure | Target | Result |", "|---|---|---|---|"]
    cell = lambda x: str(x).replace("|", "\\|").replace("\n", " ")  # noqa: E731
    lines += [f"| {cell(a)} | {cell(b)} | {cell(c or '-')} | {cell(d)} |" for a, b, c, d in s.rows]
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cpu", action="store_true", help="tiny shapes on the CPU (CI); GPU-only checks are skipped")
    ap.add_argument("--workdir", help="where runs are written (default: a new temporary directory)")
    ap.add_argument("--no-append", action="store_true", help="do not append the table to docs/benchmarks.md")
    a = ap.parse_args()
    if not a.cpu:
        import torch

        if not torch.cuda.is_available():
            print("No CUDA device: run `bash bench/gpu_suite.sh --cpu` for the CPU mode.", file=sys.stderr)
            return 2
    work = Path(a.workdir or tempfile.mkdtemp(prefix="aura-gpu-suite-")).resolve()
    work.mkdir(parents=True, exist_ok=True)
    if a.cpu:
        ENV["CUDA_VISIBLE_DEVICES"] = ""
    s = run_suite(work, cpu=a.cpu)
    text = table(s, environment())
    (work / "gpu_suite.md").write_text(text, encoding="utf-8")
    print(text)
    if not a.cpu and not a.no_append:
        with open(ROOT / "docs" / "benchmarks.md", "a", encoding="utf-8") as f:
            f.write("\n" + text)
    return 1 if any(r[3].startswith("FAIL") for r in s.rows) else 0


if __name__ == "__main__":
    sys.exit(main())
