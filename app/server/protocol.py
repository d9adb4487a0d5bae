"""The three generation/embedding requests, parsed from OpenAI's JSON into frozen records.

Every field OpenAI defines is either implemented, accepted only at its no-op value (``n`` = 1,
``logprobs`` false, penalties 0 …), or refused with a 400 that names it. Hearth adds
``top_k``, ``min_p``, ``repetition_penalty`` and ``grammar`` (a GBNF string) — llama.cpp's
samplers, under the names llama-server accepts too.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from app.server.errors import invalid
from app.server.fields import (
    get_bool,
    get_int,
    get_number,
    get_stop,
    get_str,
    only_default,
    reject_unknown,
    require_object,
)
from app.server.messages import Message, ToolSpec, parse_messages, parse_tools

SEED_MAX = 2**32 - 1
TOKENS_MAX = 1 << 20

_SAMPLING_KEYS = {
    "model", "stream", "stream_options", "temperature", "top_p", "max_tokens", "stop", "seed",
    "n", "user", "frequency_penalty", "presence_penalty", "logprobs", "logit_bias",
    "top_k", "min_p", "repetition_penalty", "grammar",
}  # fmt: skip
_CHAT_KEYS = _SAMPLING_KEYS | {
    "messages", "max_completion_tokens", "tools", "tool_choice", "parallel_tool_calls",
    "response_format", "top_logprobs",
}  # fmt: skip
_COMPLETION_KEYS = _SAMPLING_KEYS | {"prompt", "echo", "suffix", "best_of"}
_EMBEDDING_KEYS = {"model", "input", "encoding_format", "user", "dimensions"}


@dataclass(frozen=True, slots=True)
class Sampling:
    """Sampling and length options common to chat and text completions."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    max_tokens: int | None = None
    grammar: str | None = None
    """A GBNF grammar the reply must follow (Hearth / llama-server extension)."""

    def engine_options(self) -> dict[str, Any]:
        opts: dict[str, Any] = {
            "temperature": self.temperature, "top_p": self.top_p, "top_k": self.top_k,
            "min_p": self.min_p, "repetition_penalty": self.repetition_penalty,
            "stop_sequences": list(self.stop),
        }  # fmt: skip
        if self.seed is not None:
            opts["seed"] = self.seed
        return opts


ToolChoice = Literal["none", "auto", "required"]
FormatKind = Literal["text", "json_object", "json_schema"]


@dataclass(frozen=True, slots=True)
class ChatRequest:
    model: str
    messages: tuple[Message, ...]
    sampling: Sampling
    stream: bool = False
    include_usage: bool = False
    tools: tuple[ToolSpec, ...] = ()
    tool_choice: ToolChoice = "auto"
    tool_name: str | None = None
    """``tool_choice`` naming one function: the reply must call it."""
    format_kind: FormatKind = "text"
    json_schema: Mapping[str, Any] | None = None
    user: str | None = None


@dataclass(frozen=True, slots=True)
class CompletionRequest:
    model: str
    prompt: str | tuple[int, ...]
    sampling: Sampling
    stream: bool = False
    include_usage: bool = False
    user: str | None = None


@dataclass(frozen=True, slots=True)
class EmbeddingRequest:
    model: str
    inputs: tuple[str | tuple[int, ...], ...]
    base64: bool = False


def _sampling(body: Mapping[str, Any], max_tokens: int | None) -> Sampling:
    only_default(body, "n", 1)
    only_default(body, "frequency_penalty", 0, 0.0)
    only_default(body, "presence_penalty", 0, 0.0)
    if body.get("logit_bias"):
        raise invalid("logit_bias", "logit biases are not supported by this server") from None
    return Sampling(
        temperature=_default(get_number(body, "temperature", 0.0, 2.0), 1.0),
        top_p=_default(get_number(body, "top_p", 0.0, 1.0, lo_open=True), 1.0),
        top_k=int(_default(get_int(body, "top_k", 0, 1 << 20), 0)),
        min_p=_default(get_number(body, "min_p", 0.0, 1.0), 0.0),
        repetition_penalty=_default(get_number(body, "repetition_penalty", 0.0, 10.0, lo_open=True), 1.0),
        seed=_seed(get_int(body, "seed", -(2**63), 2**63 - 1)),
        stop=get_stop(body),
        max_tokens=max_tokens,
        grammar=_grammar(body),
    )


MAX_GRAMMAR_CHARS = 65_536


def _grammar(body: Mapping[str, Any]) -> str | None:
    grammar = get_str(body, "grammar")
    if grammar is not None and (not grammar.strip() or len(grammar) > MAX_GRAMMAR_CHARS):
        raise invalid("grammar", f"expected a GBNF grammar of 1 to {MAX_GRAMMAR_CHARS} characters")
    return grammar or None


def _seed(value: int | None) -> int | None:
    """OpenAI seeds are 64-bit; llama.cpp's are 32-bit: keep the low bits (same seed, same run)."""
    return None if value is None else value & SEED_MAX


def _default(value: float | int | None, default: float) -> float:
    return default if value is None else float(value)


def _stream_options(body: Mapping[str, Any]) -> tuple[bool, bool]:
    stream = get_bool(body, "stream")
    options = body.get("stream_options")
    if options is None:
        return stream, False
    if not stream:
        raise invalid("stream_options", "only allowed when 'stream' is true")
    options = require_object(options, "stream_options")
    reject_unknown(options, {"include_usage", "include_obfuscation"}, "stream_options.")
    only_default(options, "include_obfuscation", False)
    return stream, get_bool(options, "include_usage")


