"""What every route shares: the models it serves, the settings, the request log, the memos.

``ModelProvider`` is all the server needs from an engine: the Engine itself fits it, so
``hearth serve`` and the app's "Local server" switch serve whatever that engine has loaded —
the same scheduler, the same KV cache.
"""

from __future__ import annotations

import json
import secrets
import threading
import time
from collections.abc import Sequence
from typing import Any, Protocol

from starlette.requests import Request

from app.engine import Model
from app.engine.errors import NotFound
from app.engine.events import ModelInfo
from app.server.activity import Activity, RequestRecord
from app.server.alignment import TokenMemo
from app.server.config import ServerConfig
from app.server.errors import ApiError, model_not_found
from app.server.fields import check_json, too_deep


class ModelProvider(Protocol):
    def list_models(self) -> list[ModelInfo]: ...

    def get_model(self, model_id: str) -> Model: ...


class ServerState:
    def __init__(self, provider: ModelProvider, config: ServerConfig, activity: Activity | None = None) -> None:
        self.provider = provider
        self.config = config
        self.activity = activity or Activity()
        self._memos: dict[tuple[str, float], TokenMemo] = {}
        self._running: set[Any] = set()
        """The ``Generation``s admitted and not finished (for ``stop_all``), under ``_lock``:
        added and discarded on uvicorn's thread, read by the thread that stops the server."""
        self._lock = threading.Lock()

    def admitted(self, gen: Any) -> None:
        with self._lock:
            self._running.add(gen)

    def finished(self, gen: Any) -> None:
        with self._lock:
            self._running.discard(gen)

    def running(self) -> list[Any]:
        with self._lock:
            return list(self._running)

    def stop_all(self) -> None:
        """The server is stopping: end every running generation (from any thread)."""
        for gen in self.running():
            gen.stop_for_shutdown()

    def model(self, model_id: str) -> Model:
        try:
            return self.provider.get_model(model_id)
        except NotFound:
            raise model_not_found(model_id) from None

    def memo(self, model: Model) -> TokenMemo:
        """One memo per loaded model (a reload under the same id starts a new one)."""
        key = (model.id, model.loaded_at)
        with self._lock:
            memo = self._memos.get(key)
            if memo is None:
                live = {(m.id, m.loaded_at) for m in self.provider.list_models()}
                for stale in [k for k in self._memos if k not in live]:
                    del self._memos[stale]
                memo = self._memos[key] = TokenMemo(model.backend.token_piece)
                self._seed(memo, model)
            return memo

    def _seed(self, memo: TokenMemo, model: Model) -> None:
        """Start from the conversations the KV cache holds for this model (newest last).

        NOTE: after a restart the memo would be empty, and a client re-sending its
        conversation would get its replies tokenized afresh — different ids from the ones the
        saved KV holds, so the restore would stop at the first reply. The cache rows carry
        exactly the ids the engine held, including rows the app's own chats saved.
        """
        cache = getattr(self.provider, "cache", None)
        if cache is None or not model.config.cache_enabled:
            return
        fingerprint = model.effective_fingerprint().hex()
        rows = sorted((r for r in cache.rows() if r.fingerprint == fingerprint), key=lambda r: r.last_used)
        for row in rows[-memo.capacity:]:
            memo.remember(row.tokens)

    def prompt_limit(self, model: Model) -> int:
        """Longest prompt accepted: the configured limit, and always room for one reply token."""
        room = model.config.n_ctx - 1
        return room if self.config.max_prompt_tokens is None else min(room, self.config.max_prompt_tokens)

    @staticmethod
    def check_token_ids(model: Model, tokens: Sequence[int], param: str) -> None:
        """Token ids a client sent must be in the model's vocabulary (a 400 naming the field;
        NOTE: ``[49152]`` reached the alignment's token reads and was a 500)."""
        n_vocab = model.backend.info.n_vocab
        bad = next((t for t in tokens if not 0 <= t < n_vocab), None)
        if bad is not None:
            raise ApiError(400, f"Invalid value for '{param}': token id {bad} is outside the vocabulary "
                           f"of this model (0..{n_vocab - 1}).", param=param, code="invalid_value")

    def check_prompt(self, model: Model, n_tokens: int) -> None:
        limit = self.prompt_limit(model)
        if n_tokens > limit:
            raise ApiError(
                413,
                f"The prompt is {n_tokens} tokens; this server accepts at most {limit} "
                f"(model context: {model.config.n_ctx} tokens per conversation).",
                param="messages", code="prompt_too_long",
            )

    def begin(self, request: Request, endpoint: str, model: str, *, stream: bool, prefix: str) -> RequestRecord:
        client = request.client
        record = RequestRecord(
            id=f"{prefix}-{secrets.token_hex(12)}", endpoint=endpoint, model=model,
            client=f"{client.host}:{client.port}" if client else "?", started_at=time.time(), stream=stream,
        )
        return self.activity.start(record)


async def read_json(request: Request) -> Any:
    """The body as JSON: a 400 in OpenAI's shape when it does not parse, nests deeper than
    ``MAX_JSON_DEPTH`` or holds a lone surrogate (``"\ud800"`` parses, but is no text any
    tokenizer or template can take: it was a 500 later)."""
    body = await request.body()
    try:
        value = json.loads(body)
    except RecursionError:
        raise too_deep() from None
    except ValueError:
        raise ApiError(400, "We could not parse the JSON body of your request.", code="invalid_json") from None
    check_json(value, surrogates=b"\\ud" in body or b"\\uD" in body)
    return value
