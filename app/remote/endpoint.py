"""``RemoteEndpoint``: one remote model as the Library keeps it (validated at construction)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any
from urllib.parse import urlsplit

REMOTE_PREFIX = "remote:"
"""Remote models' ids start with this, so they never clash with a local GGUF's id."""


class EndpointError(ValueError):
    """A remote endpoint setting that cannot work (bad URL, empty model …)."""


@dataclass(frozen=True, slots=True)
class RemoteEndpoint:
    base_url: str
    """Up to and including ``/v1``, e.g. ``http://192.168.1.20:8642/v1``."""
    model: str
    """The model id the remote server knows (``GET /v1/models``)."""
    name: str = ""
    """What the Library and the chat picker show; defaults to ``model @ host``."""
    api_key: str | None = None
    context_size: int = 8192
    """Tokens the remote model can hold per conversation (the chat's window is cut to it)."""

    def __post_init__(self) -> None:
        parts = urlsplit(self.base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise EndpointError(f"the address must be an http:// or https:// URL, got {self.base_url!r}")
        if parts.query or parts.fragment:
            raise EndpointError("the address must not have a query or fragment")
        if not self.model.strip():
            raise EndpointError("name the remote model (its id in GET /v1/models)")
        if not 256 <= self.context_size <= 10_000_000:
            raise EndpointError("the context size must be between 256 and 10,000,000 tokens")
        object.__setattr__(self, "base_url", self.base_url.rstrip("/"))
        if not self.name:
            object.__setattr__(self, "name", f"{self.model} @ {parts.hostname}")

    @property
    def model_id(self) -> str:
        """The id chats store for this model."""
        return f"{REMOTE_PREFIX}{self.name}"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RemoteEndpoint:
        return cls(
            base_url=str(data["base_url"]), model=str(data["model"]), name=str(data.get("name") or ""),
            api_key=data.get("api_key") or None, context_size=int(data.get("context_size", 8192)),
        )


def is_remote_id(model_id: str) -> bool:
    return model_id.startswith(REMOTE_PREFIX)
