"""The bounded Jinja sandbox a chat template renders in, and the worker process that runs it.

A chat template is code shipped inside a model file, so it is treated as hostile. It runs in
an immutable sandbox (no attribute tricks, no mutation of lists or dicts), with every step
counted and every value it builds checked before it is allocated:

- every loop iteration, call, filter, intercepted operator and output piece is a *step*;
  a render may take ``MAX_RENDER_STEPS`` steps (deterministic, the same on any CPU) and must
  end within ``MAX_RENDER_SECONDS`` (checked at every step);
- a value a template builds (``'a' * n``, ``s + t``, ``[x] * n``, ``'x'|center(n)``,
  ``s.replace(a, b)``, ``sep.join(items)``, a format width, ``2 ** n``) may hold at most
  ``MAX_STR_LEN`` characters or ``MAX_ITEMS`` items, and the few filters that cost far more
  than their input take at most ``SLOW_FILTER_INPUT``;
- the output may hold at most ``MAX_TEMPLATE_OUTPUT`` characters.

Those checks cannot stop one C-level call: ``([[0]*1000]*100000)|sum(start=[])`` holds the
GIL for minutes inside ``sum`` (no other thread of the process runs: the GUI froze),
``((2**4096)**4096)**4096`` ran 71 s before a ``MemoryError``. So renders run in a separate
process, ``serve()`` below (``python -m app.jinja_sandbox``, or ``hearth --template-worker``
in the bundle): its address space is capped (``RLIMIT_AS``) and each render's CPU time
(``RLIMIT_CPU``), and ``app.engine.chat_template`` kills it when a render overruns its time.
This module imports nothing of Hearth's but ``app`` itself, so the worker starts in ~0.1 s.

Any failure — syntax, ``raise_exception``, a sandbox violation, a bound reached, or any other
exception the template provokes — is ``Refused``, with a message for the user.

NOTE: before these bounds, ``{% for i in range(99999) %}{% for j in range(99999) %}`` ran
unbounded on the caller's thread (range() alone is capped at 100,000 items by Jinja's
sandbox, nested loops are not), and ``'a' * 10**13`` raised a raw ``MemoryError``.
"""

from __future__ import annotations

import functools
import json
import re
import resource
import struct
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, BinaryIO

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension
from jinja2.sandbox import ImmutableSandboxedEnvironment


class Refused(Exception):
    """The template cannot be rendered; the message says why, in words for the user."""


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

MAX_INT_BITS = 1 << 20
"""Largest integer a template may compute (NOTE: ``((2**4096)**4096)**4096`` ran 71 s)."""

MAX_TEMPLATE_SOURCE = 1024 * 1024
"""Real templates are a few KB; a bigger one is not a chat template."""

# A width or precision of 8 digits or more in a format spec: '{:>100000000}', '%.100000000f'.
_BRACE_WIDTH = re.compile(r"\{[^{}]*:[^{}]*\d{8,}")
_PERCENT_WIDTH = re.compile(r"%[^a-zA-Z%]*\d{8,}")



class _Budget:
    """The steps and the deadline of one render (one per thread, see ``_state``)."""

    __slots__ = ("deadline", "steps")

    def __init__(self) -> None:
        self.steps = 0
        self.deadline = time.monotonic() + MAX_RENDER_SECONDS

    def step(self) -> None:
        self.steps += 1
        if self.steps > MAX_RENDER_STEPS:
            raise Refused(f"chat template runs away: more than {MAX_RENDER_STEPS:,} steps")
        if time.monotonic() > self.deadline:
            raise Refused(f"chat template runs away: more than {MAX_RENDER_SECONDS} s")


_state = threading.local()


def _step() -> None:
    budget: _Budget | None = getattr(_state, "budget", None)
    if budget is not None:
        budget.step()


def _too_big(what: str, size: int, limit: int) -> Refused:
    return Refused(f"chat template builds a {what} of {size:,} (the limit is {limit:,})")


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
        raise Refused("chat template uses a format width of 8 digits or more")


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
    if op == "*" and isinstance(left, int) and isinstance(right, int):
        if left.bit_length() + right.bit_length() > MAX_INT_BITS:
            raise Refused("chat template computes a number of more than a million bits")
    elif op == "*":
        for seq, n in ((left, right), (right, left)):
            if isinstance(n, int) and isinstance(seq, str | list | tuple) and len(seq) * max(n, 0) > _limit(seq):
                raise _too_big("repetition", len(seq) * n, _limit(seq))
    elif op == "+":
        if _size(left) + _size(right) > _limit(left):
            raise _too_big("concatenation", _size(left) + _size(right), _limit(left))
    elif op == "**":
        if isinstance(left, int) and isinstance(right, int) and abs(left) > 1 and (
            right > 4096 or left.bit_length() * right > MAX_INT_BITS
        ):
            raise Refused(f"chat template computes a power with exponent {right:,}")
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
        elif name == "replace" and len(values) >= 3:  # NOTE: ('a'*40000)|replace('a', 'b'*40000) built 1.6 GB
            _check_str_call(str(values[0]), "replace", (str(values[1]), str(values[2])), {})
        if name in _SLOW_FILTERS and values and len(str(values[0])) > SLOW_FILTER_INPUT:
            raise Refused(f"chat template applies '{name}' to more than {SLOW_FILTER_INPUT:,} characters")
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


