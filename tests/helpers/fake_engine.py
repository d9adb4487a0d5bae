"""A small in-process stand-in for ``app.engine.Engine`` / ``Model`` (the method names of docs/design.md §1).

It keeps the parts of the contract the desktop app relies on: byte-level tokens, a chat
template, streams delivered to an ``on_event`` callback on a worker thread (like the real
scheduler thread), sticky sessions, ``continue_session``, cancel, and a cache that survives a
restart (a JSON file under ``data_dir``) so the "after restart the next turn is a cache hit"
path can be exercised without llama.cpp.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from app.engine.errors import NoSession, NotFound, StickyBusy
from app.engine.events import (
    CacheDelta,
    Done,
    Error,
    Event,
    LastCacheHit,
    ModelInfo,
    PrefillProgress,
    SchedulerSnapshot,
    SlotInfo,
    Stats,
    Token,
    TokenId,
)

REPLY = (
    "Here is a short answer to **{q}**.\n\n"
    "```python\nprint('hello from hearth')\n```\n\n"
    "- it streams\n- it is cached\n"
)


def _encode(text: str) -> list[int]:
    return list(text.encode("utf-8"))


class FakeStream:
    def __init__(self, ref: int) -> None:
        self.ref = ref
        self.cancelled = threading.Event()
        self.done = threading.Event()
        self.stats: Stats | None = None

    def cancel(self) -> None:
        self.cancelled.set()

    def result(self, timeout: float | None = 30) -> Stats | None:
        self.done.wait(timeout)
        return self.stats


class FakeModel:
    def __init__(self, model_id: str, config: Any, cache_file: Path, token_delay_s: float) -> None:
        self.model_id = model_id
        self.config = config
        self.token_delay_s = token_delay_s
        self.fail_next: str | None = None
        self._cache_file = cache_file
        self._lock = threading.Lock()
        self._refs = itertools.count(1)
        self._sessions: dict[str, list[int]] = {}
        self._busy_sessions: set[str] = set()
        self._active = 0
        self._saved: list[list[int]] = self._load_cache()
        self.counters = {"hits_sticky": 0, "hits_longest_prefix": 0, "hits_exact": 0, "misses": 0}
        self.calls: list[tuple[str, int]] = []

    # -- the engine API (docs/design.md §1) -----------------------------------------------------------------

    def tokenize(self, text: str) -> list[int]:
        return _encode(text)

    def detokenize(self, tokens: list[int]) -> str:
        return bytes(tokens).decode("utf-8", errors="replace")

    def apply_chat_template(self, request: dict[str, Any]) -> list[int]:
        parts = []
        if request.get("system"):
            parts.append(f"<|system|>{request['system']}<|end|>\n")
        for msg in request["messages"]:
            parts.append(f"<|{msg['role']}|>{msg['content']}<|end|>\n")
        parts.append("<|assistant|>")
        return _encode("".join(parts))

    def infer(self, tokens: list[int], **params: Any) -> FakeStream:
        return self._start(list(tokens), continuation=False, **params)

    def continue_session(
        self, suffix_tokens: list[int], *, session_id: str, **params: Any
    ) -> FakeStream:
        with self._lock:
            if session_id not in self._sessions:
                raise NoSession(f"no session {session_id}")
            held = list(self._sessions[session_id])
        return self._start(
            held + list(suffix_tokens), continuation=True, session_id=session_id, **params
        )

    def read_ahead(
        self, tokens: list[int], *, session_id: str, on_event: Callable[[Event], None] | None = None, **_: Any
    ) -> FakeStream:
        """Type-ahead: the session holds ``tokens`` at once (its reply streaming: ``Error``)."""
        stream = FakeStream(next(self._refs))
        emit = on_event or (lambda _e: None)
        with self._lock:
            self.calls.append(("read_ahead", len(tokens)))
            busy = session_id in self._busy_sessions
            if not busy:
                self._sessions[session_id] = list(tokens)
        if busy:
            emit(Error(f"session {session_id} is generating", "sticky_busy"))
        else:
            emit(PrefillProgress(len(tokens), len(tokens)))
            stats = Stats(
                prompt_tokens=len(tokens), completion_tokens=0, prefill_ms=0.0, generation_ms=0.0, ttft_ms=0.0,
                cache_hit_kind="sticky", finish_reason="stop", cancelled=False, finish_key=None,
                committed_tokens=len(tokens),
            )  # fmt: skip
            stream.stats = stats
            emit(Done(stats))
        stream.done.set()
        return stream

    def end_session(self, session_id: str) -> None:
        with self._lock:
            self._sessions.pop(session_id, None)

    def snapshot(self) -> SchedulerSnapshot:
        with self._lock:
            busy = self._active
        slots = tuple(
            SlotInfo(i, "generating" if i < busy else "free", None, 0)
            for i in range(self.config.n_seq_max)
        )
        return SchedulerSnapshot(phase="generating" if busy else "idle", slots=slots)

    def model_info(self) -> ModelInfo:
        return ModelInfo(
            id=self.model_id, path=self.config.path, status="idle", phase="idle", pending_len=0,
            last_cache_hit=LastCacheHit("cold", 0), backend="fake", context_size=self.config.n_ctx,
            n_seq_max=self.config.n_seq_max, available_seqs=self.config.n_seq_max,
            quant_type="q4_1", quant_bits=4, quant_tag="Q4_1", tier="disk", fingerprint="0" * 64,
            effective_fingerprint="0" * 64, loaded_at=0.0, vram_estimate_b=0,
        )  # fmt: skip

    def shutdown(self) -> None:
        self._cache_file.write_text(json.dumps(self._saved))

    # -- internals -----------------------------------------------------------------------

    def _start(
        self,
        prompt: list[int],
        *,
        continuation: bool,
        session_id: str | None = None,
        on_event: Callable[[Event], None] | None = None,
        on_reading: Callable[[], None] | None = None,
        response_tokens: int = 64,
        **_params: Any,
    ) -> FakeStream:
        stream = FakeStream(next(self._refs))
        with self._lock:
            if session_id is not None and session_id in self._busy_sessions:
                raise StickyBusy(f"session {session_id} is generating")
            if session_id is not None:
                self._busy_sessions.add(session_id)
            kind, read = self._admit(prompt, session_id, continuation)
            self._active += 1
            self.calls.append(("continue_session" if continuation else "infer", len(prompt)))
        args = (stream, prompt, session_id, on_event, response_tokens, kind, read)
        threading.Thread(target=self._run, args=args, daemon=True).start()
        if on_reading is not None:  # the prompt is "read" at once
            on_reading()
        return stream

    def _admit(
        self, prompt: list[int], session_id: str | None, continuation: bool
    ) -> tuple[str, int]:
        if continuation:
            self.counters["hits_sticky"] += 1
            return "continuation", len(self._sessions[session_id or ""])
        held = self._sessions.get(session_id or "", [])
        if held and prompt[: len(held)] == held:
            self.counters["hits_sticky"] += 1
            return "sticky", len(held)
        best = max((s for s in self._saved if prompt[: len(s)] == s), key=len, default=None)
        if best is None:
            self.counters["misses"] += 1
            return "cold", 0
        self.counters["hits_exact" if best == prompt else "hits_longest_prefix"] += 1
        return ("exact" if best == prompt else "partial"), len(best)

    def _run(self, stream, prompt, session_id, on_event, response_tokens, kind, read) -> None:  # type: ignore[no-untyped-def]
        emit = on_event or (lambda _e: None)
        start = time.perf_counter()
        ttft = 0.0
        generated: list[int] = []
        question = self.detokenize(prompt).rsplit("<|user|>", 1)[-1].split("<|end|>", 1)[0]
        text = REPLY.format(q=question.strip()[:40] or "nothing")
        finish = "stop"
        if self.fail_next is not None:
            reason, self.fail_next = self.fail_next, None
            self._finish(session_id, None)
            emit(Error(reason, "decode_failed"))
            stream.done.set()
            return
        for piece in _pieces(text):
            if stream.cancelled.is_set():
                finish = "cancelled"
                break
            if len(generated) >= response_tokens:
                finish = "length"
                break
            time.sleep(self.token_delay_s)
            ids = _encode(piece)
            generated += ids
            if not ttft:
                ttft = (time.perf_counter() - start) * 1000
            for tid in ids:
                emit(TokenId(tid))
            emit(Token(piece))
        total = prompt + generated
        self._finish(session_id, total)
        elapsed = (time.perf_counter() - start) * 1000
        stats = Stats(
            prompt_tokens=len(prompt), completion_tokens=len(generated), prefill_ms=ttft,
            generation_ms=max(elapsed - ttft, 0.001), ttft_ms=ttft, cache_hit_kind=kind,  # type: ignore[arg-type]
            finish_reason=finish, cancelled=finish == "cancelled", finish_key=None,  # type: ignore[arg-type]
            committed_tokens=len(total), cache_delta=CacheDelta(read=read, created=len(total) - read),
        )  # fmt: skip
        stream.stats = stats
        emit(Done(stats))
        stream.done.set()

    def _finish(self, session_id: str | None, total: list[int] | None) -> None:
        with self._lock:
            self._active -= 1
            if session_id is not None:
                self._busy_sessions.discard(session_id)
                if total is not None:
                    self._sessions[session_id] = total
            if total is not None:
                self._saved.append(total)

    def _load_cache(self) -> list[list[int]]:
        try:
            return [list(x) for x in json.loads(self._cache_file.read_text())]
        except (OSError, ValueError):
            return []


def _pieces(text: str) -> list[str]:
    """Split into word-ish pieces, like tokens."""
    out: list[str] = []
    word = ""
    for ch in text:
        word += ch
        if ch in " \n":
            out.append(word)
            word = ""
    if word:
        out.append(word)
    return out


class FakeEngine:
    """``Engine(data_dir)`` look-alike holding :class:`FakeModel` instances."""

    token_delay_s = 0.004

    def __init__(self, data_dir: str | Path) -> None:
        self.data_dir = Path(data_dir)
        self.models: dict[str, FakeModel] = {}
        self.closed = False

    def load_model(self, model_id: str, config: Any) -> FakeModel:
        model = FakeModel(
            model_id, config, self.data_dir / f"fake-cache-{model_id}.json", self.token_delay_s
        )
        self.models[model_id] = model
        return model

    def get_model(self, model_id: str) -> FakeModel:
        try:
            return self.models[model_id]
        except KeyError:  # as the real Engine says it
            raise NotFound(f"no loaded model {model_id!r}") from None

    def list_models(self) -> list[ModelInfo]:
        return [m.model_info() for m in self.models.values()]

    def counters(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for model in self.models.values():
            for k, v in model.counters.items():
                out[k] = out.get(k, 0) + v
        return out

    def close(self) -> None:
        if not self.closed:
            for model in self.models.values():
                model.shutdown()
            self.closed = True
