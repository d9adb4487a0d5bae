from __future__ import annotations

from pathlib import Path

from app.storage import data_dir, database_path


def test_env_override(tmp_path, monkeypatch):
    monkeypatch.setenv("HEARTH_DATA_DIR", str(tmp_path / "d"))
    assert data_dir() == tmp_path / "d"
    assert (tmp_path / "d").is_dir()
    assert database_path() == tmp_path / "d" / "hearth.db"


def test_explicit_wins(tmp_path, monkeypatch):
    monkeypatch.setenv("HEARTH_DATA_DIR", str(tmp_path / "env"))
    assert data_dir(tmp_path / "x") == tmp_path / "x"


def test_platform_default(tmp_path, monkeypatch):
    monkeypatch.delenv("HEARTH_DATA_DIR", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    monkeypatch.setattr(Path, "home", lambda: tmp_path)
    assert data_dir() == tmp_path / "xdg" / "hearth"
    monkeypatch.delenv("XDG_DATA_HOME")
    assert data_dir() == tmp_path / ".local" / "share" / "hearth"
