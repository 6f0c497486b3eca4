"""Text helpers shared by every layer: sanitising, folding, key normalisation, query terms."""

from __future__ import annotations

import re
import unicodedata

# Lone surrogates cannot be encoded as UTF-8 and NUL truncates text in some SQLite paths,
# so both become U+FFFD before anything is stored or searched.
_UNSAFE_CHARS = re.compile("[\x00\ud800-\udfff]")
REPLACEMENT_CHAR = "\ufffd"

# A "word" for search purposes: a run of letters or digits (no underscore).
_WORD_RUN = re.compile(r"[^\W_]+")

MAX_QUERY_TERMS = 16
MAX_KEY_LENGTH = 64

# About 75 English function words plus the words people use to *ask* about memory.
STOPWORDS = frozenset(
    """
    a an the and or but if then else of at by for with about against between into through
    during before after above below to from up down in out on off over under again further
    once here there when where why how all any both each few more most other some such no
    nor not only own same so than too very can will just should now is am are was were be
    been being have has had having do does did doing i me my myself we our you your he him
    his she her it its they them their what which who whom this that these those would could
    user assistant tell remind know talk discuss say said remember recall
    """.split()
)

# One-letter pieces that apostrophes leave of English contractions and possessives ("it's",
# "don't", "I'd", "I'm"): not words of the question. Any other one-character letter or digit
# is a term (§5.6 rule 2 as changed: "room 5", "python 3", "vitamin c"); "a" and "i" are
# stopwords anyway.
CONTRACTION_PIECES = frozenset("s t d m".split())


def sanitize(value: object) -> str:
    """Coerce to ``str`` (None → "") and replace NUL and lone surrogates with U+FFFD."""
    if value is None:
        return ""
    text = value if isinstance(value, str) else str(value)
    if type(text) is str and _is_clean(text):
        return text
    return _UNSAFE_CHARS.sub(REPLACEMENT_CHAR, text)


def _is_clean(text: str) -> bool:
    """No NUL and no lone surrogate, checked at C speed: ``isascii`` is a flag lookup and UTF-8
    encoding fails exactly on surrogates (a 10 MB text: ~0.03 s instead of the regex's 0.17)."""
    if "\x00" in text:
        return False
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def em_fold(text: object) -> str:
    """Fold for accent- and case-insensitive matching: NFKD, drop combining marks, casefold.

    Registered as the SQL function ``em_fold`` on every connection.
    """
    if text is None:
        return ""
    if not isinstance(text, str):
        text = str(text)
    decomposed = unicodedata.normalize("NFKD", text)
    return "".join(ch for ch in decomposed if not unicodedata.combining(ch)).casefold()


def word_tokens(text: str) -> list[str]:
    """The folded letter/digit runs of ``text`` (used for names and seeds)."""
    return _WORD_RUN.findall(em_fold(text))


def query_terms(query: object) -> list[str]:
    """Search terms of a query (§5.6): word runs as typed, stopwords, ≤16.

    A one-character word or number is a term like any other ("ticket 7 printer" must not
    find ticket 59 for want of the 7), except the letters contractions leave
    (``CONTRACTION_PIECES``) and the stopwords "a" and "i".

    Terms keep the query's own characters: FTS5 folds a quoted term with the tokenizer it
    indexed the text with (case, Latin diacritics, final sigma), so a word typed as stored
    always finds itself. Folding here first broke that wherever Python's folding and the
    tokenizer's differ: casefold makes "Hauptstraße" "hauptstrasse" and "İstanbul"
    "i̇stanbul" (then split at the dot), NFKC makes full-width "ＡＢＣ１２３" "abc123" and
    the ligature in "ﬁnal" "fi", and none of those is a token of the stored text. A word
    NFKC changes (full-width, ligatures, superscripts) is searched in both forms, as typed
    and normalised, so the query finds the text whichever form it holds. Duplicates and
    stopwords are judged lower-cased (``lower``, not ``casefold``, which would make the
    ligature and its expansion one term).
    """
    # NFC first: a decomposed "é" (macOS names, pasted text) is one letter again, not a
    # word break; composing changes no character's identity, so FTS5 folds it as before.
    text = unicodedata.normalize("NFC", sanitize(query))
    raw: list[str] = []
    seen: set[str] = set()
    for word in _WORD_RUN.findall(text):
        normal = unicodedata.normalize("NFKC", word)
        forms = [word] if normal == word else [word, *_WORD_RUN.findall(normal)]
        for term in forms:
            if not term or (len(term) == 1 and term.lower() in CONTRACTION_PIECES):
                continue
            folded = term.lower()
            if folded not in seen:
                seen.add(folded)
                raw.append(term)
    kept = [t for t in raw if t.lower() not in STOPWORDS]
    if not kept:
        kept = raw
    return kept[:MAX_QUERY_TERMS]


