"""Rendering a GGUF's chat template (Hugging Face conventions) in a Jinja sandbox.

A chat template is code shipped inside a model file, so it is treated as hostile: it runs in
an immutable sandbox, and any failure — syntax, ``raise_exception``, a sandbox violation,
runaway output — becomes ``InvalidRequest``.
"""

from __future__ import annotations

import json
import time
from typing import Any

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

from app.engine.errors import InvalidRequest

# A rendered prompt longer than this is a runaway (hostile) template, not a conversation.
MAX_TEMPLATE_OUTPUT = 16 * 1024 * 1024

# Used when a GGUF carries no chat template.
CHATML_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + "
    "message['content'] + '<|im_end|>\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def _raise_exception(message: str) -> None:
    raise jinja2.TemplateError(message)


def _strftime_now(fmt: str) -> str:
    return time.strftime(fmt)


def _tojson(value: Any, indent: int | None = None, **_: Any) -> str:
    return json.dumps(value, ensure_ascii=False, indent=indent)


def _sandbox() -> ImmutableSandboxedEnvironment:
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"]
    )
    env.filters["tojson"] = _tojson
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
    """Render a GGUF chat template (Hugging Face conventions) in a sandbox.

    Any template failure — syntax, ``raise_exception``, a sandbox violation by a hostile
    template, or runaway output — becomes ``InvalidRequest``.
    """
    try:
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
            size += len(piece)
            if size > MAX_TEMPLATE_OUTPUT:
                raise InvalidRequest(f"chat template output exceeds {MAX_TEMPLATE_OUTPUT} characters")
            pieces.append(piece)
        return "".join(pieces)
    except jinja2.TemplateError as exc:
        raise InvalidRequest(f"chat template failed: {exc}") from exc
    except (TypeError, ValueError, KeyError, AttributeError, IndexError, OverflowError, RecursionError) as exc:
        raise InvalidRequest(f"chat template failed: {type(exc).__name__}: {exc}") from exc
