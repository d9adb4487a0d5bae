"""Request validation at the engine boundary: options, prompt tokens, adapter scales.

Everything a caller hands to a ``Model`` is checked here, on the caller's thread, before it
reaches the scheduler thread or llama.cpp, so a bad request fails alone with an
``InvalidRequest`` and never takes a sequence, fails a batch or poisons a cache key.
"""

from __future__ import annotations

from typing import Any

from app.engine.backend import SamplingParams
from app.engine.errors import InvalidRequest
from app.engine.request import RequestOptions

_OPTION_KEYS = {
    "response_tokens", "parent_key", "temperature", "top_p", "top_k", "min_p",
    "repetition_penalty", "seed", "stop_sequences", "grammar", "thinking",
    "thinking_budget_tokens", "session_id", "ignore_eos",
}  # fmt: skip


def parse_options(opts: dict[str, Any], default_tokens: int) -> RequestOptions:
    """Validate SPEC §1 request options; bad values are ``InvalidRequest``."""
    unknown = set(opts) - _OPTION_KEYS
    if unknown:
        raise InvalidRequest(f"unknown option(s): {', '.join(sorted(unknown))}")
    try:
        response_tokens = int(opts.get("response_tokens", default_tokens))
        sampling = SamplingParams(
            temperature=float(opts.get("temperature", 0.0)),
            top_k=int(opts.get("top_k", 0)),
            top_p=float(opts.get("top_p", 1.0)),
            min_p=float(opts.get("min_p", 0.0)),
            repetition_penalty=float(opts.get("repetition_penalty", 1.0)),
            seed=int(opts.get("seed", 0xFFFFFFFF)),
            grammar=opts.get("grammar") or None,
        )
    except (TypeError, ValueError) as exc:
        raise InvalidRequest(f"bad request option: {exc}") from exc
    if response_tokens < 0 or (default_tokens and response_tokens < 1):
        raise InvalidRequest("response_tokens must be a positive integer")
    if sampling.temperature < 0 or sampling.top_k < 0 or not 0 < sampling.top_p <= 1:
        raise InvalidRequest("temperature and top_k must be >= 0 and top_p in (0, 1]")
    if not 0 <= sampling.min_p <= 1 or sampling.repetition_penalty <= 0:
        raise InvalidRequest("min_p must be in [0, 1] and repetition_penalty > 0")
    stops = opts.get("stop_sequences") or ()
    if isinstance(stops, str) or not all(isinstance(s, str) for s in stops):
        raise InvalidRequest("stop_sequences must be a list of strings")
    thinking = opts.get("thinking", "disabled")
    if thinking not in ("enabled", "disabled", True, False):
        raise InvalidRequest("thinking must be 'enabled' or 'disabled'")
    budget = opts.get("thinking_budget_tokens")
    parent = opts.get("parent_key")
    if parent is not None and not isinstance(parent, bytes):
        parent = bytes.fromhex(str(parent))
    sid = opts.get("session_id")
    return RequestOptions(
        response_tokens=response_tokens,
        sampling=sampling,
        parent_key=parent,
        stop_sequences=tuple(stops),
        thinking=thinking in ("enabled", True),
        thinking_budget_tokens=int(budget) if budget and int(budget) > 0 else None,
        session_id=None if sid is None else str(sid),
        ignore_eos=bool(opts.get("ignore_eos", False)),
    )

