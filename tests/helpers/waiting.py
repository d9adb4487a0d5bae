"""Waiting in tests: on a condition, with a deadline that fails the test instead of hanging it.

A test that polls ``while not ready: sleep`` hangs until pytest's 600 s timeout when the
behaviour it waits for is broken; one that sleeps a fixed time and then asserts passes or
fails with the machine's load. ``wait_until`` polls a condition until it holds and raises
``AssertionError`` (naming what it waited for) once the deadline passes. The deadline is a
hang guard, never a measurement: a loaded 2-core machine must stay well inside it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

WAIT_S = 10.0  # the default hang guard, in seconds


def wait_until(check: Callable[[], T], timeout: float = WAIT_S, every: float = 0.002, what: str = "") -> T:
    """Poll ``check()`` until it returns something truthy and return that value; raise
    ``AssertionError`` when ``timeout`` seconds pass first (with the last value seen)."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            label = what or getattr(check, "__name__", "condition")
            raise AssertionError(f"{label} not met within {timeout} s (last value {value!r})")
        time.sleep(every)
