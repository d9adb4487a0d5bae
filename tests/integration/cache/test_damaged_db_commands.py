"""``hearth chat``, ``hearth serve`` and ``hearth cache ls`` on a data dir whose cache database
has one damaged value: each starts, answers, and shows no traceback (issue 26).

Before: a non-hex character in one row's fingerprint made every start raise
``ValueError: non-hexadecimal number found in fromhex()`` until the cache was deleted by hand.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

from app.cache.store import CacheStore
from tests.helpers.kv_states import state_for
from tests.helpers.llama_threads import LLAMA_THREADS
from tests.integration.server.conftest import ROOT, start_server
from tests.unit.cache.conftest import META, payload_for


def hearth(data_dir: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "app", "--data-dir", str(data_dir), *argv], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)


def test_one_bad_fingerprint_blocks_no_command(tiny_model_path: Path, tmp_path: Path) -> None:
    data = tmp_path / "data"
    with CacheStore(data / "cache", chunk_tokens=4) as store:  # where the engine keeps it
        for tokens in (list(range(100, 111)), list(range(100, 106)) + [1, 2, 3]):
            store.submit_save(model_id="m", meta=META, tokens=tokens, payload=state_for(tokens), reason="finish",
                              tier="disk")
        store.submit_save(model_id="m", meta=META, tokens=[5, 6, 7], payload=payload_for([5, 6, 7]),
                          reason="finish", tier="disk")
        assert store.flush(10)
    db = sqlite3.connect(data / "cache" / "kvcache.sqlite")
    with db:
        (n_rows,) = db.execute("SELECT count(*) FROM cache_rows").fetchone()
        db.execute("UPDATE cache_rows SET fingerprint = 'g' || substr(fingerprint, 2)")
        db.execute("UPDATE cache_chunks SET parent = 'z' || substr(parent, 2)")
    db.close()
    assert n_rows == 3

    listing = hearth(data, "cache", "ls")
    assert listing.returncode == 0 and "Traceback" not in listing.stderr, listing.stderr
    assert f"{n_rows} entries" in listing.stdout  # dropped, then registered again from their files

    again = hearth(data, "chat", "--model", str(tiny_model_path), "--max-tokens", "4",
                   "--threads", str(LLAMA_THREADS), "Hi")
    assert again.returncode == 0 and "Traceback" not in again.stderr, again.stderr
    assert again.stdout.strip()

    server = start_server(tiny_model_path, data, "--ctx", "256")
    try:
        reply = server.client().chat.completions.create(model=server.model_id, max_tokens=2,
                                                        messages=[{"role": "user", "content": "Hi"}])
        assert reply.choices[0].finish_reason in ("stop", "length")
    finally:
        log = server.stop()
    assert "Traceback" not in log, log
