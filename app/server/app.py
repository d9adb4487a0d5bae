"""``create_app``: the FastAPI application over a model provider (an ``Engine``)."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect

from app.engine.errors import EngineError
from app.server.activity import Activity
from app.server.config import ServerConfig
from app.server.errors import ApiError, error_body, from_engine
from app.server.guard import Guard
from app.server.routes_chat import router as chat_router
from app.server.routes_info import router as info_router
from app.server.state import ModelProvider, ServerState

log = logging.getLogger(__name__)


def create_app(provider: ModelProvider, config: ServerConfig | None = None, activity: Activity | None = None) -> FastAPI:
    config = config or ServerConfig()
    app = FastAPI(title="Hearth", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.hearth = ServerState(provider, config, activity)
    app.include_router(info_router)
    app.include_router(chat_router)

    @app.exception_handler(ApiError)
    async def api_error(request: Request, exc: ApiError) -> JSONResponse:
        return JSONResponse(exc.body(), status_code=exc.status)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
        code = "not_found" if exc.status_code == 404 else "method_not_allowed" if exc.status_code == 405 else None
        message = f"Unknown path {request.url.path}" if exc.status_code == 404 else str(exc.detail)
        return JSONResponse(error_body(message, code=code), status_code=exc.status_code)

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse(error_body(str(exc), code="invalid_value"), status_code=400)

    @app.exception_handler(EngineError)
    async def engine_error(request: Request, exc: EngineError) -> JSONResponse:
        # An engine refusal outside a generation (a template's bound, a tokenizer's check).
        api = from_engine(exc)
        return JSONResponse(api.body(), status_code=api.status)

    @app.exception_handler(ClientDisconnect)
    async def client_gone(request: Request, exc: ClientDisconnect) -> Response:
        # The client went (or was cut for sending its body too slowly) while the body was
        # read: nobody to answer, and nothing wrong with the server (not a logged traceback).
        return Response(status_code=400)

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("request to %s failed", request.url.path, exc_info=exc)
        body = error_body(f"The server failed: {type(exc).__name__}: {exc}", type_="server_error", code="internal_error")
        return JSONResponse(body, status_code=500)

    if config.cors_origins:
        from starlette.middleware.cors import CORSMiddleware

        app.add_middleware(CORSMiddleware, allow_origins=list(config.cors_origins), allow_methods=["GET", "POST"],
                           allow_headers=["authorization", "content-type"])
    # Outermost: Host / key / size checks run before CORS and routing.
    app.add_middleware(Guard, config=config)
    return app
