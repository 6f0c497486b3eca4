"""Whether a trigger phrase states a fact of the user, as true now (issue 15).

A rule trigger ("I moved to", "I'm vegan") counts only where the user states it of
themselves: not in a hypothetical ("if I moved to Paris"), a question ("do I live in
Denver?"), a quote or someone else's words ("she said 'I'm from Ohio'"), a story, or under a
negation in the same clause ("I don't think I'm vegan"). Judged on the words before the
trigger's subject in its sentence, and on how the sentence ends.
"""

from __future__ import annotations

import re

# A sentence ends at ! ? or a newline, or a period followed by a space or the end.
_SENTENCE_BREAK_RE = re.compile(r"[!?\n]|\.(?=\s|$)")
_CLAUSE_BREAK_RE = re.compile(r"[,;:—–()]")
# Conjunctions end the reach of a negation: "I'm not sure, but I live in Denver".
_NEGATION_BREAK_RE = re.compile(r"[,;:—–()]|\b(?:but|and|so|because|though|although|cause)\b")
_TOKEN_RE = re.compile(r"[a-z]+(?:['’][a-z]+)?")
_OPEN_SINGLE_QUOTE_RE = re.compile(r"(?:^|(?<=[\s:(\[]))['‘](?=\w)")
_CLOSE_SINGLE_QUOTE_RE = re.compile(r"(?<=[\w.!?,])['’](?=[\s.,;:!?)\]]|$)")

# fmt: off
# In the same clause before the subject, these make the statement not (yet) true.
_HYPOTHETICAL_WORDS = frozenset({
    "if", "whether", "unless", "suppose", "supposing", "imagine", "imagining", "pretend",
    "pretending", "assume", "assuming", "hypothetically", "wish", "hope", "hoping", "dream",
    "dreamed", "dreamt", "maybe", "perhaps", "should", "would", "could", "might", "lets",
    "let's",
})
# Anywhere earlier in the sentence: a story, a game, a role.
_FICTION_WORDS = frozenset({
    "story", "game", "novel", "roleplay", "role-play", "fiction", "scenario", "character",
    "hypothetical", "dream", "pretend", "imagine",
})
_NEGATIONS = frozenset({
    "not", "never", "don't", "dont", "doesn't", "doesnt", "didn't", "didnt", "isn't",
    "wasn't", "aren't", "nor", "hardly", "don’t", "doesn’t", "didn’t", "isn’t", "wasn’t",
})
# A reporting verb not said by the user: "she said I'm from Ohio", "they think I'm vegan".
_REPORTING_VERBS = frozenset({
    "said", "says", "say", "told", "tells", "tell", "asked", "asks", "wrote", "writes",
    "thinks", "think", "thought", "believes", "believe", "claims", "claimed", "claim",
    "insists", "insisted", "replied", "replies", "answered", "texted", "tweeted", "posted",
    "goes", "assumes", "assumed", "guessed", "guesses", "joked", "jokes", "quote", "quoted",
    "saying", "telling", "writing", "thinking", "claiming", "believing", "assuming",
})
_FIRST_PERSON = frozenset({"i", "we", "me", "i'll", "i'd", "i've", "i'm", "i’ll", "i’d",
                           "i’ve", "i’m", "we've", "we’ve"})
# A sentence that starts with one of these and ends with "?" asks rather than states.
_QUESTION_STARTS = frozenset({
    "do", "does", "did", "is", "are", "am", "was", "were", "can", "could", "should",
    "would", "will", "shall", "may", "might", "must", "have", "has", "had", "what", "where",
    "when", "why", "how", "who", "which", "whose", "isn't", "aren't", "don't", "doesn't",
    "didn't", "won't", "wouldn't", "shouldn't", "can't", "couldn't", "haven't", "hasn't",
    "right", "really",
})
# Right before the subject, these make a question: "do I live in Denver".
_AUXILIARIES = _QUESTION_STARTS - {"what", "where", "when", "why", "how", "who", "which",
                                   "whose", "right", "really"}
