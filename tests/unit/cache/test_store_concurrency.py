"""Saves, loads, lookups and dashboard actions from several threads at once under tight
quotas: no exceptions, quotas hold, and every payload served is the one saved."""

from __future__ import annotations

import random
import threading

from app.cache.store import CacheStore
from tests.unit.cache.conftest import META, payload_for

CONVS = [[c] * 4 + list(range(n)) for c in range(6) for n in (3, 11, 20)]


def test_threads_hammering_the_store(store: CacheStore) -> None:
    store.set_quota("ram", 6_000)
    store.set_quota("ram_file", 6_000)
    store.set_quota("disk", 12_000)
    stop = threading.Event()
    failures: list[BaseException] = []

    def guarded(fn: object) -> threading.Thread:
        def run() -> None:
            try:
                rng = random.Random(threading.get_ident())
                while not stop.is_set():
                    fn(rng)  # type: ignore[operator]
            except BaseException as exc:  # noqa: BLE001 - reported below
                failures.append(exc)

        return threading.Thread(target=run)

    def saver(rng: random.Random) -> None:
        tokens = rng.choice(CONVS)
        store.submit_save(
            model_id="m", meta=META, tokens=tokens, payload=payload_for(tokens, 900),
            reason="continued", tier=rng.choice(["ram", "ram_file", "disk"]),
        )  # fmt: skip

    def loader(rng: random.Random) -> None:
        tokens = rng.choice(CONVS)
        row = store.longest_prefix(META, tokens + [77])
        if row is not None:
            payload = store.load(row)
            assert payload is None or payload == payload_for(row.tokens, 900)

    def manager(rng: random.Random) -> None:
        rows = store.rows()
        if rows:
            row = rng.choice(rows)
            rng.choice([store.evict, store.pin, store.unpin, lambda k: store.move(k, "ram")])(
                row.key
            )
        for used, quota in store.tier_usage().values():
            assert used <= quota

    threads = [guarded(saver), guarded(saver), guarded(loader), guarded(loader), guarded(manager)]
    for t in threads:
        t.start()
    stop.wait(1.5)
    stop.set()
    for t in threads:
        t.join(10)
    assert store.flush(10)
    assert failures == []
    counters = store.counters()
    print({k: counters[k] for k in ("demotions", "evictions", "loads", "saves_continued")})
    assert counters["demotions"] + counters["evictions"] > 0 and counters["loads"] > 0
    for used, quota in store.tier_usage().values():
        assert used <= quota
    assert sum(r.size for r in store.rows()) == sum(u for u, _ in store.tier_usage().values())
    assert store.counters()["corrupt_files"] == 0
    for row in store.rows():
        assert store.load(row) == payload_for(row.tokens, 900)
