"""The draft model's KV is cached with its own key (issue 29): a conversation that comes back
after another one took its seq, or after a restart, restores the draft's cells from the
cache instead of reading its context again, and the replies stay those of speculation off.
Real llama.cpp (the tiny model drafting for itself), a real store on disk."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.engine import Engine, Model, ModelConfig
from app.engine.events import TokenId
from app.engine.speculation.draft_model import CATCH_UP_TOKENS, DraftModel
from tests.helpers.forced_drafts import always_draft

TOPIC = (
    "The lighthouse keeper climbed the stairs every night, lit the lamp, and watched the ships. "
    "In the spring the town painted the tower white, and children came to see the great lamp. "
)


def _load(engine: Engine, path: Path, cache: bool = True) -> Model:
    """"tiny" drafting with "plain" (the same weights: the same vocabulary), one seq each."""
    def config(**kw: bool) -> ModelConfig:
        return ModelConfig(path=str(path), n_ctx=1024, n_seq_max=1, n_threads=2, cache_enabled=cache, tier="disk", **kw)

    engine.load_model("plain", config(speculative=False))
    model = engine.load_model("tiny", config())
    model.use_draft("plain")
    return model


def _reply(model: Model, tokens: list[int], **opts: object) -> list[int]:
    return [e.id for e in model.infer(tokens, response_tokens=12, **opts) if isinstance(e, TokenId)]


def _draft(model: Model) -> DraftModel:
    draft = model.scheduler.speculator.draft
    assert draft is not None
    return draft


def test_the_draft_models_cells_come_back_from_the_cache(
    tiny_model_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    always_draft(monkeypatch)  # a draft as dear as the model would not be used otherwise
    engine = Engine(tmp_path)
    try:
        model = _load(engine, tiny_model_path)
        first = model.tokenize(TOPIC * 8)
        other = model.tokenize("A different conversation about gardens and herbs. " * 36)
        assert min(len(first), len(other)) > 2 * CATCH_UP_TOKENS
        reply = _reply(model, first, draft_model="plain")
        assert _draft(model).num_restored == 0
        backend = _draft(model).backend
        packs: list[bool] = []  # per draft save: packed into memory the cache lent?
        pack = backend.kv_pack

        def spy(seq_id: int, into: object = None) -> object:
            packs.append(into is not None)
            return pack(seq_id, into=into)

        monkeypatch.setattr(backend, "kv_pack", spy)
        _reply(model, other, draft_model="plain")  # takes the one seq: the draft saves the first
        assert _draft(model).num_saved >= len(first)
        # The draft's save goes the scheduler's way: into memory an earlier save or restore
        # used (the store's StateMemory), not fresh pages each time.
        assert packs and all(packs)
        again = first + reply + model.tokenize(" Say it again.")
        expected = _reply(model, again, speculative=False)
        assert _reply(model, again, draft_model="plain") == expected
        restored = _draft(model).num_restored
        assert restored >= len(first)  # not read again 128 tokens a tick
    finally:
        engine.close()  # unloads: the draft's seq is saved as at a shutdown

    engine = Engine(tmp_path)  # a restart
    try:
        model = _load(engine, tiny_model_path)
        assert _draft(model).num_restored == 0
        assert _reply(model, again, draft_model="plain") == expected
        assert _draft(model).num_restored >= len(again) - 1  # every cell but the last token's
    finally:
        engine.close()


def test_without_the_cache_the_draft_reads_the_context_again(
    tiny_model_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    always_draft(monkeypatch)
    engine = Engine(tmp_path)
    try:
        model = _load(engine, tiny_model_path, cache=False)
        first = model.tokenize(TOPIC * 8)
        reply = _reply(model, first, draft_model="plain")
        _reply(model, model.tokenize("A different conversation about gardens and herbs. " * 36), draft_model="plain")
        again = first + reply + model.tokenize(" Say it again.")
        assert _reply(model, again, draft_model="plain") == _reply(model, again, speculative=False)
        assert _draft(model).cache is None and _draft(model).num_saved == _draft(model).num_restored == 0
    finally:
        engine.close()
