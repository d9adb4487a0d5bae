"""The one check every grammar passes before llama.cpp sees it (``check_grammar``).

llama.cpp refuses a grammar it cannot *parse*, but it **aborts the process** on one it
parses and cannot *follow*: when sampling reaches a state in which no token is allowed,
every logit is −inf, the sampler picks a token the grammar refuses, and accepting it ends in
``GGML_ABORT`` (an end-of-generation token) or a C++ exception thrown through the C API
(``Unexpected empty grammar stack``). ``root ::= [b-a]``, ``root ::= "\\x00"``,
``root ::= <[0]>`` (token 0 is SmolLM2's end of text), ``root ::= <[99999]>`` and
``root ::= [\\U00200000]`` each killed the process on the tiny model (exit −6).

A grammar is accepted here only when no such state can be reached: after
``gbnf.parse`` (llama.cpp's parser, ported), every terminal — each character class, literal
character, ``.`` and ``<token>`` — must admit at least one token of *this* vocabulary on its
own. Then whatever stack tops the sampler meets, one token is always allowed, and an empty
stack always allows end-of-generation. A class admits a token when a token's text is a single
code point inside it, or when it can be spelled byte by byte (a byte token leading a UTF-8
sequence whose code points meet the class, with every continuation byte a token too — as in
byte-level BPE vocabularies). llama.cpp's own refusals are checked too (an undefined rule,
no ``root``, left recursion), with their bounded cost: its left-recursion search walks every
path and its first stack expansion can multiply, so both are counted here and refused past
a budget instead of hanging the scheduler thread. Left recursion is judged with true
nullability (llama.cpp's test misses ``root ::= a root "x"`` when ``a`` can only *become*
empty, and then loops while expanding).

Everything refused is ``InvalidGrammar`` (code ``invalid_request``) naming the problem.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict

from app.engine.errors import InvalidGrammar
from app.engine.grammar import gbnf
from app.engine.grammar.gbnf import (
    ALT,
    CHAR,
    CHAR_ALT,
    CHAR_ANY,
    CHAR_NOT,
    CHAR_RNG_UPPER,
    END,
    RULE_REF,
    TOKEN,
    TOKEN_NOT,
)
from app.engine.grammar.spellable import (
    ANY_VOCAB,
    GrammarVocab,
    Interval,
    Spellable,
    class_ok,
    spellable,
)

MAX_GRAMMAR_CHARS = 1024 * 1024
"""Engine-side cap on a grammar's text (the server's is 64 KiB for a user grammar)."""

MAX_START_STACKS = 100_000
"""Stacks llama.cpp's first expansion may build (it runs when the sampler is made)."""

MAX_SEARCH_COST = 10_000_000
"""Elements llama.cpp's left-recursion search may read (a few ms of native time)."""

class _Memo:
    """Per vocabulary: what its tokens can spell, and the grammars already accepted."""

    __slots__ = ("accepted", "facts")

    def __init__(self, facts: Spellable) -> None:
        self.facts = facts
        self.accepted: OrderedDict[tuple[str, str], None] = OrderedDict()


def _memo(vocab: GrammarVocab) -> _Memo:
    with _cache_lock:
        memo = _cache.get(vocab)
    if memo is None:
        memo = _Memo(spellable(vocab))
        with _cache_lock:
            memo = _cache.setdefault(vocab, memo)
    return memo


_cache: weakref.WeakKeyDictionary[GrammarVocab, _Memo] = weakref.WeakKeyDictionary()
_cache_lock = threading.Lock()
MEMO_SIZE = 64
"""Accepted grammars remembered per vocabulary (a server sends the same schema grammar again)."""


# --------------------------------------------------------------------------- the check


def check_grammar(text: object, vocab: GrammarVocab | None, root: str = "root") -> str:
    """``text`` if llama.cpp can parse *and follow* it with ``vocab``, else ``InvalidGrammar``."""
    if not isinstance(text, str):
        raise InvalidGrammar(f"grammar must be a string, got {type(text).__name__}")
    if "\x00" in text:
        raise InvalidGrammar("the grammar contains a NUL character")
    if len(text) > MAX_GRAMMAR_CHARS:
        raise InvalidGrammar(f"the grammar is longer than {MAX_GRAMMAR_CHARS:,} characters")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidGrammar("the grammar is not valid Unicode (a lone surrogate)") from None
    memo = _memo(vocab) if vocab is not None else None
    if memo is not None:
        with _cache_lock:
            if (root, text) in memo.accepted:
                memo.accepted.move_to_end((root, text))
                return text
    _check(text, vocab, root, memo.facts if memo is not None else ANY_VOCAB)
    if memo is not None:
        with _cache_lock:
            memo.accepted[(root, text)] = None
            if len(memo.accepted) > MEMO_SIZE:
                memo.accepted.popitem(last=False)
    return text


