"""``aura serve`` against the same engine started by hand: requests/s and time to the first token.

One tiny Llama (tests/tiny_models.py: byte-level BPE, ChatML template) as a Hugging Face dir and as its f16
GGUF (``aura export gguf``). For each engine, two servers on free loopback ports, each in its own process:

- transformers: ``aura serve DIR`` against ``transformers serve DIR`` (the CLI transformers installs);
- llama.cpp: ``aura serve FILE.gguf`` against ``python -m llama_cpp.server --model FILE.gguf``.

The same client (the official ``openai`` package) sends the same streamed chat requests to both, greedy,
``--max-tokens`` new tokens each (``repeat_penalty`` 1.0 sent explicitly to llama.cpp, and the hand-started
llama.cpp server given ``--interrupt_requests False``, so both do the same work: ``aura serve`` sets both,
the hand-started server would not): ``--requests`` one after the other
(the first-token latency: from sending to the first chunk with text; requests/s: requests over their wall
time) and ``--requests`` from ``--concurrency`` threads at once (requests/s). Rounds alternate (aura, hand,
aura, hand...) so a change in the machine's load hits both; medians over ``--rounds``.

    python bench/bench_serve.py [--rounds 3] [--requests 10] [--concurrency 4] [--max-tokens 16]
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.tiny_models import build_zoo  # noqa: E402

MESSAGES = [{"role": "user", "content": "¿Qué tal, Íñigo? Cuéntame algo de Logroño."}]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(argv: list[str], port: int, log: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "AURA_PLAIN": "1"}
    with open(log, "w") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env)
    deadline = time.monotonic() + 600
    while True:
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"{argv} did not start:\n{log.read_text()}")
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=5).close()
            return proc
        except urllib.error.HTTPError:
            return proc
        except OSError:
            time.sleep(0.3)


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def one_request(client, model: str, max_tokens: int, extra: dict) -> tuple[float, float]:
    """(seconds to the first chunk with text, seconds in all) of one streamed greedy chat request, checked
    to have run to its end (``finish_reason``: a server that cuts answers short would look fast)."""
    t0 = time.perf_counter()
    first, finish = None, None
    for chunk in client.chat.completions.create(
        model=model, messages=MESSAGES, max_tokens=max_tokens, temperature=0, stream=True, extra_body=extra
    ):
        if first is None and chunk.choices and chunk.choices[0].delta.content:
            first = time.perf_counter() - t0
        if chunk.choices and chunk.choices[0].finish_reason:
            finish = chunk.choices[0].finish_reason
    if finish not in ("length", "stop"):
        raise RuntimeError(f"an answer was cut short (finish_reason {finish!r})")
    return (first if first is not None else float("nan")), time.perf_counter() - t0


def measure(port: int, model: str, args, extra: dict) -> dict:
    from openai import OpenAI

    client = OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="loopback", max_retries=0)
    one_request(client, model, args.max_tokens, extra)  # warm-up
    t0 = time.perf_counter()
    runs = [one_request(client, model, args.max_tokens, extra) for _ in range(args.requests)]
    sequential = args.requests / (time.perf_counter() - t0)
    t0 = time.perf_counter()
    with ThreadPoolExecutor(args.concurrency) as pool:
        list(pool.map(lambda _: one_request(client, model, args.max_tokens, extra), range(args.requests)))
    concurrent = args.requests / (time.perf_counter() - t0)
    return {"ttft": statistics.median(r[0] for r in runs), "rps": sequential, "rps_conc": concurrent}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--requests", type=int, default=10)
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--max-tokens", type=int, default=16)
    p.add_argument("--engines", default="transformers,llama.cpp")
    args = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-serve-"))
    try:
        zoo = build_zoo(work / "zoo")
        gguf = work / "llama-f16.gguf"
        subprocess.run(
            [
                sys.executable,
                "-m",
                "aura",
                "export",
                "gguf",
                "--model",
                str(zoo["llama"]),
                "--outfile",
                str(gguf),
                "--quant",
                "f16",
                "--no-verify",
            ],
            check=True,
            capture_output=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        hand_transformers = shutil.which("transformers") or str(Path(sys.executable).parent / "transformers")
        setups = {
            "transformers": (
                str(zoo["llama"]),
                {},
                lambda port: [sys.executable, "-m", "aura", "serve", str(zoo["llama"]), "--port", str(port)],
                lambda port: [
                    hand_transformers,
                    "serve",
                    str(zoo["llama"]),
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(port),
                ],
            ),
            "llama.cpp": (
                str(gguf),
                {"repeat_penalty": 1.0},
                lambda port: [sys.executable, "-m", "aura", "serve", str(gguf), "--port", str(port)],
                lambda port: [
                    sys.executable,
                    "-m",
                    "llama_cpp.server",
                    "--model",
                    str(gguf),
                    "--model_alias",
                    str(gguf),
                    "--n_ctx",
                    "0",
                    "--verbose",
                    "False",
                    "--interrupt_requests",
                    "False",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(port),
                ],
            ),
        }
        cpu = next(
            (line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")),
            platform.processor() or platform.machine(),
        )
        print(f"CPU: {cpu} ({os.cpu_count()} cores); load at start: {os.getloadavg()}")
        for engine in args.engines.split(","):
            model, extra, aura_argv, hand_argv = setups[engine]
            results: dict[str, list[dict]] = {"aura serve": [], "by hand": []}
            for r in range(args.rounds):
                for who, argv in (("aura serve", aura_argv), ("by hand", hand_argv)):
                    port = free_port()
                    proc = start(argv(port), port, work / f"{engine}-{who.replace(' ', '_')}-{r}.log")
                    try:
                        results[who].append(measure(port, model, args, extra))
                    finally:
                        stop(proc)
                    print(f"  {engine} round {r + 1} {who}: {results[who][-1]}", flush=True)
            for who, rs in results.items():
                med = {k: statistics.median(x[k] for x in rs) for k in rs[0]}
                print(f"| {engine} | {who} | {med['rps']:.2f} | {med['rps_conc']:.2f} | {med['ttft'] * 1000:.0f} ms |")
            from figures import figure

            for who, rs in results.items():
                med = {k: statistics.median(x[k] for x in rs) for k in rs[0]}
                figure(f"serve.{engine}.{who.replace(' ', '_')}.requests_per_s", f"{med['rps']:.2f}")
        print(f"load at end: {os.getloadavg()}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


# reproduce: --rounds 3 --requests 10 --concurrency 4 --max-tokens 16
# reproduce-needs: module:llama_cpp
# reproduce-quick: --rounds 1 --requests 1 --concurrency 1 --max-tokens 2
# reproduce-quick-needs: module:llama_cpp

if __name__ == "__main__":
    main()
