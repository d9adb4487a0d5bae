"""Which free seq a new request gets (``SeqPool.take``): the one whose leftover cells it
extends, as long as the running seqs' ids stay consecutive (one ubatch a decode tick)."""

from __future__ import annotations

from app.engine.scheduling.sessions import SeqPool


class _Backend:
    def seq_rm(self, seq_id: int, p0: int) -> None:
        pass


HEAD = list(range(100, 140))


def _pool(n: int = 4) -> SeqPool:
    return SeqPool(_Backend(), n)  # type: ignore[arg-type]


def _run_on(pool: SeqPool, seq: int) -> None:
    pool.free.remove(seq)


def test_the_seq_whose_leftover_the_prompt_extends() -> None:
    pool = _pool()
    pool.leftovers[2] = (tuple(HEAD), 0)
    pool.leftovers[1] = (tuple(HEAD[:10]), 0)
    assert pool.take([*HEAD, 7], weights_epoch=0, min_share=32) == 2
    assert pool.take_leftover(2, 0) == tuple(HEAD)  # the admission starts from its cells
    assert pool.leftovers == {1: (tuple(HEAD[:10]), 0)}  # the other free seq keeps its own
    pool.check(running=[2])


def test_the_lowest_free_seq_when_no_leftover_shares_enough() -> None:
    pool = _pool()
    pool.leftovers[2] = (tuple(HEAD[:20]), 0)
    assert pool.take([*HEAD, 7], weights_epoch=0, min_share=32) == 0
    pool = _pool()
    pool.leftovers[2] = (tuple(HEAD), 1)  # computed under other adapter weights
    assert pool.take([*HEAD, 7], weights_epoch=0, min_share=32) == 0
    pool = _pool()
    pool.leftovers[2] = (tuple(HEAD), 0)
    pool.leftovers[0] = (tuple(HEAD[::-1]), 0)
    assert pool.take([*HEAD, 7], weights_epoch=None) == 0  # the cache is off: the lowest seq
    assert pool.take() == 1


def test_running_seqs_stay_consecutive() -> None:
    pool = _pool()
    _run_on(pool, 0)
    pool.leftovers[3] = (tuple(HEAD), 0)
    assert pool.take([*HEAD, 7], weights_epoch=0, min_share=32) == 1  # 3 would split {0, 3}
    pool.leftovers[2] = (tuple(HEAD), 0)
    assert pool.take([*HEAD, 7], weights_epoch=0, min_share=32) == 2  # {0, 1, 2}
    assert pool.take_leftover(2, 0) == tuple(HEAD)
    pool.check(running=[0, 1, 2])


def test_a_gap_already_there_falls_back_to_the_lowest_free_seq() -> None:
    pool = _pool()
    _run_on(pool, 0)
    _run_on(pool, 3)
    assert pool.take([*HEAD, 7], weights_epoch=0, min_share=32) == 1
    assert pool.take() == 2
    assert pool.take() is None


def test_a_request_sharing_no_leftover_leaves_the_others_theirs() -> None:
    """It takes an empty seq if there is one, else the oldest leftover's: another client's
    follow-up may still come for the newer ones."""
    pool = _pool(3)
    for seq in (0, 1):
        pool.free.remove(seq)
    pool.leave(1, HEAD, 0)  # client A's turn ends first,
    pool.leave(0, HEAD[::-1], 0)  # then B's
    assert pool.take([5, 6, 7], weights_epoch=0, min_share=32) == 2  # the empty seq
    pool.leave(2, [9] * 40, 0)  # (C's turn, the newest)
    assert pool.take([5, 6, 7], weights_epoch=0, min_share=32) == 1  # A's, the oldest
    assert pool.take_leftover(1, 0) == tuple(HEAD)  # (cleared by the admission: shares nothing)
    assert pool.take([*HEAD[::-1], 7], weights_epoch=0, min_share=32) == 0  # B's follow-up finds B's
