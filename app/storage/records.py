"""Plain records the storage layer hands out: frozen, so they can cross threads freely."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any


@dataclass(frozen=True, slots=True)
class SamplingSettings:
    """One conversation's generation settings (docs/design.md §1 options, as the UI edits them)."""

    temperature: float = 0.7
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    repetition_penalty: float = 1.1
    seed: int | None = None
    max_tokens: int = 512
    stop_sequences: tuple[str, ...] = ()
    grammar: str = ""
    json_mode: bool = False
    thinking: bool = False
    thinking_budget_tokens: int = 0
    speculative: bool = True
    """Speculative decoding (the engine's ``speculative`` option): on by default, as the
    engine's; the reply is the same either way."""
    draft_max: int = 16
    """The most draft tokens one step checks (``draft_max``)."""
    draft_model: str = ""
    """A loaded model that proposes the drafts (the engine's ``draft_model``: same vocabulary,
    smaller and faster); "" drafts from the conversation (prompt lookup)."""

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["stop_sequences"] = list(self.stop_sequences)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> SamplingSettings:
        """Build from stored JSON; unknown keys are ignored so old rows keep loading."""
        if not data:
            return cls()
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        if "stop_sequences" in values:
            values["stop_sequences"] = tuple(str(s) for s in values["stop_sequences"] or ())
        return cls(**values)

    def with_changes(self, **changes: Any) -> SamplingSettings:
        return replace(self, **changes)


@dataclass(frozen=True, slots=True)
class ReplyStats:
    """What the chat view shows under a reply; stored as JSON on the message.

    The bridge builds it from the engine's ``Stats`` once (``app.ui.engine_bridge``); it
    crosses to the GUI thread as is and is stored as is.
    """

    ttft_ms: float = 0.0
    tokens_per_s: float = 0.0
    cache_hit_kind: str = ""
    cache_read: int = 0
    cache_created: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    finish_reason: str = ""
    context_full: bool = False
    """The reply stopped because the conversation's context was full (it can be continued)."""
    prefill_ms: float = 0.0
    # What was reused at admission (the engine's ``Stats.reuse``), for the plain-words line.
    reuse_source: str = "none"
    tokens_reused: int = 0
    tokens_shared: int = 0
    miss_reason: str = ""
    origin_session: str = ""
    tokens_read_ahead: int = 0
    """Of ``tokens_reused``, those type-ahead read while the message was being written."""
    # Speculative decoding: draft tokens checked for this reply, and those the model kept.
    drafted_tokens: int = 0
    accepted_tokens: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> ReplyStats | None:
        if not data:
            return None
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


@dataclass(frozen=True, slots=True)
class Conversation:
    id: str
    title: str
    created: float
    updated: float
    system_prompt: str
    model_id: str
    sampling: SamplingSettings = field(default_factory=SamplingSettings)
    active_leaf_id: str | None = None
    deleted: bool = False


@dataclass(frozen=True, slots=True)
class Message:
    id: str
    conversation_id: str
    parent_id: str | None
    role: str
    content: str
    thinking: str = ""
    stats: ReplyStats | None = None
    error: str = ""
    created: float = 0.0


@dataclass(frozen=True, slots=True)
class Siblings:
    """A message's position among its siblings, for the ‹ 1/2 › branch switcher."""

    ids: tuple[str, ...]
    index: int

    @property
    def count(self) -> int:
        return len(self.ids)
