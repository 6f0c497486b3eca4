"""Rule capture (SPEC §5.5): profile facts read from fixed phrases in the user's own words.

``capture_rules`` runs over one user message and returns ``(key, value)`` pairs in text order.
It costs a few regex scans, so it runs on every turn at every tier, with no LLM.

Each rule is a trigger phrase ("i work at") plus a *value shape* that says how much of the
following text is the value. The shape is part of the match: "call me later" is not a match of
the call-me rule at all, so a later "call me Sam" in the same message is that rule's first
match. Cleaning (trailing punctuation, filler cut, forbidden first word) then applies to that
one match; a value dropped by cleaning does not fall back to a later match.

A trigger counts only where the user states it of themselves, now (``context.asserted``):
not in a hypothetical ("if I moved to Paris"), a question ("do I live in Denver?"), a quote
or someone else's words ("she said 'I'm from Ohio'"), or under a negation ("I don't think
I'm vegan"). Such a trigger is no match, so a later one in the message is the rule's first
match.

Triggers are case-insensitive. Whether a word is capitalised is judged on the text as written,
which is what tells a name ("Anna Smith") from the words after it ("anna and ...").

The module is pure: no I/O, no state. Writing captures (source "rule") is the caller's job.
"""

from __future__ import annotations

import functools
import itertools
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from ..text import normalize_key
from .context import SENTENCE_WINDOW, asserted, subject_start
from .words import (
    AFTER_NAME_WORDS,
    AMERICAN_SPELLINGS,
    FAVORITE_TIME_PHRASES,
    JOB_TAIL_NOUNS,
    NAME_BREAK_WORDS,
    NOT_ALLERGENS,
    NOT_EMPLOYERS,
    NOT_NAMES,
    NOT_OCCUPATION_MODIFIERS,
    NOT_PLACE_SECOND_WORDS,
    NOT_PLACES,
    NOT_VALUE_STARTS,
    OCCUPATION_NOUNS,
    PARTICIPLE_NAMES,
    PLACE_FIRST_WORDS,
    PLACE_JOINING_WORDS,
    THIS_IS_WORDS,
    TITLE_WORDS,
)

# A word of a name or place: letters, with inner apostrophes or hyphens (O'Brien, Jean-Luc).
# The lookahead stops "R2D2" from yielding "R".
_LETTER_WORD = r"[^\W\d_]+(?:['’\-][^\W\d_]+)*(?![\w'’\-])"
_LETTER_WORD_RE = re.compile(_LETTER_WORD)
# Spaces or tabs between the words of one value; a newline ends the value.
_INLINE_GAP_RE = re.compile(r"[ \t]+")
# "Austin, Texas": the comma that may join a place to its region.
_REGION_COMMA_RE = re.compile(r",[ \t]*")

# Words split for cleaning: letters or digits, with inner apostrophes or hyphens.
_CLEAN_WORD_RE = re.compile(r"[^\W_]+(?:['’\-][^\W_]+)*")

_I_AM = r"\b(?P<subj>i)(?:['’]m|\s+am)\s+"  # "I'm" (straight or curly apostrophe) or "I am"
_I_HAVE = r"\b(?P<subj>i)(?:['’]ve|\s+have)\s+"  # "I've" or "I have"
# Adverbs that may stand between the subject and the verb without changing what is stated:
# "I actually moved to", "we just moved to", "I now live in". Never a negation or a modal.
_ADVERB = (
    r"(?:actually|just|recently|finally|now|currently|also|still|officially|eventually|"
    r"really|already|then|mostly|permanently|basically)"
)
_ADVERBS = rf"(?:{_ADVERB}\s+){{0,2}}"

TRAILING_PUNCTUATION = ".,!?;:"

# Words that end a value when they follow at least one value word and are lowercase in the
# text: "teal by the way" → "teal", while "Right Said Fred" keeps its capitalised "Right".
# The time words after "because" were added for issue 15: "I work at Stripe since March",
# "my favorite band is Radiohead lately".
# fmt: off
FILLER_WORDS = frozenset({
    "by", "though", "actually", "anyway", "btw", "honestly", "right", "now", "these", "at",
    "for", "in", "so", "but", "and",
    "because", "since", "until", "last", "next", "this", "today", "yesterday", "tomorrow",
    "recently", "lately", "currently", "nowadays", "anymore",
})
# fmt: on