def _check(text: str, vocab: GrammarVocab | None, root: str, facts: Spellable) -> None:
    try:
        parsed = gbnf.parse(text, _token_lookup(vocab))
    except gbnf.GrammarError as exc:
        raise InvalidGrammar(f"the grammar does not parse: {exc}") from None
    except RecursionError:
        raise InvalidGrammar("the grammar nests too deeply") from None
    if not parsed.rules:
        raise InvalidGrammar("the grammar is empty")
    if root not in parsed.symbol_ids:
        raise InvalidGrammar(f"the grammar has no '{root}' rule")
    for rule_id, rule in enumerate(parsed.rules):
        _check_terminals(parsed, rule_id, rule, facts)
    _check_left_recursion(parsed)
    _check_start(parsed, parsed.symbol_ids[root])


def _token_lookup(vocab: GrammarVocab | None) -> gbnf.TokenLookup | None:
    if vocab is None:
        return None

    def lookup(text: str) -> int | None:
        ids = vocab.tokenize(text, add_special=False, parse_special=True)
        return ids[0] if len(ids) == 1 else None

    return lookup


def _check_terminals(parsed: gbnf.ParsedGrammar, rule_id: int, rule: gbnf.Rule, facts: Spellable) -> None:
    i = 0
    while i < len(rule):
        kind, value = rule[i]
        if kind in (CHAR, CHAR_NOT):
            ranges, i = _char_class(rule, i)
            if any(lo > hi for lo, hi in ranges):
                lo, hi = next(r for r in ranges if r[0] > r[1])
                raise InvalidGrammar(f"rule '{parsed.name_of(rule_id)}': the range {_show(lo)}-{_show(hi)} is empty "
                                     "(its first character comes after its last)")
            if not class_ok(kind == CHAR_NOT, ranges, facts):
                what = "character" if len(ranges) == 1 and ranges[0][0] == ranges[0][1] and kind == CHAR else "class"
                raise InvalidGrammar(f"rule '{parsed.name_of(rule_id)}': no token of this model can produce the "
                                     f"{what} {_show_class(kind == CHAR_NOT, ranges)}")
            continue
        if kind == TOKEN and not _token_ok(value, facts):
            raise InvalidGrammar(f"rule '{parsed.name_of(rule_id)}': token <[{value}]> can never be generated "
                                 f"(outside the vocabulary, an end-of-generation token, or a token with no text)")
        if kind == TOKEN_NOT and facts.sampleable is not None and len(facts.sampleable - {value}) == 0:
            raise InvalidGrammar(f"rule '{parsed.name_of(rule_id)}': no token other than <[{value}]> can be generated")
        if kind == CHAR_ANY and not facts.singles and not facts.byte_spans:
            raise InvalidGrammar("no token of this model can produce a character")
        i += 1


def _char_class(rule: gbnf.Rule, i: int) -> tuple[list[Interval], int]:
    """The ranges of the class starting at ``rule[i]`` and the index after it."""
    ranges: list[Interval] = []
    while True:
        lo = rule[i][1]
        if rule[i + 1][0] == CHAR_RNG_UPPER:
            ranges.append((lo, rule[i + 1][1]))
            i += 2
        else:
            ranges.append((lo, lo))
            i += 1
        if rule[i][0] != CHAR_ALT:
            return ranges, i


def _token_ok(token: int, facts: Spellable) -> bool:
    if not 0 <= token < facts.n_vocab:
        return False
    return facts.sampleable is None or token in facts.sampleable


def _show(cp: int) -> str:
    return chr(cp) if 0x20 < cp < 0x7F and chr(cp) not in "\\]-^" else f"\\U{cp:08X}" if cp > 0xFFFF else f"\\u{cp:04X}"


def _show_class(negated: bool, ranges: list[Interval]) -> str:
    body = "".join(_show(a) if a == b else f"{_show(a)}-{_show(b)}" for a, b in ranges)
    return f"[{'^' if negated else ''}{body}]"


def _alternatives(rule: gbnf.Rule) -> list[gbnf.Rule]:
    out: list[gbnf.Rule] = [[]]
    for elem in rule:
        if elem[0] == ALT:
            out.append([])
        elif elem[0] != END:
            out[-1].append(elem)
    return out


def _left_edges(rules: list[gbnf.Rule], empty: list[bool]) -> list[list[int]]:
    """For each rule, the rules named at a left edge: first in an alternative, or after
    elements that are all rules in ``empty``; one entry per occurrence."""
    edges: list[list[int]] = []
    for rule in rules:
        out: list[int] = []
        for alt in _alternatives(rule):
            for kind, value in alt:
                if kind != RULE_REF:
                    break
                out.append(value)
                if not empty[value]:
                    break
        edges.append(out)
    return edges


