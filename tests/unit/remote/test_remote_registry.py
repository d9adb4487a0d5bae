"""Remote models the user added survive a restart; a damaged record does not stop the rest."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.remote.endpoint import RemoteEndpoint
from app.remote.registry import SETTING, RemoteRegistry
from app.storage import Storage, StorageError, database_path


def test_added_endpoints_persist_and_notify(tmp_path: Path) -> None:
    storage = Storage(database_path(tmp_path))
    reg = RemoteRegistry(storage)
    seen: list[int] = []
    reg.subscribe(lambda: seen.append(len(reg.endpoints())))
    gpu = RemoteEndpoint("http://10.0.0.5:8642/v1", "llama-3-8b", api_key="k", context_size=8192)
    reg.add(gpu)
    reg.add(RemoteEndpoint("http://10.0.0.6:8000/v1", "qwen", name="Qwen box"))
    assert seen == [1, 2]
    storage.close()

    again = RemoteRegistry(Storage(database_path(tmp_path)))
    assert again.get(gpu.model_id) == gpu
    assert [e.name for e in again.endpoints()] == ["llama-3-8b @ 10.0.0.5", "Qwen box"]
    again.remove(gpu.model_id)
    again.remove(gpu.model_id)  # idempotent
    assert [e.name for e in again.endpoints()] == ["Qwen box"]


def test_a_record_that_no_longer_validates_is_skipped(tmp_path: Path) -> None:
    storage = Storage(database_path(tmp_path))
    good = RemoteEndpoint("http://h:1/v1", "m").to_json()
    storage.set_setting(SETTING, [{"base_url": "ftp://x", "model": "m"}, {"nonsense": 1}, good])
    reg = RemoteRegistry(storage)
    assert [e.model for e in reg.endpoints()] == ["m"]


class _BrokenStore:
    """A settings table that cannot be read or written (locked, damaged, full disk)."""

    def __init__(self, readable: bool) -> None:
        self.readable = readable

    def get_setting(self, key: str, default: object = None) -> object:
        if not self.readable:
            raise StorageError("database is locked")
        return default

    def set_setting(self, key: str, value: object) -> None:
        raise StorageError("disk full")


def test_a_failed_write_changes_nothing_and_an_unreadable_table_is_an_empty_list() -> None:
    assert RemoteRegistry(_BrokenStore(readable=False)).endpoints() == []
    reg = RemoteRegistry(_BrokenStore(readable=True))
    seen: list[int] = []
    reg.subscribe(lambda: seen.append(1))
    with pytest.raises(StorageError, match="disk full"):
        reg.add(RemoteEndpoint("http://10.0.0.5:8642/v1", "m"))
    assert reg.endpoints() == [] and seen == []
