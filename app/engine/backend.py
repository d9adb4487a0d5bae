"""What the scheduler needs from a backend: one tick in two halves, KV pack/unpack, samplers.

The scheduler never touches llama.cpp; it talks to an object with this shape. The real one
is ``app.engine.llama.llama_backend.LlamaBackend``; ``tests/helpers/stub_backend.py`` is a
deterministic stand-in for state-machine tests.

A tick's ops, built by ``app.engine.batch``:

* ``PrefillOp(seq_id, tokens, pos, want_logits)`` pushes ``tokens`` into the seq's KV at
  positions ``pos, pos+1, ...``; with ``want_logits`` the last token's logits are kept so the
  next decode row of that seq can sample from them.
* ``DecodeOp(seq_id, sampler, pos, greedy)`` samples one token from the seq's current logits
  (with the request's sampler, or greedily when ``greedy``), then pushes that token at ``pos``
  in the same ``llama_decode``. So after every tick a seq's KV holds exactly the tokens the
  scheduler has recorded for it (the cache-key invariant, docs/design.md §2) — plus, with speculative
  decoding, the draft tokens its last decode pushed after them (``DecodeOp.drafted``).

Speculative decoding (``app.engine.speculation``) rides on the same two halves. A decode may
push draft tokens after the sampled one, each with logits (``Sampled.drafts``); the next
``sample`` verifies them from those rows (``DecodeOp.drafted``) and returns the drafts the
model agreed with (``Sampled.accepted``) and the token sampled after them; the ``decode``
after it drops the rejected tail before it pushes (``Sampled.accepted`` says how many of the
drafted cells stay).

A tick is two calls, so the scheduler can stream a tick's tokens before its decode runs:

* ``sample(ops)`` checks the ops and samples every decode row from the previous tick's
  logits; it returns one result per op, in op order: ``Prefilled()`` or
  ``Sampled(token, is_eog)``. It raises before any sampler state changes for a malformed
  tick; an ``EngineError`` about one op carries that op's ``seq_id``.
* ``decode(ops, sampled)`` pushes the prefill slices and the sampled tokens in ONE
  ``llama_decode``. It must follow the ``sample`` of the same ops, with no other KV call
  between them; or, when a prompt ends beside decode rows (``Scheduler._read_first``), the
  tick's slices that end prompts go first in a ``decode`` of their own, then ``sample``
  takes those seqs' first decode rows from its logits, and one ``decode`` pushes the tick's
  other ops with them. Every decode row is sampled before any ``decode`` of its tick (the
  logits of an earlier batch are gone after one).

``step(ops)`` (both halves at once) is a convenience for tests and tools, not part of the
protocol.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol


@dataclass(frozen=True, slots=True)
class SamplingParams:
    """One request's sampler settings. The chain order is fixed by docs/design.md §1."""

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

    @property
    def is_plain_greedy(self) -> bool:
        """A lone greedy stage: the chain's choice is the argmax, and it keeps no state."""
        return (
            self.is_greedy and self.top_k == 0 and self.top_p >= 1.0 and self.min_p <= 0.0
            and self.repetition_penalty == 1.0
        )  # fmt: skip


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
    """Where the sampled token goes: the seq's committed length (drafts are not committed)."""
    greedy: bool = False
    drafted: tuple[int, ...] = ()
    """Draft tokens the seq's previous decode pushed at ``pos, pos+1, ...`` (with logits):
    ``sample`` verifies them."""
    draft_max: int = 0
    """Rows this tick reserves for new drafts after the sampled token (the batch budget)."""


Op = PrefillOp | DecodeOp


@dataclass(frozen=True, slots=True)
class Prefilled:
    pass


@dataclass(frozen=True, slots=True)
class Sampled:
    """One decode row's outcome. ``sample`` fills ``token``, ``is_eog`` and ``accepted``; the
    scheduler may replace the record before ``decode`` (fewer ``accepted``, new ``drafts``).

    ``decode`` keeps the first ``len(accepted)`` drafted cells, drops the seq's cells after
    them, pushes ``token`` at ``pos + len(accepted)`` and then ``drafts``, every row with
    logits. (When a request stops on a draft token, the scheduler passes that draft as
    ``token``: its cell is pushed again, bit-identical, since rows are independent.)
    """

    token: int
    is_eog: bool
    accepted: tuple[int, ...] = ()
    """Leading drafts of ``DecodeOp.drafted`` the model agreed with, in order; ``token`` was
    sampled after them."""
    drafts: tuple[int, ...] = ()
    """New draft tokens to push after ``token`` (at most ``DecodeOp.draft_max``)."""


StepResult = Prefilled | Sampled


MemoryKind = Literal["attention", "sliding_window", "recurrent", "hybrid"]


