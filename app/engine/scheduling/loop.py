"""The scheduler thread: an inbox of calls run between ticks, the loop, and how it ends.

Other threads never touch the scheduler's state; they ``post`` closures (``call`` waits for
the result). The loop, like the seed's gen_statem:

    drain the inbox (waiting while idle) → gather a burst → tick → idle clean-up → publish

Each phase is guarded: an exception in the tick fails the running requests (the tick itself
already fails only what must fail); one in the idle clean-up or the publish is logged and
the loop goes on. Nothing waits forever on a stopped or dead loop: once ``stop()`` is called
or the loop dies, every queued and every later call fails at once with an ``EngineError``,
and every admitted request gets its ``Error``.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, Protocol

from app.engine.errors import EngineError, NotFound, SchedulerDied

log = logging.getLogger(__name__)

BURST_GAP_S = 0.0005
BURST_MAX_S = 0.005
ARRIVAL_WAIT_MAX_S = 0.025
"""How long a burst woken from idle waits for requests still on their way (a server
rendering and tokenizing them, ``LoopTarget.num_arriving``). NOTE: B9 (two agents re-sending
~2,100-token conversations) renders and tokenizes a request in 5-25 ms on a loaded 2-core
machine; the first admitted request's prefill started 16 ms before the other, shorter one
was admitted, which then waited for that whole prefill."""

_Call = tuple[Callable[[], Any], "Future[Any]"]


class LoopTarget(Protocol):
    """What the loop drives (``app.engine.scheduling.scheduler.Scheduler``)."""

    def is_busy(self) -> bool:
        """Requests are running: tick without waiting for calls."""
        ...

    def num_arriving(self) -> int:
        """Requests on their way that are not admitted yet (``Arrivals.num_unsettled``)."""
        ...

    def tick(self) -> None: ...

    def on_idle(self) -> None:
        """Nothing runs: clean up what had to wait for idle."""
        ...

    def publish(self) -> None: ...

    def fail_running(self, exc: Exception) -> None:
        """The tick raised: end every running request with an Error."""
        ...

    def abandon(self, exc: Exception) -> None:
        """The loop is ending: end every running and waiting request with an Error."""
        ...


class SchedulerLoop:
    def __init__(self, target: LoopTarget) -> None:
        self.target = target
        self.inbox: queue.SimpleQueue[_Call | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._refusal: EngineError | None = None
        """Why calls are refused now (set once, by ``stop`` or a dying loop)."""
        self.ended = threading.Event()
        """Set when ``run`` has returned: nothing touches the backend any more."""

    # ------------------------------------------------------------------ any thread

    def post(self, fn: Callable[[], Any]) -> Future[Any]:
        """Run ``fn`` on the scheduler thread between ticks; the future holds its result."""
        fut: Future[Any] = Future()
        with self._lock:
            if self._refusal is None:
                self.inbox.put((fn, fut))
                return fut
            refusal = self._refusal
        fut.set_exception(refusal)
        return fut

    def call(self, fn: Callable[[], Any], timeout: float | None = None) -> Any:
        return self.post(fn).result(timeout)

    def stop(self) -> None:
        """Refuse new calls; the loop runs what is queued, then returns."""
        with self._lock:
            if self._refusal is None:
                self._refusal = NotFound("the model is unloaded")
                self.inbox.put(None)

    @property
    def is_stopped(self) -> bool:
        return self._refusal is not None

    # ------------------------------------------------------------------ the scheduler thread

    def run(self) -> None:
        """The loop; returns after ``stop()`` (or after logging why it died)."""
        reason: EngineError = NotFound("the model is unloaded")
        try:
            while self._iterate():
                pass
        except BaseException as exc:  # a bug in the loop itself: fail loudly, hang nobody
            log.critical("the scheduler loop died", exc_info=True)
            reason = SchedulerDied(f"the model's scheduler stopped after an internal error ({exc!r}); reload the model")
        finally:
            self._refuse(reason)
            try:
                self.target.abandon(reason)
            except Exception:
                log.exception("failing the requests of a stopped scheduler failed")
            self._fail_queued()
            self.ended.set()

    def _iterate(self) -> bool:
        target = self.target
        was_idle = not target.is_busy()
        if self._drain(block=was_idle) is None:
            return False
        if was_idle and target.is_busy() and not self._gather_burst():
            return False
        if target.is_busy():
            self._guarded("tick", target.tick, target.fail_running)
        if not target.is_busy():
            self._guarded("idle clean-up", target.on_idle)
        self._guarded("publish", target.publish)
        return True

    def _guarded(self, phase: str, fn: Callable[[], None], on_error: Callable[[Exception], None] | None = None) -> None:
        try:
            fn()
        except Exception as exc:
            log.exception("scheduler %s failed", phase)
            if on_error is not None:
                on_error(exc)

    def _gather_burst(self) -> bool:
        """Woken from idle: let the rest of a burst arrive before the first tick.

        Each ``infer`` waits for its admission, so a loop of calls arrives one call at a time;
        while calls keep coming (within ``BURST_GAP_S`` of each other, ``BURST_MAX_S`` in
        all), they are admitted together and the first tick prefills them as one burst. And
        while a request is on its way (``num_arriving``: a server prepares it), up to
        ``ARRIVAL_WAIT_MAX_S``, so the first tick can take the shortest prefill first. A lone
        request waits for nothing: it is admitted (settled) before this runs.
        Returns False when ``stop()`` arrived meanwhile.
        """
        start = time.perf_counter()
        deadline = start + BURST_MAX_S
        arrivals_deadline = start + ARRIVAL_WAIT_MAX_S
        while True:
            now = time.perf_counter()
            waiting_for_arrivals = now < arrivals_deadline and self.target.num_arriving() > 0
            if now >= deadline and not waiting_for_arrivals:
                return True
            time.sleep(BURST_GAP_S)
            num = self._drain(block=False)
            if num is None:
                return False
            if not num and not waiting_for_arrivals:
                return True

    def _drain(self, block: bool) -> int | None:
        """Run every queued call (waiting for the first one when ``block``): how many ran,
        or None when the stop marker came."""
        if not block and self.inbox.empty():  # the usual tick: no call waits, no queue.Empty raised
            return 0
        try:
            item = self.inbox.get(block=block)
        except queue.Empty:
            return 0
        num = 0
        while True:
            if item is None:
                return None
            fn, fut = item
            num += 1
            if fut.set_running_or_notify_cancel():
                try:
                    fut.set_result(fn())
                except BaseException as exc:
                    fut.set_exception(exc)
            try:
                item = self.inbox.get_nowait()
            except queue.Empty:
                return num

    def _refuse(self, reason: EngineError) -> None:
        with self._lock:
            if self._refusal is None:
                self._refusal = reason

    def _fail_queued(self) -> None:
        """Calls still queued when the loop ends fail with the reason (none can be added now)."""
        assert self._refusal is not None
        while True:
            try:
                item = self.inbox.get_nowait()
            except queue.Empty:
                return
            if item is not None and item[1].set_running_or_notify_cancel():
                item[1].set_exception(self._refusal)
