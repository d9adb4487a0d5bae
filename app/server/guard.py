"""The ASGI layer in front of every route: Host, Origin, API key, JSON bodies, body size.

- **Host**: while the server listens on loopback without a key, only ``Host`` headers naming
  a loopback address are served. A web page the user visits cannot read the API through DNS
  rebinding (its requests carry the attacker's host name).
- **Origin**: a browser names the page behind every cross-origin request (and every POST);
  unless ``--cors-origin`` allows that origin, the request is refused (403) before anything
  runs. A page cannot *read* a reply without CORS, but it could still make the machine
  generate, or send a grammar that used to abort the process.
- **JSON only**: a POST whose ``Content-Type`` is not ``application/json`` is refused (415).
  ``text/plain`` and form bodies are what a page may send without a CORS preflight (a
  "simple" request); JSON forces the preflight, which the Origin rule then answers.
- **API key**: when one is configured, every path except ``/health`` needs
  ``Authorization: Bearer <key>``; the comparison is ``hmac.compare_digest`` (constant time).
- **Body size**: a ``Content-Length`` above the limit is refused before anything is read,
  and a chunked body is counted as it arrives; both are 413s in OpenAI's error shape.
"""

from __future__ import annotations

import hmac
import json

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.server.config import ServerConfig, is_loopback
from app.server.errors import ApiError, error_body

OPEN_PATHS = ("/health",)


def too_large(limit: int) -> ApiError:
    return ApiError(413, f"The request body is larger than this server's limit of {limit} bytes.",
                    code="request_too_large")


async def send_error(send: Send, status: int, message: str, code: str, *,
                     headers: tuple[tuple[bytes, bytes], ...] = ()) -> None:
    body = json.dumps(error_body(message, code=code)).encode()
    await send({
        "type": "http.response.start", "status": status,
        "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), *headers],
    })  # fmt: skip
    await send({"type": "http.response.body", "body": body})


def _host_name(host_header: str) -> str:
    if host_header.startswith("["):
        return host_header[1:].split("]", 1)[0]
    return host_header.rsplit(":", 1)[0] if host_header.count(":") == 1 else host_header


def is_json(content_type: str | None) -> bool:
    """``application/json``, with parameters (``; charset=utf-8``) or not."""
    return content_type is not None and content_type.split(";", 1)[0].strip().lower() == "application/json"


class Guard:
    def __init__(self, app: ASGIApp, config: ServerConfig) -> None:
        self.app = app
        self.config = config
        self.key = config.api_key.encode() if config.api_key else None
        self.check_host = is_loopback(config.host) and self.key is None
        self.origins = frozenset(config.cors_origins)

    def origin_allowed(self, origin: str | None) -> bool:
        """No ``Origin`` (not a browser), or one ``--cors-origin`` names (or ``*``)."""
        return origin is None or "*" in self.origins or origin in self.origins

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        if self.check_host and not is_loopback(_host_name(headers.get("host", ""))):
            await send_error(send, 403, "This server only answers requests addressed to a loopback host.", "forbidden_host")
            return
        origin = headers.get("origin")
        if not self.origin_allowed(origin):
            await send_error(send, 403, f"Requests from web pages at {origin} are not allowed by this server "
                             "(start it with --cors-origin to allow an origin).", "forbidden_origin")
            return
        if self.key is not None and scope.get("path") not in OPEN_PATHS and scope.get("method") != "OPTIONS":
            auth = headers.get("authorization", "")
            given = auth[7:].strip().encode() if auth[:7].lower() == "bearer " else b""
            if not hmac.compare_digest(given, self.key):
                await send_error(send, 401, "Incorrect API key provided. Send it as 'Authorization: Bearer <key>'.",
                                 "invalid_api_key", headers=((b"www-authenticate", b"Bearer"),))
                return
        if scope.get("method") == "POST" and not is_json(headers.get("content-type")):
            await send_error(send, 415, "Send the request body as JSON, with 'Content-Type: application/json'.",
                             "unsupported_media_type")
            return
        limit = self.config.max_body_bytes
        length = headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > limit):
            err = too_large(limit)
            await send_error(send, err.status, err.message, "request_too_large")
            return
        seen = 0

        async def counted() -> Message:
            # A chunked body has no length up front: count it as the route reads it; the
            # route's ApiError handler answers the 413.
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise too_large(limit)
            return message

        await self.app(scope, counted, send)
