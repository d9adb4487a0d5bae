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


def test_token_weighted_rate():
    totals = HitTotals.from_counters(
        {"hits_sticky": 1, "misses": 1, "prompt_tokens": 800, "prompt_tokens_reused": 24}
    )
    assert totals.rate == 0.5 and totals.token_rate == 0.03
    assert totals.summary() == "hits 50 % of 2 requests · tokens reused: 3 %"
    assert HitTotals().summary() == "no requests yet" and HitTotals().token_percent_text() == "–"


def test_the_engine_counts_prompt_tokens_and_the_reused_ones(tmp_path, tiny_model_path):
    """Real llama.cpp: a cold turn, then a sticky follow-up; the counters hold each request's
    prompt tokens and exactly the tokens its ``Reuse`` record says were reused, and survive
    a restart."""
    from app.engine import Engine, ModelConfig

    config = ModelConfig(path=str(tiny_model_path), n_ctx=512, n_seq_max=2, n_batch=128)
    engine = Engine(tmp_path / "data")
    model = engine.load_model("m", config)
    first = model.tokenize("The harbour lanterns were counted twice this year. " * 3)
    stats1 = model.infer(first, session_id="chat", response_tokens=4).result()
    follow = first + model.tokenize(" And the gulls?")
    stats2 = model.infer(follow, session_id="chat", response_tokens=4).result()
    assert stats1.reuse.tokens_reused == 0 and stats2.reuse.tokens_reused > 0
    totals = HitAccount(engine.cache).totals()
    assert totals.prompt_tokens == stats1.prompt_tokens + stats2.prompt_tokens
    assert totals.tokens_reused == stats2.reuse.tokens_reused
    assert (totals.hits, totals.misses) == (1, 1)
    engine.close()
    again = Engine(tmp_path / "data")
    assert HitAccount(again.cache).totals() == totals
    again.close()


def test_one_request_is_counted_in_the_dashboards_words():
    from app.conversation.accounting import request_words, source_of

    assert request_words("session", 1015, 1014) == (
        "a hit — held for its chat: 1,014 of 1,015 prompt tokens reused (100 %)"
    )
    assert request_words("cache", 768, 24) == (
        "a hit — restored from the cache: 24 of 768 prompt tokens reused (3 %)"
    )
    assert request_words("none", 812, 0) == "a miss — read in full: 0 of 812 prompt tokens reused (0 %)"
    assert request_words("remote", 60, 0).startswith("not counted")
    # Replies stored before the engine said where reused tokens came from.
    assert source_of("none", "", "exact") == "cache" and source_of("none", "", "sticky") == "session"
    assert source_of("none", "nothing_shared", "cold") == "none" and source_of("live") == "live"
    totals = HitTotals.of_requests([("session", 100, 90), ("none", 50, 0), ("remote", 70, 0)])
    assert totals == HitTotals(1, 1, 150, 90)
    assert totals.summary() == "hits 50 % of 2 requests · tokens reused: 60 %"
