"""The command line on a PostgreSQL server: ``--db postgresql://… --user ID`` (issue #18).

The commands run against the test session's server, addressed as the application role, whose
address carries a password that no output may show. Most run in-process through click's
runner (a subprocess costs seconds of imports each); the real console script checks the
environment variables, the usage error and the messages of a failed connection.
"""

from __future__ import annotations

import json
import os
import urllib.parse
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import elastimem
from elastimem import cli
from tests.cli.test_cli import run, run_json
from tests.rows import connect


@pytest.fixture(autouse=True)
def _no_user_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ELASTIMEM_USER", raising=False)


def _user() -> str:
    return f"cli-{os.urandom(5).hex()}"


def _password(url: str) -> str:
    password = urllib.parse.urlsplit(url).password
    assert password  # the application role logs in with one: the tests check it stays hidden
    return password


def _visible(done: Any) -> str:
    """Everything a command printed, on both streams."""
    return done.stdout.decode() + done.stderr.decode()


class _Done:
    """A finished in-process command, shaped like ``subprocess.CompletedProcess``."""

    def __init__(self, result: Any) -> None:
        self.returncode = result.exit_code
        self.stdout = result.stdout_bytes
        self.stderr = result.stderr_bytes


def invoke(*args: str, input: bytes | None = None) -> _Done:
    return _Done(CliRunner().invoke(cli.main, list(args), input=input))


def invoke_json(*args: str, **kw: Any) -> Any:
    done = invoke(*args, **kw)
    assert done.returncode == 0, _visible(done)
    return json.loads(done.stdout)


def _pg(url: str, user: str, *args: str, **kw: Any) -> _Done:
    return invoke("--db", url, "--user", user, *args, **kw)


def _pg_json(url: str, user: str, *args: str, **kw: Any) -> Any:
    return invoke_json("--db", url, "--user", user, *args, **kw)


@pytest.fixture
def seeded(postgres_url: str) -> str:
    """A user with a session of turns, a remembered fact and a lesson."""
    user = _user()
    with elastimem.open(postgres_url, user_id=user, disable_builtin_embedder=True) as mem:
        mem.begin_session("chat", at="2026-03-01T10:00:00")
        mem.record_turn("My dog Biscuit loves hiking in the hills", "Noted!")
        mem.record_turn("I live in Lisbon now", "Nice city.")
        mem.end_session()
        mem.remember("favorite_color", "teal")
        mem.add_lesson("Answer in one sentence.")
        mem.drain(timeout=30)
    return user


# -- the main commands -------------------------------------------------------------------------


def test_the_read_commands_show_the_users_store(postgres_url: str, seeded: str) -> None:
    facts = _pg_json(postgres_url, seeded, "facts")
    assert facts["favorite_color"] == "teal"
    assert facts["location"] == "Lisbon"
    history = _pg_json(postgres_url, seeded, "history", "favorite_color")
    assert [v["value"] for v in history] == ["teal"]
    hits = _pg_json(postgres_url, seeded, "recall", "hiking with the dog")
    assert hits and "Biscuit" in hits[0]["text"]
    explained = _pg_json(postgres_url, seeded, "explain", "hiking dog")
    assert explained["hits"][0]["text"] == hits[0]["text"]
    timeline = _pg_json(postgres_url, seeded, "timeline", "where do I live?")
    assert timeline["key"] == "location"
    sessions = _pg_json(postgres_url, seeded, "sessions")
    assert [s["host_tag"] for s in sessions] == ["chat"]
    assert _pg_json(postgres_url, seeded, "lessons") == ["Answer in one sentence."]
    stats = _pg_json(postgres_url, seeded, "stats")
    assert stats["facts"] == 2 and stats["sessions"] == 1 and stats["lessons"] == 1
    assert stats["path"].startswith("postgresql://")
    plan = _pg_json(postgres_url, seeded, "--format", "json", "context",
                    "weekend plans with the dog?")  # fmt: skip
    assert "teal" in plan["rendered"]
    dot = _pg(postgres_url, seeded, "graph")
    assert dot.returncode == 0, dot.stderr.decode()
    assert dot.stdout.decode().startswith("digraph elastimem")
    html = _pg(postgres_url, seeded, "graph", "--as", "html")
    assert html.returncode == 0 and b"<svg" in html.stdout


def test_write_commands_change_only_that_users_store(postgres_url: str, seeded: str) -> None:
    other = _user()
    done = _pg_json(postgres_url, other, "remember", "pet", "cat")
    assert done == {"changed": True, "reason": "stored", "key": "pet"}
    assert _pg_json(postgres_url, other, "facts") == {"pet": "cat"}
    assert "pet" not in _pg_json(postgres_url, seeded, "facts")

    assert _pg_json(postgres_url, other, "forget", "pet") == {"forgotten": True}
    assert _pg_json(postgres_url, other, "facts") == {}
    erased = _pg_json(postgres_url, seeded, "erase", "--key",
                      "favorite_color", "--yes")  # fmt: skip
    assert erased["facts"] == 1
    assert "favorite_color" not in _pg_json(postgres_url, seeded, "facts")
    nothing = _pg(postgres_url, seeded, "forget", "favorite_color")
    assert nothing.returncode == 1


