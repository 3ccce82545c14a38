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
same tasks and workers, without Aura's meters, reader and report), and peak memory (RSS of the process
tree). The machine is shared: only the ratios inside one run mean anything.
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import random
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

LANGS = {"pt": "pt", "ca": "ca", "gl": "gl", "it": "it", "en": "en-GB"}
BOILER = ["Inicio | Noticias | Deportes | Contacto",
          "Utilizamos cookies propias y de terceros para mejorar nuestros servicios. Si continúa navegando, "
          "consideramos que acepta su uso. Más información en nuestra política de cookies.",
          "© 2024 Diario de Ejemplo S.L. Todos los derechos reservados. Aviso legal."]
DNI_LETTERS = "TRWAGMYFPDXBNJZSQVHLCKE"


def foreign_paragraphs(help_root: Path) -> dict[str, list[str]]:
    from build_bench_corpus import html_paragraphs

    english = [p for p in html_paragraphs(str(help_root / "en-GB" / "**" / "*.html")) if len(p) > 80]
    out = {"en": sorted(set(english))}
    for lang, loc in LANGS.items():
        if lang != "en":
            paras = set(p for p in html_paragraphs(str(help_root / loc / "**" / "*.html")) if len(p) > 80)
            out[lang] = sorted(paras - set(english))
    return out


def pii_sentence(rng: random.Random) -> tuple[str, list[str]]:
    n = rng.randrange(10**7, 10**8)
    dni = f"{n}{DNI_LETTERS[n % 23]}"
    k = rng.randrange(10**6, 10**7)
    nie = f"Y{k}{DNI_LETTERS[int('1' + str(k)) % 23]}"
    bank = f"{rng.randrange(10**19, 10**20)}"
    check = 98 - int("".join(str(int(c, 36)) for c in bank + "ES00")) % 97
    iban = f"ES{check:02d}{bank}"
    iban = " ".join(iban[i:i + 4] for i in range(0, len(iban), 4))
    phone = f"6{rng.randrange(10, 99)} {rng.randrange(100, 999)} {rng.randrange(100, 999)}"
    email = f"usuario{rng.randrange(10**5)}@correo{rng.randrange(100)}.es"
    ip = f"{rng.choice([81, 83, 88, 95])}.{rng.randrange(256)}.{rng.randrange(256)}.{rng.randrange(1, 255)}"
    text = (f"Puede escribir a {email} o llamar al {phone}. Datos del titular: DNI {dni}, NIE {nie}, "
            f"cuenta {iban}, conexión desde {ip}.")
    return text, [email, phone, dni, nie, iban, ip]


def near_copy(doc: str, rng: random.Random) -> str:
    words = doc.split(" ")
    k = max(1, int(len(words) * rng.uniform(0.01, 0.05)))
    for _ in range(k):  # never the first 15 words: they identify the document
        i = rng.randrange(15, len(words))
        op = rng.random()
        if op < 0.5:
            words[i] = rng.choice(["casa", "tiempo", "mundo", "forma", "parte", "vida"])
        elif op < 0.75 and len(words) > 30:
            del words[i]
        else:
            words.insert(i, rng.choice(["muy", "también", "siempre", "ahora"]))
    return " ".join(words)


