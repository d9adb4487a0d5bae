"""Request validation at the engine boundary: options, prompt tokens, text, adapter scales.

Everything a caller hands to a ``Model`` is checked here, on the caller's thread, before it
reaches the scheduler thread or llama.cpp, so a bad request fails alone with an
``InvalidRequest`` (or ``AdapterLoadFailed`` for an adapter file) and never takes a sequence,
fails a batch or poisons a cache key (docs/design.md §7). Each check returns the value in the one form
the engine uses from then on (a fresh ``list[int]``, a ``float``, ``bytes``).

Rules, in short:

- token ids are Python or numpy integers (not ``bool``, not floats, not strings) in
  ``0..n_vocab-1``: an id outside the vocabulary fails ``llama_decode`` for the whole tick,
  and one outside u32 cannot be put in a cache key;
- text is a ``str`` that encodes as UTF-8 (no lone surrogates);
- numbers are real numbers and finite; adapter scales are also within what the effective
  fingerprint can encode (``|scale| < 2**31``: it stores ``scale · 2**32`` as an int64).
"""

from __future__ import annotations

import math
import numbers
import operator
from collections.abc import Iterable, Mapping
from os import PathLike
from pathlib import Path
from typing import Any, SupportsIndex, cast

from app.cache.keys import file_sha256
from app.engine.backend import SamplingParams
from app.engine.config import MAX_DRAFT
from app.engine.errors import AdapterLoadFailed, InvalidRequest
from app.engine.request import Priority, RequestOptions

_OPTION_KEYS = {
    "response_tokens", "parent_key", "temperature", "top_p", "top_k", "min_p",
    "repetition_penalty", "seed", "stop_sequences", "grammar", "thinking",
    "thinking_budget_tokens", "session_id", "ignore_eos", "speculative", "draft_max",
    "draft_model",
}  # fmt: skip

MAX_ADAPTER_SCALE = float(2**31)
"""Exclusive bound on ``|scale|``: the effective fingerprint holds ``scale · 2**32`` in an int64."""

MAX_SEED = 0xFFFFFFFF
MAX_I32 = 2**31 - 1
"""Counts that llama.cpp takes as ``int32_t`` (``top_k``)."""

PARENT_KEY_LEN = 32


# --------------------------------------------------------------------------- tokens and text


def check_tokens(tokens: object, n_vocab: int, *, what: str = "prompt") -> list[int]:
    """A fresh list of token ids, each an integer in ``0..n_vocab-1``; else ``InvalidRequest``.

    May be empty: whether an empty list is allowed is the caller's rule (the scheduler refuses
    an empty prompt; an empty continuation suffix is fine).
    """
    if isinstance(tokens, str | bytes | bytearray | Mapping) or not isinstance(tokens, Iterable):
        raise InvalidRequest(f"{what} must be a list of token ids, got {type(tokens).__name__}")
    out: list[int] = []
    for i, token in enumerate(tokens):
        if isinstance(token, bool):
            raise InvalidRequest(f"{what}[{i}] is a bool, not a token id")
        try:
            value = operator.index(token)  # int and numpy integers; never a float or a str
        except TypeError:
            raise InvalidRequest(f"{what}[{i}] must be an integer token id, got {type(token).__name__}") from None
        if not 0 <= value < n_vocab:
            raise InvalidRequest(f"{what}[{i}] = {value} is outside the vocabulary (0..{n_vocab - 1})")
        out.append(value)
    return out


def check_text(text: object, *, what: str = "text") -> str:
    """``text`` if it is a ``str`` that UTF-8 can encode (llama.cpp reads bytes), else ``InvalidRequest``."""
    if not isinstance(text, str):
        raise InvalidRequest(f"{what} must be a string, got {type(text).__name__}")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidRequest(f"{what} is not valid Unicode (a lone surrogate at {exc.start})") from None
    return text


def check_session_id(session_id: object) -> str:
    if not isinstance(session_id, str):
        raise InvalidRequest(f"session_id must be a string, got {type(session_id).__name__}")
    return check_text(session_id, what="session_id")


def check_priority(priority: object, options: RequestOptions) -> Priority:
    """``prefill_only``'s ``priority``: ``"normal"`` or ``"background"`` (type-ahead), which
    needs a ``session_id`` (a background read is only worth what its session's seq keeps)."""
    if priority not in ("normal", "background"):
        raise InvalidRequest(f"priority must be 'normal' or 'background', got {priority!r}")
    if priority == "background" and options.session_id is None:
        raise InvalidRequest("a background prefill needs a session_id: its session's seq keeps what it reads")
    return "background" if priority == "background" else "normal"


