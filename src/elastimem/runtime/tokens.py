"""Token estimates for one store instance: the host's tokenizer, else a length estimate.

A host tokenizer that fails or returns something other than a non-negative int is given up
for the rest of the instance's life (logged once, by exception type only: its text can quote
what it was given), and the built-in ``max(1, len // 4)`` estimate is used instead.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from ..memory import episodic

logger = logging.getLogger("elastimem")


class TokenEstimate:
    """Counts tokens with the host's ``tokenizer`` while it works."""

    def __init__(self, tokenizer: Callable[[str], int] | None) -> None:
        self.tokenizer = tokenizer
        self.failed = False

    def est(self, text: str) -> int:
        """Token estimate: the host's tokenizer, else ``max(1, len // 4)`` (0 for "")."""
        if self.tokenizer is not None and not self.failed:
            try:
                value = self.tokenizer(text)
                if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
                    return value
                raise TypeError(f"returned {value!r}, not a non-negative int")
            except Exception as exc:
                self.failed = True
                # The type only: a host exception's text can quote the text it was given.
                logger.warning(
                    "tokenizer_fn failed (%s); using len(text)//4 from now on",
                    type(exc).__name__,
                )
        return episodic.length_estimate(text)

    def chunk_estimator(self) -> episodic.Estimator:
        """``est``, or the built-in estimate itself when no host tokenizer is in use, which
        lets chunking measure lengths instead of calling an estimator per candidate."""
        if self.tokenizer is None or self.failed:
            return episodic.length_estimate
        return self.est
