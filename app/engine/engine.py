"""The Engine: the registry of loaded models, the shared cache store and its counters."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

from app.cache.keys import FingerprintCache, KeyMeta
from app.engine.backend import Backend, BackendInfo
from app.engine.cache_hooks import CacheHooks, NullCache, QuietCache, StoreCache
from app.engine.chat_template import resolve_chat_format
from app.engine.config import Markers, ModelConfig
from app.engine.errors import EngineError, InvalidRequest, NBatchTooSmall, NotFound
from app.engine.events import ModelInfo
from app.engine.llama import native_probe
from app.engine.memory.memory_budget import Fitting, MemoryBudget
from app.engine.model import Model
from app.engine.scheduling.scheduler import Scheduler, start_thread
from app.engine.speculation.draft_model import CATCH_UP_TOKENS, DraftCache
from app.engine.text import MarkerTokens

log = logging.getLogger(__name__)

BackendFactory = Callable[[ModelConfig], Backend]
ThreadStarter = Callable[[Scheduler, str], Any]


def llama_backend_factory(config: ModelConfig, fingerprint_of: Callable[[str], bytes] | None = None) -> Backend:
    from app.cache.keys import file_sha256
    from app.engine.llama import kv_calibration
    from app.engine.llama.llama_backend import LlamaBackend

    type_k, type_v, kv_choice = config.type_k, config.type_v, None
    if type_k == kv_calibration.AUTO:
        choice = kv_calibration.resolve(config.path, flash_attn=config.flash_attn)
        type_k, type_v, kv_choice = choice.type_k, choice.type_v, choice.why
    return LlamaBackend(
        config.path,
        n_ctx_per_seq=config.n_ctx_per_seq,
        n_seq_max=config.n_seq_max,
        n_batch=config.n_batch,
        n_gpu_layers=config.n_gpu_layers,
        n_threads=config.n_threads,
        n_threads_batch=config.n_threads_batch,
        n_threads_background=config.n_threads_background,
        n_ubatch=config.n_ubatch,
        flash_attn=config.flash_attn,
        type_k=type_k,
        type_v=type_v,
        kv_choice=kv_choice,
        swa_full=config.swa_full,
        fingerprint_of=fingerprint_of or file_sha256,
    )


class Engine:
    """Owns the cache store and every loaded model.

    ``backend_factory`` and ``start_thread`` are seams: tests hand in a stub backend, the
    GUI hands in a starter that runs each scheduler loop in a QThread.
    """

    def __init__(
        self,
        data_dir: str | Path,
        *,
        cache_quotas: dict[str, int] | None = None,
        backend_factory: BackendFactory | None = None,
        thread_starter: ThreadStarter = start_thread,
        memory_cap: int | None = None,
    ) -> None:
        """``memory_cap``: the most bytes Hearth's resident memory may take (None: a share of
        what the machine has, ``app.engine.memory.memory_budget``)."""
        self.data_dir = Path(data_dir)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._fingerprints = FingerprintCache(self.data_dir)
        self._backend_factory = backend_factory or (
            lambda config: llama_backend_factory(config, self._fingerprints.get)
        )
        self._probes_native = backend_factory is None
        """llama.cpp's own backend: a crash probe runs before its first load (native_probe)."""
        self._thread_starter = thread_starter
        self._quotas = cache_quotas
        self._cache: Any = None
        self._models: Mapping[str, Model] = MappingProxyType({})
        """Replaced whole under ``_registry`` on every change, so any thread may read it."""
        self._loading: set[str] = set()
        self._threads: dict[str, Any] = {}
        self._registry = threading.Lock()
        self._lock = threading.Lock()
        self._closed = False
        self.memory = MemoryBudget(memory_cap)
        """The one memory budget: loads are fitted against it, the RAM tier and pools give way."""
        self.fit_words: dict[str, str] = {}
        """What the fit chose for each loaded model and why (``load_model(fit="choose")``)."""

    @property
    def native_notice(self) -> str | None:
        """What the native crash probe found and did, in words (None: nothing to say)."""
        result = native_probe.last_result() if self._probes_native else None
        return result.notice if result else None

    @property
    def cache(self) -> Any:
        """The CacheStore (docs/design.md §4), opened on first use."""
        with self._lock:
            if self._cache is None:
                from app.cache.store import CacheStore

                self._cache = CacheStore(self.data_dir / "cache", quotas=self._quotas)
            return self._cache

    def load_model(self, model_id: str, config: ModelConfig, *, fit: Fitting = "check") -> Model:
        """Load a model. ``fit``: ``check`` refuses (``DoesNotFit``, with its numbers) a config
        whose estimate does not fit the budget, before llama.cpp allocates anything;
        ``choose`` fits ``n_ctx`` / ``n_seq_max`` (the config's are the most wanted; the
        choice in words: ``fit_words``); ``force`` loads against the estimate."""
        if config.n_batch < config.n_seq_max:
            raise NBatchTooSmall(
                f"n_batch={config.n_batch} cannot hold one decode row for each of "
                f"n_seq_max={config.n_seq_max} sequences"
            )
        with self._registry:
            if self._closed:
                raise EngineError("the engine is closed")
            if model_id in self._models or model_id in self._loading:
                raise InvalidRequest(f"a model with id {model_id!r} is already loaded")
            self._loading.add(model_id)
        try:
            config, words = self.memory.admit(config, self._cache_if_used(config), fit)
            if self._probes_native:
                native_probe.ensure(_probe_model(config.path))
            backend = self._backend_factory(config)
            try:
                model = self._build_model(model_id, config, backend)
            except BaseException:
                backend.close()
                raise
            with self._registry:
                self._models = MappingProxyType({**self._models, model_id: model})
            self.memory.loaded(model_id, config, self._cache)
            if words:
                self.fit_words[model_id] = words
            self.memory.watch(lambda: self._cache)
        finally:
            with self._registry:
                self._loading.discard(model_id)
        if self._closed:  # closed while this model loaded: it must not outlive the engine
            self.unload(model_id)
            raise EngineError("the engine is closed")
        return model

    def _build_model(self, model_id: str, config: ModelConfig, backend: Backend) -> Model:
        backend.info = info = _with_chat_format(backend, config)
        policy = config.cache_policy
        hooks: CacheHooks = NullCache(policy)
        meta = None
        if config.cache_enabled:
            hooks = StoreCache(
                self.cache,
                model_id=model_id,
                policy=policy,
                tier=config.tier,
                context_size=config.n_ctx_per_seq,
                quant_bits=info.quant_bits,
                detokenize=backend.detokenize,
                kv_streams=info.kv_streams,
            )
            meta = KeyMeta(info.fingerprint, info.quant_type, info.ctx_params_hash)
            try:
                self.cache.prepare_restores(meta)  # the first restore after a start finds warm memory
            except Exception:  # never worth a model
                log.exception("preparing memory for %s's restores failed", model_id)
        thinking = _marker_tokens(backend, config.thinking_markers, info.chat_template, "<think>", "</think>")
        tools = _marker_tokens(backend, config.tool_call_markers, info.chat_template, "<tool_call>", "</tool_call>")
        scheduler = Scheduler(backend, config, hooks, meta, thinking_markers=thinking, tool_markers=tools)
        thread = self._thread_starter(scheduler, f"scheduler-{model_id}")
        with self._registry:
            self._threads[model_id] = thread
        return Model(
            model_id, config, backend, scheduler, tier=config.tier,
            draft_loader=lambda draft_id: self._draft_backend(config, draft_id),
            draft_cache=lambda draft_id, draft: self._draft_cache(config, draft_id, draft),
        )  # fmt: skip

    def _draft_backend(self, target: ModelConfig, draft_id: str) -> Backend:
        """A backend of the loaded model ``draft_id`` sized to draft for ``target``: a seq per
        target seq of the target's context (``Model.use_draft``)."""
        source = self.get_model(draft_id)
        config = replace(
            source.config, n_ctx=target.n_ctx, n_seq_max=target.n_seq_max,
            n_batch=max(CATCH_UP_TOKENS, target.n_seq_max), n_ubatch=None, n_threads=target.n_threads,
            cache_enabled=False,
        )  # fmt: skip
        return self._backend_factory(config)

    def _draft_cache(self, target: ModelConfig, draft_id: str, draft: Backend) -> DraftCache | None:
        """Where the draft backend ``draft`` caches its KV: the model's store, tier and policy,
        under the draft backend's own identity (model id ``<draft id>:draft``); its lookups and
        saves count none of the model's hits and misses. None when the model's cache is off."""
        if not target.cache_enabled:
            return None
        info = draft.info
        hooks = StoreCache(
            self.cache, model_id=f"{draft_id}:draft", policy=target.cache_policy, tier=target.tier,
            context_size=target.n_ctx_per_seq, quant_bits=info.quant_bits, detokenize=draft.detokenize,
            kv_streams=info.kv_streams,
        )  # fmt: skip
        return DraftCache(QuietCache(hooks), KeyMeta(info.fingerprint, info.quant_type, info.ctx_params_hash))

    def list_models(self) -> list[ModelInfo]:
        return [m.model_info() for m in self._models.values()]

    def get_model(self, model_id: str) -> Model:
        try:
            return self._models[model_id]
        except KeyError:
            raise NotFound(f"no loaded model {model_id!r}") from None

    def unload(self, model_id: str) -> None:
        """Idempotent: ``shutdown`` saves, every request ends, the thread stops, memory is freed."""
        with self._registry:
            model = self._models.get(model_id)
            if model is None:
                return
            self._models = MappingProxyType({k: m for k, m in self._models.items() if k != model_id})
            thread = self._threads.pop(model_id, None)
        for other in self._models.values():  # it drafts for no one once it is gone
            if other.draft_id == model_id:
                try:
                    other.use_draft(None)
                except EngineError as exc:
                    log.warning("model %s: detaching draft model %s: %s", other.id, model_id, exc)
        model.close()
        self.fit_words.pop(model_id, None)
        if thread is not None and hasattr(thread, "join"):
            thread.join(timeout=30)
        if model.scheduler.has_stopped:
            model._free_native()
            self.memory.unloaded(model_id, self._cache)  # (its memory freed: the RAM tier may have it)
        else:  # freeing the context under a running llama_decode would crash the process
            log.error("model %s: the scheduler thread did not stop; its native memory stays allocated", model_id)

    def _cache_if_used(self, config: ModelConfig) -> Any:
        """The store a load may make room in: opened already, or about to be (cache on)."""
        return self.cache if config.cache_enabled or self._cache is not None else None

    def set_memory_cap(self, cap: int | None) -> None:
        """The most bytes Hearth's memory may take (None: automatic); the RAM tier follows."""
        self.memory.cap_setting = cap
        self.memory.fit_tier(self._cache)

    def fit_verdict(self, path: str, n_ctx: int, n_seq_max: int, n_batch: int = 512) -> Any:
        """Would loading ``path`` with these settings fit now (``MemoryBudget.verdict``)?"""
        return self.memory.verdict(path, n_ctx, n_seq_max, n_batch=n_batch, store=self._cache)

    def fit_choice(self, path: str, n_ctx: int, n_seq_max: int, n_batch: int = 512) -> Any:
        """What ``load_model(fit="choose")`` would pick now (``MemoryBudget.choice``)."""
        return self.memory.choice(path, n_ctx, n_seq_max, n_batch=n_batch, store=self._cache)

    def memory_status(self) -> dict[str, Any]:
        """The budget's parts and cap (bytes), and what each model's fit chose."""
        out = self.memory.parts(self._cache).as_dict()
        out["fit"] = dict(self.fit_words)
        return out

    def counters(self) -> dict[str, int]:
        counters: dict[str, int] = self.cache.counters()
        return counters

    def close(self) -> None:
        """Shutdown saves for in-flight requests, then free every model and the store."""
        with self._registry:
            if self._closed:
                return
            self._closed = True
        for model_id in list(self._models):
            try:
                self.unload(model_id)
            except Exception:
                log.exception("unloading %s failed", model_id)
        self.memory.close()
        if self._cache is not None:
            self._cache.close()

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _probe_model(path: str) -> str:
    """The model the crash probe decodes with: the bundled default (small, known), else ``path``."""
    from app.models.default_model import DefaultModelMissing, default_model_path

    try:
        return str(default_model_path())
    except DefaultModelMissing:
        return path


