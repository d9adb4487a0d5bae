"""The background writer on its own: bounded, never blocking, never dying."""

from __future__ import annotations

import threading

from app.cache.writer import Writer


def test_submit_flush_close() -> None:
    release, entered = threading.Event(), threading.Event()
    handled: list[int] = []
    errors: list[int] = []

    def handle(job: int) -> None:
        if job == 0:
            entered.set()
            assert release.wait(10)
        if job == 3:
            raise OSError("disk on fire")
        handled.append(job)

    writer: Writer[int] = Writer(handle, maxsize=2, on_error=lambda j, e: errors.append(j))
    assert writer.submit(0)
    assert entered.wait(10)  # job 0 is taken: the queue is empty
    assert writer.submit(1) and writer.submit(3)
    assert not writer.submit(2)  # full: refused at once
    assert not writer.flush(0.05)  # job 0 is still held
    release.set()
    assert writer.flush(10)
    assert handled == [0, 1] and errors == [3]
    assert writer.submit(4) and writer.flush(10) and handled == [0, 1, 4]  # still alive
    writer.close()
    writer.close()  # idempotent
    assert not writer.submit(5)
