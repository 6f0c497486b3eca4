"""The core install imports no agent framework: ``import elastimem`` and the integrations
package load none; each adapter module loads only its own framework."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

FRAMEWORKS = ("langgraph", "langchain", "langchain_core", "langmem", "llama_index")


def loaded_after(*modules: str) -> list[str]:
    code = (
        "import importlib, json, sys\n"
        f"for name in {list(modules)!r}: importlib.import_module(name)\n"
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    return [name for name in json.loads(done.stdout) if name in FRAMEWORKS]


def test_the_core_and_the_integrations_package_import_no_framework() -> None:
    assert loaded_after("elastimem", "elastimem.integrations", "elastimem.aio") == []


@pytest.mark.parametrize(
    ("module", "framework"),
    [("elastimem.integrations.langgraph", "langgraph"),
     ("elastimem.integrations.llamaindex", "llama_index")],
)  # fmt: skip
def test_each_adapter_loads_only_its_framework(module: str, framework: str) -> None:
    pytest.importorskip(framework)
    loaded = loaded_after(module)
    assert framework in loaded
    others = {"langgraph": {"llama_index"}, "llama_index": {"langgraph", "langchain"}}[framework]
    assert not others & set(loaded)
