"""The frozen records that cross between the GUI thread and a model's bridge thread.

Requests go GUI → bridge (``GenerationRequest``, ``SummaryRequest``); everything that comes
back is a ``StreamUpdate`` (one per request per frame), a ``StatusSnapshot`` (the model's
slots and queue) or a token count. All frozen and slotted (STYLE §3).
"""

from __future__ import annotations

from dataclasses import dataclass

from app.conversation.state import SessionState
from app.conversation.window import OverflowPolicy, Turn, WindowState
from app.server.messages import ToolSpec
from app.storage import ReplyStats

__all__ = [
    "GenerationRequest",
    "Params",
    "ReadAheadRequest",
    "ReadAheadUpdate",
    "SessionState",
    "StatusSnapshot",
    "StreamUpdate",
    "SummaryRequest",
    "WindowReport",
]

Params = tuple[tuple[str, object], ...]
"""Engine request options (docs/design.md §1 names) as a frozen tuple of pairs."""


@dataclass(frozen=True, slots=True)
class GenerationRequest:
    """One reply to generate: the branch so far and the conversation's settings.

    With ``continue_reply`` the last turn is an assistant reply that was cut at the context
    end; the model goes on writing it.
    """

    request_id: str
    session_id: str
    messages: tuple[Turn, ...]
    system: str
    params: Params = ()
    session: SessionState | None = None
    """The session's last known state (from the database), used when the worker has none."""
    window: WindowState = WindowState()
    policy: OverflowPolicy = OverflowPolicy.DROP_OLDEST
    continue_reply: bool = False
    allow_summarise: bool = True
    """False after a summary was just written: if the view still does not fit, drop turns."""
    tools: tuple[ToolSpec, ...] = ()
    """The tools the chat offers the model (``app.tools``); ``tool`` turns are their results."""
    tool_choice: str = "auto"
    """``required``: the reply must be a call (a grammar makes it one)."""


@dataclass(frozen=True, slots=True)
class ReadAheadRequest:
    """Type-ahead (docs/engine-api.md): read the prompt ``request`` would send with ``draft`` as its last
    user message into the chat's sticky sequence, up to the draft's end less a few tokens
    (``app.conversation.type_ahead``). ``request.messages`` is the branch without the draft;
    ``generation`` counts the drafts of one chat, so an update of an older one is ignored."""

    request: GenerationRequest
    draft: str
    generation: int
    whole: bool = False
    """Read the word being typed too (``app.conversation.type_ahead``: a whole read), asked
    when the engine has nothing else to do; the bridge reads it only on a model whose memory
    can drop a tail that changes."""
    documents: bool = False
    """An empty draft in a chat with documents: read the chat up to where the message goes."""


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
class SummaryRequest:
    """Ask the model to summarise ``turns`` (and the ``previous`` summary) for a view."""

    request_id: str
    turns: tuple[Turn, ...]
    previous: str
    params: Params = ()


@dataclass(frozen=True, slots=True)
class WindowReport:
    """The view the bridge chose for a request (``app.conversation.window.WindowPlan``)."""

    kind: str  # fits | cut | summarise | full | too_long
    start_id: str | None
    summary: str
    num_tokens: int
    n_ctx: int
    limit: int
    summarise_ids: tuple[str, ...] = ()
    """For ``summarise``: the turns to summarise (the view then starts at ``start_id``)."""


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
