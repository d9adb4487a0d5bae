"""The grammar check: llama.cpp's parser ported, and the grammars it cannot follow refused.

Without a vocabulary (``check_grammar(text, None)``) only what holds for any model is
checked; ``tests/property/test_grammars.py`` drives the same check with the tiny model's
vocabulary against llama.cpp itself.
"""

from __future__ import annotations

import re

import pytest

from app.engine.errors import InvalidGrammar
from app.engine.grammar import gbnf
from app.engine.grammar.check import MAX_SEARCH_COST, check_grammar
from app.engine.grammar.gbnf import ALT, CHAR, CHAR_ALT, CHAR_NOT, CHAR_RNG_UPPER, END, RULE_REF


def test_rules_are_built_as_llama_cpp_builds_them() -> None:
    parsed = gbnf.parse('root ::= "a"{2,3} [^x-z_]\n')
    assert parsed.symbol_ids == {"root": 0, "root_1": 1}
    assert parsed.rules[0] == [(CHAR, 97), (CHAR, 97), (RULE_REF, 1), (CHAR_NOT, ord("x")), (CHAR_RNG_UPPER, ord("z")),
                               (CHAR_ALT, ord("_")), (END, 0)]
    assert parsed.rules[1] == [(CHAR, 97), (ALT, 0), (END, 0)]


@pytest.mark.parametrize(("grammar", "why"), [
    ("root ::= (", "does not parse: expecting ')'"),
    ('root ::= "x', "does not parse: unexpected end of input"),
    ("root ::= [a-", "does not parse: unexpected end of input"),
    ('root ::= "\\q"', "unknown escape at line 1, column 11"),
    ("root ::= x", "undefined rule 'x'"),
    ('start ::= "x"', "no 'root' rule"),
    ("", "the grammar is empty"),
    ('root ::= "x"*\n"', "expecting a rule name"),
    ("root ::= *", "expecting an item before"),
    ('root ::= "a"{2001}', "more than 2000 repetitions"),
    ('root ::= "a"{5,2}', "maximum below its minimum"),  # llama.cpp loops ~2**64 times on it
    ("root ::= " + "(" * 200 + '"x"' + ")" * 200, "nested more than 100 deep"),
    ("root ::= [b-a]", "the range b-a is empty"),
    ('root ::= "\\x00"', "can produce the character"),
    ("root ::= [\\U00200000]", "can produce the character"),
    ("root ::= root", "left-recursive"),
    ('root ::= a root "x"\na ::= b\nb ::= "" | "y"', "left-recursive"),  # llama.cpp's test misses it
    ('root ::= "a\x00"', "NUL character"),
    ("root ::= \ud800", "lone surrogate"),
])  # fmt: skip
def test_what_llama_cpp_refuses_or_aborts_on_is_refused_by_name(grammar: str, why: str) -> None:
    with pytest.raises(InvalidGrammar, match=re.escape(why)) as err:
        check_grammar(grammar, None)
    assert err.value.code == "invalid_request"


@pytest.mark.parametrize("grammar", [
    'root ::= "yes" | "no"', "root ::= [0-9]+ ([.] [0-9]{1,3})?", 'root ::= ""', "root ::= [^\\n]*",
    'root ::= "a" b*\nb ::= "x" | "y" b', "root ::= <[42]> !<[7]>", "root ::= [\\u4e00-\\u9fff]",
    'root   ::= item ("," ws item)*\nitem ::= [a-z]+  # a comment\nws ::= [ \\t\\n]*',
])  # fmt: skip
def test_ordinary_grammars_pass(grammar: str) -> None:
    assert check_grammar(grammar, None) == grammar


def test_the_left_recursion_search_is_bounded() -> None:
    # Each rule names the next twice at its left edge: llama.cpp's search would take 2**40 steps.
    ladder = [f'r{i} ::= r{i + 1} "x" | r{i + 1} "y" | ""' for i in range(40)]
    grammar = "root ::= r0\n" + "\n".join(ladder) + '\nr40 ::= "z"'
    with pytest.raises(InvalidGrammar, match=f"more than {MAX_SEARCH_COST:,} steps"):
        check_grammar(grammar, None)


def test_a_start_that_fans_out_is_refused() -> None:
    # r_i ::= r_{i+1} r_{i+1}, the last one possibly empty: 2**30 different first stacks.
    ladder = [f"r{i} ::= r{i + 1} r{i + 1}" for i in range(30)]
    grammar = "root ::= r0\n" + "\n".join(ladder) + '\nr30 ::= "a" | ""'
    with pytest.raises(InvalidGrammar, match="too ambiguous"):
        check_grammar(grammar, None)
