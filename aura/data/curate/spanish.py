"""The Spanish parts of the curation pipeline: word and sentence splitting, stop words, boilerplate lines
and a document filter on Spanish letter and punctuation statistics.

datatrove's quality filters (Gopher, C4, FineWeb) are language-aware through a ``WordTokenizer``; its
default for Spanish is spaCy's, a heavy dependency. ``SpanishTokenizer`` is a regex tokenizer that keeps
accented words, ``ñ``, ``ü`` and inner apostrophes/hyphens together and splits ``¿`` and ``¡`` off as
punctuation, so the datatrove filters run unchanged on Spanish text.
"""

from __future__ import annotations

import re

from datatrove.data import Document
from datatrove.pipeline.filters.base_filter import BaseFilter
from datatrove.utils.word_tokenizers import WordTokenizer, simple_span_tokenize

# The most frequent Spanish function words (articles, prepositions, conjunctions, pronouns, common
# verbs). Running Spanish prose has about 45 % of its words in this set; keyword spam, menus and
# tables very few.
STOP_WORDS = frozenset(
    (
        "de la que el en y a los se del las un por con no una su para es al lo como más pero sus le ya o "
        "este porque esta entre cuando muy sin sobre también me hasta hay donde desde todo nos durante "
        "todos uno les ni contra otros ese eso ante ellos e esto mí antes algunos qué unos yo otro otras "
        "otra él tanto esa estos mucho quienes nada muchos cual poco ella estar estas algunas algo "
        "nosotros mi mis tú te ti tu tus ellas nosotras vosotros os mío mía tuyo suyo nuestro nuestra "
        "esos esas estoy está están estaba fue ser es son era han ha he hemos había sido será puede "
        "pueden si sí cada usted"
    ).split()
)  # noqa: SIM905 (a word list reads better as text)

# Words that Gopher requires at least two of (the role of "the, be, to, of, and, that, have, with").
GOPHER_STOP_WORDS = (
    "de",
    "la",
    "que",
    "el",
    "en",
    "y",
    "a",
    "los",
    "se",
    "del",
    "las",
    "un",
    "por",
    "con",
    "no",
    "una",
    "su",
    "para",
    "es",
    "al",
    "lo",
    "como",
    "más",
)

TERMINAL = (".", "!", "?", "…", '"', "'", "»", "”", ")", ":")
ACCENTED = frozenset("áéíóúüñÁÉÍÓÚÜÑ")

_WORD = re.compile(r"[^\W_]+(?:['’\-][^\W_]+)*|[^\w\s]", re.UNICODE)
# A sentence ends at . ! ? … (possibly repeated, possibly closed by a quote) followed by a space and an
# opening of the next one; a capital after an abbreviation such as "Sr." is the usual false split.
_SENTENCE = re.compile(r"[^.!?…\n]*(?:[.!?…]+[\"'»”)]*|\n|$)")
_ABBREV = re.compile(
    r"(?:\b(?:Sr|Sra|Srta|Dr|Dra|Ud|Uds|Vd|Vds|pág|núm|etc|p\.ej|aprox|art|cap|tel|"
    r"av|avda|admón|dpto|ej|fig|vol)\.)$",
    re.IGNORECASE,
)


class SpanishTokenizer(WordTokenizer):
    """Regex word and sentence splitter for Spanish, used by the datatrove filters and MinHash."""

    def __init__(self):
        super().__init__("es")

    def word_tokenize(self, text: str) -> list[str]:
        return _WORD.findall(text)

    def sent_tokenize(self, text: str) -> list[str]:
        out: list[str] = []
        pending = ""
        for piece in _SENTENCE.findall(text):
            if not piece.strip():
                continue
            pending += piece
            if _ABBREV.search(pending.rstrip()):
                continue
            out.append(pending.strip())
            pending = ""
        if pending.strip():
            out.append(pending.strip())
        return out

    def span_tokenize(self, text: str) -> list[tuple[int, int]]:
        return list(simple_span_tokenize(text, self.sent_tokenize(text)))

    def __eq__(self, other) -> bool:  # one tokenizer, whatever process unpickled it (lru_cache keys)
        return isinstance(other, SpanishTokenizer)

    def __hash__(self) -> int:
        return hash("aura.SpanishTokenizer")


TOKENIZER = SpanishTokenizer()

