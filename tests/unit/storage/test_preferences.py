"""Preferences on a real SQLite file: theme, new-chat defaults and presets survive a reopen."""

from __future__ import annotations

import pytest

from app.storage import ChatPreset, InvalidTextError, Preferences, SamplingSettings, Storage


@pytest.fixture
def db_path(tmp_path):
    return tmp_path / "hearth.db"


def _prefs(path) -> Preferences:
    return Preferences(Storage(path))


def test_theme_defaults_to_system_and_persists(db_path):
    prefs = _prefs(db_path)
    assert prefs.theme() == "system"
    prefs.set_theme("dark")
    prefs.storage.close()
    again = _prefs(db_path)
    assert again.theme() == "dark"
    with pytest.raises(ValueError, match="unknown theme 'purple'"):
        again.set_theme("purple")
    assert again.theme() == "dark"


def test_chat_defaults_and_presets_survive_a_reopen(db_path):
    prefs = _prefs(db_path)
    assert prefs.chat_defaults() is None and prefs.presets() == []
    careful = SamplingSettings(temperature=0.2, top_k=20, max_tokens=300, stop_sequences=("END",))
    prefs.set_chat_defaults("Answer in French.", careful)
    prefs.save_preset(ChatPreset("  Code   reviewer ", "Review code.", SamplingSettings(temperature=0.1)))
    prefs.save_preset(ChatPreset("brainstorm", "Many ideas.", SamplingSettings(temperature=1.3)))
    prefs.storage.close()

    again = _prefs(db_path)
    defaults = again.chat_defaults()
    assert defaults is not None
    assert (defaults.system_prompt, defaults.sampling) == ("Answer in French.", careful)
    assert [p.name for p in again.presets()] == ["brainstorm", "Code reviewer"]
    reviewer = again.preset("code REVIEWER")
    assert reviewer is not None and reviewer.sampling.temperature == 0.1
    # Same name (any case) replaces; delete removes.
    again.save_preset(ChatPreset("CODE reviewer", "Review harder.", SamplingSettings()))
    assert [(p.name, p.system_prompt) for p in again.presets()] == [
        ("brainstorm", "Many ideas."),
        ("CODE reviewer", "Review harder."),
    ]
    assert again.delete_preset("brainstorm") and not again.delete_preset("brainstorm")
    assert [p.name for p in again.presets()] == ["CODE reviewer"]
    again.reset_chat_defaults()
    assert again.chat_defaults() is None


def test_bad_names_and_bad_text_change_nothing(db_path):
    prefs = _prefs(db_path)
    prefs.save_preset(ChatPreset("kept", "x"))
    with pytest.raises(ValueError, match="needs a name"):
        prefs.save_preset(ChatPreset("   "))
    with pytest.raises(ValueError, match="at most 60"):
        prefs.save_preset(ChatPreset("n" * 61))
    with pytest.raises(InvalidTextError, match="unpaired surrogate"):
        prefs.save_preset(ChatPreset("bad", "\ud800"))
    assert [p.name for p in prefs.presets()] == ["kept"]


def test_damaged_stored_values_read_as_defaults(db_path):
    prefs = _prefs(db_path)
    prefs.storage.set_setting("theme", "neon")
    prefs.storage.set_setting("chat_defaults", "not a dict")
    prefs.storage.set_setting("chat_presets", [{"name": 5}, "junk", {"name": "ok", "sampling": 3}])
    assert prefs.theme() == "system"
    assert prefs.chat_defaults() is None
    assert [(p.name, p.sampling) for p in prefs.presets()] == [("ok", SamplingSettings())]
