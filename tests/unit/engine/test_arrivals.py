"""Requests on their way to a model (``Arrivals``): a burst woken from idle waits for the ones
a server still prepares, a bounded time, and a lone request waits for nothing (issue 24, B9:
two agents' requests reached the engine 16 ms apart and the shorter one waited for the
other's whole prefill)."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from app.engine.cache_hooks import Arrivals, NullCache
from app.engine.config import ModelConfig
from app.engine.errors import EngineError
from app.engine.scheduling import loop as loop_module
from app.engine.scheduling.commands import Admit
from app.engine.scheduling.loop import SchedulerLoop
from tests.helpers.stub_backend import StubBackend
from tests.helpers.waiting import wait_until
from tests.unit.engine.harness import make


class Target:
    """A loop target that records which calls each tick found admitted."""

    def __init__(self) -> None:
        self.arrivals = Arrivals(NullCache(ModelConfig(path="stub").cache_policy))
        self.admitted: list[str] = []
        self.ticks: list[list[str]] = []
        self.ticked = threading.Event()
        self.asked_while_arriving: list[float] = []  # when the loop asked, and heard "some"

    def is_busy(self) -> bool:
        return bool(self.admitted)

    def num_arriving(self) -> int:
        n = self.arrivals.num_unsettled
        if n:
            self.asked_while_arriving.append(time.perf_counter())
        return n

    def tick(self) -> None:
        self.ticks.append(list(self.admitted))
        self.admitted.clear()
        self.ticked.set()

    def on_idle(self) -> None:
        pass

    def publish(self) -> None:
        pass

    def fail_running(self, exc: Exception) -> None:
        pass

    def abandon(self, exc: Exception) -> None:
        pass


def running(target: Target) -> tuple[SchedulerLoop, threading.Thread]:
    loop = SchedulerLoop(target)
    thread = threading.Thread(target=loop.run, daemon=True)
    thread.start()
    return loop, thread


def stop(loop: SchedulerLoop, thread: threading.Thread) -> None:
    loop.stop()
    thread.join(10)
    assert not thread.is_alive()


def test_a_burst_waits_for_a_request_still_being_prepared(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(loop_module, "ARRIVAL_WAIT_MAX_S", 30.0)  # no deadline in the way here
    target = Target()
    loop, thread = running(target)
    try:
        with target.arrivals.arriving():  # the second client's request: being rendered
            a = threading.Thread(target=lambda: _admit(loop, target, target.arrivals.arriving(), "long"))
            a.start()
            a.join(10)  # admitted; the loop now gathers its burst
            # The render takes a while: wait until the loop has asked twice, past its burst
            # deadline (BURST_MAX_S after the burst began, which was before the join), and
            # heard that a request is on its way. A loop that ignored the answer would tick
            # after the first such ask and never ask again (it idles once "long" has run).
            past = time.perf_counter() + loop_module.BURST_MAX_S
            wait_until(lambda: sum(t >= past for t in target.asked_while_arriving) >= 2,
                       what="the loop waiting for the request on its way")  # fmt: skip
            assert not target.ticked.is_set(), "ticked while a request was on its way"
            loop.call(lambda: target.admitted.append("short"))
            target.arrivals.settle(_outer(target))
        assert target.ticked.wait(10)
        assert target.ticks[0] == ["long", "short"]
    finally:
        stop(loop, thread)


def _outer(target: Target) -> Any:
    from app.engine.cache_hooks import _CURRENT

    arrival = _CURRENT.get()
    assert arrival is not None
    return arrival


def _admit(loop: SchedulerLoop, target: Target, ctx: Any, name: str) -> None:
    with ctx as arrival:  # a request of its own (another thread: another context)
        loop.call(lambda: (target.admitted.append(name), target.arrivals.settle(arrival)))


def test_a_lone_request_waits_for_nothing_and_an_arrival_that_never_comes_for_a_bounded_time() -> None:
    target = Target()
    loop, thread = running(target)
    try:
        _admit(loop, target, target.arrivals.arriving(), "alone")  # settled at its admission
        assert target.ticked.wait(10)
        assert target.arrivals.num_unsettled == 0
        target.ticked.clear()
        with target.arrivals.arriving():  # prepared, never sent (a refused prompt, say)
            t0 = time.perf_counter()
            _admit(loop, target, target.arrivals.arriving(), "other")
            assert target.ticked.wait(10)
            assert time.perf_counter() - t0 < 10  # the wait ended without it
        assert target.ticks == [["alone"], ["other"]]
    finally:
        stop(loop, thread)


def test_arrivals_nest_settle_once_and_hold_the_writer_while_any_is_on_its_way() -> None:
    h = make(StubBackend(n_seq_max=2))
    arrivals = h.sch.arrivals
    with arrivals.arriving() as outer:  # the server route
        with arrivals.arriving() as inner:  # Model.infer inside it: the same arrival
            assert inner is outer and (arrivals.num, arrivals.num_unsettled) == (1, 1)
            h.sch.commands.execute(Admit(h.admission("a prompt", response_tokens=2), inner))
            assert (arrivals.num, arrivals.num_unsettled) == (1, 0)  # admitted, still on its way
        assert arrivals.num == 1
    assert (arrivals.num, arrivals.num_unsettled) == (0, 0)
    with arrivals.arriving():  # refused at admission: settled all the same
        with pytest.raises(EngineError):
            h.sch.commands.execute(Admit(h.admission("", response_tokens=2), _outer_of(arrivals)))
        assert arrivals.num_unsettled == 0
    assert (arrivals.num, arrivals.num_unsettled) == (0, 0)


def _outer_of(arrivals: Arrivals) -> Any:
    from app.engine.cache_hooks import _CURRENT

    arrival = _CURRENT.get()
    assert arrival is not None and arrival.owner is arrivals
    return arrival
