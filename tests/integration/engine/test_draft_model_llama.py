"""A draft model on real llama.cpp (issue 29): another loaded model with the same vocabulary
proposes the drafts and the model verifies them in its tick. Greedy replies are identical
with the draft model and without speculation, whether the draft model always agrees (the
same weights), sometimes (a one-layer cut of the tiny model) or never (other random
weights); drafting is forced (``tests/helpers/forced_drafts``) so every tick verifies."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from app.engine import Engine, Model, ModelConfig
from app.engine.events import Done, TokenId
from tests.helpers.forced_drafts import always_draft
from tests.helpers.tiny_model import TINY_SEED, TINY_SHAPE, write_tiny_model

PARAGRAPH = (
    "Teh quick brown fox jumpd over the lazy dog. It was a sunny day and the fox was verry "
    "happy. After jumping, the fox ran into the forrest to find its freinds."
)
QUESTIONS = ["Write a haiku about autumn rain.", f"Fix the typos in this paragraph:\n\n{PARAGRAPH}"]


@pytest.fixture(scope="module")
def one_layer_tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model's seed and vocabulary, one layer instead of two: agrees now and then."""
    return write_tiny_model(tmp_path_factory.mktemp("draft") / "tiny-1layer.gguf", shape=replace(TINY_SHAPE, n_layer=1))


@pytest.fixture(scope="module")
def other_tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Other random weights, same vocabulary: its drafts are nearly always rejected."""
    return write_tiny_model(tmp_path_factory.mktemp("draft") / "tiny-other.gguf", seed=TINY_SEED + 1)


def config(path: Path, n_seq_max: int = 2) -> ModelConfig:
    return ModelConfig(path=str(path), n_ctx=512, n_seq_max=n_seq_max, n_batch=128, n_threads=2, cache_enabled=False)


def replies(model: Model, **opts: object) -> tuple[list[list[int]], list[Done]]:
    """Both questions at once (two seqs verifying in one tick): each reply's ids and Done."""
    streams = [
        model.infer(model.apply_chat_template({"messages": [{"role": "user", "content": q}]}),
                    response_tokens=40, ignore_eos=True, **opts)
        for q in QUESTIONS
    ]  # fmt: skip
    out, dones = [], []
    for stream in streams:
        events = list(stream)
        out.append([e.id for e in events if isinstance(e, TokenId)])
        done = events[-1]
        assert isinstance(done, Done), done
        dones.append(done)
    return out, dones


@pytest.fixture
def engine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Engine]:
    always_draft(monkeypatch)
    with Engine(tmp_path) as e:
        yield e


@pytest.mark.parametrize("draft", ["tiny_model_path", "one_layer_tiny", "other_tiny"], ids=["same", "one-layer", "other"])
def test_greedy_replies_are_the_same_with_a_draft_model_and_without_speculation(
    engine: Engine, tiny_model_path: Path, draft: str, request: pytest.FixtureRequest
) -> None:
    target = engine.load_model("t", config(tiny_model_path))
    engine.load_model("d", config(request.getfixturevalue(draft), n_seq_max=1))
    off, _ = replies(target, speculative=False)
    on, dones = replies(target, draft_model="d")
    assert on == off
    drafted = sum(d.stats.drafted_tokens for d in dones)
    accepted = sum(d.stats.accepted_tokens for d in dones)
    assert drafted > 0 and target.snapshot().draft_model == "d"
    if draft == "tiny_model_path":  # the same weights propose what the model says
        assert accepted >= 0.9 * drafted
    elif draft == "other_tiny":
        assert accepted < 0.5 * drafted


@pytest.mark.smollm2
def test_smollm2_drafting_for_itself_accepts_its_own_drafts(engine: Engine, smollm2_path: Path) -> None:
    target = engine.load_model("t", config(smollm2_path))
    engine.load_model("d", config(smollm2_path, n_seq_max=1))
    off, _ = replies(target, speculative=False)
    on, dones = replies(target, draft_model="d")
    assert on == off
    drafted = sum(d.stats.drafted_tokens for d in dones)
    assert drafted > 0 and sum(d.stats.accepted_tokens for d in dones) >= 0.9 * drafted
