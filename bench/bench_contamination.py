"""How fast the contamination check scans training text, against datatrove's decontamination method on the
same text and index in the same run.

Aura (``aura.data.contamination``): ``words`` (NFC, lowercase, punctuation and symbols to spaces through a
cached ``str.translate`` table) and ``EvalIndex.hits`` (an n-gram is joined only where its first two words
start an indexed one). The peer is the inner loop of datatrove's ``NGramsDecontFilter``, as it runs per
document: ``simplify_text`` (accents kept, numbers kept: the same settings), split, every 13-gram joined,
hashed with datatrove's xxhash ``create_hash_func`` and looked up in the set of the items' hashes (its word
tokenizer for Spanish needs spaCy; a whitespace split after ``simplify_text`` is what it would see). Both
scan the shipped corpus repeated ``--copies`` times against the whole aura-es suite; the best of
``--repeats`` runs each, alternating. The machine this ran on was shared (load from other jobs): compare
the ratio, not the absolute rates.

    python bench/bench_contamination.py --copies 20 --repeats 3
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from figures import figure, ratio  # noqa: E402  (bench/ on sys.path above)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--copies", type=int, default=20, help="the corpus repeated this many times")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()

    from datatrove.utils.hashing import HashConfig, create_hash_func
    from datatrove.utils.text import TextNormConfig, ngrams, simplify_text

    from aura.data.contamination import N_GRAMS, EvalIndex, eval_items, words

    items = eval_items("aura-es")
    index = EvalIndex(items)
    docs = [p.read_text(encoding="utf-8") for p in sorted((ROOT / "aura/resources/corpus_es").glob("*.txt"))]
    docs = [d for d in docs * args.copies]
    n_words = sum(len(words(d)) for d in docs)
    n_bytes = sum(len(d.encode("utf-8")) for d in docs)

    norm = TextNormConfig(norm_unicode_diacritics=False, norm_numbers=False)
    hash_func = create_hash_func(HashConfig(precision=64, hash_fc="xxhash"))
    hashes = set()
    for item in items:
        w = simplify_text(item.text, norm).split()
        hashes.update(hash_func(" ".join(g)) for g in ngrams(w, N_GRAMS))

    def aura() -> int:
        return sum(1 for d in docs for _ in index.hits(d))

    def datatrove() -> int:
        found = 0
        for d in docs:
            w = simplify_text(d, norm).split()
            found += sum(hash_func(" ".join(g)) in hashes for g in ngrams(w, N_GRAMS))
        return found

    best = {"aura": float("inf"), "datatrove": float("inf")}
    for _ in range(args.repeats):
        for name, fn in (("aura", aura), ("datatrove", datatrove)):
            t0 = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - t0)
    print(
        f"{len(docs)} documents, {n_words:,} words, {n_bytes / 1e6:.1f} MB; {len(items)} items, "
        f"{len(index.grams):,} n-grams; best of {args.repeats}: aura {best['aura']:.2f} s, "
        f"datatrove's method {best['datatrove']:.2f} s"
    )
    figure("contamination.words_per_s", f"{n_words / best['aura']:,.0f}")
    figure("contamination.vs_datatrove_method", ratio(best["datatrove"] / best["aura"]))


if __name__ == "__main__":
    main()

# reproduce: --copies 20 --repeats 3
# reproduce-needs: module:datatrove
# reproduce-quick: --copies 1 --repeats 1
# reproduce-quick-needs: module:datatrove
