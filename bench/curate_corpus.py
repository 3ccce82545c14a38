"""The planted corpora of ``bench/bench_curate.py``, built from real text: the labelled mixed crawl
(Spanish documents, other languages, copies and near-copies, spam, HTML pages in a WARC, PII) and the
unlabelled Spanish corpora of growing size for the memory runs."""

from __future__ import annotations

import gzip
import io
import json
import random
from pathlib import Path

LANGS = {"pt": "pt", "ca": "ca", "gl": "gl", "it": "it", "en": "en-GB"}
BOILER = [
    "Inicio | Noticias | Deportes | Contacto",
    "Utilizamos cookies propias y de terceros para mejorar nuestros servicios. Si continúa navegando, "
    "consideramos que acepta su uso. Más información en nuestra política de cookies.",
    "© 2024 Diario de Ejemplo S.L. Todos los derechos reservados. Aviso legal.",
]
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
    iban = " ".join(iban[i : i + 4] for i in range(0, len(iban), 4))
    phone = f"6{rng.randrange(10, 99)} {rng.randrange(100, 999)} {rng.randrange(100, 999)}"
    email = f"usuario{rng.randrange(10**5)}@correo{rng.randrange(100)}.es"
    ip = f"{rng.choice([81, 83, 88, 95])}.{rng.randrange(256)}.{rng.randrange(256)}.{rng.randrange(1, 255)}"
    text = (
        f"Puede escribir a {email} o llamar al {phone}. Datos del titular: DNI {dni}, NIE {nie}, "
        f"cuenta {iban}, conexión desde {ip}."
    )
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
    docs = ["\n".join(es[i : i + 4]) for i in range(0, need, 4)]
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
            rows.append("\n".join(paras[j : j + 4]))
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
        spam = (
            "\n".join([f"Oferta {k}: compra ahora al mejor precio, envío gratis"] * 25)
            if k % 2
            else " ".join(["casino apuestas bitcoin préstamos rápidos ganar dinero fácil"] * 20)
        )
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
    heldout = [p for p in es[need : need + 600]]
    (work / "heldout_es.txt").write_text("\n".join(heldout) + "\n", encoding="utf-8")
    labels["input_bytes"] = sum(len(r.encode()) for r in rows) + sum(len(h.encode()) for h in html)
    labels["input_docs"] = len(rows) + len(html)
    return labels


def page_html(i: int, doc: str) -> str:
    body = "".join(f"<p>{p}</p>" for p in doc.split("\n"))
    return (
        f"<html><head><meta charset='utf-8'><title>Noticia {i}</title></head><body><nav>{BOILER[0]}</nav>"
        f"<div class='cookies'>{BOILER[1]}</div><article><h1>Noticia {i}</h1>{body}</article>"
        f"<footer>{BOILER[2]}</footer></body></html>"
    )


def write_warc(path: Path, docs: list[str]) -> None:
    from warcio.statusandheaders import StatusAndHeaders
    from warcio.warcwriter import WARCWriter

    with open(path, "wb") as f:
        w = WARCWriter(f, gzip=True)
        for i, d in enumerate(docs):
            page = page_html(i, d)
            headers = StatusAndHeaders("200 OK", [("Content-Type", "text/html; charset=utf-8")], protocol="HTTP/1.1")
            w.write_record(
                w.create_warc_record(
                    f"https://diario.es/{i}",
                    "response",
                    payload=io.BytesIO(page.encode("utf-8")),
                    http_headers=headers,
                    warc_headers_dict={"WARC-Identified-Payload-Type": "text/html"},
                )
            )


def memory_corpus(spanish: str, docs: int, per_file: int, dest: Path, seed: int = 0) -> int:
    """``docs`` short documents of 8 sentences (two lines of 4) drawn at random from the Spanish text;
    two documents share a sentence rarely and 5-grams across it even more rarely, so almost none are
    duplicates. Written as ``per_file`` documents per JSONL.gz file (a crawl's files have a fixed size)."""
    import re

    sentences = [
        s
        for line in Path(spanish).read_text(encoding="utf-8").splitlines()
        for s in re.split(r"(?<=[.!?])\s+", line.strip())
        if len(s.split()) >= 6
    ]
    rng = random.Random(seed)
    dest.mkdir(parents=True)
    total = 0
    for start in range(0, docs, per_file):
        with gzip.open(dest / f"part{start // per_file:05d}.jsonl.gz", "wt", encoding="utf-8", compresslevel=1) as fh:
            for _ in range(min(per_file, docs - start)):
                text = " ".join(rng.choices(sentences, k=4)) + "\n" + " ".join(rng.choices(sentences, k=4))
                total += len(text.encode("utf-8"))
                fh.write(json.dumps({"text": text}, ensure_ascii=False) + "\n")
    return total
