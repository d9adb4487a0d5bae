"""Faults: a full queue, duplicates, failing writes, corrupt blobs, lost or corrupt databases,
leftovers of crashed writes. Each ends in a miss or a counted drop, never an exception."""

from __future__ import annotations

import errno
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from app.cache.blobs import kvc_whole, tiers
from app.cache.blobs.tiers import blob_name
from app.cache.store import DB_NAME, CacheStore
from tests.unit.cache.conftest import META, Gate, payload_for, save

PROMPT = list(range(500, 530))


def blob_path(store: CacheStore, tokens: list[int], tier: str = "disk") -> Path:
    return store._file_tiers[tier].path(META.key(tokens))


def test_queue_full_drops_and_counts(
    open_store: Callable[..., CacheStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = open_store(writer_queue=2)
    gate = Gate()
    gate.install(monkeypatch, store, "disk")
    assert save(store, [1, 1], flush=False) is not None
    assert gate.entered.wait(5)  # the writer holds job 1; the queue is empty
    assert save(store, [2, 2], flush=False) is not None
    assert save(store, [3, 3], flush=False) is not None  # queue now full
    assert save(store, [4, 4], flush=False) is None  # dropped, without blocking
    counters = store.counters()
    assert counters["saves_dropped"] == 1 and counters["saves_finish"] == 4
    assert [r.status for r in store.rows()] == ["writing"] * 3
    gate.release.set()
    assert store.flush(10)
    assert sorted(r.n_tokens for r in store.rows()) == [2, 2, 2]
    assert store.lookup_exact(META, [4, 4]) is None


def test_duplicates_are_treated_as_saved(
    store: CacheStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate = Gate()
    gate.install(monkeypatch, store, "disk")
    first = save(store, PROMPT, flush=False)
    assert gate.entered.wait(5)
    assert save(store, PROMPT, flush=False) == first  # in flight
    gate.release.set()
    assert store.flush(10)
    assert save(store, PROMPT, reason="continued") == first  # published
    assert store.counters()["duplicate_dropped"] == 2
    assert store.counters()["saves_dropped"] == 0
    assert len(store.rows()) == 1


def test_save_into_an_unwritable_dir_fails_and_counts(store: CacheStore) -> None:
    # root ignores chmod, so make the tier directory unusable for real: replace it by a file
    kv = store.data_dir / "kv"
    shutil.rmtree(kv)
    kv.write_bytes(b"not a directory")
    assert save(store, PROMPT) == META.key(PROMPT)  # queued; the failure is the writer's
    assert store.counters()["save_errors"] == 1
    assert store.lookup_exact(META, PROMPT) is None and store.rows() == []
    save(store, PROMPT[:5], tier="ram_file")  # other tiers keep working
    assert store.lookup_exact(META, PROMPT[:5]) is not None


def test_store_opens_when_the_disk_tier_cannot_be_created(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "kv").write_bytes(b"a file where the blob dir should be")
    with CacheStore(data, ram_file_dir=tmp_path / "shm") as store:
        save(store, PROMPT)
        assert store.counters()["save_errors"] == 1 and store.rows() == []


def test_full_disk_fails_the_save_and_leaves_no_temp_file(
    store: CacheStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_space(fd: int, data: bytes | memoryview) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(tiers, "_write_all", no_space)
    save(store, PROMPT)
    assert store.counters()["save_errors"] == 1 and store.rows() == []
    assert list((store.data_dir / "kv").iterdir()) == []
    monkeypatch.undo()
    save(store, PROMPT)  # space is back: the same save now works
    assert store.lookup_exact(META, PROMPT) is not None


def test_a_bug_in_the_writer_does_not_kill_it(
    store: CacheStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_build = kvc_whole.build
    calls = []

    def flaky(meta: kvc_whole.BlobMeta, payload: bytes) -> bytes:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("boom")
        return real_build(meta, payload)

    monkeypatch.setattr(kvc_whole, "build", flaky)
    store.expected_internal_errors = 1  # type: ignore[attr-defined]
    save(store, PROMPT)
    # our bug, not the user's disk: counted apart from save_errors, shown as no Problem
    assert store.counters()["internal_errors"] == 1
    assert store.counters()["save_errors"] == 0 and store.problems() == ()
    assert store.wait_for(META.key(PROMPT), 0) is None  # not left "in flight"
    save(store, PROMPT)
    assert store.lookup_exact(META, PROMPT) is not None


@pytest.mark.parametrize("tier", ["disk", "ram_file"])
@pytest.mark.parametrize("damage", ["flip", "truncate", "delete", "garbage"])
def test_corrupt_blob_is_a_miss_and_removed(store: CacheStore, tier: str, damage: str) -> None:
    save(store, PROMPT, tier=tier)
    path = blob_path(store, PROMPT, tier)
    data = bytearray(path.read_bytes())
    if damage == "flip":
        data[-5] ^= 0xFF
        path.write_bytes(data)
    elif damage == "truncate":
        path.write_bytes(data[: len(data) // 2])
    elif damage == "delete":
        path.unlink()
    else:
        path.write_bytes(os.urandom(len(data)))
    row = store.lookup_exact(META, PROMPT)
    assert row is not None
    assert store.load(row) is None
    assert store.counters()["corrupt_files"] == 1
    assert not path.exists()
    assert store.lookup_exact(META, PROMPT) is None
    assert store.longest_prefix(META, PROMPT) is None
    assert store.tier_usage()[tier][0] == 0


def test_corrupt_ram_blob_is_a_miss(store: CacheStore) -> None:
    save(store, PROMPT, tier="ram")
    key = META.key(PROMPT)
    prefix, payload = store._ram._files[blob_name(key)]
    data = bytearray(payload)
    data[-1] ^= 1
    store._ram._files[blob_name(key)] = (prefix, bytes(data))
    row = store.get(key)
    assert row is not None and store.load(row) is None
    assert store.counters()["corrupt_files"] == 1 and store.get(key) is None


def test_verify_removes_bad_blobs(store: CacheStore) -> None:
    for n in (5, 10, 15):
        save(store, PROMPT[:n])
    path = blob_path(store, PROMPT[:10])
    data = bytearray(path.read_bytes())
    data[-1] ^= 1
    path.write_bytes(data)
    progress: list[tuple[int, int]] = []
    report = store.verify(lambda done, total: progress.append((done, total)))
    assert (report.checked, report.ok) == (3, 2)
    assert report.removed == (META.key(PROMPT[:10]).hex(),)
    assert progress[-1] == (3, 3)
    assert not path.exists() and store.counters()["corrupt_files"] == 1


@pytest.mark.parametrize("how", ["deleted", "garbage", "truncated"])
def test_lost_or_corrupt_database_is_rebuilt_from_blobs(
    open_store: Callable[..., CacheStore], how: str
) -> None:
    store = open_store()
    lengths = (3, 9, 17, 30)
    for n in lengths:
        save(store, PROMPT[:n], tier="ram_file" if n == 9 else "disk", model_id=f"m{n}")
    before = {r.key: r for r in store.rows()}
    store.close()
    db = store.data_dir / DB_NAME
    if how == "deleted":
        for suffix in ("", "-wal", "-shm"):
            Path(f"{db}{suffix}").unlink(missing_ok=True)
    elif how == "garbage":
        db.write_bytes(os.urandom(64 << 10))
    else:
        db.write_bytes(db.read_bytes()[:100])

    reopened = open_store()
    assert reopened.db_rebuilt
    after = {r.key: r for r in reopened.rows()}
    assert set(after) == set(before)
    for key, row in before.items():
        got = after[key]
        assert (got.model_id, got.tokens, got.tier, got.size, got.save_reason) == (
            row.model_id, row.tokens, row.tier, row.size, row.save_reason,
        )  # fmt: skip
        assert reopened.load(got) == payload_for(row.tokens)
    assert reopened.counters()["rows_reregistered"] == len(lengths)
    found = reopened.longest_prefix(META, PROMPT)
    assert found is not None and found.n_tokens == 30
    reopened.close()
    again = open_store()  # the rebuilt database is a normal one now
    assert not again.db_rebuilt and len(again.rows()) == len(lengths)


def test_startup_reconciliation(open_store: Callable[..., CacheStore], tmp_path: Path) -> None:
    store = open_store()
    for n in (4, 8, 12):
        save(store, PROMPT[:n])
    kv = store.data_dir / "kv"
    store.close()

    blob_path(store, PROMPT[:4]).unlink()  # row without a file
    (kv / f"{'ab' * 32}.999999999-deadbeef.kvc-tmp").write_bytes(b"half")  # crashed write
    live = kv / f"{'ef' * 32}.{os.getppid()}-0badcafe.kvc-tmp"  # a live process's write
    live.write_bytes(b"in progress")
    (kv / f"{'cd' * 32}.kvc").write_bytes(b"KVC\x01 garbage")  # unreadable blob
    other = CacheStore(tmp_path / "other", ram_file_dir=tmp_path / "shm2")  # file without row
    save(other, PROMPT[:20], model_id="elsewhere")
    other.close()
    shutil.copy(blob_path(other, PROMPT[:20]), kv)

    reopened = open_store()
    assert sorted(r.n_tokens for r in reopened.rows()) == [8, 12, 20]
    counters = reopened.counters()
    assert counters["temp_files_removed"] == 1
    assert counters["rows_dropped_missing"] == 1
    assert counters["rows_reregistered"] == 1
    assert counters["corrupt_files"] == 1
    assert sorted(p.name for p in kv.iterdir()) == sorted(
        [r.key.hex() + ".kvc" for r in reopened.rows()] + [live.name]
    )
    row = reopened.lookup_exact(META, PROMPT[:20])
    assert row is not None and row.model_id == "elsewhere"
    assert reopened.load(row) == payload_for(PROMPT[:20])
    assert reopened.tier_usage()["disk"][0] == sum(r.size for r in reopened.rows())


def test_writing_row_with_complete_file_is_published_at_startup(
    open_store: Callable[..., CacheStore],
) -> None:
    store = open_store()
    save(store, PROMPT)
    key = META.key(PROMPT)
    store._db.update(key.hex(), status="writing")  # crash between rename and status update
    store.close()
    reopened = open_store()
    row = reopened.get(key)
    assert row is not None and row.status == "available"
    assert reopened.load(row) == payload_for(PROMPT)


def test_unusable_data_dir_keeps_the_app_running(tmp_path: Path) -> None:
    # root ignores permissions: a data dir *under a regular file* fails for everyone
    blocker = tmp_path / "blocker"
    blocker.write_bytes(b"")
    with CacheStore(blocker / "data", ram_file_dir=tmp_path / "shm") as store:
        assert store._db.in_memory
        save(store, PROMPT)  # disk tier: fails and counts
        assert store.counters()["save_errors"] == 1
        save(store, PROMPT[:10], tier="ram")  # RAM tier still serves this session
        row = store.lookup_exact(META, PROMPT[:10])
        assert row is not None and store.load(row) == payload_for(PROMPT[:10])


def test_hits_live_in_the_blob_header_and_survive_a_rebuild(
    open_store: Callable[..., CacheStore],
) -> None:
    store = open_store()
    save(store, PROMPT)
    row = store.lookup_exact(META, PROMPT)
    assert row is not None
    assert store.load(row) and store.load(row)
    assert store.flush()  # the writer records a use in the header, off the restore's path
    data = blob_path(store, PROMPT).read_bytes()
    assert int.from_bytes(data[12:16], "little") == 2
    assert kvc_whole.parse(data, row.key)[1] == payload_for(PROMPT)  # still a valid blob
    store.close()
    Path(store.data_dir / DB_NAME).unlink()
    rebuilt = open_store().lookup_exact(META, PROMPT)
    assert rebuilt is not None and rebuilt.hits == 2
