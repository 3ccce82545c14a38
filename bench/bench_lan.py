"""Training over a slow LAN: plain DDP vs --ddp-comm bf16 vs --ddp-comm powersgd vs --local-steps (DiLoCo).

    sudo .venv/bin/python bench/bench_lan.py [--rate 10mbit] [--delay 0.2ms] [--steps 64] [--local-steps 16]
                                             [--powersgd-rank 4] [--modes ddp,bf16,powersgd,local]

Builds a two-node cluster from two network namespaces joined by a rate-limited veth pair
(``bench/lan_cluster.sh``: tbf on both ends, optional netem delay), then, for each mode, runs
``aura launch pretrain`` on both "nodes" (one rank each, gloo over the shaped link, static rendezvous) with
the same model, data, seed, batch and number of steps, so every mode sees the same tokens. Reported per
mode, and as a ratio against plain DDP measured in the same run:

* tokens/s: all ranks, the harmonic mean of the per-step rates the loop logs after the first 5 steps
  (checkpoints and validation excluded);
* communication share: from the ``Communication: X % of step time`` lines (DDP modes: time during which a
  gradient all-reduce was in flight, measured in the DDP hooks; local SGD: the pseudo-gradient all-reduce),
  after the first 5 steps;
* validation loss after the same number of tokens (one validation at the last step; local SGD ends on an
  outer step, so it is the synchronised model's).

Also prints the per-step compute (1 rank, no network) and gradient bytes of this model, which
docs/benchmarks.md uses, with `aura check-dist`'s model (``aura.cluster.check.comm_times``), to extrapolate
to gpt2-medium on five PCs at 1 Gbit/s:

    .venv/bin/python bench/bench_lan.py --extrapolate [--gbit 1] [--world 5] [--peak-tflops 35.6] [--mfu 0.4]

(computed only: no cluster, no root). Needs root (ip netns, tc); the cluster is removed at the end.
"""

from __future__ import annotations

import argparse
import csv
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
CLUSTER = ROOT / "bench" / "lan_cluster.sh"
NS, DEV, ADDR = ("aura-lan0", "aura-lan1"), ("alan0", "alan1"), ("10.201.0.1", "10.201.0.2")
MODEL = [
    "--model-preset",
    "manual",
    "--arch",
    "llama",
    "--embed-size",
    "128",
    "--num-layers",
    "2",
    "--num-heads",
    "4",
    "--num-kv-heads",
    "2",
    "--seq-length",
    "128",
    "--intermediate-size",
    "384",
]
SKIP = 5  # first steps left out of the rates (start-up, DDP's bucket rebuild, PowerSGD's warm-up)


def prepare_data(work: Path) -> Path:
    from aura.data import EMBEDDED_CORPUS
    from aura.data.prepare import PrepareConfig, prepare
    from aura.tokenizer.train import train_bpe

    inputs = [str(p) for p in sorted(Path(EMBEDDED_CORPUS).glob("*.txt"))]
    tok = train_bpe(inputs=inputs, vocab_size=2000, output_dir=work / "tok")
    return Path(
        prepare(
            PrepareConfig(
                inputs=inputs,
                tokenizer=str(tok),
                output_dir=str(work / "data"),
                max_tokens=1_000_000,
                val_fraction=0.05,
            )
        )
    )


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def train_args(data: Path, out: Path, steps: int, batch: int) -> list[str]:
    return [
        "pretrain",
        "--data",
        str(data),
        "--output-dir",
        str(out),
        *MODEL,
        "--batch-size",
        str(batch),
        "--gradient-accumulation-steps",
        "1",
        "--max-steps",
        str(steps),
        "--learning-rate",
        "3e-3",
        "--warmup-steps",
        "5",
        "--log-interval",
        "1",
        "--save-steps",
        "0",
        "--eval-interval",
        str(steps),
        "--eval-batches",
        "8",
        "--sample-tokens",
        "0",
        "--precision",
        "fp32",
        "--backend",
        "gloo",
        "--seed",
        "1",
    ]


def env() -> dict:
    return dict(
        os.environ, OMP_NUM_THREADS="1", AURA_PLAIN="1", AURA_LANG="en", PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1"
    )