# A capture whose first word is one of these is not a value ("I live in a flat",
# "I work at home", "I'm from the north"). Compared case-insensitively, except for
# NAME_STARTS: capitalised, those begin proper nouns ("The Beatles", "Home Depot", "A Tribe
# Called Quest"), while no name starts with "Not" or "Very" ("my favorite color is Not blue").
# fmt: off
FORBIDDEN_FIRST_WORDS = frozenset({
    "not", "no", "very", "so", "too", "really", "just", "kind", "sort", "a", "an", "the",
    "still", "also", "actually", "basically", "literally", "work", "home", "here", "there",
    "moment",
})
NAME_STARTS = frozenset({"a", "an", "the", "work", "home", "here", "there", "moment", "kind"})
# fmt: on

# "call me <word>" words that are not names ("call me later", "call me back").
# fmt: off
CALL_ME_STOPLIST = frozenset({
    "later", "back", "tomorrow", "tonight", "now", "soon", "again", "anytime", "sometime",
    "whenever", "when", "if", "after", "before", "at", "on", "up", "please", "maybe", "crazy",
    "that", "this", "it", "a", "an", "the",
})
# fmt: on

DIET_WORDS = ("vegetarian", "vegan", "pescatarian")
_DIET = "(?:" + "|".join(DIET_WORDS) + ")"

# Triggers read per pattern and message. Each is checked against its sentence
# (``context.asserted``); past this many, a message is not a person talking about
# themselves, and reading on would make a long pasted text cost seconds (a 640 kB text of
# "If I moved to Paris" took 23 s unbounded, 0.5 s with the old rules).
MAX_TRIGGERS = 64
# The rules read the first this many characters of a message. A longer message is a paste
# (a document, a log, a story), where "I'm from Ohio" is seldom the user speaking, and
# reading all of it cost ~3 s per MB (the old, narrower rules ~1 s per MB). 20 000
# characters cost about 60 ms here.
MAX_RULE_TEXT = 20_000

MAX_NAME_WORDS = 2
MAX_PLACE_WORDS = 3  # before the comma, and again after it
MAX_FAVORITE_SUBJECT_WORDS = 3
FAVORITE_KEY_PREFIX = "favorite"


# A shape reads the value that follows a trigger; None means "no match here".
Shape = Callable[[str, re.Match[str]], str | None]


@dataclass(frozen=True)
class Rule:
    """One row of the §5.5 table: a key, its trigger patterns and the shape of its value.

    ``not_first`` lists lowercase words the value may not start with in any case ("I moved
    to my parents' place"); ``not_values`` whole values that are no value of this key ("I
    live in fear", "we moved to Postgres"), compared casefolded; ``fillers`` more words
    that end this rule's value like FILLER_WORDS ("I work at Google as an engineer").
    """

    key: str
    patterns: tuple[re.Pattern[str], ...]
    shape: Shape
    not_first: frozenset[str] = frozenset()
    not_values: frozenset[str] = frozenset()
    fillers: frozenset[str] = frozenset()


def _compile(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern, re.IGNORECASE)


def _is_capitalised(word: str) -> bool:
    return word[:1].isupper()


def _capitalised_run(text: str, pos: int, limit: int) -> int:
    """End of up to ``limit`` capitalised words starting at ``pos`` (``pos`` itself if none)."""
    end = pos
    for _ in range(limit):
        gap = _INLINE_GAP_RE.match(text, end) if end > pos else None
        start = gap.end() if gap else end
        word = _LETTER_WORD_RE.match(text, start)
        if word is None or not _is_capitalised(word.group()) or _is_pronoun_i(word.group()):
            break
        end = word.end()
        if word.group() in _PLACE_ABBREVIATIONS and text.startswith(".", end):
            end += 1  # "St. Louis", "Mt. Vernon"
    return end


_PLACE_ABBREVIATIONS = frozenset({"St", "Ste", "Mt", "Ft", "Pt"})


def _is_pronoun_i(word: str) -> bool:
    """ "I", "I'm", "I've"...: the start of a new clause, never part of a name or place
    ("Before I moved to Dublin I lived in Cork")."""
    return word == "I" or (word[:1] == "I" and word[1:2] in ("'", "’"))


def _proper_noun(
    max_words: int, *, region: bool, lowercase: Literal["always", "styled", "never"] = "always"
) -> Shape:
    """1–``max_words`` capitalised words (plus ", Region" if ``region``). A lowercase match
    takes one word ``"always"``, only in a message written in lowercase ``"styled"``
    (``_lowercase_styled``), or is no match (``"never"``)."""

    def shape(text: str, match: re.Match[str]) -> str | None:
        start = match.end()
        first = _LETTER_WORD_RE.match(text, start)
        if first is None:
            return None
        if not _is_capitalised(first.group()):
            if lowercase == "always" or (lowercase == "styled" and _lowercase_styled(text)):
                return _lowercase_place(text, first) if region else first.group()
            return None
        end = _capitalised_run(text, start, max_words)
        if region:
            comma = _REGION_COMMA_RE.match(text, end)
            if comma:
                tail_end = _capitalised_run(text, comma.end(), max_words)
                if tail_end > comma.end():
                    end = tail_end
        return text[start:end]

    return shape


