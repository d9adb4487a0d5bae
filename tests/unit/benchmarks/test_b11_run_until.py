"""B11's wait for a reply (``run_until``): the GUI's own event loop runs meanwhile, so what
another thread posts is handled while it waits; it ends when its condition holds, when it
expires, or with the exception its condition raised."""

from __future__ import annotations

import threading
import time

import pytest
from PySide6.QtCore import QObject, Qt, QTimer, Signal, Slot

from benchmarks.scenarios_typeahead import run_until


def _within(seconds: float):
    """An expiry far beyond what the waits here take: a broken wait fails, never hangs."""
    end = time.monotonic() + seconds
    return lambda: time.monotonic() > end


class _Receiver(QObject):
    """Lives in the GUI thread: a signal emitted from another thread reaches ``note`` only when
    the GUI thread's event loop handles the queued call."""

    poke = Signal(int)

    def __init__(self) -> None:
        super().__init__()
        self.got: list[int] = []
        self.poke.connect(self.note, Qt.ConnectionType.QueuedConnection)

    @Slot(int)
    def note(self, value: int) -> None:
        self.got.append(value)


def test_what_another_thread_posts_is_handled_during_the_wait(qapp):
    receiver = _Receiver()
    sender = threading.Thread(target=receiver.poke.emit, args=(7,))
    sender.start()
    sender.join()
    assert receiver.got == []  # queued: nothing has run the GUI's loop yet
    assert run_until(lambda: receiver.got, _within(10)) is True
    assert receiver.got == [7]


def test_a_timer_in_the_gui_thread_fires_during_the_wait(qapp):
    fired: list[bool] = []
    QTimer.singleShot(20, lambda: fired.append(True))
    assert run_until(lambda: fired, _within(10)) is True


def test_a_condition_that_holds_already_returns_at_once(qapp):
    calls: list[int] = []

    def cond() -> bool:
        calls.append(1)
        return True

    assert run_until(cond, lambda: pytest.fail("not checked: nothing to wait for")) is True
    assert len(calls) == 1


def test_it_gives_up_when_it_expires(qapp):
    checks: list[int] = []

    def expired() -> bool:
        checks.append(1)
        return len(checks) >= 3

    assert run_until(lambda: False, expired) is False
    assert len(checks) == 3


def test_an_exception_in_the_condition_ends_the_wait_and_is_raised(qapp):
    calls: list[int] = []

    def cond() -> bool:
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("the chat is gone")
        return False

    with pytest.raises(RuntimeError, match="the chat is gone"):
        run_until(cond, _within(10))  # without the raise: False after 10 s
    assert len(calls) == 3
