"""Any single damaged byte in ``kvcache.sqlite``: the cache still opens, every row it then
serves restores exactly its own tokens' KV, and what was damaged is dropped or rebuilt from
the files (issue 26). And rows whose chunk files were deleted are dropped, or listed as
restoring only their head.

The database is an index of the files (``app.cache.repair.reconcile``): a row whose fields no
longer describe its file — a non-hex character in a fingerprint (the case the issue found:
``ValueError: non-hexadecimal number found in fromhex()`` on every start), a token id
changed, a number turned into text by a flipped type byte — is dropped and its file read
again.
"""

from __future__ import annotations

import io
import random
import shutil
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.cache.keys import encode_tokens
from app.cache.lookup import Found
from app.cache.store import DB_NAME, CacheStore
from tests.helpers.kv_states import state_for
from tests.unit.cache.conftest import META, payload_for

NUM_POSITIONS = 300
COUNTED = ("rows_dropped_damaged", "chunks_dropped_damaged", "rows_reregistered", "chunks_reregistered")
CHUNKED = [list(range(100, 100 + n)) for n in (6, 11, 17)] + [list(range(100, 106)) + [7, 8, 9, 10, 11]]
WHOLE = [[900 + i for i in range(n)] for n in (3, 9)]  # payloads that are not KV states: v1 blobs


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[bytes, list[int]]]]:
    """A small cache (v2 rows sharing chunks, v1 rows, a pin), closed: its files and its rows."""
    root = tmp_path_factory.mktemp("pristine")
    store = CacheStore(root / "data", ram_file_dir=root / "shm", chunk_tokens=4)
    for tokens in CHUNKED:
        store.submit_save(model_id="m", meta=META, tokens=tokens, payload=state_for(tokens), reason="finish",
                          tier="disk", session_id="s", prompt_text="chat")
    for tokens in WHOLE:
        store.submit_save(model_id="m", meta=META, tokens=tokens, payload=payload_for(tokens), reason="finish",
                          tier="disk", prompt_text="whole")
    assert store.flush(10)
    rows = {r.key: list(r.tokens) for r in store.rows()}
    store.pin(next(iter(rows)))
    store.close()
    assert len(rows) == len(CHUNKED) + len(WHOLE)
    assert not list(root.glob("data/*-wal")) or (root / "data" / f"{DB_NAME}-wal").stat().st_size == 0
    yield root, rows


