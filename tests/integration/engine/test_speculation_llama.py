"""Speculative decoding on real llama.cpp: drafts are verified in the tick and rejected ones
leave nothing behind — the seq's packed KV equals the KV of never having drafted, and every
cache save holds exactly its key's tokens. Drafting is forced (``tests/helpers/forced_drafts``)
so that every tick verifies drafts, accepted and rejected alike."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from app.cache.blobs import seqstate
from app.cache.policy import CachePolicy
from app.engine import Engine, ModelConfig
from app.engine.events import Done
from app.engine.llama.llama_backend import LlamaBackend
from tests.helpers.forced_drafts import always_draft
from tests.unit.engine.harness import Harness, make

MODELS = [pytest.param("tiny_model_path", id="tiny"),
          pytest.param("smollm2_path", id="smollm2", marks=pytest.mark.smollm2)]  # fmt: skip
PARAGRAPH = (
    "Teh quick brown fox jumpd over the lazy dog. It was a sunny day and the fox was verry "
    "happy. After jumping, the fox ran into the forrest to find its freinds."
)


@pytest.fixture(params=MODELS)
def model_path(request: pytest.FixtureRequest) -> Path:
    path: Path = request.getfixturevalue(request.param)
    return path


@pytest.fixture(autouse=True)
def forced(monkeypatch: pytest.MonkeyPatch) -> None:
    always_draft(monkeypatch)


class Pair:
    """Harnesses on two backends of one model: speculation on and off."""

    def __init__(self, path: Path) -> None:
        self.backends = [
            LlamaBackend(str(path), n_ctx_per_seq=512, n_seq_max=2, n_batch=128, n_threads=2) for _ in range(2)
        ]
        self.on, self.off = (
            make(b, n_ctx=512, n_batch=128, speculative=spec)  # type: ignore[arg-type]
            for b, spec in zip(self.backends, (True, False), strict=True)
        )

    def close(self) -> None:
        for b in self.backends:
            b.close()


@pytest.fixture
def pair(model_path: Path) -> Iterator[Pair]:
    p = Pair(model_path)
    try:
        yield p
    finally:
        p.close()


def prompt_of(h: Harness) -> list[int]:
    text = f"<|im_start|>user\nFix the typos in this paragraph:\n\n{PARAGRAPH}<|im_end|>\n<|im_start|>assistant\n"
    return h.stub.tokenize(text, add_special=False, parse_special=True)


def ids(h: Harness, ref: int) -> list[int]:
    return h.token_ids(ref)


def packed_session(h: Harness, sid: str) -> bytes:
    return bytes(h.stub.kv_pack(h.sch.pool.sessions[sid].seq_id))


def test_rejected_drafts_leave_no_cells_behind(pair: Pair) -> None:
    refs = []
    for h in (pair.on, pair.off):
        refs.append(h.admit(prompt_of(h), response_tokens=48, ignore_eos=True, session_id="s"))
        h.run()
    done_on = pair.on.outcome(refs[0])
    assert isinstance(done_on, Done)
    assert done_on.stats.drafted_tokens > done_on.stats.accepted_tokens  # drafts were rejected
    assert ids(pair.on, refs[0]) == ids(pair.off, refs[1])
    assert packed_session(pair.on, "s") == packed_session(pair.off, "s")


def test_a_cancel_with_drafts_pending_leaves_the_kv_of_never_having_drafted(pair: Pair) -> None:
    on = pair.on
    ref = on.admit(prompt_of(on), response_tokens=200, ignore_eos=True, session_id="s")
    for _ in range(8):
        on.tick()
    assert any(r.drafted for r in on.sch.reqs.values())  # cancelled with draft cells in its seq
    on.sch.commands.cancel(ref)
    generated = ids(on, ref)
    off = pair.off
    ref_off = off.admit(prompt_of(off), response_tokens=len(generated), ignore_eos=True, session_id="s")
    off.run()
    assert ids(off, ref_off) == generated
    assert packed_session(on, "s") == packed_session(off, "s")


def test_two_sequences_verifying_in_one_tick_equal_their_runs_alone(pair: Pair) -> None:
    on, off = pair.on, pair.off
    prompts = [prompt_of(on), on.stub.tokenize("The list: apples, pears, plums. The list again:")]
    alone = []
    for p in prompts:
        ref = off.admit(p, response_tokens=32, ignore_eos=True)
        off.run()
        alone.append(ids(off, ref))
    refs = [on.admit(p, response_tokens=32, ignore_eos=True) for p in prompts]
    on.run()
    assert [ids(on, r) for r in refs] == alone


def test_every_cache_save_holds_exactly_its_tokens(tmp_path: Path, model_path: Path) -> None:
    policy = CachePolicy(min_tokens=8, cold_min_tokens=16, continued_interval=16, boundary_align_tokens=16)
    config = ModelConfig(path=str(model_path), n_ctx=512, n_seq_max=2, n_batch=128, n_threads=2, policy=policy, tier="disk")
    with Engine(tmp_path / "d") as engine:
        model = engine.load_model("m", config)
        prompt = model.apply_chat_template({"messages": [{"role": "user", "content": f"Fix the typos: {PARAGRAPH}"}]})
        stats = model.infer(prompt, response_tokens=64, ignore_eos=True, session_id="s").result()
        assert stats.drafted_tokens > 0
        engine.cache.flush()
        rows = engine.cache.rows("m")
        assert {r.save_reason for r in rows} >= {"continued", "finish"}
        for row in rows:
            payload = engine.cache.load(row)
            assert payload is not None
            assert seqstate.parse(payload).n_cells == row.n_tokens, f"a {row.save_reason} save holds drafts"


@pytest.mark.parametrize("sampling", [
    {"temperature": 0.8, "seed": 1234},
    {"temperature": 0.7, "top_k": 40, "top_p": 0.95, "min_p": 0.05, "repetition_penalty": 1.1, "seed": 7},
], ids=["temperature", "desktop-chain"])  # fmt: skip
def test_a_seeded_sampled_reply_is_the_same_on_and_off(pair: Pair, sampling: dict[str, object]) -> None:
    """Each row is sampled with the request's own chain and a draft kept only when the sample
    equals it: one draw per generated token, as without speculation, from the same logits."""
    refs = []
    for h in (pair.on, pair.off):
        refs.append(h.admit(prompt_of(h), response_tokens=40, ignore_eos=True, **sampling))
        h.run()
    done_on = pair.on.outcome(refs[0])
    assert isinstance(done_on, Done) and done_on.stats.drafted_tokens > 0
    assert ids(pair.on, refs[0]) == ids(pair.off, refs[1])