def test_export_then_import_moves_a_user_between_backends(
    postgres_url: str, seeded: str, tmp_path: Path
) -> None:
    dump = tmp_path / "alice.jsonl"
    exported = _pg_json(postgres_url, seeded, "export", str(dump))
    assert exported["facts"] == 2
    # Into an SQLite file (which then belongs to that user)...
    local = str(tmp_path / "local.db")
    invoke_json("--db", local, "import", str(dump))
    assert invoke_json("--db", local, "facts") == _pg_json(postgres_url, seeded, "facts")
    assert invoke("--db", local, "--user", "someone-else", "facts").returncode == 1
    # ...and from a user's file into that user's new store on the server, through a pipe.
    moved = _user()
    mine = str(tmp_path / "mine.db")
    invoke_json("--db", mine, "--user", moved, "remember", "pet", "cat")
    piped = invoke("--db", mine, "export", "-").stdout
    assert _pg_json(postgres_url, moved, "import", "-", input=piped)["facts"] == 1
    assert _pg_json(postgres_url, moved, "facts") == {"pet": "cat"}
    # Another user's export is refused; nothing of it is stored.
    stranger = _user()
    refused = _pg(postgres_url, stranger, "import", str(dump))
    assert refused.returncode == 1
    assert f"the export belongs to user {seeded!r}" in refused.stderr.decode()
    assert _pg_json(postgres_url, stranger, "sessions") == []


def test_the_environment_variables_name_the_server_and_the_user(
    postgres_url: str, seeded: str
) -> None:
    env = {"ELASTIMEM_DB": postgres_url, "ELASTIMEM_USER": seeded}
    assert run_json("facts", env=env)["favorite_color"] == "teal"  # the real script
    # --user wins over the variable.
    other = _user()
    assert run_json("--user", other, "remember", "pet", "cat", env=env)["changed"] is True
    assert _pg_json(postgres_url, other, "facts") == {"pet": "cat"}


def test_path_shows_the_server_and_the_user_without_the_password(postgres_url: str) -> None:
    done = _pg(postgres_url, "alice", "path")
    assert done.returncode == 0
    shown = done.stdout.decode().strip()
    parts = urllib.parse.urlsplit(postgres_url)
    assert shown == (
        f"postgresql://{parts.username}@{parts.hostname}:{parts.port}{parts.path} (user alice)"
    )
    assert _password(postgres_url) not in _visible(done)


# -- usage errors and stores that do not exist -------------------------------------------------