def _positions(data: bytes, rows: dict[bytes, list[int]]) -> list[int]:
    """Spread over the whole file, plus bytes inside the stored hex keys and fingerprints
    (where the issue's non-hex character landed) and inside the token lists."""
    step = max(len(data) // (NUM_POSITIONS - 60), 1)
    spread = list(range(0, len(data), step))[: NUM_POSITIONS - 60]
    rng = random.Random(26)
    inside: list[int] = []
    for key, tokens in rows.items():
        for needle in (key.hex().encode(), META.fingerprint.hex().encode(), encode_tokens(tokens)):
            at = data.find(needle)
            while at >= 0 and len(inside) < 60:
                inside.append(at + rng.randrange(len(needle)))
                at = data.find(needle, at + 1)
    return sorted(set(spread + inside))


def _damage(data: bytearray, pos: int, rng: random.Random) -> None:
    how = rng.choice(("bit", "bit", "byte", "nonhex", "zero"))
    if how == "bit":
        data[pos] ^= 1 << rng.randrange(8)
    elif how == "byte":
        data[pos] ^= rng.randrange(1, 256)
    elif how == "nonhex":
        data[pos] = ord("g") if data[pos] != ord("g") else ord("z")
    else:
        data[pos] = 0 if data[pos] else 0xFF


def _check_serves_only_its_own(store: CacheStore, rows: dict[bytes, list[int]]) -> None:
    for tokens in CHUNKED:
        got = store.find(META, tokens)
        if isinstance(got, Found):
            assert got.payload == state_for(tokens[: got.n]), "restored another prefix's KV"
    for row in store.rows():
        assert row.key in rows, "a row that was never saved"
        assert list(row.tokens) == rows[row.key], "a row lists other tokens than its file holds"
        payload = store.load(row)
        if payload is not None:
            want = state_for(rows[row.key]) if row.format == 2 else payload_for(rows[row.key])
            assert payload == want


def test_any_single_damaged_byte_in_the_database(pristine: tuple[Path, dict[bytes, list[int]]],
                                                  tmp_path: Path) -> None:
    root, rows = pristine
    original = (root / "data" / DB_NAME).read_bytes()
    rng = random.Random(2026)
    positions = _positions(original, rows)
    assert len(positions) >= 250
    seen: Counter[str] = Counter()
    for pos in positions:
        case = tmp_path / str(pos)
        shutil.copytree(root / "data", case / "data")
        data = bytearray(original)
        _damage(data, pos, rng)
        (case / "data" / DB_NAME).write_bytes(bytes(data))
        store = CacheStore(case / "data", ram_file_dir=case / "shm", chunk_tokens=4)  # must not raise
        try:
            _check_serves_only_its_own(store, rows)
            # Every row's file is intact, so every row is back: kept, or dropped and rebuilt.
            assert {r.key for r in store.rows()} == set(rows), f"byte {pos}: rows lost"
            counters = store.counters()
            assert counters["internal_errors"] == 0, f"byte {pos}: a bug was logged"
            seen.update(name for name in COUNTED if counters.get(name, 0))
            seen["database moved aside"] += store.db_rebuilt
        finally:
            store.close()
        shutil.rmtree(case)
    # Each way of coping was exercised (the other flips hit free space or page slack).
    assert all(seen[name] for name in (*COUNTED, "database moved aside")), seen


# --------------------------------------------------------------------------- chunk files deleted


def _chunked_store(tmp_path: Path) -> CacheStore:
    return CacheStore(tmp_path / "data", ram_file_dir=tmp_path / "shm", chunk_tokens=4)


def _save_chunked(store: CacheStore, tokens: list[int]) -> bytes:
    key = store.submit_save(model_id="m", meta=META, tokens=tokens, payload=state_for(tokens), reason="finish",
                            tier="disk")
    assert key is not None and store.flush(10)
    return key


def test_rows_whose_chunk_files_were_deleted_are_dropped_at_start_up(tmp_path: Path) -> None:
    """Before: both rows stayed listed (sized as their manifests) and every lookup missed."""
    store = _chunked_store(tmp_path)
    for tokens in CHUNKED[:2]:
        _save_chunked(store, tokens)
    store.close()
    kv = tmp_path / "data" / "kv"
    for chunk in kv.glob("*.kvch"):
        chunk.unlink()
    store = _chunked_store(tmp_path)
    try:
        assert store.rows() == [] and store.counters()["rows_dropped_no_chunks"] == 2
        assert list(kv.glob("*.kvr")) == []  # the manifests went with them
    finally:
        store.close()


def test_a_row_that_lost_a_later_chunk_keeps_its_head_and_is_listed_as_such(tmp_path: Path) -> None:
    from app.cache import cli

    tokens = CHUNKED[2]  # 17 tokens: chunks at 0, 4, 8, 12, 16
    store = _chunked_store(tmp_path)
    _save_chunked(store, tokens)
    chain = [store._catalog.chunks.get(k) for k in store._catalog.chunks.chain(META.key(tokens))]
    (chunk,) = [c for c in chain if c is not None and c.start == 8]
    store.close()
    (tmp_path / "data" / "kv" / f"{chunk.key.hex()}.kvch").unlink()
    store = _chunked_store(tmp_path)
    try:
        got = store.find(META, tokens)
        assert isinstance(got, Found) and got.n == 8 and got.payload == state_for(tokens[:8])
        assert store.served_tokens(META.key(tokens)) == 8
    finally:
        store.close()
    out = io.StringIO()
    assert cli.main(["--data-dir", str(tmp_path / "data"), "--ram-file-dir", str(tmp_path / "shm"), "ls"], out) == 0
    assert " 8/17 " in out.getvalue() and "1 of them lost a chunk" in out.getvalue()


def test_verify_drops_rows_whose_chunks_vanished_under_it(tmp_path: Path) -> None:
    store = _chunked_store(tmp_path)
    try:
        keys = [_save_chunked(store, tokens) for tokens in CHUNKED[:2]]
        for chunk in (tmp_path / "data" / "kv").glob("*.kvch"):
            chunk.unlink()
        report = store.verify()
        assert store.rows() == [] and set(report.removed) >= {k.hex() for k in keys}
        assert report.ok == 0 and store.counters()["rows_dropped_no_chunks"] == 2
    finally:
        store.close()