def check_chat_request(request: object) -> tuple[list[Any], list[Any] | None]:
    """``{"messages": [...], "system"?: str, "tools"?: [...]}`` → (messages with the system
    prompt first, tools). Every string inside must be valid Unicode; the template decides the
    rest (and its own failures are ``InvalidRequest`` too)."""
    if not isinstance(request, Mapping) or not isinstance(request.get("messages"), list):
        raise InvalidRequest("a chat request needs a 'messages' list")
    messages = list(request["messages"])
    for i, message in enumerate(messages):
        if not isinstance(message, Mapping):
            raise InvalidRequest(f"messages[{i}] must be a mapping with 'role' and 'content'")
    system = request.get("system")
    if system is not None and not isinstance(system, str):
        raise InvalidRequest("'system' must be a string")
    if system:
        messages = [{"role": "system", "content": system}, *messages]
    tools = request.get("tools")
    if tools is not None and not isinstance(tools, list):
        raise InvalidRequest("'tools' must be a list")
    _check_strings(messages, "messages", depth=0)
    if tools is not None:
        _check_strings(tools, "tools", depth=0)
    return messages, tools


def _check_strings(value: object, where: str, depth: int) -> None:
    """Every ``str`` in a JSON-like value encodes as UTF-8; refuse absurd nesting too."""
    if depth > 32:
        raise InvalidRequest(f"{where} is nested too deeply")
    if isinstance(value, str):
        check_text(value, what=where)
    elif isinstance(value, Mapping):
        for key, item in value.items():
            _check_strings(key, where, depth + 1)
            _check_strings(item, f"{where}.{key}", depth + 1)
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            _check_strings(item, f"{where}[{i}]", depth + 1)


# --------------------------------------------------------------------------- numbers


def check_real(value: object, what: str) -> float:
    """A finite real number as a float (``bool`` and strings refused)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InvalidRequest(f"{what} must be a number, got {type(value).__name__}")
    try:
        result = float(value)
    except (OverflowError, ValueError):  # a huge int
        raise InvalidRequest(f"{what} is out of range") from None
    if not math.isfinite(result):
        raise InvalidRequest(f"{what} must be finite, got {result!r}")
    return result


def check_int(value: object, what: str, *, lo: int, hi: int) -> int:
    """An integer (``bool``, floats and strings refused) in ``lo..hi``."""
    if isinstance(value, bool):
        raise InvalidRequest(f"{what} must be an integer, got bool")
    try:
        result = operator.index(cast(SupportsIndex, value))
    except TypeError:
        raise InvalidRequest(f"{what} must be an integer, got {type(value).__name__}") from None
    if not lo <= result <= hi:
        raise InvalidRequest(f"{what} must be in {lo}..{hi}, got {result}")
    return result


def check_adapter_scale(scale: object) -> float:
    """A LoRA scale as a float, refused *before* it reaches llama.cpp or a cache key.

    NOTE: ``nan``/``inf`` reached llama.cpp before the fingerprint refused them: every reply
    became token 0 while saves were still keyed under the old, healthy scale.
    """
    value = check_real(scale, "adapter scale")
    if not abs(value) < MAX_ADAPTER_SCALE:
        raise InvalidRequest(f"adapter scale must be within ±{MAX_ADAPTER_SCALE:.0f}, got {value!r}")
    return value


def check_sampling(params: SamplingParams) -> None:
    """Settings llama.cpp would silently misread (or that overflow its C types)."""
    checks: list[tuple[bool, str]] = [
        (math.isfinite(params.temperature) and params.temperature >= 0, "temperature must be a finite number >= 0"),
        (isinstance(params.top_k, int) and 0 <= params.top_k <= MAX_I32, "top_k must be an integer >= 0"),
        (0.0 < params.top_p <= 1.0, "top_p must be in (0, 1]"),
        (0.0 <= params.min_p <= 1.0, "min_p must be in [0, 1]"),
        (
            math.isfinite(params.repetition_penalty) and params.repetition_penalty > 0.0,
            "repetition_penalty must be a finite number > 0",
        ),
        (isinstance(params.seed, int) and 0 <= params.seed <= MAX_SEED, "seed must fit in u32"),
        (params.grammar is None or isinstance(params.grammar, str), "grammar must be a string"),
    ]
    for ok, message in checks:
        if not ok:
            raise InvalidRequest(message)


def check_verify(prefix: object, candidates: object, k: object, n_vocab: int) -> tuple[list[int], list[int]]:
    """``verify``'s arguments: the prefix and the first ``k`` candidates as token lists."""
    n = check_int(k, "k", lo=0, hi=2**62)
    return check_tokens(prefix, n_vocab, what="prefix"), check_tokens(candidates, n_vocab, what="candidates")[:n]


