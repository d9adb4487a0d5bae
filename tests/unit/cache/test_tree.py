"""The dashboard's tree: shared prefixes are nodes, split at the exact diverging token."""

from __future__ import annotations

import random
import time

from app.cache.contents.rows import Row, make_row
from app.cache.contents.tree import TreeNode, build_tree
from app.cache.keys import encode_tokens
from tests.unit.cache.conftest import META, OTHER_META


def row(tokens: list[int], session: str = "", meta=META) -> Row:  # type: ignore[no-untyped-def]
    le = encode_tokens(tokens)
    return make_row(
        key=meta.key(le), model_id="m", fingerprint=meta.fingerprint, quant_type=meta.quant_type,
        ctx_hash=meta.ctx_params_hash, tokens_le=le, tier="disk", size=1, save_reason="finish",
        created=0.0, session_id=session, format=2,
    )  # fmt: skip


def shape(node: TreeNode) -> tuple:  # type: ignore[type-arg]
    return (node.start, node.end, len(node.rows), tuple(shape(c) for c in node.children))


def test_a_shared_system_prompt_is_one_node_with_its_conversations_below() -> None:
    system = list(range(1000, 1300))
    rows = [row(system + [i] * 40, session=f"chat-{i}") for i in range(5)]
    rows += [row(system + [0] * 40 + [7] * 20, session="chat-0")]  # chat 0's next turn
    rows += [row(system[:10] + [9] * 5, meta=OTHER_META)]  # another model: its own tree
    tops = build_tree(rows)
    assert len(tops) == 2
    top = tops[0]
    assert (top.start, top.end, top.n_rows, len(top.children)) == (0, 300, 6, 5)
    assert top.tokens_le == encode_tokens(system) and top.namespace == rows[0].namespace
    assert top.sessions == tuple(f"chat-{i}" for i in range(5))
    chat0 = next(c for c in top.children if c.sessions == ("chat-0",))
    assert shape(chat0) == (300, 340, 1, ((340, 360, 1, ()),))


def test_regenerate_and_edit_branch_at_the_diverging_token() -> None:
    conv = list(range(1, 51))
    rows = [row(conv), row(conv[:30] + [99] * 10), row(conv[:30] + [98] * 10), row(conv[:12])]
    (top,) = build_tree(rows)
    # [0,12) ends a row; below it [12,30) is shared by three rows, then three branches
    assert shape(top) == (0, 12, 1, ((12, 30, 0, ((30, 50, 1, ()), (30, 40, 1, ()), (30, 40, 1, ()))),))


def test_the_tree_agrees_with_brute_force_and_is_quick() -> None:
    rng = random.Random(11)
    rows = []
    for _ in range(2000):
        base = [rng.randrange(4) for _ in range(rng.randrange(1, 12))]
        rows.append(row(base + [rng.randrange(50_000) for _ in range(rng.randrange(0, 300))]))
    rows = list({r.key: r for r in rows}.values())
    t0 = time.perf_counter()
    tops = build_tree(rows)
    print(f"\ntree of {len(rows)} rows built in {(time.perf_counter() - t0) * 1000:.1f} ms")
    seen = []
    for top in tops:
        for node in top.walk():
            for r in node.rows:
                assert r.n_tokens == node.end
                seen.append(r.key)
            for child in node.children:
                assert child.start == node.end
                # siblings differ at their first token; every row below starts with the node
                assert len({c.tokens_le[:4] for c in node.children}) == len(node.children)
                for below in child.walk():
                    for r in below.rows:
                        assert r.tokens_le[node.start * 4 : node.end * 4] == node.tokens_le
    assert sorted(seen) == sorted(r.key for r in rows)
