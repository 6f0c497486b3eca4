"""Issue 27's first-hour gaps in the command line: an empty query, emoji, a key that loses
characters, a value from stdin, the length limit, the default store's folder (and a store
at the old default kept in use), and the CLI's reproduction with the real model: facts
remembered from the command line, then found by meaning with ``recall``."""

from __future__ import annotations

import json
import os
from pathlib import Path

import click
import pytest

from elastimem import cli_paths
from tests.cli.test_cli import run, run_json


@pytest.mark.parametrize("command", ["recall", "explain"])
@pytest.mark.parametrize("query", ["", "   "])
def test_an_empty_query_is_a_usage_error(command: str, query: str, tmp_path: Path) -> None:
    db = str(tmp_path / "e.db")
    run_json("--db", db, "remember", "pet", "dog")
    done = run("--db", db, command, query)
    assert done.returncode == 2 and done.stdout == b""
    assert "QUERY is empty" in done.stderr.decode()


def test_recall_of_an_emoji_finds_the_fact_that_holds_it(tmp_path: Path) -> None:
    db = str(tmp_path / "e.db")
    run_json("--db", db, "remember", "lunch", "ramen 🍜 twice a week")
    run_json("--db", db, "remember", "color", "teal")
    hits = run_json("--db", db, "recall", "🍜", "--kind", "fact")
    assert [h["text"] for h in hits] == ["lunch: ramen 🍜 twice a week"]


def test_a_key_that_loses_characters_says_so_and_a_plain_one_does_not(tmp_path: Path) -> None:
    """Decided: the documented key form (letters, digits, _) is kept, so facts and history
    show what was stored; the dropped characters are named on stderr, exit 0."""
    db = str(tmp_path / "k.db")
    done = run("--db", db, "remember", "lieblings_café 🐶", "Café Central")
    assert done.returncode == 0, done.stderr.decode()
    assert json.loads(done.stdout)["key"] == "lieblings_café"
    err = done.stderr.decode()
    assert "stored as 'lieblings_café'" in err and "dropped: 🐶" in err
    plain = run("--db", db, "remember", "Favorite Color", "teal")
    assert plain.returncode == 0 and plain.stderr == b""
    assert run_json("--db", db, "facts") == {
        "lieblings_café": "Café Central",
        "favorite_color": "teal",
    }


def test_remember_reads_the_value_from_stdin_and_states_the_length_limit(tmp_path: Path) -> None:
    db = str(tmp_path / "s.db")
    notes = "first line\nsecond line with “quotes” and 🍜\n"
    done = run("--db", db, "remember", "notes", "-", input=notes.encode())
    assert done.returncode == 0, done.stderr.decode()
    assert run_json("--db", db, "facts") == {"notes": notes.rstrip("\n")}
    too_long = run("--db", db, "remember", "essay", "-", input=b"x" * 501)
    assert too_long.returncode == 1
    assert "at most 500 characters, this one has 501" in too_long.stderr.decode()
    assert "essay" not in run_json("--db", db, "facts")


def test_the_default_store_is_in_the_platforms_data_folder(isolated_env: Path) -> None:
    data = isolated_env / ".local" / "share"  # conftest: XDG_DATA_HOME
    assert run("path").stdout.decode().strip() == str(data / "elastimem" / "memory.db")
    moved = isolated_env / "elsewhere"
    done = run("path", env={"XDG_DATA_HOME": str(moved)})
    assert done.stdout.decode().strip() == str(moved / "elastimem" / "memory.db")
    run_json("remember", "color", "teal")
    assert (data / "elastimem" / "memory.db").exists()
    assert not Path(click.get_app_dir("elastimem"), "memory.db").exists()


def test_a_store_at_the_old_default_keeps_being_found_and_used(isolated_env: Path) -> None:
    """Before issue 27 the default was ~/.config/elastimem/memory.db: an upgrade must not
    answer from a new, empty store in the data folder."""
    old = Path(click.get_app_dir("elastimem"), "memory.db")
    assert str(old).startswith(str(isolated_env / ".config"))
    old.parent.mkdir(parents=True)
    run_json("--db", str(old), "remember", "pet", "a dog called Biscuit")
    done = run("path")
    assert done.stdout.decode().strip() == str(old)
    assert "earlier versions" in done.stderr.decode()
    assert run_json("facts") == {"pet": "a dog called Biscuit"}
    run_json("remember", "color", "teal")  # written there, not into a new store
    assert run_json("--db", str(old), "facts") == {"pet": "a dog called Biscuit", "color": "teal"}
    assert not Path(cli_paths.data_dir(), "memory.db").exists()


@pytest.mark.embedder
@pytest.mark.slow
def test_facts_remembered_on_the_command_line_are_found_by_meaning(tmp_path: Path) -> None:
    """Before: `recall "what am I allergic to?"` answered [] and explain said no_embedder,
    because the CLI used the model only on stores holding chunk vectors of it."""
    for name in ("onnxruntime", "tokenizers", "onnx"):
        pytest.importorskip(name)
    db = str(tmp_path / "f.db")
    run_json("--db", db, "remember", "allergies", "peanuts")
    run_json("--db", db, "remember", "employer", "Acme Corp")
    env = {"ELASTIMEM_CACHE_DIR": os.environ["ELASTIMEM_CACHE_DIR"]}
    hits = run_json("--db", db, "recall", "what am I allergic to?", env=env, timeout=120)
    assert hits and hits[0]["text"] == "allergies: peanuts"
    hits = run_json("--db", db, "recall", "which company pays my salary?", env=env, timeout=120)
    assert hits and hits[0]["text"] == "employer: Acme Corp"
    explained = run_json("--db", db, "explain", "what am I allergic to?", env=env, timeout=120)
    assert explained["vector_leg"] == "used"
    assert run_json("--db", db, "stats")["embedded_facts"] == 2