# Joiners and selectors inside an emoji sequence ("👩‍💻", "❤️"): part of the symbol run.
_SYMBOL_JOINERS = frozenset("\u200d\ufe0e\ufe0f\u20e3")


def symbol_terms(query: object) -> list[str]:
    """The runs of symbols (emoji, currency and math signs: Unicode ``S*``) of a query.

    The search terms of a query that has no word (``recall("🍜")``): the keyword indexes
    split text at symbols, so these are matched as substrings of fact keys and values
    (``rank.fact_keyword_leg``). ≤16, duplicates dropped.
    """
    text = unicodedata.normalize("NFC", sanitize(query))
    runs: list[str] = []
    current = ""
    for char in text:
        if unicodedata.category(char).startswith("S") or (current and char in _SYMBOL_JOINERS):
            current += char
            continue
        if current:
            runs.append(current)
        current = ""
    if current:
        runs.append(current)
    return list(dict.fromkeys(runs))[:MAX_QUERY_TERMS]


def is_symbol_term(term: str) -> bool:
    """Whether ``term`` came from :func:`symbol_terms` (no letter or digit in it)."""
    return _WORD_RUN.search(term) is None


def normalize_key(key: str) -> str:
    """Normalise a fact key (§5.4): NFKC, casefold, strip, ``_`` joins, letters/digits/_ only."""
    text = unicodedata.normalize("NFKC", sanitize(key)).casefold().strip()
    text = re.sub(r"[\s\-]+", "_", text)
    text = "".join(ch for ch in text if ch == "_" or ch.isalnum())
    text = re.sub(r"_+", "_", text).strip("_")
    # Trimmed again after the cut (§5.4 cuts last): a key ending in "_" would not survive
    # its own normalisation, and remember(key) with a key read from facts() would then
    # write another key.
    return text[:MAX_KEY_LENGTH].strip("_") if len(text) > MAX_KEY_LENGTH else text


def collapse_whitespace(text: str) -> str:
    return " ".join(text.split())


# C0/C1 control characters (ESC starts terminal escape sequences) and the bidi embedding,
# override and isolate characters that can make rendered text read differently than stored.
_CONTROL_CHARS = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def strip_controls(text: str) -> str:
    """Remove control and bidi-override characters; keep newlines and tabs."""
    return _CONTROL_CHARS.sub("", text)


def one_line(text: str, limit: int) -> str:
    """Stored text as one inert line: no controls, whitespace collapsed, ≤ ``limit`` + "…"."""
    flat = collapse_whitespace(strip_controls(text))
    return flat if len(flat) <= limit else flat[:limit] + "…"


# Words of small talk: an exchange made only of these (and stopwords, emoji, punctuation)
# says nothing to remember ("ok", "thanks!", "haha", "Hi! How can I help?").
FILLER_WORDS = frozenset(
    """
    ok okay okey k kk thanks thank thx ty cheers haha hahaha ha lol lmao rofl hehe yes yeah
    yep yup ya nope cool great nice good perfect awesome sure right see got noted understood
    welcome anytime hi hey hello yo bye fr true indeed alright wow oh ah hmm um uh kind
    anything else mind help glad problem fine sounds course real re ll ve
    """.split()
)


def is_filler(text: str) -> bool:
    """Whether ``text`` (a chunk: "User: ...\nAssistant: ...") is small talk only: no word
    outside STOPWORDS and FILLER_WORDS."""
    return all(
        word in STOPWORDS or word in FILLER_WORDS or word in CONTRACTION_PIECES
        for word in word_tokens(text)
    )
