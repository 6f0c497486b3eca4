"""The installed package's version, read once on first use (base layer: any layer may ask).

``importlib.metadata`` costs ~0.1 s of a start that most processes never need, so nothing
reads it at import time.
"""

from __future__ import annotations

import functools


@functools.cache
def package_version() -> str:
    """The version pip installed, or ``0.0.0+dev`` when running from a source tree."""
    from importlib import metadata

    try:
        return metadata.version("elastimem")
    except metadata.PackageNotFoundError:
        return "0.0.0+dev"
