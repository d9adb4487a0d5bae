"""One model's turns, without Qt: what each request sends, and what each chat's sequence holds.

A model's bridge thread (``app.ui.engine_bridge``) keeps one ``Turns`` and asks it, for every
request, what to hand the engine; the bridge then only starts the stream and coalesces its
events. ``Turns`` decides three things:

- **the prompt** of a message (``plan_send``): the view under the chat's overflow policy
  (``app.conversation.window``), rendered with the model's template and the chat's tools
  (``PromptBuilder``); the same for a summary's prompt (``summary``);
- **the sticky session**: what each chat's sequence holds after its last reply (``remember``),
  so the next turn sends only its suffix (``continue_session``), or its whole prompt when a
  read ahead may have put more in the sequence (the engine then finds the common prefix);
- **type-ahead** (``plan_read``): the tokens a draft may read (``app.conversation.type_ahead``); an
  ask that a newer draft or the message overtook is dropped unread (``note_read``); the chat
  without its draft is rendered once per view; the message sent as it was last read is not
  rendered again.

Every method but ``note_read`` runs on the model's bridge thread (the only caller of the
model's template and tokenizer); ``note_read`` is called from the GUI thread too.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from app.cache.prefix import common_prefix_len
from app.conversation.prompt import PromptBuilder, TemplateModel
from app.conversation.requests import (
    GenerationRequest,
    ReadAheadRequest,
    SummaryRequest,
    WindowReport,
)
from app.conversation.state import SessionState
from app.conversation.type_ahead import margin_of, probe_of, readable_prefix, with_draft
from app.conversation.window import Budget, Turn, WindowPlan
from app.engine.chat import continuation_suffix
from app.engine.config import Markers
from app.engine.events import Stats
from app.tools.prompt import ToolShape, forced_grammar, tool_mode_for

DEFAULT_REPLY_TOKENS = 64
TRIMS = ("attention", "sliding_window")
"""Memory kinds whose live seq drops a tail cheaply (``MemoryCaps``): a recurrent state reads a
changed tail again from a checkpoint, so it gets no whole reads."""


class TurnModel(TemplateModel, Protocol):
    """What ``Turns`` uses of a loaded model (``app.engine.Model``)."""

    def detokenize(self, tokens: Sequence[int]) -> str: ...


@dataclass(frozen=True, slots=True)
class SendPlan:
    """What a message's request hands the engine.

    ``prompt`` empty: nothing is sent (``report`` says why: a view to summarise first, one
    that does not fit). Otherwise ``suffix``, when set, continues the chat's session
    (``continue_session``); without it, or when the engine refuses it, ``prompt`` is sent
    whole (``infer``): token for token what the session holds, then the rest."""

    report: WindowReport
    params: dict[str, object]
    prompt: list[int]
    suffix: list[int] | None = None


@dataclass(frozen=True, slots=True)
class ReadPlan:
    """What a draft's read ahead reads: ``tokens`` (the chat's prompt up to the draft's end,
    less a margin), of which the draft's own start at ``draft_start``; or, with none,
    ``skipped`` says why nothing is read."""

    tokens: tuple[int, ...] = ()
    draft_start: int = 0
    skipped: str = ""


@dataclass(frozen=True, slots=True)
class _LastRead:
    """The newest draft read ahead: its view's key (``_view``), plan and prompt."""

    view: object
    plan: WindowPlan
    prompt: list[int]
    merge_summary: bool


