"""``aura data curate``: a mixed crawl built here (a WARC written with warcio, HTML files, JSONL.gz with
other languages, planted copies, near-copies, spam and PII) goes through datatrove's real stages; each
labelled document must be kept or removed as labelled, the shards must be what ``aura data prepare``
reads, and the output must not depend on --workers, on an interruption or on the executor (Ray)."""

from __future__ import annotations

import gzip
import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import RESOURCES, ROOT, run_aura_here, shared_dir
from tests.evidence import importorskip

importorskip("datatrove", "datatrove")
importorskip("py3langid", "datatrove")

# Real text in the languages py3langid must tell from Spanish (written for these tests).
OTHER = {
    "pt": (
        "O ciclo da água descreve o percurso contínuo que a água realiza entre os oceanos, a atmosfera e a "
        "terra firme. Quando o sol aquece a superfície do mar, uma parte do líquido evapora-se e sobe em "
        "forma de vapor invisível. Ao subir, o ar arrefece e o vapor condensa-se à volta de pequenas "
        "partículas de poeira ou sal, formando as nuvens. Se as gotas crescerem o suficiente, caem como "
        "chuva, neve ou granizo. Parte dessa precipitação infiltra-se no solo e alimenta os aquíferos; "
        "outra parte corre pela superfície até chegar aos rios e lagos, e finalmente regressa ao mar. "
        "As plantas também participam através da transpiração, que liberta vapor pelas folhas."
    ),
    "ca": (
        "El cicle de l'aigua descriu el recorregut continu que fa l'aigua entre els oceans, l'atmosfera i "
        "la terra ferma. Quan el sol escalfa la superfície del mar, una part del líquid s'evapora i puja "
        "en forma de vapor invisible. En pujar, l'aire es refreda i el vapor es condensa al voltant de "
        "petites partícules de pols o sal, i així es formen els núvols. Si les gotes creixen prou, cauen "
        "com a pluja, neu o calamarsa. Una part d'aquesta precipitació es filtra al sòl i alimenta els "
        "aqüífers; una altra part corre per la superfície fins als rius i els llacs, i finalment torna al mar."
    ),
    "it": (
        "Il ciclo dell'acqua descrive il percorso continuo che l'acqua compie tra gli oceani, l'atmosfera e "
        "la terraferma. Quando il sole riscalda la superficie del mare, una parte del liquido evapora e "
        "sale sotto forma di vapore invisibile. Salendo, l'aria si raffredda e il vapore si condensa "
        "attorno a minuscole particelle di polvere o di sale, formando le nuvole. Se le gocce diventano "
        "abbastanza grandi, cadono come pioggia, neve o grandine. Una parte di queste precipitazioni "
        "penetra nel terreno e alimenta le falde; un'altra scorre in superficie fino ai fiumi e ai laghi."
    ),
    "en": (
        "The water cycle describes the continuous journey that water makes between the oceans, the "
        "atmosphere and dry land. When the sun warms the surface of the sea, part of the liquid "
        "evaporates and rises as invisible vapour. As it rises, the air cools and the vapour condenses "
        "around tiny particles of dust or salt, forming clouds. If the droplets grow large enough, they "
        "fall as rain, snow or hail. Part of that precipitation seeps into the ground and feeds the "
        "aquifers; another part runs over the surface until it reaches rivers and lakes."
    ),
}
COOKIE = "Utilizamos cookies propias y de terceros para mejorar tu experiencia. Consulta nuestra política de cookies."
PII = {
    "juan.perez@correo.es": "<EMAIL>",
    "612 345 678": "<TELEFONO>",
    "12345678Z": "<DNI>",
    "X1234567L": "<DNI>",
    "ES91 2100 0418 4502 0005 1332": "<IBAN>",
    "81.45.12.200": "<IP>",
}


def spanish_docs() -> list[str]:
    """Documents of two paragraphs from the embedded Spanish corpus (real prose, 150-300 words)."""
    paras = []
    for p in sorted((RESOURCES / "corpus_es").glob("*.txt")):
        paras += [x.strip() for x in p.read_text(encoding="utf-8").split("\n\n") if len(x.split()) > 40]
    return ["\n".join(paras[i : i + 2]) for i in range(0, len(paras) - 1, 2)]