@dataclass(frozen=True, slots=True)
class MemoryCaps:
    """What a loaded model's memory can do with one sequence's state (docs/design.md §8).

    llama.cpp keeps a sequence's past in one of four shapes, and reuse depends on which:

    * ``attention`` — a KV cell per token: a tail can be dropped (``seq_rm``) and a saved
      state cut to any prefix of its cells (``app.cache.blobs.seqstate``). Everything is reusable.
    * ``sliding_window`` (Gemma 3) — as attention, but some layers keep only the last
      ``n_swa`` cells in a saved state; with ``swa_full`` (Hearth's setting) the live cells
      are all kept, so a live seq's tail can be dropped (``Backend.can_trim`` checks the
      oldest cell held), while a saved state is restored whole only.
    * ``recurrent`` (Mamba) and ``hybrid`` (LFM2, Granite 4, Qwen3.5: recurrent layers next
      to attention ones) — a state per sequence that has absorbed every token: it cannot be
      rolled back to an earlier position (llama.cpp refuses a partial ``seq_rm``), only
      replaced whole. Reuse comes from whole-state checkpoints.

    The scheduler, the reuse planner and the cache ask these instead of assuming attention.
    """

    kind: MemoryKind = "attention"
    cut_states: bool = True
    """A saved or live state can be cut to its first n cells (a head copied, a row cut)."""
    trim_tail: bool = True
    """A live seq's tail can be dropped with ``seq_rm`` (subject to ``Backend.can_trim``)."""
    n_swa: int = 0
    """The sliding window, in tokens (0: none)."""

    @property
    def needs_checkpoints(self) -> bool:
        """Saved states are restored whole only, so reuse needs them at the points a prompt
        can come back to (the end of each prompt, every ``checkpoint_interval`` tokens)."""
        return not self.cut_states

    @property
    def reuse_words(self) -> str:
        """What reuse applies, in a user's words (the Library, the Cache dashboard)."""
        return REUSE_WORDS[self.kind]


REUSE_WORDS: dict[str, str] = {
    "attention": "attention: any shared prefix is reused, cut at any token",
    "sliding_window": (
        "sliding window: a chat's own KV is trimmed at any token; saved KV is restored "
        "from checkpoints at turn boundaries"
    ),
    "recurrent": "recurrent: reuse from checkpoints at turn boundaries (a state cannot be cut)",
    "hybrid": "hybrid (recurrent + attention): reuse from checkpoints at turn boundaries",
}


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
    memory: MemoryCaps = field(default_factory=MemoryCaps)
    kv_streams: int = 1
    """The context's KV streams (llama.cpp: one per sequence unless the KV is unified): the
    layout ``kv_unpack`` loads without rewriting the payload (``app.cache.blobs.seqstate``)."""


class Backend(Protocol):
    """Everything the scheduler thread calls. Only that thread calls it."""

    info: BackendInfo

    def sample(self, ops: Sequence[Op]) -> list[StepResult]:
        """First half of a tick: check ``ops``, sample every decode row (see the module doc)."""
        ...

    def decode(
        self, ops: Sequence[Op], sampled: Sequence[StepResult], *, background: bool = False,
        before: Callable[[], None] | None = None,
    ) -> None:
        """Second half: one ``llama_decode`` of the prefill slices and the sampled tokens.
        ``background``: every op reads ahead (type-ahead) and nobody waits for the tick; the
        backend may compute it with other threads (never other results). ``before`` is called
        right before the ``llama_decode``, after every other native call of the tick (the
        scheduler's ``on_reading``s: a thread woken by them takes the GIL at the next one)."""
        ...

    def new_sampler(self, params: SamplingParams) -> Any:
        """Build a sampler chain; ``InvalidGrammar`` for a grammar ``check_grammar`` refuses."""
        ...

    def check_grammar(self, grammar: str) -> None:
        """``InvalidGrammar`` unless llama.cpp can parse *and follow* ``grammar`` with this
        vocabulary (``app.engine.grammar.check``); any thread may call it."""
        ...

    def free_sampler(self, sampler: Any) -> None: ...

    def accept(self, sampler: Any, token: int) -> None:
        """Feed a token chosen outside the sampler (e.g. a greedy tool-call token)."""
        ...

    def greedy(self, seq_id: int) -> int:
        """The argmax of the seq's newest logits, no sampler (a draft model's choice,
        ``app.engine.speculation.draft_model``)."""
        ...

    def seq_rm(self, seq_id: int, start: int = 0) -> None:
        """Drop the seq's KV cells from position ``start`` on; ``NotSupported`` when the memory
        refuses (a recurrent state): callers ask ``can_trim`` first. Drafts among the dropped
        cells are forgotten; the logits of the rows before ``start`` stay, so a seq whose
        drafts are dropped can still be sampled."""
        ...

    def can_trim(self, seq_id: int, n_keep: int) -> bool:
        """Would ``seq_rm(seq_id, n_keep)`` leave exactly the state of the seq's first
        ``n_keep`` tokens? Always for 0 and for a seq holding at most ``n_keep`` tokens;
        otherwise it depends on the memory (``info.memory``)."""
        ...

    def seq_cp(self, src: int, dst: int, n_tokens: int) -> None:
        """Make ``dst`` hold ``src``'s state for positions ``0 .. n_tokens-1``. A head
        shorter than what ``src`` holds needs ``info.memory.cut_states``."""
        ...

    def kv_pack(self, seq_id: int, into: Callable[[int], memoryview] | None = None) -> bytes | memoryview:
        """The seq's KV as a one-stream state (``app.cache.blobs.seqstate``); may be a read-only view.
        ``into(size)``: a writable view of ``size`` bytes to pack into (memory used before,
        ``StateMemory.lend``); a backend may ignore it."""
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
