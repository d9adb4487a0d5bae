"""Prompt lookup drafts and the acceptance rule (the package doc says how a draft travels):
``verify`` accepts a draft while the sampled token equals it; ``NgramDrafter`` proposes the
tokens that followed the latest earlier occurrence of the context's last few; ``SeqSpec``
keeps a sequence's decayed evidence of how often its drafts are accepted."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from app.engine.backend import Backend, BackendInfo
from app.engine.request import Request

NGRAM_MAX = 4
NGRAM_MIN = 2
"""Prompt lookup matches the context's last 4, else 3, else 2 tokens (one token matches
everywhere and predicts little)."""
LOOKUP_WINDOW = 8192
"""A new request's drafter indexes at most its context's last this many tokens."""
PRIOR_ACCEPTANCE = 0.5
PRIOR_TRIES = 2.0
"""A new sequence's acceptance before any evidence: as if 1 of 2 draft tokens was accepted."""
PRIOR_CONTINUE = 0.8
"""The same for a draft token that follows an accepted one (``SeqSpec``)."""
DECAY_VERIFY = 0.8
"""Each verify multiplies the older evidence by this (the last ~5 verifies count)."""
DECAY_IDLE = 0.97
"""Each tick a sequence does not draft multiplies its evidence by this, so it drifts back
to the prior and a sequence that stopped drafting tries again (~every 30-70 tokens)."""


def verify(drafted: Sequence[int], sample_row: Callable[[int], int]) -> tuple[tuple[int, ...], int]:
    """The acceptance rule: sample row 0, 1, ... (row i follows i drafts) while each sample
    equals the next draft. Returns (the drafts accepted, the token sampled after them)."""
    accepted: list[int] = []
    token = sample_row(0)
    for i, draft in enumerate(drafted):
        if token != draft:
            break
        accepted.append(draft)
        token = sample_row(i + 1)
    return tuple(accepted), token


def can_drop_tail(info: BackendInfo) -> bool:
    """Can rejected drafts be dropped so that the seq is exactly as if it never drafted? Only
    for attention memory (``MemoryCaps``: any tail dropped, any head cut). A recurrent or
    hybrid state has absorbed every token; a sliding-window cache may have let go of the
    cells the next token attends to while it held the drafts. Speculation is off for those."""
    return info.memory.trim_tail and info.memory.cut_states


def drop_drafts(backend: Backend, req: Request) -> None:
    """Between ticks: drop the request's pending drafts from its seq, so the seq holds exactly
    its committed tokens (before a save, or when the request ends)."""
    if req.drafted:
        backend.seq_rm(req.seq_id, len(req.context_tokens))
        req.drafted = ()


class NgramDrafter:
    """Prompt lookup over one sequence's tokens: the tokens that followed the latest earlier
    occurrence of its last ``NGRAM_MAX`` .. ``NGRAM_MIN`` tokens.

    Incremental: each appended token updates a map from every n-gram ending there to where it
    last ended, so a proposal costs a few dict lookups whatever the context length.
    NOTE: indexing takes ~2-6 µs a token (4,000 tokens: 8 ms quiet, 25 ms on a loaded
    2-core machine), once, at the request's first draft; so a long context is indexed from
    its last ``LOOKUP_WINDOW`` tokens only (what a reply repeats is nearly always recent).
    """

    def __init__(self) -> None:
        self._start = -1
        """Where in the sequence the indexed tokens start (-1: nothing indexed yet)."""
        self._tokens: list[int] = []
        self._last_end: dict[tuple[int, ...], int] = {}
        self._match_end: dict[int, int] = {}
        """n → where the previous occurrence of the current last n tokens ended."""

    def sync(self, tokens: Sequence[int]) -> None:
        """Catch up with the sequence's tokens (which only ever grow)."""
        if self._start < 0:
            self._start = max(0, len(tokens) - LOOKUP_WINDOW)
        for token in tokens[self._start + len(self._tokens) :]:
            self._push(token)

    def _push(self, token: int) -> None:
        tokens, last_end, match_end = self._tokens, self._last_end, self._match_end
        tokens.append(token)
        end = len(tokens)
        for n in range(NGRAM_MIN, min(NGRAM_MAX, end) + 1):
            key = tuple(tokens[end - n : end])
            previous = last_end.get(key)
            last_end[key] = end
            if previous is None:
                match_end.pop(n, None)
            else:
                match_end[n] = previous

    def propose(self, k: int) -> tuple[int, ...]:
        """Up to ``k`` tokens that followed the longest matched suffix; () when none matched."""
        for n in range(NGRAM_MAX, NGRAM_MIN - 1, -1):
            end = self._match_end.get(n)
            if end is not None:
                return tuple(self._tokens[end : end + k])
        return ()


@dataclass(slots=True)
class SeqSpec:
    """One request's speculation: its drafter and the evidence of how well it drafts.

    Two rates, because a draft token's fate depends on whether the one before it was
    accepted: the *first* token of a draft after a rejection (or after a tick without a
    draft) starts a guess, while a token that follows an accepted one — later tokens of the
    same draft, and the first of the next draft after one accepted whole — continues a copy
    the model is making. B12's rewrites: once a copy runs, ~9 in 10 continue; a fresh match
    ~1 in 2. One rate for both made a copy ramp its drafts up over ~6 verifies and cut them
    back after each miss."""

    drafter: NgramDrafter = field(default_factory=NgramDrafter)
    hits: float = 0.0
    tries: float = 0.0
    """Evidence for the first token of a draft that starts a guess."""
    run_hits: float = 0.0
    run_tries: float = 0.0
    """Evidence for a draft token that follows an accepted one."""
    prior: float = PRIOR_ACCEPTANCE
    """The acceptance before any evidence (a draft model's is higher than prompt lookup's)."""
    run_prior: float = PRIOR_CONTINUE
    in_run: bool = False
    """The last verify accepted its whole draft: the next draft continues a copy."""

    @property
    def acceptance(self) -> float:
        """Estimated probability that the next draft's first token is accepted (hits / tries,
        a try being a draft token the sampler reached)."""
        if self.in_run:
            return self.continuation
        return (self.hits + self.prior * PRIOR_TRIES) / (self.tries + PRIOR_TRIES)

    @property
    def continuation(self) -> float:
        """Estimated probability that a draft token is accepted given the one before it was."""
        return (self.run_hits + self.run_prior * PRIOR_TRIES) / (self.run_tries + PRIOR_TRIES)

    def record(self, num_drafted: int, num_accepted: int) -> None:
        """A verify of ``num_drafted`` tokens accepted the first ``num_accepted``."""
        reached = num_accepted + (num_accepted < num_drafted)  # tokens the sampler compared
        first = 0 if self.in_run else 1
        self.hits = DECAY_VERIFY * self.hits + (min(num_accepted, 1) if first else 0)
        self.tries = DECAY_VERIFY * self.tries + (min(reached, 1) if first else 0)
        self.run_hits = DECAY_VERIFY * self.run_hits + num_accepted - min(num_accepted, first)
        self.run_tries = DECAY_VERIFY * self.run_tries + reached - min(reached, first)
        self.in_run = num_drafted > 0 and num_accepted == num_drafted

    def pause(self) -> None:
        """A tick without a draft: the next draft starts a guess."""
        self.in_run = False

    def idle(self) -> None:
        self.hits *= DECAY_IDLE
        self.tries *= DECAY_IDLE
        self.run_hits *= DECAY_IDLE
        self.run_tries *= DECAY_IDLE