def parse_chat(raw: Any) -> ChatRequest:
    body = require_object(raw)
    reject_unknown(body, _CHAT_KEYS)
    model = get_str(body, "model", required=True)
    only_default(body, "logprobs", False)
    only_default(body, "top_logprobs", 0)
    max_tokens = get_int(body, "max_completion_tokens", 1, TOKENS_MAX)
    if max_tokens is None:
        max_tokens = get_int(body, "max_tokens", 1, TOKENS_MAX)
    sampling = _sampling(body, max_tokens)
    stream, include_usage = _stream_options(body)
    messages = parse_messages(body.get("messages"))
    tools = parse_tools(body.get("tools"))
    choice, name = _tool_choice(body.get("tool_choice"), tools)
    get_bool(body, "parallel_tool_calls", True)
    kind, schema = _response_format(body.get("response_format"))
    if kind != "text" and choice != "none" and tools and (choice == "required" or name):
        raise invalid("response_format", "cannot be combined with a tool_choice that forces a tool call")
    if sampling.grammar and (kind != "text" or (tools and choice == "required")):
        raise invalid("grammar", "cannot be combined with a JSON response_format or a forced tool call")
    return ChatRequest(
        model=str(model), messages=messages, sampling=sampling, stream=stream,
        include_usage=include_usage, tools=tools, tool_choice=choice, tool_name=name,
        format_kind=kind, json_schema=schema, user=get_str(body, "user"),
    )


def _tool_choice(value: Any, tools: tuple[ToolSpec, ...]) -> tuple[ToolChoice, str | None]:
    if value is None:
        return ("auto" if tools else "none"), None
    if value in ("none", "auto", "required"):
        if value != "none" and not tools:
            raise invalid("tool_choice", f"'{value}' needs a non-empty 'tools' list")
        return value, None
    if isinstance(value, dict) and value.get("type") == "function" and isinstance(value.get("function"), dict):
        reject_unknown(value, {"type", "function"}, "tool_choice.")
        reject_unknown(value["function"], {"name"}, "tool_choice.function.")
        name = value["function"].get("name")
        if name not in {t.name for t in tools}:
            raise invalid("tool_choice", f"names the function {name!r}, which is not in 'tools'")
        return "required", str(name)
    raise invalid("tool_choice", "expected 'none', 'auto', 'required' or {'type': 'function', 'function': {'name': ...}}")


def _response_format(value: Any) -> tuple[FormatKind, Mapping[str, Any] | None]:
    if value is None:
        return "text", None
    fmt = require_object(value, "response_format")
    kind = fmt.get("type")
    if kind in ("text", "json_object"):
        reject_unknown(fmt, {"type"}, "response_format.")
        return kind, None
    if kind != "json_schema":
        raise invalid("response_format.type", f"expected 'text', 'json_object' or 'json_schema', got {kind!r}")
    reject_unknown(fmt, {"type", "json_schema"}, "response_format.")
    spec = require_object(fmt.get("json_schema"), "response_format.json_schema")
    reject_unknown(spec, {"name", "description", "schema", "strict"}, "response_format.json_schema.")
    get_str(spec, "name", required=True, param="response_format.json_schema.name")
    schema = spec.get("schema", {})
    if not isinstance(schema, dict):
        raise invalid("response_format.json_schema.schema", "expected a JSON Schema object")
    return "json_schema", schema


def parse_completion(raw: Any) -> CompletionRequest:
    body = require_object(raw)
    reject_unknown(body, _COMPLETION_KEYS)
    model = get_str(body, "model", required=True)
    only_default(body, "echo", False)
    only_default(body, "best_of", 1)
    only_default(body, "logprobs", 0)
    if body.get("suffix"):
        raise invalid("suffix", "insertion (a suffix after the completion) is not supported") from None
    max_tokens = get_int(body, "max_tokens", 1, TOKENS_MAX)
    sampling = _sampling(body, 16 if max_tokens is None else max_tokens)
    stream, include_usage = _stream_options(body)
    prompts = _inputs(body.get("prompt"), "prompt")
    if len(prompts) != 1:
        raise invalid("prompt", f"exactly one prompt per request is supported, got {len(prompts)}")
    return CompletionRequest(str(model), prompts[0], sampling, stream, include_usage, get_str(body, "user"))


def parse_embedding(raw: Any) -> EmbeddingRequest:
    body = require_object(raw)
    reject_unknown(body, _EMBEDDING_KEYS)
    model = get_str(body, "model", required=True)
    if body.get("dimensions") is not None:
        raise invalid("dimensions", "this server returns the model's full embedding; shortening is not supported")
    fmt = body.get("encoding_format") or "float"
    if fmt not in ("float", "base64"):
        raise invalid("encoding_format", f"expected 'float' or 'base64', got {fmt!r}")
    get_str(body, "user")
    inputs = _inputs(body.get("input"), "input")
    if not inputs or len(inputs) > 2048:
        raise invalid("input", "expected 1 to 2048 inputs")
    return EmbeddingRequest(str(model), inputs, fmt == "base64")


def _inputs(value: Any, name: str) -> tuple[str | tuple[int, ...], ...]:
    """A string, a list of strings, a token list, or a list of token lists."""
    if isinstance(value, str):
        return (value,)
    if isinstance(value, list) and value and all(_is_token(t) for t in value):
        return (tuple(value),)
    if isinstance(value, list) and value:
        out: list[str | tuple[int, ...]] = []
        for item in value:
            if isinstance(item, str):
                out.append(item)
            elif isinstance(item, list) and item and all(_is_token(t) for t in item):
                out.append(tuple(item))
            else:
                raise invalid(name, "expected a string, a list of strings, or token id lists")
        return tuple(out)
    raise invalid(name, "expected a non-empty string, a list of strings, or token id lists")


def _is_token(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
