"""Property-based: chat flows on every memory type never cut a state that cannot be cut and
always answer like a cold run (issue 28).

Hypothesis draws interleavings of what chat users and clients do — new chats on a shared
system prompt, follow-ups, regenerates, edits of any earlier message, branches, with and
without session ids, cancels, ended sessions, ticks in between — and runs them on the stub
backend with each memory type (``MemoryCaps``) and a real ``CacheStore``. The stub fails any
partial ``seq_rm`` / ``seq_cp`` of a state that cannot be cut, and its next token depends on
everything its sequence holds, so a reply equal to the same prompt's reply on a fresh
scheduler (cache off) means the reused state was exactly the prompt's head. Properties:

- no cut a memory cannot make; no error event; every request ends exactly once;
- every reply equals the cold reply of its prompt;
- when everything has settled, no sequence is taken but the idle sessions' (``pool.check``
  after every tick, then ``end_session`` frees them all).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.cache.store import CacheStore
from app.engine.backend import MemoryCaps
from app.engine.cache_hooks import StoreCache
from app.engine.config import ModelConfig
from app.engine.events import Done, Error
from tests.helpers.stub_backend import StubBackend
from tests.unit.engine.harness import Harness, make

EXAMPLES = int(os.environ.get("HEARTH_PROPERTY_EXAMPLES", "30"))
SETTINGS = settings(
    max_examples=EXAMPLES, deadline=None, database=None,
    derandomize=not os.environ.get("HEARTH_PROPERTY_RANDOM"),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)  # fmt: skip
MEMORIES = {
    "attention": MemoryCaps(),
    "sliding_window": MemoryCaps("sliding_window", cut_states=False, trim_tail=True, n_swa=8),
    "recurrent": MemoryCaps("recurrent", cut_states=False, trim_tail=False),
}
EOT = "\x00"  # the stub's end-of-generation token marks message ends
SYSTEM = "<s>Be brief and kind." + EOT
WORDS = ["bread", "rivers", "lamps", "bridges", "tea", "maps", "owls", "sails"]
POLICY = {"min_tokens": 4, "cold_min_tokens": 40, "cold_max_tokens": 100_000, "boundary_align_tokens": 32,
          "boundary_trim_tokens": 2, "checkpoint_interval": 48}  # fmt: skip

message = st.lists(st.sampled_from(WORDS), min_size=1, max_size=4).map(" ".join)
action = st.one_of(
    st.tuples(st.just("ask"), st.integers(0, 2), message, st.booleans()),  # chat, question, session?
    st.tuples(st.just("regen"), st.integers(0, 2), st.just(""), st.booleans()),
    st.tuples(st.just("edit"), st.integers(0, 2), message, st.booleans()),  # edits a random earlier turn
    st.tuples(st.just("tick"), st.integers(1, 6), st.just(""), st.just(False)),
    st.tuples(st.just("cancel"), st.integers(0, 2), st.just(""), st.just(False)),
    st.tuples(st.just("end"), st.integers(0, 2), st.just(""), st.just(False)),
)


def _render(turns: list[tuple[str, str]]) -> str:
    """A conversation as the stub's chat template would lay it out (message ends marked)."""
    text = SYSTEM
    for question, reply in turns:
        text += f"<u>{question}{EOT}<a>"
        if reply:
            text += reply + EOT
    return text


def _scheduler(memory: MemoryCaps, store: CacheStore | None, n_seq: int = 2) -> Harness:
    def hooks(config: ModelConfig) -> StoreCache:
        assert store is not None
        return StoreCache(store, model_id="m", policy=config.cache_policy, tier="ram", context_size=4096, quant_bits=16)

    stub = StubBackend(n_seq_max=n_seq, memory=memory)
    if store is None:
        return make(stub, n_batch=64, prefill_chunk_size=16)
    return make(stub, cache=hooks, cache_enabled=True, policy=POLICY, n_batch=64, prefill_chunk_size=16)


