"""``ModelBridges``: the one owner of the app's engine bridges (one per loaded model).

A bridge is opened when a model is loaded (at start-up or from the Models view) and shut
down *before* its model is unloaded: ``release`` blocks until the bridge thread has left any
model call, so the engine can free the model with nothing of the UI still inside it. The chat
controller and the main window never hold a bridge of their own; they ask for one by model id
and hear ``opened`` / ``released``. Every bridge's signals are re-emitted here, so listeners
connect once, whatever models come and go.

Remote models (``app.remote``) get a ``RemoteBridge`` with the same API, opened and released
here as the user adds and removes them in the Library (``follow_registry``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from PySide6.QtCore import QObject, Signal

from app.engine.errors import EngineError
from app.remote.endpoint import RemoteEndpoint, is_remote_id
from app.remote.registry import RemoteRegistry
from app.ui.engine_api import EngineApi, ModelApi
from app.ui.engine_bridge import EngineBridge
from app.ui.remote.bridge import RemoteBridge

Bridge = EngineBridge | RemoteBridge

log = logging.getLogger(__name__)


class ModelBridges(QObject):
    opened = Signal(str)  # model id: chat can use it
    released = Signal(str)  # model id: its bridge is gone (the model is being unloaded)
    update_received = Signal(object)  # StreamUpdate, from any model
    status_received = Signal(object)  # StatusSnapshot, from any model
    count_received = Signal(str, int)  # key, tokens
    read_ahead_received = Signal(object)  # ReadAheadUpdate, from any local model (type-ahead)

    def __init__(self, engine: EngineApi | None, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.engine = engine
        self._bridges: dict[str, Bridge] = {}
        self._unfollow: Callable[[], None] | None = None
        self.registry: RemoteRegistry | None = None
        """The remote models followed (``follow_registry``): the Library's list."""

    def ids(self) -> list[str]:
        """Models chat can use, in the order they were loaded."""
        return list(self._bridges)

    def get(self, model_id: str) -> Bridge | None:
        return self._bridges.get(model_id)

    def label(self, model_id: str) -> str:
        """What the picker shows: a remote model's name, marked as remote."""
        bridge = self._bridges.get(model_id)
        if isinstance(bridge, RemoteBridge):
            return f"{bridge.endpoint.name} · remote"
        return model_id.removeprefix("remote:") + " · remote" if is_remote_id(model_id) else model_id

    def follow_registry(self, registry: RemoteRegistry) -> None:
        """Keep one ``RemoteBridge`` per remote model the user added (now and as it changes)."""

        def sync() -> None:
            wanted = {e.model_id: e for e in registry.endpoints()}
            for model_id, bridge in list(self._bridges.items()):
                if isinstance(bridge, RemoteBridge) and wanted.get(model_id) != bridge.endpoint:
                    self.release(model_id)  # removed, or changed (address, key …): reopen
            for endpoint in wanted.values():
                self.open_remote(endpoint)

        if self._unfollow is not None:
            self._unfollow()
        self.registry = registry
        self._unfollow = registry.subscribe(sync)
        sync()

    def open_remote(self, endpoint: RemoteEndpoint) -> RemoteBridge:
        bridge = self._bridges.get(endpoint.model_id)
        if isinstance(bridge, RemoteBridge):
            return bridge
        bridge = RemoteBridge(endpoint, self)
        self._add(endpoint.model_id, bridge)
        return bridge

    def open(self, model_id: str, model: ModelApi | None = None) -> EngineBridge | None:
        """The bridge of a loaded model, opened on first use; None when it is not loaded."""
        bridge = self._bridges.get(model_id)
        if bridge is not None or is_remote_id(model_id):  # remote ones: open_remote
            return bridge if isinstance(bridge, EngineBridge) else None
        if model is None:
            if self.engine is None:
                return None
            try:
                model = self.engine.get_model(model_id)
            except EngineError as exc:  # not loaded (any more)
                log.info("no bridge for %s: %s", model_id, exc)
                return None
        bridge = EngineBridge(model, model_id, self)
        self._add(model_id, bridge)
        return bridge

    def _add(self, model_id: str, bridge: Bridge) -> None:
        bridge.update_received.connect(self.update_received)
        bridge.status_received.connect(self.status_received)
        bridge.count_received.connect(self.count_received)
        if isinstance(bridge, EngineBridge):  # never for a remote model
            bridge.read_ahead_received.connect(self.read_ahead_received)
        self._bridges[model_id] = bridge
        self.opened.emit(model_id)

    def release(self, model_id: str) -> None:
        """Shut the model's bridge down (blocking, see the module docstring); idempotent.

        Call before ``Engine.unload(model_id)``. ``released`` is emitted once the bridge is
        stopped, so listeners can end what was streaming on that model.
        """
        bridge = self._bridges.pop(model_id, None)
        if bridge is None:
            return
        bridge.shutdown()
        bridge.deleteLater()
        self.released.emit(model_id)

    def shutdown(self) -> None:
        if self._unfollow is not None:
            self._unfollow()
            self._unfollow = None
        for model_id in list(self._bridges):
            self.release(model_id)