class Turns:
    """The turn logic of one loaded model (see the module's docstring)."""

    def __init__(self, model: TurnModel, model_id: str, n_ctx: int, *, trims: bool = False) -> None:
        self.model = model
        self.model_id = model_id
        self.n_ctx = n_ctx
        self.trims = trims
        """Its memory drops a tail (a whole read's changed last word) with a cheap ``seq_rm``."""
        self.merge_summary = False
        """Learnt per model: its template wants one system message (``PromptBuilder``)."""
        self._held: dict[str, SessionState] = {}
        """Session id → what its seq holds, when known exactly: a follow-up sends its suffix."""
        self._read_into: set[str] = set()
        """Sessions whose seq may hold read-ahead tokens past what ``_held`` says: their next
        turn is sent whole (``infer`` finds the common prefix), never as a suffix."""
        self._lock = threading.Lock()
        self._latest_read: dict[str, int] = {}
        """Session id → the generation of its newest read-ahead asked for (-1: its message was
        sent since), under ``_lock``: an older ask still queued is dropped unread (rendering it
        would delay the message behind it)."""
        self._empty: dict[str, tuple[object, list[int]]] = {}
        """Session id → (view, its rendering with an empty draft): the same on every read of
        one draft, rendered once."""
        self._last_read: dict[str, _LastRead] = {}
        self._pieces: dict[int, str] = {}

    # -- messages ------------------------------------------------------------------------------

    def plan_send(self, request: GenerationRequest) -> SendPlan:
        """The prompt of ``request`` and how it reaches the engine (``SendPlan``)."""
        params = dict(request.params)
        max_tokens = reply_tokens(params)
        budget = Budget.for_reply(self.n_ctx, max_tokens)
        read = self._last_read.pop(request.session_id, None)
        if read is not None and not request.continue_reply and read.view == self._view(request, request.messages, max_tokens):
            # NOTE: the message as type-ahead last read it (its plan and prompt are the same):
            # not rendered and tokenized again, so the engine has it sooner (B11: 1.5-7 ms of
            # the bridge's thread, the GUI thread redrawing the chat at the same time).
            self.merge_summary = read.merge_summary
            self._tools(request, params)  # a forced call's grammar
            return self._sticky(request, read.prompt, params, self._report(request, read.plan, budget))
        builder = PromptBuilder(
            self.model,
            request.system,
            request.messages,
            continue_reply=request.continue_reply,
            merge_summary=self.merge_summary,
            shape=self._tools(request, params),
        )
        plan = builder.plan(request.window, budget, request.policy)
        if plan.kind == "summarise" and not request.allow_summarise:
            plan = WindowPlan("cut", plan.start, "", builder.count(plan.start, ""))
        self.merge_summary = builder.merge_summary
        report = self._report(request, plan, budget)
        if not plan.can_send:
            return SendPlan(report, params, [])
        return self._sticky(request, builder.tokens(plan.start, plan.summary), params, report)

    def _sticky(self, request: GenerationRequest, full: list[int], params: dict[str, object],
                report: WindowReport) -> SendPlan:  # fmt: skip
        """``full`` as the chat's session takes it: a suffix when this thread knows what the
        seq holds and no read ahead went past it; else what it holds, then the rest."""
        sid = request.session_id
        pinned = self._held.pop(sid, None)
        held = pinned or request.session
        if held is not None and held.model_id != self.model_id:
            held = None
        suffix = (
            continuation_suffix(full, held.tokens, self._piece, ended_with_eog=held.ended_with_eog)
            if held is not None
            else None
        )
        # NOTE: ``prompt`` is token-for-token what the engine saved for this session when we
        # know it, so after a restart (or an eviction) it restores from the cache.
        prompt = full if held is None or not suffix else held.tokens + suffix
        read_ahead = sid in self._read_into
        self._read_into.discard(sid)
        resume = pinned is not None and bool(suffix) and not read_ahead
        return SendPlan(report, params, prompt, suffix if resume else None)

    def remember(self, session_id: str | None, prompt: Sequence[int], generated: Sequence[int],
                 stats: Stats) -> SessionState | None:  # fmt: skip
        """A reply to ``prompt`` ended: what its session's seq now holds (None when not known
        exactly; the next turn then sends its whole prompt and the engine's own sticky check
        decides)."""
        if session_id is None:
            return None
        held = SessionState(
            self.model_id,
            tuple(prompt),
            tuple(generated),
            ended_with_eog=stats.finish_reason == "stop" and not stats.stop_sequence,
        )
        if stats.committed_tokens != len(held.tokens):
            return None
        self._held[session_id] = held
        return held

    def end_session(self, session_id: str) -> None:
        """The chat left this model: forget what its sequence held and read."""
        self._held.pop(session_id, None)
        self._empty.pop(session_id, None)
        self._last_read.pop(session_id, None)
        self._read_into.discard(session_id)

    def summary(self, request: SummaryRequest) -> tuple[list[int], dict[str, object]]:
        """The prompt and options that ask for a summary of ``request.turns``; the prompt ends
        with the summary's first words (``SUMMARY_OPENING``), which the reply goes on from."""
        params = dict(request.params)
        builder = PromptBuilder(self.model, "", request.turns)
        budget = Budget.for_reply(self.n_ctx, DEFAULT_REPLY_TOKENS)
        prompt = builder.summary_prompt(request.turns, request.previous, budget.limit)
        params["response_tokens"] = budget.summary_tokens
        params["temperature"] = 0.0  # a summary keeps to what was said: no sampling
        return prompt, params

    # -- type-ahead ----------------------------------------------------------------------------

    def note_read(self, session_id: str, generation: int) -> None:
        """Any thread (the GUI's, before it queues the ask, or the message with -1)."""
        with self._lock:
            self._latest_read[session_id] = generation

    def plan_read(self, ask: ReadAheadRequest) -> ReadPlan | None:
        """What to read ahead of ``ask``'s draft; None when a newer draft or the message was
        asked for since (nothing to say)."""
        request, draft = ask.request, ask.draft.strip()  # as ``ChatController.send`` sends it
        sid = request.session_id
        with self._lock:
            stale = self._latest_read.get(sid, ask.generation) != ask.generation
        if stale:
            return None
        if not draft and not ask.documents:
            return ReadPlan(skipped="empty")

        def render(text: str, start: int, summary: str) -> list[int]:
            turns = with_draft(request.messages, text)
            builder = PromptBuilder(self.model, request.system, turns, merge_summary=self.merge_summary,
                                    shape=self._tools(request, {}))  # fmt: skip
            return self._session_prompt(sid, request.session, builder.tokens(start, summary))

        turns = with_draft(request.messages, draft)
        builder = PromptBuilder(self.model, request.system, turns, merge_summary=self.merge_summary,
                                shape=self._tools(request, {}))  # fmt: skip
        max_tokens = reply_tokens(dict(request.params))
        plan = builder.plan(request.window, Budget.for_reply(self.n_ctx, max_tokens), request.policy)
        if plan.kind not in ("fits", "cut"):
            # A view to summarise first reads what the summary says, not known yet; a view
            # that cannot be sent is not read either.
            return ReadPlan(skipped=plan.kind)
        full = builder.tokens(plan.start, plan.summary)
        self._last_read[sid] = _LastRead(self._view(request, turns, max_tokens), plan, full, builder.merge_summary)
        prompt = self._session_prompt(sid, request.session, full)
        whole = ask.whole and self.trims
        probed = render(probe_of(ask.draft, whole), plan.start, plan.summary)
        tokens = readable_prefix(prompt, probed, margin_of(ask.draft, whole))
        held = self._held.get(sid) or request.session
        view = (request.messages, request.system, held, plan.start, plan.summary, self.merge_summary)
        empty = self._empty.get(sid)
        if empty is None or empty[0] != view:
            empty = (view, render("", plan.start, plan.summary))
            self._empty[sid] = empty
        if not tokens:
            return ReadPlan(skipped="short")
        self._read_into.add(sid)  # the next turn is sent whole (``_sticky``)
        return ReadPlan(tuple(tokens), common_prefix_len(prompt, empty[1]))

    def _session_prompt(self, sid: str, stored: SessionState | None, full: list[int]) -> list[int]:
        """``full`` as the turn's request will send it (``_sticky``): what the session holds,
        token for token, then the rest."""
        held = self._held.get(sid) or stored
        if held is None or held.model_id != self.model_id:
            return full
        suffix = continuation_suffix(full, held.tokens, self._piece, ended_with_eog=held.ended_with_eog)
        return full if not suffix else [*held.tokens, *suffix]

    # -- helpers -------------------------------------------------------------------------------

    def _tools(self, request: GenerationRequest, params: dict[str, object]) -> ToolShape | None:
        """A chat that offers tools (``app.tools``): how its prompt renders them, as the server
        does (native when the template renders ``tools``, else generic), and, when the chat
        forces a call, the grammar that makes the reply one (unless the chat has its own)."""
        if not request.tools:
            return None
        backend = getattr(self.model, "backend", None)
        mode = tool_mode_for(getattr(getattr(backend, "info", None), "chat_template", None))
        if request.tool_choice == "required" and "grammar" not in params:
            markers = getattr(getattr(self.model, "config", None), "tool_call_markers", None)
            pair = (markers.open, markers.close) if isinstance(markers, Markers) else None
            params["grammar"] = forced_grammar(request.tools, mode, pair)
        return ToolShape(request.tools, mode)

    def _view(self, request: GenerationRequest, turns: tuple[Turn, ...], max_tokens: int) -> object:
        """What a request's plan and prompt follow from: its turns (the last one's id aside: a
        draft has none yet), system prompt, window, policy and reply budget."""
        *head, last = turns
        return (tuple(head), last.role, last.content, request.system, request.window, request.policy, max_tokens,
                self.merge_summary, request.tools, request.tool_choice)  # fmt: skip

    @staticmethod
    def _report(request: GenerationRequest, plan: WindowPlan, budget: Budget) -> WindowReport:
        turns = request.messages
        start_id = turns[plan.start].id if plan.start > 0 else None
        ids = tuple(t.id for t in turns[plan.summarise_from : plan.start]) if plan.kind == "summarise" else ()
        return WindowReport(plan.kind, start_id, plan.summary, plan.num_tokens, budget.n_ctx, budget.limit, ids)

    def _piece(self, token: int) -> str:
        piece = self._pieces.get(token)
        if piece is None:
            piece = self.model.detokenize([token])
            if len(self._pieces) < 200_000:
                self._pieces[token] = piece
        return piece


def reply_tokens(params: dict[str, object]) -> int:
    """The reply's token budget a request asks for (``response_tokens``), else the default."""
    value = params.get("response_tokens")
    return value if isinstance(value, int) and not isinstance(value, bool) else DEFAULT_REPLY_TOKENS