def _with_chat_format(backend: Backend, config: ModelConfig) -> BackendInfo:
    """The backend's info with the chat template its chats render with (the config's, the
    GGUF's, or a built-in format chosen by the architecture and vocabulary) in
    ``chat_template`` and what it is in ``extra["chat_format"]``: "file", "custom", a built-in
    format's name, or None (no format: ``render_chat_template`` refuses its chats with words)."""
    info = backend.info

    def has_token(text: str) -> bool:
        tokens = backend.tokenize(text, add_special=False, parse_special=True)
        return len(tokens) == 1 and backend.token_piece(tokens[0]) == text.encode()

    arch = str(info.extra.get("architecture") or "")
    source, name = resolve_chat_format(info.chat_template, config.chat_template, arch, has_token)
    return replace(info, chat_template=source, extra={**info.extra, "chat_format": name})


def _marker_tokens(
    backend: Backend, configured: Markers | tuple[str, str] | None, template: str | None, open_: str, close: str
) -> MarkerTokens | None:
    """Markers from the config, else from the chat template when it mentions them."""
    if configured is None:
        if not template or open_ not in template:
            return None
        configured = Markers(open_, close)
    elif isinstance(configured, tuple):
        configured = Markers(*configured)

    def encode(text: str) -> tuple[int, ...]:
        return tuple(backend.tokenize(text, add_special=False, parse_special=True))

    return MarkerTokens(encode(configured.open), encode(configured.close))
