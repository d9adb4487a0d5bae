"""What the desktop app needs from the engine, as Protocols (the UI↔engine boundary).

``app.engine.Engine`` / ``Model`` / ``Stream`` satisfy these structurally; so does the small
fake in ``tests/helpers/fake_engine.py``. Widgets and the bridge are typed against these
names instead of an untyped engine, so a reader sees exactly which engine calls the UI makes — and a
change in the engine that breaks one of them fails mypy here, not at run time.

Threading (docs/design.md §1): every ``ModelApi`` method is thread-safe, but the app calls the native
ones (``apply_chat_template``, ``tokenize``, ``detokenize``, ``infer``…) only from a model's
bridge thread (``app.ui.engine_bridge``), which is shut down before ``EngineApi.unload``
frees the model. ``snapshot`` and ``model_info`` are plain reads, safe from the GUI thread.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

from app.cache.store import CacheStore
from app.engine.config import ModelConfig
from app.engine.events import Event, ModelInfo, SchedulerSnapshot
from app.engine.lora import AdapterListing
from app.engine.model import Model

EventCallback = Callable[[Event], None]


class StreamApi(Protocol):
    """One streaming request (``Model.infer`` / ``continue_session``)."""

    ref: int

    def cancel(self) -> None: ...


class ModelApi(Protocol):
    """One loaded model (``app.engine.Model``)."""

    id: str
    config: ModelConfig

    def apply_chat_template(self, request: dict[str, object]) -> list[int]: ...

    def tokenize(self, text: str) -> list[int]: ...

    def detokenize(self, tokens: Sequence[int]) -> str: ...

    def infer(
        self,
        tokens: Sequence[int],
        *,
        on_event: EventCallback | None = None,
        on_reading: Callable[[], None] | None = None,
        **params: object,
    ) -> StreamApi:
        """``on_reading``: called once, on the engine's thread, as the prompt starts being
        read (``Model.infer``)."""
        ...

    def continue_session(
        self,
        suffix_tokens: Sequence[int],
        *,
        session_id: str,
        on_event: EventCallback | None = None,
        on_reading: Callable[[], None] | None = None,
        **params: object,
    ) -> StreamApi: ...

    def read_ahead(
        self,
        tokens: Sequence[int],
        *,
        session_id: str,
        on_event: EventCallback | None = None,
        **opts: object,
    ) -> StreamApi:
        """Type-ahead (docs/engine-api.md): a background ``prefill_only`` of a draft's prompt."""
        ...

    def end_session(self, session_id: str) -> None: ...

    def snapshot(self) -> SchedulerSnapshot: ...

    def model_info(self) -> ModelInfo: ...

    def effective_fingerprint(self) -> bytes: ...

    def load_adapter(self, path: str) -> int: ...

    def unload_adapter(self, handle: int) -> None: ...

    def set_adapter_scale(self, handle: int, scale: float) -> None: ...

    def list_adapters(self) -> list[AdapterListing]: ...


class EngineApi(Protocol):
    """The model registry (``app.engine.Engine``)."""

    data_dir: Path

    @property
    def cache(self) -> CacheStore:
        """The KV cache store (docs/design.md §4); its counters feed ``app.conversation.accounting``."""
        ...

    @property
    def native_notice(self) -> str | None:
        """What llama.cpp's crash probe found and did, in words (None: nothing to say)."""
        ...

    def load_model(self, model_id: str, config: ModelConfig) -> ModelApi: ...

    def unload(self, model_id: str) -> None: ...

    def get_model(self, model_id: str) -> ModelApi: ...

    def list_models(self) -> list[ModelInfo]: ...

    def counters(self) -> dict[str, int]: ...

    def close(self) -> None: ...


class ServedEngine(EngineApi, Protocol):
    """An engine the window's local server can serve (``app.ui.server.LocalServer``): the
    HTTP routes drive its models whole, so they are the engine's ``Model``; it is then also
    the server's ``app.server.state.ModelProvider``. ``app.engine.Engine`` is one."""

    def get_model(self, model_id: str) -> Model: ...
