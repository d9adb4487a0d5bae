"""The frozen records that cross between the GUI thread and a model's bridge thread.

Requests go GUI → bridge (``GenerationRequest``, ``ReadAheadRequest``, ``SummaryRequest``: Qt-free,
in ``app.conversation.requests``); everything that comes back is a ``StreamUpdate`` (one per
request per frame), a ``StatusSnapshot`` (the model's slots and queue) or a token count. All frozen and slotted (STYLE §3).
"""

from __future__ import annotations

from dataclasses import dataclass

from app.conversation.requests import WindowReport
from app.conversation.state import SessionState
from app.storage import ReplyStats


@dataclass(frozen=True, slots=True)
class ReadAheadUpdate:
    """How far a chat's draft has been read ahead (one per frame while it is read).

    ``held`` of the ``target`` tokens read ahead are in the chat's sequence; the draft's own
    tokens start at ``draft_start`` (before it: the chat so far), so ``held - draft_start``
    of them are read. ``finished``: the read ended (read, replaced by a newer draft or the
    message sent, stopped); ``skipped`` says why nothing was read (a view that must be
    summarised first or does not fit, a draft too short to read)."""

    session_id: str
    generation: int
    held: int = 0
    target: int = 0
    draft_start: int = 0
    finished: bool = False
    skipped: str = ""


@dataclass(frozen=True, slots=True)
class StreamUpdate:
    """Everything that happened to one request since the previous frame."""

    request_id: str
    text: str = ""
    thinking: str = ""
    thinking_ended: bool = False
    num_tokens: int = 0
    done: ReplyStats | None = None
    error: str | None = None
    error_code: str | None = None
    path: str = ""
    """``infer``, ``continue_session`` or ``summary``: how the worker submitted the turn."""
    session: SessionState | None = None
    prefill: tuple[int, int] | None = None
    """The latest (done, total) prompt tokens read, while the prompt is being read."""
    window: WindowReport | None = None
    waited_since: float = 0.0
    """``time.perf_counter()`` when this update's oldest event reached the bridge (0 when it
    has none): ``hearth bench`` B6 measures how long text takes to reach the screen from it."""


@dataclass(frozen=True, slots=True)
class StatusSnapshot:
    model_id: str
    num_slots: int
    num_busy: int
    pending_len: int
    phase: str
    n_ctx: int = 0
