"""One hit accounting: every hits_* counter is a hit, and lifetime totals survive restarts."""

from __future__ import annotations

from app.cache.store import CacheStore
from app.conversation.accounting import HitAccount, HitTotals


def test_every_hits_counter_counts():
    totals = HitTotals.from_counters(
        {"hits_exact": 1, "hits_sticky": 2, "hits_longest_prefix": 1, "hits_live": 1, "misses": 5, "saves_finish": 9}
    )
    assert (totals.hits, totals.misses, totals.requests) == (5, 5, 10)
    assert totals.rate == 0.5 and totals.percent_text() == "50 %"
    assert HitTotals().rate is None and HitTotals().percent_text() == "–"


def test_lifetime_totals_survive_a_restart_of_the_real_store(tmp_path):
    store = CacheStore(tmp_path / "cache")
    store.count("misses")
    store.count("hits_sticky", 3)
    assert HitAccount(store).totals() == HitTotals(3, 1)
    store.close()

    again = CacheStore(tmp_path / "cache")
    account = HitAccount(again)
    assert account.totals() == HitTotals(3, 1)  # read back from the cache's SQLite database
    again.count("hits_exact")
    assert account.totals() == HitTotals(4, 1)  # this session's counts are added live
    again.close()
    third = CacheStore(tmp_path / "cache")
    assert HitAccount(third).totals() == HitTotals(4, 1)
    third.close()
