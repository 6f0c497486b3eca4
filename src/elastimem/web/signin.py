"""Browser sessions of the inspector: who the browser is, and the CSRF token of its forms.

A session is a random 256-bit id in a cookie (HttpOnly, SameSite=Strict, Secure when the
page came over TLS) naming a record kept in this process only: the user it is signed in as
(None before sign-in), its CSRF token and its expiry. A restart signs everyone out, which
is the safe direction. Sign-in replaces the session id (no fixation); sign-out deletes it.

Under ``serve`` a user signs in with a bearer key of the keys file; the key is looked up in
one place (``KeyGate.user_for``), compared in constant time by the ``KeyRing``, kept with the
session in this process only (each request checks it again, so a revoked key signs its
browsers out) and never written, logged or echoed back.
"""

from __future__ import annotations

import hmac
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field

COOKIE = "elastimem_ui"
# Eight hours: a working day, after which the key is asked for again.
LIFETIME_S = 8 * 3600
# Sessions not signed in yet (a sign-in form was shown) are kept for an hour at most; the
# bound keeps a flood of form loads from growing the table without limit.
ANONYMOUS_LIFETIME_S = 3600
MAX_SESSIONS = 10_000

# Key scopes, weakest first (as the service's keys file names them).
SCOPES = ("read", "write", "admin")


@dataclass
class BrowserSession:
    id: str
    user_id: str | None
    csrf: str
    expires: float
    # The key it signed in with, kept in this process only, so that every request checks it
    # again: a key removed from the keys file (and reloaded) ends its sessions at once.
    key: str | None = field(default=None, repr=False)
    # What the key may do (read < write < admin); the store's owner under `elastimem ui`
    # without a keys file may do everything.
    scope: str = "admin"

    def allows(self, needed: str) -> bool:
        return SCOPES.index(self.scope) >= SCOPES.index(needed)


class Sessions:
    """The browser sessions of one app, in memory."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._by_id: dict[str, BrowserSession] = {}

    def get(self, session_id: str | None) -> BrowserSession | None:
        if not session_id:
            return None
        found = self._by_id.get(session_id)
        if found is None:
            return None
        if found.expires <= self._clock():
            del self._by_id[session_id]
            return None
        return found

    def start(
        self, user_id: str | None, key: str | None = None, scope: str = "admin"
    ) -> BrowserSession:
        self._prune()
        lifetime = LIFETIME_S if user_id is not None else ANONYMOUS_LIFETIME_S
        session = BrowserSession(
            secrets.token_urlsafe(32), user_id, secrets.token_urlsafe(32),
            self._clock() + lifetime,
            key, scope,
        )  # fmt: skip
        self._by_id[session.id] = session
        return session

    def end(self, session_id: str) -> None:
        self._by_id.pop(session_id, None)

    def _prune(self) -> None:
        now = self._clock()
        if len(self._by_id) < MAX_SESSIONS:
            return
        for sid in [s for s, v in self._by_id.items() if v.expires <= now]:
            del self._by_id[sid]
        if len(self._by_id) >= MAX_SESSIONS:  # still full: drop the oldest anonymous ones
            anonymous = sorted((v.expires, s) for s, v in self._by_id.items() if v.user_id is None)
            for _, sid in anonymous[: len(anonymous) // 2 + 1]:
                del self._by_id[sid]


def csrf_ok(session: BrowserSession | None, given: object) -> bool:
    """Whether a form's token is the session's (constant-time)."""
    if session is None or not isinstance(given, str) or not given:
        return False
    return hmac.compare_digest(given.encode(), session.csrf.encode())


class KeyGate:
    """Who may sign in with which key: a ``KeyRing`` lookup, optionally limited to one user."""

    def __init__(self, keys: object, only_user: str | None = None) -> None:
        self._keys = keys
        self._only_user = only_user

    def access_for(self, key: str) -> tuple[str, str] | None:
        """(user, scope) of a key, or None. Any scope signs in; each change asks for its own
        (``app.post``): read keys look, write keys also edit, admin keys also erase and
        import, as on the REST API."""
        key = key.strip()
        if not key:
            return None
        # The one call site of the key ring's lookup (see the module docstring).
        principal = self._keys.lookup(key)  # type: ignore[attr-defined]
        if principal is None:
            return None
        user_id = principal.user
        if user_id is None or (self._only_user is not None and user_id != self._only_user):
            return None
        scope = getattr(principal, "scope", "admin")
        return str(user_id), scope if scope in SCOPES else "read"

    def user_for(self, key: str) -> str | None:
        access = self.access_for(key)
        return access[0] if access else None
