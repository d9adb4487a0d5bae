"""What the model sees of a conversation that outgrows its context: the overflow policies.

The model's view of a conversation is ``system prompt`` + (optionally) ``summary of older
turns`` + ``turns[start:]``. While it fits, ``start`` stays where it is, so every turn
extends the tokens the engine already holds (a sticky continuation, nothing re-read). When
the next prompt would not leave ``reserve`` tokens for the reply, the policy decides:

- ``drop_oldest`` (default): move ``start`` forward to a user turn, far enough that the view
  is back under ``CUT_TO`` of the limit. NOTE: cutting to just under the limit would move
  the window on every later turn, and each move re-reads the whole kept history; cutting to
  ~60 % buys several sticky turns per cut (llama.cpp's context shift discards half).
- ``summarise``: the same cut, but the model first writes a summary of the turns that leave
  the view (and of the previous summary), which then stands in for them.
- ``stop``: nothing moves; the reply is refused with a clear message.

The system prompt always comes first and unchanged, so the head of every rebuilt prompt is
the same tokens as before and can still come from the cache. Everything here is pure: the
caller passes ``count(start, summary)``, the prompt length of a candidate view, measured with
the model's own template and tokenizer.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Literal

CUT_TO = 0.6
"""After a cut the view fills at most this share of the limit."""
MIN_SUMMARY_TOKENS = 32
MAX_SUMMARY_TOKENS = 160
SUMMARY_PREFIX = "Summary of the earlier part of this conversation:\n"


class OverflowPolicy(StrEnum):
    DROP_OLDEST = "drop_oldest"
    SUMMARISE = "summarise"
    STOP = "stop"

    @property
    def label(self) -> str:
        return POLICY_LABELS[self]

    @classmethod
    def parse(cls, value: object, default: OverflowPolicy | None = None) -> OverflowPolicy:
        """A stored value back to a policy; unknown values give ``default`` (or drop_oldest)."""
        try:
            return cls(str(value))
        except ValueError:
            return default or cls.DROP_OLDEST


POLICY_LABELS = {
    OverflowPolicy.DROP_OLDEST: "Keep the system prompt, drop the oldest turns",
    OverflowPolicy.SUMMARISE: "Summarise the oldest turns",
    OverflowPolicy.STOP: "Stop at the limit",
}


@dataclass(frozen=True, slots=True)
class Turn:
    """One message of the active branch, as the model sees it."""

    id: str
    role: str  # "user" | "assistant"
    content: str


@dataclass(frozen=True, slots=True)
class WindowState:
    """Where a conversation's view starts and what stands in for the turns before it.

    Kept per conversation across turns and restarts. ``start_id`` names the first turn the
    model sees; when that message is not on the active branch (an earlier message was
    edited) the state no longer applies and the view starts from the beginning again.
    """

    start_id: str | None = None
    summary: str = ""

    def to_dict(self) -> dict[str, str | None]:
        return {"start_id": self.start_id, "summary": self.summary}

    @classmethod
    def from_dict(cls, data: object) -> WindowState:
        if not isinstance(data, dict):
            return cls()
        start = data.get("start_id")
        summary = data.get("summary")
        return cls(
            start if isinstance(start, str) and start else None,
            summary if isinstance(summary, str) else "",
        )


@dataclass(frozen=True, slots=True)
class Budget:
    """``n_ctx`` tokens per sequence, of which ``reserve`` are kept free for the reply."""

    n_ctx: int
    reserve: int

    @classmethod
    def for_reply(cls, n_ctx: int, max_tokens: int) -> Budget:
        """Reserve the reply's ``max_tokens``, but never more than a quarter of the context
        (a longer reply is cut at the context end and can be continued)."""
        return cls(n_ctx, max(1, min(max_tokens, n_ctx // 4)))

    @property
    def limit(self) -> int:
        """The longest prompt that still leaves ``reserve`` tokens for the reply."""
        return self.n_ctx - self.reserve

    @property
    def target(self) -> int:
        return int(self.limit * CUT_TO)

    @property
    def summary_tokens(self) -> int:
        """How long a summary may be."""
        return max(MIN_SUMMARY_TOKENS, min(MAX_SUMMARY_TOKENS, self.limit // 4))


PlanKind = Literal["fits", "cut", "summarise", "full", "too_long"]
Counter = Callable[[int, str], int]
"""``count(start, summary)``: prompt tokens of the view that starts at ``turns[start]``."""


@dataclass(frozen=True, slots=True)
class WindowPlan:
    """The view to send, or why there is none.

    ``fits``: the current view fits. ``cut``: ``start`` moved forward (older turns leave the
    view, the summary is dropped). ``summarise``: ``turns[summarise_from:start]`` and
    ``summary`` (the old one) must be summarised before the reply; send again with the new
    ``WindowState``. ``full``: the policy is ``stop`` and the view no longer fits.
    ``too_long``: even the last turn alone does not fit.
    """

    kind: PlanKind
    start: int
    summary: str
    num_tokens: int
    summarise_from: int = 0

    @property
    def can_send(self) -> bool:
        return self.kind in ("fits", "cut")


def index_of(turns: Sequence[Turn], message_id: str | None) -> int:
    """Index of ``message_id`` in ``turns``; -1 when absent (or None)."""
    if message_id is None:
        return -1
    return next((i for i, t in enumerate(turns) if t.id == message_id), -1)


def plan_window(
    turns: Sequence[Turn],
    state: WindowState,
    count: Counter,
    budget: Budget,
    policy: OverflowPolicy,
) -> WindowPlan:
    """Choose the view for the next reply (see the module docstring).

    The last user turn, and whatever follows it (a reply being continued), is always kept.
    """
    if not turns:
        raise ValueError("a conversation view needs at least one turn")
    start = index_of(turns, state.start_id)
    summary = state.summary if start >= 0 else ""
    start = max(start, 0)
    keep = _last_user(turns)
    start = min(start, keep)
    n = count(start, summary)
    if n <= budget.limit:
        return WindowPlan("fits", start, summary, n)
    if policy is OverflowPolicy.STOP:
        return WindowPlan("full", start, summary, n)
    cuts = [i for i in range(start + 1, keep + 1) if turns[i].role == "user"]
    allowance = budget.summary_tokens if policy is OverflowPolicy.SUMMARISE else 0
    cut = _first_fitting(cuts, lambda i: count(i, "") + allowance, budget.target)
    if cut is None:  # nothing reaches the target: take the longest view under the limit
        cut = _first_fitting(cuts, lambda i: count(i, "") + allowance, budget.limit)
    if cut is None:
        n_last = count(keep, "")
        if n_last > budget.limit or policy is not OverflowPolicy.SUMMARISE:
            return WindowPlan("too_long", keep, "", n_last)
        cut = keep  # a summary does not fit beside the last turn: drop instead
        return WindowPlan("cut", cut, "", n_last)
    if policy is OverflowPolicy.SUMMARISE:
        return WindowPlan("summarise", cut, summary, count(cut, ""), summarise_from=start)
    return WindowPlan("cut", cut, "", count(cut, ""))


def _last_user(turns: Sequence[Turn]) -> int:
    for i in range(len(turns) - 1, -1, -1):
        if turns[i].role == "user":
            return i
    return len(turns) - 1


def _first_fitting(
    candidates: Sequence[int], size: Callable[[int], int], limit: int
) -> int | None:
    """The first candidate whose ``size`` is within ``limit``; sizes shrink along the list
    (a later start leaves fewer turns), so a binary search finds it in O(log n) renders."""
    lo, hi = 0, len(candidates)
    while lo < hi:
        mid = (lo + hi) // 2
        if size(candidates[mid]) <= limit:
            hi = mid
        else:
            lo = mid + 1
    return candidates[lo] if lo < len(candidates) else None


# -- what the model is sent ---------------------------------------------------------------

Message = dict[str, str]


def view_messages(
    turns: Sequence[Turn], start: int, summary: str, *, merge_summary: bool = False
) -> tuple[list[Message], str]:
    """The chat-template messages of a view, and the text to append to the system prompt.

    The summary goes in as its own ``system`` message right after the system prompt, so the
    system prompt's tokens stay exactly as before. Templates that accept a system message
    only first get it appended to the system prompt instead (``merge_summary``).
    """
    messages = [{"role": t.role, "content": t.content} for t in turns[start:]]
    if not summary:
        return messages, ""
    text = SUMMARY_PREFIX + summary
    if merge_summary:
        return messages, "\n\n" + text
    return [{"role": "system", "content": text}, *messages], ""


SUMMARY_SYSTEM = (
    "You write short, factual summaries of conversations. Keep names, numbers, decisions "
    "and open questions; leave out greetings."
)


def summary_request(turns: Sequence[Turn], previous: str) -> list[Message]:
    """The messages that ask the model to summarise ``turns`` (after ``previous``)."""
    lines = []
    if previous:
        lines.append(f"Earlier summary: {previous}")
    for t in turns:
        who = "User" if t.role == "user" else "Assistant"
        lines.append(f"{who}: {t.content}")
    transcript = "\n\n".join(lines)
    return [
        {"role": "system", "content": SUMMARY_SYSTEM},
        {
            "role": "user",
            "content": "Summarise this conversation in a few sentences.\n\n" + transcript,
        },
    ]


def fitted_summary_request(
    turns: Sequence[Turn], previous: str, size: Callable[[list[Message]], int], limit: int
) -> list[Message]:
    """``summary_request`` cut to at most ``limit`` tokens by ``size``: the oldest turns go
    first, then the start of the one left is trimmed (halving, so a few renders at most)."""
    kept = list(turns)
    while len(kept) > 1 and size(summary_request(kept, previous)) > limit:
        kept.pop(0)
    request = summary_request(kept, previous)
    if not kept:
        return request
    first, text = kept[0], kept[0].content
    while size(request) > limit and len(text) > 1:
        text = text[len(text) // 2 :]
        kept[0] = Turn(first.id, first.role, "…" + text)
        request = summary_request(kept, previous)
    return request
