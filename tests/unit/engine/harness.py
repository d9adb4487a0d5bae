"""Drive a ``Scheduler`` directly, without its thread: admit, tick, look (vLLM's scheduler
tests do the same). The backend is the deterministic stub (nothing numeric), or a real
``LlamaBackend`` in the integration tests."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from app.engine.backend import DecodeOp, PrefillOp
from app.engine.cache_hooks import CacheHooks, NullCache
from app.engine.config import ModelConfig
from app.engine.events import Done, Error, Event, TokenId
from app.engine.request import Mode
from app.engine.scheduling.admission import Admission
from app.engine.scheduling.scheduler import Scheduler
from app.engine.validation import parse_options
from tests.helpers.stub_backend import StubBackend


def tok(text: str) -> list[int]:
    return [ord(c) for c in text]


@dataclass
class Harness:
    sch: Scheduler
    stub: StubBackend
    events: dict[int, list[Event]] = field(default_factory=dict)
    ended: list[int] = field(default_factory=list)
    """Refs in the order their Done or Error arrived."""
    sampled: list[list[Any]] = field(default_factory=list)
    """The ops of every tick the backend accepted."""
    _next_ref: int = 1

    def __post_init__(self) -> None:
        sample = self.stub.sample

        def recording(ops: Any) -> Any:
            results = sample(ops)
            self.sampled.append(list(ops))
            return results

        self.stub.sample = recording  # type: ignore[method-assign]

    def admission(self, text: str | list[int], *, mode: Mode = Mode.STREAM, **opts: Any) -> Admission:
        ref = self._next_ref
        self._next_ref += 1
        opts.setdefault("response_tokens", 5)
        events: list[Event] = []
        self.events[ref] = events

        def emit(event: Event) -> None:
            events.append(event)
            if isinstance(event, Done | Error):
                self.ended.append(ref)

        prompt = tuple(tok(text) if isinstance(text, str) else text)
        return Admission(ref, mode, prompt, parse_options(opts, 5), emit)

    def admit(self, text: str | list[int], **opts: Any) -> int:
        adm = self.admission(text, **opts)
        self.sch.commands.admit(adm)
        return adm.ref

    def tick(self) -> list[list[Any]]:
        """One tick; returns its ops as ``[kind, seq_id, n_tokens]`` rows (empty: no step)."""
        before = len(self.sampled)
        self.sch.tick()
        self.sch.pool.check(self.sch.reqs)
        # A tick samples twice when a prompt ends beside decode rows: its first decode row is
        # sampled after the prompt's own decode, in the same tick (``Scheduler._read_first``).
        return [describe(op) for ops in self.sampled[before:] for op in ops]

    def tick_while(self, busy: Callable[[], object], max_ticks: int = 1000) -> list[list[list[Any]]]:
        """Tick while ``busy()`` holds; each tick's rows. Fails (never loops forever) when it
        still holds after ``max_ticks`` ticks."""
        rows: list[list[list[Any]]] = []
        while busy():
            assert len(rows) < max_ticks, "the scheduler did not settle"
            rows.append(self.tick())
        return rows

    def run(self, max_ticks: int = 1000) -> int:
        """Tick until nothing runs; how many ticks that took."""
        n = len(self.tick_while(self.sch.is_busy, max_ticks))
        self.sch.on_idle()
        return n

    def running(self) -> dict[int, int]:
        """seq id → ref of the request running on it."""
        return {seq: req.ref for seq, req in self.sch.reqs.items()}

    def pending(self) -> list[int]:
        return [a.ref for a in self.sch.admission.pending]

    def outcome(self, ref: int) -> Event:
        """The one terminal event of ``ref`` (asserts there is exactly one)."""
        ends = [e for e in self.events[ref] if isinstance(e, Done | Error)]
        assert len(ends) == 1, f"request {ref} ended {len(ends)} times: {ends}"
        return ends[0]

    def text(self, ref: int) -> str:
        return "".join(getattr(e, "text", "") for e in self.events[ref] if type(e).__name__ == "Token")

    def token_ids(self, ref: int) -> list[int]:
        """The token ids ``ref`` was sent, in order."""
        return [e.id for e in self.events[ref] if isinstance(e, TokenId)]

    def run_to_done(self, text: str | list[int], **opts: Any) -> tuple[int, Done]:
        """Admit one request, run until idle, and return it with its ``Done`` (asserted)."""
        ref = self.admit(text, **opts)
        self.run()
        done = self.outcome(ref)
        assert isinstance(done, Done), done
        return ref, done


def describe(op: Any) -> list[Any]:
    if isinstance(op, PrefillOp):
        return ["prefill", op.seq_id, len(op.tokens)]
    assert isinstance(op, DecodeOp)
    return ["decode", op.seq_id, 1]


def make(
    stub: StubBackend | None = None,
    *,
    cache: Callable[[ModelConfig], CacheHooks] | None = None,
    **cfg: Any,
) -> Harness:
    stub = stub or StubBackend()
    cfg.setdefault("n_seq_max", stub.n_seq_max)
    cfg.setdefault("n_batch", 64)
    cfg.setdefault("cache_enabled", False)
    config = ModelConfig(path="stub", **cfg)
    hooks = cache(config) if cache is not None else NullCache(config.cache_policy)
    meta = None
    if cache is not None:
        from app.cache.keys import KeyMeta

        meta = KeyMeta(stub.info.fingerprint, stub.info.quant_type, stub.info.ctx_params_hash)
    return Harness(Scheduler(stub, config, hooks, meta), stub)
