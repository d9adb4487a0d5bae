"""The app's "Local server" switch: ``hearth serve`` inside the window, on the app's own engine.

``LocalServer`` (a QObject the main window owns) starts and stops the HTTP server on worker
threads and re-emits its request log as queued signals; ``LocalServerPanel`` is the Settings
page with the switch, the address, the live requests and the log.
"""

from app.ui.server.local_server import LocalServer, ServerStatus
from app.ui.server.panel import LocalServerPanel

__all__ = ["LocalServer", "LocalServerPanel", "ServerStatus"]