def _lowercase_place(text: str, first: re.Match[str]) -> str | None:
    """A lowercase place: one word ("i live in paris"), or, after a word that is never a
    place alone, the words that complete it ("new york", "rio de janeiro", "salt lake
    city"); None when they do not ("i moved to new place")."""
    if first.group().casefold() not in PLACE_FIRST_WORDS:
        return first.group()
    end = first.end()
    words = [first.group().casefold()]
    while len(words) < MAX_PLACE_WORDS:
        gap = _INLINE_GAP_RE.match(text, end)
        word = _LETTER_WORD_RE.match(text, gap.end()) if gap else None
        if word is None:
            break
        folded = word.group().casefold()
        if folded == "city" and len(words) > 1:  # "new york city", "salt lake city"
            words.append(folded)
            end = word.end()
            break
        if not (len(words) == 1 or words[-1] in PLACE_JOINING_WORDS):
            break
        if folded in FILLER_WORDS or folded in NOT_PLACES or folded in NOT_PLACE_SECOND_WORDS:
            return None
        words.append(folded)
        end = word.end()
    if len(words) == 1 or words[-1] in PLACE_JOINING_WORDS:
        return None
    return text[first.start() : end]


@functools.lru_cache(maxsize=4)  # asked once per lowercase capture of the same message
def _lowercase_styled(text: str) -> bool:
    """Whether ``text`` capitalises nothing but "I" and the first word of a sentence: its
    writer does not capitalise names either ("I just moved to nyc")."""
    for word in _LETTER_WORD_RE.finditer(text):
        token = word.group()
        if not _is_capitalised(token) or _is_pronoun_i(token):
            continue
        before = text[: word.start()].rstrip()
        if before and before[-1] not in ".!?\n":
            return False
    return True


def _call_me_word(text: str, match: re.Match[str]) -> str | None:
    word = _LETTER_WORD_RE.match(text, match.end())
    if word is None or word.group().casefold() in CALL_ME_STOPLIST:
        return None
    if word.group().casefold() in TITLE_WORDS:  # "call me Dr. Patel": a form of address
        return None
    return word.group()


def _value_group(text: str, match: re.Match[str]) -> str | None:
    return match.group("value")


def _job_group(text: str, match: re.Match[str]) -> str | None:
    """The value of an "I'm a <job>" trigger, unless a word before the job says it is none
    ("I'm a terrible writer", "I'm a former nurse")."""
    words = match.group("job").split()
    if any(word.casefold() in NOT_OCCUPATION_MODIFIERS for word in words[:-1]):
        return None
    return match.group("value")


def _diet_word(text: str, match: re.Match[str]) -> str | None:
    # The trigger only matches the three diet words, in any case; store the canonical form
    # so "I'm Vegan" and "I'm vegan" are the same value.
    word = match.group("value")
    return word.lower() if word.lower() in DIET_WORDS else word


def _intro_name(text: str, match: re.Match[str]) -> str | None:
    """ "Hi, I'm Daniel Reyes": 1–2 capitalised words that are no state, label or
    function word ("I'm Tired", "I'm Canadian", "I'm Back"), followed by the end of the
    clause or a word that may follow a name ("and", "from", "here")."""
    words: list[re.Match[str]] = []
    pos = match.end()
    while len(words) < MAX_NAME_WORDS:
        if words:
            gap = _INLINE_GAP_RE.match(text, pos)
            if gap is None:
                break
            pos = gap.end()
        word = _LETTER_WORD_RE.match(text, pos)
        if word is None or not _is_capitalised(word.group()):
            break
        token = word.group()
        folded = token.casefold()
        if (len(token) > 1 and token.isupper()) or folded in NOT_NAMES:
            break
        if NOT_NAMES.intersection(re.split(r"[-'’]", folded)):  # "Mexican-American"
            break
        if folded in TITLE_WORDS or _participle(folded):  # "I'm Dr. Patel", "I'm Cooked"
            break
        if words and folded in NAME_BREAK_WORDS:
            break
        words.append(word)
        pos = word.end()
    if not words or _title_cased(text, words[0].end()):
        return None
    first = words[0].group().casefold()
    if match.group("intro").casefold().startswith("this") and first in THIS_IS_WORDS:
        return None
    end = words[-1].end()
    rest = text[end : end + SENTENCE_WINDOW]
    if rest[:1] in ("'", "’"):  # "I'm Daniel's brother"
        return None
    follower = re.match(r"[ \t]+([^\W\d_]+(?:['’][^\W\d_]+)?)", rest)
    if (
        follower
        and not _is_capitalised(follower.group(1))
        and follower.group(1).casefold() not in AFTER_NAME_WORDS
    ):
        return None
    return text[words[0].start() : end]


