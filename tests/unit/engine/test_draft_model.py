"""Speculative decoding with a draft model, on the stub backend: a second stub "model" proposes
the drafts (``app.engine.speculation.draft_model``), the target verifies them as it verifies prompt-lookup
drafts. The reply never changes; what the draft model agrees with is accepted; its KV follows
each seq (rejections dropped, a sticky session's cells kept); it never drafts where a tail
cannot be dropped. Nothing numeric: tests/integration/engine/test_draft_model_llama.py runs
real models."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from app.engine import Engine, ModelConfig
from app.engine.backend import MemoryCaps
from app.engine.errors import InvalidRequest, NotFound
from app.engine.events import Done
from app.engine.speculation import draft_model
from app.engine.speculation.draft_model import DraftModel, check_compatible
from tests.helpers.stub_backend import FaultyBackend, StubBackend
from tests.unit.engine.harness import Harness, make, tok

STORY = "once upon a time a small robot learnt to bake bread, and every morning it sang"
PROMPT = "Tell: "
"""The prompt does not hold the reply: prompt lookup has nothing to copy, a draft model does."""


def teller(**kw: Any) -> StubBackend:
    return StubBackend(script={PROMPT: STORY}, **kw)


def harness(stub: StubBackend, draft: StubBackend | None = None, **cfg: Any) -> Harness:
    """A scheduler whose cost model keeps its priors (see test_speculation.harness), with
    ``draft`` attached as the draft model "d"."""
    h = make(stub, **cfg)
    h.sch.speculator.costs.observe = lambda shape, ms: None  # type: ignore[method-assign]
    if draft is not None:
        model = DraftModel("d", draft)
        model.calibrate()
        assert draft.kv[0] == []  # the calibration left nothing behind
        draft.decoded_ticks = 0
        draft.prefilled.clear()
        h.sch.commands.attach_draft(model)
    return h


def run(h: Harness, prompt: str | list[int] = PROMPT, **opts: Any) -> tuple[int, Done]:
    return h.run_to_done(prompt, **opts)


def ids(h: Harness, ref: int) -> list[int]:
    return h.token_ids(ref)


def test_a_draft_model_that_agrees_drafts_what_the_prompt_does_not_hold():
    draft = teller()
    on, off = harness(teller(), draft), harness(teller(), speculative=False)
    ref_on, done_on = run(on, response_tokens=200, draft_model="d")
    ref_off, _ = run(off, response_tokens=200)
    assert on.text(ref_on) == off.text(ref_off) == STORY
    assert ids(on, ref_on) == ids(off, ref_off)
    assert done_on.stats.accepted_tokens > len(STORY) // 2
    assert done_on.stats.accepted_tokens == done_on.stats.drafted_tokens  # the same "model"
    assert len(on.sampled) < len(off.sampled) // 2
    assert draft.decoded_ticks > 0
    # Prompt lookup alone finds nothing to copy here.
    lookup = harness(teller())
    _, done = run(lookup, response_tokens=200)
    assert done.stats.accepted_tokens < done_on.stats.accepted_tokens // 4


def test_a_draft_model_that_disagrees_changes_the_counts_only():
    draft = StubBackend(script={PROMPT: "the robot " + STORY[::-1]})  # agrees now and then
    on, off = harness(teller(), draft), harness(teller(), speculative=False)
    ref_on, done_on = run(on, response_tokens=200, draft_model="d", session_id="s")
    ref_off, _ = run(off, response_tokens=200, session_id="s")
    assert ids(on, ref_on) == ids(off, ref_off)
    assert done_on.stats.drafted_tokens > done_on.stats.accepted_tokens
    session = on.sch.pool.sessions["s"]
    assert on.stub.kv[session.seq_id] == session.tokens  # the target holds no rejected draft


def test_requests_without_draft_model_use_prompt_lookup_and_leave_the_draft_model_alone():
    draft = teller()
    h = harness(teller(), draft)
    _, done = run(h, response_tokens=200)
    assert draft.decoded_ticks == 0 and not any(draft.kv.values())
    _, done = run(h, response_tokens=200, draft_model="other")  # not attached: prompt lookup
    assert draft.decoded_ticks == 0


def test_the_draft_models_kv_follows_the_seq_and_keeps_a_sessions_cells():
    draft = teller()
    h = harness(teller(), draft)
    ref, _ = run(h, response_tokens=200, draft_model="d", session_id="s")
    session = h.sch.pool.sessions["s"]
    held = draft.kv[session.seq_id]
    assert held[: len(session.tokens) - 1] == session.tokens[:-1]  # at most its own drafts after
    before = len(draft.steps)
    follow = session.tokens + tok(f" {PROMPT}")
    _, done = run(h, follow, response_tokens=200, draft_model="d", session_id="s")
    assert done.stats.accepted_tokens > len(STORY) // 2
    # The second turn's first catch-up starts where the first turn left off, not at 0.
    (first,) = draft.steps[before]
    assert first.seq_id == session.seq_id and first.pos >= len(session.tokens) - 2


@pytest.mark.parametrize("stop", ["robot", "t t", "g"])
def test_a_stop_string_inside_a_draft_models_accepted_draft_cuts_there(stop):
    on, off = harness(teller(), teller()), harness(teller(), speculative=False)
    ref_on, _ = run(on, response_tokens=200, stop_sequences=[stop], session_id="s", draft_model="d")
    ref_off, _ = run(off, response_tokens=200, stop_sequences=[stop], session_id="s")
    assert on.text(ref_on) == off.text(ref_off) == STORY[: STORY.index(stop)]
    assert ids(on, ref_on) == ids(off, ref_off)
    session = on.sch.pool.sessions["s"]
    assert on.stub.kv[session.seq_id] == session.tokens


def test_a_long_prompt_is_read_into_the_draft_model_in_slices(monkeypatch):
    monkeypatch.setattr(draft_model, "CATCH_UP_TOKENS", 8)
    draft = teller()
    on, off = harness(teller(), draft), harness(teller(), speculative=False)
    prompt = "x" * 50 + PROMPT
    ref_on, done_on = run(on, prompt, response_tokens=200, draft_model="d")
    ref_off, _ = run(off, prompt, response_tokens=200)
    assert ids(on, ref_on) == ids(off, ref_off)
    assert done_on.stats.accepted_tokens > len(STORY) // 2
    assert max(len(op.tokens) for ops in draft.steps for op in ops) <= 8


def test_several_sequences_share_the_draft_models_passes_and_match_solo_runs():
    prompts = [PROMPT, "zz " + PROMPT, "no script here"]
    solo = []
    for p in prompts:
        h = harness(teller(), speculative=False)
        ref, _ = run(h, p, response_tokens=60, ignore_eos=True)
        solo.append(ids(h, ref))
    draft = teller()
    h = harness(teller(), draft)
    refs = [h.admit(p, response_tokens=60, ignore_eos=True, draft_model="d") for p in prompts]
    h.run()
    assert [ids(h, r) for r in refs] == solo
    assert any(len(ops) > 1 for ops in draft.steps)  # one draft pass served several seqs


def test_a_failing_draft_model_costs_its_drafts_only():
    draft = FaultyBackend(script={PROMPT: STORY})
    on, off = harness(teller(), draft), harness(teller(), speculative=False)
    ref = on.admit(PROMPT, response_tokens=200, draft_model="d")
    for _ in range(4):
        on.tick()
    draft.arm("decode", RuntimeError("draft decode failed"))
    on.run()
    ref_off, _ = run(off, response_tokens=200)
    done = on.outcome(ref)
    assert isinstance(done, Done)
    assert ids(on, ref) == ids(off, ref_off)
    assert "decode" in draft.raised
    assert done.stats.accepted_tokens > 0


@pytest.mark.parametrize("memory", [
    MemoryCaps("recurrent", cut_states=False, trim_tail=False),
    MemoryCaps("sliding_window", cut_states=False, trim_tail=True, n_swa=16),
], ids=lambda m: m.kind)  # fmt: skip
def test_a_target_that_cannot_drop_a_tail_never_drafts_with_a_draft_model(memory):
    draft = teller()
    h = harness(teller(memory=memory), draft)
    _, done = run(h, response_tokens=200, draft_model="d", speculative=True)
    assert done.stats.drafted_tokens == 0 and draft.decoded_ticks == 0
    assert h.text(h.ended[-1]) == STORY


def test_only_a_model_with_the_same_vocabulary_and_droppable_tails_can_draft():
    target = teller()
    check_compatible(target, teller())
    other = teller()
    other.info = replace(other.info, n_vocab=49152)
    with pytest.raises(InvalidRequest, match="same vocabulary"):
        check_compatible(target, other)

    class Shifted(StubBackend):
        def token_piece(self, token: int) -> bytes:
            return chr(token + 1).encode() if 0 < token < 0x10FFFF else b""

    with pytest.raises(InvalidRequest, match="not the same vocabulary"):
        check_compatible(target, Shifted())
    with pytest.raises(InvalidRequest, match="recurrent memory"):
        check_compatible(target, teller(memory=MemoryCaps("recurrent", cut_states=False, trim_tail=False)))


# ------------------------------------------------------------------ through the Engine


def engine_of(tmp_path: Path, made: list[StubBackend]) -> Engine:
    def factory(config: ModelConfig) -> StubBackend:
        memory = MemoryCaps("recurrent", cut_states=False, trim_tail=False) if "mamba" in config.path else MemoryCaps()
        made.append(teller(n_seq_max=config.n_seq_max, memory=memory))
        return made[-1]

    return Engine(tmp_path, backend_factory=factory)


def test_a_request_naming_a_loaded_model_attaches_it_as_the_draft_model(tmp_path):
    made: list[StubBackend] = []
    with engine_of(tmp_path, made) as engine:
        target = engine.load_model("t", ModelConfig(path="t", n_seq_max=2, n_batch=64, cache_enabled=False))
        # Its own settings for its own chats (a ubatch larger than the draft's batch) do not
        # stop it drafting.
        engine.load_model("d", ModelConfig(path="d", n_seq_max=1, n_batch=512, n_ubatch=512, cache_enabled=False))
        stats = target.infer(tok(PROMPT), response_tokens=40, draft_model="d").result(30)
        assert stats.drafted_tokens > 0
        assert target.draft_id == "d" and target.snapshot().draft_model == "d"
        assert len(made) == 3 and made[2].n_seq_max == 2  # its own backend, a seq per target seq
        with pytest.raises(NotFound):
            target.infer(tok(PROMPT), draft_model="nope")
        assert target.draft_id == "d"  # a refused pick changes nothing
        engine.unload("d")  # it drafts for no one once it is gone
        assert target.draft_id is None
        assert made[1].closed and made[2].closed
        target.infer(tok(PROMPT), response_tokens=4).result(30)
        assert target.snapshot().draft_model is None


def test_a_model_whose_memory_cannot_drop_a_tail_refuses_a_draft_model(tmp_path):
    made: list[StubBackend] = []
    with engine_of(tmp_path, made) as engine:
        target = engine.load_model("m", ModelConfig(path="mamba", n_seq_max=1, n_batch=64, cache_enabled=False))
        engine.load_model("d", ModelConfig(path="d", n_seq_max=1, n_batch=64, cache_enabled=False))
        with pytest.raises(InvalidRequest, match="recurrent memory"):
            target.use_draft("d")
        assert target.draft_id is None and len(made) == 2  # nothing was loaded for it
        # A chat that picked a draft model and moved to this model still gets its replies.
        stats = target.infer(tok(PROMPT), response_tokens=20, draft_model="d").result(30)
        assert stats.drafted_tokens == 0 and stats.completion_tokens > 0 and len(made) == 2


def test_a_draft_model_slower_than_the_rows_it_saves_is_not_used():
    draft = teller()
    h = harness(teller(), draft)
    assert h.sch.speculator.draft is not None
    h.sch.speculator.draft.token_ms = 50.0  # a pass costs more than the decode tick it could save
    _, done = run(h, response_tokens=200, draft_model="d")
    assert done.stats.drafted_tokens == 0 and draft.decoded_ticks == 0
    h.sch.speculator.draft.token_ms = 0.5  # cheap again: it drafts
    _, done = run(h, response_tokens=200, draft_model="d")
    assert done.stats.accepted_tokens > len(STORY) // 2
