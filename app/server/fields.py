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


MAX_JSON_DEPTH = 64
"""Arrays and objects nested deeper than this are refused (a JSON Schema needs a few levels).
NOTE: 100,000 nested arrays raised RecursionError out of ``json.loads``: a 500."""


def too_deep(param: str | None = None) -> ApiError:
    if param is None:
        return ApiError(400, f"The JSON body nests deeper than {MAX_JSON_DEPTH} levels.", code="invalid_json")
    return invalid(param, f"the JSON in it nests deeper than {MAX_JSON_DEPTH} levels")


def check_json(value: Any, *, surrogates: bool, param: str | None = None) -> None:
    """Depth everywhere; lone surrogates only when asked (a body without a \\ud escape has
    none). ``param``: the field that carried this JSON as a string (None: the body)."""
    stack: list[tuple[Any, str, int]] = [(value, param or "", 0)]
    while stack:
        node, where, depth = stack.pop()
        if isinstance(node, dict | list):
            if depth >= MAX_JSON_DEPTH:
                raise too_deep(param)
            items = node.items() if isinstance(node, dict) else enumerate(node)
            for key, item in items:
                path = f"{where}.{key}" if isinstance(node, dict) else f"{where}[{key}]"
                if surrogates and isinstance(key, str):
                    check_text(key, path.lstrip("."))
                stack.append((item, path, depth + 1))
        elif surrogates and isinstance(node, str):
            check_text(node, where.lstrip("."))


def check_text(text: str, param: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ApiError(400, f"Invalid value for '{param}': it holds a lone surrogate "
                       f"(\\u{ord(text[exc.start]):04x} at {exc.start}), which is not valid Unicode.",
                       param=param or None, code="invalid_value") from None
