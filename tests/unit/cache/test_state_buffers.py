"""The memory restores reuse (``StateBuffers``): given back, a buffer serves the next take
(one a little larger too: new buffers have headroom); a view given back cannot be read; a
buffer something still reads, or one too large, is never reused; a reserved buffer serves
the first take."""

from __future__ import annotations

import numpy as np
import pytest

from app.cache.state_buffers import HEADROOM, StateBuffers


def test_a_buffer_given_back_serves_the_next_take_of_its_size_or_less() -> None:
    pool = StateBuffers()
    view = pool.take(1000)
    view[:3] = b"abc"
    memory = view.obj
    pool.give(view)
    with pytest.raises(ValueError):
        view[0]  # noqa: B018 (a released view refuses to be read)
    smaller = pool.take(600)
    assert smaller.obj is memory and len(smaller) == 600
    pool.give(smaller)
    larger = pool.take(2000)
    assert larger.obj is not memory and len(larger) == 2000
    assert pool.kept_bytes == 0  # the smaller buffer was let go for the larger one


def test_at_most_keep_buffers_are_kept_and_none_too_large() -> None:
    pool = StateBuffers(keep=1, max_pooled_bytes=4096)
    a, b = pool.take(100), pool.take(100)
    pool.give(a)
    pool.give(b)
    assert pool.kept_bytes == 100 + 100 // HEADROOM  # one kept, the other let go
    big = pool.take(8192)  # the kept one is too small: let go for a new one
    assert pool.kept_bytes == 0
    pool.give(big)
    assert pool.kept_bytes == 0  # over max_pooled_bytes: never kept


def test_a_buffer_still_read_through_an_array_is_never_reused() -> None:
    pool = StateBuffers()
    view = pool.take(64)
    array = np.frombuffer(view, dtype=np.uint8)
    memory = view.obj
    pool.give(view)  # the array still reads its memory: not kept
    assert pool.kept_bytes == 0
    assert pool.take(64).obj is not memory
    assert array.size == 64
    view = pool.take(64)
    head = view[:8]
    pool.give(view)  # nor while a slice of it lives
    assert pool.kept_bytes == 0
    del head


def test_a_new_buffer_has_room_for_a_slightly_larger_restore() -> None:
    pool = StateBuffers()
    view = pool.take(8000)
    memory = view.obj
    assert len(view) == 8000 and len(memory) == 8000 + 8000 // HEADROOM
    pool.give(view)
    larger = pool.take(8000 + 8000 // HEADROOM)  # e.g. the other conversation, a few cells longer
    assert larger.obj is memory


def test_a_reserved_buffer_serves_the_first_take_and_is_made_once() -> None:
    pool = StateBuffers(keep=1, max_pooled_bytes=1 << 20)
    assert pool.reserve(40_000)
    memory_bytes = pool.kept_bytes
    assert memory_bytes == 40_000 + 40_000 // HEADROOM
    assert not pool.reserve(30_000)  # the kept buffer holds it already
    first = pool.take(40_500)
    assert len(first) == 40_500 and pool.kept_bytes == 0
    assert not pool.reserve(2 << 20) and not pool.reserve(0)  # over the pool's limit; nothing
    pool.give(first)
    assert pool.kept_bytes == memory_bytes
