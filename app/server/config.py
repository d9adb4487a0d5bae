"""``ServerConfig``: where the server listens and what it accepts (validated at construction).

Security defaults (docs/user-guide.md, the server): loopback only; any other address needs an API key; bodies
and prompts have limits answered with 413; CORS is off unless origins are named.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8642
DEFAULT_MAX_BODY_BYTES = 8 * 1024 * 1024
"""NOTE: 8 MiB holds a ~2M-character conversation, several times any context a desktop
model serves; a larger body is refused before it is parsed."""


class ServerConfigError(ValueError):
    """A server setting that cannot work (e.g. a public address without an API key)."""


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and ``localhost`` (any case: host names are
    case-insensitive, ``LOCALHOST`` was refused): addresses only this machine can reach."""
    if host.lower() in ("localhost", "localhost."):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True, slots=True)
class ServerConfig:
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    api_key: str | None = None
    """When set, every request but ``/health`` needs ``Authorization: Bearer <key>``."""
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    max_prompt_tokens: int | None = None
    """Prompts longer than this get a 413 (None: the model's context per conversation)."""
    cors_origins: tuple[str, ...] = ()
    """Origins allowed to call the API from a browser; empty = no CORS headers at all."""
    max_connections: int = 256
    """Open connections at once (also kept 128 below the process's file limit); past it, the
    connection that has been sending its request the longest is closed (``app.server.connections``)."""
    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ServerConfigError(f"port must be in 0..65535, got {self.port}")
        if self.api_key is not None and not self.api_key.strip():
            raise ServerConfigError("the API key must not be empty")
        if not is_loopback(self.host) and not self.api_key:
            raise ServerConfigError(
                f"binding to {self.host} makes the server reachable from other machines; "
                "set an API key (--api-key or HEARTH_API_KEY) to do that"
            )
        if not 1 <= self.max_connections <= 65536:
            raise ServerConfigError("max_connections must be in 1..65536")
        if self.max_body_bytes < 1024:
            raise ServerConfigError("max_body_bytes must be at least 1024")
        if self.max_prompt_tokens is not None and self.max_prompt_tokens < 1:
            raise ServerConfigError("max_prompt_tokens must be a positive integer")
        if "*" in self.cors_origins and self.api_key is None:
            raise ServerConfigError("CORS for every origin ('*') needs an API key")

    @property
    def base_url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/v1"
