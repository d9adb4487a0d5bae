"""continuation_suffix: what to append to a sticky session so it reads as the new prompt."""

from app.engine.chat import continuation_suffix

VOCAB = {1: "<s>", 2: "ab", 3: "c", 4: "a", 5: "bc", 6: "<eog>", 7: " next", 8: "x"}


def piece(t: int) -> str:
    return VOCAB[t]


def test_plain_extension():
    assert continuation_suffix([1, 2, 3, 7], [1, 2, 3], piece) == [7]


def test_same_text_other_merges_aligns_by_text():
    # The session sampled "ab" + "c"; the re-rendered history tokenizes it as "a" + "bc".
    assert continuation_suffix([1, 4, 5, 7], [1, 2, 3], piece) == [7]


def test_final_end_of_generation_is_matched_by_id():
    assert continuation_suffix([1, 4, 5, 6, 7], [1, 2, 3, 6], piece, ended_with_eog=True) == [7]
    assert continuation_suffix([1, 4, 5, 8, 7], [1, 2, 3, 6], piece, ended_with_eog=True) is None


def test_divergent_text_or_nothing_new():
    assert continuation_suffix([1, 8, 7], [1, 2, 3], piece) is None
    assert continuation_suffix([1, 4, 5], [1, 2, 3], piece) is None
