"""A store opened twice in one process keeps its file locks (a real second process checks)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import elastimem


def test_a_second_open_in_this_process_leaves_the_first_ones_locks(tmp_path: Path) -> None:
    # Opening checks the file's SQLite header. Read with open()/close() while this process
    # already had the store open, it dropped every POSIX lock the process held on the file:
    # a second process closing its own connection then believed it was the last one and
    # deleted the -wal and -shm files from under the first store.
    path = tmp_path / "store.db"
    first = elastimem.open(path)
    try:
        first.record_turn("I keep bees on the roof", "Lovely")
        elastimem.open(path).close()
        code = (
            "import elastimem, sys\n"
            "m = elastimem.open(sys.argv[1])\n"
            "m.record_turn('my canoe is called Zephyrine', 'ok')\n"
            "m.close()\n"
        )
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
        subprocess.run([sys.executable, "-c", code, str(path)], check=True, env=env, timeout=120)
        assert os.path.exists(f"{path}-wal") and os.path.exists(f"{path}-shm")
        assert any("Zephyrine" in hit.text for hit in first.recall("Zephyrine canoe"))
        first.record_turn("and a kayak", "noted")
    finally:
        first.close()