def _participle(word: str) -> bool:
    """ "Cooked", "Wrecked", "Stressing": a verb form, unless a known name ends that way."""
    if word in PARTICIPLE_NAMES:
        return False
    return (word.endswith("ed") and len(word) >= 5) or (word.endswith("ing") and len(word) >= 6)


def _title_cased(text: str, pos: int) -> bool:
    """Whether the rest of the sentence from ``pos`` capitalises most of its words ("I'm
    Stoked About The Trip"): then capitals say nothing about names."""
    sentence = re.split(r"[.!?\n]", text[pos : pos + SENTENCE_WINDOW], maxsplit=1)[0]
    words = [w for w in _LETTER_WORD_RE.findall(sentence) if not _is_pronoun_i(w)]
    if len(words) < 3:
        return False
    return sum(1 for w in words if _is_capitalised(w)) / len(words) > 0.6


# "2–40 chars of words, spaces and <extra>", never ending inside a word.
def _phrase(extra: str) -> str:
    chars = rf"\w '’\-{extra}"
    return rf"(?P<value>\w[{chars}]{{1,39}})(?![\w'’\-{extra}])"


_OCCUPATION_PHRASE = _phrase("&")
_ALLERGY_PHRASE = _phrase(",")
# The same, starting with a capital letter as written: what new employer triggers take
# ("I started at Stripe", never "I started at 9am").
_EMPLOYER_NAME = (
    r"(?P<value>(?-i:[A-Z])(?:[\w '’\-&]|\.(?=\w)|(?<=St|Dr|Mt|Ft|Co|Jr|Sr)\.){1,39})"
    r"(?![\w'’\-&])"
)


# "I'm a student at MIT": where a student studies is no employer.
_STUDENT_WORDS = frozenset({"student", "undergraduate", "undergrad", "freshman", "sophomore",
                            "pupil", "postgraduate", "postgrad"})  # fmt: skip


def _employer_value(text: str, match: re.Match[str]) -> str | None:
    job = match.groupdict().get("job")
    if job is not None and (
        _job_group(text, match) is None or job.split()[-1].casefold() in _STUDENT_WORDS
    ):
        return None
    return match.group("value")


_PLACE = _proper_noun(MAX_PLACE_WORDS, region=True)
_PLACE_CAPITALISED = _proper_noun(MAX_PLACE_WORDS, region=True, lowercase="never")
_PLACE_STYLED = _proper_noun(MAX_PLACE_WORDS, region=True, lowercase="styled")

# "I moved to Berlin, then to Munich": the place moved on to is where the user is now.
_MOVED_ON_RE = _compile(
    r"[ \t]*,?[ \t]*(?:and[ \t]+)?(?:then|later|after[ \t]+that|eventually|finally)[ \t]*,?"
    r"[ \t]+(?:(?:moved|relocated|went)[ \t]+)?to[ \t]+"
)


def _may_be_place(value: str) -> bool:
    """Whether a later place ("then to my parents") passes the location rule's cleaning."""
    first = _CLEAN_WORD_RE.search(value)
    return (
        first is not None
        and not _forbidden_first(first.group())
        and first.group().casefold() not in NOT_VALUE_STARTS
        and value.casefold() not in NOT_PLACES
    )


def _moved_on(shape: Shape) -> Shape:
    """``shape``, taking the last place of "to X, then to Y" (the shape's value starts at the
    end of the match it is given)."""

    def moved(text: str, match: re.Match[str]) -> str | None:
        value = shape(text, match)
        while value is not None:
            on = _MOVED_ON_RE.match(text, match.end() + len(value))
            later = shape(text, on) if on is not None else None
            if on is None or later is None or not _may_be_place(later):
                break
            match, value = on, later
        return value

    return moved


# "I'm a nurse", "I'm a senior software engineer": up to three words, then a job noun.
_JOB_NOUN = "(?:" + "|".join(sorted(OCCUPATION_NOUNS, key=len, reverse=True)) + ")"
# A job may be a compound: "nurse practitioner", "teaching assistant", "sales manager".
_JOB_TAIL = "(?:" + "|".join(sorted(JOB_TAIL_NOUNS | OCCUPATION_NOUNS, key=len, reverse=True)) + ")"
_JOB = (
    rf"(?P<job>(?:[^\W\d_][\w'’\-]*[ \t]+){{0,3}}?{_JOB_NOUN}"
    rf"(?:[ \t]+{_JOB_TAIL}(?![\w'’\-]))*)"
    # "I'm a teacher's aide", "I'm a judge of character", "I'm a doctor, not a magician"
    r"(?![\w'’\-]|\s+of\b|,?\s+not\s+an?\b)"
)

