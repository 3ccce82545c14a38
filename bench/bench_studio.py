"""Aura Studio: what the page costs a training run, and how fast a large runs folder shows.

1. **Training with the page open**: a tiny ``aura pretrain`` (a separate process, as from the CLI), its
   tokens/s (the log's own ``tokens_per_s``, median over the steps after the first 10) with the studio
   serving its runs folder and a client polling ``/api/runs`` and ``/api/runs/NAME/metrics`` every 2 s as
   the page does, against the same run with no studio; runs alternated (off, on, off, on...) so a change
   in the machine's load hits both. Prints the ratio (target: at most 2 % slower), and the CPU time the
   studio and its polling client took (this process's CPU seconds per wall second while the run trains):
   on a loaded machine the tokens/s ratio is noisier than 2 %, the CPU share is not.
2. **A large runs folder**: 200 runs, one with a 100k-step log. The API requests of a first render and of
   a 2 s poll (Starlette's TestClient, in this process), then the time to first render in a real browser
   (headless Chromium through Selenium): from ``driver.get`` until the runs table shows its 200 rows, and
   until the 100k-step run's charts are drawn: the page opened as the studio starts (cold: the runs are
   read while the page waits), 3 s after it started (the runs read once at start-up), and again (warm).

    python bench/bench_studio.py [--pairs 3] [--steps 300] [--skip-train] [--skip-browser]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from starlette.testclient import TestClient

from aura.studio.app import create_app
from aura.watch.runlog import read_log

HEADER = "epoch,step,tokens,train_loss,val_loss,lr,grad_norm,tokens_per_s,mfu,seconds,kind,time\n"
TINY = [
    "--model-preset",
    "manual",
    "--embed-size",
    "64",
    "--num-layers",
    "2",
    "--num-heads",
    "4",
    "--seq-length",
    "64",
    "--intermediate-size",
    "256",
    "--batch-size",
    "8",
    "--log-interval",
    "1",
    "--sample-tokens",
    "0",
    "--save-steps",
    "100000",
    "--eval-interval",
    "100000",
]


def row(s: int) -> str:
    return f"1,{s},{s * 4096},{3 + 1 / s:.6f},{'' if s % 100 else 3.1},0.0003,1.0,50000,0.4,{s * 0.1:.1f},step,\n"


def serve(root: Path):
    """The studio on a free loopback port, in a thread of this process (as ``aura studio`` runs it)."""
    import uvicorn

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(create_app(root), host="127.0.0.1", port=port, log_level="warning"))
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.02)
    return server, f"http://127.0.0.1:{port}/"


def poll(url: str, name: str, stop: threading.Event, counts: list) -> None:
    """The page's polling: the runs list and the run's curves every 2 s."""
    while not stop.wait(2.0):
        for path in ("api/runs", f"api/runs/{name}/metrics?max_points=1500"):
            try:
                urllib.request.urlopen(url + path, timeout=30).read()
                counts.append(path)
            except OSError:
                pass


def cpu_seconds() -> float:
    use = resource.getrusage(resource.RUSAGE_SELF)
    return use.ru_utime + use.ru_stime


def tiny_pretrain(root: Path, name: str, steps: int, studio: bool) -> tuple[float, int, float]:
    """(median tokens/s after the first 10 steps, requests the page made, this process's CPU seconds per
    wall second meanwhile) of one tiny pretrain."""
    stop, counts, server = threading.Event(), [], None
    cpu0, t0 = cpu_seconds(), time.perf_counter()
    if studio:
        server, url = serve(root)
        threading.Thread(target=poll, args=(url, name, stop, counts), daemon=True).start()
    try:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "aura",
                "pretrain",
                *TINY,
                "--max-steps",
                str(steps),
                "--output-dir",
                str(root / name),
            ],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env={**os.environ, "AURA_PLAIN": "1"},
        )
    finally:
        share = (cpu_seconds() - cpu0) / (time.perf_counter() - t0)
        stop.set()
        if server is not None:
            server.should_exit = True
    rows = [r for r in read_log(root / name) if r["kind"] == "step" and r["tokens_per_s"]]
    return statistics.median(r["tokens_per_s"] for r in rows[10:]), len(counts), share


def training_with_the_page_open(pairs: int, steps: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        off, on, shares, requests = [], [], [], 0
        for i in range(pairs):
            for studio in (False, True):
                tps, n, share = tiny_pretrain(root, f"r{i}{'on' if studio else 'off'}", steps, studio)
                (on if studio else off).append(tps)
                requests += n
                if studio:
                    shares.append(share)
                print(
                    f"  pair {i + 1}, studio {'open' if studio else 'closed'}: {tps:,.0f} tokens/s"
                    + (f", studio + client CPU {share * 100:.2f} % of one core" if studio else ""),
                    flush=True,
                )
        ratio = statistics.median(on) / statistics.median(off)
        pair = statistics.median(a / b for a, b in zip(on, off))
        print(
            f"tiny pretrain ({steps} steps), median tokens/s: no studio {statistics.median(off):,.0f}, studio "
            f"open and polled ({requests} requests) {statistics.median(on):,.0f}; open / closed = {ratio:.3f}, "
            f"median of the pairs' ratios {pair:.3f}; the studio and its client used "
            f"{statistics.median(shares) * 100:.2f} % of one core"
        )
        from figures import figure

        figure("studio.open_over_closed.tokens_per_s", f"{ratio:.3f}")
        figure("studio.cpu_of_one_core", f"{statistics.median(shares) * 100:.2f} %")


def big_folder(root: Path) -> None:
    for i in range(200):
        d = root / f"run{i:03d}"
        d.mkdir()
        (d / "run.json").write_text(json.dumps({"kind": "pretrain", "status": "finished", "last_step": 100}))
        (d / "training_log.csv").write_text(HEADER + "".join(row(s) for s in range(1, 101 if i else 100_001)))


def api_times(root: Path) -> None:
    c = TestClient(create_app(root), base_url="http://127.0.0.1:7860")
    t = time.perf_counter()
    runs = c.get("/api/runs").json()
    t_runs = time.perf_counter() - t
    t = time.perf_counter()
    c.get("/api/runs").json()
    t_runs2 = time.perf_counter() - t
    t = time.perf_counter()
    m = c.get("/api/runs/run000/metrics?max_points=1500").json()
    t_cold = time.perf_counter() - t
    with open(root / "run000" / "training_log.csv", "a") as f:
        f.write("".join(row(s) for s in range(100_001, 100_101)))
    t = time.perf_counter()
    runs3 = c.get("/api/runs").json()
    t_runs3 = time.perf_counter() - t
    t = time.perf_counter()
    m2 = c.get("/api/runs/run000/metrics?max_points=1500").json()
    t_poll = time.perf_counter() - t
    t = time.perf_counter()
    full = read_log(root / "run000")
    t_full = time.perf_counter() - t
    assert len(runs) == 200 and m["rows"] == 100_000 and m2["rows"] == 100_100 == len(full)
    assert runs3[0]["name"] == "run000" and runs3[0]["tokens"] == 100_100 * 4096
    print(
        f"/api/runs, 200 runs (one 100k-step log): first {t_runs:.3f} s, unchanged poll {t_runs2:.4f} s, "
        f"poll after 100 new rows {t_runs3:.4f} s"
    )
    print(
        f"metrics of the 100k-step run: first request {t_cold:.3f} s ({len(m['series']['train_loss']['x'])} "
        f"points sent); poll after 100 new rows {t_poll:.4f} s"
    )
    print(
        f"read_log of the whole log (a non-incremental poll): {t_full:.3f} s; poll / full read = {t_poll / t_full:.3f}"
    )
    from figures import figure

    figure("studio.api_runs.unchanged_poll", f"{t_runs2:.3f} s")


def browser_render(root: Path) -> None:
    from selenium import webdriver
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    chromium, driver_bin = shutil.which("chromium"), shutil.which("chromedriver")
    if not (chromium and driver_bin):
        print("browser render: skipped (needs Debian's chromium and chromium-driver)")
        return
    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium
    for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,1000"):
        opts.add_argument(a)
    driver = webdriver.Chrome(service=webdriver.ChromeService(executable_path=driver_bin), options=opts)
    wait = WebDriverWait(driver, 120, poll_frequency=0.02)
    try:
        driver.get("about:blank")  # the browser itself is started before timing
        for label in ("cold (opened as the studio starts)", "3 s after the start", "warm (opened again)"):
            if not label.startswith("warm"):
                server, url = serve(root)
            if label.startswith("3 s"):
                time.sleep(3)
            driver.get("about:blank")
            t = time.perf_counter()
            driver.get(url + "#/")
            wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "tr[data-run]")) == 200)
            t_list = time.perf_counter() - t
            t = time.perf_counter()
            driver.get(url + "#/run/run000")
            wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "[data-chart] canvas")) >= 3)
            t_run = time.perf_counter() - t
            print(f"browser, {label}: runs page with 200 rows {t_list:.2f} s; the 100k-step run's charts {t_run:.2f} s")
            if label.startswith("cold"):
                server.should_exit = True
                time.sleep(0.5)
        server.should_exit = True
    finally:
        driver.quit()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--skip-train", action="store_true")
    ap.add_argument("--skip-browser", action="store_true")
    a = ap.parse_args()
    if not a.skip_train:
        training_with_the_page_open(a.pairs, a.steps)
    with tempfile.TemporaryDirectory() as tmp:
        big_folder(Path(tmp))
        api_times(Path(tmp))
    if not a.skip_browser:
        with tempfile.TemporaryDirectory() as tmp:
            big_folder(Path(tmp))
            browser_render(Path(tmp))


# reproduce: --pairs 8 --steps 200 --skip-browser
# reproduce-quick: --pairs 1 --steps 12 --skip-browser

if __name__ == "__main__":
    main()
