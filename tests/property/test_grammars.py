"""Property-based: no grammar and no JSON schema a client can send kills the process (issue 26).

Hypothesis draws GBNF grammars (well-formed and not: empty and inverted ranges, NUL, code
points no token spells, end-of-generation and out-of-vocabulary tokens, ``{m,n}`` with
``m > n``, left recursion, deep nesting) and JSON schemas (patterns, lengths, enums, nested
objects and arrays), and hands each to the engine on the tiny model, in a **subprocess**
(``grammar_worker``), so that a grammar llama.cpp aborts on fails this test instead of
killing the suite. Properties:

- the process survives every grammar (before the checker, ``root ::= [b-a]`` ended it with
  SIGABRT);
- a grammar is either refused by the engine with ``invalid_request`` before llama.cpp sees
  it, or it runs to a normal end (never ``grammar_failed``: the checker and llama.cpp's
  parser agree on what parses).

Bounded and derandomized like ``test_engine_api`` (``HEARTH_PROPERTY_EXAMPLES``,
``HEARTH_PROPERTY_RANDOM=1``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from tests.property.test_engine_api import PROPERTY_SETTINGS as ENGINE_API_SETTINGS

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = int(os.environ.get("HEARTH_PROPERTY_EXAMPLES", "120"))
PROPERTY_SETTINGS = settings(ENGINE_API_SETTINGS, max_examples=EXAMPLES)  # derandomized unless asked
ANSWER_S = 120.0  # a hang guard per grammar (a healthy one takes milliseconds), not a timing check


class Worker:
    """``grammar_worker`` in a subprocess, restarted after it dies (so Hypothesis can shrink)."""

    def __init__(self, model: Path, data_dir: Path) -> None:
        self.args = [sys.executable, "-m", "tests.property.grammar_worker", str(model), str(data_dir)]
        self.proc: subprocess.Popen[str] | None = None

    def _start(self) -> subprocess.Popen[str]:
        proc = subprocess.Popen(self.args, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, text=True)
        assert proc.stdout is not None
        assert json.loads(proc.stdout.readline()) == {"ready": True}
        return proc

    def ask(self, request: dict[str, Any]) -> dict[str, Any]:
        if self.proc is None or self.proc.poll() is not None:
            self.proc = self._start()
        proc = self.proc
        assert proc.stdin is not None and proc.stdout is not None
        try:
            proc.stdin.write(json.dumps(request) + "\n")
            proc.stdin.flush()
        except BrokenPipeError:
            pass
        line = _readline(proc, ANSWER_S)
        if not line:
            code = proc.wait(30)
            self.proc = None
            raise AssertionError(f"the engine process died (exit {code}) on {request!r}")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


def _readline(proc: subprocess.Popen[str], timeout: float) -> str:
    import select

    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    if not ready:
        proc.kill()
        proc.wait(10)
        raise AssertionError(f"no answer within {timeout} s: the engine hung")
    return proc.stdout.readline()


@pytest.fixture(scope="module")
def worker(tiny_model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Worker]:
    w = Worker(tiny_model_path, tmp_path_factory.mktemp("grammars"))
    try:
        yield w
    finally:
        w.close()


def check_answer(answer: dict[str, Any]) -> None:
    event(f"outcome: {answer['outcome']}")
    if answer["outcome"] == "refused":
        event("refused: " + " ".join(answer["message"].split(":")[-1].split()[:4]))
        if answer.get("by") == "engine":
            assert answer["code"] == "invalid_request", answer
        return
    assert answer["outcome"] == "ran", answer
    assert answer["finish"] in ("stop", "length"), answer


# --------------------------------------------------------------------------- GBNF strategies

chars = st.one_of(
    st.characters(min_codepoint=0x20, max_codepoint=0x7E),
    st.sampled_from(["\\x00", "\\x41", "\\u00e9", "\\u4e2d", "\\uD800", "\\U0010FFFF", "\\U00200000",
                     "\\U0001F600", "\\n", "\\t", "\\\\", '\\"', "\\]", "\\-", "é", "中", "\\q", "\\x4"]),
)  # fmt: skip
_literal_chars = chars.filter(lambda c: c not in ('"', "\\"))
_class_chars = chars.filter(lambda c: c not in ("]", "\\", "-", "^"))
literals = st.lists(_literal_chars, min_size=1, max_size=4).map(lambda cs: '"' + "".join(cs) + '"') | st.just('""')
ranges = st.tuples(_class_chars, st.one_of(st.none(), _class_chars)).map(lambda r: r[0] if r[1] is None else f"{r[0]}-{r[1]}")
classes = st.tuples(st.booleans(), st.lists(ranges, max_size=3)).map(lambda c: "[" + ("^" if c[0] else "") + "".join(c[1]) + "]")
tokens = st.one_of(
    st.integers(0, 60000).map(lambda i: f"<[{i}]>"), st.sampled_from(["<[0]>", "<[1]>", "<[2]>", "<[49151]>",
                                                                      "<[49152]>", "<|im_end|>", "<|im_start|>",
                                                                      "<|endoftext|>", "<nope>", "!<[2]>"]),
)  # fmt: skip
rule_names = st.sampled_from(["root", "a", "b", "c"])
repeats = st.one_of(
    st.just(""), st.sampled_from(["*", "+", "?"]),
    st.tuples(st.integers(0, 6), st.one_of(st.none(), st.integers(0, 6), st.just(-1))).map(
        lambda r: f"{{{r[0]}}}" if r[1] is None else (f"{{{r[0]},}}" if r[1] == -1 else f"{{{r[0]},{r[1]}}}")),
)  # fmt: skip


def _items(depth: int) -> st.SearchStrategy[str]:
    base = st.one_of(literals, classes, tokens, rule_names, st.just("."))
    if depth <= 0:
        return base
    group = st.lists(st.lists(_items(depth - 1), min_size=0, max_size=3).map(" ".join), min_size=1, max_size=3).map(
        lambda alts: "(" + " | ".join(alts) + ")")
    return st.one_of(base, base, group)


sequences = st.lists(st.tuples(_items(2), repeats).map("".join), min_size=1, max_size=4).map(" ".join) | st.just("")
bodies = st.lists(sequences, min_size=1, max_size=3).map(" | ".join)
rules = st.tuples(rule_names, bodies).map(lambda r: f"{r[0]} ::= {r[1]}")

def _complete(rule_list: list[str], define_all: bool) -> str:
    """Usually define every rule name, so most grammars get past "undefined rule"."""
    if define_all:
        rule_list = rule_list + [f'{name} ::= "{name}"' for name in ("root", "a", "b", "c")
                                 if not any(r.startswith(f"{name} ::=") for r in rule_list)]
    return "\n".join(rule_list)


grammars = st.one_of(
    st.builds(_complete, st.lists(rules, min_size=1, max_size=4), st.booleans()),
    st.builds(_complete, st.lists(rules, min_size=1, max_size=4), st.just(True)),
    st.text(alphabet=st.sampled_from(list('root::=|()[]^-"\\.*+?{},0123456789ab<>!# \n')), max_size=40),
    st.sampled_from(["root ::= [b-a]", 'root ::= "\\x00"', "root ::= <[0]>", "root ::= <[99999]>",
                     "root ::= [^\\x00-\\U0010FFFF]", 'root ::= "a" [\\U00200000]', "root ::= <|im_end|>",
                     'root ::= a root "x"\na ::= b\nb ::= "" | "y"', "root ::= " + "(" * 300 + '"x"' + ")" * 300]),
)  # fmt: skip


@PROPERTY_SETTINGS
@given(grammar=grammars, seed=st.integers(0, 2**32 - 1), hot=st.booleans())
def test_no_grammar_kills_the_engine(worker: Worker, grammar: str, seed: int, hot: bool) -> None:
    check_answer(worker.ask({"gbnf": grammar, "seed": seed, "temperature": 1.5 if hot else 0.0}))


# --------------------------------------------------------------------------- JSON Schema strategies

patterns = st.one_of(
    st.sampled_from(["^[b-a]$", "^[a-z]{2,5}$", "^\\d+$", "[\\x00]", "^(a|b)*c$", "^[^\\s\\S]$", "^.{3}$",
                     "^\\u0000$", "^[\\uD800]$", "^a{5,2}$", "^(((a)))$", "^[\\U00200000]$"]),
    st.text(alphabet=st.sampled_from(list("ab-[]^$.*+?(){}|\\dws0129,")), max_size=12),
)  # fmt: skip
leaf_schemas = st.one_of(
    st.fixed_dictionaries({"type": st.just("string")}, optional={
        "pattern": patterns, "minLength": st.integers(-2, 5), "maxLength": st.integers(-2, 5),
        "enum": st.lists(st.text(max_size=4), max_size=3), "format": st.sampled_from(["date", "uuid", "bogus"])}),
    st.fixed_dictionaries({"type": st.sampled_from(["integer", "number"])}, optional={
        "minimum": st.integers(-10, 10), "maximum": st.integers(-10, 10), "exclusiveMinimum": st.integers(-5, 5)}),
    st.fixed_dictionaries({"const": st.one_of(st.text(max_size=5), st.integers(), st.none())}),
    st.fixed_dictionaries({"enum": st.lists(st.one_of(st.text(max_size=5), st.integers()), max_size=3)}),
    st.sampled_from([{}, {"type": "boolean"}, {"type": "null"}, {"type": "bogus"}, {"not": {}}]),
)  # fmt: skip


def _schemas(depth: int) -> st.SearchStrategy[dict[str, Any]]:
    if depth <= 0:
        return leaf_schemas
    inner = _schemas(depth - 1)
    return st.one_of(
        leaf_schemas,
        st.fixed_dictionaries({"type": st.just("array"), "items": inner}, optional={
            "minItems": st.integers(-1, 4), "maxItems": st.integers(-1, 4)}),
        st.fixed_dictionaries({"type": st.just("object"), "properties": st.dictionaries(
            st.text(min_size=1, max_size=4), inner, max_size=3)}, optional={
            "required": st.lists(st.text(min_size=1, max_size=4), max_size=2),
            "additionalProperties": st.one_of(st.booleans(), inner)}),
        st.fixed_dictionaries({"anyOf": st.lists(inner, min_size=1, max_size=3)}),
    )  # fmt: skip


@PROPERTY_SETTINGS
@given(schema=_schemas(2), seed=st.integers(0, 2**32 - 1), hot=st.booleans())
def test_no_json_schema_kills_the_engine(worker: Worker, schema: dict[str, Any], seed: int, hot: bool) -> None:
    check_answer(worker.ask({"schema": schema, "seed": seed, "temperature": 1.5 if hot else 0.0}))


def test_the_grammars_that_killed_the_process_are_refused_by_name(worker: Worker) -> None:
    """The issue's cases, one by one: each is refused with a message naming the problem."""
    cases = {
        "root ::= [b-a]": "range b-a is empty",
        'root ::= "\\x00"': "no token of this model can produce",
        "root ::= <[0]>": "can never be generated",
        "root ::= <[99999]>": "can never be generated",
        'root ::= "a" [\\U00200000]': "no token of this model can produce",
        "root ::= <|im_end|>": "can never be generated",
        'root ::= "a"{5,2}': "maximum below its minimum",
        'root ::= a root "x"\na ::= b\nb ::= "" | "y"': "left-recursive",
    }
    for grammar, why in cases.items():
        answer = worker.ask({"gbnf": grammar})
        assert answer["outcome"] == "refused" and answer["code"] == "invalid_request", (grammar, answer)
        assert why in answer["message"], (grammar, answer)
    answer = worker.ask({"schema": {"type": "string", "pattern": "^[b-a]$"}})
    assert answer["outcome"] == "refused" and "range b-a is empty" in answer["message"], answer
    answer = worker.ask({"gbnf": 'root ::= "yes" | "no"'})
    assert answer["outcome"] == "ran" and answer["tokens"] >= 1, answer
