"""The ``Model`` handle: a thread-safe API over one model's scheduler thread (docs/design.md §1).

Every method posts to the scheduler thread and waits (or returns a ``Stream``). Tokenizing
reads only the vocabulary, which llama.cpp allows from any thread, so ``tokenize`` and
``detokenize`` run on the caller's thread and stay fast while the model generates.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import replace
from functools import partial
from typing import Any, TypeVar

from app.cache.keys import KeyMeta
from app.engine.backend import Backend
from app.engine.cache_hooks import Arrival
from app.engine.config import ModelConfig
from app.engine.errors import EngineError, InvalidRequest, NotFound
from app.engine.events import (
    CompletionResult,
    Event,
    ModelInfo,
    PrefillResult,
    SchedulerSnapshot,
)
from app.engine.lora import AdapterListing, LoraSet
from app.engine.request import Mode
from app.engine.scheduling.admission import Admission
from app.engine.scheduling.commands import (
    Admit,
    AttachDraft,
    Cancel,
    ChangeAdapters,
    Embed,
    EndSession,
    SaveInFlight,
    Verify,
    WindDown,
)
from app.engine.scheduling.scheduler import Scheduler
from app.engine.speculation.draft_model import DraftCache, DraftModel, check_compatible
from app.engine.stream import Stream, refused_read
from app.engine.validation import (
    adapter_sha256,
    check_adapter_scale,
    check_chat_request,
    check_handle,
    check_priority,
    check_session_id,
    check_text,
    check_tokens,
    check_verify,
    parse_options,
)

log = logging.getLogger(__name__)

_refs = itertools.count(1)
T = TypeVar("T")


class Model:
    """Handle to one loaded model. All methods are thread-safe."""

    def __init__(
        self,
        model_id: str,
        config: ModelConfig,
        backend: Backend,
        scheduler: Scheduler,
        *,
        tier: str,
        draft_loader: Callable[[str], Backend] | None = None,
        draft_cache: Callable[[str, Backend], DraftCache | None] | None = None,
    ) -> None:
        self.id = model_id
        self.config = config
        self.backend = backend
        self.scheduler = scheduler
        self.tier = tier
        self.loaded_at = time.time()
        self._lora = LoraSet(backend)
        self._vocab_readers_changed = threading.Condition()
        self._num_vocab_readers = 0
        self._closed = False
        self._draft_loader = draft_loader
        """Loads a backend of another loaded model to draft for this one (the Engine's)."""
        self._draft_cache = draft_cache
        """Where a draft backend's KV is cached (the Engine's; None: not cached)."""
        self._draft_lock = threading.Lock()
        self.draft_id: str | None = None
        """The attached draft model's id (``use_draft``)."""

    # ------------------------------------------------------------------ requests

    def complete(self, prompt: str, **opts: Any) -> CompletionResult:
        tokens = self.tokenize(prompt)
        adm = self._admission(Mode.COMPLETE, tokens, opts, default_tokens=4, emit=lambda e: None)
        self._post_admit(adm)
        result: CompletionResult = adm.result.result()
        return result

    def prefill_only(self, tokens: Sequence[int], *, priority: str = "normal", **opts: Any) -> PrefillResult:
        """Read ``tokens`` into a seq, no sampling; blocks until read. ``priority="background"``
        (beyond the core API, needs ``session_id``): the lowest priority, for type-ahead — see
        ``read_ahead``, its non-blocking form."""
        adm = self._admission(Mode.PREFILL_ONLY, tokens, opts, default_tokens=0, emit=lambda e: None, priority=priority)
        self._post_admit(adm)
        result: PrefillResult = adm.result.result()
        return result

    def read_ahead(
        self, tokens: Sequence[int], *, session_id: str, on_event: Callable[[Event], None] | None = None, **opts: Any
    ) -> Stream:
        """Type-ahead (beyond the core API): ``prefill_only(tokens, priority="background")`` without
        waiting. The session's seq is brought to ``tokens`` (what it holds is reused, a tail
        that differs is dropped) at the lowest priority (``app.engine.scheduling.read_ahead``); the
        stream gives ``PrefillProgress`` events, then ``Done`` (``cancelled`` when a real
        request of the session, a newer ``read_ahead`` or ``cancel`` ended it first: what it
        read stays in the session's seq either way) or ``Error``. Send the real request as
        usual (``infer`` with the whole prompt): it reuses what was read ahead.

        Returns at once: the admission runs on the scheduler thread after the tick in flight
        (a background slice of up to ``read_ahead.CHUNK`` tokens), and a refusal there (the
        session's reply is streaming, the prompt does not fit) ends the stream with ``Error``.
        NOTE: waiting for the admission, as ``infer`` does, held the app's bridge thread for
        a whole slice per read: a message sent meanwhile queued behind it (B11's paste turn)."""
        ref = next(_refs)
        stream = Stream(ref, self.cancel, on_event)
        opts = {**opts, "session_id": session_id}
        adm = self._admission(
            Mode.PREFILL_ONLY, tokens, opts, default_tokens=0, emit=stream._push, ref=ref, priority="background"
        )
        self.scheduler.post(Admit(adm)).add_done_callback(partial(refused_read, stream))
        return stream

    def infer(
        self, tokens: Sequence[int], *, on_event: Callable[[Event], None] | None = None,
        on_reading: Callable[[], None] | None = None, **params: Any,
    ) -> Stream:
        """The core API's ``infer``. Beyond it, ``on_reading`` is called (once, on the scheduler
        thread; keep it short) right before the request's first batch goes to llama.cpp: the
        moment its prompt starts being read, with the GIL about to be free (what the GUI
        waits for after a send, ``EngineBridge.submit``). Not called for a request that ends
        before it is decoded."""
        ref = next(_refs)
        stream = Stream(ref, self.cancel, on_event)
        adm = self._admission(
            Mode.STREAM, tokens, params, default_tokens=64, emit=stream._push, ref=ref, on_reading=on_reading
        )
        self._post_admit(adm)
        return stream

    def continue_session(
        self, suffix_tokens: Sequence[int], *, session_id: str, on_event: Callable[[Event], None] | None = None,
        on_reading: Callable[[], None] | None = None, **params: Any,
    ) -> Stream:
        """The core API's ``continue_session``; ``on_reading`` as for ``infer``."""
        ref = next(_refs)
        stream = Stream(ref, self.cancel, on_event)
        params = {**params, "session_id": session_id}
        adm = self._admission(
            Mode.STREAM, [], params, default_tokens=64, emit=stream._push, ref=ref, continue_suffix=suffix_tokens,
            on_reading=on_reading,
        )
        self._post_admit(adm)
        return stream

    def _admission(
        self, mode: Mode, tokens: Sequence[int], opts: dict[str, Any], *, default_tokens: int,
        emit: Callable[[Event], None], ref: int | None = None, priority: object = "normal",
        continue_suffix: Sequence[int] | None = None, on_reading: Callable[[], None] | None = None,
    ) -> Admission:
        self._check_open()
        options = parse_options(opts, default_tokens)
        if options.draft_model not in (None, self.draft_id) and self.scheduler.speculator.can_draft:
            self.use_draft(options.draft_model)  # (a model that never drafts ignores the pick)
        grammar = options.sampling.grammar
        if grammar:
            # Before llama.cpp sees it: it aborts the process on a grammar it cannot follow.
            self._with_vocab(lambda: self.backend.check_grammar(grammar))
        n_vocab = self.backend.info.n_vocab
        prompt = tuple(check_tokens(tokens, n_vocab))
        options = replace(options, priority=check_priority(priority, options))
        suffix = None if continue_suffix is None else tuple(check_tokens(continue_suffix, n_vocab, what="suffix_tokens"))
        return Admission(
            next(_refs) if ref is None else ref, mode, prompt, options, emit, continue_suffix=suffix, on_reading=on_reading
        )

    def _post_admit(self, adm: Admission) -> None:
        if adm.options.priority == "background":  # type-ahead holds nothing back
            self.scheduler.call(Admit(adm))
            return
        with self.scheduler.arrivals.arriving() as arrival:
            self.scheduler.call(Admit(adm, arrival))

    def arriving(self) -> AbstractContextManager[Arrival]:
        """Around preparing a request for this model (a server rendering and tokenizing it,
        through ``infer``): queued cache writes wait meanwhile (``Arrivals``)."""
        return self.scheduler.arrivals.arriving()

    def cancel(self, ref: int) -> None:
        """Idempotent; unknown refs are ignored. Observed at the next tick boundary."""
        self.scheduler.post(Cancel(ref))

    def end_session(self, session_id: str) -> None:
        session_id = check_session_id(session_id)
        self.scheduler.call(EndSession(session_id))

    def evict(self) -> None:
        self.scheduler.call(SaveInFlight("evict"))

    def shutdown(self) -> None:
        self.scheduler.call(SaveInFlight("shutdown"))

    # ------------------------------------------------------------------ observation

    def status(self) -> str:
        return self.scheduler.snapshot.phase

    def snapshot(self) -> SchedulerSnapshot:
        """Lock-free: the record the scheduler published after its last tick."""
        return self.scheduler.snapshot

    def model_info(self) -> ModelInfo:
        snap = self.scheduler.snapshot
        info = self.backend.info
        free = sum(1 for s in snap.slots if s.state == "free")
        base = info.fingerprint.hex()
        meta = self.scheduler.meta
        return ModelInfo(
            id=self.id,
            path=self.config.path,
            status=snap.phase,
            phase=snap.phase,
            pending_len=snap.pending_len,
            last_cache_hit=snap.last_cache_hit,
            backend=info.name,
            context_size=self.config.n_ctx_per_seq,
            n_seq_max=self.config.n_seq_max,
            available_seqs=free,
            quant_type=info.quant_type,
            quant_bits=info.quant_bits,
            quant_tag=info.quant_type,
            tier=self.tier,
            fingerprint=base,
            effective_fingerprint=self.effective_fingerprint().hex() if meta is None else meta.fingerprint.hex(),
            loaded_at=self.loaded_at,
            vram_estimate_b=info.vram_estimate_b,
            memory=info.memory.kind,
            memory_reuse=info.memory.reuse_words,
            kv_cells=str(info.extra.get("kv_cells", "")),
        )

    def cache_key_meta(self) -> dict[str, Any]:
        info = self.backend.info
        return {
            "fingerprint": self.effective_fingerprint(),
            "quant_type": info.quant_type,
            "ctx_params_hash": info.ctx_params_hash,
        }

    # ------------------------------------------------------------------ text

    def tokenize(self, text: str) -> list[int]:
        text = check_text(text)
        return self._with_vocab(lambda: self.backend.tokenize(text))

    def detokenize(self, tokens: Sequence[int]) -> str:
        tokens = check_tokens(tokens, self.backend.info.n_vocab, what="tokens")
        return self._with_vocab(lambda: self.backend.detokenize(tokens))

    def _check_open(self) -> None:
        if self._closed:
            raise NotFound(f"model {self.id!r} is unloaded")

    def _with_vocab(self, read: Callable[[], T]) -> T:
        """Run a vocabulary read on the caller's thread (llama.cpp allows it from any thread).

        The vocabulary is freed with the model: an unloaded model refuses, and ``_free_native``
        waits for a read already running instead of freeing the memory under it.
        """
        with self._vocab_readers_changed:
            self._check_open()
            self._num_vocab_readers += 1
        try:
            return read()
        finally:
            with self._vocab_readers_changed:
                self._num_vocab_readers -= 1
                self._vocab_readers_changed.notify_all()

    def apply_chat_template(self, request: dict[str, Any]) -> list[int]:
        """Render ``{"messages", "system"?, "tools"?}`` with the GGUF's own template."""
        messages, tools = check_chat_request(request)
        self._check_open()
        text = self.backend.apply_chat_template(messages, True, tools)  # Python only: no vocabulary
        return self._with_vocab(lambda: self.backend.tokenize(text, add_special=False, parse_special=True))

    def embed(self, tokens: Sequence[int]) -> list[float]:
        tokens = check_tokens(tokens, self.backend.info.n_vocab, what="tokens")
        result: list[float] = self.scheduler.call(Embed(tuple(tokens)))
        return result

    # ------------------------------------------------------------------ adapters

    def load_adapter(self, path: str) -> int:
        """Attach a LoRA at scale 1.0; the effective fingerprint changes for new requests."""
        sha = adapter_sha256(path)
        return self._change_adapters(lambda: self._lora.attach(path, sha))

    def unload_adapter(self, handle: int) -> None:
        handle = check_handle(handle)
        self._change_adapters(lambda: self._lora.detach(handle))

    def set_adapter_scale(self, handle: int, scale: float) -> None:
        handle, scale = check_handle(handle), check_adapter_scale(scale)  # before llama.cpp sees them
        self._change_adapters(lambda: self._lora.rescale(handle, scale))

    def list_adapters(self) -> list[AdapterListing]:
        return self._lora.listing()

    def effective_fingerprint(self) -> bytes:
        return self._lora.fingerprint(self.backend.info.fingerprint)

    def _change_adapters(self, change: Callable[[], T]) -> T:
        """Run ``change`` on the scheduler thread, then give new requests the new cache
        identity (see ``Scheduler.adapters_changed``) — also after a failed change, whose
        native state cannot be trusted to equal the old one."""

        def new_meta() -> KeyMeta:
            info = self.backend.info
            return KeyMeta(self.effective_fingerprint(), info.quant_type, info.ctx_params_hash)

        result: T = self.scheduler.call(ChangeAdapters(change, new_meta))
        return result

    # ------------------------------------------------------------------ speculative decoding

    def verify(self, prefix: Sequence[int], candidates: Sequence[int], k: int) -> tuple[int, int | str]:
        """Greedy check of up to ``k`` draft tokens; ``Busy`` unless the model is idle."""
        drafts = check_verify(prefix, candidates, k, self.backend.info.n_vocab)
        accepted, nxt = self.scheduler.call(Verify(tuple(drafts[0]), tuple(drafts[1])))
        return accepted, "eos" if nxt is None else nxt

    def use_draft(self, draft_id: str | None) -> None:
        """Beyond the core API: draft with the loaded model ``draft_id`` for the requests that name it
        (``draft_model=``; a request naming another one attaches that one instead); None
        detaches. The draft model gets a backend of its own (its weights, a KV stream per
        sequence of this model's size), loaded on the caller's thread; it must have this
        model's vocabulary and memory that can drop a rejected tail, and this model must be
        able to draft at all (``InvalidRequest`` otherwise; ``NotFound`` for an unknown id)."""
        with self._draft_lock:
            self._check_open()
            if draft_id == self.draft_id:
                return
            if draft_id is None:
                self.scheduler.call(AttachDraft(None))
                self.draft_id = None
                return
            memory = self.backend.info.memory
            if not self.scheduler.speculator.can_draft:
                raise InvalidRequest(f"model {self.id!r} has {memory.kind} memory: it cannot drop rejected drafts, so it never drafts")
            if self._draft_loader is None:
                raise InvalidRequest(f"model {self.id!r} cannot load a draft model")
            backend = self._draft_loader(draft_id)
            try:
                self._with_vocab(lambda: check_compatible(self.backend, backend))
                cache = self._draft_cache(draft_id, backend) if self._draft_cache is not None else None
                draft = DraftModel(draft_id, backend, cache)
                draft.calibrate()
                self.scheduler.call(AttachDraft(draft))
            except BaseException:
                backend.close()
                raise
            self.draft_id = draft_id

    # ------------------------------------------------------------------ lifecycle

    def close(self, save: bool = True) -> None:
        """Fire ``shutdown`` saves for in-flight requests, cancel them, stop the thread."""
        if self._closed:
            return
        self._closed = True
        try:
            self.scheduler.call(WindDown(save), timeout=60)
        except EngineError as exc:  # the scheduler had stopped already: its requests have ended
            log.warning("model %s: %s", self.id, exc)
        finally:
            self.scheduler.stop()

    def _free_native(self) -> None:
        """After the scheduler thread has ended: free the adapters, then the backend (once no
        vocabulary read is running: ``close`` has made every new one refuse)."""
        with self._vocab_readers_changed:
            self._vocab_readers_changed.wait_for(lambda: self._num_vocab_readers == 0)
            self._lora.free_all()
            self.scheduler.commands.attach_draft(None)  # the thread has ended: nothing uses it any more
            self.backend.close()
