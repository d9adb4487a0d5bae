"""Rendering a GGUF's chat template (Hugging Face conventions) in a bounded Jinja sandbox.

A chat template is code shipped inside a model file, so it is treated as hostile. It runs in
an immutable sandbox (no attribute tricks, no mutation of lists or dicts), and the render is
bounded in work, time and memory on the caller's thread:

- every loop iteration, call, filter, intercepted operator and output piece is a *step*;
  a render may take ``MAX_RENDER_STEPS`` steps (deterministic, the same on any CPU) and must
  end within ``MAX_RENDER_SECONDS`` (checked at every step);
- a value a template builds (``'a' * n``, ``s + t``, ``[x] * n``, ``'x'|center(n)``,
  ``s.replace(a, b)``, ``sep.join(items)``, a format width, ``2 ** n``) is checked *before* it
  is allocated and may hold at most ``MAX_STR_LEN`` characters or ``MAX_ITEMS`` items, and
  the few filters that cost far more than their input take at most ``SLOW_FILTER_INPUT``;
- the output may hold at most ``MAX_TEMPLATE_OUTPUT`` characters.

Any failure — syntax, ``raise_exception``, a sandbox violation, a bound reached, or any other
exception the template provokes — is ``InvalidRequest``.

NOTE: before these bounds, ``{% for i in range(99999) %}{% for j in range(99999) %}`` ran
unbounded on the caller's thread (range() alone is capped at 100,000 items by Jinja's
sandbox, nested loops are not), and ``'a' * 10**13`` raised a raw ``MemoryError``.
"""

from __future__ import annotations

import functools
import json
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension
from jinja2.sandbox import ImmutableSandboxedEnvironment

from app.engine.errors import InvalidRequest

# A rendered prompt longer than this is a runaway (hostile) template, not a conversation.
MAX_TEMPLATE_OUTPUT = 16 * 1024 * 1024

MAX_STR_LEN = 4 * 1024 * 1024
"""Largest string a template may build: about a million tokens, more than any context."""

MAX_ITEMS = 100_000
"""Largest list a template may build (Jinja's own cap on one ``range()``)."""

SLOW_FILTER_INPUT = 64 * 1024
"""Input cap of the filters that cost far more than their size (``wordwrap``, ``urlize``,
``title``, ``striptags``, ``wordcount``, ``urlencode``, ``pprint``); chat templates do not
use them. NOTE: on 16 M characters ``wordwrap`` took 145 s and ``urlize`` 62 s here."""

MAX_RENDER_STEPS = 2_000_000
"""Loop iterations + calls + filters + operators + output pieces in one render.
NOTE: SmolLM2's template over 1,000 messages takes 7,003 steps and 0.1 s."""

MAX_RENDER_SECONDS = 5.0
"""Wall-clock bound, checked at every step. One builtin call can run past it by its own
cost, which the input caps above keep to a fraction of a second."""

MAX_TEMPLATE_SOURCE = 1024 * 1024
"""Real templates are a few KB; a bigger one is not a chat template."""

# A width or precision of 8 digits or more in a format spec: '{:>100000000}', '%.100000000f'.
_BRACE_WIDTH = re.compile(r"\{[^{}]*:[^{}]*\d{8,}")
_PERCENT_WIDTH = re.compile(r"%[^a-zA-Z%]*\d{8,}")

# Used when a GGUF carries no chat template.
CHATML_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + "
    "message['content'] + '<|im_end|>\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


class _Budget:
    """The steps and the deadline of one render (one per thread, see ``_state``)."""

    __slots__ = ("deadline", "steps")

    def __init__(self) -> None:
        self.steps = 0
        self.deadline = time.monotonic() + MAX_RENDER_SECONDS

    def step(self) -> None:
        self.steps += 1
        if self.steps > MAX_RENDER_STEPS:
            raise InvalidRequest(f"chat template runs away: more than {MAX_RENDER_STEPS:,} steps")
        if time.monotonic() > self.deadline:
            raise InvalidRequest(f"chat template runs away: more than {MAX_RENDER_SECONDS} s")


_state = threading.local()


def _step() -> None:
    budget: _Budget | None = getattr(_state, "budget", None)
    if budget is not None:
        budget.step()


