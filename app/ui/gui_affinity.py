"""The GUI thread keeps off the core where llama.cpp reads a sent message (type-ahead).

Right after a send the GUI thread stores the message and redraws the chat (15-30 ms of its
CPU) while llama.cpp reads the prompt's last tokens on the scheduler's thread. When llama.cpp
reads on fewer threads than the GUI thread may use cores, the two should run side by side;
but a thread woken while another runs may be put on that one's core, and it then waits for
the kernel to move one of them (a tick: 4 ms at ``CONFIG_HZ=250``). NOTE: traced in B11
(2026-12-04, one llama.cpp thread for requests, 2 cores): the GUI thread woke from
``EngineBridge.submit``'s wait on the scheduler thread's core in 6 of 7 typed turns, and in 5
the 6-token read took its ~35 ms of CPU plus 4-16 ms of waiting for the core; kept off that
core until the reply's first update, its wall time exceeded its CPU time by 0.2-0.7 ms in 7
of 7 typed turns of one trace and 6 of 7 of another (the
GUI thread woken again after storing the message had landed there too, so a single move at the
wake's end was not enough).

So ``EngineBridge.submit`` asks ``keep_off`` for the core the engine's thread was on as it
started reading (``current_cpu`` there), and the bridge ``release``s it at the request's
first update (or when it shuts down). Threads started by the GUI thread meanwhile inherit
its narrower set: ``release`` gives them the whole set back too. Linux only (where the OS
says which core a thread runs on and lets one set it); elsewhere all of this does nothing.
"""

from __future__ import annotations

import ctypes
import logging
import os
import threading
from collections.abc import Callable

from app import latency

log = logging.getLogger(__name__)


def _sched_getcpu() -> Callable[[], int] | None:
    """libc's ``sched_getcpu``, called with the GIL held (``PyDLL``, not ``CDLL``): it is called
    in ``on_reading``, right before the ``llama_decode``, where letting the GIL go would let
    another thread take it and the read wait for it (``Scheduler._reading``)."""
    if not hasattr(os, "sched_setaffinity"):
        return None
    try:
        getcpu: Callable[[], int] = ctypes.PyDLL(None).sched_getcpu
    except (OSError, AttributeError):
        return None
    return getcpu


_GETCPU = _sched_getcpu()


def current_cpu() -> int | None:
    """The core the calling thread runs on now; None where the OS does not say."""
    if _GETCPU is None:
        return None
    cpu = int(_GETCPU())
    return cpu if cpu >= 0 else None


class CoreGuard:
    """The cores of the thread that called ``keep_off`` (the GUI thread), narrowed until
    ``release`` — which gives that thread its cores back whichever thread calls it."""

    def __init__(self) -> None:
        self._whole: set[int] | None = None
        """The thread's cores before ``keep_off`` narrowed them (None: not narrowed)."""
        self._owner = 0
        """The native id of the thread ``keep_off`` narrowed."""
        self._narrow: set[int] = set()
        self.request_id: str | None = None
        """The request whose reading narrowed them."""

    @property
    def active(self) -> bool:
        return self._whole is not None

    def keep_off(self, cpu: int, threads: int, request_id: str) -> bool:
        """Run on the thread's other cores until ``release``: llama.cpp reads ``request_id``
        on ``threads`` threads, one of them on ``cpu``. False (nothing changes) where it
        would leave the thread no core, or llama.cpp's threads all the others."""
        if _GETCPU is None or latency.off("keep_off"):
            return False
        self.release()
        try:
            owner = threading.get_native_id()
            whole = os.sched_getaffinity(0)
            narrow = whole - {cpu}
            if cpu not in whole or not narrow or threads >= len(whole):
                return False
            os.sched_setaffinity(0, narrow)
        except OSError as exc:  # a sandbox may refuse: the thread then runs anywhere, as before
            log.debug("could not keep the GUI thread off core %d: %s", cpu, exc)
            return False
        self._whole, self._narrow, self.request_id, self._owner = whole, narrow, request_id, owner
        return True

    def release(self) -> None:
        """The thread's whole set of cores back, and that of any thread of the process
        started meanwhile with the narrowed one."""
        whole, narrow, owner = self._whole, self._narrow, self._owner
        if whole is None:
            return
        self._whole, self._narrow, self.request_id = None, set(), None
        try:
            os.sched_setaffinity(owner, whole)  # the narrowed thread's, not the caller's
            tids = [int(t) for t in os.listdir("/proc/self/task")]
        except OSError as exc:  # a sandbox, or the thread has ended
            log.debug("could not give the GUI thread its cores back: %s", exc)
            return
        for tid in tids:
            try:
                if tid != owner and os.sched_getaffinity(tid) == narrow:
                    os.sched_setaffinity(tid, whole)
            except OSError:  # it ended meanwhile
                pass


GUARD = CoreGuard()
"""The GUI thread's (there is one)."""
