"""Field checks shared by the request parsers: each failure is an ``ApiError`` naming its field.

``None`` counts as "not given" everywhere, as in OpenAI's API (clients send ``null`` for
defaults).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from app.server.errors import ApiError, invalid, unsupported


def require_object(body: Any, where: str = "body") -> Mapping[str, Any]:
    if not isinstance(body, dict):
        raise ApiError(400, f"The request {where} must be a JSON object.", param=None if where == "body" else where,
                       code="invalid_type")
    return body


def reject_unknown(body: Mapping[str, Any], allowed: Iterable[str], prefix: str = "") -> None:
    """Any key outside ``allowed`` is a 400 naming it (sorted, so the answer is stable)."""
    extra = sorted(set(body) - set(allowed))
    if extra:
        raise unsupported(prefix + extra[0])


def only_default(body: Mapping[str, Any], key: str, *defaults: Any) -> None:
    """A field Hearth accepts only at its no-op value (e.g. ``n`` = 1, ``logprobs`` false)."""
    value = body.get(key)
    if value is not None and value not in defaults:
        shown = " or ".join(repr(d) for d in defaults)
        raise unsupported(key, f"only {shown} is supported, got {value!r}")


def get_str(body: Mapping[str, Any], key: str, *, required: bool = False, param: str | None = None) -> str | None:
    value = body.get(key)
    name = param or key
    if value is None:
        if required:
            raise ApiError(400, f"Missing required parameter: '{name}'.", param=name, code="missing_required_parameter")
        return None
    if not isinstance(value, str):
        raise invalid(name, f"expected a string, got {type(value).__name__}")
    return value


def get_bool(body: Mapping[str, Any], key: str, default: bool = False) -> bool:
    value = body.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise invalid(key, f"expected a boolean, got {type(value).__name__}")
    return value


def get_number(body: Mapping[str, Any], key: str, lo: float, hi: float, *, lo_open: bool = False) -> float | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise invalid(key, f"expected a number, got {value!r}")
    if value < lo or value > hi or (lo_open and value == lo):
        bound = f"({lo}, {hi}]" if lo_open else f"[{lo}, {hi}]"
        raise invalid(key, f"{value} is outside {bound}")
    return float(value)


def get_int(body: Mapping[str, Any], key: str, lo: int, hi: int) -> int | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise invalid(key, f"expected an integer, got {value!r}")
    if not lo <= value <= hi:
        raise invalid(key, f"{value} is outside [{lo}, {hi}]")
    return value


def get_stop(body: Mapping[str, Any]) -> tuple[str, ...]:
    value = body.get("stop")
    if value is None:
        return ()
    stops = [value] if isinstance(value, str) else value
    if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops):
        raise invalid("stop", "expected a non-empty string or a list of non-empty strings")
    if len(stops) > 16:
        raise invalid("stop", f"at most 16 stop sequences, got {len(stops)}")
    return tuple(stops)
