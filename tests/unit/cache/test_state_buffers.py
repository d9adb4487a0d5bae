"""The memory states pass through (``StateMemory``): a buffer is lent again only once no view
of it is alive anywhere; a view given back cannot be read and frees its buffer; at most
``keep`` buffers are tracked and none too large; a free one too small makes way; new
buffers have headroom; reserved buffers serve the first lends."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from app.cache.blobs.state_buffers import HEADROOM, StateMemory


def test_a_lent_buffer_is_lent_again_once_nothing_reads_it() -> None:
    pool = StateMemory()
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


def test_a_view_given_back_cannot_be_read_and_frees_its_buffer() -> None:
    pool = StateMemory(keep=1)
    view = pool.lend(1000)
    view[:3] = b"abc"
    memory = view.obj
    pool.give(view)
    with pytest.raises(ValueError):
        view[0]  # noqa: B018 (a released view refuses to be read)
    smaller = pool.lend(600)  # the view is still referenced here, yet its buffer is free
    assert smaller.obj is memory and len(smaller) == 600


def test_a_buffer_read_through_an_array_or_a_stored_view_is_not_lent() -> None:
    pool = StateMemory(keep=1)
    view = pool.lend(64)
    memory = view.obj
    array = np.frombuffer(view.toreadonly(), dtype=np.uint8)
    pool.give(view)  # the array still reads its memory: not free
    assert pool.lend(64).obj is not memory
    kept = {"row": memoryview(memory)[:8]}  # as a RAM tier keeps a whole blob
    del array
    assert pool.lend(64).obj is not memory
    del kept
    assert pool.lend(64).obj is memory


def test_at_most_keep_buffers_are_tracked_and_none_too_large() -> None:
    pool = StateMemory(keep=2, max_pooled_bytes=4096)
    a, b, c = pool.lend(100), pool.lend(100), pool.lend(100)  # all three read at once
    assert pool.kept_bytes == 2 * (100 + 100 // HEADROOM)  # the third is nobody's to reuse
    third = c.obj
    del a, b, c
    assert pool.lend(100).obj is not third
    big = pool.lend(8192)  # over max_pooled_bytes: new memory, never tracked
    assert len(big) == 8192 and pool.kept_bytes == 2 * (100 + 100 // HEADROOM)


def test_a_free_buffer_too_small_makes_way_for_a_larger_one() -> None:
    pool = StateMemory(keep=2)
    small = pool.lend(100)
    reading = pool.lend(100)  # the second buffer, still read below
    first = small.obj
    del small
    larger = pool.lend(1000)  # the free one makes way; the one still read is left alone
    assert larger.obj is not first and len(larger.obj) == 1000 + 1000 // HEADROOM
    assert pool.kept_bytes == len(larger.obj) + len(reading.obj)
    memory = larger.obj
    del larger
    assert pool.lend(1400).obj is memory  # a later state of the grown conversation fits it


def test_reserved_buffers_serve_the_first_lends_and_are_made_once() -> None:
    pool = StateMemory(keep=3, max_pooled_bytes=1 << 20)
    assert pool.reserve(40_000, count=2) == 2 * (40_000 + 40_000 // HEADROOM)
    made = pool.kept_bytes
    assert pool.reserve(30_000, count=2) == 0  # two free buffers hold it already
    first, second = pool.lend(40_500), pool.lend(40_500)  # a restore: its files, its state
    assert {id(first.obj), id(second.obj)} == {id(b) for b in pool._bufs}  # noqa: SLF001
    assert pool.kept_bytes == made
    assert pool.reserve(2 << 20) == 0 and pool.reserve(0) == 0  # over the pool's limit; nothing
    assert pool.reserve(40_000) == 40_000 + 40_000 // HEADROOM  # both lent: a third is made
    assert pool.reserve(40_000) == 0  # and the pool is full


def test_a_reserve_replaces_a_free_buffer_too_small() -> None:
    pool = StateMemory(keep=1)
    small = pool.lend(100)
    del small
    assert pool.reserve(10_000) == 10_000 + 10_000 // HEADROOM
    assert pool.kept_bytes == 10_000 + 10_000 // HEADROOM


def test_lends_from_many_threads_never_share_a_buffer() -> None:
    pool = StateMemory(keep=4)
    seen: list[tuple[int, bytes]] = []
    lock = threading.Lock()

    def work(tag: int) -> None:
        for _ in range(200):
            view = pool.lend(4096)
            view[:] = bytes([tag]) * 4096
            for _ in range(3):
                if bytes(view) != bytes([tag]) * 4096:  # another thread wrote into it
                    with lock:
                        seen.append((tag, bytes(view[:1])))
            pool.give(view)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen == []


def test_the_pool_stays_within_its_limit_and_lets_free_buffers_go():
    """Issue 54: the pool lives inside the RAM tier's quota (``limit``); a buffer past it is lent
    once and not kept, and ``release_free`` lets every buffer nobody reads go."""
    pool = StateMemory(keep=4, max_pooled_bytes=1 << 20)
    pool.limit = 300_000
    a = pool.lend(100_000)  # kept: 150,000 bytes with headroom
    b = pool.lend(100_000)  # 300,000 in all: kept
    c = pool.lend(100_000)  # past the limit: lent, not kept
    assert pool.kept_bytes == 300_000
    assert pool.reserve(100_000, count=4) == 0  # (a and b are read: no room for more)
    pool.give(c)
    pool.give(a)
    assert pool.release_free() == 150_000  # b is still read
    assert pool.kept_bytes == 150_000
    pool.give(b)
    assert pool.release_free() == 150_000 and pool.kept_bytes == 0
