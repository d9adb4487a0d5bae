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


def stored_bytes(store: CacheStore, tier: str) -> int:
    """What a tier really holds: the sizes of its files."""
    if tier == "ram":
        return sum(store._ram.size_of(n) or 0 for suffix in (".kvc", ".kvch", ".kvr") for n in store._ram.names(suffix))
    return sum(p.stat().st_size for p in store._file_tiers[tier].dir.glob("*.kv*") if not p.name.endswith("-tmp"))


def test_threads_hammering_chunked_rows(open_store: object) -> None:
    """The same with real per-seq states: chunks shared between rows, superseded tails,
    LCP lookups cutting rows, demotions moving shared chunks, all at once."""
    from app.cache.lookup import Found
    from tests.helpers.kv_states import state_for

    store: CacheStore = open_store(chunk_tokens=4)  # type: ignore[operator]
    head = list(range(1, 13))
    convs = [head[: 4 * (c % 3 + 1)] + [100 + c] * n for c in range(6) for n in (3, 9, 17)]
    store.set_quota("ram", 3_000)
    store.set_quota("ram_file", 3_000)
    store.set_quota("disk", 10_000)
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
        conv = rng.choice(convs)
        tokens = conv[: rng.randrange(2, len(conv) + 1)]  # turns of a conversation: tails grow
        store.submit_save(model_id="m", meta=META, tokens=tokens, payload=state_for(tokens),
                          reason="continued", tier=rng.choice(["ram", "ram_file", "disk"]))  # fmt: skip

    def finder(rng: random.Random) -> None:
        conv = rng.choice(convs)
        prompt = conv[: rng.randrange(1, len(conv) + 1)] + [rng.randrange(3)]
        got = store.find(META, prompt)
        if isinstance(got, Found):
            assert got.payload == state_for(prompt[: got.n])

    def manager(rng: random.Random) -> None:
        rows = store.rows()
        if rows:
            row = rng.choice(rows)
            action = rng.choice([store.evict, store.pin, store.unpin, store.delete,
                                 lambda k: store.move(k, rng.choice(["ram", "ram_file", "disk"]))])  # fmt: skip
            action(row.key)
        for used, quota in store.tier_usage().values():
            assert used <= quota

    threads = [guarded(saver), guarded(saver), guarded(finder), guarded(finder), guarded(manager)]
    for t in threads:
        t.start()
    stop.wait(2.0)
    stop.set()
    for t in threads:
        t.join(10)
    assert store.flush(10)
    assert failures == []
    counters = store.counters()
    print({k: counters[k] for k in ("demotions", "evictions", "longest_prefix_probes", "saves_continued")})
    assert counters["demotions"] + counters["evictions"] > 0
    assert counters["corrupt_files"] == 0
    for tier, (used, quota) in store.tier_usage().items():
        assert used <= quota
        assert used == stored_bytes(store, tier), tier  # no leaked or lost file
    for row in store.rows():
        assert store.load(row) == state_for(list(row.tokens))
