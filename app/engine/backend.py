"""What the scheduler needs from a backend: one tick in two halves, KV pack/unpack, samplers.

The scheduler never touches llama.cpp; it talks to an object with this shape. The real one
is ``app.engine.llama_backend.LlamaBackend``; ``tests/helpers/stub_backend.py`` is a
deterministic stand-in for state-machine tests.

A tick's ops, built by ``app.engine.batch``:

* ``PrefillOp(seq_id, tokens, pos, want_logits)`` pushes ``tokens`` into the seq's KV at
  positions ``pos, pos+1, ...``; with ``want_logits`` the last token's logits are kept so the
  next decode row of that seq can sample from them.
* ``DecodeOp(seq_id, sampler, pos, greedy)`` samples one token from the seq's current logits
  (with the request's sampler, or greedily when ``greedy``), then pushes that token at ``pos``
  in the same ``llama_decode``. So after every tick a seq's KV holds exactly the tokens the
  scheduler has recorded for it (the cache-key invariant, SPEC §2).

A tick is two calls, so the scheduler can stream a tick's tokens before its decode runs:

* ``sample(ops)`` checks the ops and samples every decode row from the previous tick's
  logits; it returns one result per op, in op order: ``Prefilled()`` or
  ``Sampled(token, is_eog)``. It raises before any sampler state changes for a malformed
  tick; an ``EngineError`` about one op carries that op's ``seq_id``.
* ``decode(ops, sampled)`` pushes the prefill slices and the sampled tokens in ONE
  ``llama_decode``. It must follow the ``sample`` of the same ops, with no other KV call
  between them.

``step(ops)`` (both halves at once) is a convenience for tests and tools, not part of the
protocol.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True, slots=True)
class SamplingParams:
    """One request's sampler settings. The chain order is fixed by SPEC §1."""

    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    seed: int = 0xFFFFFFFF
    grammar: str | None = None

    @property
    def is_greedy(self) -> bool:
        return self.temperature <= 0.0 and not self.grammar


@dataclass(frozen=True, slots=True)
class PrefillOp:
    seq_id: int
    tokens: tuple[int, ...]
    pos: int
    want_logits: bool


@dataclass(frozen=True, slots=True)
class DecodeOp:
    seq_id: int
    sampler: Any
    pos: int
    greedy: bool = False


Op = PrefillOp | DecodeOp


@dataclass(frozen=True, slots=True)
class Prefilled:
    pass


@dataclass(frozen=True, slots=True)
class Sampled:
    token: int
    is_eog: bool


StepResult = Prefilled | Sampled


@dataclass(frozen=True, slots=True)
class BackendInfo:
    """Static facts about the loaded model, read once at load."""

    name: str
    n_ctx_train: int
    n_vocab: int
    quant_type: str
    quant_bits: int
    fingerprint: bytes
    ctx_params_hash: bytes
    chat_template: str | None
    bos_token: str
    eos_token: str
    vram_estimate_b: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


class Backend(Protocol):
    """Everything the scheduler thread calls. Only that thread calls it."""

    info: BackendInfo

    def sample(self, ops: Sequence[Op]) -> list[StepResult]:
        """First half of a tick: check ``ops``, sample every decode row (see the module doc)."""
        ...

    def decode(self, ops: Sequence[Op], sampled: Sequence[StepResult]) -> None:
        """Second half: one ``llama_decode`` of the prefill slices and the sampled tokens."""
        ...

    def new_sampler(self, params: SamplingParams) -> Any:
        """Build a sampler chain; ``InvalidGrammar`` for a grammar ``check_grammar`` refuses."""
        ...

    def check_grammar(self, grammar: str) -> None:
        """``InvalidGrammar`` unless llama.cpp can parse *and follow* ``grammar`` with this
        vocabulary (``app.engine.grammar_check``); any thread may call it."""
        ...

    def free_sampler(self, sampler: Any) -> None: ...

    def accept(self, sampler: Any, token: int) -> None:
        """Feed a token chosen outside the sampler (e.g. a greedy tool-call token)."""
        ...

    def seq_rm(self, seq_id: int, start: int = 0) -> None:
        """Drop the seq's KV cells from position ``start`` on."""
        ...

    def seq_cp(self, src: int, dst: int, n_tokens: int) -> None:
        """Make ``dst`` share ``src``'s KV cells for positions ``0 .. n_tokens-1``."""
        ...

    def kv_pack(self, seq_id: int) -> bytes | memoryview:
        """The seq's KV as a one-stream state (``app.cache.seqstate``); may be a read-only view."""
        ...

    def kv_unpack(self, seq_id: int, payload: bytes | memoryview) -> bool:
        """Load a packed seq state; False (never an exception) when llama.cpp refuses it."""
        ...

    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = True) -> list[int]: ...

    def detokenize(self, tokens: Sequence[int]) -> str: ...

    def token_piece(self, token: int) -> bytes:
        """The raw bytes of one token (may be a partial UTF-8 sequence)."""
        ...

    def is_eog(self, token: int) -> bool: ...

    def apply_chat_template(self, messages: list[dict[str, Any]], add_generation_prompt: bool = True, tools: list[Any] | None = None) -> str: ...

    def embed(self, tokens: Sequence[int]) -> list[float]: ...

    def load_adapter(self, path: str) -> Any: ...

    def set_adapters(self, adapters: Sequence[tuple[Any, float]]) -> None: ...

    def free_adapter(self, adapter: Any) -> None: ...

    def verify(self, seq_id: int, prefix: Sequence[int], candidates: Sequence[int]) -> tuple[int, int | None]:
        """Greedy speculative check: (accepted count, next token or None for end-of-generation)."""
        ...

    def close(self) -> None: ...
