"""The Models view's Qt-free pieces: settings store, library catalog, formatting."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

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


def test_the_attention_choice_is_a_flag_and_only_a_flag(tmp_path: Path):
    """The Library's "Faster prefill, not bit-identical" (``flash_attn`` False) survives the JSON
    file; a number where the flag belongs, or a flag where a number belongs, keeps the default."""
    path = tmp_path / "s.json"
    save_settings_for(JsonSettingsStore(path), "m.gguf", LoadSettings(flash_attn=False))
    assert json.loads(path.read_text())[settings_key("m.gguf")]["flash_attn"] is False
    assert load_settings_for(JsonSettingsStore(path), "m.gguf").flash_attn is False
    assert LoadSettings().flash_attn is True  # exact by default
    bad = LoadSettings.from_mapping({"flash_attn": 0, "n_threads": True, "n_batch": 256})
    assert (bad.flash_attn, bad.n_threads, bad.n_batch) == (True, 0, 256)


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


def test_model_options_of_the_default_model_are_checked_by_type(tiny_model_path: Path):
    """``create_window(model_options=...)`` (tests, tools): a flag takes true or false, a number
    a whole number; anything else is a clear error, not a setting quietly dropped or coerced."""
    from app.ui.app import default_model_settings  # (Qt: this module's other tests have none)

    store: dict = {}
    s = default_model_settings(store, str(tiny_model_path), {"flash_attn": False, "n_ctx": 512})
    assert (s.flash_attn, s.n_ctx) == (False, 512)
    assert store[settings_key(tiny_model_path)]["flash_attn"] is False  # remembered like a form edit
    for bad in ({"flash_attn": 0}, {"n_ctx": True}, {"n_ctx": 512.0}):
        with pytest.raises(ValueError, match="model option"):
            default_model_settings({}, str(tiny_model_path), bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown model option"):
        default_model_settings({}, str(tiny_model_path), {"threads": 2})
