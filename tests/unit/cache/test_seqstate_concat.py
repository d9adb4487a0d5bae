"""``seqstate.concat(..., n_cells=)``: joining a chain's chunks and cutting in one copy gives
the same bytes as cutting the whole state."""

from __future__ import annotations

import pytest

from app.cache import seqstate
from tests.helpers.kv_states import state_for


@pytest.mark.parametrize("keep", [0, 1, 7, 8, 9, 20, 29, 30])
def test_concat_with_a_cell_limit_is_a_cut(keep: int) -> None:
    tokens = list(range(30))
    whole = state_for(tokens, n_layer=3)
    pieces = seqstate.split(whole, [0, 8, 16, 24, 30])
    assert seqstate.concat(pieces) == whole
    assert seqstate.concat(pieces, n_cells=keep) == seqstate.cut(whole, keep)
    assert seqstate.concat(pieces[:2], n_cells=keep) == seqstate.cut(whole, min(keep, 16))
