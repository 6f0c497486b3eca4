"""Many processes serving one user on PostgreSQL at once (issue #18), through the public API.

* Several processes record turns and ``remember`` the same keys for one user at the same
  time: no turn is lost, no key has two live versions, and each key's versions form a chain
  (each superseded version's ``invalidated_at`` is its successor's ``valid_from`` and its
  ``invalidated_by`` the successor's id; SPEC §5.3).
* The per-process caches stay coherent with writers elsewhere: an instance that has
  recalled (and so loaded its vectors and its keyword postings) finds a chunk another
  process wrote afterwards, by vector alone and by keyword alone, and stops finding it
  once another process erased it.
* A worker process killed in the middle of a job: the job is run once more by the next
  process that opens the user, and never twice.

Child processes are real interpreters (``python -c``) on the session's PostgreSQL server,
addressed as the application role (row-level security applies).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import elastimem
from tests import pg_server
from tests.conftest import ScriptedLLM

pytest.importorskip("psycopg", reason=pg_server.NO_DRIVER)

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
WRITERS = 3
TURNS = 25
KEYS = ("home_city", "favorite_food", "current_project")
CHILD_TIMEOUT = 180

_WORD = re.compile(r"[^\W_]+")
# Words the keyword leg cannot connect (no shared term, no shared stem) but this embedder
# maps to one concept, so only the vector leg can match one with another.
CONCEPTS = {
    "zeppelin": "airship",
    "dirigible": "airship",
    "blimp": "airship",
    "violoncello": "cello",
    "cellist": "cello",
}


class ConceptEmbedder:
    """Bag of concepts: a word's vector is its concept's, so synonyms match exactly."""

    dim = 64

    def vector(self, text: str) -> list[float]:
        vec = [0.0] * self.dim
        for word in _WORD.findall(text.casefold()):
            concept = CONCEPTS.get(word, word)
            digest = hashlib.blake2b(concept.encode("utf-8"), digest_size=8).digest()
            vec[int.from_bytes(digest[:4], "little") % self.dim] += 1.0
        if not any(vec):
            vec[0] = 1.0
        norm = math.sqrt(sum(v * v for v in vec))
        return [v / norm for v in vec]

    def __call__(self, texts: list[str]) -> list[list[float]]:
        return [self.vector(t) for t in texts]


def run_child(script: str, *args: str, returncode: int = 0) -> str:
    """Run ``script`` in a fresh interpreter from the repository root; its stdout."""
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script), *args],
        capture_output=True,
        text=True,
        timeout=CHILD_TIMEOUT,
        cwd=str(REPO),
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert done.returncode == returncode, done.stderr[-3000:]
    return done.stdout


@pytest.fixture
def user() -> str:
    return f"shared-{os.urandom(6).hex()}"


@pytest.fixture
def open_user(postgres_url: str, user: str) -> Iterator[Any]:
    opened: list[elastimem.Elastimem] = []

    def factory(**kw: Any) -> elastimem.Elastimem:
        kw.setdefault("disable_builtin_embedder", True)
        mem = elastimem.open(postgres_url, user_id=user, **kw)
        opened.append(mem)
        return mem

    yield factory
    for mem in opened:
        mem.close()


# -- several processes, one user ------------------------------------------------------------

WRITER = """
import json, logging, sys, time
import elastimem

url, user, number, turns, start_at, keys = sys.argv[1:]
keys = keys.split(",")
number, turns = int(number), int(turns)
warnings = []
handler = logging.Handler(logging.WARNING)
handler.emit = lambda record: warnings.append(record.getMessage())
logging.getLogger("elastimem").addHandler(handler)
results = []
while time.time() < float(start_at):  # every writer starts at once
    time.sleep(0.005)
with elastimem.open(url, user_id=user, disable_builtin_embedder=True) as mem:
    for i in range(turns):
        mem.record_turn(f"writer {number} turn {i} says hello", f"reply {number}/{i}")
        key = keys[i % len(keys)]
        results.append(mem.remember(key, f"writer {number} value {i}"))