def _too_big(what: str, size: int, limit: int) -> InvalidRequest:
    return InvalidRequest(f"chat template builds a {what} of {size:,} (the limit is {limit:,})")


def _limit(value: Any) -> int:
    return MAX_STR_LEN if isinstance(value, str) else MAX_ITEMS


def _size(value: Any) -> int:
    return len(value) if isinstance(value, str | list | tuple) else 0


def _check_result(value: Any) -> Any:
    size = _size(value)
    if size > _limit(value):
        raise _too_big("value", size, _limit(value))
    return value


def _check_count(value: Any, limit: int = MAX_STR_LEN) -> None:
    """An int that may become a width (characters) or a count of items."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > limit:
        raise _too_big("width", abs(value), limit)


def _check_format(text: Any, pattern: re.Pattern[str]) -> None:
    if isinstance(text, str) and pattern.search(text):
        raise InvalidRequest("chat template uses a format width of 8 digits or more")


def _check_join(sep: str, items: Any) -> None:
    if isinstance(items, list | tuple):
        total = sum(len(x) if isinstance(x, str) else 16 for x in items) + len(sep) * max(len(items) - 1, 0)
        if total > MAX_STR_LEN:
            raise _too_big("joined string", total, MAX_STR_LEN)


def _check_str_call(text: str, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """Size-producing ``str`` methods, checked before they allocate."""
    if name in ("center", "ljust", "rjust", "zfill", "format", "format_map", "expandtabs"):
        for value in (*args, *kwargs.values()):
            _check_count(value)
        if name.startswith("format"):
            _check_format(text, _BRACE_WIDTH)
        if name == "expandtabs" and args and isinstance(args[0], int):
            size = len(text) + text.count("\t") * max(args[0], 0)
            if size > MAX_STR_LEN:
                raise _too_big("string", size, MAX_STR_LEN)
    elif name == "join" and args:
        _check_join(text, args[0])
    elif name == "replace" and len(args) >= 2 and isinstance(args[0], str) and isinstance(args[1], str):
        hits = len(text) + 1 if not args[0] else text.count(args[0])
        size = len(text) + hits * max(len(args[1]) - len(args[0]), 0)
        if size > MAX_STR_LEN:
            raise _too_big("string", size, MAX_STR_LEN)


def _check_binop(op: str, left: Any, right: Any) -> None:
    if op == "*":
        for seq, n in ((left, right), (right, left)):
            if isinstance(n, int) and isinstance(seq, str | list | tuple) and len(seq) * max(n, 0) > _limit(seq):
                raise _too_big("repetition", len(seq) * n, _limit(seq))
    elif op == "+":
        if _size(left) + _size(right) > _limit(left):
            raise _too_big("concatenation", _size(left) + _size(right), _limit(left))
    elif op == "**":
        if isinstance(left, int) and isinstance(right, int) and abs(left) > 1 and right > 4096:
            raise InvalidRequest(f"chat template computes a power with exponent {right:,}")
    elif op == "%" and isinstance(left, str):
        _check_format(left, _PERCENT_WIDTH)
        for value in right if isinstance(right, tuple) else (right,):
            _check_count(value)


# Filters whose int arguments are widths or counts (``batch(10**9, 'x')`` pads to 10**9 items).
_SIZED_FILTERS = {"center", "indent", "format", "truncate", "wordwrap"}
_COUNTED_FILTERS = {"batch", "slice"}
_SLOW_FILTERS = {"wordwrap", "urlize", "title", "striptags", "wordcount", "urlencode", "pprint"}


def _guard_filter(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)  # keeps jinja's pass_context / pass_eval_context marks
    def guarded(*args: Any, **kwargs: Any) -> Any:
        _step()
        values = [a for a in args if not isinstance(a, nodes.EvalContext | jinja2.runtime.Context | jinja2.Environment)]
        if name in _SIZED_FILTERS or name in _COUNTED_FILTERS:
            limit = MAX_ITEMS if name in _COUNTED_FILTERS else MAX_STR_LEN
            for value in (*values, *kwargs.values()):
                _check_count(value, limit)
            if name == "format" and values:
                _check_format(values[0], _PERCENT_WIDTH)
        elif name == "join" and values:
            _check_join(str(values[1]) if len(values) > 1 else str(kwargs.get("d", "")), values[0])
        if name in _SLOW_FILTERS and values and len(str(values[0])) > SLOW_FILTER_INPUT:
            raise InvalidRequest(f"chat template applies '{name}' to more than {SLOW_FILTER_INPUT:,} characters")
        return _check_result(fn(*args, **kwargs))

    return guarded


class _LoopGuard(Extension):
    """Every ``{% for %}`` iterates through ``loop_guard``: one step per item."""

    def loop_guard(self, iterable: Iterable[Any]) -> Iterator[Any]:
        for item in iterable:
            _step()
            yield item


_LOOP_GUARD_ID = f"{_LoopGuard.__module__}.{_LoopGuard.__qualname__}"


class _BoundedSandbox(ImmutableSandboxedEnvironment):
    """The immutable sandbox, with every loop, call, filter and size-producing operator
    counted and checked (see the module docstring)."""

    intercepted_binops = frozenset({"*", "+", "**", "%"})

    def _parse(self, source: str, name: str | None, filename: str | None) -> nodes.Template:
        tree = super()._parse(source, name, filename)
        # A template cannot name an extension attribute, so it cannot bypass the guard.
        for loop in tree.find_all(nodes.For):
            guard = nodes.ExtensionAttribute(_LOOP_GUARD_ID, "loop_guard", lineno=loop.lineno)
            loop.iter = nodes.Call(guard, [loop.iter], [], None, None, lineno=loop.lineno)
        return tree

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805 — jinja's signature
        _step()
        owner = getattr(getattr(__obj, "__wrapped__", __obj), "__self__", None)  # str.format is wrapped
        if isinstance(owner, str):
            _check_str_call(owner, getattr(__obj, "__name__", ""), args, kwargs)
        return _check_result(super().call(__context, __obj, *args, **kwargs))

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        _step()
        _check_binop(operator, left, right)
        return _check_result(super().call_binop(context, operator, left, right))


def _raise_exception(message: str) -> None:
    raise jinja2.TemplateError(message)


def _strftime_now(fmt: str) -> str:
    return time.strftime(fmt)


def _tojson(value: Any, indent: int | None = None, **_: Any) -> str:
    _check_count(indent)
    return json.dumps(value, ensure_ascii=False, indent=indent)


def _sandbox() -> _BoundedSandbox:
    env = _BoundedSandbox(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols", _LoopGuard])
    env.filters["tojson"] = _tojson
    env.filters = {name: _guard_filter(name, fn) for name, fn in env.filters.items()}
    env.globals.pop("lipsum", None)  # lipsum(n=10**9) is a loop no template needs
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env


_ENV = _sandbox()


def render_chat_template(
    source: str,
    messages: list[dict[str, Any]],
    *,
    bos_token: str = "",
    eos_token: str = "",
    add_generation_prompt: bool = True,
    tools: list[Any] | None = None,
    cache: dict[str, jinja2.Template] | None = None,
) -> str:
    """Render a GGUF chat template (Hugging Face conventions), bounded (see the module
    docstring). Every failure of the template is ``InvalidRequest``."""
    outer = getattr(_state, "budget", None)
    _state.budget = _Budget()
    try:
        if not isinstance(source, str) or len(source) > MAX_TEMPLATE_SOURCE:
            raise InvalidRequest(f"the chat template is not a string of at most {MAX_TEMPLATE_SOURCE:,} characters")
        template = cache.get(source) if cache is not None else None
        if template is None:
            template = _ENV.from_string(source)
            if cache is not None:
                cache[source] = template
        pieces: list[str] = []
        size = 0
        for piece in template.generate(
            messages=messages, bos_token=bos_token, eos_token=eos_token,
            add_generation_prompt=add_generation_prompt, tools=tools,
        ):
            _step()
            size += len(piece)
            if size > MAX_TEMPLATE_OUTPUT:
                raise InvalidRequest(f"chat template output exceeds {MAX_TEMPLATE_OUTPUT} characters")
            pieces.append(piece)
        return "".join(pieces)
    except InvalidRequest:
        raise
    except jinja2.TemplateError as exc:
        raise InvalidRequest(f"chat template failed: {exc}") from exc
    except Exception as exc:  # the template is hostile code: whatever it provokes is its failure
        raise InvalidRequest(f"chat template failed: {type(exc).__name__}: {exc}") from exc
    finally:
        _state.budget = outer
