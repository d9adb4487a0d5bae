"""``POST /v1/chat/completions`` and ``POST /v1/completions``."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from app.engine import Model
from app.engine.config import Markers
from app.engine.events import Done, Error, Token
from app.server.generation import Generation, engine_options
from app.server.prompt import build_chat_prompt
from app.server.protocol import ChatRequest, CompletionRequest, parse_chat, parse_completion
from app.server.reply import ChatReply, finish_reason, usage
from app.server.sse import EventStreamResponse, on_disconnect, sse
from app.server.state import ServerState, read_json

router = APIRouter()


def _state(request: Request) -> ServerState:
    state: ServerState = request.app.state.hearth
    return state


@router.post("/v1/chat/completions")
async def chat_completions(request: Request) -> Response:
    state = _state(request)
    req = parse_chat(await read_json(request))
    model = state.model(req.model)
    memo = state.memo(model)
    with model.arriving():  # the cache's writes wait while the prompt is rendered and admitted
        prompt = await asyncio.to_thread(
            build_chat_prompt, model, req, memo,
            chat_template=model.backend.info.chat_template, tool_markers=_markers(model),
        )
        state.check_prompt(model, len(prompt.tokens))
        record = state.begin(request, "chat", req.model, stream=req.stream, prefix="chatcmpl")
        opts = engine_options(model, prompt.tokens, req.sampling.max_tokens, req.sampling.engine_options(), prompt.grammar)
        gen = Generation(state, record, model, prompt.tokens, opts, grammar_param=prompt.grammar_param)
        await gen.start()
    reply = ChatReply(req.tools, prompt.tool_mode, memo, calls_allowed=req.tool_choice != "none")
    headers = {TEMPLATE_HEADER: template_name(model)}
    if req.stream:
        return EventStreamResponse(_chat_chunks(gen, reply, req, record.id), gen.cancel, headers=headers)
    async with on_disconnect(request.receive, gen.cancel):
        events = await gen.collect()
    for event in events:
        reply.on_event(event)
    done = events[-1]
    assert isinstance(done, Done)
    _, reason = reply.close(done)
    return JSONResponse({
        "id": record.id, "object": "chat.completion", "created": int(record.started_at), "model": req.model,
        "choices": [{"index": 0, "message": reply.message(), "logprobs": None, "finish_reason": reason}],
        "usage": usage(done.stats), "system_fingerprint": _fingerprint(model),
    }, headers=headers)  # fmt: skip


TEMPLATE_HEADER = "x-hearth-chat-template"
"""Which chat template rendered the prompt: ``file`` (the model file's own), ``custom`` (one
the user set) or the built-in format chosen for a model file without one (``chatml``, …).
NOTE: a model file whose template was ``{{ 10**10**9 }}`` answered 200 with a prompt of 91
digits and nothing said where that prompt came from."""


def template_name(model: Model) -> str:
    name = model.backend.info.extra.get("chat_format")
    return name if isinstance(name, str) and name else "none"


def _markers(model: Model) -> Markers | None:
    markers = model.config.tool_call_markers
    return markers if isinstance(markers, Markers) else None  # ModelConfig coerces tuples


def _fingerprint(model: Model) -> str:
    return "hearth-" + model.model_info().effective_fingerprint[:12]


async def _chat_chunks(gen: Generation, reply: ChatReply, req: ChatRequest, rid: str) -> AsyncIterator[str]:
    head: dict[str, Any] = {"id": rid, "object": "chat.completion.chunk", "created": int(time.time()), "model": req.model}
    extra = {"usage": None} if req.include_usage else {}

    def chunk(delta: dict[str, Any], reason: str | None = None) -> str:
        return sse({**head, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": reason}], **extra})

    yield chunk({"role": "assistant", "content": ""})
    async for event in gen.events():
        for delta in reply.on_event(event):
            yield chunk(delta)
        if isinstance(event, Error):
            yield sse({"error": {"message": event.reason, "type": "server_error", "param": None, "code": event.code}})
            return
        if isinstance(event, Done) and gen.server_stopping:
            yield sse(gen.stopping_error().body())
            return
        if isinstance(event, Done):
            deltas, reason = reply.close(event)
            for delta in deltas:
                yield chunk(delta)
            yield chunk({}, reason)
            if req.include_usage:
                yield sse({**head, "choices": [], "usage": usage(event.stats)})
    yield sse("[DONE]")


@router.post("/v1/completions")
async def completions(request: Request) -> Response:
    state = _state(request)
    req = parse_completion(await read_json(request))
    model = state.model(req.model)
    memo = state.memo(model)
    if not isinstance(req.prompt, str):
        state.check_token_ids(model, req.prompt, "prompt")
    with model.arriving():  # the cache's writes wait while the prompt is tokenized and admitted
        tokens = await asyncio.to_thread(
            lambda: memo.align(model.tokenize(req.prompt) if isinstance(req.prompt, str) else list(req.prompt))
        )
        state.check_prompt(model, len(tokens))
        record = state.begin(request, "completions", req.model, stream=req.stream, prefix="cmpl")
        opts = engine_options(model, tokens, req.sampling.max_tokens, req.sampling.engine_options(), req.sampling.grammar)
        gen = Generation(state, record, model, tokens, opts)
        await gen.start()
    if req.stream:
        return EventStreamResponse(_completion_chunks(gen, req, record.id), gen.cancel)
    async with on_disconnect(request.receive, gen.cancel):
        events = await gen.collect()
    done = events[-1]
    assert isinstance(done, Done)
    text = "".join(e.text for e in events if isinstance(e, Token))
    return JSONResponse({
        "id": record.id, "object": "text_completion", "created": int(record.started_at), "model": req.model,
        "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason(done.stats)}],
        "usage": usage(done.stats), "system_fingerprint": _fingerprint(model),
    })  # fmt: skip


async def _completion_chunks(gen: Generation, req: CompletionRequest, rid: str) -> AsyncIterator[str]:
    head: dict[str, Any] = {"id": rid, "object": "text_completion", "created": int(time.time()), "model": req.model}

    def chunk(text: str, reason: str | None = None) -> str:
        body = {**head, "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": reason}]}
        return sse({**body, "usage": None} if req.include_usage else body)

    async for event in gen.events():
        if isinstance(event, Token):
            yield chunk(event.text)
        elif isinstance(event, Error):
            yield sse({"error": {"message": event.reason, "type": "server_error", "param": None, "code": event.code}})
            return
        elif isinstance(event, Done) and gen.server_stopping:
            yield sse(gen.stopping_error().body())
            return
        elif isinstance(event, Done):
            yield chunk("", finish_reason(event.stats))
            if req.include_usage:
                yield sse({**head, "choices": [], "usage": usage(event.stats)})
    yield sse("[DONE]")
