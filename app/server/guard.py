"""The ASGI layer in front of every route: Host check, API key, body size limit.

- **Host**: while the server listens on loopback without a key, only ``Host`` headers naming
  a loopback address are served. A web page the user visits cannot read the API through DNS
  rebinding (its requests carry the attacker's host name).
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


class Guard:
    def __init__(self, app: ASGIApp, config: ServerConfig) -> None:
        self.app = app
        self.config = config
        self.key = config.api_key.encode() if config.api_key else None
        self.check_host = is_loopback(config.host) and self.key is None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        if self.check_host and not is_loopback(_host_name(headers.get("host", ""))):
            await send_error(send, 403, "This server only answers requests addressed to a loopback host.", "forbidden_host")
            return
        if self.key is not None and scope.get("path") not in OPEN_PATHS and scope.get("method") != "OPTIONS":
            auth = headers.get("authorization", "")
            given = auth[7:].strip().encode() if auth[:7].lower() == "bearer " else b""
            if not hmac.compare_digest(given, self.key):
                await send_error(send, 401, "Incorrect API key provided. Send it as 'Authorization: Bearer <key>'.",
                                 "invalid_api_key", headers=((b"www-authenticate", b"Bearer"),))
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
