"""Typed engine errors. Each carries a ``.code`` equal to the seed's error atom (docs/design.md §1)."""

from __future__ import annotations


class EngineError(Exception):
    """Base of every error the engine raises on purpose; ``code`` names the failure."""

    code = "engine_error"
    seq_id: int | None = None
    """Set by a backend when the error is about one seq's op in a tick (only that request
    fails; the scheduler keeps the others running)."""

    def __init__(self, message: str = "", *, code: str | None = None) -> None:
        super().__init__(message or self.code)
        if code is not None:
            self.code = code

    @property
    def message(self) -> str:
        return str(self.args[0]) if self.args else self.code


class NoSession(EngineError):
    code = "no_session"


class StickyBusy(EngineError):
    code = "sticky_busy"


class Busy(EngineError):
    code = "busy"


class NotSupported(EngineError):
    code = "not_supported"


class NotFound(EngineError):
    code = "not_found"


class InvalidRequest(EngineError):
    code = "invalid_request"


class InvalidGrammar(InvalidRequest):
    """A grammar llama.cpp could not parse or could not follow (``app.engine.grammar.check``):
    refused before it reaches llama.cpp, which aborts the process on the second kind."""


class InvalidConfig(InvalidRequest, ValueError):
    """A ``ModelConfig`` that cannot work; also a ``ValueError`` for older callers."""


class ContextOverflow(EngineError):
    code = "context_overflow"


class NBatchTooSmall(EngineError):
    code = "n_batch_too_small"


class ModelLoadFailed(EngineError):
    code = "model_load_failed"


class AdapterLoadFailed(EngineError):
    code = "adapter_load_failed"


class GrammarFailed(EngineError):
    code = "grammar_failed"


class DecodeFailed(EngineError):
    """``llama_decode`` failed: 1 = no KV slot, 2 = aborted, < 0 = fatal."""

    code = "decode_failed"

    def __init__(self, rc: int) -> None:
        kind = {1: "no KV slot available", 2: "aborted"}.get(rc, "fatal error")
        super().__init__(f"llama_decode returned {rc} ({kind})")
        self.rc = rc


class SchedulerDied(EngineError):
    """The model's scheduler thread stopped after an internal error (a bug, logged with its
    traceback); every call on the model fails with this until it is reloaded."""

    code = "engine_error"
