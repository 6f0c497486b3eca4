"""Fact guards (SPEC §5.4): the checks every fact write passes before it can be stored.

``guard_fact`` normalises the key and runs eight checks in table order; the first failure is
the reason returned. Checks 1–3 apply to every source. Checks 4–8 catch the ways automatic
extraction goes wrong (transcript fragments as keys, random letters, the model describing
itself, "unknown" placeholders, text that gives the model instructions); explicit and import
writes skip them, because a person who says "allergies: none" means it.

``guard_lesson`` runs checks 8 and 9 (instructions, markup debris) on a lesson, whatever its
source: lessons are rendered into every prompt.

The module is pure: no I/O, no state. Quarantining a rejected write is the caller's job.
"""

from __future__ import annotations

import re
import unicodedata

from .text import em_fold, normalize_key, strip_controls

# Sources a write can come from (§5.3). Validating the source against this set is the write
# path's job (a bad one raises ConfigError there); the guard only decides which checks run.
SOURCES = frozenset({"explicit", "auto", "rule", "import", "merge"})

# What a person typed or imported is trusted; only checks 1–3 apply to it.
TRUSTED_SOURCES = frozenset({"explicit", "import"})
# Rule capture matches fixed phrases, so its keys are never gibberish; check 5 skips it.
GIBBERISH_CHECKED_SOURCES = frozenset({"auto", "merge"})

MAX_VALUE_LENGTH = 500

# A key is empty when nothing of it survives normalisation ("!!!", "", "  ").
REASON_EMPTY_KEY = "key has no letters or digits"
REASON_EMPTY = "empty value"
REASON_TOO_LONG = "value too long"
REASON_RESERVED = "reserved key"
REASON_TRANSCRIPT = "transcript key"
REASON_GIBBERISH = "gibberish key"
REASON_SELF_REFERENTIAL = "self-referential value"
REASON_PLACEHOLDER = "placeholder value"
REASON_INSTRUCTIONS = "instruction-like value"
REASON_FRAGMENT = "markup fragment"

# `<p>_<reserved>` is as reserved as `<reserved>`: "my_name" must not shadow a host key "name".
RESERVED_PREFIXES = frozenset(
    {"my", "your", "the", "agent", "assistant", "bot", "ai", "model", "system"}
)

# Key parts that mean the extractor stored a piece of the conversation, not a fact about it.
TRANSCRIPT_PARTS = frozenset(
    {"said", "says", "replied", "responded", "asked", "utterance", "dialogue", "conversation"}
)
SPEAKER_PARTS = frozenset({"user", "assistant", "you"})
MESSAGE_PARTS = frozenset({"message", "reply", "response", "exchange"})
TRANSCRIPT_PREFIX = "assistant"

# 'y' counts as a vowel so that sync, mysql, rhythm and myth pass.
VOWELS = frozenset("aeiouy")
MIN_GIBBERISH_LETTERS = 4

# Real words and abbreviations of four or more letters with no vowel (a, e, i, o, u, y).
# Parts with fewer than four letters are never checked, so "ssh", "tcp" or "dns" need no entry.
# Entries are matched against a whole key part, or the part with its digits removed
# ("http2" → "http").
# fmt: off
TECHNICAL_ALLOWLIST = frozenset(
    {
        # protocols and formats
        "html", "xhtml", "dhtml", "http", "https", "sftp", "ftps", "smtp", "smtps", "nntp",
        "sntp", "rtmp", "rtmps", "rtsp", "rtcp", "srtp", "sctp", "xmpp", "mqtt", "grpc", "dhcp",
        "hsts", "csrf", "pkcs", "xslt", "wsdl", "scss", "ntfs", "btrfs", "cifs",
        # tools, databases and hardware
        "pnpm", "llvm", "lldb", "pwsh", "fsck", "psql", "pgsql", "mssql", "plsql", "tsql",
        "dbms", "rdbms", "crdt", "mvvm", "nvme", "hdtv", "wqhd", "wlan", "ctrl", "bksp", "pgdn",
        # plurals of common three-letter abbreviations
        "ssds", "hdds", "pdfs", "dvds", "vpns", "sdks", "cdns",
        # everyday abbreviations people have facts about
        "mgmt", "blvd", "bldg", "adhd", "ptsd", "lgbt", "lgbtq", "gdpr", "tldr", "nsfw",
        "ttrpg",
    }
)
# fmt: on