# The start of a message or sentence, and what may come before a self-introduction there:
# "Hi, I'm Daniel", "Hey Claude! I'm Daniel", "Good morning, this is Daniel".
_GREETING = (
    r"(?:(?:hi|hello|hey|hiya|howdy|greetings|yo|good\s+(?:morning|afternoon|evening|day)|"
    r"oh|well|ok|okay|btw|by\s+the\s+way|also|sorry|thanks|thank\s+you)"
    r"(?:\s+(?:there|all|everyone|everybody|folks|again|guys|(?-i:[A-Z][a-z]+)))?"
    r"[ \t]*[,!.:;—–-]*[ \t]*)?"
)
_SENTENCE_START = r"(?:^|(?<=[.!?\n]))[ \t]*"

# Words that end a job or an employer's name: "I work as a nurse on nights", "I work at
# Google as an engineer". ("Bank of America": "of" is no filler.)
_JOB_FILLERS = frozenset({"on", "with", "where", "which", "who", "doing", "mainly", "mostly"})
_EMPLOYER_FILLERS = _JOB_FILLERS | {"as"}
# "I'm allergic to Mondays, not to you": a joke, and where a list of allergens stops.
_ALLERGY_FILLERS = frozenset({"not", "which", "who", "when", "if", "whenever", "lol"})

# What may stand between "I" and a second verb joined by "and" ("I left Seattle and moved
# to Tacoma"): no other subject ("I think my brother packed up and moved") and no negation.
_NO_OTHER_SUBJECT = (
    r"(?:(?!\b(?:my|his|her|their|he|she|they|you|it|we|our|not|never|no|n['’]t)\b)"
    r"[^.;!?\n]){1,60}?"
)