# "Did I tell you I moved to Denver?": a question about telling still states the fact.
_TELLING_WORDS = frozenset({
    "tell", "told", "mention", "mentioned", "know", "knew", "remember", "recall", "forget",
    "forgot", "say", "said",
})
_MODALS = frozenset({"should", "would", "could", "might"})
_DISCLOSING_WORDS = _TELLING_WORDS | {
    "add", "note", "clarify", "remind", "admit", "confess", "mention", "point", "share",
}
# fmt: on

# How far around a trigger its sentence is read. Longer sentences are read in part: a
# message of any length costs time in proportion to its length (a check that read back to
# the sentence start cost 90 s on an 88 kB message with no sentence break that matched).
SENTENCE_WINDOW = 400


def asserted(text: str, pos: int) -> bool:
    """Whether the subject at ``pos`` states something of the user, as true now.

    False inside quotes, after another speaker's reporting verb, in a hypothetical or
    fiction, under a negation in the same clause, and in a question.
    """
    window_start = max(0, pos - SENTENCE_WINDOW)
    breaks = [m.end() for m in _SENTENCE_BREAK_RE.finditer(text, window_start, pos)]
    sentence_start = breaks[-1] if breaks else window_start
    prefix = text[sentence_start:pos]
    if _inside_quote(text, sentence_start, pos):
        return False
    tokens = _TOKEN_RE.findall(prefix.lower())
    if _FICTION_WORDS.intersection(tokens):
        return False
    for index, token in enumerate(tokens):
        if token in _REPORTING_VERBS and not _FIRST_PERSON.intersection(
            tokens[max(0, index - 2) : index]
        ):
            return False
    if _hypothetical(_TOKEN_RE.findall(_CLAUSE_BREAK_RE.split(prefix)[-1].lower())):
        return False
    near = _TOKEN_RE.findall(_NEGATION_BREAK_RE.split(prefix)[-1].lower())
    for index, token in enumerate(near):
        # "Don't forget I'm vegan": the negation is of forgetting.
        if token in _NEGATIONS and near[index + 1 : index + 2] not in (["forget"], ["you"]):
            return False
    if tokens and tokens[-1] in _AUXILIARIES:
        return False
    end = _SENTENCE_BREAK_RE.search(text, pos, pos + SENTENCE_WINDOW)
    if end is None or end.group() != "?":
        return True
    if _TELLING_WORDS.intersection(tokens):  # "Did I tell you I moved to Denver?"
        return True
    if tokens and tokens[0] in _QUESTION_STARTS:
        return False
    # "I'm not vegan anymore?" asks back; "I live in Denver, you?" states, then asks.
    return _CLAUSE_BREAK_RE.search(text, pos, end.start()) is not None


def _hypothetical(clause: list[str]) -> bool:
    """Whether the clause before the subject makes it hypothetical ("if I moved", "I would
    say I'm"), except a modal of telling ("I should mention I'm vegan")."""
    for index, token in enumerate(clause):
        if token not in _HYPOTHETICAL_WORDS:
            continue
        if token in _MODALS and _DISCLOSING_WORDS.intersection(clause[index + 1 :]):
            continue
        return True
    return False


def _inside_quote(text: str, start: int, pos: int) -> bool:
    """Whether ``pos`` lies inside a quotation opened after ``start``."""
    prefix = text[start:pos]
    if prefix.count('"') % 2:
        return True
    if prefix.rfind("“") > prefix.rfind("”"):
        return True
    # Searched up to one character past ``pos``: the opening quote's lookahead reads the
    # quoted word.
    opening = [m.start() for m in _OPEN_SINGLE_QUOTE_RE.finditer(text, start, pos + 1)]
    opening = [at for at in opening if at < pos]
    if opening:
        return not any(
            opening[-1] < m.start() < pos
            for m in _CLOSE_SINGLE_QUOTE_RE.finditer(text, start, pos + 1)
        )
    return False


def subject_start(match: re.Match[str]) -> int:
    if "subj" in match.re.groupindex and match.start("subj") >= 0:
        return match.start("subj")
    return match.start()