print(json.dumps({"warnings": warnings, "results": results}))
"""


def test_processes_writing_one_user_lose_no_turn_and_keep_fact_chains(
    postgres_url: str, user: str, open_user: Any, figure: Any
) -> None:

    start_at = str(time.time() + 3.0)
    children = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                WRITER,
                postgres_url,
                user,
                str(n),
                str(TURNS),
                start_at,
                ",".join(KEYS),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=str(REPO),
        )
        for n in range(WRITERS)
    ]
    reports = []
    for child in children:
        out, err = child.communicate(timeout=CHILD_TIMEOUT)
        assert child.returncode == 0, err[-3000:]
        reports.append(json.loads(out.strip().splitlines()[-1]))
    assert [r["warnings"] for r in reports] == [[]] * WRITERS
    stored = sum(1 for r in reports for changed, _ in r["results"] if changed)
    assert stored == WRITERS * TURNS  # every value differs from the live one: all stored

    mem = open_user()
    stats = mem.stats()
    assert stats["messages"] == 2 * WRITERS * TURNS
    assert stats["chunks"] == WRITERS * TURNS
    assert stats["sessions"] == WRITERS  # each process kept its own session
    for n in range(WRITERS):
        for i in (0, TURNS - 1):
            hits = mem.recall(f"writer {n} turn {i} says hello", k=3, kinds=["chunk"])
            texts = [h.text for h in hits]
            assert any(f"writer {n} turn {i} says" in t for t in texts), texts
    assert stats["facts"] == len(KEYS)
    assert stats["fact_versions"] == WRITERS * TURNS
    versions = 0
    for key in KEYS:
        history = mem.fact_history(key)
        versions += len(history)
        live = [f for f in history if f.invalidated_at is None]
        assert len(live) == 1 and live[0] is history[-1], key
        for old, new in zip(history, history[1:]):
            assert old.invalidated_at == new.valid_from, (key, old, new)
            assert old.invalidated_by == new.id, (key, old, new)
        assert mem.facts()[key] == live[0].value
    assert versions == WRITERS * TURNS
    figure("writers", WRITERS)
    figure("turns", WRITERS * TURNS, "turns", "all present")
    figure("fact versions", versions, "", "one chain per key, one live version each")


# -- cache coherence between processes ----------------------------------------------------

OTHER_WRITER = """
import sys
import elastimem
from tests.reliability.test_pg_many_writers import ConceptEmbedder

url, user, action, text = sys.argv[1:]
with elastimem.open(url, user_id=user, embedder=ConceptEmbedder(),
                    disable_builtin_embedder=True) as mem:
    if action == "write":
        mem.begin_session()
        mem.record_turn(text, "noted")
        assert mem.drain(timeout=60), "the embed job did not finish"
        assert mem.stats()["embedded_chunks"] == mem.stats()["chunks"]
        print(mem.session_id)
    else:
        print(mem.erase(session_id=int(text)))
"""


def _texts(hits: list[elastimem.Hit]) -> list[str]:
    return [h.text for h in hits]


def _legs_of(mem: elastimem.Elastimem, query: str, word: str) -> list[tuple[float, float]]:
    """``(fts, vector)`` of each chunk in the top 5 for ``query`` whose text has ``word``."""
    explained = mem.explain(query, k=5)
    chunks = [h for h in explained.hits if h.kind == "chunk"]
    return [
        (b.fts, b.vector)
        for hit, b in zip(chunks, explained.chunk_breakdowns)
        if word in hit.text.casefold()
    ]


class OtherWriter:
    """Writes and erases the user's turns from another process, or another instance here."""

    def __init__(self, where: str, url: str, user: str) -> None:
        self.where, self.url, self.user = where, url, user

    def write(self, text: str) -> str:
        if self.where == "process":
            return run_child(OTHER_WRITER, self.url, self.user, "write", text).strip()
        with elastimem.open(self.url, user_id=self.user, embedder=ConceptEmbedder(),
                            disable_builtin_embedder=True) as other:  # fmt: skip
            other.begin_session()
            other.record_turn(text, "noted")
            assert other.drain(timeout=60)
            return str(other.session_id)

    def erase(self, session: str) -> None:
        if self.where == "process":
            run_child(OTHER_WRITER, self.url, self.user, "erase", session)
            return
        with elastimem.open(self.url, user_id=self.user, disable_builtin_embedder=True) as other:
            other.erase(session_id=int(session))


