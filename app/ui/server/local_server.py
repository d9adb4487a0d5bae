"""``LocalServer``: the app's OpenAI-compatible server, started and stopped off the GUI thread.

The server (``app.server``) runs uvicorn on its own thread and loop and serves whatever the
app's engine has loaded, with the same scheduler and KV cache the chats use. Binding,
starting and stopping run on short-lived worker threads; their outcome and every request-log
change reach the GUI as queued signals carrying frozen records, so the GUI thread never waits
on HTTP. ``shutdown`` (window close) is the one blocking call: it stops the server before the
engine closes, so no request arrives at a closed engine.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from PySide6.QtCore import QObject, Signal

from app.server.activity import Activity
from app.server.config import DEFAULT_PORT, ServerConfig, ServerConfigError
from app.ui.engine_api import ServedEngine

if TYPE_CHECKING:  # imported when the server starts: uvicorn is not loaded with the window
    from app.server.thread import ServerThread

log = logging.getLogger(__name__)

State = Literal["off", "starting", "on", "stopping", "failed"]


@dataclass(frozen=True, slots=True)
class ServerStatus:
    state: State = "off"
    url: str | None = None
    message: str = ""
    port: int | None = None


class LocalServer(QObject):
    status_changed = Signal(object)  # ServerStatus
    request_changed = Signal(object)  # RequestRecord

    def __init__(self, engine: ServedEngine, parent: QObject | None = None) -> None:
        # The server serves the engine's full ``Model`` (not only the UI's ``ModelApi``).
        super().__init__(parent)
        self.engine = engine
        self.activity = Activity()
        self.activity.subscribe(self.request_changed.emit)  # server thread → queued signal
        self.status = ServerStatus()
        self._thread: ServerThread | None = None  # while on
        self._lock = threading.Lock()
        self._closed = False

    @property
    def is_running(self) -> bool:
        return self.status.state == "on"

    def start(self, port: int = DEFAULT_PORT, api_key: str | None = None) -> None:
        """Start on 127.0.0.1:``port`` (0 = any free port); the outcome comes as ``status_changed``."""
        if self.status.state in ("starting", "on"):
            return
        try:
            config = ServerConfig(port=port, api_key=api_key or None)
        except ServerConfigError as exc:
            self._set(ServerStatus("failed", message=str(exc)))
            return
        self._set(ServerStatus("starting"))
        threading.Thread(target=self._start, args=(config,), name="local-server-start", daemon=True).start()

    def _start(self, config: ServerConfig) -> None:
        from app.server.app import create_app
        from app.server.thread import ServerThread

        server = ServerThread(create_app(self.engine, config, self.activity), config)
        try:
            server.start()
        except (OSError, RuntimeError) as exc:
            self._set(ServerStatus("failed", message=f"Could not listen on port {config.port}: {exc}"))
            return
        with self._lock:
            closed = self._closed
            if not closed:
                self._thread = server
        if closed:  # the window closed while we were starting
            server.stop()
            return
        self._set(ServerStatus("on", url=server.base_url, port=server.port))

    def stop(self) -> None:
        """Stop in the background: open streams end, their requests are cancelled."""
        with self._lock:
            server, self._thread = self._thread, None
        if server is None:
            return
        self._set(ServerStatus("stopping"))

        def run() -> None:
            server.stop()
            self._set(ServerStatus("off"))

        threading.Thread(target=run, name="local-server-stop", daemon=True).start()

    def shutdown(self) -> None:
        """Window close: stop now (blocking), before the engine closes."""
        with self._lock:
            self._closed = True
            server, self._thread = self._thread, None
        if server is not None:
            server.stop()
        self.status = ServerStatus()

    def _set(self, status: ServerStatus) -> None:
        self.status = status
        self.status_changed.emit(status)
