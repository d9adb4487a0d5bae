"""Exact by construction (issues 12 and 24): with one KV stream per sequence and the default
KV cell types (q8_0 K, f16 V), every way Hearth runs a request gives the logits of running it
alone from a cold start — bit for bit, not "the same tokens except at near-ties".

Each test runs a request two ways (greedy) on SmolLM2 and on the tiny test model (Q8_0 layer
weights), and compares the logits behind every generated token
(``tests/helpers/logit_recorder.py`` records them inside the real backend and finds each step
by its context, whatever seq or restore path served it).
"""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

from app.cache.policy import CachePolicy
from app.engine import Engine, ModelConfig
from app.engine.events import Done, TokenId
from app.engine.llama import llama_backend
from app.engine.scheduling.scheduler import Scheduler
from tests.helpers.logit_recorder import RecordingBackend, logits_for

MODELS = [pytest.param("tiny_model_path", id="tiny"),
          pytest.param("smollm2_path", id="smollm2", marks=pytest.mark.smollm2)]

POLICY = CachePolicy(
    min_tokens=16, cold_min_tokens=64, cold_max_tokens=30000, continued_interval=48,
    boundary_trim_tokens=4, boundary_align_tokens=32, session_resume_wait_ms=2000,
)  # fmt: skip
N_NEW = 24
QUESTIONS = [
    "What is the capital of France?", "Write a haiku about autumn rain.",
    "Explain how a bicycle stays upright.", "List three uses for a paperclip.",
    "Why is the sky blue during the day?", "Describe the taste of a ripe mango.",
    "Give advice to someone learning to cook.", "What are the main causes of ocean tides?",
]


@pytest.fixture(params=MODELS)
def model_path(request) -> Path:
    """Each test runs on both models: SmolLM2 (Q4_1) and the tiny one (Q8_0 layer weights)."""
    return request.getfixturevalue(request.param)


@pytest.fixture(autouse=True)
def recording(monkeypatch):
    monkeypatch.setattr(llama_backend, "LlamaBackend", RecordingBackend)
    RecordingBackend.reset()
    yield
    RecordingBackend.reset()


def _config(path: Path, **kw) -> ModelConfig:
    kw.setdefault("n_ctx", 1024)
    kw.setdefault("n_seq_max", 4)
    kw.setdefault("n_batch", 256)
    kw.setdefault("n_threads", 2)
    kw.setdefault("policy", POLICY)
    kw.setdefault("tier", "disk")
    return ModelConfig(path=str(path), **kw)


def _chat(model, question: str, history: list[dict[str, str]] | None = None) -> list[int]:
    messages = [*(history or []), {"role": "user", "content": question}]
    return model.apply_chat_template({"messages": messages})


def _run(model, prompt, **kw) -> tuple[list[int], object]:
    ids: list[int] = []
    stats = None
    for event in model.infer(prompt, response_tokens=kw.pop("n", N_NEW), **kw):
        if isinstance(event, TokenId):
            ids.append(event.id)
        elif isinstance(event, Done):
            stats = event.stats
    return ids, stats


def _assert_same_logits(prompt, generated_a, generated_b) -> None:
    """Both runs generated the same tokens, and every step's logits were bit-identical
    (``logits_for`` raises when two recorded runs of one step differ)."""
    assert generated_a == generated_b
    steps = logits_for(prompt, generated_a)
    assert len(steps) == len(generated_a)
    assert all(int(np.argmax(lg)) == t for lg, t in zip(steps, generated_a, strict=True))


def _count_runs(prompt, generated) -> int:
    """How many recorded runs the request's first step has (to prove both ways were seen)."""
    want = list(prompt)
    return sum(1 for ctx, _ in RecordingBackend.records
               if len(ctx) == len(want) and all(t is None or t == w for t, w in zip(ctx, want, strict=True)))


def _cold(tmp_path: Path, path: Path, prompt: list[int], n: int = N_NEW) -> list[int]:
    with Engine(tmp_path / f"cold-{len(prompt)}-{prompt[-1]}") as engine:
        model = engine.load_model("m", _config(path, cache_enabled=False, n_seq_max=1))
        return _run(model, prompt, n=n)[0]


