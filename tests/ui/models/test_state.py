"""The Models view's Qt-free pieces: settings store, library catalog, formatting."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

from app.models.library import ModelEntry
from app.ui.models.settings import (
    JsonSettingsStore,
    LoadSettings,
    load_settings_for,
    save_settings_for,
    settings_key,
)
from app.ui.state.format import human_bytes, human_count, human_date, human_duration, short_hex
from app.ui.state.library_catalog import LibraryCatalog


def test_json_store_round_trip_and_bad_files(tmp_path: Path):
    path = tmp_path / "s.json"
    store = JsonSettingsStore(path)
    save_settings_for(store, tmp_path / "m.gguf", LoadSettings(n_ctx=1024, n_threads=2))
    assert json.loads(path.read_text())[settings_key(tmp_path / "m.gguf")]["n_ctx"] == 1024
    again = JsonSettingsStore(path)
    assert load_settings_for(again, tmp_path / "m.gguf") == LoadSettings(n_ctx=1024, n_threads=2)
    path.write_text("{not json")
    assert len(JsonSettingsStore(path)) == 0  # corrupt: start empty, never raise


def test_settings_defaults_and_bad_values(tmp_path: Path):
    store = {settings_key("x.gguf"): {"n_ctx": "big", "n_batch": 256, "extra": 1}}
    s = load_settings_for(store, "x.gguf", context_length=2048)
    assert (s.n_ctx, s.n_batch) == (2048, 256)  # the trained context caps the default
    assert load_settings_for({}, "y.gguf", context_length=None).n_ctx == 4096


def test_catalog_keeps_load_state_across_rescans(tmp_path: Path):
    a, b = ModelEntry(tmp_path / "a.gguf", "a"), ModelEntry(tmp_path / "b.gguf", "b")
    events: list[str] = []

    class Listener:
        def before_reset(self): events.append("before")
        def after_reset(self): events.append("after")
        def changed(self, first, last): events.append(f"changed {first}")

    cat = LibraryCatalog()
    cat.add_listener(Listener())
    cat.reset([a, b], {tmp_path / "b.gguf": "b-id"})
    assert cat.row(1).model_id == "b-id" and cat.row(1).status == "Loaded"
    cat.update(tmp_path / "a.gguf", busy="Loading…")
    assert not cat.row(0).can_load and cat.row(0).status == "Loading…"
    cat.reset([b, a])
    assert cat.find(tmp_path / "a.gguf").busy == "Loading…"
    assert events == ["before", "after", "changed 0", "before", "after"]
    assert cat.row_of(tmp_path / "missing.gguf") == -1


def test_formatting():
    assert human_bytes(5408928) == "5.2 MiB" and human_bytes(None) == "–"
    assert human_count(12_345) == "12.3k" and human_count(999) == "999"
    assert human_duration(75) == "1 min 15 s" and human_duration(None) == "–"
    assert human_date(datetime.now(UTC) - timedelta(days=3)) == "3 days ago"
    assert short_hex(bytes(range(32))) == "000102030405"
