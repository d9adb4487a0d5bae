"""A Python port of llama.cpp's GBNF parser (``llama_grammar_parser``, llama-grammar.cpp).

It turns a grammar's text into the very rules llama.cpp would build — the same element
types, the same symbol ids, the same rewriting of ``*``, ``+``, ``?`` and ``{m,n}`` — so that
``app.engine.grammar.check`` can prove a grammar safe *before* llama.cpp sees it. Every
error llama.cpp's parser raises is a ``GrammarError`` here, with the line and column.

Two things llama.cpp does not bound are bounded here, because they would take the process
down inside native code: the nesting of parentheses (the C++ parser recurses once per
level: ~30,000 levels overflow a thread's stack) and the size the repetitions expand to
(``"<60,000 characters>"{2000}`` is 120 million elements).

Rules are lists of ``(type, value)`` pairs, ``type`` one of the ``*`` constants below (the
values of ``enum llama_gretype``); every rule ends with ``END``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

END, ALT, RULE_REF, CHAR, CHAR_NOT, CHAR_RNG_UPPER, CHAR_ALT, CHAR_ANY, TOKEN, TOKEN_NOT = range(10)

Element = tuple[int, int]
Rule = list[Element]
TokenLookup = Callable[[str], "int | None"]
"""Resolves ``<name>`` (brackets included) to its token id, or None when it is not one token."""

MAX_REPETITION_THRESHOLD = 2000
"""llama.cpp's own cap on ``{m,n}`` (``MAX_REPETITION_THRESHOLD``)."""

MAX_NESTING = 100
"""Parentheses nested deeper than this are refused (llama.cpp recurses on each level)."""

MAX_ELEMENTS = 1_000_000
"""Elements in all rules after the repetitions are expanded (8 MB in llama.cpp)."""

MAX_RULES = 50_000


class GrammarError(ValueError):
    """The grammar cannot be used; the message says why and where."""


def _is_word_char(c: str) -> bool:
    return ("a" <= c <= "z") or ("A" <= c <= "Z") or c == "-" or ("0" <= c <= "9")


def _is_digit(c: str) -> bool:
    return "0" <= c <= "9"


_HEX = {c: int(c, 16) for c in "0123456789abcdefABCDEF"}
_ESCAPES = {"t": "\t", "r": "\r", "n": "\n", "\\": "\\", '"': '"', "[": "[", "]": "]", "-": "-"}


@dataclass
class ParsedGrammar:
    """The parser's output: ``rules[id]`` and the name → id table (``symbol_ids``)."""

    rules: list[Rule] = field(default_factory=list)
    symbol_ids: dict[str, int] = field(default_factory=dict)
    tokens: list[tuple[int, str]] = field(default_factory=list)
    """``<name>`` tokens, as (position in the text, the text between the brackets)."""

    def name_of(self, rule_id: int) -> str:
        for name, value in self.symbol_ids.items():
            if value == rule_id:
                return name
        return f"#{rule_id}"


