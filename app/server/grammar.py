"""GBNF grammars for JSON mode, JSON Schema output and forced tool calls.

Schemas are converted with llama-cpp-python's port of llama.cpp's ``json_schema_to_grammar``
(``llama_cpp.llama_grammar.SchemaConverter``). A request never makes the server read a file
or fetch a URL: only local ``$ref``s (``#/...``) are accepted, checked before conversion.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from llama_cpp import llama_grammar

from app.server.errors import invalid
from app.server.messages import ToolSpec

MAX_SCHEMA_DEPTH = 64

JSON_OBJECT_GRAMMAR = llama_grammar.JSON_GBNF
"""Any JSON object (OpenAI's ``json_object`` mode), with bounded whitespace."""


def _check_refs(node: Any, param: str, depth: int = 0) -> None:
    if depth > MAX_SCHEMA_DEPTH:
        raise invalid(param, f"the schema nests deeper than {MAX_SCHEMA_DEPTH} levels")
    if isinstance(node, dict):
        ref = node.get("$ref")
        if ref is not None and (not isinstance(ref, str) or not ref.startswith("#")):
            raise invalid(param, f"only local references ('#/...') are allowed, got $ref {ref!r}")
        for value in node.values():
            _check_refs(value, param, depth + 1)
    elif isinstance(node, list):
        for value in node:
            _check_refs(value, param, depth + 1)


def _convert(schemas: Sequence[tuple[str, Mapping[str, Any]]], param: str) -> str:
    """Rules for each ``(rule_name, schema)``; the caller adds ``root``."""
    converter: Any = llama_grammar.SchemaConverter(  # type: ignore[no-untyped-call]
        prop_order={}, allow_fetch=False, dotall=False, raw_pattern=False
    )
    for name, schema in schemas:
        _check_refs(schema, param)
        try:
            resolved = converter.resolve_refs(dict(schema), "request")
            converter.visit(resolved, name)
        except (AssertionError, ValueError, KeyError, TypeError, IndexError, RecursionError) as exc:
            raise invalid(param, f"cannot turn this JSON Schema into a grammar: {exc}") from exc
    return str(converter.format_grammar())


def json_schema_grammar(schema: Mapping[str, Any]) -> str:
    """Output that validates against ``schema`` (OpenAI's ``json_schema`` mode)."""
    return _convert([("", schema)], "response_format.json_schema.schema")


TOOL_OPEN, TOOL_CLOSE = "<tool_call>", "</tool_call>"


def tool_call_grammar(tools: Sequence[ToolSpec], only: str | None = None,
                      markers: tuple[str, str] = (TOOL_OPEN, TOOL_CLOSE)) -> str:
    """Exactly one ``<tool_call>{"name": …, "arguments": {…}}</tool_call>``, the arguments
    matching the chosen function's parameter schema (``only``: that function, else any)."""
    chosen = [t for t in tools if only is None or t.name == only]
    calls = [
        {
            "type": "object",
            "properties": {"name": {"const": t.name}, "arguments": t.parameters},
            "required": ["name", "arguments"],
            "additionalProperties": False,
        }
        for t in chosen
    ]
    schema: Mapping[str, Any] = calls[0] if len(calls) == 1 else {"anyOf": calls}
    rules = _convert([("call", schema)], "tools")
    open_, close = (_literal(m) for m in markers)
    return f'root ::= {open_} "\\n" call "\\n" {close}\n{rules}'


def _literal(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'
