"""``seqstate.concat(..., n_cells=)``: joining a chain's chunks and cutting in one copy gives
the same bytes as cutting the whole state."""

from __future__ import annotations

import pytest

from app.cache.blobs import seqstate
from tests.helpers.kv_states import state_for


@pytest.mark.parametrize("keep", [0, 1, 7, 8, 9, 20, 29, 30])
def test_concat_with_a_cell_limit_is_a_cut(keep: int) -> None:
    tokens = list(range(30))
    whole = state_for(tokens, n_layer=3)
    pieces = seqstate.split(whole, [0, 8, 16, 24, 30])
    assert seqstate.concat(pieces) == whole
    assert seqstate.concat(pieces, n_cells=keep) == seqstate.cut(whole, keep)
    assert seqstate.concat(pieces[:2], n_cells=keep) == seqstate.cut(whole, min(keep, 16))


def test_concat_keeps_only_the_head_of_a_piece_a_row_branches_off_inside() -> None:
    """A row sharing 5 cells of a stored 8-cell chunk, then its own cells from position 13."""
    row = list(range(20))
    mine = seqstate.split(state_for(row, n_layer=3), [0, 8, 13, 20])
    other = seqstate.split(state_for(row[:13] + [99, 98, 97], n_layer=3), [0, 8, 16])[1]  # cells 8..15
    assert seqstate.concat([mine[0], other, mine[2]], keep=[8, 5, 7]) == state_for(row, n_layer=3)
    assert seqstate.concat([mine[0], other, mine[2]], keep=[8, 5, 7], n_cells=10) == seqstate.cut(
        state_for(row, n_layer=3), 10)  # fmt: skip
    with pytest.raises(seqstate.UnknownLayout):  # the kept cells must follow each other
        seqstate.concat([mine[0], other, mine[2]], keep=[8, 4, 7])
    with pytest.raises(ValueError):
        seqstate.concat([mine[0], other], keep=[8])
