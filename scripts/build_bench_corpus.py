#!/usr/bin/env python3
"""Build a plain-text Spanish corpus for the benchmarks from documentation in Debian packages.

Usage: python3 scripts/build_bench_corpus.py OUT.txt   (scripts/build_bench_corpus.sh installs the packages)

Sources (all Spanish translations shipped by Debian): manual pages (manpages-es), fortunes (fortunes-es),
the Debian Reference and New Maintainers' Guide, and the help of GIMP, LibreOffice and LilyPond (about 7.5 MB). Output:
one
paragraph per line, exact duplicates removed, only paragraphs that read as Spanish prose (enough common
Spanish words, few English ones, mostly letters). The text has mixed licences: use it to measure, never
ship it inside the package.
"""

from __future__ import annotations

import glob
import gzip
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

SPANISH = frozenset(
    "de la que el en y a los se del las un por con no una su para es al lo como más pero sus le ya o "
    "este porque esta entre cuando muy sin sobre también me hasta hay donde desde todo nos todos uno "
    "les ni otros ese eso ellos esto antes algunos unos otro otras otra tanto esa estos mucho nada "
    "muchos puede pueden si son está están ser será debe cada usted".split()
)
ENGLISH = frozenset(
    "the of and to in is you that it was for on are as with they at be this have from or by but not "
    "what all were we when your can there an which do how their if will".split()
)
WORD = re.compile(r"[^\W\d_]+")


def spanish_prose(text: str) -> bool:
    words = [w.lower() for w in WORD.findall(text)]
    if len(text) < 40 or len(words) < 6:
        return False
    if sum(map(len, words)) < 0.6 * len(text):  # tables, code, option lists
        return False
    es = sum(w in SPANISH for w in words)
    en = sum(w in ENGLISH for w in words)
    return es >= 3 and es > 3 * en


def normalise(text: str) -> str:
    return re.sub(r"\s+", " ", text.replace("\u00ad", "")).strip()


class _Paragraphs(HTMLParser):
    """Text of <p>, <li> and <dd> elements (navigation, code and headings are skipped)."""

    BLOCKS = {"p", "li", "dd"}
    SKIP = {"script", "style", "pre", "code", "nav"}

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.out: list[str] = []
        self.depth = 0
        self.skip = 0
        self.buf: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag in self.SKIP:
            self.skip += 1
        elif tag in self.BLOCKS:
            self._flush()
            self.depth += 1

    def handle_endtag(self, tag):
        if tag in self.SKIP:
            self.skip = max(0, self.skip - 1)
        elif tag in self.BLOCKS:
            self._flush()
            self.depth = max(0, self.depth - 1)

    def handle_data(self, data):
        if self.depth and not self.skip:
            self.buf.append(data)

    def _flush(self):
        if self.buf:
            self.out.append(normalise("".join(self.buf)))
            self.buf = []


def html_paragraphs(pattern: str):
    for path in sorted(glob.glob(pattern, recursive=True)):
        parser = _Paragraphs()
        parser.feed(Path(path).read_text(encoding="utf-8", errors="replace"))
        parser.close()
        yield from parser.out


def man_paragraphs(pattern: str = "/usr/share/man/es/man*/*"):
    """Paragraphs of the manual pages matching ``pattern``, rendered with groff (50 pages per shell: groff's
    start-up dominates)."""
    pages = [p for p in sorted(glob.glob(pattern)) if "'" not in p]
    for i in range(0, len(pages), 50):
        batch = " ".join(f"'{p}'" for p in pages[i : i + 50])
        rendered = subprocess.run(
            f'for f in {batch}; do zcat -f "$f" | groff -k -Tutf8 -man -rLL=10000n -P-cbou 2>/dev/null | '
            "col -bx; echo; done",
            shell=True,
            capture_output=True,
            text=True,
            errors="replace",
        ).stdout
        block: list[str] = []
        for line in rendered.splitlines() + [""]:
            if line.strip():
                block.append(line.strip())
            elif block:
                yield normalise(" ".join(block))
                block = []


def fortunes():
    for path in sorted(glob.glob("/usr/share/games/fortunes/es/*.u8")):
        for entry in Path(path).read_text(encoding="utf-8", errors="replace").split("\n%\n"):
            yield normalise(entry)


def plain_text_gz(pattern: str):
    for path in sorted(glob.glob(pattern)):
        with gzip.open(path, "rt", encoding="utf-8", errors="replace") as f:
            for block in re.split(r"\n\s*\n", f.read()):
                yield normalise(block)


SOURCES = {
    "manpages-es": man_paragraphs,
    "fortunes-es": fortunes,
    "maint-guide-es": lambda: plain_text_gz("/usr/share/doc/maint-guide-es/*.txt.gz"),
    "debian-reference-es": lambda: html_paragraphs("/usr/share/doc/debian-reference-es/**/*.es.html"),
    "gimp-help-es": lambda: html_paragraphs("/usr/share/gimp/2.0/help/es/**/*.html"),
    "lilypond-doc-html-es": lambda: html_paragraphs("/usr/share/doc/lilypond/html/**/*big-page.es.html"),
    "libreoffice-help-es": lambda: html_paragraphs("/usr/share/libreoffice/help/es/**/*.html"),
}


def main(out: str) -> None:
    seen: set[str] = set()
    total = 0
    with open(out, "w", encoding="utf-8") as f:
        for name, source in SOURCES.items():
            kept = 0
            for para in source():
                if para in seen or not spanish_prose(para):
                    continue
                seen.add(para)
                f.write(para + "\n")
                kept += len(para.encode("utf-8")) + 1
            total += kept
            print(f"{name}: {kept / 1e6:.1f} MB", file=sys.stderr)
    print(f"{out}: {total / 1e6:.1f} MB, {len(seen)} paragraphs", file=sys.stderr)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
