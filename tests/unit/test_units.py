"""``app.units.human_bytes``: the one size formatter every layer prints with."""

from __future__ import annotations

from app.cache import cli
from app.ui.cache import rows_panel
from app.ui.state import format as ui_format
from app.units import human_bytes


def test_human_bytes_units_and_edges():
    assert human_bytes(None) == "–"
    assert human_bytes(0) == "0 B"
    assert human_bytes(1023) == "1023 B"
    assert human_bytes(1024) == "1.0 KiB"
    assert human_bytes(5408928) == "5.2 MiB"
    assert human_bytes(3 << 30) == "3.0 GiB"
    assert human_bytes(5 << 40) == "5.0 TiB"
    assert human_bytes(5 << 50) == "5120.0 TiB"


def test_every_layer_uses_the_same_function():
    assert cli.human_bytes is human_bytes
    assert ui_format.human_bytes is human_bytes
    assert rows_panel.human_bytes is human_bytes