# Lines that are site furniture rather than text, matched on the lower-cased line: the line goes, the
# document stays. Notices (cookies, legal, rights) go at any length; navigation and sharing prompts only
# on short lines (at most ``SHORT_LINE_WORDS`` words), since prose may say "ver más" or "compartir".
NOTICE_LINE = re.compile(
    r"(?:utiliza(?:mos)? cookies|usa(?:mos)? cookies|uso de cookies|política de (?:privacidad|cookies)|"
    r"aviso legal|términos y condiciones|condiciones de uso|derechos reservados|aceptar? (?:las )?cookies|"
    r"configurar cookies|copyright|©|javascript)"
)
NAVIGATION_LINE = re.compile(
    r"(?:compartir en|comparte esto|suscríbete|suscribirse|date de alta|iniciar? sesión|regístrate|"
    r"leer más|seguir leyendo|ver más|haz clic|pincha aquí|ir al contenido|saltar al contenido|volver "
    r"arriba|ir arriba|mapa del sitio|síguenos|entradas relacionadas|artículos relacionados|publicado por|"
    r"deja(?:r)? un comentario|comentarios|añadir al carrito|carrito|cesta|^menú|^inicio|^buscar|"
    r"^contacto|^noticias$|^categorías|^etiquetas)"
)
SHORT_LINE_WORDS = 10


def is_boilerplate_line(line: str) -> bool:
    low = line.lower()
    if not any(c.isalpha() for c in low) or NOTICE_LINE.search(low):
        return True
    return len(low.split()) <= SHORT_LINE_WORDS and NAVIGATION_LINE.search(low) is not None


class SpanishBoilerplateLines(BaseFilter):
    """Line-level boilerplate removal (C4-style) with Spanish patterns; drops the document if nothing is left.

    A line goes when ``is_boilerplate_line`` says so or it has no letter at all (separators, lone
    numbers, "| | |"). Counts removed lines and characters in the stats.
    """

    name = "🧹 Spanish boilerplate lines"

    def __init__(self, exclusion_writer=None):
        super().__init__(exclusion_writer)

    def filter(self, doc: Document) -> bool | tuple[bool, str]:
        kept: list[str] = []
        removed = 0
        for line in doc.text.split("\n"):
            stripped = line.strip()
            if not stripped:
                kept.append("")
                continue
            if is_boilerplate_line(stripped):
                removed += len(line) + 1
                self.stat_update("lines_removed")
                continue
            kept.append(line)
        if removed:
            self.stat_update("chars_removed", value=removed)
            doc.text = re.sub(r"\n{3,}", "\n\n", "\n".join(kept)).strip()
        if not doc.text:
            return False, "boilerplate_only"
        return True


class SpanishTextFilter(BaseFilter):
    """Drops documents whose letter and word statistics do not look like Spanish prose.

    - ``min_stop_word_ratio``: share of words that are Spanish function words (keyword lists, menus,
      spam fall below it);
    - ``min_accent_ratio``: accented letters (á é í ó ú ü ñ) per letter, checked from
      ``accent_min_letters`` letters on (Spanish prose has about 1.5-3 %; text stripped of its
      accents, machine transliterations and mislabelled languages have none);
    - ``max_upper_ratio``: capital letters per letter (shouting, spam);
    - ``max_digit_ratio``: digits per non-space character (price lists, tables).
    """

    name = "🇪🇸 Spanish text statistics"

    def __init__(
        self,
        *,
        min_stop_word_ratio: float = 0.15,
        min_accent_ratio: float = 0.002,
        accent_min_letters: int = 500,
        max_upper_ratio: float = 0.25,
        max_digit_ratio: float = 0.2,
        exclusion_writer=None,
    ):
        super().__init__(exclusion_writer)
        self.min_stop_word_ratio = min_stop_word_ratio
        self.min_accent_ratio = min_accent_ratio
        self.accent_min_letters = accent_min_letters
        self.max_upper_ratio = max_upper_ratio
        self.max_digit_ratio = max_digit_ratio

    def filter(self, doc: Document) -> bool | tuple[bool, str]:
        text = doc.text
        words = [w.lower() for w in TOKENIZER.word_tokenize(text) if w[0].isalnum()]
        if not words:
            return False, "es_no_words"
        if sum(w in STOP_WORDS for w in words) / len(words) < self.min_stop_word_ratio:
            return False, "es_few_stop_words"
        letters = sum(c.isalpha() for c in text)
        if letters:
            if sum(c.isupper() for c in text) / letters > self.max_upper_ratio:
                return False, "es_too_many_capitals"
            if (
                letters >= self.accent_min_letters
                and sum(c in ACCENTED for c in text) / letters < self.min_accent_ratio
            ):
                return False, "es_no_accents"
        visible = sum(not c.isspace() for c in text)
        if visible and sum(c.isdigit() for c in text) / visible > self.max_digit_ratio:
            return False, "es_too_many_digits"
        return True