RULES: tuple[Rule, ...] = (
    Rule(
        "name",
        (
            _compile(
                r"\bmy\s+(?:(?:full|real|first|given|legal|actual|proper)\s+)?"
                r"name(?:\s+is|['’]s)\s+(?:(?:now|currently)\s+)?"
            ),
        ),
        _proper_noun(MAX_NAME_WORDS, region=False),
    ),
    Rule("name", (_compile(r"\b(?:(?:you\s+can|please|just)\s+)?call\s+me\s+"),), _call_me_word),
    Rule(
        "name",
        (
            _compile(_SENTENCE_START + _GREETING + r"(?P<intro>(?P<subj>i)(?:['’]?m|\s+am))\s+"),
            _compile(r"^[ \t]*" + _GREETING + r"(?P<intro>this\s+is)\s+"),
        ),
        _intro_name,
    ),
    # The §5.5 location triggers: a lowercase value takes one word ("I live in paris").
    Rule(
        "location",
        (
            _compile(r"\b(?P<subj>i)\s+(?:live|stay)\s+in\s+"),
            _compile(r"\b(?P<subj>i)['’]m\s+based\s+in\s+"),
            _compile(r"\b(?P<subj>i)\s+(?:moved|relocated)\s+to\s+"),
        ),
        _moved_on(_PLACE),
        NOT_VALUE_STARTS,
        NOT_PLACES,
    ),
    # Their ordinary variants take capitalised places only: "we live in interesting times".
    Rule(
        "location",
        (
            _compile(rf"\b(?P<subj>i|we)\s+{_ADVERBS}(?:live|stay|reside|settled)\s+in\s+"),
            _compile(
                rf"\b(?P<subj>i|we)(?:['’]ve|\s+have)?\s+{_ADVERBS}(?:moved|relocated)\s+"
                r"(?:back\s+|over\s+|out\s+|away\s+)?(?:from\s+[^.;!?\n]{1,50}?\s+)?to\s+"
            ),
            _compile(
                rf"\b(?P<subj>i|we)(?:['’]m|['’]re|\s+am|\s+are)\s+{_ADVERBS}"
                r"(?:based|living|settled)\s+in\s+"
            ),
            _compile(rf"\b(?P<subj>i|we)(?:['’]ve|\s+have)\s+{_ADVERBS}been\s+living\s+in\s+"),
            _compile(r"\b(?P<subj>my)\s+(?:new\s+)?home\s+is\s+(?:now\s+)?in\s+"),
            # Chat style drops the subject: "Just moved to Denver!", "I left Seattle and
            # moved to Tacoma", "I'm from Ohio but moved to Texas" (no other subject between).
            _compile(_SENTENCE_START + rf"(?P<subj>){_ADVERBS}(?:moved|relocated)\s+to\s+"),
            _compile(
                rf"\b(?P<subj>i)(?:['’]m)?\s+{_NO_OTHER_SUBJECT}\s+(?:and|but)\s+{_ADVERBS}"
                r"(?:moved|relocated)\s+(?:back\s+)?to\s+"
            ),
        ),
        _moved_on(_PLACE_STYLED),
        NOT_VALUE_STARTS,
        NOT_PLACES,
    ),
    Rule("hometown", (_compile(_I_AM + r"from\s+"),), _PLACE, NOT_VALUE_STARTS, NOT_PLACES),
    Rule(
        "hometown",
        (
            _compile(_I_AM + r"(?:originally|actually|also|really)\s+from\s+"),
            _compile(
                r"\b(?P<subj>i)\s+(?:was\s+)?(?:born\s+and\s+raised|grew\s+up|was\s+raised|"
                r"born)\s+in\s+"
            ),
            _compile(r"\b(?P<subj>i)\s+(?:originally\s+)?come\s+from\s+"),
        ),
        _PLACE_CAPITALISED,
        NOT_VALUE_STARTS,
        NOT_PLACES,
    ),
    Rule(
        "occupation",
        (
            _compile(rf"\b(?P<subj>i)\s+{_ADVERBS}work\s+as\s+an?\s+" + _OCCUPATION_PHRASE),
            _compile(
                rf"\b(?P<subj>i)(?:['’]m|\s+am|['’]ve\s+been|\s+have\s+been)\s+{_ADVERBS}"
                r"working\s+as\s+an?\s+" + _OCCUPATION_PHRASE
            ),
            # The second form takes one word: "I'm a nurse by trade".
            _compile(_I_AM + r"an?\s+(?P<value>\w[\w'’\-]*)\s+by\s+(?:profession|trade)\b"),
        ),
        _value_group,
        NOT_VALUE_STARTS,
        fillers=_JOB_FILLERS,
    ),
    Rule(
        "occupation",
        (_compile(_I_AM + rf"(?:(?:now|currently|also|actually)\s+)?an?\s+(?P<value>{_JOB})"),),
        _job_group,
    ),
    Rule(
        "employer",
        (
            _compile(
                rf"\b(?P<subj>i)\s+{_ADVERBS}work\s+"
                r"(?:(?:part|full)[\s-]time\s+|remotely\s+)?(?:at|for)\s+" + _OCCUPATION_PHRASE
            ),
        ),
        _value_group,
        NOT_EMPLOYERS,
        fillers=_EMPLOYER_FILLERS,
    ),
    Rule(
        "employer",
        (
            _compile(
                rf"\b(?P<subj>i)(?:['’]m|\s+am|['’]ve\s+been|\s+have\s+been)\s+{_ADVERBS}"
                r"(?:working|employed)\s+(?:at|for|by)\s+" + _EMPLOYER_NAME
            ),
            _compile(
                rf"\b(?P<subj>i)\s+{_ADVERBS}(?:got|landed|took|accepted|started)\s+"
                r"(?:a|an|the|my)\s+(?:new\s+)?(?:full-time\s+|part-time\s+)?"
                r"(?:job|position|role)\s+(?:at|with)\s+" + _EMPLOYER_NAME
            ),
            _compile(
                rf"\b(?P<subj>i)(?:['’]ve|\s+have)?\s+{_ADVERBS}(?:started|began)\s+"
                r"(?:working\s+)?at\s+" + _EMPLOYER_NAME
            ),
            _compile(
                rf"\b(?P<subj>i)(?:['’]ve|\s+have)?\s+{_ADVERBS}joined\s+"
                r"(?P<value>(?-i:[A-Z])[\w'’\-&. ]{0,38}?)\s+as\s+(?:an?|the|their|its)\s+"
            ),
            _compile(
                r"\b(?P<subj>i)\s+(?:left|quit)\s+[^.;!?\n]{1,60}?\s+(?:and|to)\s+"
                r"(?:(?:then|just|recently|have|i|i['’]ve)\s+)?join(?:ed)?\s+" + _EMPLOYER_NAME
            ),
            _compile(
                _I_AM
                + rf"(?:now\s+|currently\s+)?an?\s+{_JOB}\s+(?:at|for|with)\s+"
                + _EMPLOYER_NAME
            ),
        ),
        _employer_value,
        NOT_EMPLOYERS,
        fillers=_EMPLOYER_FILLERS,
    ),
    Rule(
        "allergies",
        (
            _compile(
                _I_AM + r"(?:(?:also|very|severely|mildly|deathly|really|highly|extremely|"
                r"super|slightly|seriously|quite|actually|now|still)\s+)?allergic\s+to\s+"
                + _ALLERGY_PHRASE
            ),
            _compile(
                r"\b(?P<subj>i)(?:\s+have|\s+have\s+got|['’]ve\s+got|\s+got)\s+an?\s+"
                r"(?:(?:severe|mild|bad|serious|life-threatening|slight)\s+)?"
                r"(?P<value>(?!(?:severe|mild|bad|serious|slight)\b)[^\W\d_][\w\-]{1,30})"
                r"\s+allergy\b"
            ),
            _compile(
                r"\b(?P<subj>i)(?:\s+have|\s+have\s+got|['’]ve\s+got|\s+got)\s+(?:an?\s+)?"
                r"(?:(?:severe|mild|bad|serious|life-threatening|slight)\s+)?"
                r"allerg(?:y|ies)\s+to\s+" + _ALLERGY_PHRASE
            ),
            # "I'm vegetarian and allergic to soy"
            _compile(
                _I_AM + _NO_OTHER_SUBJECT + r"\s+and\s+(?:also\s+|very\s+|severely\s+)?"
                r"allergic\s+to\s+" + _ALLERGY_PHRASE
            ),
        ),
        _value_group,
        NOT_VALUE_STARTS,
        NOT_ALLERGENS,
        _ALLERGY_FILLERS,
    ),
    Rule(
        "diet",
        (
            _compile(
                _I_AM + r"(?:(?:now|also|actually|still|strictly|fully|completely|officially|"
                r"totally|finally)\s+)?(?:an?\s+)?(?P<value>" + _DIET + r")(?![\w\-])"
            ),
            _compile(_I_HAVE + rf"{_ADVERBS}been\s+(?:an?\s+)?(?P<value>{_DIET})(?![\w\-])"),
            # "I'm Hindu and vegetarian"
            _compile(
                _I_AM + _NO_OTHER_SUBJECT + rf"\s+and\s+(?:also\s+)?(?:an?\s+)?"
                rf"(?P<value>{_DIET})(?![\w\-])"
            ),
            _compile(
                rf"\b(?P<subj>i)(?:['’]ve|\s+have)?\s+{_ADVERBS}(?:went|gone|became|become|"
                rf"turned)\s+(?:an?\s+)?(?P<value>{_DIET})(?![\w\-])"
            ),
            _compile(
                rf"\b(?P<subj>i)(?:\s+{_ADVERBS}(?:follow|eat|keep)|['’]m\s+on|\s+am\s+on)\s+"
                rf"an?\s+(?:strict\s+|fully\s+)?(?P<value>{_DIET})\s+diet\b"
            ),
        ),
        _diet_word,
    ),
)