# --------------------------------------------------------------------------- adapters


def check_handle(handle: object) -> int:
    """An adapter handle is the int ``load_adapter`` returned."""
    return check_int(handle, "adapter handle", lo=0, hi=2**63 - 1)


def adapter_sha256(path: object) -> bytes:
    """sha256 of an adapter file; ``AdapterLoadFailed`` when it is missing, not a regular
    file or unreadable (the backend then checks that it is a GGUF llama.cpp accepts)."""
    if not isinstance(path, str | PathLike) or not str(path):
        raise AdapterLoadFailed(f"an adapter path must be a non-empty string, got {path!r}")
    p = Path(path)
    try:
        if not p.is_file():
            raise AdapterLoadFailed(
                f"adapter file {'is not a file' if p.exists() else 'not found'}: {p}"
            )
        return file_sha256(p)
    except (OSError, ValueError) as exc:  # unreadable, a NUL in the path, ...
        raise AdapterLoadFailed(f"cannot read adapter file {p}: {exc}") from None


# --------------------------------------------------------------------------- request options


def parse_options(opts: dict[str, Any], default_tokens: int) -> RequestOptions:
    """Validate docs/design.md §1 request options; bad values are ``InvalidRequest``."""
    unknown = set(opts) - _OPTION_KEYS
    if unknown:
        raise InvalidRequest(f"unknown option(s): {', '.join(sorted(map(str, unknown)))}")
    get = opts.get
    response_tokens = check_int(get("response_tokens", default_tokens), "response_tokens", lo=0, hi=2**62)
    if default_tokens and response_tokens < 1:
        raise InvalidRequest("response_tokens must be a positive integer")
    grammar = get("grammar") or None
    if grammar is not None:
        grammar = check_text(grammar, what="grammar")
    sampling = SamplingParams(
        temperature=check_real(get("temperature", 0.0), "temperature"),
        top_k=check_int(get("top_k", 0), "top_k", lo=0, hi=MAX_I32),
        top_p=check_real(get("top_p", 1.0), "top_p"),
        min_p=check_real(get("min_p", 0.0), "min_p"),
        repetition_penalty=check_real(get("repetition_penalty", 1.0), "repetition_penalty"),
        seed=check_int(get("seed", MAX_SEED), "seed", lo=0, hi=MAX_SEED),
        grammar=grammar,
    )
    check_sampling(sampling)
    thinking = get("thinking", "disabled")
    if thinking not in ("enabled", "disabled", True, False):
        raise InvalidRequest("thinking must be 'enabled' or 'disabled'")
    budget = get("thinking_budget_tokens")
    if budget is not None:
        budget = check_int(budget, "thinking_budget_tokens", lo=0, hi=2**62) or None
    sid = get("session_id")
    ignore_eos = get("ignore_eos", False)
    if not isinstance(ignore_eos, bool):
        raise InvalidRequest("ignore_eos must be a bool")
    speculative = get("speculative")
    if speculative is not None and not isinstance(speculative, bool):
        raise InvalidRequest("speculative must be a bool")
    draft_max = get("draft_max")
    if draft_max is not None:
        draft_max = check_int(draft_max, "draft_max", lo=0, hi=MAX_DRAFT)
    draft_model = get("draft_model")
    if draft_model is not None and (not isinstance(draft_model, str) or not draft_model):
        raise InvalidRequest("draft_model must be a loaded model's id")
    return RequestOptions(
        response_tokens=response_tokens,
        sampling=sampling,
        parent_key=_parent_key(get("parent_key")),
        stop_sequences=_stop_sequences(get("stop_sequences")),
        thinking=thinking in ("enabled", True),
        thinking_budget_tokens=budget,
        session_id=None if sid is None else check_session_id(sid),
        ignore_eos=ignore_eos,
        speculative=speculative,
        draft_max=draft_max,
        draft_model=draft_model,
    )


def _stop_sequences(value: object) -> tuple[str, ...]:
    if value is None or (isinstance(value, list | tuple | str) and not value):
        return ()
    if not isinstance(value, list | tuple):
        raise InvalidRequest(f"stop_sequences must be a list of strings, got {type(value).__name__}")
    return tuple(check_text(s, what="a stop sequence") for s in value)


def _parent_key(value: object) -> bytes | None:
    """A cache key: 32 bytes, or their 64 hex digits."""
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = bytes.fromhex(value)
        except ValueError:
            raise InvalidRequest("parent_key must be 64 hex digits or 32 bytes") from None
    if not isinstance(value, bytes | bytearray) or len(value) != PARENT_KEY_LEN:
        raise InvalidRequest("parent_key must be 64 hex digits or 32 bytes")
    return bytes(value)
