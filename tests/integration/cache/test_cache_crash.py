"""A process killed with SIGKILL in the middle of many saves leaves no torn blob that is
ever served, and the store opens cleanly afterwards."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from app.cache.keys import KeyMeta
from app.cache.store import CacheStore

ROOT = Path(__file__).resolve().parents[3]
META = KeyMeta(b"\x5a" * 32, "q4_1", b"\xa5" * 32)

# The child saves forever: payloads of 64 KiB-1 MiB to ram_file and disk, alternating.
CHILD = textwrap.dedent(
    """
    import hashlib, sys
    from pathlib import Path
    from app.cache.keys import KeyMeta
    from app.cache.store import CacheStore

    data_dir, shm, start = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
    meta = KeyMeta(b"\\x5a" * 32, "q4_1", b"\\xa5" * 32)
    store = CacheStore(data_dir, ram_file_dir=shm, writer_queue=8)
    i = start
    while True:
        tokens = [i] * (1 + i % 50)
        size = (64 << 10) * (1 + i % 16)
        payload = hashlib.sha256(str(i).encode()).digest() * (size // 32)
        if store.submit_save(model_id="crash", meta=meta, tokens=tokens, payload=payload,
                             reason="continued", tier=("disk", "ram_file")[i % 2]):
            i += 1
        if i == start + 5:
            store.flush()
            print("saving", flush=True)
    """
)


def expected_payload(first_token: int, n_bytes: int) -> bytes:
    import hashlib

    return hashlib.sha256(str(first_token).encode()).digest() * (n_bytes // 32)


def run_and_kill(data_dir: Path, shm: Path, start: int, delay: float, child: str = CHILD) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen(
        [sys.executable, "-c", child, str(data_dir), str(shm), str(start)],
        stdout=subprocess.PIPE,
        env=env,
        cwd=ROOT,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == b"saving"
        time.sleep(delay)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    assert proc.returncode == -signal.SIGKILL


def check_store(data_dir: Path, shm: Path) -> int:
    leftovers = len(list((data_dir / "kv").glob("*.kvc-tmp")) + list(shm.glob("*.kvc-tmp")))
    print(f"temp files left by the killed writer: {leftovers}")
    with CacheStore(data_dir, ram_file_dir=shm) as store:
        assert store.counters()["temp_files_removed"] == leftovers
        rows = store.rows()
        assert rows, "the child published nothing before it was killed"
        for row in rows:
            assert row.status == "available"
            payload = store.load(row)
            assert payload is not None, f"row {row.key.hex()} did not load"
            first = row.tokens[0]
            assert row.tokens == (first,) * (1 + first % 50)
            assert payload == expected_payload(first, len(payload))
            assert len(payload) == (64 << 10) * (1 + first % 16) // 32 * 32
        assert store.counters()["corrupt_files"] == 0
        for tier_dir in (data_dir / "kv", shm):
            assert not list(tier_dir.glob("*.kvc-tmp"))
        return len(rows)


def test_sigkill_mid_saves_leaves_no_torn_blob(tmp_path: Path) -> None:
    data_dir, shm = tmp_path / "data", tmp_path / "shm"
    seen = 0
    for round_, delay in enumerate((0.3, 0.05, 0.6)):
        run_and_kill(data_dir, shm, start=round_ * 100_000, delay=delay)
        n = check_store(data_dir, shm)
        assert n > seen  # every round adds rows; none of the old ones were lost
        seen = n


# The same with KVC v2: real per-seq states, so every save is a chain of chunks sharing a
# 300-token head, with manifests; the kill lands between chunk files, manifests and the
# database updates.
CHUNKED_CHILD = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from app.cache.keys import KeyMeta
    from app.cache.store import CacheStore
    from tests.helpers.kv_states import state_for

    data_dir, shm, start = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
    meta = KeyMeta(b"\\x5a" * 32, "q4_1", b"\\xa5" * 32)
    store = CacheStore(data_dir, ram_file_dir=shm, writer_queue=8)
    head = list(range(1000, 1300))
    i = start
    while True:
        tokens = head + [i] * (1 + i % 200)
        if store.submit_save(model_id="crash", meta=meta, tokens=tokens, reason="continued",
                             payload=state_for(tokens, k_row=544, v_row=544),
                             tier=("disk", "ram_file")[i % 2]):
            i += 1
        if i == start + 5:
            store.flush()
            print("saving", flush=True)
    """
)


def check_chunked_store(data_dir: Path, shm: Path) -> int:
    from tests.helpers.kv_states import state_for

    with CacheStore(data_dir, ram_file_dir=shm) as store:
        rows = store.rows()
        assert rows, "the child published nothing before it was killed"
        for row in rows:
            assert row.status == "available" and row.format == 2
            payload = store.load(row)
            assert payload is not None, f"row {row.key.hex()} did not load"
            assert payload == state_for(list(row.tokens), k_row=544, v_row=544)
        assert store.counters()["corrupt_files"] == 0
        report = store.verify(progress=None)
        assert report.removed == () and report.rows_damaged == 0
        for tier_dir in (data_dir / "kv", shm):
            assert not list(tier_dir.glob("*.kvc-tmp"))
        return len(rows)


def test_sigkill_mid_chunked_saves_leaves_no_torn_chunk(tmp_path: Path) -> None:
    data_dir, shm = tmp_path / "data", tmp_path / "shm"
    seen = 0
    for round_, delay in enumerate((0.3, 0.05, 0.6)):
        run_and_kill(data_dir, shm, start=round_ * 100_000, delay=delay, child=CHUNKED_CHILD)
        n = check_chunked_store(data_dir, shm)
        assert n > seen
        seen = n