def _html(title: str, body: str) -> str:
    paragraphs = "".join(f"<p>{p}</p>" for p in body.split("\n"))
    return (
        f"<!DOCTYPE html><html lang='es'><head><meta charset='utf-8'><title>{title}</title></head><body>"
        f"<nav><a href='/'>Inicio</a> | <a href='/n'>Noticias</a> | <a href='/c'>Contacto</a></nav>"
        f"<div id='cookies'>{COOKIE} <button>Aceptar</button></div>"
        f"<main><article><h1>{title}</h1>{paragraphs}</article></main>"
        f"<footer>© 2024 Periódico de Ejemplo. Todos los derechos reservados.</footer></body></html>"
    )


def _warc(path: Path, pages: list[tuple[str, str]], wet: list[str]) -> None:
    from warcio.statusandheaders import StatusAndHeaders
    from warcio.warcwriter import WARCWriter

    with open(path, "wb") as f:
        writer = WARCWriter(f, gzip=True)
        for i, (url, html) in enumerate(pages):
            headers = StatusAndHeaders("200 OK", [("Content-Type", "text/html; charset=utf-8")], protocol="HTTP/1.1")
            writer.write_record(
                writer.create_warc_record(
                    url,
                    "response",
                    payload=io.BytesIO(html.encode("utf-8")),
                    http_headers=headers,
                    warc_headers_dict={"WARC-Identified-Payload-Type": "text/html"},
                )
            )
        for i, text in enumerate(wet):
            writer.write_record(
                writer.create_warc_record(
                    f"https://ejemplo.es/wet/{i}",
                    "conversion",
                    payload=io.BytesIO(text.encode("utf-8")),
                    warc_headers_dict={"WARC-Identified-Payload-Type": "text/plain", "Content-Type": "text/plain"},
                )
            )


def build_crawl(root: Path) -> dict:
    """The mixed crawl and its labels: {"keep": [marker...], "drop": {label: [marker...]}, "pii": [...]}.

    A marker is a sentence fragment that identifies a document in the output."""
    es = spanish_docs()
    assert len(es) >= 40
    root.mkdir(parents=True)
    (root / "html").mkdir()
    labels: dict = {"keep": [], "drop": {"lang": [], "exact": [], "near": [], "spam": []}, "pii": list(PII)}

    def marker(doc: str) -> str:
        return doc.split("\n")[0][:60]

    # 1. WARC: 6 Spanish pages with site furniture, 2 foreign pages, 2 WET records (one Spanish, one English)
    pages = [(f"https://ejemplo.es/{i}", _html(f"Artículo {i}", es[i])) for i in range(6)]
    pages += [
        ("https://exemplo.pt/1", _html("Artigo", OTHER["pt"])),
        ("https://example.com/1", _html("Post", OTHER["en"])),
    ]
    _warc(root / "crawl.warc.gz", pages, [es[6], OTHER["en"] + " " + OTHER["en"]])
    labels["keep"] += [marker(es[i]) for i in range(7)]
    labels["drop"]["lang"] += [OTHER["pt"][:60], OTHER["en"][:60]]
    # 2. HTML folder: 3 Spanish pages, 1 Catalan, 1 Italian
    for i in range(7, 10):
        (root / "html" / f"p{i}.html").write_text(_html(f"Página {i}", es[i]), encoding="utf-8")
        labels["keep"].append(marker(es[i]))
    (root / "html" / "ca.html").write_text(_html("Article", OTHER["ca"]), encoding="utf-8")
    (root / "html" / "it.html").write_text(_html("Articolo", OTHER["it"]), encoding="utf-8")
    labels["drop"]["lang"] += [OTHER["ca"][:60], OTHER["it"][:60]]
    # 3. JSONL.gz: Spanish docs (one with a cookie line inside, one with PII), copies, near-copies, spam
    rows = []
    for i in range(10, 30):
        rows.append(es[i])
        labels["keep"].append(marker(es[i]))
    rows.append(es[30] + "\n" + COOKIE)
    labels["keep"].append(marker(es[30]))
    pii_doc = (
        es[31] + "\nPara más información escribe a juan.perez@correo.es o llama al 612 345 678. "
        "Mi DNI es 12345678Z y el de mi socio, X1234567L. Transferencias a ES91 2100 0418 4502 0005 1332. "
        "El servidor está en 81.45.12.200."
    )
    rows.append(pii_doc)
    labels["keep"].append(marker(es[31]))
    for i in (10, 11):  # exact copies, in another file (dedup works across inputs)
        labels["drop"]["exact"].append(es[i])
    for i in (12, 13, 14):  # near copies: 3 words of ~250 changed
        words = es[i].split(" ")
        for j in (20, 60, 110):
            words[j] = "palabra"
        labels["drop"]["near"].append(" ".join(words))
    spam = "\n".join(["Compra ahora barato oferta oferta oferta descuento"] * 30)
    keywords = " ".join(["casino bitcoin préstamos rápidos gratis ganar dinero"] * 20)
    labels["drop"]["spam"] += [spam[:40], keywords[:40]]
    with gzip.open(root / "docs.jsonl.gz", "wt", encoding="utf-8") as f:
        for text in rows + [spam, keywords]:
            f.write(json.dumps({"text": text}, ensure_ascii=False) + "\n")
    with open(root / "more.jsonl", "w", encoding="utf-8") as f:
        for text in labels["drop"]["exact"] + labels["drop"]["near"] + [OTHER["pt"] + "\n" + OTHER["pt"]]:
            f.write(json.dumps({"text": text}, ensure_ascii=False) + "\n")
    labels["near_originals"] = [marker(es[i]) for i in (12, 13, 14)]
    return labels


