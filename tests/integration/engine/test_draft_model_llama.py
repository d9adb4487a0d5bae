"""A draft model on real llama.cpp (issue 29): another loaded model with the same vocabulary
proposes the drafts and the model verifies them in its tick. Greedy replies are identical
with the draft model and without speculation, whether the draft model always agrees (the
same weights), sometimes (a one-layer cut of the tiny model) or never (other random
weights); drafting is forced (``tests/helpers/forced_drafts``) so every tick verifies. A stop
string or a cancel after accepted drafts leaves the seq's KV exactly as without speculation
(packed states compared)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from app.engine import Engine, Model, ModelConfig
from app.engine.events import Done, TokenId
from app.engine.llama.llama_backend import LlamaBackend
from app.engine.speculation.draft_model import DraftModel
from tests.helpers.forced_drafts import always_draft
from tests.helpers.tiny_model import TINY_SEED, TINY_SHAPE, write_tiny_model
from tests.unit.engine.harness import Harness, make

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


# ------------------------------------------------------------------ stops and cancels inside drafts


class DraftPair:
    """Harnesses on one model, with its own weights attached as the draft model (nearly every
    token of a greedy reply is then an accepted draft) and with speculation off."""

    def __init__(self, path: Path) -> None:
        def backend() -> LlamaBackend:
            return LlamaBackend(str(path), n_ctx_per_seq=512, n_seq_max=2, n_batch=128, n_threads=2)

        self.backends = [backend() for _ in range(3)]
        self.on = make(self.backends[0], n_ctx=512, n_batch=128)  # type: ignore[arg-type]
        self.off = make(self.backends[1], n_ctx=512, n_batch=128, speculative=False)  # type: ignore[arg-type]
        draft = DraftModel("d", self.backends[2])
        draft.calibrate()
        self.on.sch.commands.attach_draft(draft)

    def prompt(self, h: Harness) -> list[int]:
        text = f"<|im_start|>user\n{QUESTIONS[1]}<|im_end|>\n<|im_start|>assistant\n"
        return h.stub.tokenize(text, add_special=False, parse_special=True)

    def close(self) -> None:
        self.on.sch.commands.attach_draft(None)  # closes the draft's backend
        for b in self.backends[:2]:
            b.close()


@pytest.fixture(params=[pytest.param("tiny_model_path", id="tiny"),
                        pytest.param("smollm2_path", id="smollm2", marks=pytest.mark.smollm2)])  # fmt: skip
def draft_pair(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[DraftPair]:
    always_draft(monkeypatch)
    pair = DraftPair(request.getfixturevalue(request.param))
    try:
        yield pair
    finally:
        pair.close()


def _ids(h: Harness, ref: int) -> list[int]:
    return [e.id for e in h.events[ref] if isinstance(e, TokenId)]


def _packed(h: Harness, sid: str) -> bytes:
    return bytes(h.stub.kv_pack(h.sch.pool.sessions[sid].seq_id))


def test_a_stop_string_inside_an_accepted_draft_cuts_there_and_leaves_the_kv_of_never_drafting(draft_pair: DraftPair) -> None:
    on, off = draft_pair.on, draft_pair.off
    ref = off.admit(draft_pair.prompt(off), response_tokens=48, ignore_eos=True)
    off.run()
    text = off.text(ref)
    # A stop string first found in the middle of the reply: by then every tick carries drafts
    # the draft model (the same weights) proposed and the model accepted.
    start = next(i for i in range(len(text) // 2, len(text) - 3) if text.find(text[i : i + 3]) == i)
    stop = text[start : start + 3]
    refs = [h.admit(draft_pair.prompt(h), response_tokens=48, ignore_eos=True, stop_sequences=[stop],
                    session_id="s", **opts) for h, opts in ((on, {"draft_model": "d"}), (off, {}))]  # fmt: skip
    for h in (on, off):
        h.run()
    done = on.outcome(refs[0])
    assert isinstance(done, Done) and done.stats.stop_sequence == stop
    assert done.stats.accepted_tokens > 0
    assert on.text(refs[0]) == off.text(refs[1]) == text[:start]
    assert _ids(on, refs[0]) == _ids(off, refs[1])
    assert _packed(on, "s") == _packed(off, "s")  # no draft cell, accepted or not, left behind


def test_a_cancel_after_accepted_drafts_leaves_the_kv_of_never_drafting(draft_pair: DraftPair) -> None:
    on, off = draft_pair.on, draft_pair.off
    ref = on.admit(draft_pair.prompt(on), response_tokens=200, ignore_eos=True, session_id="s", draft_model="d")
    while not (on.sch.reqs and next(iter(on.sch.reqs.values())).num_accepted > 8):
        on.tick()
    assert next(iter(on.sch.reqs.values())).drafted  # drafts pending in the seq when cancelled
    on.sch.commands.cancel(ref)
    generated = _ids(on, ref)
    ref_off = off.admit(draft_pair.prompt(off), response_tokens=len(generated), ignore_eos=True, session_id="s")
    off.run()
    assert _ids(off, ref_off) == generated
    assert _packed(on, "s") == _packed(off, "s")
