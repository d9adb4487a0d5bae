"""GBNF grammars for JSON mode, JSON Schema output and forced tool calls.

Schemas are converted with llama-cpp-python's port of llama.cpp's ``json_schema_to_grammar``
(``llama_cpp.llama_grammar.SchemaConverter``). A request never makes the server read a file
or fetch a URL: only local ``$ref``s (``#/...``) are accepted, checked before conversion.

A schema is a client's (and later an MCP server's): untrusted. Before anything is built,
``check_schema`` walks it once and refuses, with a 400 naming the field, what the converter
would choke on or turn into a grammar that does not parse — nesting past
``MAX_SCHEMA_DEPTH``, a non-local ``$ref``, a count (``minItems``, ``maxItems``,
``minLength``, ``maxLength``, …) that is not a non-negative integer or is below its minimum,
an empty ``enum``/``anyOf``/``oneOf``/``type`` (no value could match). While converting,
``BoundedConverter`` prices each repetition *before* it is written: one repetition holds at
most ``MAX_REPEAT`` items (llama.cpp's own limit), all of them together ``MAX_COPIES``, and
the grammar's text, kept as a running total, at most ``MAX_GRAMMAR_CHARS`` (the engine's
limit); past any of them it stops with a 400 naming the field. Repetitions are written with
GBNF's ``{m,n}`` (the converter nested one optional group per item, which no parser takes
past 100 levels). It also escapes literals fully (a property name or enum value with ``"``
or ``\\`` made a grammar that does not parse), never lets a nested rule take the name
``root``, and builds an object's optional properties in linear time (the converter's
recursion was quadratic, and deeper than Python's stack past ~1,000 optional properties).

NOTE: before, ``{"type": "array", "items": {"type": "integer"}, "maxItems": 1000000000}``
grew ``hearth serve`` to 23.6 GB until the OOM killer ended it, and ``"minLength":
1000000000000`` was a ``MemoryError`` 500.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import types
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from llama_cpp import llama_grammar

from app.engine.grammar.check import MAX_GRAMMAR_CHARS
from app.engine.grammar.gbnf import MAX_REPETITION_THRESHOLD as MAX_REPEAT
from app.server.errors import ApiError, invalid
from app.server.messages import ToolSpec

MAX_SCHEMA_DEPTH = 64

COUNT_PAIRS = (("minItems", "maxItems"), ("minLength", "maxLength"), ("minProperties", "maxProperties"),
               ("minContains", "maxContains"))
"""Counts a schema may carry: each a non-negative integer, the maximum not below the minimum."""

MAX_RULE_NAME = 200
"""Longer rule names (made of nested property names) are cut and given a hash."""

MAX_COPIES = 20_000
"""Repeated items in one grammar, all repetitions together: llama.cpp makes each optional copy
a rule, and the engine takes at most 50,000 rules (``app.engine.grammar.gbnf.MAX_RULES``)."""

_QUANTIFIER = re.compile(r"\{\s*(\d*)\s*(?:,\s*(\d*)\s*)?\}")
_HUGE = 10**15
"""A count with more digits than this is priced as this (it is refused either way)."""

JSON_OBJECT_GRAMMAR = llama_grammar.JSON_GBNF
"""Any JSON object (OpenAI's ``json_object`` mode), with bounded whitespace."""


class Where:
    """Where a part of a schema is, as links to its parent: written out only to name a field
    in an error. NOTE: paths as strings held each level's whole path — 30 levels of 250 KB
    property names were ~116 MB of paths."""

    __slots__ = ("key", "parent")

    def __init__(self, parent: Where | None, key: str | int) -> None:
        self.parent = parent
        self.key = key

    def __str__(self) -> str:
        steps: list[str | int] = []
        node: Where | None = self
        while node is not None and node.parent is not None:
            steps.append(node.key)
            node = node.parent
        root = str(node.key) if node is not None else ""
        return root + "".join(f"[{k}]" if isinstance(k, int) else f".{k}" for k in reversed(steps))


def _join(where: Where, key: str | int) -> Where:
    return Where(where, key)


def _bad(where: Where, key: str, why: str) -> ApiError:
    return invalid(str(_join(where, key)), why)


def _short(name: str) -> str:
    """A rule name of at most ``MAX_RULE_NAME`` characters: a longer one (made of nested
    property names) is cut and told apart by a hash; names are labels, and rules whose names
    meet get a suffix anyway."""
    if len(name) <= MAX_RULE_NAME:
        return name
    digest = hashlib.blake2b(name.encode("utf-8", "surrogatepass"), digest_size=6).hexdigest()
    return f"{name[: MAX_RULE_NAME // 2]}-{digest}"


SUBSCHEMA = ("items", "additionalProperties", "not", "if", "then", "else", "contains", "propertyNames",
             "additionalItems", "unevaluatedItems", "unevaluatedProperties")
SUBSCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems", "items")
SUBSCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
"""Where a schema holds schemas; everything else in it (``enum``, ``const``, ``default``, a
property's *name*) is data, walked only for its depth."""


def check_schema(schema: Any, param: str | Where, paths: dict[int, Where] | None = None) -> dict[int, Where]:
    """Refuse what no grammar should be built from (module docstring). Returns ``paths``
    with the path of every schema in ``schema`` added, by ``id`` (for naming a field later);
    a schema already in it is not walked again."""
    paths = {} if paths is None else paths
    root = param if isinstance(param, Where) else Where(None, param)
    stack: list[tuple[Any, Where, int, bool]] = [(schema, root, 0, True)]
    while stack:
        node, where, depth, is_schema = stack.pop()
        if depth > MAX_SCHEMA_DEPTH:
            raise invalid(str(root), f"the schema nests deeper than {MAX_SCHEMA_DEPTH} levels")
        if not is_schema or not isinstance(node, dict):
            if isinstance(node, dict | list):
                items = node.items() if isinstance(node, dict) else enumerate(node)
                stack.extend((v, _join(where, k), depth + 1, False) for k, v in items)
            continue
        if id(node) in paths and depth > 0:
            continue
        paths[id(node)] = where
        _check_node(node, where)
        for key, value in node.items():
            at = _join(where, key)
            if key in SUBSCHEMA_MAPS and isinstance(value, dict):
                stack.extend((v, _join(at, k), depth + 2, True) for k, v in value.items())
            elif key in SUBSCHEMA_LISTS and isinstance(value, list):
                stack.extend((v, _join(at, i), depth + 2, True) for i, v in enumerate(value))
            else:
                stack.append((value, at, depth + 1, key in SUBSCHEMA))
    return paths


def _check_node(node: Mapping[str, Any], where: Where, *, refs: bool = True) -> None:
    ref = node.get("$ref") if refs else None
    if ref is not None and (not isinstance(ref, str) or not ref.startswith("#")):
        raise _bad(where, "$ref", f"only local references ('#/...') are allowed, got {ref!r}")
    for low, high in COUNT_PAIRS:
        for key in (low, high):
            value = node.get(key)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
                raise _bad(where, key, f"expected a non-negative integer, got {value!r}")
        lo, hi = node.get(low), node.get(high)
        if lo is not None and hi is not None and hi < lo:
            raise _bad(where, high, f"{hi} is below {low} ({lo}): no value could match")
    for key in ("enum", "anyOf", "oneOf", "allOf", "prefixItems"):
        value = node.get(key)
        if value is not None and not isinstance(value, list):
            raise _bad(where, key, f"expected a list, got {type(value).__name__}")
        if key in ("enum", "anyOf", "oneOf") and value == []:
            raise _bad(where, key, "an empty list allows no value")
    if node.get("type") == []:
        raise _bad(where, "type", "an empty list of types allows no value")
    for key in ("properties", "$defs", "definitions"):
        value = node.get(key)
        if value is not None and not isinstance(value, dict):
            raise _bad(where, key, f"expected an object, got {type(value).__name__}")
    pattern = node.get("pattern")
    if pattern is not None and not isinstance(pattern, str):
        raise _bad(where, "pattern", f"expected a string, got {type(pattern).__name__}")


def _count(digits: str) -> int:
    return _HUGE if len(digits) > 15 else int(digits or 0)


def _literal_size(value: Any) -> int:
    """An upper bound on the length of ``value`` as JSON text written as a GBNF literal
    (``json.dumps`` escapes a code point as up to 12 characters, the literal doubles its
    backslashes), counted without building it."""
    total, stack = 0, [value]
    while stack:
        node = stack.pop()
        if isinstance(node, str):
            total += 14 * len(node) + 4
        elif isinstance(node, dict):
            total += 4 + 4 * len(node)
            stack.extend(node.keys())
            stack.extend(node.values())
        elif isinstance(node, list):
            total += 4 + 4 * len(node)
            stack.extend(node)
        else:
            total += 32  # numbers (at most 4,300 digits parse: a 400 before this), true, null
            if isinstance(node, int) and not isinstance(node, bool) and abs(node) >= 10**24:
                total += len(str(node))
    return total


def _escape_literal(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\r", "\\r").replace("\n", "\\n")
    return f'"{escaped}"'


def _leave_out(field: str) -> str:
    return f" (leave '{field}' out for no limit)" if field.startswith("max") else ""


def _times(group: str, low: int, high: int | None) -> str:
    """``group`` repeated ``low`` to ``high`` times (None: no limit), in GBNF."""
    if high == 0:
        return ""
    if (low, high) == (1, 1):
        return group
    short = {(0, 1): "?", (0, None): "*", (1, None): "+"}.get((low, high))
    if short is not None:
        return group + short
    if high is None:
        return f"{group}{{{low},}}"
    return f"{group}{{{low}}}" if low == high else f"{group}{{{low},{high}}}"


def _repetition(item_rule: str, min_items: int, max_items: int | None, separator_rule: str | None = None,
                item_rule_is_literal: bool = False, *, more_rule: str | None = None) -> str:
    """The converter's ``_build_repetition`` written with GBNF's ``{m,n}``; ``more_rule``
    names a rule that is ``separator_rule item_rule``.

    NOTE: the converter writes ``maxItems: 200`` out as 200 nested optional groups
    (``(x (x (x …)?)?)?``), which no grammar parser takes past 100 levels: ``maxItems`` or
    ``maxLength`` above ~100 made a grammar that does not parse. ``{m,n}`` is what llama.cpp
    expands into the same rules, one level deep (``MAX_REPEAT`` at most, priced first). It
    repeats a rule, never a group: llama.cpp multiplies a group's repetition by the rules
    made inside it, so ``("," space item){0,1999}`` and ``(item more{0,1998})?`` "multiply
    past the limit".
    """
    if max(min_items, max_items or 0) > MAX_REPEAT:
        raise ValueError(f"more than {MAX_REPEAT:,} repetitions")
    if not separator_rule:
        return _times(item_rule, min_items, max_items)
    if max_items == 0:
        return ""
    more = _times(more_rule or f"({separator_rule} {item_rule})", max(min_items - 1, 0),
                  None if max_items is None else max_items - 1)
    both = f"{item_rule} {more}".rstrip()
    return both if min_items > 0 else f"({both})?"


def _with_repetition(method: Any, repetition: Any) -> Any:
    """``method`` of the converter calling ``repetition`` where it called ``_build_repetition``
    (the same code, given a copy of its module's globals with that one name changed)."""
    scope = {**vars(llama_grammar), "_build_repetition": repetition}
    return types.FunctionType(method.__code__, scope, method.__name__, method.__defaults__, method.__closure__)


class GrammarTooLarge(Exception):
    """Raised inside the converter; turned into the 400 naming ``param``."""

    def __init__(self, param: str, message: str) -> None:
        super().__init__(message)
        self.param = param
        self.message = message


def _too_large(where: Where, field: str, message: str) -> GrammarTooLarge:
    return GrammarTooLarge(str(_join(where, field)), message)


class BoundedConverter(llama_grammar.SchemaConverter):
    """``SchemaConverter`` that prices every repetition before building it, keeps a running
    total of the grammar it wrote, escapes literals fully, never names a nested rule
    ``root`` and builds objects in linear time (module docstring)."""

    def __init__(self, paths: dict[int, Where], param: str, budget: int = MAX_GRAMMAR_CHARS) -> None:
        super().__init__(  # type: ignore[no-untyped-call]
            prop_order={}, allow_fetch=False, dotall=False, raw_pattern=False)
        self.paths = paths
        self.budget = budget
        self.size = 0
        self.copies = 0
        """Repeated items so far (``{m,n}`` makes up to n copies when llama.cpp reads it)."""
        self._where = [Where(None, param)]
        self._next_suffix: dict[str, int] = {}
        self._visit = _with_repetition(llama_grammar.SchemaConverter.visit, self._repetition)
        self._visit_pattern = types.MethodType(  # type: ignore[method-assign]
            _with_repetition(llama_grammar.SchemaConverter._visit_pattern, self._repetition), self)

    def _repetition(self, item_rule: str, min_items: int, max_items: int | None, separator_rule: str | None = None,
                    item_rule_is_literal: bool = False) -> str:
        more = None
        if separator_rule and (max_items is None or max_items > 1):
            more = self._add_rule(f"{item_rule}-more", f"{separator_rule} {item_rule}")
        text = _repetition(item_rule, min_items, max_items, separator_rule, item_rule_is_literal, more_rule=more)
        if separator_rule and min_items == 0 and max_items:  # ``(a a-more{0,n})?`` as ``rule?``: no group
            return self._add_rule(f"{item_rule}-list", text[1:-2]) + "?"
        return text

    # -- the size of what is built --------------------------------------------------------

    def _spend(self, where: Where, field: str, cost: int, what: str) -> None:
        if self.size + cost > self.budget:
            raise GrammarTooLarge(
                str(_join(where, field) if field else where),
                f"{what} would make a grammar of about {self.size + cost:,} characters; this server takes "
                f"grammars of up to {self.budget:,}" + _leave_out(field),
            )

    def _price(self, schema: Mapping[str, Any], name: str, where: Where) -> None:
        """Refuse a repetition llama.cpp cannot take or that would take the grammar past its
        limits, before the converter writes it."""
        for low, high in (("minItems", "maxItems"), ("minLength", "maxLength")):
            lo, hi = schema.get(low), schema.get(high)
            for field, count in ((high, hi), (low, lo)):
                if isinstance(count, int) and count > MAX_REPEAT:
                    raise _too_large(where, field, f"{count:,} is more repetitions than a grammar can hold "
                                     f"({MAX_REPEAT:,}, llama.cpp's limit)" + _leave_out(field))
            copies = max(c for c in (lo, hi, 0) if isinstance(c, int))
            self._copies(where, high if isinstance(hi, int) and hi else low, copies)
        pattern = schema.get("pattern")
        if isinstance(pattern, str):
            self._spend(where, "pattern", len(pattern), f"a pattern of {len(pattern):,} characters")
            for m in _QUANTIFIER.finditer(pattern):
                least, most = _count(m.group(1)), _count(m.group(2) or "")
                count = max(least, most)
                if m.group(2) and most < least:
                    raise _too_large(where, "pattern", f"the repetition {m.group(0)[:40]} has its "
                                     "maximum below its minimum")
                if count > MAX_REPEAT:
                    raise _too_large(where, "pattern", f"the repetition {m.group(0)[:40]} is more than "
                                     f"a grammar can hold ({MAX_REPEAT:,}, llama.cpp's limit)")
                self._copies(where, "pattern", count)
                self._spend(where, "pattern", count * (len(pattern) + 16),
                            f"the repetition {m.group(0)[:40]} in the pattern")
        for field in ("enum", "const"):
            if field in schema:
                self._spend(where, field, _literal_size(schema[field]), f"the '{field}' value")

    def _copies(self, where: Where, field: str, copies: int) -> None:
        if self.copies + copies > MAX_COPIES:
            raise _too_large(where, field, f"the schema's repetitions add up to more than {MAX_COPIES:,} "
                             "copies of their items, more than a grammar can hold")
        self.copies += copies

    def visit(self, schema: Any, name: str) -> str:
        where = self.paths.get(id(schema), self._where[-1])
        nested = len(self._where) > 1
        if nested and name == "":
            name = "root"  # becomes ``root-``: only the top rule is ``root``
        name = _short(name)  # NOTE: each level's name is its parent's plus a property name
        if isinstance(schema, Mapping):
            _check_node(schema, where, refs=False)  # again: a ``$ref`` may point anywhere, data too
            self._price(schema, name, where)
            if schema.get("items") == {} and "prefixItems" not in schema:
                # NOTE: ``items: {}`` was a KeyError (the converter tests ``items`` for
                # truth); ``{}`` is what the converter makes an object of anywhere else.
                schema = {**schema, "items": {"type": "object"}}
        self._where.append(where)
        try:
            key: str = self._visit(self, schema, name)
        finally:
            self._where.pop()
        return key

    def _add_rule(self, name: str, rule: str) -> str:
        esc = llama_grammar.INVALID_RULE_CHARS_RE.sub("-", _short(name))
        if esc == "root" and len(self._where) > 2:  # [param, the top schema's path, …]
            esc = "root-"
        rules: dict[str, str] = self._rules
        if esc in rules and rules[esc] != rule:
            i = self._next_suffix.get(esc, 0)  # NOTE: the converter counted from 0 each time: quadratic
            while f"{esc}{i}" in rules and rules[f"{esc}{i}"] != rule:
                i += 1
            self._next_suffix[esc] = i
            esc = f"{esc}{i}"
        if rules.get(esc) != rule:
            self._spend(self._where[-1], "", len(esc) + len(rule) + 5, "this schema")
            self.size += len(esc) + len(rule) + 5
        rules[esc] = rule
        return esc

    def _format_literal(self, literal: str) -> str:
        return _escape_literal(literal)

    # -- objects, in linear time ----------------------------------------------------------

    def _build_object_rule(self, properties: list[tuple[str, Any]], required: set[str], name: str,
                           additional_properties: Any) -> str:
        prefix = f"{name}-" if name else ""
        kv: dict[str, str] = {}
        for prop_name, prop_schema in properties:
            value_rule = self.visit(prop_schema, f"{prefix}{prop_name}")
            literal = self._format_literal(json.dumps(prop_name))
            kv[prop_name] = self._add_rule(f"{prefix}{prop_name}-kv", f'{literal} space ":" space {value_rule}')
        names = [p for p, _ in properties]
        required_props = [k for k in names if k in required]
        optional_props = [k for k in names if k not in required]
        if additional_properties is True or isinstance(additional_properties, dict):
            sub = f"{prefix}additional"
            value_rule = self.visit({} if additional_properties is True else additional_properties, f"{sub}-value")
            string = self._add_primitive("string", llama_grammar.PRIMITIVE_RULES["string"])
            kv["*"] = self._add_rule(f"{sub}-kv", f'{string} ":" space {value_rule}')
            optional_props.append("*")
        rule = '"{" space ' + ' "," space '.join(kv[k] for k in required_props)
        if optional_props:
            # The converter's ``get_recursive_refs``: alternative i is property i, then an
            # optional tail of the ones after it, each tail one ``<name>-<prop>-rest`` rule.
            rest: list[str | None] = [None] * len(optional_props)
            for i in range(len(optional_props) - 1, 0, -1):
                tail = self._optional_head(optional_props[i], kv, prefix, first=False)
                if rest[i] is not None:
                    tail += " " + str(rest[i])
                rest[i - 1] = self._add_rule(f"{prefix}{optional_props[i - 1]}-rest", tail)
            alternatives = []
            for i, k in enumerate(optional_props):
                head = self._optional_head(k, kv, prefix, first=True)
                alternatives.append(head if rest[i] is None else f"{head} {rest[i]}")
            rule += " (" + (' "," space ( ' if required_props else "")
            rule += " | ".join(alternatives) + (" )" if required_props else "") + " )?"
        return rule + ' "}" space'

    def _optional_head(self, k: str, kv: dict[str, str], prefix: str, *, first: bool) -> str:
        if k == "*":
            return str(self._add_rule(f"{prefix}additional-kvs", f'{kv[k]} ( "," space {kv[k]} )*'))
        return kv[k] if first else f'( "," space {kv[k]} )?'


@contextlib.contextmanager
def _refusals(where: str | Where) -> Iterator[None]:
    """The converter's failures, as 400s: past the budget naming the field, else ``where``."""
    try:
        yield
    except GrammarTooLarge as exc:
        raise ApiError(400, f"Invalid value for '{exc.param}': {exc.message}", param=exc.param,
                       code="invalid_value") from None
    except (AssertionError, ValueError, KeyError, TypeError, IndexError, AttributeError, RecursionError) as exc:
        raise invalid(str(where), f"cannot turn this JSON Schema into a grammar: {exc}") from exc


def _resolved(converter: BoundedConverter, schema: Mapping[str, Any], where: str, url: str) -> dict[str, Any]:
    """``schema`` checked (named ``where``) and its local ``$ref``s resolved against itself."""
    root = Where(None, where)
    check_schema(schema, root, converter.paths)
    copy = dict(schema)
    converter.paths[id(copy)] = root
    with _refusals(where):
        resolved: dict[str, Any] = converter.resolve_refs(copy, url)
    return resolved


def json_schema_grammar(schema: Mapping[str, Any], param: str = "response_format.json_schema.schema") -> str:
    """Output that validates against ``schema`` (OpenAI's ``json_schema`` mode)."""
    converter = BoundedConverter({}, param)
    resolved = _resolved(converter, schema, param, "request")
    with _refusals(param):
        top = converter.visit(resolved, "")
    rules = str(converter.format_grammar())  # type: ignore[no-untyped-call]
    return rules if top == "root" else f"root ::= {top}\n{rules}"


TOOL_OPEN, TOOL_CLOSE = "<tool_call>", "</tool_call>"


def tool_call_grammar(tools: Sequence[ToolSpec], only: str | None = None,
                      markers: tuple[str, str] = (TOOL_OPEN, TOOL_CLOSE)) -> str:
    """Exactly one ``<tool_call>{"name": …, "arguments": {…}}</tool_call>``, the arguments
    matching the chosen function's parameter schema (``only``: that function, else any).
    Each function's schema is checked under its own name (``tools[i].function.parameters``)
    and its ``$ref``s point into itself (``#/$defs/…``, as pydantic writes them)."""
    converter = BoundedConverter({}, "tools")
    calls = [
        {
            "type": "object",
            "properties": {
                "name": {"const": t.name},
                "arguments": _resolved(converter, t.parameters, f"tools[{i}].function.parameters", f"tools{i}"),
            },
            "required": ["name", "arguments"],
            "additionalProperties": False,
        }
        for i, t in enumerate(tools) if only is None or t.name == only
    ]
    schema: dict[str, Any] = calls[0] if len(calls) == 1 else {"anyOf": calls}
    converter.paths[id(schema)] = Where(None, "tools")
    with _refusals("tools"):
        top = converter.visit(schema, "call")
    open_, close = (_literal(m) for m in markers)
    return f'root ::= {open_} "\\n" {top} "\\n" {close}\n{converter.format_grammar()}'  # type: ignore[no-untyped-call]


def _literal(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'
