"""One generation request from admission to its log record: start, events, cancel, finish.

Shared by the chat and text-completion routes. It owns the ``EngineRun``, remembers the
tokens the engine ends up holding (for ``TokenMemo``), and keeps the request's line in the
activity log current (time to first token, usage, how it ended).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

from app.engine import Model
from app.engine.errors import EngineError, InvalidGrammar
from app.engine.events import Done, Error, Event, Stats, Token, TokenId, ToolCallDelta
from app.server.activity import RequestRecord
from app.server.errors import ApiError, from_engine
from app.server.reply import cached_tokens
from app.server.runs import EngineRun
from app.server.state import ServerState


class Generation:
    def __init__(self, state: ServerState, record: RequestRecord, model: Model, tokens: Sequence[int],
                 options: dict[str, Any], *, grammar_param: str = "grammar") -> None:
        self.state = state
        self.grammar_param = grammar_param
        """The request field the grammar came from (named in a refusal)."""
        self.record = record
        self.model = model
        self.tokens = list(tokens)
        self.options = options
        self.run = EngineRun()
        self.generated: list[int] = []
        self.client_gone = False
        self.server_stopping = False
        self.stats: Stats | None = None
        self._t0 = time.perf_counter()
        self._first = False

    async def start(self) -> None:
        """Admit the request; an engine refusal becomes the matching ``ApiError``."""
        try:
            await self.run.start(self.model, self.tokens, **self.options)
        except EngineError as exc:
            api = self._grammar_error(exc) if isinstance(exc, InvalidGrammar) else from_engine(exc)
            self.state.activity.finish(self.record.id, "error", status=api.status, error=api.message)
            raise api from exc
        self.state.admitted(self)

    def _grammar_error(self, exc: InvalidGrammar) -> ApiError:
        """The engine refused the grammar before llama.cpp saw it: a 400 naming the field."""
        param = self.grammar_param
        return ApiError(400, f"Invalid value for '{param}': {exc.message}", param=param, code="invalid_grammar")

    async def events(self) -> AsyncIterator[Event]:
        async for event in self.run.events():
            if isinstance(event, TokenId):
                self.generated.append(event.id)
            elif isinstance(event, Token | ToolCallDelta) and not self._first:
                self._first = True
                self.state.activity.update(self.record.id, ttft_ms=(time.perf_counter() - self._t0) * 1000)
            elif isinstance(event, Done):
                self._done(event.stats)
            elif isinstance(event, Error):
                self.state.finished(self)
                self.state.activity.finish(self.record.id, "error", status=500, error=event.reason)
            yield event

    def _done(self, stats: Stats) -> None:
        self.state.finished(self)
        self.stats = stats
        self.state.memo(self.model).remember(self.tokens + self.generated)
        self.state.activity.finish(
            self.record.id, "cancelled" if self.client_gone or stats.cancelled else "done",
            prompt_tokens=stats.prompt_tokens, cached_tokens=cached_tokens(stats),
            completion_tokens=stats.completion_tokens,
            drafted_tokens=stats.drafted_tokens, accepted_tokens=stats.accepted_tokens,
        )

    def cancel(self) -> None:
        """The client went away: stop generating (the seq is freed at the next tick)."""
        self.client_gone = True
        self.run.cancel()

    def stop_for_shutdown(self) -> None:
        """The server is stopping (from another thread): end the request now."""
        self.server_stopping = True
        self.run.cancel()

    def stopping_error(self) -> ApiError:
        return ApiError(503, "The server is stopping; this reply was cut short.", code="server_stopping",
                        type_="server_error")

    async def collect(self) -> list[Event]:
        """Every event, for a non-streaming reply."""
        events: list[Event] = []
        async for event in self.events():
            events.append(event)
        last = events[-1]
        if self.server_stopping:
            raise self.stopping_error()
        if isinstance(last, Error):
            raise ApiError(500, f"The model failed while generating: {last.reason}", code=last.code, type_="server_error")
        return events


def engine_options(model: Model, tokens: Sequence[int], max_tokens: int | None, base: dict[str, Any],
                   grammar: str | None) -> dict[str, Any]:
    """Engine options for a request: no session id (conversations are recognised by their
    tokens), replies up to the context's end unless the client caps them."""
    room = max(1, model.config.n_ctx - len(tokens))
    opts = {**base, "response_tokens": min(max_tokens, room) if max_tokens else room, "thinking": "enabled"}
    if grammar:
        opts["grammar"] = grammar
    return opts
