"""How graph names, types and relations read to a person (the pictures of ``view``).

Node names are stored canonical (casefolded, for matching), so "Sofia" is kept as ``sofia``.
A picture shows the name as people wrote it: the casing found in a chunk that mentions the
node (the words the user or the model actually used), else an alias that differs only in
case, else a title-cased form that leaves particles ("de", "van") and mixed-case words alone.
Relations are stored as ``snake_case`` tokens (``parent_of``) and read as words (``parent
of``); the ``org`` type reads as "organisation".
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence

# Words kept lowercase inside a title-cased name ("Museo de la Ciudad", "Ludwig van Beethoven").
_PARTICLES = frozenset(
    {"a", "an", "and", "at", "da", "de", "del", "della", "der", "des", "di", "du", "for", "in",
     "la", "le", "of", "on", "the", "van", "von", "y", "zu"}
)  # fmt: skip
TYPE_WORDS = {"org": "organisation", "entity": "entity", "person": "person", "place": "place",
              "thing": "thing", "self": "you"}  # fmt: skip
# How many mentioning chunks are read per node to find its written form.
CHUNKS_PER_NODE = 3


def relation_words(relationship: str) -> str:
    """``parent_of`` → ``parent of``; ``works-at`` → ``works at``."""
    return " ".join(re.split(r"[_\-\s]+", relationship)).strip() or relationship


def type_words(node_type: str) -> str:
    return TYPE_WORDS.get(node_type, node_type)


def _fold(text: str) -> str:
    return unicodedata.normalize("NFKC", text).casefold()


def title_case(name: str) -> str:
    """A readable form of a canonical name: each word capitalised, except particles after
    the first word and words that already carry capitals or digits."""
    words = name.split(" ")
    out: list[str] = []
    for i, word in enumerate(words):
        keep = not word or any(ch.isupper() or ch.isdigit() for ch in word)
        if keep or (i > 0 and word in _PARTICLES):
            out.append(word)
        else:
            # "o'brien" → "O'Brien", "jean-luc" → "Jean-Luc": capitalise after ' and - too.
            out.append(re.sub(r"(^|['\-.])(\w)", lambda m: m.group(1) + m.group(2).upper(), word))
    return " ".join(out)


def _written_form(name: str, text: str) -> str | None:
    """The casing ``text`` gives ``name`` where it holds it as a whole phrase (case and
    width ignored, word boundaries kept); None when it does not, or when it is all lower
    case there too (a lower-case mention says nothing about the proper form)."""
    if not name:
        return None
    folded_text = _fold(text)
    if len(folded_text) != len(text):
        return None  # folding changed lengths (ß, ligatures): positions would not line up
    start = 0
    while True:
        at = folded_text.find(name, start)
        if at < 0:
            return None
        end = at + len(name)
        before_ok = at == 0 or not folded_text[at - 1].isalnum()
        after_ok = end >= len(folded_text) or not folded_text[end].isalnum()
        if before_ok and after_ok:
            found = text[at:end]
            if found != found.lower():
                return found
        start = at + 1


def proper_names(
    names: Mapping[int, str],
    aliases: Mapping[int, Sequence[str]],
    mention_texts: Mapping[int, Iterable[str]],
) -> dict[int, str]:
    """Node id → the name as people wrote it (see the module docstring)."""
    out: dict[int, str] = {}
    for node_id, name in names.items():
        shown: str | None = None
        for text in mention_texts.get(node_id, ()):
            shown = _written_form(name, text)
            if shown:
                break
        if shown is None:
            for alias in aliases.get(node_id, ()):
                if _fold(alias) == name and alias != alias.lower():
                    shown = alias
                    break
        out[node_id] = shown or title_case(name)
    return out