def read_shards(out: Path) -> list[dict]:
    docs = []
    for shard in sorted(out.glob("*.jsonl.gz")):
        with gzip.open(shard, "rt", encoding="utf-8") as f:
            docs += [json.loads(line) for line in f]
    return docs


def shard_bytes(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.glob("*.jsonl.gz"))}


def curate_args(crawl: Path, out: Path, *extra: str) -> list[str]:
    return ["data", "curate", str(crawl), "--output-dir", str(out), *extra]


@pytest.fixture(scope="module")
def curated(tmp_path_factory):
    """The crawl curated once with default settings (--workers 1, --sample 2)."""

    def build(d: Path):
        labels = build_crawl(d / "crawl")
        (d / "labels.json").write_text(json.dumps(labels), encoding="utf-8")
        r = run_aura_here(*curate_args(d / "crawl", d / "out", "--workers", "1", "--sample", "2"))
        assert r.returncode == 0, r.stdout + r.stderr

    root = shared_dir(tmp_path_factory, "curated", build)
    return root, json.loads((root / "labels.json").read_text(encoding="utf-8"))


def test_stages_keep_and_remove_as_labelled(curated):
    root, labels = curated
    docs = read_shards(root / "out")
    texts = [d["text"] for d in docs]
    joined = "\n".join(texts)
    for m in labels["keep"]:
        assert sum(m in t for t in texts) == 1, f"Spanish document missing or duplicated: {m!r}"
    for kind in ("lang", "spam"):
        for m in labels["drop"][kind]:
            assert m[:40] not in joined, f"{kind} document kept: {m[:40]!r}"
    assert len(texts) == len(labels["keep"])  # exact and near copies are gone, one of each kept
    # extraction removed the site furniture; the Spanish boilerplate filter the cookie line inside a doc
    assert "Todos los derechos reservados" not in joined and "política de cookies" not in joined
    assert "Inicio | Noticias" not in joined
    # PII masked with placeholders
    for raw, placeholder in PII.items():
        assert raw not in joined and placeholder in joined
    assert all(d["metadata"]["language"] == "es" for d in docs)


