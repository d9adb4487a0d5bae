"""The memory restores reuse (``StateBuffers``): given back, a buffer serves the next take
(one a little larger too: new buffers have headroom); a view given back cannot be read; a
buffer something still reads, or one too large, is never reused; a reserved buffer serves
the first take. And the memory saves pack into (``SaveBuffers``): lent again only once no
view of it is alive anywhere."""

from __future__ import annotations

import numpy as np
import pytest

from app.cache.state_buffers import HEADROOM, SAVE_HEADROOM, SaveBuffers, StateBuffers


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


def test_a_lent_buffer_is_lent_again_once_nothing_reads_it() -> None:
    pool = SaveBuffers()
    view = pool.lend(1000)
    view[:] = b"a" * 1000
    memory = view.obj
    payload = view.toreadonly()[10:900]  # what a pack hands the cache
    del view
    other = pool.lend(1000)  # the payload still reads the first: other memory
    assert other.obj is not memory
    other[:] = b"b" * 1000
    assert bytes(payload) == b"a" * 890  # and the payload is untouched
    del payload, other
    again = pool.lend(800)
    assert again.obj is memory and len(again) == 800


def test_a_buffer_read_through_an_array_or_a_stored_view_is_not_lent() -> None:
    pool = SaveBuffers(keep=1)
    view = pool.lend(64)
    memory = view.obj
    array = np.frombuffer(view.toreadonly(), dtype=np.uint8)
    del view
    assert pool.lend(64).obj is not memory
    kept = {"row": memoryview(memory)[:8]}  # as a RAM tier keeps a whole blob
    del array
    assert pool.lend(64).obj is not memory
    del kept
    assert pool.lend(64).obj is memory


def test_at_most_keep_buffers_are_tracked_and_none_too_large() -> None:
    pool = SaveBuffers(keep=2, max_pooled_bytes=4096)
    a, b, c = pool.lend(100), pool.lend(100), pool.lend(100)  # all three read at once
    assert pool.kept_bytes == 2 * (100 + 100 // SAVE_HEADROOM)  # the third is nobody's to reuse
    third = c.obj
    del a, b, c
    assert pool.lend(100).obj is not third
    big = pool.lend(8192)  # over max_pooled_bytes: new memory, never tracked
    assert len(big) == 8192 and pool.kept_bytes == 2 * (100 + 100 // SAVE_HEADROOM)


def test_a_free_buffer_too_small_makes_way_for_a_larger_one() -> None:
    pool = SaveBuffers(keep=2)
    small = pool.lend(100)
    reading = pool.lend(100)  # the second buffer, still read below
    first = small.obj
    del small
    larger = pool.lend(1000)  # the free one makes way; the one still read is left alone
    assert larger.obj is not first and len(larger.obj) == 1000 + 1000 // SAVE_HEADROOM
    assert pool.kept_bytes == len(larger.obj) + len(reading.obj)
    memory = larger.obj
    del larger
    assert pool.lend(1400).obj is memory  # a later pack of the grown conversation fits it