def run_mode(data: Path, out: Path, *, steps: int, batch: int, extra: list[str]) -> str:
    """Both nodes' `aura launch pretrain`; returns node 0's output."""
    port = str(_port())
    procs = []
    for rank in (0, 1):
        cmd = [
            "ip",
            "netns",
            "exec",
            NS[rank],
            sys.executable,
            "-m",
            "aura",
            "launch",
            "--nnodes",
            "2",
            "--node-rank",
            str(rank),
            "--gpus-per-node",
            "1",
            "--master-addr",
            ADDR[0],
            "--master-port",
            port,
            *train_args(data, out, steps, batch),
            *extra,
        ]
        procs.append(
            subprocess.Popen(
                cmd,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                cwd=ROOT,
                env=dict(env(), GLOO_SOCKET_IFNAME=DEV[rank]),
            )
        )
    texts = [p.communicate(timeout=3600)[0] for p in procs]
    for p, text in zip(procs, texts):
        if p.returncode != 0:
            sys.exit(f"{' '.join(extra) or 'ddp'} failed:\n{text[-4000:]}")
    return texts[0]


def measure(out: Path, text: str) -> dict:
    rows = list(csv.DictReader(open(out / "training_log.csv")))
    steps = [r for r in rows if r["kind"] == "step"]
    rates = [float(r["tokens_per_s"]) for r in steps if int(r["step"]) > SKIP]
    val = [float(r["val_loss"]) for r in rows if r["kind"] == "eval" and r["val_loss"]]
    # the communication lines after the first SKIP steps
    shares = re.findall(r"Communication: [\d.]+ % of step time \(([\d.]+) s of ([\d.]+) s over (\d+) steps?;", text)
    seen = comm = total = 0.0
    for c, t, n in shares:
        seen += int(n)
        if seen > SKIP:
            comm, total = comm + float(c), total + float(t)
    return {
        "tok_s": len(rates) / sum(1 / r for r in rates),
        "comm": comm / total if total else float("nan"),
        "val": val[-1] if val else float("nan"),
        "tokens": int(steps[-1]["tokens"]),
    }


