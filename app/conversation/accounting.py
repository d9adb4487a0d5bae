"""One hit accounting for every place that shows it (status bar, savings tab, dashboard).

A request that started from KV computed before — restored from the cache (``hits_exact``,
``hits_resume``, ``hits_longest_prefix``), still held by its conversation's sequence
(``hits_sticky``: sticky turns and ``continue_session`` continuations), or shared with
another live sequence — is a hit; one that read its whole prompt is a miss. Every counter
named ``hits_*`` counts, so a new reuse path the engine adds is a hit here without an edit.

A request that reused 24 of its 768 prompt tokens is a hit all the same, so beside the
share of requests every place also shows the share of prompt *tokens* that were reused
instead of read (``prompt_tokens_reused`` / ``prompt_tokens``): "tokens reused: 92 %".

The totals are the cache store's *lifetime* counters: this process's plus those saved in
the cache's SQLite database when earlier sessions closed, so the figures survive restarts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class ReuseKind:
    """Where a request's reused tokens came from, named the same in every place: the Cache
    dashboard's numbers, the line and tooltip under a reply, "What was reused"."""

    source: str
    """The engine's ``Reuse.source`` for it."""
    label: str
    counters: tuple[str, ...]
    """The cache counters that count it (docs/design.md §4 names)."""
    help: str

    @property
    def is_hit(self) -> bool:
        return self.source != "none"


REUSE_KINDS = (
    ReuseKind("session", "Held for its chat", ("hits_sticky",),
              "The chat's own memory was still in the model: only the new text was read."),
    ReuseKind("live", "Shared with a running chat", ("hits_live",),
              "Started from what another request (running, or finished with its cells kept) had already read."),
    ReuseKind("cache", "Restored from the cache", ("hits_exact", "hits_resume", "hits_longest_prefix"),
              "Loaded from a saved conversation (in RAM or on disk) instead of read again."),
    ReuseKind("none", "Read in full", ("misses",),
              "Nothing held or saved matched: the model read the whole prompt (a miss)."),
)  # fmt: skip
_KINDS = {k.source: k for k in REUSE_KINDS}
_LEGACY_KINDS = {"sticky": "session", "continuation": "session", "exact": "cache", "partial": "cache"}


def kind_of(source: str) -> ReuseKind | None:
    """The kind of a ``Reuse.source``; None for requests the cache does not count (remote)."""
    return _KINDS.get(source)


def source_of(reuse_source: str, miss_reason: str = "", cache_hit_kind: str = "") -> str:
    """A stored reply's reuse source; replies saved before the engine said where its tokens
    came from have only their ``cache_hit_kind``."""
    if reuse_source != "none" or miss_reason:
        return reuse_source
    return _LEGACY_KINDS.get(cache_hit_kind, "none")


def count_of(kind: ReuseKind, counters: Mapping[str, int]) -> int:
    return sum(int(counters.get(name, 0)) for name in kind.counters)


def request_words(source: str, prompt_tokens: int, tokens_reused: int) -> str:
    """How one request counts in the hit figures, e.g. "a hit — held for its chat: 1,014 of
    1,015 prompt tokens reused (100 %)" or "a miss — read in full: 0 of 812 prompt tokens
    reused (0 %)"."""
    kind = kind_of(source)
    if kind is None:
        return "not counted in the cache figures (the model runs elsewhere)"
    share = _percent(tokens_reused / prompt_tokens if prompt_tokens else None)
    return (f"{'a hit' if kind.is_hit else 'a miss'} — {kind.label.lower()}: {tokens_reused:,} of "
            f"{prompt_tokens:,} prompt tokens reused ({share})")


class CounterSource(Protocol):
    def counters(self) -> dict[str, int]: ...

    def lifetime_counters(self) -> dict[str, int]: ...


def is_hit_counter(name: str) -> bool:
    return name.startswith("hits_")


@dataclass(frozen=True, slots=True)
class HitTotals:
    hits: int = 0
    misses: int = 0
    prompt_tokens: int = 0
    tokens_reused: int = 0

    @classmethod
    def from_counters(cls, counters: Mapping[str, int]) -> HitTotals:
        hits = sum(int(v) for k, v in counters.items() if is_hit_counter(k))
        return cls(
            hits,
            int(counters.get("misses", 0)),
            int(counters.get("prompt_tokens", 0)),
            int(counters.get("prompt_tokens_reused", 0)),
        )

    @property
    def requests(self) -> int:
        return self.hits + self.misses

    @property
    def rate(self) -> float | None:
        """Share of requests that were hits; None before the first request."""
        return self.hits / self.requests if self.requests else None

    @property
    def token_rate(self) -> float | None:
        """Share of prompt tokens that were reused instead of read; None before any."""
        return self.tokens_reused / self.prompt_tokens if self.prompt_tokens else None

    def percent_text(self) -> str:
        return _percent(self.rate)

    def token_percent_text(self) -> str:
        return _percent(self.token_rate)

    def summary(self) -> str:
        """The one line every place shows: "hits 80 % of 25 requests · tokens reused: 92 %"."""
        if not self.requests:
            return "no requests yet"
        return (f"hits {self.percent_text()} of {self.requests:,} requests · "
                f"tokens reused: {self.token_percent_text()}")

    @classmethod
    def of_requests(cls, requests: Iterable[tuple[str, int, int]]) -> HitTotals:
        """The totals of ``(reuse source, prompt tokens, tokens reused)`` per request, counted
        as the engine counts them (a remote request is not counted)."""
        hits = misses = prompt = reused = 0
        for source, n_prompt, n_reused in requests:
            kind = kind_of(source)
            if kind is None:
                continue
            hits += kind.is_hit
            misses += not kind.is_hit
            prompt += n_prompt
            reused += n_reused
        return cls(hits, misses, prompt, reused)

    def explanation(self) -> str:
        """What the two figures mean, for a tooltip."""
        return (
            f"{self.hits:,} of {self.requests:,} requests started from memory already computed "
            "(still held for their chat, shared with a running chat, or restored from the "
            f"cache); {self.tokens_reused:,} of their {self.prompt_tokens:,} prompt tokens "
            "were reused instead of read again. Since the cache was created."
        )


def _percent(rate: float | None) -> str:
    return "–" if rate is None else f"{rate * 100:.0f} %"


class HitAccount:
    """Lifetime counters without a database read per refresh.

    The saved totals only change when a store closes, so they are read once (``baseline``)
    and this process's in-memory counters are added on every ``counters()`` call.
    """

    def __init__(self, store: CounterSource) -> None:
        self._store = store
        current = store.counters()
        lifetime = store.lifetime_counters()
        self._baseline = {
            k: v - current.get(k, 0) for k, v in lifetime.items() if not k.startswith("bytes_")
        }

    def counters(self) -> dict[str, int]:
        """Lifetime counters (docs/design.md §4 names); ``bytes_*`` are the current usage."""
        out = dict(self._store.counters())
        for name, saved in self._baseline.items():
            out[name] = out.get(name, 0) + saved
        return out

    def totals(self) -> HitTotals:
        return HitTotals.from_counters(self.counters())