def _nullable(rules: list[gbnf.Rule]) -> list[bool]:
    """Rules that can match the empty string (a fixed point over the rules)."""
    alts = [_alternatives(rule) for rule in rules]
    nullable = [False] * len(rules)
    changed = True
    while changed:
        changed = False
        for i, rule_alts in enumerate(alts):
            if not nullable[i] and any(all(k == RULE_REF and nullable[v] for k, v in alt) for alt in rule_alts):
                nullable[i] = changed = True
    return nullable


def _check_left_recursion(parsed: gbnf.ParsedGrammar) -> None:
    """Refuse left recursion, counting a rule that can match nothing as transparent.

    NOTE: llama.cpp's own test treats a rule as possibly empty only when one of its
    alternatives is literally empty, so ``root ::= a root "x"`` with ``a ::= b``,
    ``b ::= "" | "y"`` passes it, and the sampler's first stack expansion then grows without
    end. Its search also revisits shared rules on every path (2**depth steps for a ladder of
    rules that each name the next twice), so its cost is computed here and bounded.
    """
    rules = parsed.rules
    edges = _left_edges(rules, _nullable(rules))
    cycle = _find_cycle(edges)
    if cycle is not None:
        raise InvalidGrammar(f"the grammar is left-recursive at rule '{parsed.name_of(cycle)}' "
                             "(it can reach itself before reading a character; llama.cpp cannot follow that)")
    direct = _left_edges(rules, [any(not alt for alt in _alternatives(rule)) for rule in rules])
    if _search_cost(rules, direct) > MAX_SEARCH_COST:
        raise InvalidGrammar("the grammar's rules name each other in too many ways for llama.cpp to check "
                             f"(more than {MAX_SEARCH_COST:,} steps)")


def _find_cycle(edges: list[list[int]]) -> int | None:
    """A rule on a cycle of ``edges``, or None (iterative depth-first search)."""
    state = [0] * len(edges)  # 0 new, 1 on the current path, 2 done
    for start in range(len(edges)):
        if state[start]:
            continue
        path: list[tuple[int, int]] = [(start, 0)]
        state[start] = 1
        while path:
            node, i = path[-1]
            if i == len(edges[node]):
                state[node] = 2
                path.pop()
                continue
            path[-1] = (node, i + 1)
            child = edges[node][i]
            if state[child] == 1:
                return child
            if state[child] == 0:
                state[child] = 1
                path.append((child, 0))
    return None


def _search_cost(rules: list[gbnf.Rule], edges: list[list[int]]) -> int:
    """Elements llama.cpp's left-recursion search reads (no memo inside one search; each top
    level search marks what it reached). ``edges`` is acyclic here."""
    cost: list[int | None] = [None] * len(rules)
    for start in range(len(rules)):
        todo = [start]
        while todo:
            node = todo[-1]
            if cost[node] is not None:
                todo.pop()
                continue
            missing = [c for c in edges[node] if cost[c] is None]
            if missing:
                todo.extend(missing)
                continue
            cost[node] = min(len(rules[node]) + sum(cost[c] or 0 for c in edges[node]), 2**62)
            todo.pop()
    total, visited = 0, [False] * len(rules)
    for start in range(len(rules)):
        if visited[start]:
            continue
        total += cost[start] or 0
        reach = [start]
        while reach:
            node = reach.pop()
            if not visited[node]:
                visited[node] = True
                reach.extend(edges[node])
    return total


def _check_start(parsed: gbnf.ParsedGrammar, root_id: int) -> None:
    """Replay llama.cpp's first ``llama_grammar_advance_stack`` (run when the sampler is made)
    and refuse a grammar whose start fans out into more stacks than the budget."""
    rules = parsed.rules
    todo: list[tuple[tuple[int, int], ...]] = []
    pos = 0
    rule = rules[root_id]
    while True:
        todo.append(((root_id, pos),) if rule[pos][0] not in (ALT, END) else ())
        while rule[pos][0] not in (ALT, END):
            pos += 1
        if rule[pos][0] != ALT:
            break
        pos += 1
    seen: set[tuple[tuple[int, int], ...]] = set()
    size = 0
    while todo:
        stack = todo.pop()
        if stack in seen:
            continue
        seen.add(stack)
        size += len(stack)
        if len(seen) > MAX_START_STACKS or size > 20 * MAX_START_STACKS:
            raise InvalidGrammar(f"the grammar starts with more than {MAX_START_STACKS:,} ways to read its "
                                 "first character (too ambiguous)")
        if not stack:
            continue
        rule_id, at = stack[-1]
        kind, value = rules[rule_id][at]
        if kind != RULE_REF:
            continue
        rest = stack[:-1]
        if rules[rule_id][at + 1][0] not in (ALT, END):
            rest = (*rest, (rule_id, at + 1))
        sub = 0
        target = rules[value]
        while True:
            todo.append((*rest, (value, sub)) if target[sub][0] not in (ALT, END) else rest)
            while target[sub][0] not in (ALT, END):
                sub += 1
            if target[sub][0] != ALT:
                break
            sub += 1