def test_report_and_samples(curated):
    root, labels = curated
    state = root / "out" / ".curate"
    report = json.loads((state / "report.json").read_text(encoding="utf-8"))
    stages = {s["stage"]: s for s in report["stages"]}
    assert list(stages) == [
        "read",
        "extract",
        "ftfy",
        "langid",
        "boilerplate",
        "gopher_repetition",
        "gopher_quality",
        "c4",
        "fineweb",
        "spanish",
        "exact_dedup",
        "minhash_dedup",
        "pii",
    ]
    assert stages["langid"]["removed"]["lang_other"] == 6  # pt, en, ca, it pages, the English WET, the pt JSONL
    assert stages["exact_dedup"]["removed"] == {"exact_duplicate": 2}
    assert stages["minhash_dedup"]["removed"] == {"near_duplicate": 3}
    assert stages["boilerplate"]["chars_out"] < stages["boilerplate"]["chars_in"]
    assert stages["pii"]["docs_out"] == len(labels["keep"])
    assert report["pii_masked"] == {"iban": 1, "email": 1, "dni": 2, "ip": 1, "phone": 1}
    for r in report["stages"]:
        assert r["docs_in"] - r["docs_out"] == sum(r["removed"].values()), r
    assert (state / "report.png").stat().st_size > 10_000
    samples = {p.stem: p.read_text(encoding="utf-8").splitlines() for p in (state / "removed").glob("*.jsonl")}
    assert len(samples["lang_other"]) == 2 and len(samples["exact_duplicate"]) == 2
    assert all(json.loads(x)["metadata"]["filter_reason"] == "lang_other" for x in samples["lang_other"])


def test_report_plot_is_cheap_and_spanish(curated, tmp_path):
    """report.png is drawn without importing matplotlib (its import alone cost more than half a CPU
    second at the end of every run), in a font with the Spanish letters of the stage names."""
    from PIL import Image

    root, _ = curated
    code = (
        "import json, sys; from pathlib import Path; from aura.data.curate import curate_report as rep; "
        f"rep.plot(json.loads(Path({str(root / 'out' / '.curate' / 'report.json')!r}).read_text()), "
        f"Path({str(tmp_path / 'es.png')!r})); print('matplotlib' in sys.modules)"
    )
    r = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env=dict(os.environ, AURA_LANG="es"),
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "False"
    with Image.open(tmp_path / "es.png") as img:
        assert img.format == "PNG" and img.width >= 800 and img.height >= 13 * 20
    from aura.data.curate.curate_report import _font

    assert Path(_font(13).path).name == "DejaVuSans.ttf"  # Pillow's own font has no á, í, ñ...


def test_prepare_reads_the_shards(curated, tiny_zoo, tmp_path):
    from aura.text.sources import expand_inputs

    root, labels = curated
    sources = expand_inputs([str(root / "out")])  # the report under .curate/ is not taken for data
    assert [Path(s.path).name for s in sources] == sorted(p.name for p in (root / "out").glob("*.jsonl.gz"))
    r = run_aura_here(
        "data",
        "prepare",
        str(root / "out"),
        "--tokenizer",
        str(tiny_zoo["tokenizer"]),
        "--output-dir",
        str(tmp_path / "prepared"),
        "--workers",
        "1",
        "--val-fraction",
        "0.1",
    )
    assert r.returncode == 0, r.stdout + r.stderr
    meta = json.loads((tmp_path / "prepared" / "meta.json").read_text(encoding="utf-8"))
    assert sum(s["documents"] for s in meta["splits"].values()) == len(labels["keep"])


