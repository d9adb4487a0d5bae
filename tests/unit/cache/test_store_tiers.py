"""Tiers, quotas, LRU demotion/eviction, pins and the dashboard's management calls."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from app.cache.store import CacheStore
from tests.unit.cache.conftest import META, payload_for, save

# Equal-length token lists with equal payload sizes give blobs of equal size.
CONV = {name: [ord(name)] * 3 + list(range(10, 20)) for name in "ABCDEFG"}


def blob_size(store: CacheStore) -> int:
    save(store, [999] * 13, tier="ram")
    row = store.lookup_exact(META, [999] * 13)
    assert row is not None
    store.delete(row.key)
    return row.size


def tier_of(store: CacheStore, name: str) -> str | None:
    row = store.lookup_exact(META, CONV[name])
    return None if row is None else row.tier


def assert_within_quota(store: CacheStore) -> None:
    for tier, (used, quota) in store.tier_usage().items():
        assert used <= quota, tier


@pytest.mark.parametrize("tier", ["ram", "ram_file"])
def test_lru_demotion_to_disk_skips_pinned_rows(store: CacheStore, tier: str) -> None:
    size = blob_size(store)
    store.set_quota(tier, 3 * size + size // 2)
    for name in "ABC":
        save(store, CONV[name], tier=tier)
    row_a = store.lookup_exact(META, CONV["A"])
    assert row_a is not None and store.load(row_a) is not None  # A is now most recent

    save(store, CONV["D"], tier=tier)  # LRU is B
    assert [tier_of(store, n) for n in "ABCD"] == [tier, "disk", tier, tier]
    assert store.counters()["demotions"] == 1
    assert_within_quota(store)

    row_c = store.lookup_exact(META, CONV["C"])
    assert row_c is not None and store.pin(row_c.key)
    save(store, CONV["E"], tier=tier)  # LRU order C (pinned: skipped), A, D
    assert [tier_of(store, n) for n in "ABCDE"] == ["disk", "disk", tier, tier, tier]
    assert store.counters()["demotions"] == 2 and store.counters()["evictions"] == 0
    assert_within_quota(store)
    for name in "ABCDE":  # demoted rows still load, from disk
        row = store.lookup_exact(META, CONV[name])
        assert row is not None and store.load(row) == payload_for(CONV[name])


def test_disk_evicts_lru_rows(store: CacheStore) -> None:
    size = blob_size(store)
    store.set_quota("disk", 2 * size)
    save(store, CONV["A"])
    save(store, CONV["B"])
    row_a = store.lookup_exact(META, CONV["A"])
    assert row_a is not None and store.load(row_a)
    save(store, CONV["C"])  # B is least recently used
    assert [tier_of(store, n) for n in "ABC"] == ["disk", None, "disk"]
    assert store.counters()["evictions"] == 1
    assert len(list((store.data_dir / "kv").glob("*.kvc"))) == 2
    assert_within_quota(store)


def test_demotion_cascades_into_disk_eviction(store: CacheStore) -> None:
    size = blob_size(store)
    store.set_quota("ram", size)
    store.set_quota("disk", size)
    save(store, CONV["A"], tier="ram")
    save(store, CONV["B"], tier="ram")
    assert [tier_of(store, n) for n in "AB"] == ["disk", "ram"]
    save(store, CONV["C"], tier="ram")
    assert [tier_of(store, n) for n in "ABC"] == [None, "disk", "ram"]
    counters = store.counters()
    assert (counters["demotions"], counters["evictions"]) == (2, 1)
    assert_within_quota(store)


def test_rows_being_loaded_are_not_evicted(store: CacheStore) -> None:
    size = blob_size(store)
    store.set_quota("disk", 2 * size)
    save(store, CONV["A"])
    save(store, CONV["B"])
    store._load_pins[META.key(CONV["A"])] += 1  # as during a load
    save(store, CONV["C"])
    assert [tier_of(store, n) for n in "ABC"] == ["disk", None, "disk"]


def test_oversized_blob_goes_to_disk_or_nowhere(store: CacheStore) -> None:
    store.set_quota("ram", 100)
    save(store, CONV["A"], tier="ram")
    assert tier_of(store, "A") == "disk"
    store.set_quota("disk", 100)  # gc: A no longer fits anywhere
    assert tier_of(store, "A") is None
    save(store, CONV["B"], tier="ram")
    assert tier_of(store, "B") is None
    assert store.counters()["saves_rejected"] == 1
    assert_within_quota(store)


def test_all_pinned_means_the_save_is_rejected(store: CacheStore) -> None:
    size = blob_size(store)
    store.set_quota("disk", size)
    save(store, CONV["A"])
    row = store.lookup_exact(META, CONV["A"])
    assert row is not None and store.pin(row.key)
    save(store, CONV["B"])
    assert tier_of(store, "A") == "disk" and tier_of(store, "B") is None
    assert store.counters()["saves_rejected"] == 1


def test_set_quota_applies_now_and_validates(store: CacheStore) -> None:
    for name in "ABC":
        save(store, CONV[name], tier="ram_file")
    assert store.gc() == 0
    store.set_quota("ram_file", 0)
    assert {tier_of(store, n) for n in "ABC"} == {"disk"}
    assert store.tier_usage()["ram_file"] == (0, 0)
    with pytest.raises(ValueError):
        store.set_quota("tape", 1)
    with pytest.raises(ValueError):
        store.set_quota("ram", -1)


def test_move_evict_delete(store: CacheStore) -> None:
    key = save(store, CONV["A"], tier="ram")
    assert key is not None
    assert store.move(key, "ram_file") and tier_of(store, "A") == "ram_file"
    assert (store._file_tiers["ram_file"].path(key)).exists()
    assert store.move(key, "ram") and tier_of(store, "A") == "ram"
    assert not store._file_tiers["ram_file"].path(key).exists()
    assert store.evict(key) and tier_of(store, "A") == "disk"  # demoted
    assert store.evict(key) and tier_of(store, "A") is None  # deleted from disk
    assert not store.evict(key) and not store.delete(key) and not store.move(key, "disk")
    key_b = save(store, CONV["B"])
    assert key_b is not None and store.delete(key_b) and tier_of(store, "B") is None
    assert store.tier_usage()["disk"][0] == 0
    with pytest.raises(ValueError):
        store.move(key_b, "tape")


def test_clear_by_model_and_age(store: CacheStore) -> None:
    save(store, CONV["A"], model_id="x")
    save(store, CONV["B"], model_id="x")
    save(store, CONV["C"], model_id="y")
    pinned = store.lookup_exact(META, CONV["B"])
    assert pinned is not None and store.pin(pinned.key)
    assert store.clear(older_than=3600) == 0  # everything is fresh
    assert store.clear(model_id="x") == 1  # the pinned one stays
    assert [r.model_id for r in store.rows()] == ["x", "y"]
    assert store.clear(include_pinned=True) == 2
    assert store.rows() == []


def test_rows_filter_and_snapshots(store: CacheStore) -> None:
    save(store, CONV["A"], model_id="x")
    save(store, CONV["B"], model_id="y", tier="ram")
    assert [r.model_id for r in store.rows("x")] == ["x"]
    assert len(store.rows()) == 2
    row = store.rows("y")[0]
    with pytest.raises(AttributeError):
        row.hits = 5  # type: ignore[misc]
    assert row.fingerprint == META.fingerprint.hex() and row.quant_type == "q4_1"


def test_subscribers_hear_every_change(store: CacheStore) -> None:
    events: list[tuple[str, Any]] = []
    unsubscribe: Callable[[], None] = store.subscribe(lambda k, o: events.append((k, o)))
    key = save(store, CONV["A"], tier="ram")
    assert key is not None
    store.pin(key)
    store.move(key, "disk")
    store.delete(key)
    kinds = [k for k, _ in events]
    assert kinds == ["published", "updated", "updated", "removed"]
    assert events[0][1].key == key and events[-1][1] == key
    unsubscribe()
    save(store, CONV["B"])
    assert len(events) == 4


def test_pins_and_rows_persist_across_restart(open_store: Callable[..., CacheStore]) -> None:
    store = open_store()
    save(store, CONV["A"], tier="disk")
    save(store, CONV["B"], tier="ram_file")
    save(store, CONV["C"], tier="ram")
    key_a = META.key(CONV["A"])
    store.pin(key_a)
    assert sorted(r["tier"] for r in store._db.all_rows()) == ["disk", "ram", "ram_file"]
    store.close()

    reopened = open_store()
    rows = {r.key: r for r in reopened.rows()}
    assert set(rows) == {key_a, META.key(CONV["B"])}  # the RAM row died with the process
    assert rows[key_a].pinned and rows[key_a].tier == "disk"
    assert rows[META.key(CONV["B"])].tier == "ram_file"
    assert reopened.load(rows[key_a]) == payload_for(CONV["A"])
    assert reopened.tier_usage()["ram"][0] == 0
    assert sorted(r["tier"] for r in reopened._db.all_rows()) == ["disk", "ram_file"]
    assert reopened.counters()["rows_dropped_missing"] == 0
    assert reopened.lifetime_counters()["saves_finish"] == 3


def test_quotas_hold_under_many_saves(store: CacheStore) -> None:
    size = blob_size(store)
    store.set_quota("ram", 3 * size)
    store.set_quota("ram_file", 2 * size)
    store.set_quota("disk", 5 * size)
    over: list[dict[str, tuple[int, int]]] = []

    def check(kind: str, obj: Any) -> None:  # on the writer thread, right after a publish
        usage = store.tier_usage()
        if any(used > quota for used, quota in usage.values()):
            over.append(usage)

    store.subscribe(check)
    for i in range(30):
        save(store, [i] * 13, tier=("ram", "ram_file")[i % 2], flush=False)
    assert store.flush(10)
    assert over == []
    assert_within_quota(store)
    assert len(store.rows()) == 10
    assert store.counters()["demotions"] >= 5 and store.counters()["evictions"] >= 5


def test_moving_a_row_never_evicts_the_row_being_moved(store: CacheStore) -> None:
    """Moving R (disk) into a full RAM tier demotes C to disk, which needs room on a full
    disk whose only row is R itself: R must not be evicted by its own move (it once was,
    and the tier byte counts then drifted from the rows)."""
    size = blob_size(store)
    store.set_quota("ram", size + size // 2)
    store.set_quota("disk", size + size // 2)
    save(store, CONV["A"], tier="disk")
    save(store, CONV["B"], tier="ram")
    row_a = store.lookup_exact(META, CONV["A"])
    assert row_a is not None and store.move(row_a.key, "ram")
    assert tier_of(store, "A") == "ram"
    assert sum(r.size for r in store.rows()) == sum(u for u, _ in store.tier_usage().values())
    assert_within_quota(store)
    row_a = store.lookup_exact(META, CONV["A"])
    assert row_a is not None and store.load(row_a) == payload_for(CONV["A"])


def test_the_ram_tier_keeps_bytes_as_given_and_copies_memory_that_is_reused() -> None:
    from app.cache.blobs.tiers import RamTier

    tier = RamTier()
    fixed = b"head"
    reused = bytearray(b"payload")  # a save packed into ``SaveBuffers``: lent again later
    tier.put([("f", (fixed, memoryview(reused).toreadonly()[:4]))])
    reused[:4] = b"XXXX"
    assert tier.get("f") == b"headpayl"
    assert tier.get_parts("f")[0] is fixed
    reused.append(0)  # no view of it is kept: its memory may serve the next save
