"""``elastimem serve``: memory as an HTTP service (REST and MCP), one store per user.

Layout, one idea per module; each imports only the ones above it in this list and, from the
rest of elastimem, ``aio`` (the stores), ``web`` (the inspector, mounted at ``/ui``),
``users``, ``errors``, ``clock``, ``text`` (fact keys as stored), ``mcp_server`` (the tools)
and ``storage`` (which backend an address names, and the start check of a PostgreSQL server).
Nothing outside this package imports it, except ``cli`` for the command and ``cli_keys`` for
the keys file:

- ``keys``: the keys of ``KEYS.json`` (scrypt-hashed, or plain tokens of the first format):
  ``KeyRing.lookup(token)`` gives the key's ``Principal`` (user, scope, label) or None.
- ``limits``: per-key token buckets (``--rate-limit``).
- ``deadlines``: uvicorn's HTTP protocol with a deadline for a request's headers.
- ``pool``: open stores per user, an LRU with a bound; a store in use is never closed; the
  TARGET (a folder, or a PostgreSQL address) checked at start.
- ``rest``: the ``/v1`` endpoints, their argument checks and the OpenAPI document (built from
  the same table, so it cannot drift from the routes).
- ``mcp_http``: the ``serve-mcp`` tools over streamable HTTP at ``/mcp``, each call on the
  caller's own store.
- ``app``: the ASGI app: authentication, scopes, rate limits, body limit and deadline, errors
  as JSON, lifespan.
- ``command``: the ``serve`` click command and uvicorn (SIGTERM drains, SIGHUP reloads keys).

Starlette and uvicorn come with the ``server`` extra; they are imported on first use only.
"""
