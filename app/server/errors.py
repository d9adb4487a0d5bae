"""API errors in OpenAI's shape, and how engine errors map onto HTTP statuses.

Every error the server returns is ``{"error": {"message", "type", "param", "code"}}`` — the
shape the official clients parse into ``openai.BadRequestError`` and friends — so a client
sees *which* field was wrong (``param``) and why (``message``).
"""

from __future__ import annotations

from typing import Any

from app.engine.errors import EngineError


class ApiError(Exception):
    """An error answered to the client: HTTP ``status`` plus OpenAI's error object."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        type_: str = "invalid_request_error",
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.type = type_

    def body(self) -> dict[str, Any]:
        return error_body(self.message, type_=self.type, param=self.param, code=self.code)


def error_body(message: str, *, type_: str = "invalid_request_error", param: str | None = None,
               code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": _sendable(message), "type": type_, "param": _sendable(param), "code": code}}


MAX_SHOWN = 4096
"""Characters of a message or param sent back; the middle of a longer one is cut (a path of
nested 100 KB property names is the client's own text, and need not come back whole)."""


def _sendable(text: str | None) -> str | None:
    """``text`` with lone surrogates written as ``\\udXXX`` escapes. A message or a param
    names what the client sent — a key like ``"\\ud800"`` too — and must still encode as
    UTF-8 (NOTE: naming such a key was a ``UnicodeEncodeError``: a 500)."""
    if text is None:
        return None
    if len(text) > MAX_SHOWN:
        text = f"{text[: MAX_SHOWN // 2]}…{text[-MAX_SHOWN // 4:]}"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def unsupported(param: str, why: str = "") -> ApiError:
    """A field Hearth does not implement: named, never silently ignored."""
    text = f"Unsupported parameter: '{param}' is not supported by this server"
    return ApiError(400, f"{text}{': ' + why if why else '.'}", param=param, code="unsupported_parameter")


def invalid(param: str, why: str) -> ApiError:
    return ApiError(400, f"Invalid value for '{param}': {why}", param=param, code="invalid_value")


def model_not_found(model: str) -> ApiError:
    return ApiError(
        404, f"The model '{model}' does not exist or is not loaded on this server.",
        param="model", code="model_not_found",
    )


# Engine error codes (docs/design.md §1) → HTTP status and OpenAI error code.
_ENGINE_STATUS: dict[str, tuple[int, str]] = {
    "invalid_request": (400, "invalid_value"),
    "grammar_failed": (400, "invalid_grammar"),
    "not_supported": (400, "not_supported"),
    "context_overflow": (413, "prompt_too_long"),
    "not_found": (404, "model_not_found"),
    "busy": (503, "server_busy"),
    "sticky_busy": (409, "conversation_busy"),
    "cancelled": (503, "model_unloaded"),
}


def from_engine(exc: EngineError) -> ApiError:
    status, code = _ENGINE_STATUS.get(exc.code, (500, exc.code))
    type_ = "invalid_request_error" if status < 500 else "server_error"
    return ApiError(status, exc.message, code=code, type_=type_)