def build(args, work: Path) -> dict:
    rng = random.Random(0)
    es = [p.strip() for p in Path(args.spanish).read_text(encoding="utf-8").splitlines() if len(p.split()) >= 25]
    rng.shuffle(es)
    foreign = foreign_paragraphs(Path(args.help_root))
    need = args.docs * 4
    assert len(es) >= need, f"{len(es)} Spanish paragraphs, {need} needed: lower --docs"
    docs = ["\n".join(es[i:i + 4]) for i in range(0, need, 4)]
    labels = {"es": [], "foreign": [], "exact": [], "near": [], "spam": [], "pii": [], "html": []}
    rows: list[str] = []
    html: list[str] = []
    for i, d in enumerate(docs):
        marker = d[:80]
        labels["es"].append(marker)
        if i % 10 == 3:  # 10 %: PII
            s, found = pii_sentence(rng)
            d = d + "\n" + s
            labels["pii"].append(found)
        if i % 10 == 5:  # 10 %: served as HTML in a WARC
            labels["html"].append(marker)
            html.append(d)
        else:
            rows.append(d)
    for lang, paras in foreign.items():
        rng.shuffle(paras)
        for j in range(0, min(len(paras) - 4, 4 * args.foreign_per_lang), 4):
            rows.append("\n".join(paras[j:j + 4]))
            labels["foreign"].append([lang, paras[j][:80]])
    for i in rng.sample(range(len(docs)), args.docs // 20):
        if i % 10 in (3, 5):
            continue
        if rng.random() < 0.5:
            rows.append(docs[i])
            labels["exact"].append(docs[i][:80])
        else:
            rows.append(near_copy(docs[i], rng))
            labels["near"].append(docs[i][:80])
    for k in range(args.docs // 40):
        spam = ("\n".join([f"Oferta {k}: compra ahora al mejor precio, envío gratis"] * 25) if k % 2 else
                " ".join(["casino apuestas bitcoin préstamos rápidos ganar dinero fácil"] * 20))
        rows.append(spam)
        labels["spam"].append(spam[:60])
    rng.shuffle(rows)
    inp = work / "input"
    inp.mkdir(parents=True)
    nfiles = 6
    for f in range(nfiles):
        with gzip.open(inp / f"part{f}.jsonl.gz", "wt", encoding="utf-8") as fh:
            for text in rows[f::nfiles]:
                fh.write(json.dumps({"text": text}, ensure_ascii=False) + "\n")
    write_warc(inp / "pages.warc.gz", html)
    with open(work / "raw.jsonl", "w", encoding="utf-8") as fh:  # the uncurated corpus: HTML as served
        for text in rows + [page_html(i, d) for i, d in enumerate(html)]:
            fh.write(json.dumps({"text": text}, ensure_ascii=False) + "\n")
    heldout = [p for p in es[need:need + 600]]
    (work / "heldout_es.txt").write_text("\n".join(heldout) + "\n", encoding="utf-8")
    labels["input_bytes"] = sum(len(r.encode()) for r in rows) + sum(len(h.encode()) for h in html)
    labels["input_docs"] = len(rows) + len(html)
    return labels


def page_html(i: int, doc: str) -> str:
    body = "".join(f"<p>{p}</p>" for p in doc.split("\n"))
    return (f"<html><head><meta charset='utf-8'><title>Noticia {i}</title></head><body><nav>{BOILER[0]}</nav>"
            f"<div class='cookies'>{BOILER[1]}</div><article><h1>Noticia {i}</h1>{body}</article>"
            f"<footer>{BOILER[2]}</footer></body></html>")


def write_warc(path: Path, docs: list[str]) -> None:
    from warcio.statusandheaders import StatusAndHeaders
    from warcio.warcwriter import WARCWriter

    with open(path, "wb") as f:
        w = WARCWriter(f, gzip=True)
        for i, d in enumerate(docs):
            page = page_html(i, d)
            headers = StatusAndHeaders("200 OK", [("Content-Type", "text/html; charset=utf-8")], protocol="HTTP/1.1")
            w.write_record(w.create_warc_record(f"https://diario.es/{i}", "response",
                                                payload=io.BytesIO(page.encode("utf-8")), http_headers=headers,
                                                warc_headers_dict={"WARC-Identified-Payload-Type": "text/html"}))


def peak_rss(proc: subprocess.Popen, box: dict) -> None:
    import psutil

    p = psutil.Process(proc.pid)
    while proc.poll() is None:
        try:
            total = sum(c.memory_info().rss for c in [p, *p.children(recursive=True)])
            box["peak"] = max(box.get("peak", 0), total)
        except psutil.Error:
            pass
        time.sleep(0.1)


def run_aura(inp: Path, out: Path, workers: int, sample: int) -> tuple[float, int]:
    cmd = [sys.executable, "-m", "aura", "data", "curate", str(inp), "--output-dir", str(out),
           "--workers", str(workers), "--sample", str(sample)]
    t0 = time.time()
    proc = subprocess.Popen(cmd, cwd=ROOT, env={"AURA_LANG": "en", "AURA_PLAIN": "1", **_env()})
    box: dict = {}
    th = threading.Thread(target=peak_rss, args=(proc, box))
    th.start()
    proc.wait()
    th.join()
    assert proc.returncode == 0
    return time.time() - t0, box.get("peak", 0)


def _env() -> dict:
    import os

    return {k: v for k, v in os.environ.items() if k not in ("AURA_LANG",)}


def run_direct(inp: Path, work: Path, workers: int, tasks: int) -> float:
    """The same stages and step objects through datatrove's executor, without Aura's additions."""
    from datatrove.executor import LocalPipelineExecutor
    from datatrove.pipeline.readers import JsonlReader, WarcReader

    from aura.data.curate.pipeline import Options, build_stages
    from aura.data.curate.readers import CurateReader, find_inputs
    from aura.data.curate.steps import HtmlExtractor, Meter
    from aura.text.readers import ReaderOptions

    files = find_inputs([str(inp)])
    stages = build_stages(Options(work=work, files=files, root=str(inp), reader=ReaderOptions(), tasks=tasks))
    t0 = time.time()
    for stage in stages:
        steps = []
        for step in stage.pipeline:
            if isinstance(step, Meter):
                continue
            if isinstance(step, CurateReader):  # datatrove's own readers, html marked for the extractor
                steps += [WarcReader(str(inp), glob_pattern="*.warc.gz", default_metadata={"format": "html"}),
                          JsonlReader(str(inp), glob_pattern="*.jsonl.gz")]
                continue
            if hasattr(step, "exclusion_writer"):
                step.exclusion_writer = None
            steps.append(step)
        assert any(isinstance(s, HtmlExtractor) for s in steps) or stage.name != "filter"
        LocalPipelineExecutor(steps, tasks=stage.tasks, workers=min(workers, stage.tasks),
                              logging_dir=str(work / "logs" / stage.name)).run()
    return time.time() - t0


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
    near_false = sum(m in by_reason.get("near_duplicate", {}) or m in by_reason.get("exact_duplicate", {})
                     for m in unique_es)
    joined = "\n".join(texts)
    pii_total = pii_masked = 0
    for found in labels["pii"]:
        for s in found:
            pii_total += 1
            pii_masked += s not in joined
    per_lang = Counter(lang for lang, m in foreign if m in lang_removed)
    n_lang = Counter(lang for lang, _ in foreign)
    return {
        "lang_recall": sum(m in lang_removed for _, m in foreign) / len(foreign),
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
    subprocess.run([sys.executable, "-m", "aura", *args], cwd=ROOT, check=True,
                   env={**_env(), "AURA_LANG": "en", "AURA_PLAIN": "1"})


def downstream(work: Path, curated: Path, tokens: int) -> dict:
    """A tiny Llama pretrained on the curated corpus and on the raw one, same tokens, same tokenizer
    (trained on held-out-free Spanish: the curated shards); bits per byte on held-out clean Spanish."""
    d = work / "downstream"
    shutil.rmtree(d, ignore_errors=True)
    aura("tokenizer", "train", str(curated), "--vocab-size", "4096", "--output-dir", str(d / "tok"))
    out = {}
    for name, src in (("curated", str(curated)), ("raw", str(work / "raw.jsonl"))):
        aura("data", "prepare", src, "--tokenizer", str(d / "tok"), "--output-dir", str(d / f"prep-{name}"),
             "--workers", "1")
        aura("pretrain", "--data", str(d / f"prep-{name}"), "--preset", "tiny", "--max-tokens", str(tokens),
             "--seq-length", "256", "--batch-size", "8", "--precision", "fp32", "--eval-interval", "0",
             "--output-dir", str(d / f"run-{name}"))
        aura("eval", "--model", str(d / f"run-{name}" / "final"), "--data", str(work / "heldout_es.txt"),
             "--seq-len", "256", "--output", str(d / f"eval-{name}.json"))
        res = json.loads((d / f"eval-{name}.json").read_text(encoding="utf-8"))
        rows = res["results"] if isinstance(res, dict) and "results" in res else res
        out[name] = rows[0]["bits_per_byte"] if isinstance(rows, list) else rows["bits_per_byte"]
    out["gap_raw_minus_curated"] = out["raw"] - out["curated"]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--spanish", required=True, help="Spanish paragraphs, one per line (build_bench_corpus.sh)")
    ap.add_argument("--help-root", default="/usr/share/libreoffice/help")
    ap.add_argument("--docs", type=int, default=3000, help="Spanish documents (4 paragraphs each)")
    ap.add_argument("--foreign-per-lang", type=int, default=120)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--work", default="/tmp/bench_curate")
    ap.add_argument("--skip-direct", action="store_true")
    ap.add_argument("--skip-labelled", action="store_true", help="only the speed runs")
    ap.add_argument("--downstream-tokens", type=int, default=0,
                    help="also pretrain a tiny model on curated vs raw text with this many tokens each")
    ap.add_argument("--speed-rounds", type=int, default=1,
                    help="alternate datatrove-direct and Aura runs this many times (a loaded machine is noisy)")
    args = ap.parse_args()
    work = Path(args.work)
    shutil.rmtree(work, ignore_errors=True)
    labels = build(args, work)
    inp = work / "input"
    print(f"corpus: {labels['input_docs']} documents, {labels['input_bytes'] / 1e6:.1f} MB", flush=True)
    t_label, metrics = 0.0, {}
    if not args.skip_labelled:
        t_label, _ = run_aura(inp, work / "labelled", args.workers, 100_000)
        metrics = score(labels, work / "labelled")
        print(json.dumps(metrics, indent=2), flush=True)
    tasks = len(list(inp.iterdir()))
    t_auras, t_directs, peak = [], [], 0
    for k in range(args.speed_rounds):
        if not args.skip_direct:
            shutil.rmtree(work / "direct", ignore_errors=True)
            t_directs.append(run_direct(inp, work / "direct", args.workers, tasks))
        shutil.rmtree(work / "aura", ignore_errors=True)
        t, p = run_aura(inp, work / "aura", args.workers, 0)
        t_auras.append(t)
        peak = max(peak, p)
    t_aura = min(t_auras)
    result = {"docs": labels["input_docs"], "mb": round(labels["input_bytes"] / 1e6, 2), "workers": args.workers,
              "aura_s": [round(t, 1) for t in t_auras],
              "aura_docs_s_core": round(labels["input_docs"] / t_aura / args.workers, 1),
              "aura_mb_s_core": round(labels["input_bytes"] / 1e6 / t_aura / args.workers, 3),
              "peak_rss_mb": round(peak / 2**20), "labelled_run_s": round(t_label, 1)}
    if t_directs:
        result |= {"datatrove_direct_s": [round(t, 1) for t in t_directs],
                   "aura_overhead_best_of": round(min(t_auras) / min(t_directs) - 1, 3)}
    report = json.loads((work / "aura" / ".curate" / "report.json").read_text(encoding="utf-8"))
    result["stage_seconds"] = {s["stage"]: s["seconds"] for s in report["stages"]}
    print(json.dumps(result, indent=2), flush=True)
    down = downstream(work, work / "aura", args.downstream_tokens) if args.downstream_tokens else {}
    if down:
        print(json.dumps(down, indent=2), flush=True)
    (work / "result.json").write_text(json.dumps({"metrics": metrics, "speed": result, "downstream": down},
                                                 indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()
