"""``TokenMemo``: a re-sent conversation gets the ids the engine holds for its shared bytes."""

from __future__ import annotations

from app.server.alignment import TokenMemo

# A toy vocabulary where the same text has two tokenizations: "Paris" = 5 or 6+7. Token 2 is
# long: the memo only considers sequences that share their first 64 bytes with the prompt.
VOCAB = {1: b"<s>", 2: b"Q: " + b"-" * 64, 3: b" where", 4: b"?", 5: b" Paris", 6: b" Par", 7: b"is", 8: b"<e>", 9: b" ok", 10: b"!"}


def memo() -> TokenMemo:
    return TokenMemo(VOCAB.__getitem__)


def test_reply_sampled_as_other_merges_is_given_back_its_ids() -> None:
    m = memo()
    m.remember([1, 2, 3, 4, 6, 7, 8])  # the model sampled " Par" + "is", then end
    fresh = [1, 2, 3, 4, 5, 8, 2, 9, 4]  # the client's text, tokenized anew: " Paris"
    assert m.align(fresh) == [1, 2, 3, 4, 6, 7, 8, 2, 9, 4]


def test_nothing_remembered_or_nothing_shared_leaves_tokens_alone() -> None:
    m = memo()
    assert m.align([1, 2, 3]) == [1, 2, 3]
    m.remember([1, 9, 10])
    assert m.align([1, 2, 3]) == [1, 2, 3]


def test_divergence_keeps_the_shared_head_up_to_a_common_boundary() -> None:
    m = memo()
    m.remember([1, 2, 3, 4, 6, 7, 9])  # "<s>Q: where? Paris ok"
    fresh = [1, 2, 3, 4, 5, 10]  # "<s>Q: where? Paris!": shares up to " Paris"
    out = m.align(fresh)
    assert out == [1, 2, 3, 4, 6, 7, 10]
    assert b"".join(VOCAB[t] for t in out) == b"".join(VOCAB[t] for t in fresh)


def test_split_inside_a_token_falls_back_to_the_previous_common_boundary() -> None:
    m = memo()
    m.remember([1, 2, 3, 4, 6, 10])  # "... Par!" — shares " Par" with " Paris" but not a boundary of it
    fresh = [1, 2, 3, 4, 5, 8]
    assert m.align(fresh) == fresh


def test_the_longest_remembered_sequence_wins_and_capacity_is_bounded() -> None:
    m = TokenMemo(VOCAB.__getitem__, capacity=2)
    m.remember([1, 2, 6, 7])
    m.remember([1, 2, 6, 7, 8, 9])
    assert m.align([1, 2, 5, 8, 9, 4]) == [1, 2, 6, 7, 8, 9, 4]
    m.remember([1, 10])
    m.remember([1, 9])  # evicts the two oldest
    assert m.align([1, 2, 5, 8, 9, 4]) == [1, 2, 5, 8, 9, 4]


def test_tool_texts_by_call_id() -> None:
    m = memo()
    m.remember_tool_text(["call_a", "call_b"], "<tool_call>x</tool_call>")
    assert m.tool_text("call_b") == "<tool_call>x</tool_call>"
    assert m.tool_text("call_c") is None