def render(
    source: str,
    messages: list[dict[str, Any]],
    *,
    bos_token: str = "",
    eos_token: str = "",
    add_generation_prompt: bool = True,
    tools: list[Any] | None = None,
    cache: dict[str, jinja2.Template] | None = None,
) -> str:
    """Render a GGUF chat template (Hugging Face conventions) in this process, bounded as the
    module docstring says. Every failure of the template is ``Refused``."""
    outer = getattr(_state, "budget", None)
    _state.budget = _Budget()
    try:
        if not isinstance(source, str) or len(source) > MAX_TEMPLATE_SOURCE:
            raise Refused(f"the chat template is not a string of at most {MAX_TEMPLATE_SOURCE:,} characters")
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
                raise Refused(f"chat template output exceeds {MAX_TEMPLATE_OUTPUT} characters")
            pieces.append(piece)
        return "".join(pieces)
    except Refused:
        raise
    except MemoryError:
        raise
    except jinja2.TemplateError as exc:
        raise Refused(f"chat template failed: {exc}") from exc
    except Exception as exc:  # the template is hostile code: whatever it provokes is its failure
        raise Refused(f"chat template failed: {type(exc).__name__}: {exc}") from exc
    finally:
        _state.budget = outer


# --------------------------------------------------------------------------- the worker process

FRAME = struct.Struct("<Q")
"""Every message between the app and the worker: its length (u64), then that much JSON."""

READY = b"R"
"""The worker's first byte: imports done, waiting for a render."""

MAX_COMPILED = 16
"""Compiled templates a worker keeps (a process serves a few models' templates)."""


def read_frame(stream: BinaryIO) -> bytes | None:
    head = stream.read(FRAME.size)
    if len(head) < FRAME.size:
        return None
    (size,) = FRAME.unpack(head)
    body = stream.read(size)
    return body if len(body) == size else None


def write_frame(stream: BinaryIO, data: bytes) -> None:
    stream.write(FRAME.pack(len(data)) + data)
    stream.flush()


def _limit_cpu(seconds: int) -> None:
    """Let the next render use ``seconds`` more CPU seconds; past them the kernel ends the
    process (SIGXCPU), even inside one C call that never returns to Python."""
    used = resource.getrusage(resource.RUSAGE_SELF)
    spent = int(used.ru_utime + used.ru_stime) + 1
    _soft, hard = resource.getrlimit(resource.RLIMIT_CPU)
    soft = spent + seconds
    if hard != resource.RLIM_INFINITY:
        soft = min(soft, hard)
    resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))


def serve(memory_bytes: int, cpu_seconds: int, stdin: BinaryIO, stdout: BinaryIO) -> int:
    """The worker: render each request read from ``stdin`` and answer on ``stdout``, until
    ``stdin`` closes. A request is ``render``'s arguments as JSON; an answer is
    ``{"text": ...}`` or ``{"refused": ...}``. After a ``MemoryError`` it answers and exits
    (the app starts a fresh one)."""
    _soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard == resource.RLIM_INFINITY or memory_bytes < hard:
        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, hard))
    compiled: dict[str, jinja2.Template] = {}
    stdout.write(READY)
    stdout.flush()
    while (frame := read_frame(stdin)) is not None:
        if len(compiled) > MAX_COMPILED:
            compiled.clear()
        out_of_memory = False
        answer: dict[str, str | bool]
        try:
            _limit_cpu(cpu_seconds)
            answer = {"text": render(**json.loads(frame), cache=compiled)}
        except Refused as exc:
            answer = {"refused": str(exc)}
        except MemoryError:
            out_of_memory = True
            answer = {"refused": f"chat template needs more than {memory_bytes >> 20} MiB", "exiting": True}
        except RecursionError:
            answer = {"refused": "chat template failed: it nests or recurses too deeply"}
        write_frame(stdout, json.dumps(answer).encode())
        if out_of_memory:
            return 1
    return 0


def main(argv: list[str]) -> int:
    """``python -m app.jinja_sandbox MEMORY_BYTES CPU_SECONDS``: the worker over stdin/stdout."""
    memory_bytes, cpu_seconds = int(argv[0]), int(argv[1])
    return serve(memory_bytes, cpu_seconds, sys.stdin.buffer, sys.stdout.buffer)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