class _Parser:
    def __init__(self, text: str, token_id: TokenLookup | None) -> None:
        self.src = text
        self.token_id = token_id
        self.out = ParsedGrammar()
        self.num_elements = 0

    # ------------------------------------------------------------------ helpers

    def at(self, pos: int) -> str:
        return self.src[pos] if pos < len(self.src) else ""

    def fail(self, what: str, pos: int) -> GrammarError:
        line = self.src.count("\n", 0, pos) + 1
        column = pos - (self.src.rfind("\n", 0, pos) + 1) + 1
        return GrammarError(f"{what} at line {line}, column {column}")

    def space(self, pos: int, newline_ok: bool) -> int:
        while True:
            c = self.at(pos)
            if c == "#":
                while self.at(pos) not in ("", "\r", "\n"):
                    pos += 1
            elif c in (" ", "\t") or (newline_ok and c in ("\r", "\n")):
                pos += 1
            else:
                return pos

    def name(self, pos: int) -> int:
        end = pos
        while _is_word_char(self.at(end)):
            end += 1
        if end == pos:
            raise self.fail("expecting a rule name", pos)
        return end

    def integer(self, pos: int) -> tuple[int, int]:
        end = pos
        while _is_digit(self.at(end)):
            end += 1
        if end == pos:
            raise self.fail("expecting an integer", pos)
        return int(self.src[pos:end]), end

    def hex(self, pos: int, size: int) -> tuple[int, int]:
        value = 0
        end = pos + size
        while pos < end and self.at(pos) in _HEX:
            value = value * 16 + _HEX[self.src[pos]]
            pos += 1
        if pos != end:
            raise self.fail(f"expecting {size} hex digits", pos)
        return value, pos

    def char(self, pos: int) -> tuple[int, int]:
        c = self.at(pos)
        if c == "\\":
            e = self.at(pos + 1)
            if e == "x":
                return self.hex(pos + 2, 2)
            if e == "u":
                return self.hex(pos + 2, 4)
            if e == "U":
                return self.hex(pos + 2, 8)
            if e in _ESCAPES:
                return ord(_ESCAPES[e]), pos + 2
            raise self.fail("unknown escape", pos)
        if c:
            return ord(c), pos + 1
        raise self.fail("unexpected end of input", pos)

    def symbol_id(self, name: str) -> int:
        return self.out.symbol_ids.setdefault(name, len(self.out.symbol_ids))

    def new_symbol(self, base: str) -> int:
        next_id = len(self.out.symbol_ids)
        self.out.symbol_ids[f"{base}_{next_id}"] = next_id
        if len(self.out.symbol_ids) > MAX_RULES:
            raise GrammarError(f"the grammar has more than {MAX_RULES:,} rules once its repetitions are expanded")
        return next_id

    def add_rule(self, rule_id: int, rule: Rule) -> None:
        rules = self.out.rules
        if len(rules) <= rule_id:
            rules.extend([] for _ in range(rule_id + 1 - len(rules)))
        rules[rule_id] = rule
        self.grow(len(rule))

    def grow(self, n: int) -> None:
        self.num_elements += n
        if self.num_elements > MAX_ELEMENTS:
            raise GrammarError(f"the grammar expands to more than {MAX_ELEMENTS:,} elements")

    # ------------------------------------------------------------------ the grammar

    def parse(self) -> ParsedGrammar:
        pos = self.space(0, True)
        while self.at(pos):
            pos = self.rule(pos)
        for rule in self.out.rules:
            if not rule:
                raise GrammarError("the grammar refers to an undefined rule")
            for kind, value in rule:
                if kind == RULE_REF and (value >= len(self.out.rules) or not self.out.rules[value]):
                    raise GrammarError(f"undefined rule '{self.out.name_of(value)}'")
        return self.out

    def rule(self, pos: int) -> int:
        name_end = self.name(pos)
        name = self.src[pos:name_end]
        at = self.space(name_end, False)
        rule_id = self.symbol_id(name)
        if self.src[at:at + 3] != "::=":
            raise self.fail("expecting '::='", at)
        at = self.alternates(self.space(at + 3, True), name, rule_id, nested=False, depth=0)
        c = self.at(at)
        if c == "\r":
            at += 2 if self.at(at + 1) == "\n" else 1
        elif c == "\n":
            at += 1
        elif c:
            raise self.fail("expecting a newline or the end", at)
        return self.space(at, True)

    def alternates(self, pos: int, name: str, rule_id: int, *, nested: bool, depth: int) -> int:
        if depth > MAX_NESTING:
            raise self.fail(f"parentheses nested more than {MAX_NESTING} deep", pos)
        rule: Rule = []
        pos = self.sequence(pos, name, rule, nested, depth)
        while self.at(pos) == "|":
            rule.append((ALT, 0))
            pos = self.sequence(self.space(pos + 1, True), name, rule, nested, depth)
        rule.append((END, 0))
        self.add_rule(rule_id, rule)
        return pos

    def sequence(self, pos: int, name: str, rule: Rule, nested: bool, depth: int) -> int:
        seq = _Sequence(self, name, rule)
        while True:
            c = self.at(pos)
            if c == '"':
                pos = self.literal(pos + 1, seq, nested)
            elif c == "[":
                pos = self.char_class(pos + 1, seq, nested)
            elif c in ("<", "!"):
                pos = self.token(pos, seq, nested)
            elif c and _is_word_char(c):
                end = self.name(pos)
                seq.start_symbol()
                rule.append((RULE_REF, self.symbol_id(self.src[pos:end])))
                pos = self.space(end, nested)
            elif c == "(":
                pos = self.group(pos, name, seq, nested, depth)
            elif c == ".":
                seq.start_symbol()
                rule.append((CHAR_ANY, 0))
                pos = self.space(pos + 1, nested)
            elif c in ("*", "+", "?"):
                seq.repeat(pos, *{"*": (0, None), "+": (1, None), "?": (0, 1)}[c])
                pos = self.space(pos + 1, nested)
            elif c == "{":
                pos = self.braces(self.space(pos + 1, nested), seq, nested)
            else:
                return pos

    def literal(self, pos: int, seq: _Sequence, nested: bool) -> int:
        seq.start_symbol()
        while self.at(pos) != '"':
            if not self.at(pos):
                raise self.fail("unexpected end of input in a string", pos)
            value, pos = self.char(pos)
            seq.rule.append((CHAR, value))
        return self.space(pos + 1, nested)

    def char_class(self, pos: int, seq: _Sequence, nested: bool) -> int:
        start_type = CHAR
        if self.at(pos) == "^":
            pos += 1
            start_type = CHAR_NOT
        seq.start_symbol()
        first = len(seq.rule)
        while self.at(pos) != "]":
            if not self.at(pos):
                raise self.fail("unexpected end of input in a character class", pos)
            value, pos = self.char(pos)
            seq.rule.append((CHAR_ALT if len(seq.rule) > first else start_type, value))
            if self.at(pos) == "-" and self.at(pos + 1) != "]":
                if not self.at(pos + 1):
                    raise self.fail("unexpected end of input in a character class", pos)
                upper, pos = self.char(pos + 1)
                seq.rule.append((CHAR_RNG_UPPER, upper))
        return self.space(pos + 1, nested)

    def token(self, pos: int, seq: _Sequence, nested: bool) -> int:
        kind = TOKEN
        if self.at(pos) == "!":
            kind = TOKEN_NOT
            pos += 1
        if self.at(pos) != "<":
            raise self.fail("expecting '<'", pos)
        start = pos
        pos += 1
        if self.at(pos) == "[":
            value, pos = self.integer(pos + 1)
            if value > 0xFFFFFFFF:
                raise self.fail("token id too big", pos)
            if self.at(pos) != "]":
                raise self.fail("expecting ']'", pos)
            if self.at(pos + 1) != ">":
                raise self.fail("expecting '>'", pos + 1)
            pos += 2
        else:
            end = self.src.find(">", pos)
            if end < 0:
                raise self.fail("expecting '>'", len(self.src))
            text = self.src[start:end + 1]
            named = self.token_id(text) if self.token_id is not None else None
            if named is None:
                raise self.fail(f"{text} is not a single token of this model", start)
            value = named
            self.out.tokens.append((start, text))
            pos = end + 1
        seq.start_symbol()
        seq.rule.append((kind, value))
        return self.space(pos, nested)

    def group(self, pos: int, name: str, seq: _Sequence, nested: bool, depth: int) -> int:
        pos = self.space(pos + 1, True)
        num_before = len(self.out.symbol_ids)
        sub_id = self.new_symbol(name)
        pos = self.alternates(pos, name, sub_id, nested=True, depth=depth + 1)
        seq.start_symbol(max(1, len(self.out.symbol_ids) - num_before))
        seq.rule.append((RULE_REF, sub_id))
        if self.at(pos) != ")":
            raise self.fail("expecting ')'", pos)
        return self.space(pos + 1, nested)

    def braces(self, pos: int, seq: _Sequence, nested: bool) -> int:
        if not _is_digit(self.at(pos)):
            raise self.fail("expecting an integer", pos)
        low, pos = self.integer(pos)
        pos = self.space(pos, nested)
        high: int | None = None
        if self.at(pos) == "}":
            high = low
            pos = self.space(pos + 1, nested)
        elif self.at(pos) == ",":
            pos = self.space(pos + 1, nested)
            if _is_digit(self.at(pos)):
                high, pos = self.integer(pos)
                pos = self.space(pos, nested)
            if self.at(pos) != "}":
                raise self.fail("expecting '}'", pos)
            pos = self.space(pos + 1, nested)
        else:
            raise self.fail("expecting ','", pos)
        if low >= 2**64 or (high is not None and high >= 2**64):
            raise self.fail("repetition count out of range", pos)  # std::stoull throws
        if high is not None and high < low:
            # NOTE: llama.cpp computes max - min in uint64 and loops ~2**64 times (found by this port).
            raise self.fail(f"the repetition {{{low},{high}}} has its maximum below its minimum", pos)
        if low > MAX_REPETITION_THRESHOLD:
            raise self.fail(f"more than {MAX_REPETITION_THRESHOLD} repetitions", pos)
        if high is not None and high > MAX_REPETITION_THRESHOLD:
            high = None
        seq.repeat(pos, low, high)
        return pos



