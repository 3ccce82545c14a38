"""Benchmark of ``aura data curate`` on a planted, labelled corpus built from real text.

    bash scripts/build_bench_corpus.sh es.txt        # Spanish prose (Debian documentation)
    apt-get install -y libreoffice-help-pt libreoffice-help-ca libreoffice-help-gl libreoffice-help-it \\
        libreoffice-help-en-gb                       # the other languages (LibreOffice's help)
    python bench/bench_curate.py --spanish es.txt [--docs 3000] [--workers 2]

The corpus: Spanish documents (4 paragraphs each, no paragraph used twice), documents in Portuguese,
Catalan, Galician, Italian and English (paragraphs of LibreOffice's help, minus those left untranslated,
i.e. equal to an en-GB one), exact copies and near-copies of Spanish documents (1-5 % of the words
replaced, deleted or inserted), spam (repeated lines, keyword lists), a share of the Spanish documents
served as HTML pages with navigation, cookie banner and footer inside a WARC, and PII inserted in others
(e-mail, Spanish phones, DNI/NIE with their check letter, IBAN with a valid checksum, public IPv4).

Reported: per stage precision/recall against the labels (every removed document is kept with
``--sample``), throughput against datatrove running the same stages directly (same step objects,
same tasks and workers, without Aura's meters, reader and report; both in a fresh interpreter, wall and
CPU seconds of the whole process tree, same output texts checked), with ``--overhead-rounds`` the
per-document cost of Aura's meters and reader (the first stage in-process with and without them), and
peak memory (RSS of the process tree). The machine is shared: only the ratios inside one run mean anything.

    python bench/bench_curate.py --spanish es.txt --memory-sizes 10000,30000,100000 [--workers 2]

measures only the peak memory of ``aura data curate`` on corpora of growing size (short documents of
random Spanish sentences, see ``curate_corpus.memory_corpus``); ``--memory-curate-args`` passes options,
``--memory-files N`` keeps N files (the documents per task then grow with the corpus).
``--cluster-pairs 250000,1000000`` measures the one stage whose memory follows the whole corpus, MinHash
clustering, on random duplicate pairs.
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from curate_corpus import (  # noqa: E402  (scripts/ is on sys.path above)
    BOILER,
    build,
    memory_corpus,
)


def _running_stage(out: Path | None) -> str:
    """The stage whose log folder was created last (the one running), from the output's work folder."""
    logs = next((d for d in (out / ".curate" / "work" / "logs", out / "logs") if d.is_dir()), None) if out else None
    if logs is None:
        return "start"
    dirs = [d for d in logs.iterdir() if d.is_dir()]
    return max(dirs, key=lambda d: d.stat().st_ctime).name if dirs else "start"


def peak_rss(pid: int, done: threading.Event, box: dict, out: Path | None = None) -> None:
    """Peak of the summed RSS of the process tree (workers, datatrove's manager, extraction helpers),
    the largest single process, and the stage running at the peak; sampled every 0.1 s."""
    import psutil

    p = psutil.Process(pid)
    while not done.is_set():
        try:
            rss = [c.memory_info().rss for c in [p, *p.children(recursive=True)]]
            if sum(rss) > box.get("peak", 0):
                box["peak"], box["stage"] = sum(rss), _running_stage(out)
            box["single"] = max(box.get("single", 0), max(rss))
        except psutil.Error:
            pass
        done.wait(0.1)


def run_tree(cmd: list[str], out: Path | None = None, env: dict | None = None) -> dict:
    """Runs ``cmd`` in a fresh interpreter; wall seconds, CPU seconds (user + system) of the whole process
    tree, robust to the load of a shared machine, and peak RSS. This process becomes the subreaper of the
    tree, so that helpers orphaned at the end (datatrove's forkserver and managers) are reaped here and
    their CPU time counted."""
    import ctypes
    import os
    import resource

    ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.time()
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env or _env())
    box: dict = {}
    done = threading.Event()
    th = threading.Thread(target=peak_rss, args=(proc.pid, done, box, out))
    th.start()
    _, status, _ = os.wait4(proc.pid, 0)
    wall = time.time() - t0
    done.set()
    th.join()
    deadline = time.time() + 60
    while time.time() < deadline:  # the orphaned helpers exit once the command is gone
        try:
            if os.waitpid(-1, os.WNOHANG) == (0, 0):
                time.sleep(0.05)
        except ChildProcessError:
            break
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc.returncode = os.waitstatus_to_exitcode(status)
    assert proc.returncode == 0, cmd
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return {
        "wall": wall,
        "cpu": cpu,
        "peak": box.get("peak", 0),
        "single": box.get("single", 0),
        "stage": box.get("stage"),
    }


