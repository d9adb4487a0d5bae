"""``HEARTH_LATENCY_OFF`` switches Hearth's latency mechanisms off one by one, to measure what
each buys (app/latency.py, docs/latency.md)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from app import latency
from app.cache.blobs.state_buffers import StateMemory
from app.cache.store import CacheStore
from app.ui import gui_affinity


def test_the_variable_names_the_mechanisms_that_are_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(latency.ENV, raising=False)
    assert not any(latency.off(name) for name in latency.MECHANISMS)
    monkeypatch.setenv(latency.ENV, " write_hold , state_pool,nonsense")
    assert {name for name in latency.MECHANISMS if latency.off(name)} == {"write_hold", "state_pool"}
    monkeypatch.setenv(latency.ENV, "all")
    assert all(latency.off(name) for name in latency.MECHANISMS)
    with pytest.raises(ValueError):
        latency.off("nonsense")


def test_the_state_pool_lends_fresh_memory_when_off(monkeypatch: pytest.MonkeyPatch) -> None:
    pool = StateMemory()
    first = pool.lend(1 << 20)
    address = first.obj
    pool.give(first)
    again = pool.lend(1 << 20)
    assert again.obj is address  # reused: the mechanism
    pool.give(again)
    monkeypatch.setenv(latency.ENV, "state_pool")
    fresh = pool.lend(1 << 20)
    assert fresh.obj is not address and len(fresh) == 1 << 20


def test_writes_are_not_held_when_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = CacheStore(tmp_path / "cache")
    try:
        holder = object()
        store.hold_writes(holder, True)
        assert store._hold.holders == {holder}
        store.hold_writes(holder, False)
        monkeypatch.setenv(latency.ENV, "write_hold")
        store.hold_writes(holder, True)
        assert not store._hold.holders
    finally:
        store.close()


@pytest.mark.skipif(gui_affinity.current_cpu() is None or len(os.sched_getaffinity(0)) < 2,
                    reason="the OS does not say which core a thread runs on, or there is one core")
def test_the_gui_thread_is_not_kept_off_a_core_when_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(latency.ENV, "keep_off")
    guard = gui_affinity.CoreGuard()
    whole = os.sched_getaffinity(0)
    assert not guard.keep_off(min(whole), threads=1, request_id="r")
    assert os.sched_getaffinity(0) == whole
