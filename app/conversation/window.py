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

import difflib
import re
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
    no_summary: str = ""
    """When the policy is to summarise but the model's summary was not usable: why (see
    :func:`check_summary`); the turns before ``start_id`` were dropped instead."""

    def to_dict(self) -> dict[str, str | None]:
        out = {"start_id": self.start_id, "summary": self.summary}
        if self.no_summary:
            out["no_summary"] = self.no_summary
        return out

    @classmethod
    def from_dict(cls, data: object) -> WindowState:
        if not isinstance(data, dict):
            return cls()
        start = data.get("start_id")
        summary = data.get("summary")
        why = data.get("no_summary")
        return cls(
            start if isinstance(start, str) and start else None,
            summary if isinstance(summary, str) else "",
            why if isinstance(why, str) and not summary else "",
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


SUMMARY_OPENING = "In this conversation, the user"
"""The words a local model's summary starts with: they are part of the prompt (after the
template's assistant header), and the reply goes on from them. Without them SmolLM2-135M
went on with the transcript ("User: …") or answered its last message instead of
summarising it (tools/summary_rate.py: 0 usable of 6 with the earlier prompt)."""


def summary_request(turns: Sequence[Turn], previous: str) -> list[Message]:
    """The messages that ask the model to summarise ``turns`` (after ``previous``).

    The transcript is written in the third person ("The user said: …"), not as chat lines a
    small model would go on with, and the instruction comes after it."""
    lines = []
    if previous:
        lines.append(f"Earlier, in short: {previous}")
    for t in turns:
        who = "The user said" if t.role == "user" else "The assistant answered"
        lines.append(f"{who}: {t.content}")
    transcript = "\n\n".join(lines)
    return [
        {
            "role": "user",
            "content": "Here is a conversation between a user and an assistant.\n\n"
            + transcript
            + "\n\nSummarize this conversation in two or three sentences: what the user "
            "wants, and the facts, names and numbers that matter.",
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


# -- is the summary worth its name ------------------------------------------------------

_LABEL = re.compile(r"^\s*(?:\*\*)?\s*(?:summary|summarized|summarised|conversation summary)"
                    r"(?: of [^:\n]{0,60})?\s*:?\s*(?:\*\*)?\s*", re.IGNORECASE)
COPY_SIMILARITY = 0.8
"""A summary this similar (``difflib`` ratio) to one of the turns it replaces is a copy of it."""
GROUNDED_SHARE = 0.5
GROUNDED_MIN_WORDS = 3
"""A summary speaks of what it replaces: at least this share (and this number) of its words
of four letters or more (minus the commonest, and the words any summary uses: "requested",
"provided" …) occur in the turns (compared on their first five letters, so "counted" finds
"counts"). Small models asked for a summary often write something else: a reply to the last
message, an invented story about the same topic. A check of words, not of meaning: on
SmolLM2's summaries it passed those that spoke of the chat (50–80 % of their words found)
and refused the replies and inventions (0–40 %)."""
_TRANSCRIPT = re.compile(
    r"(^|\n)\s*(the\s+)?(user|assistant)(\s+(said|answered|asked|wrote))?\s*:", re.IGNORECASE
)
"""A line that starts like a transcript's ("User:", "The user said:", the summary prompt's
own form): the model went on with the conversation."""
_STOPWORD_TEXT = (
    "this that with from have were what when where which will would could should about "
    "into your their they them then than there these those been being also just like very "
    "more most some such only over each other after before again once here while does "
    "make made said asked answered user assistant conversation summary summarise summarize "
    "discussed talked mentioned requested request provided wanted wants needed know asking "
    "mention explanation explained detailed solution options questions question includes "
    "containing instead during help helped suggested recommended information"
)
_STOPWORDS = frozenset(_STOPWORD_TEXT.split())


def clean_summary(text: str) -> str:
    """The summary without a leading "Summary:" label and surrounding space."""
    return _LABEL.sub("", text.strip(), count=1).strip()


def check_summary(summary: str, turns: Sequence[Turn], previous: str = "") -> str:
    """Why ``summary`` cannot stand in for ``turns`` (and the ``previous`` summary), in
    words that finish "the summary …"; "" when it can.

    Usable: it says something beyond a label ("Summary:"), is shorter than what it replaces,
    and is not one of the turns copied (a small model asked to summarise often repeats the
    last message, sometimes with a detail changed).
    """
    text = clean_summary(summary)
    if sum(c.isalnum() for c in text) < 3:
        return "was empty" if not summary.strip() else f"was only “{summary.strip()[:40]}”"
    replaced = sum(len(t.content) for t in turns) + len(previous)
    if len(text) >= replaced:
        return "was not shorter than the messages it replaced"
    if _TRANSCRIPT.search(text):
        return "went on with the conversation instead of summarising it"
    norm = _normalise(text)
    if previous and _similar(norm, _normalise(clean_summary(previous))):
        return "only repeated the earlier summary"
    for turn in turns:
        other = _normalise(clean_summary(turn.content))
        if not other:
            continue
        if _similar(norm, other):
            return "only repeated one of the messages"
    words = _content_words(text)
    source = " ".join(_content_words(previous + " " + " ".join(t.content for t in turns)))
    found = [w for w in words if w[:5] in source]
    if len(found) < GROUNDED_MIN_WORDS or len(found) < GROUNDED_SHARE * len(words):
        return "was mostly about things the messages do not say"
    return ""


def _similar(norm: str, other: str) -> bool:
    """``norm`` is ``other`` or a piece of it, or nearly the same text (normalised both)."""
    if not other:
        return False
    if norm == other or (len(norm) >= 20 and norm in other):
        return True
    return difflib.SequenceMatcher(None, norm, other, autojunk=False).ratio() >= COPY_SIMILARITY


def _content_words(text: str) -> list[str]:
    return [w for w in re.findall(r"[^\W\d_]{4,}", text.lower()) if w not in _STOPWORDS]


def _normalise(text: str) -> str:
    return " ".join(re.sub(r"[^\w\s]", " ", text.lower()).split())