# "my favorite ice cream is X": the subject is 1–3 words (never "is"); the lazy repeat picks
# the first "is", so "my favorite song is Is This Love" keys on "song". The value runs to the
# end of the clause: a comma, ; : ! ? ( ) — –, a newline, or a period followed by a space or
# the end (so "3.5" and "Node.js" stay whole). Time words ("these days", "right now") are
# taken out of the subject afterwards, so the subject may hold up to three more words here.
_SUBJECT_WORD = r"(?!is\b)[^\W_]+(?:['’-][^\W_]+)*"  # "sci-fi", "e-mail", "mom's"
_CLAUSE = r"(?:[^,;:!?()\n\r—–.]|\.(?=\S))*"
_FAVORITE_QUALIFIER = r"(?:(?:current|new|latest|all-time|all\s+time|absolute|personal|own)\s+)?"
_TIME_PHRASE = "|".join(p.replace(" ", r"\s+") for p in FAVORITE_TIME_PHRASES)
_TIME_PHRASE_RE = _compile(rf"(?<!\S)(?:{_TIME_PHRASE})(?!\S)")
_FAVORITE_HEAD = (
    rf"\b(?P<subj>my)\s+{_FAVORITE_QUALIFIER}(?:favou?rite|preferred)\s+"
    rf"(?P<subject>{_SUBJECT_WORD}(?:[ \t]+{_SUBJECT_WORD}){{0,{MAX_FAVORITE_SUBJECT_WORDS + 2}}}?)"
)
FAVORITE_RE = _compile(
    _FAVORITE_HEAD
    # "is now forest green": a leading time word says when, not what (the filler cut only
    # removes fillers after the first value word).
    + rf"\s+is\s+(?:(?:now|currently|lately|nowadays|these\s+days|right\s+now|"
    rf"at\s+the\s+moment)\s+)?(?!no\s+longer\b)(?P<value>{_CLAUSE})"
)


