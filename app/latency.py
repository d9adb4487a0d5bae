"""Hearth's latency mechanisms, each of which can be switched off to measure what it buys.

``HEARTH_LATENCY_OFF`` holds a comma-separated list of their names (``all`` for every one);
docs/latency.md says what each is for and the figure that justified it. Read once per value
of the variable, so a benchmark may set it before it starts the engine.
"""

from __future__ import annotations

import functools
import os

ENV = "HEARTH_LATENCY_OFF"
MECHANISMS = ("reading_wait", "keep_off", "write_hold", "arrival_hold", "state_pool")
"""``reading_wait``: the GUI thread's wait for llama.cpp to start reading a sent message;
``keep_off``: the GUI thread kept off the core that reads it; ``write_hold``: cache writes
held while a request waits for its first token; ``arrival_hold``: held while a request is on
its way to the scheduler; ``state_pool``: states packed and restored in reused memory."""


@functools.cache
def _parse(value: str) -> frozenset[str]:
    names = {part.strip().lower() for part in value.split(",") if part.strip()}
    return frozenset(MECHANISMS) if "all" in names else frozenset(names & set(MECHANISMS))


def off(name: str) -> bool:
    """Whether the mechanism ``name`` (one of ``MECHANISMS``) is switched off in this process."""
    if name not in MECHANISMS:
        raise ValueError(f"unknown latency mechanism {name!r}")
    return name in _parse(os.environ.get(ENV, ""))
