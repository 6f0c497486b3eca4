"""A deadline for a request's headers: uvicorn's HTTP protocol, closing a slow connection.

uvicorn closes an idle keep-alive connection after ``timeout_keep_alive``, but a client
that opens a connection and sends its headers a byte at a time (slowloris) holds it for as
long as it likes. This protocol gives each request ``seconds`` from the moment the
connection opens (or the previous response ends) to finish its headers, and closes the
connection otherwise. The body has its own deadline in the app (a 408).
"""

from __future__ import annotations

import asyncio
from typing import Any


def header_deadline_protocol(seconds: float) -> type[asyncio.Protocol]:
    """uvicorn's h11 protocol with the header deadline (pass it as ``Config(http=...)``)."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class HeaderDeadlineProtocol(H11Protocol):
        _deadline: asyncio.TimerHandle | None = None

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._arm()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
            super().connection_lost(exc)

        def _arm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
            self._deadline = self.loop.call_later(seconds, self._expire, self.cycle)

        def _expire(self, cycle: Any) -> None:
            # Still the cycle of when the deadline was set: no new request's headers came.
            if self.cycle is cycle and not self.transport.is_closing():
                self.transport.close()

    return HeaderDeadlineProtocol
