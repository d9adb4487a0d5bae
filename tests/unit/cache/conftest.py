"""Fixtures for the cache tests: a real store on real files and SQLite under tmp_path."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from app.cache.keys import KeyMeta
from app.cache.store import CacheStore

META = KeyMeta(fingerprint=b"\x11" * 32, quant_type="q4_1", ctx_params_hash=b"\x22" * 32)
OTHER_META = KeyMeta(fingerprint=b"\x11" * 32, quant_type="q4_1", ctx_params_hash=b"\x33" * 32)


def payload_for(tokens: Sequence[int], size: int = 256) -> bytes:
    """A deterministic payload, different for different token lists."""
    seed = (sum(tokens) * 31 + len(tokens)) & 0xFF
    return bytes((seed + i) & 0xFF for i in range(size))


def save(
    store: CacheStore,
    tokens: Sequence[int],
    *,
    tier: str = "disk",
    reason: str = "finish",
    meta: KeyMeta = META,
    model_id: str = "m",
    size: int = 256,
    flush: bool = True,
) -> bytes | None:
    key = store.submit_save(
        model_id=model_id,
        meta=meta,
        tokens=list(tokens),
        payload=payload_for(tokens, size),
        reason=reason,
        tier=tier,
        prompt_text=f"prompt of {len(tokens)} tokens",
    )
    if flush:
        assert store.flush(10)
    return key


@pytest.fixture
def open_store(tmp_path: Path) -> Iterator[Callable[..., CacheStore]]:
    """Open (and at teardown close) stores on one data dir; later calls reopen it."""
    opened: list[CacheStore] = []

    def _open(**kwargs: object) -> CacheStore:
        kwargs.setdefault("ram_file_dir", tmp_path / "shm")
        store = CacheStore(tmp_path / "data", **kwargs)  # type: ignore[arg-type]
        opened.append(store)
        return store

    yield _open
    for store in opened:
        store.close()
    for store in opened:  # a swallowed bug anywhere in the store fails the test that hit it
        expected = getattr(store, "expected_internal_errors", 0)
        assert store.counters()["internal_errors"] == expected, "a bug was logged; see above"


@pytest.fixture
def store(open_store: Callable[..., CacheStore]) -> CacheStore:
    return open_store()


class Gate:
    """Wraps a tier's write so a test can hold the writer thread inside it."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()

    def install(self, monkeypatch: pytest.MonkeyPatch, store: CacheStore, tier: str) -> None:
        target = store._tiers[tier]
        original = target.put

        def gated(files: Any) -> list[str]:
            self.entered.set()
            assert self.release.wait(10), "test gate never released"
            return original(files)

        monkeypatch.setattr(target, "put", gated)
