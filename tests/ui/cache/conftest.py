"""Fixtures for the Cache dashboard: a real Engine and store on the tiny model, fake rows."""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from app.cache.contents.index import Row
from app.cache.keys import KeyMeta, encode_tokens
from app.cache.policy import DESKTOP_POLICY, CachePolicy
from app.engine import Engine, ModelConfig
from app.ui.cache import CacheDashboard

FAKE_META = KeyMeta(bytes(range(32)), "q8_0", bytes(range(32, 64)))


def tiny_config(path: Path, policy: CachePolicy = DESKTOP_POLICY) -> ModelConfig:
    return ModelConfig(
        path=str(path), n_ctx=512, n_seq_max=4, n_batch=256, n_threads=2, policy=policy,
        tier="disk",
    )  # fmt: skip


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    eng = Engine(tmp_path / "data")
    yield eng
    eng.close()


@pytest.fixture
def tiny(engine: Engine, tiny_model_path: Path) -> Any:
    """The tiny model, loaded as ``tiny`` with the desktop cache policy, saving to disk."""
    return engine.load_model("tiny", tiny_config(tiny_model_path))


@pytest.fixture
def make_dashboard(qtbot: Any) -> Iterator[Callable[[Engine], CacheDashboard]]:
    made: list[CacheDashboard] = []

    def make(engine: Engine, **kwargs: Any) -> CacheDashboard:
        dash = CacheDashboard(engine, **kwargs)
        qtbot.addWidget(dash)
        dash.resize(1280, 820)
        dash.show()
        qtbot.waitExposed(dash)
        made.append(dash)
        return dash

    yield make
    for dash in made:
        dash.shutdown()


def fake_row(tokens: list[int], *, model_id: str = "fake", tier: str = "ram", reason: str = "finish",
             age: float = 0.0, meta: KeyMeta = FAKE_META, session: str = "") -> Row:
    now = time.time() - age
    return Row(
        key=meta.key(tokens), model_id=model_id, fingerprint=meta.fingerprint.hex(),
        quant_type=meta.quant_type, ctx_hash=meta.ctx_params_hash.hex(), n_tokens=len(tokens),
        tokens_le=encode_tokens(tokens), tier=tier, size=len(tokens) * 300, save_reason=reason,
        created=now, last_used=now, session_id=session,
    )  # fmt: skip


def fill_index(store: Any, n_rows: int, seed: int = 7) -> None:
    """Publish ``n_rows`` rows straight into the store's index (as benchmarks/scenarios_cache
    ``_fill_index`` does): measuring the dashboard, not the writer."""
    rng = random.Random(seed)
    tiers = ("ram", "ram_file", "disk")
    reasons = ("cold", "continued", "finish", "evict", "shutdown")
    models = ("alpha", "beta", "gamma")
    with store._lock:
        for i in range(n_rows):
            tokens = [rng.randrange(49152) for _ in range(rng.randrange(16, 96))]
            row = fake_row(tokens, model_id=models[i % 3], tier=tiers[i % 3],
                           reason=reasons[i % 5], age=rng.random() * 86400)  # fmt: skip
            store._index.put(row)


def screenshot(widget: Any, name: str) -> Path | None:
    """Save ``widget.grab()`` as ``<HEARTH_SCREENSHOT_DIR>/<name>.png`` when the variable is set."""
    folder = os.environ.get("HEARTH_SCREENSHOT_DIR")
    if not folder:
        return None
    path = Path(folder) / f"{name}.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    assert widget.grab().save(str(path)), f"could not write {path}"
    return path
