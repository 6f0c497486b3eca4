"""The README's offline examples for LangGraph and LlamaIndex run as they are."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.mark.embedder
@pytest.mark.slow
@pytest.mark.parametrize(
    ("script", "framework", "shows"),
    [("langgraph_agent.py", "langgraph", "Green curry without peanuts"),
     ("llamaindex_memory.py", "llama_index", "My sister Ana lives in Lisbon")],
)  # fmt: skip
def test_example_runs_offline(script: str, framework: str, shows: str) -> None:
    pytest.importorskip(framework)
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / script)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert shows in done.stdout