def compute_only(data: Path, work: Path, *, steps: int, batch: int) -> float:
    """Seconds per optimizer step of one rank with no network (the compute the link competes with)."""
    out = work / "compute"
    proc = subprocess.run(
        [sys.executable, "-m", "aura", *train_args(data, out, steps, batch)],
        env=env(),
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    if proc.returncode != 0:
        sys.exit(proc.stdout[-3000:] + proc.stderr[-3000:])
    rows = [r for r in csv.DictReader(open(out / "training_log.csv")) if r["kind"] == "step"]
    rates = [float(r["tokens_per_s"]) for r in rows if int(r["step"]) > SKIP]
    return batch * 128 / (len(rates) / sum(1 / r for r in rates))


def extrapolate(
    *,
    gbit: float,
    latency_ms: float,
    world: int,
    tokens_per_step: int,
    peak_tflops: float,
    mfu: float,
    local_steps: int,
) -> None:
    """The guide's case, computed (nothing here is measured): gpt2-medium's gradient bytes and the
    all-reduce model of `aura check-dist` (``aura.cluster.check.comm_times``); compute per step from the
    model's FLOPs per token at ``mfu`` of ``peak_tflops``."""
    from aura.cluster.check import comm_times
    from aura.models.presets import PRESETS, flops_per_token, hf_config

    cfg = hf_config(PRESETS["gpt2-medium"], 32000)
    compute = flops_per_token(cfg, 1024) * tokens_per_step / (peak_tflops * 1e12 * mfu)
    nbytes, times = comm_times("gpt2-medium", world=world, latency_s=latency_ms / 1e3, busbw=gbit * 1e9 / 8)
    times[f"local-steps {local_steps}"] = times["none"] / local_steps
    print(
        f"\ngpt2-medium (vocab 32000): {nbytes / 1e9:.2f} GB of fp32 gradients per step; {world} ranks, "
        f"{gbit:g} Gbit/s, {latency_ms:g} ms; compute {compute:.2f} s/step ({tokens_per_step} tokens per rank "
        f"at {mfu:.0%} of {peak_tflops:g} TFLOP/s) -- computed, not measured"
    )
    print(f"{'mode':<22} {'comm s/step':>11} {'step s':>7} {'comm %':>7} {'x DDP':>6}")
    plain = times["none"] + compute
    for mode, t in times.items():
        print(
            f"{mode:<22} {t:>11.2f} {t + compute:>7.2f} {100 * t / (t + compute):>6.1f}% {plain / (t + compute):>6.2f}"
        )
        from figures import figure, ratio

        figure(f"lan.computed.{mode.replace(' ', '_')}.x_ddp", ratio(plain / (t + compute)))


def main() -> None:
    if "--extrapolate" in sys.argv:
        ap = argparse.ArgumentParser()
        ap.add_argument("--extrapolate", action="store_true")
        ap.add_argument("--gbit", type=float, default=1.0)
        ap.add_argument("--latency-ms", type=float, default=0.2)
        ap.add_argument("--world", type=int, default=5)
        ap.add_argument("--tokens-per-step", type=int, default=32 * 1024)  # the guide: batch 1 x accumulation 32
        ap.add_argument("--peak-tflops", type=float, default=35.6)  # RTX 3090, fp16 with fp32 accumulation
        ap.add_argument("--mfu", type=float, default=0.4)
        ap.add_argument("--local-steps", type=int, default=16)
        a = ap.parse_args()
        extrapolate(
            gbit=a.gbit,
            latency_ms=a.latency_ms,
            world=a.world,
            tokens_per_step=a.tokens_per_step,
            peak_tflops=a.peak_tflops,
            mfu=a.mfu,
            local_steps=a.local_steps,
        )
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rate", default="10mbit", help="tc rate of each direction (tbf)")
    ap.add_argument("--delay", default="", help="netem delay of each direction, e.g. 0.2ms (none by default)")
    ap.add_argument("--steps", type=int, default=64)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--local-steps", type=int, default=16)
    ap.add_argument("--powersgd-rank", type=int, default=4)
    ap.add_argument("--modes", default="ddp,bf16,powersgd,local")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench_lan.py needs root (ip netns, tc): run it with sudo.")
    modes = {
        "ddp": [],
        "bf16": ["--ddp-comm", "bf16"],
        "powersgd": ["--ddp-comm", "powersgd", "--powersgd-rank", str(args.powersgd_rank), "--powersgd-warmup", "2"],
        "local": ["--local-steps", str(args.local_steps)],
    }
    chosen = [m for m in args.modes.split(",") if m]
    cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")), "?")
    with tempfile.TemporaryDirectory(prefix="aura-lan-") as tmp:
        work = Path(tmp)
        data = prepare_data(work)
        step_s = compute_only(data, work, steps=SKIP + 10, batch=args.batch_size)
        subprocess.run(["bash", str(CLUSTER), "up", args.rate, *([args.delay] if args.delay else [])], check=True)
        try:
            results = {}
            for mode in chosen:
                start = time.time()
                out = work / mode
                text = run_mode(data, out, steps=args.steps, batch=args.batch_size, extra=modes[mode])
                results[mode] = dict(measure(out, text), wall=time.time() - start)
                print(f"{mode}: {results[mode]}", flush=True)
        finally:
            subprocess.run(["bash", str(CLUSTER), "down"], check=False)
        import torch

        from aura.models.presets import build_model, resolve_spec

        spec = resolve_spec(
            "manual",
            arch="llama",
            embed_size=128,
            num_layers=2,
            num_heads=4,
            num_kv_heads=2,
            seq_length=128,
            intermediate_size=384,
        )
        with torch.device("meta"):
            params = sum(p.numel() for p in build_model(spec, 2000).parameters())
    print(
        f"\nCPU: {cpu}; link: {args.rate} each way{' + ' + args.delay + ' delay' if args.delay else ''}; "
        f"2 nodes x 1 rank (gloo); {params:,} parameters ({params * 4 / 1e6:.2f} MB of fp32 gradients); "
        f"compute {step_s:.3f} s/step on 1 rank; {args.steps} steps of {args.batch_size} x 128 tokens per rank"
    )
    base = results.get("ddp")
    print(f"{'mode':<26} {'tokens/s':>9} {'x DDP':>6} {'comm %':>7} {'val loss':>9} {'vs DDP':>7}")
    for mode in chosen:
        r = results[mode]
        label = " ".join(modes[mode]) or "DDP (--ddp-comm none)"
        ratio = r["tok_s"] / base["tok_s"] if base else float("nan")
        dval = (r["val"] / base["val"] - 1) * 100 if base else float("nan")
        print(f"{label:<26} {r['tok_s']:>9.0f} {ratio:>6.2f} {r['comm'] * 100:>6.1f}% {r['val']:>9.4f} {dval:>+6.1f}%")
        from figures import figure

        tag = mode if mode != "local" else f"local_{args.local_steps}"
        if base and mode != "ddp":
            figure(f"lan.measured.{tag}.x_ddp", f"{ratio:.2f}×")
            figure(f"lan.measured.{tag}.val_loss_vs_ddp", f"{dval:+.1f} %")


# reproduce:
# reproduce: --modes ddp,local --local-steps 32
# reproduce: --extrapolate
# reproduce: --extrapolate --local-steps 64
# reproduce-needs: root cmd:ip cmd:tc
# reproduce-quick: --extrapolate

if __name__ == "__main__":
    main()
