"""Checkpoints: where a state that cannot be cut is saved whole, so that prompts coming back
to that point restore it instead of reading everything again (docs/design.md §8).

An attention model's saved row can be cut to any head it shares with a prompt, so its five
saves serve every regenerate, edit and branch. A recurrent or hybrid state (Mamba, LFM2,
Granite 4, Qwen3.5), and a sliding-window model's saved state (Gemma 3: its windowed layers
keep only the last window), restore only whole: a prompt reuses the longest saved state that
is a prefix of it, minus its last token (always prefilled again, for fresh logits). So these
models save where prompts come back to:

* **the end of each prompt, minus its last token** — a regenerate sends the same prompt
  again and restores it (one token re-read instead of the whole prompt);
* **each message boundary** in what the prompt adds (right after an end-of-turn token such
  as ``<|im_end|>``) — an edit of the first message keeps the system prompt, an edit of a
  message in a long re-sent conversation keeps everything before it;
* **the end of each reply** — the finish save every model makes: the follow-up, and an edit
  of the next message or a branch after this turn, extend it;
* **every ``CachePolicy.checkpoint_interval`` tokens of a long prefill** — an edit inside a
  long pasted text or a long first message re-reads at most that many tokens before it.

They are ordinary rows (reason ``cold``: a head of a prompt read before its reply), held to
the tier quotas like any other; chunk dedupe does not apply to whole states, so each costs
its full size (``docs/history/benchmarks-2026-11-29-to-12-05.md``, "Every model family").
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from app.cache.policy import CachePolicy

NEAR_END = 8
"""A message boundary this close before the prompt's end adds nothing to the end's own
checkpoint (the next message's header, e.g. ``<|im_start|>assistant``): not saved."""


@dataclass(frozen=True, slots=True)
class Checkpoints:
    """The context lengths at which one request's prefill saves its seq whole."""

    points: tuple[int, ...]

    def next_after(self, held: int) -> int | None:
        i = bisect_right(self.points, held)
        return self.points[i] if i < len(self.points) else None

    def __contains__(self, n: object) -> bool:
        return n in self.points


def plan(prompt: Sequence[int], held: int, is_eog: Callable[[int], bool], policy: CachePolicy) -> Checkpoints:
    """Checkpoints for a prompt whose first ``held`` tokens the seq already holds: message
    boundaries, every ``checkpoint_interval`` tokens, and the prompt's end minus one — those
    past ``held``, of at least ``min_tokens``."""
    end = len(prompt) - 1
    points = {end}
    points.update(i + 1 for i in range(held, end - NEAR_END) if is_eog(prompt[i]))
    step = policy.checkpoint_interval
    if step > 0:
        points.update(range(step * (held // step + 1), end, step))
    low = max(policy.min_tokens, held + 1, 1)
    return Checkpoints(tuple(sorted(n for n in points if low <= n <= end)))