@pytest.mark.parametrize("where", ["process", "instance"])
def test_an_instance_sees_chunks_another_writer_adds_and_erases(
    postgres_url: str, user: str, open_user: Any, where: str
) -> None:
    other = OtherWriter(where, postgres_url, user)
    mem = open_user(embedder=ConceptEmbedder())
    for text in ("we walked the dog along the canal", "the bakery had fresh rye bread"):
        mem.record_turn(text, "nice")
    assert mem.drain(timeout=30)
    # Both indexes are loaded now: the vectors (on the vector leg) and the postings of
    # the terms asked for (on the keyword leg).
    assert "zeppelin" not in " ".join(_texts(mem.recall("a dirigible over the fields", k=5)))
    assert _legs_of(mem, "zeppelin", "zeppelin") == []

    session = other.write("A huge zeppelin floated over the harbour at dawn")

    # Found by the vector leg alone: no query word is in the chunk (nor shares a stem).
    [(fts, vector)] = _legs_of(mem, "a dirigible", "zeppelin")
    assert fts == 0 and vector > 0
    # Found by the keyword leg, by its own word.
    [(fts, vector)] = _legs_of(mem, "zeppelin", "zeppelin")
    assert fts > 0

    other.erase(session)
    assert all("zeppelin" not in t for t in _texts(mem.recall("a dirigible", k=5)))
    assert mem.recall("zeppelin", k=5) == []


def test_only_the_vector_leg_can_find_the_synonym(postgres_url: str, open_user: Any) -> None:
    """The coherence test above is about the vector cache only if its query has no keyword
    path to the chunk: without an embedder, the same query finds nothing."""
    mem = open_user()
    mem.record_turn("A huge zeppelin floated over the harbour at dawn", "noted")
    assert mem.recall("a dirigible", k=3, kinds=["chunk"]) == []


# -- a worker process killed mid-job -----------------------------------------------------------

CRASHER = """
import os, sys, time
import elastimem

url, user, marker = sys.argv[1:]
started = []

def stuck_llm(prompt, *, max_tokens, temperature):
    started.append(1)
    time.sleep(120)
    return "NONE"

mem = elastimem.open(url, user_id=user, llm=stuck_llm, tier_override="full",
                     disable_builtin_embedder=True)
for i in range(3):
    mem.record_turn(f"I moved to Lisbon last spring and I love it here ({marker} {i})", "ok")
while not started:
    time.sleep(0.01)
print("running", flush=True)
os._exit(9)  # killed mid-job: one extraction running, two queued
"""


def test_a_job_of_a_killed_process_runs_again_once(
    postgres_url: str, user: str, open_user: Any
) -> None:
    out = run_child(CRASHER, postgres_url, user, "crash", returncode=9).strip()
    assert out == "running"
    llm = ScriptedLLM({"extract": '{"facts": {"home_city": "Lisbon"}}'})
    mem = open_user(llm=llm, tier_override="full")
    assert mem.drain(timeout=30)
    extracted = [prompt for kind, prompt, _ in llm.calls if kind == "extract"]
    for i in range(3):  # each turn extracted exactly once, the killed one included
        assert sum(f"(crash {i})" in p for p in extracted) == 1, extracted
    assert llm.kinds().count("summarise-session") == 1  # the dead process's session, once
    assert mem.facts()["home_city"] == "Lisbon"
    assert mem.stats()["jobs_pending"] == 0 and mem.stats()["jobs_failed"] == 0
