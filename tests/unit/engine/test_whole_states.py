"""The scheduler with a memory whose states cannot be cut (issue 28), on the stub backend.

``StubBackend(memory=RECURRENT)`` fails any partial ``seq_rm`` or partial ``seq_cp`` (a
protocol mistake, as llama.cpp refuses it for Mamba or LFM2), so these tests show that no
path asks for one, and where the reuse comes from instead: the session's seq when the
prompt extends all of it, a checkpoint saved by an earlier prefill, or a whole copy of a
live seq taken at the moment it holds exactly the shared head. A real ``CacheStore`` holds
the saves (the stub's payloads are not a layout ``seqstate`` parses: stored whole).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from app.cache.store import CacheStore
from app.engine.backend import MemoryCaps
from app.engine.cache_hooks import StoreCache
from app.engine.config import ModelConfig
from app.engine.events import Done
from tests.helpers.stub_backend import StubBackend
from tests.unit.engine.harness import Harness, make, tok

RECURRENT = MemoryCaps("recurrent", cut_states=False, trim_tail=False)
EOT = "\x00"  # the stub's end-of-generation token (0) marks a message's end
SYSTEM = "<system>You are a careful assistant. Answer briefly." + EOT
POLICY = {"min_tokens": 8, "cold_min_tokens": 100_000, "cold_max_tokens": 200_000, "checkpoint_interval": 64}


@pytest.fixture
def store(tmp_path: Path):
    with CacheStore(tmp_path / "data", ram_file_dir=tmp_path / "shm") as s:
        yield s


def _make(store: CacheStore, **cfg) -> Harness:
    def hooks(config: ModelConfig) -> StoreCache:
        return StoreCache(store, model_id="m", policy=config.cache_policy, tier="ram", context_size=4096, quant_bits=16)

    cfg.setdefault("n_seq_max", 2)
    return make(StubBackend(n_seq_max=cfg["n_seq_max"], memory=RECURRENT), cache=hooks, cache_enabled=True, policy=POLICY, **cfg)


def _saved(store: CacheStore) -> list[int]:
    return sorted(row.n_tokens for row in store.rows())


def _user(text: str) -> str:
    return f"<user>{text}{EOT}<assistant>"


def test_a_prefill_saves_at_message_boundaries_every_interval_and_before_its_last_token(store):
    h = _make(store, prefill_chunk_size=16)
    prompt = SYSTEM + _user("What is the tallest mountain in the Alps, and how high is it?")
    a = h.admit(prompt, response_tokens=3)
    h.run()
    assert isinstance(h.outcome(a), Done)
    end_of_system, end_of_user = len(SYSTEM), prompt.rindex(EOT) + 1
    assert _saved(store) == [end_of_system, 64, end_of_user, 128, len(prompt) - 1, len(prompt) + 3]
    # a prefill slice never crosses a checkpoint: each save sees exactly its tokens
    assert all(row.tokens == tuple(tok(prompt + "???")[: row.n_tokens]) or row.n_tokens > len(prompt) for row in store.rows())


def test_regenerate_in_a_session_restores_the_prompt_end_checkpoint_and_cuts_nothing(store):
    h = _make(store)
    prompt = SYSTEM + _user("Name a river in France.")
    h.admit(prompt, session_id="s", response_tokens=3)
    h.run()
    again = h.admit(prompt, session_id="s", response_tokens=3)  # the seq holds prompt + reply
    assert h.tick() == [["prefill", 0, 1]]  # only the last prompt token is read again
    h.run()
    reuse = h.outcome(again).stats.reuse
    assert (reuse.source, reuse.tokens_reused) == ("cache", len(prompt) - 1)


def test_an_edit_of_the_first_message_keeps_the_system_prompt(store):
    h = _make(store)
    h.admit(SYSTEM + _user("Name a river in France."), session_id="s", response_tokens=3)
    h.run()
    edited = SYSTEM + _user("Name a mountain in Spain.")
    b = h.admit(edited, session_id="s", response_tokens=3)
    h.run()
    reuse = h.outcome(b).stats.reuse
    assert reuse.source == "cache"
    assert len(SYSTEM) <= reuse.tokens_reused <= len(SYSTEM + "<user>Name a ")  # a checkpoint, not a cut


def test_without_a_checkpoint_the_miss_says_so(store):
    h = _make(store)
    h.admit("<user>Name a river in France, then tell me its length.", session_id="s", response_tokens=3)
    h.run()
    b = h.admit("<user>Name a river in Spain.", session_id="s", response_tokens=3)
    h.run()
    reuse = h.outcome(b).stats.reuse
    assert (reuse.source, reuse.miss_reason) == ("none", "no_checkpoint")


def test_a_follow_up_extends_the_session_seq(store):
    h = _make(store)
    first = SYSTEM + _user("Name a river in France.")
    h.admit(first, session_id="s", response_tokens=3)
    h.run()
    held = h.sch.pool.sessions["s"].tokens
    b = h.admit(held + tok(EOT + _user("And in Italy?")), session_id="s", response_tokens=3)
    h.run()
    assert h.outcome(b).stats.reuse.source == "session"
    assert h.outcome(b).stats.reuse.tokens_reused == len(held)


def test_chats_starting_together_copy_the_shared_head_whole_when_the_donor_holds_exactly_it(store):
    h = _make(store, prefill_chunk_size=16)
    head = SYSTEM + "<user>Please tell me, in a few words: "
    a = h.admit(head + "what is two plus two?", response_tokens=2)
    b = h.admit(head + "how much is ten minus one?", response_tokens=2)
    n = len(head)
    assert h.sch.reqs[1].share_from == (a, n)
    rows = h.tick_while(lambda: h.sch.reqs[1].share_from is not None)
    # the donor's slices stop at the shared head (and at its own checkpoint, the system
    # prompt's end), so its seq holds exactly the head once: then b copies it whole
    assert sum(r[0][2] for r in rows) == n
    assert h.stub.kv[1] == tok(head)
    h.run()
    assert h.outcome(b).stats.cache_delta.read == n
    assert h.outcome(a).stats.reuse.source == "none"


def test_a_prompt_equal_to_what_the_session_holds_is_not_cut_for_fresh_logits(store):
    # "Continue" after a reply cut by its length: the client sends the prompt and the reply
    # so far, exactly what the session's seq holds. Attention drops the last cell and reads
    # it again; a recurrent state cannot, so it restores the last checkpoint instead.
    h = _make(store)
    first = SYSTEM + _user("Name a river in France.")
    h.admit(first, session_id="s", response_tokens=3)
    h.run()
    held = list(h.sch.pool.sessions["s"].tokens)
    again = h.admit(held, session_id="s", response_tokens=3)
    h.run()
    end = h.outcome(again)
    assert isinstance(end, Done)
    assert end.stats.reuse.source == "cache"
    cold = make(StubBackend(n_seq_max=1))
    ref = cold.admit(held, response_tokens=3)
    cold.run()
    assert h.text(again) == cold.text(ref)
