"""A chat client for reuse tests: it re-renders the whole conversation every turn, as real
clients do, and checks each turn against a cold run of the same prompt and against what the
engine could have reused.

"Reusable" is measured here, by the client, from what it has sent and received before:

* for a model whose states can be cut (attention): the longest prefix the prompt shares with
  anything computed earlier, minus the last prompt token (always re-read for fresh logits);
* for a model whose states restore only whole (recurrent, hybrid, sliding window): the
  longest earlier *turn boundary* the prompt shares — the end of an earlier prompt minus its
  last token, the end of an earlier reply, a message boundary (right after an end-of-turn
  token) of an earlier prompt — what checkpoints at turn boundaries make reusable.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.cache.policy import CachePolicy
from app.engine import Engine, ModelConfig
from app.engine.events import Done, Error, Stats, Token, TokenId

POLICY = CachePolicy(
    min_tokens=8, cold_min_tokens=64, cold_max_tokens=30000, continued_interval=4096,
    boundary_trim_tokens=4, boundary_align_tokens=64, session_resume_wait_ms=500,
)  # fmt: skip
SYSTEM = (
    "You are Hearth, a friendly and precise assistant running on the user's own computer. "
    "You answer in plain English, keep answers short, and never invent facts."
)
N_NEW = 16


def config(path: Path, **kw: Any) -> ModelConfig:
    kw.setdefault("n_ctx", 1024)
    kw.setdefault("n_seq_max", 2)
    kw.setdefault("n_batch", 256)
    kw.setdefault("n_threads", 2)
    kw.setdefault("policy", POLICY)
    kw.setdefault("tier", "disk")
    return ModelConfig(path=str(path), **kw)


def lcp(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


def assistant(text: str) -> dict[str, str]:
    return {"role": "assistant", "content": text}


@dataclass
class Turn:
    """What one earlier turn computed: its prompt + reply, and its boundaries."""

    tokens: list[int]
    points: set[int]

    @classmethod
    def of(cls, prompt: Sequence[int], reply: Sequence[int], end_of_turn: int) -> Turn:
        """The turn's boundaries: the end of its prompt minus one token, the end of its
        reply, and each message end (after ``end_of_turn``) in its prompt."""
        points = {len(prompt) - 1, len(prompt) + len(reply)}
        points.update(i + 1 for i, t in enumerate(prompt) if t == end_of_turn)
        return cls([*prompt, *reply], points)


def reusable(prompt: Sequence[int], held: Sequence[Turn], *, whole_states: bool, min_tokens: int) -> int:
    """What an engine could reuse for ``prompt`` after the ``held`` turns (the module doc)."""
    limit = len(prompt) - 1
    best = 0
    for turn in held:
        shared = min(lcp(prompt, turn.tokens), limit)
        if not whole_states:
            best = max(best, shared)
            continue
        best = max(best, *(p for p in turn.points if min_tokens <= p <= shared), 0)
    return best


@dataclass
class Client:
    """Re-renders the conversation each turn; remembers what was computed.

    ``whole_states``: the model's states restore only whole (see the module doc)."""

    engine: Engine
    path: Path
    tmp: Path
    whole_states: bool = False
    min_tokens: int = POLICY.min_tokens
    held: list[Turn] = field(default_factory=list)
    cold_engine: Engine | None = None
    system: str = SYSTEM

    @property
    def model(self) -> Any:
        return self.engine.get_model("m")

    def render(self, messages: list[dict[str, str]]) -> list[int]:
        return list(self.model.apply_chat_template({"messages": messages, "system": self.system}))

    def cold(self, prompt: list[int]) -> list[int]:
        if self.cold_engine is None:
            self.cold_engine = Engine(self.tmp / "cold")
            self.cold_engine.load_model("m", config(self.path, cache_enabled=False, n_seq_max=1))
        return run(self.cold_engine.get_model("m"), prompt)[0]

    def turn(self, messages: list[dict[str, str]], **kw: Any) -> tuple[str, Stats]:
        """Send a turn; check reuse ≥ reusable and reply == cold reply; return (text, stats)."""
        prompt = self.render(messages)
        return self.send(prompt, **kw)

    def send(self, prompt: list[int], **kw: Any) -> tuple[str, Stats]:
        want = reusable(prompt, self.held, whole_states=self.whole_states, min_tokens=self.min_tokens)
        ids, stats, text = run(self.model, prompt, **kw)
        assert stats.reuse is not None
        got = stats.reuse.tokens_reused
        assert got >= want - (0 if self.whole_states else 1), (
            f"reused {got} of {want} reusable tokens ({stats.reuse}, kind {stats.cache_hit_kind})"
        )
        assert ids == self.cold(prompt), "the greedy reply differs from a cold run"
        self.remember(prompt, ids)
        return text, stats

    def remember(self, prompt: list[int], ids: list[int]) -> None:
        # The end-of-turn token of the ChatML template every test model uses.
        (end_of_turn,) = self.model.tokenize("<|im_end|>")
        self.held.append(Turn.of(prompt, ids, end_of_turn))

    def close(self) -> None:
        if self.cold_engine is not None:
            self.cold_engine.close()


def run(model: Any, prompt: list[int], **kw: Any) -> tuple[list[int], Stats, str]:
    """Greedy reply of ``N_NEW`` tokens: (token ids, stats, text); an Error event raises."""
    ids: list[int] = []
    text: list[str] = []
    stats: Stats | None = None
    for event in model.infer(prompt, response_tokens=kw.pop("response_tokens", N_NEW), **kw):
        if isinstance(event, TokenId):
            ids.append(event.id)
        elif isinstance(event, Token):
            text.append(event.text)
        elif isinstance(event, Done):
            stats = event.stats
        elif isinstance(event, Error):
            raise AssertionError(f"the request failed: {event.reason}")
    assert stats is not None
    return ids, stats, "".join(text)
