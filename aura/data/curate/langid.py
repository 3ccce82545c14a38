"""Offline language identification with py3langid (its model ships inside the package: no download).

Chosen by measurement (``docs/data.md``): on paragraphs of Debian's Spanish, Portuguese, Catalan,
Galician, Italian and English documentation, py3langid labelled no Portuguese, Catalan, Galician,
Italian or English paragraph as Spanish, where fastText's lid.176 took 18 % of the Galician ones for
Spanish and lingua (which has no Galician) 54 %. It also covers ``ca``, ``gl`` and ``eu``.
"""

from __future__ import annotations

from datatrove.data import Document
from datatrove.pipeline.filters.base_filter import BaseFilter

_IDENTIFIER = None  # one per process, loaded on first use (about 0.3 s)

MAX_CHARS = 20_000  # the label of a long document is decided by its first 20k characters


def identifier():
    global _IDENTIFIER
    if _IDENTIFIER is None:
        from py3langid.langid import MODEL_FILE, LanguageIdentifier

        _IDENTIFIER = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
    return _IDENTIFIER


def detect(text: str) -> tuple[str, float]:
    """(ISO 639-1 code, probability) of ``text``."""
    lang, prob = identifier().classify(text[:MAX_CHARS].replace("\n", " "))
    return lang, float(prob)


# The labels of py3langid's model (``identifier().nb_classes``; tests/test_curate_inputs.py checks
# they match), so that checking --languages does not load the 70 MB model into the main process.
LANGUAGES = frozenset(
    "af am ar as az be bg bn br bs ca cs cy da de el en eo es et eu fa fi fr fy ga gd gl gu ha he hi hr ht hu hy "
    "id ig is it ja jv ka kk km kn ko ku ky la lg ln lo lt lv mg mk ml mn mr ms my ne nl no om or pa pl ps pt qu "
    "ro ru sa si sk sl so sq sr sv sw ta te th tl tr ug uk ur uz vi xh yo zh zu zxx ace bcl dz ext gcf gom grc gug "
    "hbo kik nso pcm rw se sn st an ary crh fo fuv gcr guw kab lb lij ltg uzs wa sdh arz ba mt nn oc tg tk tt vec "
    "vo wuu yue".split()
)


def known_languages() -> frozenset[str]:
    return LANGUAGES


class LanguageIdFilter(BaseFilter):
    """Keeps documents whose language is in ``languages`` with probability >= ``threshold``.

    Writes ``language`` and ``language_score`` into the metadata of every document (kept or not), so
    the removed samples show what the text was taken for.
    """

    name = "🌍 Language ID (py3langid)"
    _requires_dependencies = ["py3langid"]

    def __init__(self, languages: tuple[str, ...] = ("es",), threshold: float = 0.65, exclusion_writer=None):
        super().__init__(exclusion_writer)
        self.languages = tuple(languages)
        self.threshold = threshold

    def filter(self, doc: Document) -> bool | tuple[bool, str]:
        lang, prob = detect(doc.text)
        doc.metadata["language"] = lang
        doc.metadata["language_score"] = round(prob, 4)
        if lang not in self.languages:
            self.stat_update(f"lang_{lang}")
            return False, "lang_other"
        if prob < self.threshold:
            return False, "lang_low_score"
        return True