# Phrases in which the model describes itself instead of the user (case-insensitive substring).
SELF_REFERENTIAL_PHRASES = (
    "ai agent",
    "language model",
    "i run on",
    "running locally",
    "ai assistant",
)

# A value that says "no value" (compared with the whole lowercased, stripped value).
PLACEHOLDER_VALUES = frozenset(
    {
        "unknown",
        "n/a",
        "na",
        "none",
        "null",
        "not specified",
        "not provided",
        "not sure",
        "unclear",
        "tbd",
        "?",
        "-",
    }
)


# Check 8: a value that addresses the model instead of describing the user. Captured
# automatically (a document the user pasted, a web page, a crafted message), such a value would
# be injected into every later prompt as a "fact", so it is quarantined instead. The patterns
# are deliberately narrow — an override verb aimed at earlier instructions, a demand to reveal
# the prompt, a role switch, chat-template tokens — so that facts such as "follows recipe
# instructions", "system administrator" or "forgets the rules of chess" still pass.
_OVERRIDE_VERB = r"(?:ignore|disregard|forget|override|bypass|skip)"
_FILLER = r"(?:(?:all|any|every|the|your|my|these|those|of|its)\s+)*"
INSTRUCTION_PATTERN = re.compile(
    rf"""
    \b{_OVERRIDE_VERB}\s+{_FILLER}
        (?:(?:previous|prior|above|earlier|preceding|former|original|system|safety)\s+)+
        (?:instructions?|prompts?|rules|directions|guidelines|messages|context)\b
    | \b{_OVERRIDE_VERB}\s+{_FILLER}(?:instructions?|prompts?|guidelines)\b
    | \b(?:new|updated|revised)\s+instructions?\s*:
    | \bsystem\s+prompt\s*:
    | \b(?:reveal|print|show|repeat|output|leak|display)\s+(?:\w+\s+){{0,2}}?
        (?:system\s+prompt|hidden\s+prompt|instructions)\b
    | \byou\s+are\s+now\s+(?:in\s+)?(?:a|an|the|my|dan|free|unrestricted|jailbroken|developer)\b
    | <\|[a-z_]{{2,32}}\|>
    | \[/?INST\]
    | <</?SYS>>
    | ^\s*\#{{2,}}\s*(?:instruction|system)\b
    """,
    re.IGNORECASE | re.VERBOSE | re.MULTILINE,
)


def guard_fact(
    raw_key: str, value: str, source: str, reserved_keys: frozenset[str] | set[str]
) -> tuple[str, str | None]:
    """Normalise ``raw_key`` and run the §5.4 checks for a write from ``source``.

    ``value`` is expected sanitised and stripped by the caller. ``reserved_keys`` are the
    host's reserved keys (normalised here too, so raw config values also work).

    Returns ``(normalised_key, reason)`` where ``reason`` is None when the write may
    proceed, else one of the ``REASON_*`` constants.
    """
    key = normalize_key(raw_key)
    reason = _first_failure(key, value, source, reserved_keys)
    return key, reason


def _first_failure(
    key: str, value: str, source: str, reserved_keys: frozenset[str] | set[str]
) -> str | None:
    if not key:
        return REASON_EMPTY_KEY
    if not value.strip():
        return REASON_EMPTY
    if len(value) > MAX_VALUE_LENGTH:
        return REASON_TOO_LONG
    if is_reserved_key(key, reserved_keys):
        return REASON_RESERVED
    if source in TRUSTED_SOURCES:
        return None
    if is_transcript_key(key):
        return REASON_TRANSCRIPT
    if source in GIBBERISH_CHECKED_SOURCES and is_gibberish_key(key):
        return REASON_GIBBERISH
    if is_self_referential(value):
        return REASON_SELF_REFERENTIAL
    if is_placeholder(value):
        return REASON_PLACEHOLDER
    if is_instruction_like(value) or is_instruction_like(key.replace("_", " ")):
        # The key too: it is listed in the prompt beside the value.
        return REASON_INSTRUCTIONS
    if is_markup_fragment(value):
        return REASON_FRAGMENT
    return None


