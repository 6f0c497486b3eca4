"""The core install needs no agent framework: importing elastimem and its integrations
package loads none (issue #28); each adapter module imports its framework itself."""

from __future__ import annotations

import json
import subprocess
import sys

FRAMEWORKS = ("agents", "google.adk", "langgraph", "langchain", "llama_index")


def test_importing_the_integrations_package_loads_no_framework() -> None:
    code = (
        "import json, sys, elastimem, elastimem.integrations\n"
        f"frameworks = {FRAMEWORKS!r}\n"
        "print(json.dumps(sorted(m for m in sys.modules\n"
        "    if any(m == f or m.startswith(f + '.') for f in frameworks))))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert json.loads(out.stdout) == []
