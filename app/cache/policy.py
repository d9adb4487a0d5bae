"""When to save a sequence's KV: the cold split and the continued/finish gates (docs/design.md §4).

The numbers are erllama's defaults; the desktop app passes smaller ones from its settings
(``DESKTOP_POLICY``) so an ordinary chat turn, often under 512 tokens, is saved too.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any


class PolicyError(ValueError):
    """A cache policy whose numbers cannot work together."""


@dataclass(frozen=True, slots=True)
class CachePolicy:
    min_tokens: int = 512
    cold_min_tokens: int = 512
    cold_max_tokens: int = 30000
    continued_interval: int = 2048
    boundary_trim_tokens: int = 32
    boundary_align_tokens: int = 2048
    session_resume_wait_ms: int = 500
    checkpoint_interval: int = 1024
    """For a model whose saved states cannot be cut (recurrent, hybrid, sliding window):
    a whole-state checkpoint every this many tokens of a long prefill (docs/design.md §8; see
    ``app.engine.checkpoints``). 0: only at the end of each prompt and reply."""

    def __post_init__(self) -> None:
        validate(self)

    @classmethod
    def coerce(cls, value: CachePolicy | dict[str, Any] | None) -> CachePolicy:
        """Accept a policy, a dict of its fields (unknown keys are an error), or None."""
        if value is None:
            return cls()
        if isinstance(value, CachePolicy):
            return value
        if not isinstance(value, dict):
            raise PolicyError(f"policy must be a CachePolicy or a dict, not {type(value).__name__}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(value) - known)
        if unknown:
            raise PolicyError(f"unknown cache policy field(s): {', '.join(unknown)}")
        return cls(**value)

    def to_dict(self) -> dict[str, int]:
        return asdict(self)




def validate(policy: CachePolicy) -> None:
    """Raise PolicyError with a readable message when the numbers are inconsistent."""
    for f in fields(policy):
        value = getattr(policy, f.name)
        if not isinstance(value, int) or isinstance(value, bool):
            raise PolicyError(f"{f.name} must be an integer, got {value!r}")
        if value < 0:
            raise PolicyError(f"{f.name} must be >= 0, got {value}")
    if policy.continued_interval < 1:
        raise PolicyError("continued_interval must be >= 1")
    if policy.boundary_align_tokens < 1:
        raise PolicyError("boundary_align_tokens must be >= 1")
    if policy.cold_min_tokens > policy.cold_max_tokens:
        raise PolicyError(
            f"cold_min_tokens ({policy.cold_min_tokens}) must not exceed "
            f"cold_max_tokens ({policy.cold_max_tokens})"
        )
    if policy.boundary_trim_tokens >= policy.cold_max_tokens:
        raise PolicyError("boundary_trim_tokens must be smaller than cold_max_tokens")


def cold_save_split(num_tokens: int, policy: CachePolicy) -> int:
    """Length of the prompt prefix to save cold, or 0 for no cold save.

    Save the first ``((len - trim) // align) * align`` tokens when ``cold_min <= len <=
    cold_max`` and ``len - trim >= align``; the saved prefix also needs ``min_tokens``.
    """
    if not policy.cold_min_tokens <= num_tokens <= policy.cold_max_tokens:
        return 0
    usable = num_tokens - policy.boundary_trim_tokens
    if usable < policy.boundary_align_tokens:
        return 0
    split = (usable // policy.boundary_align_tokens) * policy.boundary_align_tokens
    return split if split >= policy.min_tokens else 0


def should_continued_save(live: int, last_saved: int, policy: CachePolicy) -> bool:
    return live - last_saved >= policy.continued_interval and live >= policy.min_tokens


def should_finish_save(live: int, policy: CachePolicy) -> bool:
    return live >= policy.min_tokens


DESKTOP_POLICY = CachePolicy(
    min_tokens=32,
    cold_min_tokens=64,
    cold_max_tokens=30000,
    continued_interval=1024,
    boundary_trim_tokens=8,
    boundary_align_tokens=64,
    session_resume_wait_ms=500,
    checkpoint_interval=1024,
)
