"""What a chat asks of its model, as frozen records without Qt.

A ``GenerationRequest`` is one reply to write (the branch so far and the chat's settings), a
``ReadAheadRequest`` a draft to read ahead (type-ahead), a ``SummaryRequest`` older turns to
summarise; a ``WindowReport`` is the view ``app.conversation.turns`` chose for a request. They
cross from the GUI thread to a model's bridge thread (``app.ui.bridge_records`` hands them on
beside the records that come back).
"""

from __future__ import annotations

from dataclasses import dataclass

from app.conversation.state import SessionState
from app.conversation.window import OverflowPolicy, Turn, WindowState
from app.server.messages import ToolSpec

__all__ = ["GenerationRequest", "Params", "ReadAheadRequest", "SummaryRequest", "WindowReport"]

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