def favorite_key(subject: str) -> str | None:
    """``favorite_<subject>`` with time words taken out ("band these days" → favorite_band)
    and British spellings made American ("colour" → favorite_color); None when no subject or
    more than three words remain."""
    words = _TIME_PHRASE_RE.sub(" ", subject).split()
    words = [AMERICAN_SPELLINGS.get(word.casefold(), word) for word in words]
    if not 1 <= len(words) <= MAX_FAVORITE_SUBJECT_WORDS:
        return None
    key = normalize_key(f"{FAVORITE_KEY_PREFIX} {' '.join(words)}")
    return key if key != FAVORITE_KEY_PREFIX else None


# -- cleaning ---------------------------------------------------------------------------------


def clean_value(raw: str) -> str | None:
    """Apply the §5.5 cleaning steps to a raw capture; None drops it.

    ``raw`` is a slice of the message, so "lowercase in the text" is judged on what the user
    typed.
    """
    value = _strip(raw)
    for index, word in enumerate(_CLEAN_WORD_RE.finditer(value)):
        token = word.group()
        if index > 0 and token in FILLER_WORDS:  # exact match, so only the lowercase form
            # Strip again: the cut can leave "teal," from "teal, by the way".
            value = _strip(value[: word.start()])
            break
    first = _CLEAN_WORD_RE.search(value)
    if first is None or _forbidden_first(first.group()):
        return None
    return value


def _forbidden_first(word: str) -> bool:
    """See FORBIDDEN_FIRST_WORDS: "the office" is no value, "The Hague" is."""
    lowered = word.lower()
    if lowered not in FORBIDDEN_FIRST_WORDS:
        return False
    return word == lowered or lowered not in NAME_STARTS


def _strip(value: str) -> str:
    return value.strip().rstrip(TRAILING_PUNCTUATION).strip()


def _clean_for(rule: Rule, raw: str) -> str | None:
    if rule.key == "employer":
        # "I work for the NHS": a lowercase "the" before a capitalised name is not part of
        # it (a lowercase "the" starts no value, §5.5 step 3, so the capture would drop).
        raw = re.sub(r"^\s*the\s+(?=(?-i:[A-Z]))", "", raw)
    value = clean_value(raw)
    if value is None:
        return None
    for index, word in enumerate(_CLEAN_WORD_RE.finditer(value)):
        if index > 0 and word.group() in rule.fillers:
            value = _strip(value[: word.start()])
            break
    first = _CLEAN_WORD_RE.search(value)
    if first is not None and first.group().casefold() in rule.not_first:
        return None
    if value.casefold() in rule.not_values:
        return None
    return value


# -- capture ----------------------------------------------------------------------------------


def _first_capture(rule: Rule, text: str) -> tuple[int, int, str] | None:
    """The earliest stated trigger in ``text`` whose value fits the rule's shape, as
    (start, end of the trigger, value)."""
    best: tuple[int, int, str] | None = None
    for pattern in rule.patterns:
        for match in itertools.islice(pattern.finditer(text), MAX_TRIGGERS):
            if best is not None and match.start() >= best[0]:
                break
            if not asserted(text, subject_start(match)):
                continue
            raw = rule.shape(text, match)
            if raw is not None:
                best = (match.start(), match.end(), raw)
                break
    return best


def capture_rules(text: str) -> list[tuple[str, str]]:
    """The ``(key, value)`` pairs the §5.5 rules capture from one user message, in text order.

    Each rule uses its first match; ``favorite_<subject>`` captures every match. When two
    captures share a key, the one earlier in the text wins. Only the first MAX_RULE_TEXT
    characters are read.
    """
    text = text[:MAX_RULE_TEXT]
    # (start, end of trigger, key, value): two captures from one subject ("I'm vegetarian
    # and allergic to soy") come in the order of their values.
    captures: list[tuple[int, int, str, str]] = []
    for rule in RULES:
        found = _first_capture(rule, text)
        if found is None:
            continue
        start, end, raw = found
        value = _clean_for(rule, raw)
        if value is not None:
            captures.append((start, end, rule.key, value))
    for match in itertools.islice(FAVORITE_RE.finditer(text), MAX_TRIGGERS):
        key = favorite_key(match.group("subject"))
        if key is None or not asserted(text, match.start()):
            continue
        value = clean_value(match.group("value"))
        if value is not None:
            captures.append((match.start(), match.start("value"), key, value))

    captures.sort(key=lambda capture: capture[:2])
    seen: set[str] = set()
    result: list[tuple[str, str]] = []
    for _, _, key, value in captures:
        if key not in seen:
            seen.add(key)
            result.append((key, value))
    return result
