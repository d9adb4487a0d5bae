"""Attach, then type (issue 52, B13's "attach, then type"), on real llama.cpp: a document read
on attach while the question's words are typed, each word's end a newer ``read_ahead`` of the
same session. Each newer read must continue where the older one stopped (never read again
what the seq holds), the last one must read to the draft's end, and Enter must find all of it.
Asserted on events and tokens, never on time."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from app.conversation.type_ahead import margin_of, probe_of, readable_prefix
from app.documents import Attached, system_with_documents
from app.engine import Engine
from app.engine.events import Done, Event, PrefillProgress
from tests.helpers.reuse_client import config, run
from tests.helpers.waiting import wait_until

DOCUMENT = "\n\n".join(
    f"Section {i}. The river carries barges of coal, wine and stone past the quays of the old town; "
    f"lock {i} opens at dawn and the keeper writes each barge's name in a ledger." for i in range(60)
)
QUESTION = "Which lock opens first and what does the keeper write in the ledger each morning"


def test_words_typed_while_a_document_is_read_continue_its_read(tmp_path: Path, tiny_model_path: Path) -> None:
    engine = Engine(tmp_path / "data")
    try:
        model = engine.load_model("m", config(tiny_model_path, n_ctx=4096, n_seq_max=2))
        system = system_with_documents("", [Attached("barges.txt", DOCUMENT)])

        def render(draft: str) -> list[int]:
            return list(model.apply_chat_template({"messages": [{"role": "user", "content": draft}], "system": system}))

        reads: list[tuple[list[int], list[Event]]] = []

        def read(draft: str) -> None:  # the app's type-ahead at a word's end (B13's ``typed``)
            tokens = readable_prefix(render(draft), render(probe_of(draft)), margin_of(draft))
            events: list[Event] = []
            reads.append((tokens, events))
            model.read_ahead(tokens, session_id="chat", on_event=events.append)

        model.scheduler.ticks.clear()
        read("")  # on attach: the document
        assert len(reads[0][0]) > 1000
        # The words come while the document is being read (the first slice is in).
        wait_until(lambda: any(isinstance(e, PrefillProgress) and e.done > 0 for e in reads[0][1]), timeout=60)
        words = QUESTION.split()
        for i in range(1, len(words)):
            read(" ".join(words[:i]) + " ")
        wait_until(lambda: all(any(isinstance(e, Done) for e in events) for _, events in reads), timeout=120,
                   what="every read ended")  # fmt: skip

        last_tokens, last_events = reads[-1]
        assert _done(last_events).finish_reason != "cancelled"  # the last read went to the draft's end
        for (_, older), (_, newer) in zip(reads, reads[1:], strict=False):
            held = max((e.done for e in older if isinstance(e, PrefillProgress)), default=0)
            first = next(e for e in newer if isinstance(e, PrefillProgress))  # at admission: what the seq holds
            assert first.done >= held, "a newer read started below what the older one had read"
        # Nothing read twice: the prefill slices add up to the last draft's prefix, once.
        assert sum(t.num_prefill_tokens for t in model.scheduler.ticks) == len(last_tokens)

        prompt = render(QUESTION)
        _, stats, _ = run(model, prompt, session_id="chat")
        assert stats.reuse.source == "session"
        assert stats.reuse.tokens_read_ahead == stats.reuse.tokens_reused == len(last_tokens)
    finally:
        engine.close()


def _done(events: list[Event]) -> Any:
    return next(e for e in events if isinstance(e, Done)).stats
