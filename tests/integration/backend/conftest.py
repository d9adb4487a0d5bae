"""Fixtures for the llama.cpp backend tests: backends on the tiny model, closed at teardown."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from app.engine.llama.kv_calibration import CANDIDATES
from app.engine.llama.llama_backend import LlamaBackend
from tests.helpers.llama_threads import LLAMA_THREADS

BackendFactory = Callable[..., LlamaBackend]

# NOTE: one thread. The test machine's two cores are shared with other suites, and ggml's
# spinning thread barriers make an oversubscribed 2-thread decode ~50x slower than 1 thread.
N_THREADS = LLAMA_THREADS


KV_CANDIDATES = [({"type_k": c.type_k, "type_v": c.type_v}, f"{c.type_k}-{c.type_v}") for c in CANDIDATES]
"""Every cell-type pair the KV calibration may choose (``app.engine.llama.kv_calibration``), with a
test id: test_exact_kv.py runs each on the tiny model, so whichever a machine picks is tested."""


@pytest.fixture
def kv_cells() -> dict[str, str]:
    """The KV cell types of an exactness test: the default pair unless a module says more."""
    return dict(KV_CANDIDATES[0][0])


@pytest.fixture
def make_backend(tiny_model_path: Path) -> Iterator[BackendFactory]:
    """Build backends (tiny model by default); every one is closed after the test."""
    made: list[LlamaBackend] = []

    def make(path: Path | str | None = None, **kwargs: Any) -> LlamaBackend:
        options: dict[str, Any] = {"n_ctx_per_seq": 256, "n_seq_max": 8, "n_batch": 256,
                                   "n_threads": N_THREADS}
        options.update(kwargs)
        if not options.get("flash_attn", True):  # a quantized V cache needs flash attention
            options.setdefault("type_k", "f16")
            options.setdefault("type_v", "f16")
        backend = LlamaBackend(str(path or tiny_model_path), **options)
        made.append(backend)
        return backend

    yield make
    for backend in made:
        backend.close()


@pytest.fixture
def tiny(make_backend: BackendFactory) -> LlamaBackend:
    return make_backend()
