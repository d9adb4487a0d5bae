"""A local Hub server with a few GGUF repos, and HubClient factories pointed at it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from app.models.hub import HubClient
from tests.helpers.hub_server import HubServer, make_gguf_bytes

REPO = "acme/Tiny-GGUF"
FILE = "tiny-Q4_K_M.gguf"
PRIVATE_REPO = "acme/Private-GGUF"


@pytest.fixture(scope="session")
def gguf_bytes() -> dict[str, bytes]:
    return {
        "q4": make_gguf_bytes(seed=1),
        "q8": make_gguf_bytes(seed=2, n_floats=16 * 1024),
        "f16": make_gguf_bytes(seed=3, n_floats=8 * 1024),
    }


@pytest.fixture
def hub(gguf_bytes: dict[str, bytes]) -> Iterator[HubServer]:
    with HubServer() as server:
        server.add_repo(
            REPO,
            {FILE: gguf_bytes["q4"], "tiny-Q8_0.gguf": gguf_bytes["q8"],
             "tiny-f16.gguf": gguf_bytes["f16"], "README.md": b"# tiny\n"},
            downloads=1200, likes=7, last_modified="2025-03-01T08:30:00.000Z",
        )
        server.add_repo("acme/Tiny-Base-GGUF", {"base-IQ2_XXS.gguf": gguf_bytes["f16"]},
                        downloads=5000, likes=1)
        server.add_repo("acme/Tiny-safetensors", {"model.safetensors": b"x"}, downloads=99999,
                        tags=("safetensors",))
        server.add_repo(PRIVATE_REPO, {"secret-Q8_0.gguf": gguf_bytes["q8"]}, private=True)
        yield server


@pytest.fixture(autouse=True)
def _no_ambient_hub_config(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Tests must not pick up a developer's token, endpoint or token file."""
    for var in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_ENDPOINT"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr("app.models.hub._stored_token", lambda: None)


@pytest.fixture
def make_client(hub: HubServer, tmp_path: Path) -> Callable[..., HubClient]:
    def make(**kw: Any) -> HubClient:
        kw.setdefault("endpoint", hub.endpoint)
        kw.setdefault("models_dir", tmp_path / "models")
        kw.setdefault("downloads_dir", tmp_path / "partial")
        kw.setdefault("backoff_base_s", 0.01)
        kw.setdefault("backoff_max_s", 0.05)
        kw.setdefault("timeout_s", 10.0)
        return HubClient(**kw)

    return make
