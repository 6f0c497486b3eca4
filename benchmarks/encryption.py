"""What encryption at rest costs (issue 31): a plain store and the same store encrypted, A/B.

One store of ``--size`` exchanges (10k by default) is bulk-loaded as in ``latency.py`` (same
corpus, same 384-dim synthetic vectors), then copied and the copy encrypted with
``storage.sqlite.rekey.convert`` (what ``elastimem encrypt`` runs), so both hold exactly the same
rows. Then, the two stores taking turns call by call (so a change of machine load hits both):

* ``record_turn`` (``--turns`` new exchanges each, with the host embedder: the worker embeds
  in the background as in real use);
* keyword ``recall`` (no embedder) and hybrid ``recall`` (keyword + vectors) over
  ``--queries`` distinct queries, once each store's worker has primed its keyword index (as
  after a host's ``warm_up()``);
* ``open``: a new instance, from open to its first recall (an encrypted open derives the key
  from the passphrase with PBKDF2-HMAC-SHA512, 256,000 iterations, once per connection: the
  writer and each reading thread); ``--raw-key`` uses a raw 256-bit key, with no derivation.

It prints medians and p95 per store and the encrypted/plain ratio of the medians.

    nice -n 10 python benchmarks/encryption.py                   # 10k exchanges
    nice -n 10 python benchmarks/encryption.py --size 1000 --queries 50 --turns 50
    nice -n 10 python benchmarks/encryption.py --raw-key --json benchmarks/results/enc.json
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = str(Path(__file__).resolve().parents[1])
for entry in (ROOT, str(Path(__file__).resolve().parent)):
    if entry not in sys.path:
        sys.path.insert(0, entry)

from latency import (  # noqa: E402
    Corpus,
    SyntheticEmbedder,
    alternate,
    bulk_load,
    make_queries,
    pct,
    settle,
)

import elastimem  # noqa: E402
from elastimem.storage.sqlite.cipher import cipher_key  # noqa: E402
from elastimem.storage.sqlite.rekey import convert  # noqa: E402

PASSPHRASE = "benchmark passphrase, not a secret"
RAW_KEY = "x'" + "5a" * 32 + "'"
WARM = 5


def build(workdir: Path, size: int, key: str) -> tuple[Path, Path, float]:
    """The plain store and its encrypted copy; seconds the encryption took."""
    plain = workdir / "plain.db"
    secret = workdir / "encrypted.db"
    bulk_load(plain, Corpus(), size, SyntheticEmbedder())
    shutil.copyfile(plain, secret)
    began = time.perf_counter()
    convert(str(secret), None, cipher_key(key))
    return plain, secret, time.perf_counter() - began


def open_both(plain: Path, secret: Path, key: str, **kw: Any) -> dict[str, elastimem.Elastimem]:
    kw.setdefault("tier_override", "standard")
    stores = {
        "plain": elastimem.open(str(plain), **kw),
        "encrypted": elastimem.open(str(secret), key=key, **kw),
    }
    for mem in stores.values():
        settle(mem)  # the keyword index primed by the worker, as after a host's warm_up()
    return stores


def close_all(stores: dict[str, elastimem.Elastimem]) -> None:
    for mem in stores.values():
        mem.close()


def summary(name: str, times: dict[str, list[float]]) -> dict[str, Any]:
    row: dict[str, Any] = {"measure": name}
    for store, values in times.items():
        row[f"{store}_p50_ms"] = pct(values, 50)
        row[f"{store}_p95_ms"] = pct(values, 95)
    row["ratio_p50"] = row["encrypted_p50_ms"] / max(row["plain_p50_ms"], 1e-9)
    return row


def run(args: argparse.Namespace, workdir: Path) -> list[dict[str, Any]]:
    key = RAW_KEY if args.raw_key else PASSPHRASE
    corpus = Corpus()
    print(f"building {args.size:,} exchanges ...", file=sys.stderr)
    plain, secret, encrypt_s = build(workdir, args.size, key)
    rows: list[dict[str, Any]] = []
    queries = make_queries(corpus, args.size, args.queries + WARM)

    stores = open_both(plain, secret, key, disable_builtin_embedder=True)
    try:
        calls = {name: (lambda q, m=mem: m.recall(q, 5)) for name, mem in stores.items()}
        rows.append(summary("keyword recall", alternate(calls, queries, warm=WARM)))
    finally:
        close_all(stores)

    embedder = SyntheticEmbedder()
    stores = open_both(plain, secret, key, embedder=embedder)
    try:
        calls = {name: (lambda q, m=mem: m.recall(q, 5)) for name, mem in stores.items()}
        rows.append(summary("hybrid recall", alternate(calls, queries, warm=WARM)))
        for mem in stores.values():
            mem.begin_session()
        turns = [corpus.texts(ids) for ids in corpus.word_ids(args.turns + 3, 10**9)]
        calls = {name: (lambda t, m=mem: m.record_turn(t[0], t[1])) for name, mem in stores.items()}
        rows.append(summary("record_turn", alternate(calls, turns, warm=3)))
        for mem in stores.values():
            mem.drain(120)
            mem.end_session(wait=True, timeout=600)
    finally:
        close_all(stores)

    opens: dict[str, list[float]] = {"plain": [], "encrypted": []}
    for number in range(args.opens):
        order = [("plain", None), ("encrypted", key)]
        for name, given in order if number % 2 == 0 else reversed(order):
            began = time.perf_counter()
            with elastimem.open(
                str(secret if given else plain), key=given, disable_builtin_embedder=True
            ) as mem:
                mem.recall("first question after open", 5)
                opens[name].append(time.perf_counter() - began)
    rows.append(summary("open + first recall", opens))
    for row in rows:
        row["size"] = args.size
        row["key"] = "raw" if args.raw_key else "passphrase"
    rows.append({"measure": "encrypt (convert) the store", "seconds": encrypt_s,
                 "size": args.size, "file_mb": secret.stat().st_size / 1e6})  # fmt: skip
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=10_000, help="exchanges in the store")
    parser.add_argument("--queries", type=int, default=300, help="timed recalls per mode")
    parser.add_argument("--turns", type=int, default=200, help="timed record_turn calls")
    parser.add_argument("--opens", type=int, default=10, help="timed opens per store")
    parser.add_argument("--raw-key", action="store_true", help="a raw key: no PBKDF2")
    parser.add_argument("--workdir", type=Path, help="where the stores go (default: a temp dir)")
    parser.add_argument("--json", type=Path, help="also write the rows here")
    args = parser.parse_args(argv)
    if args.workdir is not None:
        args.workdir.mkdir(parents=True, exist_ok=True)
        rows = run(args, args.workdir)
    else:
        with tempfile.TemporaryDirectory(prefix="elastimem-enc-") as folder:
            rows = run(args, Path(folder))
    print(f"{'measure':<30} {'plain p50':>10} {'p95':>8} {'encr. p50':>10} {'p95':>8} {'ratio':>6}")
    for row in rows:
        if "ratio_p50" not in row:
            print(f"{row['measure']:<30} {row['seconds']:.2f} s ({row['file_mb']:.1f} MB)")
            continue
        print(
            f"{row['measure']:<30} {row['plain_p50_ms']:>8.2f}ms {row['plain_p95_ms']:>6.2f}ms "
            f"{row['encrypted_p50_ms']:>8.2f}ms {row['encrypted_p95_ms']:>6.2f}ms "
            f"{row['ratio_p50']:>6.2f}"
        )
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
