"""A real ``hearth serve`` on the tiny model, for the remote-model tests of the window."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.server.conftest import Served, start_server

KEY = "ui-remote-key"


@pytest.fixture
def remote(tiny_model_path: Path, tmp_path: Path) -> Iterator[Served]:
    """The server, with API key ``KEY`` and a 1,024-token context."""
    (tmp_path / "server").mkdir()
    server = start_server(tiny_model_path, tmp_path / "server", "--ctx", "1024", api_key=KEY)
    try:
        yield server
    finally:
        server.stop()
