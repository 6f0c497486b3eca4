"""An export as the store it goes into would take it (tests of export and import)."""

from __future__ import annotations

import json
from typing import Any

from tests.rows import is_postgres


def for_target(lines: list[str], target: Any) -> list[str]:
    """An export's lines as the target's user would have written them.

    A file store records no user until it imports one, so an export goes into any new file
    as it is. A store on PostgreSQL records its user from its open (every user of a test
    shares the database), so an export is moved to it with its owner row naming that user:
    what differs is only the owner field, as in a move between backends (issue #18)."""
    if not is_postgres(target):
        return lines
    out = []
    for line in lines:
        obj = json.loads(line) if line.startswith('{"table":"meta"') else None
        if obj is not None and obj["row"].get("key") == "user_id":
            obj["row"]["value"] = target.user_id
            line = json.dumps(obj, separators=(",", ":"), ensure_ascii=False) + "\n"
        out.append(line)
    return out


def moved_to(data: bytes, target: Any) -> bytes:
    """``for_target`` of a whole export held in memory."""
    lines = [line + "\n" for line in data.decode("utf-8").split("\n")[:-1]]
    return "".join(for_target(lines, target)).encode("utf-8")
