"""The web inspector: see, search and correct what a store remembers, in a browser.

A Starlette app of server-rendered pages on top of the facade's public async API
(``AsyncElastimem``): nothing here reads the database or imports the layers below the facade.
``elastimem ui`` serves it for one store's owner on loopback; ``elastimem serve`` mounts it at
``/ui/`` for the user of every key, who signs in with that key.

Layout, one idea per module; each imports only those above it in this list:

- ``signin``: browser sessions (an HttpOnly, SameSite=Strict cookie naming a server-side
  record), their CSRF tokens, expiry and sign-out; the one place a key is looked up.
- ``pages``: the route handlers, each reading the store and handing plain values to its
  template; every change is a POST checked against the session's CSRF token.
- ``app``: the ASGI app: security headers (a Content-Security-Policy without inline
  script), the Host check on loopback, templates and static files.

Templates (Jinja2, autoescaped) and static files (CSS, one small script that shows dates in
the reader's local time) are package data: no Node, no CDN, nothing from the network.
Starlette, Jinja2 and python-multipart come with the ``server`` extra.
"""
