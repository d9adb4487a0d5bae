"""``GET /v1/models``, ``POST /v1/embeddings``, ``GET /health`` and ``GET /hearth/status``.

``/hearth/status`` is Hearth's own: each model's scheduler phase and seq slots (what the app's
scheduler panel shows), the live requests and the last 50 finished ones — so a client or a test can see that a
cancelled request really freed its sequence.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
from typing import Any

import numpy as np
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from app.engine import Model
from app.server.errors import ApiError
from app.server.protocol import parse_embedding
from app.server.state import ServerState, read_json

router = APIRouter()


def _state(request: Request) -> ServerState:
    state: ServerState = request.app.state.hearth
    return state


@router.get("/health")
async def health() -> dict[str, str]:
    return {"status": "ok"}


def _model_json(model_id: str, loaded_at: float) -> dict[str, Any]:
    return {"id": model_id, "object": "model", "created": int(loaded_at), "owned_by": "hearth"}


@router.get("/v1/models")
async def list_models(request: Request) -> dict[str, Any]:
    infos = _state(request).provider.list_models()
    return {"object": "list", "data": [_model_json(m.id, m.loaded_at) for m in infos]}


@router.get("/v1/models/{model_id:path}")
async def get_model(model_id: str, request: Request) -> dict[str, Any]:
    model = _state(request).model(model_id)
    return _model_json(model.id, model.loaded_at)


@router.post("/v1/embeddings")
async def embeddings(request: Request) -> JSONResponse:
    state = _state(request)
    req = parse_embedding(await read_json(request))
    model = state.model(req.model)
    record = state.begin(request, "embeddings", req.model, stream=False, prefix="emb")
    try:
        vectors, n_tokens = await asyncio.to_thread(_embed_all, state, model, req.inputs)
    except ApiError as exc:
        state.activity.finish(record.id, "error", status=exc.status, error=exc.message)
        raise
    state.activity.finish(record.id, "done", prompt_tokens=n_tokens)
    data = [
        {"object": "embedding", "index": i,
         "embedding": base64.b64encode(np.asarray(v, dtype=np.float32).tobytes()).decode() if req.base64 else v}
        for i, v in enumerate(vectors)
    ]  # fmt: skip
    return JSONResponse({"object": "list", "data": data, "model": req.model,
                         "usage": {"prompt_tokens": n_tokens, "total_tokens": n_tokens}})


def _embed_all(state: ServerState, model: Model, inputs: tuple[str | tuple[int, ...], ...]) -> tuple[list[list[float]], int]:
    from app.engine.errors import EngineError
    from app.server.errors import from_engine

    vectors, total = [], 0
    for i, item in enumerate(inputs):
        tokens = model.tokenize(item) if isinstance(item, str) else list(item)
        if not isinstance(item, str):
            state.check_token_ids(model, tokens, "input")
        if not tokens:
            raise ApiError(400, f"input[{i}] is empty", param="input", code="invalid_value")
        state.check_prompt(model, len(tokens))
        try:
            vectors.append(model.embed(tokens))
        except EngineError as exc:
            raise from_engine(exc) from exc
        total += len(tokens)
    return vectors, total


@router.get("/hearth/status")
async def status(request: Request) -> dict[str, Any]:
    state = _state(request)
    models = []
    for info in state.provider.list_models():
        snap = state.provider.get_model(info.id).snapshot()
        models.append({
            "id": info.id, "phase": snap.phase, "pending": snap.pending_len,
            "tokens_generated": snap.num_tokens_generated,
            "slots": [dataclasses.asdict(s) for s in snap.slots],
            "speculation": {
                "enabled": snap.speculative, "drafted": snap.num_drafted, "accepted": snap.num_accepted,
                "draft_max": snap.draft_max, "draft_model": snap.draft_model,
            },
        })  # fmt: skip
    live = [dataclasses.asdict(r) for r in state.activity.live()]
    recent = [dataclasses.asdict(r) for r in state.activity.recent()[-50:]]
    out: dict[str, Any] = {"models": models, "requests": live, "recent": recent}
    memory_status = getattr(state.provider, "memory_status", None)
    if callable(memory_status):  # the one memory budget: its parts and cap (app.engine.memory.memory_budget)
        out["memory"] = await asyncio.to_thread(memory_status)
    return out
