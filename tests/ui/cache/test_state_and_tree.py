"""Plain-Python parts of the dashboard: the row list (no Qt). The tree is the store's
(``app.cache.contents.tree``, tested in tests/unit/cache/test_tree.py)."""

from __future__ import annotations

from dataclasses import replace

from app.ui.state.row_state import CacheRowState
from tests.ui.cache.conftest import fake_row


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple] = []

    def __getattr__(self, name: str):  # every listener method records its call
        return lambda *args: self.events.append((name, *args))


def test_apply_coalesces_by_key_and_signals_ranges() -> None:
    state = CacheRowState()
    rec = Recorder()
    state.add_listener(rec)
    a, b, c = (fake_row([i] * (i + 2)) for i in range(3))
    state.reset([a])
    rec.events.clear()
    state.apply([("published", b), ("published", c), ("removed", b.key), ("updated", replace(a, hits=3))])
    assert [r.key for r in state.rows()] == [a.key, c.key]
    assert state.get(a.key).hits == 3
    assert ("changed", 0, 0) in rec.events
    assert ("before_insert", 1, 1) in rec.events
    assert not any(e[0] == "before_reset" for e in rec.events)
    state.apply([("removed", a.key)])
    assert rec.events[-2:] == [("before_remove", 0, 0), ("after_remove",)]
    assert state.position(c.key) == 0


def test_sorted_state_inserts_in_place() -> None:
    state = CacheRowState()
    rows = [fake_row(list(range(n))) for n in (5, 1, 9)]
    state.reset(rows)
    state.sort(lambda r: r.n_tokens, reverse=True)
    assert [r.n_tokens for r in state.rows()] == [9, 5, 1]
    state.apply([("published", fake_row(list(range(7))))])
    assert [r.n_tokens for r in state.rows()] == [9, 7, 5, 1]
    state.apply([("updated", replace(state.row(3), hits=1))])
    state.sort(lambda r: r.hits)
    assert state.row(3).hits == 1
