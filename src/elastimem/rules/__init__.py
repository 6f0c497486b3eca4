"""Rule capture (SPEC §5.5): profile facts read from fixed phrases in the user's own words,
with no LLM, on every turn at every tier.

- ``capture``: the rules, their value shapes and cleaning; ``capture_rules``.
- ``endings``: statements that a fact has ended; ``find_endings`` and ``retired_keys``.
- ``context``: whether a trigger is stated by the user, as true now.
- ``words``: the word lists the three use.

The package is pure: no I/O, no state, nothing imported from the rest of elastimem but
``text``. Writing captures (source "rule") and retiring ended facts is the caller's job.
"""

from __future__ import annotations

from .capture import (
    CALL_ME_STOPLIST,
    FORBIDDEN_FIRST_WORDS,
    NAME_STARTS,
    capture_rules,
    clean_value,
)
from .endings import Ending, ending_keys, ends, find_endings, names_part_of, retired_keys

__all__ = [
    "CALL_ME_STOPLIST",
    "FORBIDDEN_FIRST_WORDS",
    "NAME_STARTS",
    "Ending",
    "capture_rules",
    "clean_value",
    "ending_keys",
    "ends",
    "find_endings",
    "names_part_of",
    "retired_keys",
]