def test_eight_batched_equal_eight_alone(tmp_path, model_path):
    with Engine(tmp_path / "d") as engine:
        model = engine.load_model("m", _config(model_path, n_seq_max=8, cache_enabled=False))
        prompts = [_chat(model, q) for q in QUESTIONS]
        alone = [_run(model, p)[0] for p in prompts]
        together: list[list[int]] = [[] for _ in prompts]
        threads = [threading.Thread(target=lambda i=i: together.__setitem__(i, _run(model, prompts[i])[0]))
                   for i in range(len(prompts))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    for p, a, b in zip(prompts, alone, together, strict=True):
        _assert_same_logits(p, a, b)
        assert _count_runs(p, a) == 2


def test_a_cold_prompt_while_three_others_decode_equals_it_alone(tmp_path, model_path):
    """Its prompt ends beside the others' decode rows: read first, in a decode of its own, its
    first decode row then beside theirs (``Scheduler._read_first``)."""
    split: list[int] = []
    read_first = Scheduler._read_first
    # (a context of its own: test_exactness_speculative calls this test with its own arguments)
    with pytest.MonkeyPatch.context() as mp, Engine(tmp_path / "d") as engine:
        mp.setattr(Scheduler, "_read_first", lambda self, *parts: split.append(1) or read_first(self, *parts))
        model = engine.load_model("m", _config(model_path, cache_enabled=False))
        target = _chat(model, QUESTIONS[0])
        alone = _run(model, target)[0]
        others = [model.infer(_chat(model, q), response_tokens=80, ignore_eos=True) for q in QUESTIONS[1:4]]
        events = iter(others[0])
        while not isinstance(next(events), TokenId):  # until the others are decoding
            pass
        busy = _run(model, target)[0]
        for s in others:
            s.result()
    assert split, "the prompt was not read beside decode rows"
    _assert_same_logits(target, alone, busy)
    assert _count_runs(target, alone) == 2


def test_a_session_resumed_after_cells_were_freed_equals_a_cold_run(tmp_path, model_path):
    """X runs long; session S's turn 1 finishes meanwhile; X finishes; the engine goes idle;
    S's turn 2 (sticky) must equal a cold run of turn 2's prompt."""
    with Engine(tmp_path / "d") as engine:
        model = engine.load_model("m", _config(model_path))
        x = model.infer(_chat(model, QUESTIONS[5]), response_tokens=96, ignore_eos=True)
        turn1 = _chat(model, QUESTIONS[1])
        ids1, _ = _run(model, turn1, session_id="s")
        x.result()
        reply = model.detokenize(ids1)
        turn2 = _chat(model, "And another one about snow.",
                      [{"role": "user", "content": QUESTIONS[1]}, {"role": "assistant", "content": reply}])
        warm, stats = _run(model, turn2, session_id="s")
        assert stats.cache_hit_kind == "sticky"
    cold = _cold(tmp_path, model_path, turn2)
    _assert_same_logits(turn2, cold, warm)


def _first_turn_then_follow_up(model) -> list[int]:
    """Run a session-less first turn; the prompt of its follow-up (the conversation re-sent)."""
    ids1, _ = _run(model, _chat(model, QUESTIONS[1]))
    reply = model.detokenize(ids1)
    return _chat(model, "And another one about snow.",
                 [{"role": "user", "content": QUESTIONS[1]}, {"role": "assistant", "content": reply}])


def test_a_follow_up_from_a_freed_seqs_cells_equals_a_cold_run(tmp_path, model_path):
    """A client that sends no session id: turn 1 ends and its seq goes free still holding its
    cells (``SeqPool.leave``); turn 2 re-sends the conversation, takes that seq and starts
    from them instead of the cache — and equals a cold run of turn 2's prompt."""
    with Engine(tmp_path / "d") as engine:
        model = engine.load_model("m", _config(model_path, n_seq_max=2))
        turn2 = _first_turn_then_follow_up(model)
        warm, stats = _run(model, turn2)
        # the freed seq's cells, not a restore: a prefix held in memory, like a live seq's
        assert (stats.cache_hit_kind, stats.reuse.source) == ("partial", "live")
    cold = _cold(tmp_path, model_path, turn2)
    _assert_same_logits(turn2, cold, warm)


def test_clients_taking_turns_find_their_own_freed_seqs_and_equal_cold_runs(tmp_path, model_path):
    """Two clients without session ids take turns (A, B, A, B): each follow-up takes the free
    seq still holding that client's last turn (``SeqPool.take``), not the lowest free one
    whose cells the other client left, and equals a cold run of its prompt.
    (Seen failing before: A's follow-up took seq 0, holding B's turn, and restored its own
    from the cache.)"""
    with Engine(tmp_path / "d") as engine:
        model = engine.load_model("m", _config(model_path, n_seq_max=2))
        history: dict[str, list[dict[str, str]]] = {}
        for name, question in (("a", QUESTIONS[1]), ("b", QUESTIONS[3])):
            ids, _ = _run(model, _chat(model, question))
            history[name] = [{"role": "user", "content": question},
                             {"role": "assistant", "content": model.detokenize(ids)}]
        follow_ups = {name: _chat(model, "Say it again, shorter.", history[name]) for name in history}
        warm = {}
        for name, prompt in follow_ups.items():
            warm[name], stats = _run(model, prompt)
            # the freed seq's cells ("live"), not a restore from the cache ("cache")
            assert (stats.cache_hit_kind, stats.reuse.source) == ("partial", "live"), name
    for name, prompt in follow_ups.items():
        cold = _cold(tmp_path / name, model_path, prompt)
        _assert_same_logits(prompt, cold, warm[name])


def test_a_follow_up_after_a_verify_on_its_freed_seq_equals_a_cold_run(tmp_path, model_path):
    """``verify`` runs on a free seq and leaves it empty: the turn that seq held is no longer
    there to start from, and a follow-up restores it instead (the pool forgot the cells).
    (Seen failing before: the follow-up took the emptied seq as holding its turn.)"""
    with Engine(tmp_path / "d") as engine:
        model = engine.load_model("m", _config(model_path, n_seq_max=2))
        turn2 = _first_turn_then_follow_up(model)
        model.verify(turn2[:8], turn2[8:10], 2)
        warm, stats = _run(model, turn2)
        assert stats.reuse.source != "live"
    cold = _cold(tmp_path, model_path, turn2)
    _assert_same_logits(turn2, cold, warm)


def test_warm_from_a_cold_split_save_equals_cold(tmp_path, model_path):
    with Engine(tmp_path / "d") as engine:
        model = engine.load_model("m", _config(model_path))
        long_q = " ".join(QUESTIONS) + " Answer the first question only."
        first = _chat(model, long_q)
        _, stats = _run(model, first)  # cold split: the first 32-aligned tokens are saved on the way
        engine.cache.flush()
        assert stats.finish_key is not None and engine.cache.delete(stats.finish_key)
        split = ((len(first) - POLICY.boundary_trim_tokens) // 32) * 32
        other = first[:split] + model.tokenize(" Answer the last one.")
    # A restart: the first request's cells (left in its free seq) are gone; the cache is not.
    with Engine(tmp_path / "d") as engine:
        model = engine.load_model("m", _config(model_path))
        warm, stats = _run(model, other)
        assert stats.cache_hit_kind == "partial"
        assert stats.cache_delta.read == split  # restored from the cold-split row
    cold = _cold(tmp_path, model_path, other)
    _assert_same_logits(other, cold, warm)


def test_a_restore_equals_continuing_the_sequence_in_memory(tmp_path, model_path):
    """Turn 2 of a sticky session (its KV still in the seq) and the same turn 2 restored from
    the session's saves after a restart give the same logits."""
    history_q = QUESTIONS[2]
    with Engine(tmp_path / "d") as engine:
        model = engine.load_model("m", _config(model_path))
        turn1 = _chat(model, history_q)
        ids1, _ = _run(model, turn1, session_id="s")
        reply = model.detokenize(ids1)
        turn2 = _chat(model, "Say it in one sentence.",
                      [{"role": "user", "content": history_q}, {"role": "assistant", "content": reply}])
        in_memory, stats = _run(model, turn2, session_id="s")
        assert stats.cache_hit_kind == "sticky"
    with Engine(tmp_path / "d") as engine:  # restart: the seq is gone, the saves are on disk
        model = engine.load_model("m", _config(model_path))
        restored, stats = _run(model, turn2)
        assert stats.cache_hit_kind in ("exact", "partial")
    _assert_same_logits(turn2, in_memory, restored)


@pytest.mark.parametrize("n_seq_max", [1, 8])
def test_a_state_saved_under_four_seqs_loads_under_one_and_eight(tmp_path, model_path, n_seq_max):
    with Engine(tmp_path / "d") as engine:
        model = engine.load_model("m", _config(model_path, n_seq_max=4))
        prompt = _chat(model, QUESTIONS[3])
        model.prefill_only(prompt)
        engine.cache.flush()
    with Engine(tmp_path / "d") as engine:
        model = engine.load_model("m", _config(model_path, n_seq_max=n_seq_max))
        warm, stats = _run(model, prompt)
        assert stats.cache_hit_kind == "exact"
    cold = _cold(tmp_path, model_path, prompt)
    _assert_same_logits(prompt, cold, warm)
