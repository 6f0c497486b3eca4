"""What ``elastimem remember`` takes and says about a fact beyond the API's answer (and the
check that a search has something to search for).

- ``VALUE`` given as ``-`` is read from standard input (a long value, or one with
  newlines, without quoting it for the shell); the trailing newline ``echo`` adds is
  dropped.
- A key loses more than its case and spacing when normalised (``normalize_key`` keeps
  letters, digits and ``_``): "lieblings_café 🐶" is stored as ``lieblings_café``. That is
  the documented key form, the one ``facts`` and ``history`` show, so it is stored that way
  and a notice on stderr says which characters were dropped; nothing is stored under a key
  the user did not see.
- A refusal for length states the limit, as the HTTP API does.
"""

from __future__ import annotations

import re
import sys
import unicodedata

import click

from .guards import MAX_VALUE_LENGTH, REASON_TOO_LONG
from .text import MAX_KEY_LENGTH, normalize_key, sanitize

STDIN_MARK = "-"


def require_text(text: str, name: str) -> None:
    """A usage error (exit 2) for an empty or blank search text."""
    if not text.strip():
        raise click.UsageError(f'{name} is empty; say what to search for, e.g. "my dog"')


def read_value(value: str) -> str:
    """``value``, or standard input when it is ``-``."""
    if value != STDIN_MARK:
        return value
    return sys.stdin.read().rstrip("\r\n")


def key_notice(key: str) -> str | None:
    """A one-line notice when normalising ``key`` dropped characters or cut it, else None.

    Case, surrounding spaces and spaces or hyphens becoming ``_`` are the expected form
    and pass without a notice.
    """
    stored = normalize_key(key)
    spelled = unicodedata.normalize("NFKC", sanitize(key)).casefold().strip()
    spelled = re.sub(r"_+", "_", re.sub(r"[\s\-]+", "_", spelled)).strip("_")
    if spelled == stored:
        return None
    dropped = "".join(dict.fromkeys(c for c in spelled if not (c == "_" or c.isalnum())))
    why = []
    if dropped:
        why.append(f"keys keep letters, digits and _ (dropped: {dropped})")
    if len(spelled) > MAX_KEY_LENGTH:
        why.append(f"keys hold at most {MAX_KEY_LENGTH} characters")
    return f"note: the key {key!r} is stored as {stored!r}: " + "; ".join(why or ["normalised"])


def refusal(reason: str, value: str) -> str:
    """The CLI's words for a refused fact: the guard's reason, with the limit for a length."""
    if reason == REASON_TOO_LONG:
        return (
            f"{reason}: a fact value holds at most {MAX_VALUE_LENGTH} characters, this one "
            f"has {len(value)}"
        )
    return reason
