"""Plain-Python parts of the dashboard: the row list and the prefix tree (no Qt)."""

from __future__ import annotations

from dataclasses import replace

from app.ui.cache.prefix_tree import build_prefix_tree
from app.ui.cache.row_state import CacheRowState
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


def test_prefix_tree_shares_the_longest_prefix() -> None:
    system = list(range(100, 140))
    shared = fake_row(system)
    a1 = fake_row(system + [1, 2, 3])
    a2 = fake_row(system + [1, 2, 3, 4, 5, 6])
    b1 = fake_row(system + [9, 9])
    lone = fake_row([7, 7, 7, 7])
    other_model = fake_row(system + [1], model_id="x", meta=replace_meta())
    root = build_prefix_tree([a2, lone, b1, shared, a1, other_model])
    tops = {n.row.key for n in root.children}
    assert tops == {shared.key, lone.key, other_model.key}
    node = next(n for n in root.children if n.row.key == shared.key)
    assert [c.row.key for c in node.children] == [b1.key, a1.key]
    assert [c.row.key for c in node.children[1].children] == [a2.key]
    assert node.children[1].children[0].n_new_tokens == 3


def replace_meta():
    from app.cache.keys import KeyMeta

    return KeyMeta(bytes(32), "f16", bytes(32))


def test_prefix_tree_matches_brute_force() -> None:
    import random

    rng = random.Random(3)
    pool: list[list[int]] = [[rng.randrange(5) for _ in range(rng.randrange(1, 6))]]
    for _ in range(300):  # grow conversations from earlier ones, or start new ones
        base = rng.choice(pool) if rng.random() < 0.8 else []
        pool.append(base + [rng.randrange(5) for _ in range(rng.randrange(1, 4))])
    rows = {}
    for tokens in pool:
        row = fake_row(tokens)
        rows[row.key] = row
    root = build_prefix_tree(rows.values())
    parent_of = {n.row.key: (n.parent.row.key if n.parent.row else None) for n in root.walk() if n.row}
    assert len(parent_of) == len(rows)
    for row in rows.values():
        prefixes = [o for o in rows.values()
                    if o.n_tokens < row.n_tokens and row.tokens_le.startswith(o.tokens_le)]  # fmt: skip
        best = max(prefixes, key=lambda o: o.n_tokens, default=None)
        assert parent_of[row.key] == (best.key if best else None)
