"""What a vocabulary's tokens can spell at a grammar position (``spellable``), and whether a
character class admits any of it (``class_ok``): the facts ``app.engine.grammar.check``
proves a grammar followable with. Code points are kept as sorted disjoint intervals."""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

Interval = tuple[int, int]


class GrammarVocab(Protocol):
    """What the check reads from a model's vocabulary (``llama_vocab.Vocab`` fits)."""

    @property
    def n_vocab(self) -> int: ...

    def token_piece(self, token: int) -> bytes: ...

    def is_eog(self, token: int) -> bool: ...

    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = True) -> list[int]: ...


# --------------------------------------------------------------------------- what tokens can spell


@dataclass(frozen=True, slots=True)
class Spellable:
    """The code points a vocabulary's tokens can put at a grammar position, as sorted
    disjoint intervals, and which token ids a ``<token>`` element can ever be sampled as."""

    singles: tuple[Interval, ...]
    """Code points some (non end-of-generation) token is exactly."""
    byte_spans: tuple[Interval, ...]
    """Code point spans reachable byte by byte (one span per lead-byte token)."""
    sampleable: frozenset[int] | None
    """Ids a token element can match (None: every id below ``n_vocab``)."""
    n_vocab: int


ANY_VOCAB = Spellable(singles=((1, 0x10FFFF),), byte_spans=(), sampleable=None, n_vocab=2**32)
"""Used without a vocabulary (a stub backend): any Unicode scalar value, any token id."""


def _decode(piece: bytes) -> tuple[list[int], int]:
    """llama.cpp's ``decode_utf8`` (llama-grammar.cpp): code points and the bytes still owed."""
    lookup = (1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 2, 2, 3, 4)
    out: list[int] = []
    pos, n_remain, value = 0, 0, 0
    while pos < len(piece) and piece[pos] != 0:
        n_remain = lookup[piece[pos] >> 4] - 1
        if n_remain < 0:
            return [], -1
        value = piece[pos] & ((1 << (7 - n_remain)) - 1)
        pos += 1
        while pos < len(piece) and piece[pos] != 0 and n_remain > 0:
            value = (value << 6) + (piece[pos] & 0x3F)
            pos += 1
            n_remain -= 1
        if n_remain == 0:
            out.append(value)
    return out, n_remain


def _lead_span(byte: int) -> Interval | None:
    """Code points a lead byte can still become (``llama_grammar_match_partial_char``)."""
    cps, n_remain = _decode(bytes([byte]))
    if cps or n_remain <= 0:
        return None
    value = byte & ((1 << (7 - n_remain)) - 1)
    if n_remain == 1 and value < 2:
        return None  # overlong: refused by llama.cpp
    low = value << (6 * n_remain)
    high = low | ((1 << (6 * n_remain)) - 1)
    if low == 0:
        low = {2: 1 << 11, 3: 1 << 16}.get(n_remain, low)
    return low, high


def _intervals(points: Iterable[int]) -> tuple[Interval, ...]:
    out: list[list[int]] = []
    for p in sorted(set(points)):
        if out and p == out[-1][1] + 1:
            out[-1][1] = p
        else:
            out.append([p, p])
    return tuple((a, b) for a, b in out)


def spellable(vocab: GrammarVocab) -> Spellable:
    """Read every token's text (NOTE: 0.4 s for SmolLM2's 49,152 tokens on a loaded 2-core
    machine; ``check_grammar`` does it once per vocabulary)."""
    singles: set[int] = set()
    bytes_: set[int] = set()
    sampleable: set[int] = set()
    for token in range(vocab.n_vocab):
        if vocab.is_eog(token):
            continue
        piece = vocab.token_piece(token)
        if not piece or piece[0] == 0:
            continue  # llama.cpp sets such a token's logit to -inf under a grammar
        sampleable.add(token)
        if len(piece) == 1:
            bytes_.add(piece[0])
        cps, n_remain = _decode(piece)
        if len(cps) == 1 and n_remain == 0 and cps[0] != 0:
            singles.add(cps[0])
    spans: list[Interval] = []
    if all(b in bytes_ for b in range(0x80, 0xC0)):  # every continuation byte is a token
        spans = [s for b in bytes_ if (s := _lead_span(b)) is not None]
    return Spellable(_intervals(singles), tuple(sorted(spans)), frozenset(sampleable), vocab.n_vocab)


def _meets(spans: tuple[Interval, ...], lo: int, hi: int) -> bool:
    """Some interval of the sorted, disjoint ``spans`` meets ``[lo, hi]``."""
    i = bisect.bisect_right(spans, (hi, 2**63)) - 1
    while i >= 0 and spans[i][1] >= lo:
        if spans[i][0] <= hi:
            return True
        i -= 1
    return False


def _uncovered(spans: tuple[Interval, ...], cover: list[Interval]) -> bool:
    """Some point of ``spans`` (excluding 0) lies outside every interval of ``cover``."""
    merged = _intervals_merge(cover)
    for lo, hi in spans:
        point = max(lo, 1)
        for a, b in merged:
            if b < point:
                continue
            if a > point:
                break
            point = b + 1
        if point <= hi:
            return True
    return False


def _intervals_merge(intervals: list[Interval]) -> list[Interval]:
    out: list[list[int]] = []
    for a, b in sorted(intervals):
        if out and a <= out[-1][1] + 1:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def class_ok(negated: bool, ranges: list[Interval], facts: Spellable) -> bool:
    if negated:
        if _uncovered(facts.singles, ranges):
            return True
        return any(not any(a <= hi and lo <= b for a, b in ranges) for lo, hi in facts.byte_spans)
    return any(_meets(facts.singles, lo, hi) or _meets(facts.byte_spans, lo, hi) for lo, hi in ranges)
