"""``RemoteRegistry``: the remote models the user added, kept in the app's settings table.

Plain Python with listeners (the Models view and the chat picker adapt it to Qt). The
``remote_models`` setting holds a list of ``RemoteEndpoint.to_json()`` records; a record that
no longer validates is skipped and logged, never fatal — the rest still load.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any, Protocol

from app.listeners import Listeners
from app.remote.endpoint import EndpointError, RemoteEndpoint
from app.storage import StorageError

log = logging.getLogger(__name__)

SETTING = "remote_models"

Listener = Callable[[], None]


class SettingsStore(Protocol):
    def get_setting(self, key: str, default: Any = None) -> Any: ...

    def set_setting(self, key: str, value: Any) -> None: ...


class RemoteRegistry:
    def __init__(self, store: SettingsStore) -> None:
        self._store = store
        self._lock = threading.Lock()
        self._listeners: Listeners[None] = Listeners()
        self._endpoints: dict[str, RemoteEndpoint] = {}
        try:
            records = store.get_setting(SETTING, []) or []
        except StorageError as exc:  # the environment's (locked, damaged): start with none
            log.warning("cannot read the remote models: %s", exc)
            records = []
        if not isinstance(records, list):
            log.warning("the remote_models setting is not a list; ignoring it")
            records = []
        for raw in records:
            try:
                endpoint = RemoteEndpoint.from_json(raw)
            except (EndpointError, KeyError, TypeError, ValueError) as exc:
                log.warning("skipping a remote model that no longer validates: %s", exc)
                continue
            self._endpoints[endpoint.model_id] = endpoint

    def endpoints(self) -> list[RemoteEndpoint]:
        with self._lock:
            return list(self._endpoints.values())

    def get(self, model_id: str) -> RemoteEndpoint | None:
        with self._lock:
            return self._endpoints.get(model_id)

    def add(self, endpoint: RemoteEndpoint) -> None:
        """Add or replace (same name); saved at once. A ``StorageError`` leaves it unchanged."""
        with self._lock:
            self._save({**self._endpoints, endpoint.model_id: endpoint})
        self._notify()

    def remove(self, model_id: str) -> None:
        with self._lock:
            if model_id not in self._endpoints:
                return
            self._save({k: e for k, e in self._endpoints.items() if k != model_id})
        self._notify()

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        return self._listeners.subscribe(lambda _none: listener())

    def _save(self, endpoints: dict[str, RemoteEndpoint]) -> None:
        """Write first, then change: a failed write (``StorageError``) changes nothing."""
        self._store.set_setting(SETTING, [e.to_json() for e in endpoints.values()])
        self._endpoints = endpoints

    def _notify(self) -> None:
        self._listeners.notify(None)
