"""The installable wheel: ``python -m build`` from the checkout, ``twine check``, what the wheel
holds (all of the package, its data files included; no tests or benchmarks), that the
``server`` extra pulls no development tool, and the wheel installed with its dependencies into
a fresh virtual environment (no system site-packages), run from outside the checkout with no
PYTHONPATH: ``elastimem demo`` and a recall."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DEV_TOOLS = (
    "pytest",
    "hypothesis",
    "ruff",
    "mypy",
    "pgserver",
    "build",
    "twine",
    "opentelemetry-sdk",
)


def run(*cmd: str | Path, cwd: Path | None = None, env: dict[str, str] | None = None) -> str:
    done = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=900)  # fmt: skip
    assert done.returncode == 0, f"{cmd}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def package_files() -> set[str]:
    """Every file of the package in the checkout, as a wheel names it."""
    src = ROOT / "src"
    return {
        p.relative_to(src).as_posix()
        for p in (src / "elastimem").rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
    }


@pytest.mark.slow
def test_the_wheel_installs_into_a_fresh_venv_and_runs(tmp_path: Path) -> None:
    pytest.importorskip("build", reason="the wheel test needs the dev extra (build)")
    dist = tmp_path / "dist"
    run(sys.executable, "-m", "build", "--outdir", dist, ROOT)
    wheel = next(dist.glob("elastimem-*.whl"))
    sdist = next(dist.glob("elastimem-*.tar.gz"))
    run(sys.executable, "-m", "twine", "check", "--strict", wheel, sdist)

    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        metadata = Parser().parsestr(
            archive.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
        )
    assert package_files() <= names, sorted(package_files() - names)
    assert "elastimem/data/demo_conversation.json" in names
    assert not [n for n in names if n.startswith(("tests/", "benchmarks/")) or "/tests/" in n]
    server = [
        r for r in metadata.get_all("Requires-Dist") or []
        if re.search(r"extra == [\"']server[\"']", r)
    ]  # fmt: skip
    assert any(r.startswith("prometheus-client") for r in server)
    assert not [r for r in server if r.split(";")[0].strip().startswith(DEV_TOOLS)], server

    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", venv)  # no --system-site-packages: only what pip puts in
    python, elastimem = venv / "bin" / "python", venv / "bin" / "elastimem"
    # What "pip install elastimem[server]" would install, dependencies of dependencies too.
    report = tmp_path / "server.json"
    run(python, "-m", "pip", "install", "--quiet", "--dry-run", "--ignore-installed",
        "--report", report, f"{wheel}[server]")  # fmt: skip
    pulled = {
        re.sub(r"[-_.]+", "-", i["metadata"]["name"]).lower()
        for i in json.loads(report.read_text())["install"]
    }
    assert {"starlette", "uvicorn", "prometheus-client"} <= pulled
    assert not pulled & set(DEV_TOOLS), sorted(pulled & set(DEV_TOOLS))
    run(python, "-m", "pip", "install", "--quiet", wheel)
    away = tmp_path / "elsewhere"
    away.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["HOME"] = str(away)
    where = run(python, "-c", "import elastimem; print(elastimem.__file__)", cwd=away, env=env)
    assert Path(where.strip()).is_relative_to(venv) and not Path(where.strip()).is_relative_to(ROOT)
    shown = run(elastimem, "demo", "--db", "demo.db", cwd=away, env=env)
    assert "Biscuit" in shown
    hits = json.loads(run(elastimem, "--db", "demo.db", "recall", "What is my dog called?",
                          cwd=away, env=env))  # fmt: skip
    assert any("Biscuit" in hit["text"] for hit in hits)
