"""The schema converter's bounds that a request cannot show from outside (issue 51, item 1):
how much memory a conversion holds, how long rule names get, what an error sends back.

The property test (``tests/property/test_schema_bounds.py``) draws schemas at random; these
are the worst cases built on purpose.
"""

from __future__ import annotations

import contextlib
import tracemalloc
from typing import Any

import pytest

from app.engine.grammar.check import check_grammar
from app.server.errors import ApiError, error_body
from app.server.grammar import MAX_RULE_NAME, json_schema_grammar


def _nested(levels: int, name_chars: int, leaf: dict[str, Any]) -> dict[str, Any]:
    schema = leaf
    for i in range(levels):
        schema = {"type": "object", "properties": {f"{i:04d}" + "n" * name_chars: schema}, "required": []}
    return schema


def _peak_mib(build: Any) -> float:
    tracemalloc.start()
    with contextlib.suppress(ApiError):
        build()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak / 2**20


def test_nested_long_property_names_hold_little_memory() -> None:
    """30 levels of 250,000-character property names (a 7.5 MB body): each level's rule name
    was its parent's plus its own, ~116 MB of names held at once on the way down; now
    names are cut, and the conversion's own allocations stay small."""
    schema = _nested(30, 250_000, {"type": "string"})
    peak = _peak_mib(lambda: json_schema_grammar(schema))
    assert peak < 48, f"{peak:.0f} MiB"


def test_long_names_make_short_rule_names_and_a_grammar_that_parses() -> None:
    schema = _nested(5, 1000, {"type": "array", "items": {"type": "integer"}, "maxItems": 3})
    grammar = json_schema_grammar(schema)
    names = [line.split(" ::= ", 1)[0] for line in grammar.splitlines()]
    assert max(len(n) for n in names) <= MAX_RULE_NAME + 32, max(names, key=len)
    check_grammar(grammar, None)


def test_a_long_field_path_is_cut_in_the_error() -> None:
    """The path names the field, but a path of long names is not sent back whole."""
    schema = _nested(4, 5000, {"type": "array", "items": {}, "maxItems": 10**9})
    with pytest.raises(ApiError) as err:
        json_schema_grammar(schema)
    assert err.value.param is not None and err.value.param.endswith(".maxItems")
    body = error_body(err.value.message, param=err.value.param)["error"]
    assert len(body["param"]) <= 4096 and body["param"].endswith(".maxItems")
    assert len(body["message"]) <= 4096