@pytest.mark.parametrize("args", [["facts"], ["remember", "color", "teal"], ["path"], ["stats"]])
def test_a_postgresql_address_without_a_user_is_a_usage_error(
    postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ELASTIMEM_USER", raising=False)
    done = invoke("--db", postgres_url, *args)
    assert done.returncode == 2, _visible(done)
    assert "--user" in done.stderr.decode() and "ELASTIMEM_USER" in done.stderr.decode()
    assert _password(postgres_url) not in _visible(done)
    assert list(tmp_path.iterdir()) == []  # nothing made locally (no ./postgresql:/… folder)


@pytest.mark.parametrize("user", ["", "../alice", "a/b", "x" * 200])
def test_an_invalid_user_is_a_usage_error(postgres_url: str, user: str) -> None:
    done = invoke("--db", postgres_url, "--user", user, "facts")
    assert done.returncode == 2, _visible(done)
    assert "Error: --user: user_id=" in done.stderr.decode()
    assert _password(postgres_url) not in _visible(done)


@pytest.mark.parametrize(
    "args",
    [["facts"], ["stats"], ["recall", "dog"], ["history", "x"], ["forget", "x"],
     ["erase", "--key", "x", "--yes"], ["sessions"], ["export", "-"], ["graph"], ["reindex"]],
)  # fmt: skip
def test_a_user_without_a_store_is_an_error_and_nothing_is_created(
    postgres_url: str, args: list[str]
) -> None:
    user = _user()
    done = _pg(postgres_url, user, *args)
    assert done.returncode == 1, _visible(done)
    err = done.stderr.decode()
    assert f"there is no elastimem store for user {user!r}" in err
    # In the command line's words, not the Python API's (issue 27).
    assert "create=" not in err and "remember KEY VALUE" in err
    assert _password(postgres_url) not in _visible(done)
    with pytest.raises(elastimem.StoreError):  # still none: the command created nothing
        elastimem.open(postgres_url, user_id=user, create=False, disable_builtin_embedder=True)


def test_remember_creates_the_users_store(postgres_url: str) -> None:
    user = _user()
    assert _pg(postgres_url, user, "facts").returncode == 1
    _pg_json(postgres_url, user, "remember", "color", "teal")
    assert _pg_json(postgres_url, user, "facts") == {"color": "teal"}


def test_no_message_shows_the_password(postgres_url: str, seeded: str) -> None:
    password = _password(postgres_url)
    parts = urllib.parse.urlsplit(postgres_url)
    wrong_port = postgres_url.replace(f":{parts.port}/", ":1/")
    wrong_db = urllib.parse.urlunsplit(parts._replace(path="/no_such_database"))
    runs: list[Any] = [
        _pg(postgres_url, seeded, "-v", "stats"),
        _pg(postgres_url, seeded, "-v", "facts"),
        _pg(postgres_url, seeded, "-v", "recall", "dog"),
        _pg(postgres_url, seeded, "export", "-"),
        _pg(postgres_url, seeded, "erase", "--key", "nothing", "--yes"),
        _pg(postgres_url, _user(), "facts"),
        run("--db", wrong_port, "--user", seeded, "facts"),  # the real script
        _pg(wrong_db, seeded, "remember", "a", "b"),
        invoke("--db", postgres_url, "facts"),
        _pg(postgres_url, seeded, "import", "-", input=b"not an export\n"),
    ]
    for done in runs:
        assert password not in _visible(done), _visible(done)
    assert [d.returncode for d in runs] == [0, 0, 0, 0, 1, 1, 1, 1, 2, 1]
    assert "postgresql://" in runs[6].stderr.decode()  # says where it could not connect


def test_another_scheme_is_refused_without_showing_its_password(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli.main, ["--db", "mysql://app:s3cret@h/db", "facts"])
    assert result.exit_code == 1
    assert "mysql://… is an address, not a file path" in result.output
    assert "s3cret" not in result.output


# -- a file with --user ------------------------------------------------------------------------


def test_user_on_a_file_records_and_checks_its_owner(tmp_path: Path) -> None:
    db = str(tmp_path / "alice.db")
    invoke_json("--db", db, "--user", "alice", "remember", "color", "teal")
    with connect(db) as conn:
        assert conn.execute("SELECT value FROM meta WHERE key = 'user_id'").fetchone() == ("alice",)
    assert invoke_json("--db", db, "--user", "alice", "facts") == {"color": "teal"}
    done = invoke("--db", db, "--user", "bob", "facts")
    assert done.returncode == 1
    assert "alice" in done.stderr.decode() and "bob" in done.stderr.decode()
    assert invoke_json("--db", db, "facts") == {"color": "teal"}  # no --user: no check


# -- demo --------------------------------------------------------------------------------------


def test_demo_keeps_its_temporary_store_when_the_environment_names_a_server(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ELASTIMEM_DB", postgres_url)
    monkeypatch.delenv("ELASTIMEM_USER", raising=False)
    done = invoke("demo", "--no-embedder")
    assert done.returncode == 0, _visible(done)
    assert "temporary, deleted afterwards" in done.stdout.decode()
    assert _password(postgres_url) not in _visible(done)


def test_demo_on_a_server_fills_a_new_users_store(postgres_url: str) -> None:
    user = _user()
    done = _pg(postgres_url, user, "demo", "--no-embedder")
    assert done.returncode == 0, _visible(done)
    out = done.stdout.decode()
    assert "Biscuit" in out and f"--user {user} recall" in out
    assert _password(postgres_url) not in _visible(done)
    assert _pg_json(postgres_url, user, "stats")["sessions"] == 3


def test_demo_on_a_server_refuses_a_user_with_other_memories(
    postgres_url: str, seeded: str
) -> None:
    done = _pg(postgres_url, seeded, "demo", "--no-embedder")
    assert done.returncode == 1, _visible(done)
    assert "already holds memories that are not the demo" in done.stderr.decode()
    assert _password(postgres_url) not in _visible(done)
    assert _pg_json(postgres_url, seeded, "stats")["sessions"] == 1


# -- serve-mcp ---------------------------------------------------------------------------------


def test_serve_mcp_without_a_user_is_a_usage_error(postgres_url: str) -> None:
    pytest.importorskip("mcp", reason="serve-mcp needs the extra elastimem[mcp]")
    done = invoke("--db", postgres_url, "serve-mcp", "--no-embedder")
    assert done.returncode == 2, _visible(done)
    assert "--user" in done.stderr.decode()


def test_serve_mcp_serves_the_users_store(postgres_url: str, tmp_path: Path) -> None:
    pytest.importorskip("mcp", reason="serve-mcp needs the extra elastimem[mcp]")
    anyio = pytest.importorskip("anyio")
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    from tests.service.test_mcp import payload, server_command

    user = _user()
    command = server_command(postgres_url)
    command[command.index("serve-mcp") : command.index("serve-mcp")] = ["--user", user]

    async def calls() -> Any:
        params = StdioServerParameters(
            command=command[0], args=command[1:], env={**os.environ, "PYTHONIOENCODING": "utf-8"}
        )
        async with stdio_client(params, errlog=errlog) as (read, write):  # noqa: SIM117
            async with ClientSession(read, write) as session:
                await session.initialize()
                await session.call_tool("remember", {"key": "pet", "value": "cat"})
                return payload(await session.call_tool("facts", {}))

    with (tmp_path / "stderr.log").open("w+") as errlog:
        facts = anyio.run(calls)
        errlog.seek(0)
        logged = errlog.read()
    assert facts == {"pet": "cat"}
    assert _password(postgres_url) not in logged
    assert _pg_json(postgres_url, user, "facts") == {"pet": "cat"}