class _Sequence:
    """One alternative being parsed: where its last symbol starts, and how many rules that
    symbol stands for (llama.cpp's ``last_sym_start`` and ``n_prev_rules``)."""

    __slots__ = ("last_start", "name", "num_prev_rules", "parser", "rule")

    def __init__(self, parser: _Parser, name: str, rule: Rule) -> None:
        self.parser = parser
        self.name = name
        self.rule = rule
        self.last_start = len(rule)
        self.num_prev_rules = 1

    def start_symbol(self, num_rules: int = 1) -> None:
        self.last_start = len(self.rule)
        self.num_prev_rules = num_rules

    def repeat(self, pos: int, low: int, high: int | None) -> None:
        """``S{low,high}`` → ``S`` × low, then ``high - low`` optional copies (or one
        recursive ``S'`` when unbounded), exactly as llama.cpp rewrites it."""
        rule, parser = self.rule, self.parser
        if self.last_start == len(rule):
            raise parser.fail("expecting an item before */+/?/{", pos)
        prev = rule[self.last_start:]
        total = high if high is not None and high > 0 else (low if low > 0 else 1)
        if self.num_prev_rules * total > MAX_REPETITION_THRESHOLD:
            raise parser.fail("the repetitions multiply past llama.cpp's limit", pos)
        num_opt = 1 if high is None else high - low
        parser.grow(len(prev) * max(low - 1, 0) + (len(prev) + 3) * num_opt)
        if low == 0:
            del rule[self.last_start:]
        else:
            rule.extend(prev * (low - 1))
        last_rec = 0
        for i in range(num_opt):
            rec_id = parser.new_symbol(self.name)
            rec: Rule = list(prev)
            if i > 0 or high is None:
                rec.append((RULE_REF, rec_id if high is None else last_rec))
            rec += [(ALT, 0), (END, 0)]
            parser.add_rule(rec_id, rec)
            last_rec = rec_id
        if num_opt > 0:
            rule.append((RULE_REF, last_rec))
        self.num_prev_rules *= total


def parse(text: str, token_id: TokenLookup | None = None) -> ParsedGrammar:
    """The rules llama.cpp would build from ``text``; ``GrammarError`` where its parser fails
    (or where a bound above is passed). ``token_id(text)`` resolves a ``<name>`` token to its
    id, or None when it is not exactly one token (without it, ``<name>`` tokens are refused).
    """
    return _Parser(text, token_id).parse()
