"""The ``elastimem`` command line (SPEC §8.1).

Most tests run the real console script in a subprocess, the way a user does; click's
``CliRunner`` is used where in-process access helps (every command's help, a host embedder
for ``reindex``).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

import elastimem
from elastimem import cli, cli_paths, cli_tables
from tests.conftest import HashEmbedder
from tests.rows import connect

SPEC_COMMANDS = {
    "stats",
    "recall",
    "explain",
    "facts",
    "history",
    "remember",
    "forget",
    "erase",
    "sessions",
    "export",
    "import",
    "reindex",
    "graph",
    "serve-mcp",
    "serve",
    "demo",
    "path",
    "timeline",
    "lessons",
    "context",
    "ui",
    "keys",
    "backup",  # the operator's commands (cli_ops)
    "restore",
    "verify",
    "encrypt",  # issue 31: cli_crypt
    "decrypt",
    "rekey",
}


def script() -> list[str]:
    """The installed console script, else the module (same entry point)."""
    found = shutil.which("elastimem", path=str(Path(sys.executable).parent))
    return [found] if found else [sys.executable, "-m", "elastimem.cli"]


def run(
    *args: str, input: bytes | None = None, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[bytes]:
    full_env = {**os.environ, "PYTHONIOENCODING": "utf-8", **(env or {})}
    return subprocess.run(
        [*script(), *args],
        input=input,
        capture_output=True,
        env=full_env,
        timeout=timeout,
        stdin=None if input is not None else subprocess.DEVNULL,
    )


def run_json(*args: str, **kw: Any) -> Any:
    done = run(*args, **kw)
    assert done.returncode == 0, done.stderr.decode()
    return json.loads(done.stdout)


@pytest.fixture
def db(tmp_path: Path) -> str:
    return str(tmp_path / "cli.db")


# -- help --------------------------------------------------------------------------------------


def test_the_command_set_is_the_spec_table() -> None:
    assert set(cli.main.commands) == SPEC_COMMANDS


@pytest.mark.parametrize("name", sorted(SPEC_COMMANDS))
def test_every_command_has_help_ending_with_an_example(name: str) -> None:
    command = cli.main.commands[name]
    assert command.help and len(command.help.split("\n", 1)[0]) > 10
    paragraphs = [p.strip() for p in command.help.strip().split("\n\n")]
    example = paragraphs[-1].replace("\b", "").strip()
    assert example.startswith("Example:"), name
    assert "elastimem" in example.split("Example:", 1)[1]
    for flag in ("-h", "--help"):
        result = CliRunner().invoke(cli.main, [name, flag])
        assert result.exit_code == 0, result.output
        description = result.output.split("\nOptions:")[0].rstrip()
        assert description.endswith(example.splitlines()[-1].strip()), name


def test_help_and_version_through_the_real_script() -> None:
    done = run("-h")
    assert done.returncode == 0
    out = done.stdout.decode()
    assert "Example:" in out
    for name in SPEC_COMMANDS:
        assert name in out
    assert "--include-facts" in run("erase", "-h").stdout.decode()
    version = run("--version").stdout.decode()
    assert version.strip() == f"elastimem {elastimem.__version__}"


# -- data commands through the real script -----------------------------------------------------


@pytest.mark.slow  # ten runs of the real script
def test_fact_commands_and_exit_codes(db: str) -> None:
    assert run_json("--db", db, "remember", "favorite color", "teal") == {
        "changed": True,
        "reason": "stored",
        "key": "favorite_color",
    }
    assert run_json("--db", db, "remember", "favorite_color", "green")["changed"] is True
    assert run_json("--db", db, "facts") == {"favorite_color": "green"}
    history = run_json("--db", db, "history", "favorite_color")
    assert [v["value"] for v in history] == ["teal", "green"]
    assert set(history[0]) >= {"id", "key", "value", "valid_from", "invalidated_at", "source"}
    hits = run_json("--db", db, "recall", "green", "--kind", "fact")
    assert hits[0]["text"] == "favorite_color: green"
    assert set(hits[0]) == {
        "kind",
        "text",
        "date",
        "score",
        "session_id",
        "id",
        "created_at",
        "first_msg_id",
        "last_msg_id",
    }
    assert run_json("--db", db, "forget", "favorite_color") == {"forgotten": True}
    # Nothing left to forget: exit 1, still a JSON answer.
    again = run("--db", db, "forget", "favorite_color")
    assert again.returncode == 1 and json.loads(again.stdout) == {"forgotten": False}
    table = run("--db", db, "--format", "table", "history", "favorite_color").stdout.decode()
    assert table.splitlines()[0].split()[:3] == ["id", "value", "valid_from"]
    assert "teal" in table and "green" in table
    stats = run_json("--db", db, "--tier", "lite", "stats")
    assert stats["tier"] == "lite" and stats["fact_versions"] == 2 and stats["facts"] == 0


def test_errors_exit_1_with_the_message_on_stderr(tmp_path: Path, db: str) -> None:
    folder = tmp_path / "a-folder"
    folder.mkdir()
    done = run("--db", str(folder), "stats")
    assert done.returncode == 1
    assert done.stdout == b""
    assert "is a folder" in done.stderr.decode() and "Traceback" not in done.stderr.decode()
    export = tmp_path / "x.jsonl"
    export.write_text("not an export\n")
    bad = run("--db", db, "import", str(export))
    assert bad.returncode == 1 and "line 1" in bad.stderr.decode()
    assert not Path(db).exists()  # the failed import removed the store it had created
    run_json("--db", db, "remember", "color", "teal")
    # A bad option value is a usage error (§8.1: exit 2), with its message.
    bad_time = run("--db", db, "recall", "x", "--since", "not a date")
    assert bad_time.returncode == 2 and "since" in bad_time.stderr.decode()


@pytest.mark.parametrize(
    "args",
    [
        ["no-such-command"],
        ["recall"],
        ["remember", "only-key"],
        ["--format", "xml", "stats"],
        ["--tier", "huge", "stats"],
        ["recall", "x", "-k", "many"],
        ["recall", "x", "-k", "-3"],  # these answered [] with exit 0
        ["explain", "x", "-k", "0"],
        ["sessions", "-n", "-1"],
        ["recall", "x", "--kind", "vector"],
        ["erase"],
        ["erase", "--key", "a", "--session", "1"],
        ["erase", "--key", "a", "--include-facts", "--yes"],
        ["erase", "--key", "a"],  # no TTY and no --yes
        ["graph", "--as", "png"],
    ],
)
def test_usage_errors_exit_2(args: list[str]) -> None:
    result = CliRunner().invoke(cli.main, ["--db", ":memory:", *args])
    assert result.exit_code == 2, result.output


def test_usage_error_exit_2_through_the_real_script(db: str) -> None:
    run_json("--db", db, "remember", "secret", "value")
    done = run("--db", db, "erase", "--key", "secret")  # stdin is not a terminal
    assert done.returncode == 2
    assert "--yes" in done.stderr.decode()
    assert run_json("--db", db, "facts") == {"secret": "value"}  # nothing was erased


def test_erase_asks_on_a_terminal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = str(tmp_path / "e.db")
    with elastimem.Elastimem(db, disable_builtin_embedder=True) as mem:
        mem.remember("secret", "value")
        mem.record_turn("hello", "hi")
    runner = CliRunner()
    monkeypatch.setattr(cli, "_stdin_is_tty", lambda: True)
    declined = runner.invoke(cli.main, ["--db", db, "erase", "--key", "secret"], input="n\n")
    assert declined.exit_code == 1 and "Aborted" in declined.output
    accepted = runner.invoke(cli.main, ["--db", db, "erase", "--key", "secret"], input="y\n")
    assert accepted.exit_code == 0, accepted.output
    assert "Permanently erase fact key 'secret'" in accepted.output
    counts = json.loads(accepted.output[accepted.output.index("{") :])
    assert counts["facts"] == 1 and counts["fact_keys"] == 1
    result = runner.invoke(
        cli.main, ["--db", db, "erase", "--session", "1", "--include-facts", "--yes"]
    )
    assert result.exit_code == 0 and json.loads(result.output)["messages"] == 2


def test_erase_through_the_real_script(db: str) -> None:
    run_json("--db", db, "remember", "secret", "zqxjvorblax")
    counts = run_json("--db", db, "erase", "--key", "secret", "--yes")
    assert counts["facts"] == 1
    assert b"zqxjvorblax" not in Path(db).read_bytes()
    nothing = run("--db", db, "erase", "--session", "99", "--yes")
    assert nothing.returncode == 1 and json.loads(nothing.stdout)["sessions"] == 0
    assert "nothing to erase: no session 99" in nothing.stderr.decode()


def test_path_shows_the_file_a_symlink_opens(tmp_path: Path) -> None:
    real = tmp_path / "real.db"
    link = tmp_path / "link.db"
    link.symlink_to(real)
    assert run("--db", str(link), "path").stdout.decode().strip() == str(real)


def test_another_programs_database_is_refused_and_left_unchanged(tmp_path: Path) -> None:
    """A mistyped --db turned another app's SQLite file into a store: elastimem's tables
    added, its own "messages" table rebuilt."""
    other = tmp_path / "app.db"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE messages (id INTEGER PRIMARY KEY, body TEXT)")
        conn.execute("INSERT INTO messages (body) VALUES ('hello')")
    before = other.read_bytes()
    done = run("--db", str(other), "stats")
    assert done.returncode == 1 and "another program" in done.stderr.decode()
    assert other.read_bytes() == before


def test_export_writes_into_pipes_and_through_symlinks(tmp_path: Path, db: str) -> None:
    """The temp file renamed over the target replaced a FIFO, a device node (as root,
    /dev/null for the whole machine) or a symlink with a plain file."""
    run_json("--db", db, "remember", "color", "teal")
    real = tmp_path / "real.jsonl"
    real.write_text("old")
    link = tmp_path / "link.jsonl"
    link.symlink_to(real)
    assert run("--db", db, "export", str(link)).returncode == 0
    assert link.is_symlink() and real.read_text().startswith('{"format"')
    if hasattr(os, "mkfifo"):
        fifo = tmp_path / "out.fifo"
        os.mkfifo(fifo)
        reader = subprocess.Popen(["cat", str(fifo)], stdout=subprocess.PIPE)
        assert run("--db", db, "export", str(fifo)).returncode == 0
        out, _ = reader.communicate(timeout=30)
        assert out.startswith(b'{"format"') and fifo.exists() and not fifo.is_file()


def test_export_to_a_reader_that_stops_early_is_no_error(tmp_path: Path, db: str) -> None:
    with elastimem.Elastimem(db, disable_builtin_embedder=True) as mem:
        for i in range(300):
            mem.record_turn(f"turn {i} " + "words " * 200, "ok")
    proc = subprocess.Popen(
        [*script(), "--db", db, "export", "-"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONIOENCODING": "utf-8"},
    )
    assert proc.stdout is not None
    proc.stdout.read(100)
    proc.stdout.close()  # like `| head -c 100`
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0 and b"Error" not in err and b"Traceback" not in err


def test_table_columns_line_up_with_wide_characters(db: str) -> None:
    run_json("--db", db, "remember", "都市名前", "東京")
    run_json("--db", db, "remember", "color", "teal")
    rows = run("--db", db, "--format", "table", "facts").stdout.decode().splitlines()
    starts = {
        cli_tables.text_width(line[: line.index(v)])
        for line in rows
        for v in ("東京", "teal")
        if v in line
    }
    assert len(rows) == 2 and len(starts) == 1, rows  # both values start in one column


def test_demo_with_an_unreachable_llm_says_so_at_once(tmp_path: Path) -> None:
    """Every background job failed and was retried: the demo sat silent for ~90 s."""
    started = time.monotonic()
    done = run("demo", "--no-embedder", "--llm-url", "http://127.0.0.1:9/v1", timeout=60)
    assert done.returncode == 1 and time.monotonic() - started < 30
    assert "cannot use the LLM at http://127.0.0.1:9/v1" in done.stderr.decode()


def test_sessions_explain_and_default_path(tmp_path: Path) -> None:
    env = {"ELASTIMEM_DB": str(tmp_path / "env.db")}
    assert run("path", env=env).stdout.decode().strip() == str(tmp_path / "env.db")
    # What path shows is what opens: ~ expanded, made absolute.
    shown = run("--db", "x.db", "path", env=env).stdout.decode().strip()
    assert shown == os.path.abspath("x.db")
    tilde = run("path", env={"ELASTIMEM_DB": "~/agent.db"}).stdout.decode().strip()
    assert tilde == os.path.expanduser("~/agent.db")
    empty = run("--db", "", "path")
    assert empty.returncode == 2 and "--db is empty" in empty.stderr.decode()
    default = run("path").stdout.decode().strip()
    assert default == os.path.join(cli_paths.data_dir(), "memory.db")
    with elastimem.Elastimem(env["ELASTIMEM_DB"], disable_builtin_embedder=True) as mem:
        mem.begin_session("cli-test")
        mem.record_turn("We hiked at Multnomah Falls with the dog.", "Sounds lovely.")
        mem.end_session()
    rows = run_json("sessions", "-n", "5", env=env)
    assert rows[0]["host_tag"] == "cli-test" and rows[0]["message_count"] == 2
    explained = run_json("explain", "hiking with the dog", "-k", "3", env=env)
    assert explained["query"] == "hiking with the dog"
    assert explained["hits"] and set(explained["chunk_breakdowns"][0]) >= {"fts", "total"}


@pytest.mark.slow  # ten runs of the real script
def test_export_import_round_trip_and_pipes(tmp_path: Path) -> None:
    source = str(tmp_path / "source.db")
    with elastimem.Elastimem(source, disable_builtin_embedder=True) as mem:
        mem.record_turn("I live in Lisbon and love pastéis de nata.", "Delicious!")
        mem.remember("pet", "cat")
    backup = tmp_path / "backup.jsonl"
    counts = run_json("--db", source, "export", str(backup))
    assert counts["sessions"] == 1 and counts["facts"] == 2  # location (rule) and pet
    restored = str(tmp_path / "restored.db")
    done = run("--db", restored, "import", str(backup))
    assert done.returncode == 0, done.stderr.decode()
    assert json.loads(done.stdout) == counts
    assert "Importing" in done.stderr.decode()
    assert run_json("--db", restored, "facts") == {"location": "Lisbon", "pet": "cat"}
    # A second import into the now non-empty store fails cleanly.
    again = run("--db", restored, "import", str(backup))
    assert again.returncode == 1 and "already holds" in again.stderr.decode()
    # `-` is stdout for export and stdin for import.
    piped = run("--db", source, "export", "-")
    assert piped.returncode == 0 and piped.stdout.startswith(b'{"format":"elastimem-export"')
    assert "exported" in piped.stderr.decode()
    third = str(tmp_path / "third.db")
    loaded = run("--db", third, "import", "-", input=piped.stdout)
    assert loaded.returncode == 0, loaded.stderr.decode()
    hits = run_json("--db", third, "recall", "pastéis", "--kind", "chunk")
    assert "pastéis de nata" in hits[0]["text"]


def test_graph_export(tmp_path: Path, db: str) -> None:
    graph_view = pytest.importorskip("elastimem.graph.view", reason="graph_view not built yet")
    if not all(hasattr(graph_view, n) for n in ("render_dot", "render_html")):
        pytest.skip("elastimem.graph.view has no render_dot/render_html yet")
    with elastimem.Elastimem(db, disable_builtin_embedder=True) as mem:
        now = "2025-01-01T00:00:00.000000Z"
        with connect(mem) as conn:
            conn.execute(
                "INSERT INTO graph_nodes (type, canonical_name, created_at, updated_at) "
                "VALUES ('person', 'ana \"<b>\"', ?, ?)",
                (now, now),
            )
            conn.execute(
                "INSERT INTO graph_edges (source_node, target_node, relationship, created_at, "
                "last_seen) SELECT (SELECT id FROM graph_nodes WHERE type = 'self'), id, "
                "'sister_of', ?, ? FROM graph_nodes WHERE type = 'person'",
                (now, now),
            )
    dot = run("--db", db, "graph")
    assert dot.returncode == 0, dot.stderr.decode()
    text = dot.stdout.decode()
    assert "digraph elastimem" in text and "(you)" in text and 'label="sister of"' in text
    assert b"empty" not in dot.stderr
    out = tmp_path / "graph.html"
    page = run("--db", db, "graph", "-o", str(out))  # the extension picks the format
    assert page.returncode == 0 and page.stdout == b""
    assert "(html)" in page.stderr.decode()
    html = out.read_text("utf-8")
    assert html.startswith("<!DOCTYPE html>")
    assert "&lt;b&gt;" in html and "<b>" not in html.split("<body", 1)[-1].split("</style>")[-1]
    assert "http://" not in html and "https://" not in html.replace("http://www.w3.org", "")


def test_graph_of_a_store_without_an_llm_says_how_it_is_built(tmp_path: Path) -> None:
    db = str(tmp_path / "plain.db")
    assert run("--db", db, "remember", "city", "Chicago").returncode == 0
    dot = run("--db", db, "graph")
    assert dot.returncode == 0 and b"digraph elastimem" in dot.stdout
    assert b"built by an LLM (--llm-url" in dot.stderr
    out = tmp_path / "g.dot"
    forced = run("--db", db, "graph", "--as", "dot", "-o", str(out))
    assert forced.returncode == 0 and out.read_text("utf-8").startswith("digraph")
    page = tmp_path / "g.HTM"
    assert run("--db", db, "graph", "-o", str(page)).returncode == 0
    assert 'data-empty="1"' in page.read_text("utf-8")


def test_demo_output(tmp_path: Path) -> None:
    kept = tmp_path / "demo.db"
    done = run("demo", "--no-embedder", "--db", str(kept), timeout=120)
    assert done.returncode == 0, done.stderr.decode()
    out = done.stdout.decode()
    for heading in (
        "Facts learned",
        "recall('What is my dog called?')",
        "build_context('Any ideas for a weekend trip with my dog?').render()",
        "WHAT YOU KNOW ABOUT THE USER",
    ):
        assert heading in out
    assert "name" in out and "Maya" in out and "Biscuit" in out
    assert "Traceback" not in done.stderr.decode()
    assert kept.exists()
    # Without --db the store is temporary: nothing is left behind in the app folder.
    temp = run("demo", "--no-embedder", timeout=120)
    assert temp.returncode == 0 and "temporary" in temp.stdout.decode()
    assert not Path(click.get_app_dir("elastimem"), "memory.db").exists()
    assert not Path(cli_paths.default_db_path()).exists()


@pytest.mark.slow
@pytest.mark.embedder
def test_demo_with_the_builtin_embedder() -> None:
    pytest.importorskip("sentence_transformers")
    done = run("demo", timeout=600, env={"COLUMNS": "80"})
    assert done.returncode == 0, done.stderr.decode()
    out = done.stdout.decode()
    assert "(9 with vectors)" in out
    # The right answer first, whole at 80 columns (issue 26: "…a border collie named…").
    dog = out.split("recall('What is my dog called?')")[1].split("  2. ")[0]
    assert "Biscuit" in dog and "…" not in dog
    hike = out.split("recall('Where did I go hiking?')")[1].split("  2. ")[0]
    assert "Multnomah" in hike


# -- reindex -------------------------------------------------------------------------------------


def test_reindex_drives_a_progress_bar(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = str(tmp_path / "r.db")
    with elastimem.Elastimem(db, disable_builtin_embedder=True) as mem:
        for i in range(70):
            mem.record_turn(f"turn {i} about gardening", "ok")
    original = cli.CliState.store

    def with_host_embedder(self: cli.CliState, **kw: Any) -> Any:
        return original(self, embedder=HashEmbedder(), **kw)

    monkeypatch.setattr(cli.CliState, "store", with_host_embedder)
    result = CliRunner().invoke(cli.main, ["--db", db, "reindex"])
    assert result.exit_code == 0, result.output
    assert "Embedding" in result.output  # the bar's label (no TTY: printed once)
    assert json.loads(result.output[result.output.index("{") :]) == {"reindexed": 70}


def test_reindex_without_an_embedder_says_so(db: str, monkeypatch: pytest.MonkeyPatch) -> None:
    original = cli.CliState.store

    def without_embedder(self: cli.CliState, **kw: Any) -> Any:
        kw["builtin_embedder"] = False  # as if the `embed` extra were not installed
        return original(self, **kw)

    monkeypatch.setattr(cli.CliState, "store", without_embedder)
    elastimem.Elastimem(db, disable_builtin_embedder=True).close()  # reindex needs a store
    result = CliRunner().invoke(cli.main, ["--db", db, "reindex"])
    assert result.exit_code == 0, result.output
    assert "no usable embedder" in result.output
    assert json.loads(result.output[result.output.index("{") :]) == {"reindexed": 0}


# -- serve-mcp without the extra -------------------------------------------------------------------


def test_serve_mcp_without_the_extra_names_it(tmp_path: Path, db: str) -> None:
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    (shadow / "mcp.py").write_text("raise ImportError('No module named mcp')\n")
    env = {"PYTHONPATH": str(shadow) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    done = run("--db", db, "serve-mcp", env=env)
    assert done.returncode == 1
    assert "elastimem[mcp]" in done.stderr.decode()
    assert done.stdout == b""


# -- Ctrl-C --------------------------------------------------------------------------------------


def _big_export(path: Path, messages: int) -> int:
    """A valid export with one session and many messages and chunks; returns its row count."""
    now = "2025-01-01T00:00:00.000000Z"
    rows = 0
    with path.open("w", encoding="utf-8") as out:
        out.write(
            json.dumps(
                {
                    "format": "elastimem-export",
                    "format_version": 1,
                    "schema_version": 4,
                    "exported_at": now,
                    "library_version": "test",
                    "embedding_model": None,
                }
            )
            + "\n"
        )
        out.write(
            json.dumps(
                {
                    "table": "sessions",
                    "row": {"id": 1, "started_at": now, "ended_at": now, "message_count": messages},
                }
            )
            + "\n"
        )
        rows += 1
        for i in range(1, messages + 1):
            out.write(
                json.dumps(
                    {
                        "table": "messages",
                        "row": {
                            "id": i,
                            "session_id": 1,
                            "turn": i,
                            "role": "user",
                            "content": f"message {i} about gardens, tomatoes and bicycles",
                            "created_at": now,
                        },
                    }
                )
                + "\n"
            )
        for i in range(1, messages + 1):
            out.write(
                json.dumps(
                    {
                        "table": "chunks",
                        "row": {
                            "id": i,
                            "session_id": 1,
                            "first_msg_id": i,
                            "last_msg_id": i,
                            "text": f"User: message {i} about gardens, tomatoes and bicycles",
                            "created_at": now,
                        },
                    }
                )
                + "\n"
            )
        rows += 2 * messages
        out.write(json.dumps({"table": "_end", "rows": rows}) + "\n")
    return rows


@pytest.mark.slow
def test_ctrl_c_during_import_leaves_the_store_consistent(tmp_path: Path) -> None:
    export = tmp_path / "big.jsonl"
    _big_export(export, 40_000)
    target = tmp_path / "target.db"
    # An existing empty store (an import that fails into a new path removes what it made).
    elastimem.open(str(target), disable_builtin_embedder=True).close()
    proc = subprocess.Popen(
        [*script(), "--db", str(target), "import", str(export)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
    )
    assert proc.stderr is not None
    seen = b""
    deadline = time.monotonic() + 60
    while b"Importing" not in seen and time.monotonic() < deadline:
        seen += proc.stderr.read1(256)  # the bar's label appears with the first progress call
    time.sleep(0.3)
    proc.send_signal(signal.SIGINT)
    _out, err = proc.communicate(timeout=60)
    interrupted = proc.returncode != 0
    assert "Traceback" not in err.decode()
    conn = sqlite3.connect(target)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
        messages = conn.execute("SELECT count(*) FROM messages").fetchone()[0]
        chunks = conn.execute("SELECT count(*) FROM chunks").fetchone()[0]
    finally:
        conn.close()
    if interrupted:
        assert proc.returncode == 1 and "Aborted" in err.decode()
        assert (messages, chunks) == (0, 0)  # untouched ...
        done = run("--db", str(target), "import", str(export), timeout=120)
        assert done.returncode == 0, done.stderr.decode()  # ... and still importable
    else:  # the machine finished first: then everything is there
        assert (messages, chunks) == (40_000, 40_000)
    stats = run_json("--db", str(target), "stats")
    assert stats["messages"] == stats["chunks"] == 40_000
    hits = run_json("--db", str(target), "recall", "message 39999", "-k", "1")
    assert hits and "39999" in hits[0]["text"]


# -- the CLI never harms or invents a file --------------------------------------------------------


def listing(folder: Path) -> dict[str, tuple[bytes, int]]:
    return {
        str(p.relative_to(folder)): (p.read_bytes() if p.is_file() else b"", p.stat().st_mtime_ns)
        for p in sorted(folder.rglob("*"))
    }


def test_a_text_file_given_as_the_store_is_refused_untouched(tmp_path: Path) -> None:
    """`elastimem --db notes.db stats` renamed the user's notes to notes.db.corrupt-… and
    answered with the stats of a fresh store, exit 0."""
    notes = tmp_path / "notes.db"
    notes.write_text("call the dentist\nbuy milk\n")
    before = listing(tmp_path)
    done = run("--db", str(notes), "stats")
    assert done.returncode == 1 and done.stdout == b""
    err = done.stderr.decode()
    assert f"{notes} is not an elastimem store (not an SQLite file)" in err
    assert "Traceback" not in err
    assert listing(tmp_path) == before


def test_a_damaged_store_is_set_aside_and_the_cli_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    path.write_bytes(b"SQLite format 3\x00" + b"\xee" * 3000)
    # A read leaves it where it is (setting it aside would leave nothing to read) ...
    before = listing(tmp_path)
    read = run("--db", str(path), "facts")
    assert read.returncode == 1 and "is a damaged store" in read.stderr.decode()
    assert listing(tmp_path) == before
    # ... a command that stores something moves it aside, and says where.
    done = run("--db", str(path), "remember", "color", "teal")
    assert done.returncode == 0, done.stderr.decode()
    aside = [p for p in tmp_path.iterdir() if ".corrupt-" in p.name]
    assert len(aside) == 1
    assert str(aside[0]) in done.stderr.decode()


READ_COMMANDS = [
    ["stats"],
    ["recall", "dog"],
    ["explain", "dog"],
    ["facts"],
    ["history", "color"],
    ["sessions"],
    ["export", "OUT"],
    ["graph"],
    ["timeline", "where do I live?"],
    ["lessons"],
    ["context", "hello"],
    # Writing commands with nothing to act on in a new store create none either.
    ["forget", "color"],
    ["erase", "--key", "color", "--yes"],
    ["reindex"],
]


@pytest.mark.parametrize("args", READ_COMMANDS, ids=lambda a: a[0])
def test_commands_on_a_missing_store_create_nothing(tmp_path: Path, args: list[str]) -> None:
    missing = tmp_path / "no" / "such" / "typo.db"
    args = [str(tmp_path / "out.jsonl") if a == "OUT" else a for a in args]
    result = CliRunner().invoke(cli.main, ["--db", str(missing), *args])
    assert result.exit_code == 1, result.output
    assert f"there is no elastimem store at {missing}" in result.output
    assert "remember KEY VALUE" in result.output
    assert list(tmp_path.iterdir()) == []  # no folder, no file, no export


def test_facts_on_a_mistyped_store_is_an_error_not_an_empty_answer(
    tmp_path: Path, isolated_env: Path
) -> None:
    done = run("--db", str(tmp_path / "typo.db"), "facts")
    assert done.returncode == 1 and done.stdout == b""
    assert f"no elastimem store at {tmp_path / 'typo.db'}" in done.stderr.decode()
    assert list(tmp_path.iterdir()) == []
    # The default store in the app folder: not created by a read either.
    done = run("stats")
    assert done.returncode == 1 and "no elastimem store" in done.stderr.decode()
    assert not Path(click.get_app_dir("elastimem")).exists()
    assert not Path(cli_paths.data_dir()).exists()


def test_reads_of_an_existing_store_leave_its_folder_as_it_was(tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    with elastimem.Elastimem(str(path), disable_builtin_embedder=True) as mem:
        mem.remember("color", "teal")
        mem.record_turn("I walked the dog by the river.", "Nice.")
    before = sorted(p.name for p in tmp_path.iterdir())
    for args in (["facts"], ["stats"], ["recall", "dog"], ["sessions"], ["lessons"]):
        assert CliRunner().invoke(cli.main, ["--db", str(path), *args]).exit_code == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_storing_commands_create_the_store_and_its_folders(tmp_path: Path) -> None:
    path = tmp_path / "new" / "folder" / "memory.db"
    result = CliRunner().invoke(cli.main, ["--db", str(path), "remember", "color", "teal"])
    assert result.exit_code == 0, result.output
    assert path.exists()


def test_remember_exit_codes_and_the_stored_key(tmp_path: Path) -> None:
    db = str(tmp_path / "r.db")
    runner = CliRunner()
    stored = runner.invoke(cli.main, ["--db", db, "remember", "Favorite Color", "teal"])
    assert stored.exit_code == 0
    assert json.loads(stored.stdout) == {"changed": True, "reason": "stored",
                                         "key": "favorite_color"}  # fmt: skip
    same = runner.invoke(cli.main, ["--db", db, "remember", "favorite_color", "teal"])
    assert same.exit_code == 0 and json.loads(same.stdout)["reason"] == "already stored"
    # Refused by the guards: exit 1 and the real reason (it said "empty key or value").
    for key, value, reason in (
        ("!!!", "x", "key has no letters or digits"),
        ("note", "   ", "empty value"),
        ("note", "x" * 501, "value too long"),
    ):
        refused = runner.invoke(cli.main, ["--db", db, "remember", key, value])
        assert refused.exit_code == 1, refused.output
        assert json.loads(refused.stdout)["reason"] == f"rejected: {reason}"
        assert f"Error: the fact was not stored: {reason}" in refused.stderr
    facts = runner.invoke(cli.main, ["--db", db, "facts"])
    assert json.loads(facts.stdout) == {"favorite_color": "teal"}


def test_forget_and_erase_of_nothing_exit_1_with_a_message(tmp_path: Path) -> None:
    db = str(tmp_path / "f.db")
    runner = CliRunner()
    runner.invoke(cli.main, ["--db", db, "remember", "color", "teal"])
    forget = runner.invoke(cli.main, ["--db", db, "forget", "pet"])
    assert forget.exit_code == 1 and json.loads(forget.stdout) == {"forgotten": False}
    assert "nothing to forget" in forget.stderr and "'pet'" in forget.stderr
    erase = runner.invoke(cli.main, ["--db", db, "erase", "--key", "pet", "--yes"])
    assert erase.exit_code == 1 and not any(json.loads(erase.stdout).values())
    assert "nothing to erase: no fact has the key 'pet'" in erase.stderr
    erased = runner.invoke(cli.main, ["--db", db, "erase", "--key", "color", "--yes"])
    assert erased.exit_code == 0 and json.loads(erased.stdout)["facts"] == 1


# -- tables --------------------------------------------------------------------------------------


def _table_store(path: Path) -> None:
    with elastimem.Elastimem(str(path), disable_builtin_embedder=True) as mem:
        mem.begin_session("tables", at="2025-03-02T18:00:00Z")
        mem.record_turn(
            "My border collie Biscuit loves the long trail around Multnomah Falls, and after "
            "every hike she sleeps for the whole afternoon on the sofa by the window.",
            "That sounds like a very happy dog with a lovely routine after the hikes.",
            at="2025-03-02T18:00:00Z",
        )
        mem.end_session()
        mem.remember("location", "Chicago", at="2025-01-01T00:00:00Z")
        mem.remember("location", "Portland", at="2025-02-01T00:00:00Z")
        mem.remember("hobbies", "hiking with the dog, " * 12 + "and reading old maps by the fire")


@pytest.mark.parametrize("columns", [60, 80, 140])
@pytest.mark.parametrize(
    "args",
    [
        ["explain", "dog hike"],
        ["recall", "dog hike"],
        ["history", "location"],
        ["sessions"],
        ["stats"],
        ["facts"],
        ["timeline", "where do I live?"],
    ],
    ids=lambda a: a[0],
)
def test_tables_fit_the_terminal_and_keep_nested_values_readable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], columns: int
) -> None:
    path = tmp_path / "t.db"
    _table_store(path)
    monkeypatch.setenv("COLUMNS", str(columns))
    result = CliRunner().invoke(cli.main, ["--db", str(path), "--format", "table", *args])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines and all(cli_tables.text_width(line) <= columns for line in lines), lines
    assert not any('{"' in line or "[{" in line for line in lines)  # no JSON in a cell


def test_table_layouts_show_the_nested_values(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "t.db"
    _table_store(path)
    runner = CliRunner()

    def table(*args: str, columns: int = 80) -> str:
        monkeypatch.setenv("COLUMNS", str(columns))
        result = runner.invoke(cli.main, ["--db", str(path), "--format", "table", *args])
        assert result.exit_code == 0, result.output
        return result.stdout

    # explain: every leg of every hit, as columns when they fit, else as lines per hit.
    wide = table("explain", "dog hike", columns=160).splitlines()
    header = next(line for line in wide if line.startswith("#"))
    assert header.split()[:5] == ["#", "kind", "id", "date", "score"]
    assert {"fts", "vector", "fused", "recency+", "text"} <= set(header.split())
    narrow = table("explain", "dog hike", columns=60)
    assert "  fts " in narrow and "  text " in narrow and "sofa by the window" in narrow
    # history: one version a row, the old value and when it ended.
    history = table("history", "location").splitlines()
    assert history[0].split() == ["id", "value", "valid_from", "invalidated_at", "source"]
    assert "Chicago" in history[2] and "2025-02-01 00:00Z" in history[2]
    # A long fact value wraps onto indented lines; nothing of it is cut.
    facts = table("facts", columns=60)
    assert " ".join(facts.split()).count("hiking with the dog,") == 12
    assert "reading old maps by the fire" in " ".join(facts.split())
    # A long title is cut at a word, with an ellipsis.
    sessions = table("sessions", columns=70).splitlines()
    title = sessions[2].split("tables", 1)[1].strip()
    assert title.endswith("…")
    assert "My border collie Biscuit loves the long trail".startswith(title[:-1].rstrip())


def test_table_renderer_indents_nested_dicts_and_cuts_only_text() -> None:
    lines = cli_tables.table(
        {"tier": "full", "llm_calls": {"extract": 3, "summary": 1}, "none": {}}, 80
    )
    assert lines == [
        "tier  full",
        "llm_calls",
        "  extract  3",
        "  summary  1",
        "none  (none)",
    ]
    rows = [{"id": 1, "note": "word " * 40, "when": "2025-01-01T10:20:30.123456Z"}]
    table = cli_tables.table(rows, 50)
    assert all(len(line) <= 50 for line in table)
    assert table[2].startswith("1   word word") and "word… " in table[2]
    assert table[2].endswith("  2025-01-01 10:20Z")  # the timestamp column is never cut
    assert cli_tables.clip("a sentence that goes on and on", 16) == "a sentence that…"
    assert cli_tables.clip("unbreakable" * 3, 10) == "unbreakab…"


# -- timeline, lessons, context, demo twice --------------------------------------------------------


def test_timeline_lessons_and_context(tmp_path: Path) -> None:
    path = tmp_path / "n.db"
    with elastimem.Elastimem(str(path), disable_builtin_embedder=True) as mem:
        mem.remember("location", "Chicago", at="2025-01-01T00:00:00Z")
        mem.remember("location", "Portland", at="2025-02-01T00:00:00Z")
        mem.add_lesson("Confirm the time zone before scheduling anything.")
        mem.add_lesson("Keep answers short in the morning.")
        mem.record_turn("My dog Biscuit loves the beach.", "Lovely!")
    with elastimem.Elastimem(str(path), disable_builtin_embedder=True) as mem:
        expected = mem.build_context("a trip with my dog")  # as a new process sees it
    runner = CliRunner()
    db = ["--db", str(path)]
    timeline = json.loads(runner.invoke(cli.main, [*db, "timeline", "where did I live?"]).stdout)
    assert timeline["key"] == "location"
    assert [v["value"] for v in timeline["versions"]] == ["Chicago", "Portland"]
    lessons = json.loads(runner.invoke(cli.main, [*db, "lessons"]).stdout)
    assert len(lessons) == 2 and "Confirm the time zone before scheduling anything." in lessons
    assert len(json.loads(runner.invoke(cli.main, [*db, "lessons", "-n", "1"]).stdout)) == 1
    assert runner.invoke(cli.main, [*db, "lessons", "-n", "0"]).exit_code == 2
    text = runner.invoke(cli.main, [*db, "context", "a trip with my dog"])
    assert text.exit_code == 0 and text.stdout == expected.render() + "\n"
    assert "Biscuit" in text.stdout and "LESSONS" in text.stdout
    plan = json.loads(
        runner.invoke(cli.main, [*db, "--format", "json", "context", "a trip"]).stdout
    )
    assert set(plan) == {"rendered", "sections", "tokens", "keep_last_n_turns"}
    assert set(plan["sections"]) == set(plan["tokens"]) and "Portland" in plan["rendered"]


def test_demo_twice_on_one_store_stores_it_once(tmp_path: Path) -> None:
    kept = tmp_path / "demo.db"
    first = run("demo", "--no-embedder", "--db", str(kept), timeout=120)
    assert first.returncode == 0, first.stderr.decode()
    counts = {k: v for k, v in run_json("--db", str(kept), "stats").items()
              if k in ("sessions", "messages", "chunks", "fact_versions")}  # fmt: skip
    again = run("demo", "--no-embedder", "--db", str(kept), timeout=120)
    assert again.returncode == 0, again.stderr.decode()
    out = again.stdout.decode()
    assert "already holds the demo" in out
    assert "Biscuit" in out and "WHAT YOU KNOW ABOUT THE USER" in out  # shown again
    after = run_json("--db", str(kept), "stats")
    assert {k: after[k] for k in counts} == counts == {
        "sessions": 3, "messages": 18, "chunks": 9, "fact_versions": counts["fact_versions"]
    }  # fmt: skip


@pytest.mark.parametrize("args", [["facts"], ["remember", "color", "teal"], ["path"]])
def test_a_postgresql_address_without_a_user_is_a_usage_error_and_creates_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str]
) -> None:
    # It was taken as a relative path: `remember` made ./postgresql:/h/db and stored there.
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ELASTIMEM_USER", raising=False)
    result = CliRunner().invoke(cli.main, ["--db", "postgresql://h/db", *args])
    assert result.exit_code == 2, result.output
    assert "pass --user ID (or set ELASTIMEM_USER)" in result.output
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("source", ["missing.jsonl", "notes.txt"])
def test_a_failed_import_into_a_new_path_leaves_no_store(tmp_path: Path, source: str) -> None:
    (tmp_path / "notes.txt").write_text("not an export\n")
    target = tmp_path / "new" / "memory.db"
    result = CliRunner().invoke(cli.main, ["--db", str(target), "import", str(tmp_path / source)])
    assert result.exit_code == 1, result.output
    # An empty store was left behind: the retry then imported into a store it had made.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


@pytest.mark.parametrize("how", ["demo --db", "--db demo"])
def test_demo_never_writes_into_a_store_that_holds_other_memories(tmp_path: Path, how: str) -> None:
    path = tmp_path / "memory.db"
    with elastimem.open(str(path), disable_builtin_embedder=True) as mem:
        mem.record_turn("I live in Oslo", "Noted.")
        mem.remember("favorite_color", "teal")
    args = ["demo", "--db", str(path)] if how == "demo --db" else ["--db", str(path), "demo"]
    result = CliRunner().invoke(cli.main, [*args, "--no-embedder"])
    # It stored the sample user's turns and facts (allergies: peanuts) among the real ones.
    assert result.exit_code == 1, result.output
    assert "already holds memories that are not the demo" in result.output
    assert "pass --db with a new file" in result.output
    with elastimem.open(str(path), create=False, disable_builtin_embedder=True) as mem:
        assert mem.facts() == {"location": "Oslo", "favorite_color": "teal"}
        assert mem.stats()["sessions"] == 1


@pytest.mark.parametrize("suffix", ["", "-wal", "-shm", "LINK"])
@pytest.mark.parametrize("command", [["export"], ["graph", "--as", "html", "-o"]])
def test_output_onto_the_store_itself_is_refused(
    tmp_path: Path, suffix: str, command: list[str]
) -> None:
    path = tmp_path / "memory.db"
    with elastimem.open(str(path), disable_builtin_embedder=True) as mem:
        mem.remember("favorite_color", "teal")
    if suffix == "LINK":
        (tmp_path / "link.jsonl").symlink_to(path)
        out = str(tmp_path / "link.jsonl")
    else:
        out = str(path) + suffix
    # `export memory.db` replaced the store with its own export: the store was gone.
    result = CliRunner().invoke(cli.main, ["--db", str(path), *command, out])
    assert result.exit_code == 1, result.output
    assert "is the store itself" in result.output
    with elastimem.open(str(path), create=False, disable_builtin_embedder=True) as mem:
        assert mem.facts() == {"favorite_color": "teal"}