def is_reserved_key(key: str, reserved_keys: frozenset[str] | set[str]) -> bool:
    """Check 3: ``key`` equals a reserved key or is ``<prefix>_<reserved key>``."""
    reserved = {normalize_key(k) for k in reserved_keys} - {""}
    if not reserved:
        return False
    if key in reserved:
        return True
    prefix, sep, rest = key.partition("_")
    return bool(sep) and prefix in RESERVED_PREFIXES and rest in reserved


def is_transcript_key(key: str) -> bool:
    """Check 4: the key names a piece of the conversation rather than a fact."""
    parts = set(key.split("_"))
    if parts & TRANSCRIPT_PARTS or key.startswith(TRANSCRIPT_PREFIX):
        return True
    return bool(parts & SPEAKER_PARTS) and bool(parts & MESSAGE_PARTS)


def is_gibberish_key(key: str) -> bool:
    """Check 5: some part has ≥ 4 letters, none of them a vowel, and is not allowlisted."""
    return any(_is_gibberish_part(part) for part in key.split("_"))


def _is_gibberish_part(part: str) -> bool:
    if part.isdigit():
        return False
    # Fold accents so "crème" is judged by its "e". Letters that stay non-ASCII belong to a
    # script without the Latin vowels (Cyrillic, CJK, ...); the check cannot judge those.
    folded = em_fold(part)
    letters = "".join(ch for ch in folded if ch.isalpha())
    if not letters.isascii() or len(letters) < MIN_GIBBERISH_LETTERS:
        return False
    if VOWELS.intersection(letters):
        return False
    return part not in TECHNICAL_ALLOWLIST and letters not in TECHNICAL_ALLOWLIST


def is_self_referential(value: str) -> bool:
    """Check 6: the value describes the assistant itself."""
    lowered = value.casefold()
    return any(phrase in lowered for phrase in SELF_REFERENTIAL_PHRASES)


def is_placeholder(value: str) -> bool:
    """Check 7: the whole value is a stand-in for "no value"."""
    return value.strip().lower() in PLACEHOLDER_VALUES


def is_markup_fragment(value: str) -> bool:
    """Check 9 (beyond §5.4): the value is debris of a reply's markup, not a fact: it has
    no letter or digit, opens a JSON object or array, or stops mid-structure. An LLM
    merge review that answered ``{"value": "Lyon",`` replaced the user's fact with that
    text (found by a soak); extraction replies are parsed, but a value can still be a
    piece of one."""
    text = value.strip()
    if not any(ch.isalnum() for ch in text):
        return True
    return text[0] == "{" or _JSON_ARRAY_START.match(text) is not None or text[-1] in ",:{["


# ``[`` then a JSON value's first character: an array, not a "[Q3] budget" label.
_JSON_ARRAY_START = re.compile(r'\[\s*[]["{\d-]')


def is_instruction_like(value: str) -> bool:
    """Check 8: the value gives the model instructions (a prompt-injection attempt).

    The text is also matched as a model reads it: rendering drops control characters, and
    zero-width characters, NUL's replacement character or full-width letters must not split
    or disguise the phrase past the pattern ("Ignore\u200b all previous instructions")."""
    if INSTRUCTION_PATTERN.search(value) is not None:
        return True
    if value.isascii() and value.isprintable():
        return False  # nothing to drop or fold: it reads as it is written
    read = _as_read(value)
    return read != value and INSTRUCTION_PATTERN.search(read) is not None


def _as_read(value: str) -> str:
    text = unicodedata.normalize("NFKC", strip_controls(value)).replace("\ufffd", " ")
    return "".join(ch for ch in text if unicodedata.category(ch) != "Cf")


def guard_lesson(text: str) -> str | None:
    """Checks 8 and 9 for a lesson (``text`` sanitised and stripped, not empty): the reason
    it is refused, or None. Every unarchived lesson is rendered into every prompt under
    LESSONS, so one that gives the model instructions would act on every later reply."""
    if is_instruction_like(text):
        return REASON_INSTRUCTIONS
    if is_markup_fragment(text):
        return REASON_FRAGMENT
    return None


def is_unsafe_llm_text(text: str) -> bool:
    """Checks 8 and 9 for what an LLM writes that is not a fact value yet reaches later
    prompts as it was written: entity names, relation types, cluster labels (graph
    context lists them verbatim)."""
    return is_instruction_like(text) or is_markup_fragment(text)
