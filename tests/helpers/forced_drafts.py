"""Speculation with its policy taken out: every decode row drafts as much as it may.

The scheduler normally drafts only where the cost model says it pays, which on short chat
replies may be never. Tests of the verify path (exactness, cells left behind, saves) install
``always_draft`` so that every decoding seq carries ``draft_max`` draft rows every tick: the
prompt-lookup proposal when there is one, else the seq's own last tokens, which the model
nearly always rejects. So both accepted drafts and rejected tails happen all the time.
``ReplyOracle`` makes acceptance certain: a second run of the same greedy prompt is drafted
with the first run's own tokens.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from app.engine.backend import DecodeOp
from app.engine.request import Request
from app.engine.speculation.lookup import NgramDrafter, SeqSpec
from app.engine.speculation.speculator import Speculator


def always_draft(monkeypatch: pytest.MonkeyPatch) -> None:
    def choose(
        self: Speculator, plan: Any, decodes: Sequence[DecodeOp], reqs: Mapping[int, Request],
        specs: Mapping[int, SeqSpec], budget: int,
    ) -> dict[int, int]:  # fmt: skip
        out: dict[int, int] = {}
        for op in decodes:
            if op.seq_id in specs:
                req = reqs[op.seq_id]
                k = min(self._draft_max(req), self._room(req, plan_time=True), budget - sum(out.values()))
                if k > 0:
                    out[op.seq_id] = k
        return out

    lookup = NgramDrafter.propose

    def propose(self: NgramDrafter, k: int) -> tuple[int, ...]:
        return lookup(self, k) or tuple(self._tokens[-k:])

    monkeypatch.setattr(Speculator, "_choose", choose)
    monkeypatch.setattr(NgramDrafter, "propose", propose)


class ReplyOracle:
    """Drafts that are the reply itself (install it after ``always_draft``). The first run
    drafts as ``always_draft`` does (the tiny model rejects nearly all of it) and remembers the longest token list it saw (prompt
    and reply); once ``known``, a sequence that holds a head of those tokens is offered what
    followed it, which a greedy reply of the same prompt accepts."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.seen: list[int] = []
        self.known = False
        forced = NgramDrafter.propose  # always_draft's
        oracle = self

        def propose(drafter: NgramDrafter, k: int) -> tuple[int, ...]:
            tokens = drafter._tokens  # noqa: SLF001 (what the sequence holds, from _start)
            if not oracle.known:
                if len(tokens) > len(oracle.seen):
                    oracle.seen = list(tokens)
                return forced(drafter, k)
            n = len(tokens)
            if drafter._start == 0 and oracle.seen[:n] == tokens:  # noqa: SLF001
                return tuple(oracle.seen[n : n + k])
            return ()

        monkeypatch.setattr(NgramDrafter, "propose", propose)