def test_workers_2_same_shards_as_workers_1(curated, tmp_path):
    root, _ = curated
    r = run_aura_here(*curate_args(root / "crawl", tmp_path / "out", "--workers", "2", "--sample", "2"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert len(shard_bytes(root / "out")) >= 2
    assert shard_bytes(tmp_path / "out") == shard_bytes(root / "out")


def test_resume_after_kill_is_byte_identical(curated, tmp_path):
    root, _ = curated
    out = tmp_path / "out"
    env = dict(os.environ, AURA_LANG="en", AURA_PLAIN="1")
    cmd = [sys.executable, "-m", "aura", *curate_args(root / "crawl", out, "--workers", "1", "--sample", "2")]
    proc = subprocess.Popen(
        cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    first = out / ".curate" / "work" / "logs" / "filter" / "completions" / "00000"
    deadline = time.time() + 120
    while not first.exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)  # the command and its datatrove helpers
    proc.wait()
    assert first.exists()
    assert not shard_bytes(out), "an interrupted run must not leave shards that look complete"
    r = run_aura_here(*curate_args(root / "crawl", out, "--workers", "1", "--sample", "2"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Resuming" in r.stdout + r.stderr
    assert shard_bytes(out) == shard_bytes(root / "out")


def test_damaged_inputs_are_named(tmp_path):
    crawl = tmp_path / "crawl"
    labels = build_crawl(crawl)
    assert labels
    warc = (crawl / "crawl.warc.gz").read_bytes()
    (crawl / "crawl.warc.gz").write_bytes(warc[: len(warc) // 2])  # cut inside a record: warcio alone is silent
    r = run_aura_here(*curate_args(crawl / "crawl.warc.gz", tmp_path / "o1", "--workers", "2"))
    assert r.returncode == 2
    assert "crawl.warc.gz, record " in r.stderr and "cut short" in r.stderr and "Traceback" not in r.stderr
    (crawl / "crawl.warc.gz").write_bytes(warc[: len(warc) // 2] + b"\x00garbage" * 50)
    r = run_aura_here(*curate_args(crawl / "crawl.warc.gz", tmp_path / "o3"))
    assert r.returncode == 2 and "crawl.warc.gz, record " in r.stderr
    gz = (crawl / "docs.jsonl.gz").read_bytes()
    (crawl / "docs.jsonl.gz").write_bytes(gz[: len(gz) // 2])
    r = run_aura_here(*curate_args(crawl / "docs.jsonl.gz", tmp_path / "o2"))
    assert r.returncode == 2
    assert "docs.jsonl.gz" in r.stderr and ("damaged" in r.stderr or "truncated" in r.stderr)


def test_refusals(tmp_path):
    (tmp_path / "in.jsonl").write_text(json.dumps({"text": "hola"}) + "\n", encoding="utf-8")
    r = run_aura_here("data", "curate", str(tmp_path / "in.jsonl"), "--languages", "es,xx")
    assert r.returncode == 2 and "'xx'" in r.stderr
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("mine", encoding="utf-8")
    r = run_aura_here(*curate_args(tmp_path / "in.jsonl", tmp_path / "busy"))
    assert r.returncode == 2 and "not from 'aura data curate'" in r.stderr
    r = run_aura_here(*curate_args(tmp_path / "in.jsonl", tmp_path / "o", "--no-minhash", "--no-quality"))
    assert r.returncode == 0, r.stderr
    r = run_aura_here(*curate_args(tmp_path / "in.jsonl", tmp_path / "o", "--no-quality"))
    assert r.returncode == 2 and "--overwrite" in r.stderr


@pytest.mark.slow
def test_ray_local_cluster_same_shards(curated, tmp_path):
    """datatrove's Ray executor on a local Ray cluster (2 CPUs) writes the shards a local run writes.
    Fewer tasks and bands than the defaults: every Ray task costs seconds of scheduling here."""
    ray = importorskip("ray", "ray")
    root, _ = curated
    small = ("--tasks", "2", "--minhash-buckets", "4", "--sample", "2")
    r = run_aura_here(*curate_args(root / "crawl", tmp_path / "local", *small))
    assert r.returncode == 0, r.stdout + r.stderr
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        r = run_aura_here(*curate_args(root / "crawl", tmp_path / "ray", "--executor", "ray", "--workers", "2", *small))
    finally:
        ray.shutdown()
    assert r.returncode == 0, r.stdout + r.stderr
    assert len(shard_bytes(tmp_path / "ray")) == 2
    assert shard_bytes(tmp_path / "ray") == shard_bytes(tmp_path / "local")


@pytest.mark.slow
def test_two_boxes_by_node_rank_same_shards(curated, tmp_path):
    """NNODES=2 with NODE_RANK 0 and 1 (as `aura launch` sets them) on one shared directory: each box
    runs its share of every stage, node 0 publishes; the shards equal a one-box run's."""
    root, _ = curated
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "aura", *curate_args(root / "crawl", out, "--sample", "2")]
    env = dict(os.environ, AURA_LANG="en", AURA_PLAIN="1", NNODES="2")
    other = subprocess.Popen(
        cmd, cwd=ROOT, env={**env, "NODE_RANK": "1"}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    main = subprocess.run(cmd, cwd=ROOT, env={**env, "NODE_RANK": "0"}, capture_output=True, text=True, timeout=600)
    assert other.wait(timeout=600) == 0 and main.returncode == 0, main.stdout + main.stderr
    assert "Node 1 of 2" in other.stdout.read()
    assert shard_bytes(out) == shard_bytes(root / "out")
