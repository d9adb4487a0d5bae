"""The scheduler driven directly on real llama.cpp (the tiny model), past the Model's argument
checks: the backend's own refusal of one op fails that request alone (issue 15 item 2's
second line of defence), and the others' greedy tokens are those they get alone."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from app.engine.events import Done, Error
from app.engine.llama.llama_backend import LlamaBackend
from tests.unit.engine.harness import Harness, make

N_VOCAB = 49152


@pytest.fixture
def harness(tiny_model_path: Path) -> Iterator[Harness]:
    backend = LlamaBackend(str(tiny_model_path), n_ctx_per_seq=256, n_seq_max=3, n_batch=128, n_threads=1)
    try:
        yield make(backend, n_ctx=256)  # type: ignore[arg-type]
    finally:
        backend.close()


def ids(h: Harness, ref: int) -> list[int]:
    return h.token_ids(ref)


def test_a_refused_op_fails_only_its_request_on_llama(harness: Harness) -> None:
    h = harness
    prompts = [h.stub.tokenize(f"Request number {i} says") for i in range(2)]
    solo = []
    for p in prompts:
        ref = h.admit(p, response_tokens=8, ignore_eos=True)
        h.run()
        solo.append(ids(h, ref))
    num_ended = len(h.ended)
    good = [h.admit(prompts[0], response_tokens=8, ignore_eos=True)]
    bad = h.admit([*prompts[1], N_VOCAB], response_tokens=8)  # the Model would refuse it
    good.append(h.admit(prompts[1], response_tokens=8, ignore_eos=True))
    assert h.tick() == []  # the burst's first tick: llama.cpp never saw it
    assert h.ended[num_ended:] == [bad]
    end = h.outcome(bad)
    assert isinstance(end, Error) and end.code == "invalid_request" and "outside the vocabulary" in end.reason
    h.run()
    assert all(isinstance(h.outcome(r), Done) for r in good)
    assert [ids(h, r) for r in good] == solo
