#!/usr/bin/env python3
"""Build a plain-text English corpus for the adaptation benchmark (bench/bench_adapt.py) from Debian.

Usage: python3 scripts/build_bench_corpus_en.py OUT.txt [--max-mb 4]
(scripts/build_bench_corpus_en.sh installs the packages: fortunes, manpages, groff-base, bsdextrautils)

Sources: English fortunes (/usr/share/games/fortunes) and English manual pages (/usr/share/man/man1-8),
rendered with groff. Output: one paragraph per line, exact duplicates removed, only paragraphs that read
as English prose. Mixed licences: use it to measure, never ship it inside the package.
"""

from __future__ import annotations

import glob
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from build_bench_corpus import ENGLISH, SPANISH, WORD, man_paragraphs, normalise  # noqa: E402


def english_prose(text: str) -> bool:
    words = [w.lower() for w in WORD.findall(text)]
    if len(text) < 40 or len(words) < 6 or sum(map(len, words)) < 0.6 * len(text):
        return False
    en = sum(w in ENGLISH for w in words)
    es = sum(w in SPANISH and w not in ENGLISH for w in words)
    return en >= 3 and en > 3 * es


def fortunes():
    for path in sorted(glob.glob("/usr/share/games/fortunes/*")):
        p = Path(path)
        if p.is_file() and not p.suffix and not p.is_symlink():
            for entry in p.read_text(encoding="utf-8", errors="replace").split("\n%\n"):
                yield normalise(entry)


def main() -> None:
    out = Path(sys.argv[1])
    max_bytes = int(float(sys.argv[sys.argv.index("--max-mb") + 1]) * 2**20) if "--max-mb" in sys.argv else 4 * 2**20
    seen, size = set(), 0
    with out.open("w", encoding="utf-8") as f:
        for source in (fortunes(), man_paragraphs("/usr/share/man/man[1-8]/*")):
            for para in source:
                if para in seen or not english_prose(para):
                    continue
                seen.add(para)
                f.write(para + "\n")
                size += len(para.encode("utf-8")) + 1
                if size >= max_bytes:
                    break
            if size >= max_bytes:
                break
    print(f"{out}: {len(seen)} paragraphs, {size / 2**20:.1f} MB")


if __name__ == "__main__":
    main()