def _busy(h: Harness, session: str) -> bool:
    return any(r.options.session_id == session for r in h.sch.reqs.values()) or any(
        a.options.session_id == session for a in h.sch.admission.pending
    )


def _settle(h: Harness, session: str) -> None:
    for _ in range(500):
        if not _busy(h, session):
            return
        h.tick()
    raise AssertionError(f"session {session} never finished")


def _replay(current: list[tuple[str, str]], turns: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """``turns`` with the replies that arrived meanwhile for the turns it shares with the chat."""
    out = list(turns)
    for k, (question, reply) in enumerate(current[: len(turns) - 1]):
        if out[k][0] == question and not out[k][1]:
            out[k] = (question, reply)
    return out


def _cold_reply(memory: MemoryCaps, prompt: str, n: int) -> str:
    h = _scheduler(memory, None, n_seq=1)
    ref = h.admit(prompt, response_tokens=n)
    h.run()
    return h.text(ref)


@SETTINGS
@given(memory=st.sampled_from(sorted(MEMORIES)), actions=st.lists(action, min_size=1, max_size=14), data=st.data())
def test_chat_flows_never_cut_what_cannot_be_cut_and_answer_like_cold(memory, actions, data):
    caps = MEMORIES[memory]
    with tempfile.TemporaryDirectory() as tmp, CacheStore(Path(tmp) / "data", ram_file_dir=Path(tmp) / "shm") as store:
        h = _scheduler(caps, store)
        chats: list[list[tuple[str, str]]] = [[], [], []]
        sent: dict[int, tuple[int, str, list[tuple[str, str]]]] = {}  # ref -> (chat, prompt, turns)
        recorded: set[int] = set()

        def record_replies() -> None:
            """A finished reply becomes part of its chat, as a client re-sends it."""
            for ref in h.ended:
                i, _, turns = sent[ref]
                end = h.outcome(ref)
                if ref in recorded or not isinstance(end, Done) or end.stats.cancelled:
                    continue
                recorded.add(ref)
                if chats[i] == turns:
                    chats[i] = [*turns[:-1], (turns[-1][0], h.text(ref))]

        for kind, i, text, with_session in actions:
            record_replies()
            if kind == "tick":
                for _ in range(i):
                    h.tick()
                continue
            if kind == "cancel":
                live = [r for r, (c, _, _) in sent.items() if c == i and r not in h.ended]
                if live:
                    h.sch.commands.cancel(live[-1])
                continue
            if kind == "end":
                if f"c{i}" not in {a.options.session_id for a in h.sch.admission.pending} and all(
                    r.options.session_id != f"c{i}" for r in h.sch.reqs.values()
                ):
                    h.sch.commands.end_session(f"c{i}")
                continue
            turns = chats[i]
            if kind == "ask":
                turns = [*turns, (text, "")]
            elif kind == "regen" and turns:
                turns = [*turns[:-1], (turns[-1][0], "")]
            elif kind == "edit" and turns:
                k = data.draw(st.integers(0, len(turns) - 1), label="edited turn")
                turns = [*turns[:k], (text, "")]
            else:
                continue
            session = f"c{i}"
            if with_session:  # a chat app waits for the reply before its next turn
                _settle(h, session)
                record_replies()
                turns = _replay(chats[i], turns)
            opts = {"session_id": session} if with_session else {}
            prompt = _render(turns)
            ref = h.admit(prompt, response_tokens=3, **opts)
            sent[ref] = (i, prompt, turns)
            chats[i] = turns
        h.run()
        for ref, (_, prompt, _) in sent.items():
            end = h.outcome(ref)  # exactly one Done or Error
            assert not isinstance(end, Error), f"{memory}: {end.reason}"
            assert isinstance(end, Done)
            if end.stats.cancelled:
                continue
            assert h.text(ref) == _cold_reply(caps, prompt, 3), f"{memory}: a reused state was not the prompt's head"
        for sid in list(h.sch.pool.sessions):
            h.sch.commands.end_session(sid)
        h.sch.pool.check(h.sch.reqs)
        assert len(h.sch.pool.sessions) == 0 and not h.sch.reqs
