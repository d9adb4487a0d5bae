"""Property-based: no JSON schema can eat the machine's memory, and every grammar built parses
(issue 51, items 1 and 5).

Hypothesis draws schemas — arrays, strings, objects, ``anyOf``, ``enum`` and ``const`` —
with counts and sizes up to 10^12 (``minItems``, ``maxItems``, ``minLength``,
``maxLength``, a pattern's ``{n}``/``{m,n}``), minimums above maximums, empty ``enum`` and
``anyOf`` lists, and property names and enum values of up to 1,000 characters (quotes,
backslashes, the empty name, ``root``). Each goes through ``json_schema_grammar`` and, as a
function's parameters, ``tool_call_grammar`` — what ``hearth serve`` runs before the engine.
Properties:

- the answer is a grammar or a 400 naming a field of the schema
  (``response_format.json_schema.schema…``, ``tools[0].function.parameters…``), within
  ``ANSWER_S`` seconds;
- a grammar is within the engine's limit and passes Hearth's own grammar check (the parser
  llama.cpp's is ported from, and the checks after it): the converter's output always parses;
- a schema without a planted defect and with every count at most ``SMALL`` is refused only
  for its size (names of 1,000 characters nested a few levels make long rule names);
- the process stays below ``MEMORY_BOUND_MIB`` of peak resident memory.

All examples run in **one child process** (address space capped at ``ADDRESS_SPACE_GIB``, so
a regression fails this test with a ``MemoryError`` instead of taking the machine), which
reports its own peak resident set at the end (``VmHWM``: ``ru_maxrss`` would count the
pages of the parent it was forked from, which a full test run makes large). Derandomized like
``test_engine_api`` (``HEARTH_PROPERTY_EXAMPLES``, ``HEARTH_PROPERTY_RANDOM=1``).
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = int(os.environ.get("HEARTH_PROPERTY_EXAMPLES", "1000"))
MEMORY_BOUND_MIB = 256
"""Peak resident memory of the child (it starts at ~75 MiB with llama_cpp imported)."""
ADDRESS_SPACE_GIB = 4
ANSWER_S = 10.0
"""Per schema, both grammars (a healthy one takes milliseconds); a bound, not a timing check."""
SMALL = 20
SCHEMA = "response_format.json_schema.schema"
TOOL = "tools[0].function.parameters"

# --------------------------------------------------------------------------- strategies

huge = st.sampled_from([10**4, 10**5, 10**6, 10**7, 10**9, 10**12])
counts = st.one_of(st.integers(0, 6), st.integers(0, 6), st.integers(0, 10**12), huge)
names = st.one_of(
    st.sampled_from(["", '"', "\\", 'a"b\\c', "root", "space", "-", "é", "call", "x" * 1000, '"' * 1000]),
    st.text(st.characters(blacklist_categories=("Cs",)), max_size=1000),
    st.text("ab\"\\ -_", max_size=8),
)


@st.composite
def patterns(draw: st.DrawFn) -> str:
    n, m = draw(counts), draw(counts)
    return draw(st.sampled_from([f"^a{{{n}}}$", f"^[a-z]{{{n},{m}}}$", f"^(ab){{{n},}}$", f"^x{{{n}}}y{{{m}}}$",
                                 "^[a-z]+$", "^ab?c*$"]))


def _sized(kind: str, low: str, high: str) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries({"type": st.just(kind)}, optional={low: counts, high: counts})


scalars = st.one_of(st.integers(-5, 5), st.booleans(), st.none(), names)
leaves = st.one_of(
    st.sampled_from([{"type": "integer"}, {"type": "number"}, {"type": "boolean"}, {"type": "null"}, {}]),
    _sized("string", "minLength", "maxLength"),
    patterns().map(lambda p: {"type": "string", "pattern": p}),
    st.lists(scalars, max_size=4).map(lambda v: {"enum": v}),
    scalars.map(lambda v: {"const": v}),
)


def _extend(children: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
    array = st.builds(lambda items, sized: {**sized, "items": items}, children,
                      _sized("array", "minItems", "maxItems"))
    obj = st.builds(
        lambda props, extra: {"type": "object", "properties": props, "required": sorted(props)[::2],
                              **({"additionalProperties": extra} if extra is not None else {})},
        st.dictionaries(names, children, max_size=4),
        st.one_of(st.none(), st.booleans(), children),
    )
    return st.one_of(array, obj, st.lists(children, max_size=3).map(lambda alts: {"anyOf": alts}))


schemas = st.recursive(leaves, _extend, max_leaves=8)

# --------------------------------------------------------------------------- the property


def _planted(schema: Any) -> tuple[bool, int]:
    """(a defect no value can meet — an empty list, a maximum below its minimum — and the
    largest count anywhere, a pattern's included)."""
    import re

    from app.server.grammar import SUBSCHEMA, SUBSCHEMA_LISTS, SUBSCHEMA_MAPS

    defect, largest = False, 0
    stack = [schema]
    while stack:
        node = stack.pop()
        if not isinstance(node, dict):
            continue
        defect |= node.get("enum") == [] or node.get("anyOf") == []
        for low, high in (("minItems", "maxItems"), ("minLength", "maxLength")):
            lo, hi = node.get(low), node.get(high)
            defect |= lo is not None and hi is not None and hi < lo
            largest = max(largest, lo or 0, hi or 0)
        for low, high in re.findall(r"\{(\d+)(?:,(\d*))?\}", node.get("pattern") or ""):
            defect |= bool(high) and int(high) < int(low)
            largest = max(largest, int(low), int(high or 0))
        for key, value in node.items():  # its subschemas (a property named "enum" is one)
            if key in SUBSCHEMA_MAPS and isinstance(value, dict):
                stack.extend(value.values())
            elif key in SUBSCHEMA_LISTS and isinstance(value, list):
                stack.extend(value)
            elif key in SUBSCHEMA:
                stack.append(value)
    return defect, largest


def _answer(build: Any, param: str, schema: dict[str, Any], summary: dict[str, Any]) -> None:
    from app.engine.grammar.check import MAX_GRAMMAR_CHARS, check_grammar
    from app.server.errors import ApiError

    t0 = time.monotonic()
    try:
        grammar = build()
    except ApiError as exc:
        took = time.monotonic() - t0
        assert exc.status == 400 and exc.param is not None and exc.param.startswith(param), (exc.param, exc.message)
        defect, largest = _planted(schema)
        assert defect or largest > SMALL or "would make a grammar of about" in exc.message, exc.message
        summary["refused"] += 1
        event("refused" if defect or largest > SMALL else "refused for its size")
    else:
        took = time.monotonic() - t0
        assert len(grammar) <= MAX_GRAMMAR_CHARS + 1024
        check_grammar(grammar, None)  # raises InvalidGrammar: the converter wrote one that does not parse
        summary["grammars"] += 1
        event("a grammar")
    assert took < ANSWER_S, f"{took:.1f} s"
    if took > summary["slowest_s"]:
        summary["slowest_s"], summary["slowest"] = took, json.dumps(schema)[:300]


def run_in_child() -> None:
    """The property, over every example, in this (child) process; one JSON line of results."""
    import copy

    from app.server.grammar import json_schema_grammar, tool_call_grammar
    from app.server.messages import ToolSpec

    summary: dict[str, Any] = {"examples": 0, "refused": 0, "grammars": 0, "slowest_s": 0.0}

    @settings(max_examples=EXAMPLES, deadline=None, database=None,
              derandomize=not os.environ.get("HEARTH_PROPERTY_RANDOM"),
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much])
    @given(schemas)
    def each(schema: dict[str, Any]) -> None:
        summary["examples"] += 1
        _answer(lambda: json_schema_grammar(copy.deepcopy(schema)), SCHEMA, schema, summary)
        params = {"type": "object", "properties": {"p": copy.deepcopy(schema)}}
        _answer(lambda: tool_call_grammar([ToolSpec("f", "", params)]), TOOL, params, summary)

    each()
    summary["peak_rss_mib"] = _peak_rss_kib() / 1024
    print(json.dumps(summary), flush=True)


def _peak_rss_kib() -> int:
    with open("/proc/self/status") as status:
        return int(next(line for line in status if line.startswith("VmHWM:")).split()[1])


def _cap_address_space() -> None:
    limit = ADDRESS_SPACE_GIB << 30
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def test_no_schema_eats_memory_and_every_grammar_parses() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", "from tests.property.test_schema_bounds import run_in_child; run_in_child()"],
        cwd=ROOT, capture_output=True, text=True, timeout=600, preexec_fn=_cap_address_space,
    )
    assert proc.returncode == 0, proc.stderr[-6000:]
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["examples"] == EXAMPLES or summary["examples"] >= 100, summary
    assert summary["refused"] and summary["grammars"], summary  # both roads were taken
    assert summary["peak_rss_mib"] < MEMORY_BOUND_MIB, summary