def run_aura(inp: Path, out: Path, workers: int, sample: int, extra: tuple[str, ...] = ()) -> dict:
    cmd = [
        sys.executable,
        "-m",
        "aura",
        "data",
        "curate",
        str(inp),
        "--output-dir",
        str(out),
        "--workers",
        str(workers),
        "--sample",
        str(sample),
        *extra,
    ]
    return run_tree(cmd, out, {**_env(), "AURA_LANG": "en", "AURA_PLAIN": "1"})


def memory_scaling(args, work: Path) -> list[dict]:
    """Peak RSS of ``aura data curate --workers N`` (default stages) at growing corpus sizes."""
    rows = []
    for n in (int(x) for x in args.memory_sizes.split(",")):
        d = work / f"mem-{n}"
        shutil.rmtree(d, ignore_errors=True)
        t0 = time.time()
        per_file = -(-n // args.memory_files) if args.memory_files else args.memory_docs_per_file
        size = memory_corpus(args.spanish, n, per_file, d / "input")
        built = time.time() - t0
        run = run_aura(d / "input", d / "out", args.workers, 0, tuple(args.memory_curate_args.split()))
        report = json.loads((d / "out" / ".curate" / "report.json").read_text(encoding="utf-8"))
        row = {
            "docs": n,
            "options": args.memory_curate_args,
            "mb": round(size / 1e6, 1),
            "files": -(-n // per_file),
            "docs_out": report["stages"][-1]["docs_out"],
            "seconds": round(run["wall"], 1),
            "cpu_s": round(run["cpu"], 1),
            "build_s": round(built, 1),
            "peak_rss_mb": round(run["peak"] / 2**20),
            "largest_process_mb": round(run["single"] / 2**20),
            "stage_at_peak": run["stage"],
        }
        rows.append(row)
        print(json.dumps(row), flush=True)
        if not args.keep:
            shutil.rmtree(d, ignore_errors=True)
    if len(rows) >= 2:
        a, b = rows[-2], rows[-1]
        slope = (b["peak_rss_mb"] - a["peak_rss_mb"]) / ((b["docs"] - a["docs"]) / 1e6)
        # no straight line to 100M here: what grows is per task (docs/data.md), not per corpus
        print(json.dumps({"mb_per_million_docs_between_last_two": round(slope, 1)}), flush=True)
    return rows


def duplicate_pairs(pairs: int, work: Path) -> None:
    """A MinHash ``.dups`` file of ``pairs`` random duplicate pairs of distinct documents (256 files)."""
    import numpy as np

    shutil.rmtree(work, ignore_errors=True)
    (work / "buckets").mkdir(parents=True)
    rng = np.random.default_rng(0)
    files = rng.integers(0, 256, size=(pairs, 2), dtype=np.uint32)
    docs = (rng.permutation(np.arange(2 * pairs, dtype=np.uint32)) % 400_000).reshape(pairs, 2)
    rows = np.stack([files[:, 0], docs[:, 0], files[:, 1], docs[:, 1]], axis=1).astype("<u4")
    (work / "buckets" / "000_00.dups").write_bytes(rows.tobytes())


def cluster_child(pairs: int, work: Path) -> None:
    """``--cluster-child``: peak RSS of datatrove's ``MinhashDedupCluster`` (one process, the only stage
    whose memory follows the whole corpus) on the pairs ``duplicate_pairs`` wrote."""
    import resource

    from datatrove.pipeline.dedup.minhash import MinhashConfig, MinhashDedupCluster
    from datatrove.utils.hashing import HashConfig
    from loguru import logger

    logger.remove()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    config = MinhashConfig(num_buckets=1, hash_config=HashConfig(precision=64, hash_fc="xxhash"))
    MinhashDedupCluster(str(work / "buckets"), str(work / "remove"), config=config).run()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(
        json.dumps(
            {
                "pairs": pairs,
                "peak_mb": peak >> 10,
                "added_mb": (peak - before) >> 10,
                "bytes_per_duplicate_doc": round((peak - before) * 1024 / (2 * pairs)),
            }
        ),
        flush=True,
    )


def _env() -> dict:
    import os

    return {k: v for k, v in os.environ.items() if k not in ("AURA_LANG",)}


def direct_stages(inp: Path, work: Path, tasks: int, *, meters: bool = False, aura_reader: bool = False) -> list:
    """The stages of ``aura data curate`` with the same step objects, minus Aura's additions: datatrove's
    ``WarcReader`` + ``JsonlReader`` instead of Aura's reader (unless ``aura_reader``), no meters (unless
    ``meters``), no samples of removed documents."""
    from datatrove.pipeline.readers import JsonlReader, WarcReader

    from aura.data.curate.pipeline import Options, build_stages
    from aura.data.curate.readers import CurateReader, find_inputs
    from aura.data.curate.steps import HtmlExtractor, Meter
    from aura.text.readers import ReaderOptions

    files = find_inputs([str(inp)])
    stages = build_stages(Options(work=work, files=files, root=str(inp), reader=ReaderOptions(), tasks=tasks))
    for stage in stages:
        steps = []
        for step in stage.pipeline:
            if isinstance(step, Meter) and not meters:
                continue
            if isinstance(step, CurateReader) and not aura_reader:  # html marked for the extractor
                steps += [
                    WarcReader(str(inp), glob_pattern="*.warc.gz", default_metadata={"format": "html"}),
                    JsonlReader(str(inp), glob_pattern="*.jsonl.gz"),
                ]
                continue
            if hasattr(step, "exclusion_writer"):
                step.exclusion_writer = None
            steps.append(step)
        assert any(isinstance(s, HtmlExtractor) for s in steps) or stage.name != "filter"
        stage.pipeline = steps
    return stages


def direct_child(inp: Path, work: Path, workers: int, tasks: int) -> None:
    """``--direct-child``: datatrove's local executor runs the stages, in this fresh interpreter."""
    from aura.data.curate.pipeline import QuietLocalExecutor, quiet_logger

    # datatrove's LocalPipelineExecutor; the subclass only sends the tasks' logs to their log files and
    # not to the console, as in Aura's command, so that both sides write the same logs
    quiet_logger()
    for stage in direct_stages(inp, work, tasks):
        QuietLocalExecutor(
            stage.pipeline,
            tasks=stage.tasks,
            workers=min(workers, stage.tasks),
            logging_dir=str(work / "logs" / stage.name),
        ).run()


def run_direct(inp: Path, work: Path, workers: int, tasks: int) -> dict:
    """The same stages and step objects through datatrove's executor, in a fresh interpreter as Aura's
    command is (both pay for starting Python and importing datatrove)."""
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--direct-child",
        str(inp),
        str(work),
        str(workers),
        str(tasks),
    ]
    return run_tree(cmd, work)


def texts_of(folder: Path) -> list[str]:
    texts = []
    for shard in sorted(folder.glob("*.jsonl.gz")):
        with gzip.open(shard, "rt", encoding="utf-8") as f:
            texts += [json.loads(x)["text"] for x in f]
    return sorted(texts)


def per_document_overhead(inp: Path, work: Path, tasks: int, rounds: int, docs: int) -> dict:
    """The first stage (read, every filter, shard and signature writing: all the per-document work) run
    in this process, one task after another, three ways, alternated ``rounds`` times: datatrove's readers
    without meters, datatrove's readers with Aura's meters, Aura's reader with meters (Aura's stage).
    CPU seconds of this process and of the extraction helpers it waited for; the outputs must be equal."""
    import resource

    from aura.data.curate.pipeline import QuietLocalExecutor, quiet_logger

    variants = {
        "datatrove": {},
        "datatrove+meters": {"meters": True},
        "aura_reader+meters": {"meters": True, "aura_reader": True},
    }
    cpu: dict[str, list[float]] = {k: [] for k in variants}
    outputs = {}
    for r in range(rounds + 1):  # round 0 warms up (imports, models, caches) and is not counted
        for name, kw in variants.items():
            d = work / "overhead" / name
            shutil.rmtree(d, ignore_errors=True)
            stage = direct_stages(inp, d, tasks, **kw)[0]
            before = [resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
            quiet_logger()
            QuietLocalExecutor(stage.pipeline, tasks=stage.tasks, workers=1, logging_dir=str(d / "logs")).run()
            after = [resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
            if r:
                cpu[name].append(sum(a.ru_utime + a.ru_stime - b.ru_utime - b.ru_stime for a, b in zip(after, before)))
            outputs[name] = texts_of(d / "filtered")
    base = min(cpu["datatrove"])
    return {
        "cpu_s": {k: [round(x, 2) for x in v] for k, v in cpu.items()},
        "meters_us_per_doc": round((min(cpu["datatrove+meters"]) - base) / docs * 1e6, 1),
        "meters_overhead": round(min(cpu["datatrove+meters"]) / base - 1, 4),
        "aura_reader_and_meters_overhead": round(min(cpu["aura_reader+meters"]) / base - 1, 4),
        "same_output": len({tuple(v) for v in outputs.values()}) == 1,
        "input_docs": docs,
        "kept_docs": len(outputs["datatrove"]),
    }


def score(labels: dict, out: Path) -> dict:
    texts = []
    for shard in sorted(out.glob("*.jsonl.gz")):
        with gzip.open(shard, "rt", encoding="utf-8") as f:
            texts += [json.loads(x)["text"] for x in f]
    removed: dict[str, list[str]] = {}
    for f in (out / ".curate" / "removed").glob("*.jsonl"):
        removed[f.stem] = [json.loads(x)["text"] for x in f.read_text(encoding="utf-8").splitlines()]
    heads = Counter(t[:80] for t in texts)
    by_reason = {r: Counter(t[:80] for t in ts) for r, ts in removed.items()}
    lang_removed = by_reason.get("lang_other", Counter()) + by_reason.get("lang_low_score", Counter())
    foreign = labels["foreign"]
    es = labels["es"]
    pairs_exact = [m for m in labels["exact"] if heads[m] or m in by_reason.get("exact_duplicate", {})]
    pairs_near = [m for m in labels["near"] if heads[m] or m in by_reason.get("near_duplicate", {})]
    dup_markers = set(labels["exact"]) | set(labels["near"])
    unique_es = [m for m in es if m not in dup_markers]
    near_false = sum(
        m in by_reason.get("near_duplicate", {}) or m in by_reason.get("exact_duplicate", {}) for m in unique_es
    )
    joined = "\n".join(texts)
    pii_total = pii_masked = 0
    for found in labels["pii"]:
        for s in found:
            pii_total += 1
            pii_masked += s not in joined
    per_lang = Counter(lang for lang, m in foreign if m in lang_removed)
    n_lang = Counter(lang for lang, _ in foreign)
    return {
        "lang_recall": sum(m in lang_removed for _, m in foreign) / max(1, len(foreign)),
        "lang_recall_by_language": {k: round(per_lang[k] / n_lang[k], 3) for k in n_lang},
        "spanish_kept_by_langid": 1 - sum(m in lang_removed for m in es) / len(es),
        "spanish_kept_overall": sum(heads[m] > 0 for m in es) / len(es),
        "exact_recall": sum(heads[m] == 1 for m in pairs_exact) / max(1, len(pairs_exact)),
        "near_recall": sum(heads[m] == 1 for m in pairs_near) / max(1, len(pairs_near)),
        "near_false_removals": near_false / max(1, len(unique_es)),
        "spam_recall": sum(m[:60] not in joined for m in labels["spam"]) / max(1, len(labels["spam"])),
        "pii_masked": pii_masked / max(1, pii_total),
        "boilerplate_left": sum(b in joined for b in BOILER),
        "removed_by_reason": {r: len(t) for r, t in sorted(removed.items())},
    }


def aura(*args: str) -> None:
    subprocess.run(
        [sys.executable, "-m", "aura", *args],
        cwd=ROOT,
        check=True,
        env={**_env(), "AURA_LANG": "en", "AURA_PLAIN": "1"},
    )


def downstream(work: Path, curated: Path, tokens: int) -> dict:
    """A tiny Llama pretrained on the curated corpus and on the raw one, same tokens, same tokenizer
    (trained on held-out-free Spanish: the curated shards); bits per byte on held-out clean Spanish."""
    d = work / "downstream"
    shutil.rmtree(d, ignore_errors=True)
    aura("tokenizer", "train", str(curated), "--vocab-size", "4096", "--output-dir", str(d / "tok"))
    out = {}
    for name, src in (("curated", str(curated)), ("raw", str(work / "raw.jsonl"))):
        aura(
            "data",
            "prepare",
            src,
            "--tokenizer",
            str(d / "tok"),
            "--output-dir",
            str(d / f"prep-{name}"),
            "--workers",
            "1",
        )
        aura(
            "pretrain",
            "--data",
            str(d / f"prep-{name}"),
            "--preset",
            "tiny",
            "--max-tokens",
            str(tokens),
            "--seq-length",
            "256",
            "--batch-size",
            "8",
            "--precision",
            "fp32",
            "--eval-interval",
            "0",
            "--output-dir",
            str(d / f"run-{name}"),
        )
        aura(
            "eval",
            "--model",
            str(d / f"run-{name}" / "final"),
            "--data",
            str(work / "heldout_es.txt"),
            "--seq-len",
            "256",
            "--output",
            str(d / f"eval-{name}.json"),
        )
        res = json.loads((d / f"eval-{name}.json").read_text(encoding="utf-8"))
        rows = res["results"] if isinstance(res, dict) and "results" in res else res
        out[name] = rows[0]["bits_per_byte"] if isinstance(rows, list) else rows["bits_per_byte"]
    out["gap_raw_minus_curated"] = out["raw"] - out["curated"]
    return out


def main() -> None:
    if sys.argv[1:2] == ["--cluster-child"]:
        cluster_child(int(sys.argv[2]), Path(sys.argv[3]))
        return
    if sys.argv[1:2] == ["--direct-child"]:
        inp, work, workers, tasks = sys.argv[2:6]
        direct_child(Path(inp), Path(work), int(workers), int(tasks))
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--spanish",
        default="",
        help="Spanish paragraphs, one per line (build_bench_corpus.sh); needed by every mode but --cluster-pairs",
    )
    ap.add_argument("--help-root", default="/usr/share/libreoffice/help")
    ap.add_argument("--docs", type=int, default=3000, help="Spanish documents (4 paragraphs each)")
    ap.add_argument("--foreign-per-lang", type=int, default=120)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--work", default="/tmp/bench_curate")
    ap.add_argument("--skip-direct", action="store_true")
    ap.add_argument("--skip-labelled", action="store_true", help="only the speed runs")
    ap.add_argument(
        "--downstream-tokens",
        type=int,
        default=0,
        help="also pretrain a tiny model on curated vs raw text with this many tokens each",
    )
    ap.add_argument(
        "--speed-rounds",
        type=int,
        default=1,
        help="alternate datatrove-direct and Aura runs this many times (a loaded machine is noisy)",
    )
    ap.add_argument(
        "--memory-sizes",
        default="",
        help="only the memory scaling: peak RSS of `aura data curate --workers N` on corpora of "
        "these sizes, e.g. 10000,30000,100000,300000 (short documents of Spanish sentences)",
    )
    ap.add_argument("--memory-docs-per-file", type=int, default=5000)
    ap.add_argument(
        "--memory-files",
        type=int,
        default=0,
        help="a fixed number of files (tasks) instead: the documents per task grow with the corpus",
    )
    ap.add_argument(
        "--memory-curate-args",
        default="",
        help="extra options for the memory runs, e.g. '--no-langid --no-quality' (dedup stages only)",
    )
    ap.add_argument(
        "--overhead-rounds",
        type=int,
        default=0,
        help="also time the first stage in-process with and without Aura's meters and reader",
    )
    ap.add_argument("--keep", action="store_true", help="keep the memory-scaling corpora and outputs")
    ap.add_argument(
        "--cluster-pairs",
        default="",
        help="only the memory of MinHash clustering fed these numbers of duplicate pairs, e.g. 250000,1000000",
    )
    args = ap.parse_args()
    work = Path(args.work)
    if args.cluster_pairs:
        for n in args.cluster_pairs.split(","):
            duplicate_pairs(int(n), work / "cluster")
            subprocess.run(
                [sys.executable, str(Path(__file__).resolve()), "--cluster-child", n, str(work / "cluster")],
                check=True,
                env={**_env(), "TQDM_DISABLE": "1"},
            )
            shutil.rmtree(work / "cluster", ignore_errors=True)
        return
    if not args.spanish:
        ap.error("--spanish is required")
    if args.memory_sizes:
        work.mkdir(parents=True, exist_ok=True)
        rows = memory_scaling(args, work)
        (work / "memory.json").write_text(json.dumps(rows, indent=2), encoding="utf-8")
        return
    shutil.rmtree(work, ignore_errors=True)
    labels = build(args, work)
    inp = work / "input"
    print(f"corpus: {labels['input_docs']} documents, {labels['input_bytes'] / 1e6:.1f} MB", flush=True)
    t_label, metrics = 0.0, {}
    if not args.skip_labelled:
        t_label = run_aura(inp, work / "labelled", args.workers, 100_000)["wall"]
        metrics = score(labels, work / "labelled")
        print(json.dumps(metrics, indent=2), flush=True)
        from figures import figure

        for key in ("lang_recall", "spanish_kept_by_langid", "near_recall", "near_false_removals", "pii_masked"):
            figure(f"curate.labelled.{key}", f"{metrics[key]:.4f}")
    tasks = len(list(inp.iterdir()))
    auras, directs = [], []
    for k in range(args.speed_rounds):
        if not args.skip_direct:
            shutil.rmtree(work / "direct", ignore_errors=True)
            directs.append(run_direct(inp, work / "direct", args.workers, tasks))
            print(json.dumps({"datatrove_direct": directs[-1]}), flush=True)
        shutil.rmtree(work / "aura", ignore_errors=True)
        auras.append(run_aura(inp, work / "aura", args.workers, 0))
        print(json.dumps({"aura": auras[-1]}), flush=True)
    t_aura = min(r["wall"] for r in auras)
    result = {
        "docs": labels["input_docs"],
        "mb": round(labels["input_bytes"] / 1e6, 2),
        "workers": args.workers,
        "aura_s": [round(r["wall"], 1) for r in auras],
        "aura_cpu_s": [round(r["cpu"], 1) for r in auras],
        "aura_docs_s_core": round(labels["input_docs"] / t_aura / args.workers, 1),
        "aura_mb_s_core": round(labels["input_bytes"] / 1e6 / t_aura / args.workers, 3),
        "peak_rss_mb": round(max(r["peak"] for r in auras) / 2**20),
        "labelled_run_s": round(t_label, 1),
    }
    if directs:
        result |= {
            "datatrove_direct_s": [round(r["wall"], 1) for r in directs],
            "datatrove_direct_cpu_s": [round(r["cpu"], 1) for r in directs],
            "aura_overhead_wall_best_of": round(t_aura / min(r["wall"] for r in directs) - 1, 3),
            "aura_overhead_cpu_best_of": round(min(r["cpu"] for r in auras) / min(r["cpu"] for r in directs) - 1, 3),
            "same_output_texts": texts_of(work / "aura") == texts_of(work / "direct" / "final"),
        }
    report = json.loads((work / "aura" / ".curate" / "report.json").read_text(encoding="utf-8"))
    result["stage_seconds"] = {s["stage"]: s["seconds"] for s in report["stages"]}
    print(json.dumps(result, indent=2), flush=True)
    if directs:
        from figures import figure

        # the script's own figures, never a hand-made sum: each side's fastest of the rounds (CPU seconds of
        # the whole process tree; wall seconds), Aura over datatrove, and every round as it ran
        figure("curate_vs_datatrove.overhead_cpu.fastest", f"{100 * result['aura_overhead_cpu_best_of']:+.1f} %")
        figure("curate_vs_datatrove.overhead_wall.fastest", f"{100 * result['aura_overhead_wall_best_of']:+.1f} %")
        figure(
            "curate_vs_datatrove.cpu_s.every_round",
            "datatrove "
            + " / ".join(f"{r['cpu']:.1f}" for r in directs)
            + " s; aura "
            + " / ".join(f"{r['cpu']:.1f}" for r in auras)
            + " s",
        )
        figure("curate_vs_datatrove.same_output", "yes" if result["same_output_texts"] else "no")
    if args.overhead_rounds:
        result["per_document"] = per_document_overhead(inp, work, tasks, args.overhead_rounds, labels["input_docs"])
        print(json.dumps(result["per_document"], indent=2), flush=True)
    down = downstream(work, work / "aura", args.downstream_tokens) if args.downstream_tokens else {}
    if down:
        print(json.dumps(down, indent=2), flush=True)
    (work / "result.json").write_text(
        json.dumps({"metrics": metrics, "speed": result, "downstream": down}, indent=2), encoding="utf-8"
    )


# reproduce: --spanish /tmp/bench_es.txt --docs 3000 --workers 2 --speed-rounds 2
# reproduce: --spanish /tmp/bench_es.txt --docs 3000 --workers 2 --speed-rounds 2 --overhead-rounds 2 --skip-labelled
# reproduce-needs: file:/tmp/bench_es.txt file:/usr/share/libreoffice/help module:datatrove
# reproduce-quick: --spanish aura/resources/corpus_es/enciclopedia.txt --help-root {tmp}/no-help --docs 12 \
#     --foreign-per-lang 0 --workers 1 --speed-rounds 1 --work {tmp}/w
# reproduce-quick-needs: module:datatrove

if __name__ == "__main__":
    main()
