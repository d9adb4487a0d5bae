"""Warm equals cold on real llama.cpp: every way a cached prefix comes back gives the same
greedy tokens as a cold prefill, with the right ``cache_hit_kind`` and ``cache_delta``."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.cache.policy import CachePolicy
from app.engine import Engine, ModelConfig
from app.engine.events import TokenId

POLICY = CachePolicy(
    min_tokens=8,
    cold_min_tokens=16,
    cold_max_tokens=30000,
    continued_interval=4096,
    boundary_trim_tokens=4,
    boundary_align_tokens=16,
    session_resume_wait_ms=2000,
)

TEXT = (
    "Hearth keeps every conversation warm. The cache stores the key and value tensors of "
    "each prefix so that a second turn never pays for the first one again. "
)


def _config(path: Path, **kw) -> ModelConfig:
    kw.setdefault("n_ctx", 1024)
    kw.setdefault("n_seq_max", 4)
    kw.setdefault("n_batch", 256)
    kw.setdefault("n_threads", 2)
    kw.setdefault("policy", POLICY)
    kw.setdefault("tier", "disk")
    return ModelConfig(path=str(path), **kw)


def _run(model, tokens, **kw):
    events = list(model.infer(tokens, response_tokens=kw.pop("n", 12), **kw))
    ids = [e.id for e in events if isinstance(e, TokenId)]
    return ids, events[-1].stats


def _cold_reference(tmp_path, path, tokens, n=12):
    with Engine(tmp_path / "cold-ref") as e:
        m = e.load_model("m", _config(path, cache_enabled=False))
        return _run(m, tokens, n=n)[0]


def _restart(engine: Engine, data: Path, path: Path) -> tuple[Engine, object]:
    """The engine closed and opened again on its data dir: the cache stays, the seqs'
    cells go (a session-less request leaves its cells in its free seq, ``SeqPool.leave``,
    and the next request would start from them before looking in the cache)."""
    engine.close()
    engine = Engine(data)
    return engine, engine.load_model("m", _config(path))


def _warm_equals_cold(tmp_path, path: Path) -> None:
    data = tmp_path / "data"
    engine = Engine(data)
    model = engine.load_model("m", _config(path))
    prompt = model.tokenize(TEXT * 3)
    cold_ids = _cold_reference(tmp_path, path, prompt)

    ids, stats = _run(model, prompt)
    assert (ids, stats.cache_hit_kind, stats.cache_delta.read) == (cold_ids, "cold", 0)
    assert stats.cache_delta.created > 0  # the cold split and the finish save

    # Exact: a row keyed on exactly this prompt (prefill_only's finish save). A restart
    # first: the seq prefill_only left holds the whole prompt, and a request that its seq
    # already gives every reusable token reads nothing from the cache.
    pre = model.prefill_only(prompt)
    assert pre.finish_key is not None
    engine, model = _restart(engine, data, path)
    ids, stats = _run(model, prompt)
    assert (ids, stats.cache_hit_kind, stats.cache_delta.read) == (cold_ids, "exact", len(prompt))

    # Longest prefix: a longer prompt whose head is cached. (A restart first: the last
    # request's cells, left in its free seq, would serve the head before the cache.)
    longer = prompt + model.tokenize(" And then the user asked one more question.")
    longer_cold = _cold_reference(tmp_path / "l", path, longer)
    engine, model = _restart(engine, data, path)
    ids, stats = _run(model, longer)
    assert stats.cache_hit_kind == "partial"
    assert stats.cache_delta.read >= len(prompt)
    assert ids == longer_cold

    # parent_key resume: the next turn names the row the previous one finished with.
    first = model.complete(model.detokenize(prompt), response_tokens=6)
    assert first.finish_key is not None
    resumed = list(first.context_tokens) + model.tokenize(" Tell me more.")
    engine, model = _restart(engine, data, path)
    before = engine.counters()["hits_resume"] + engine.counters()["hits_exact"]
    ids, stats = _run(model, resumed, parent_key=first.finish_key)
    assert stats.cache_hit_kind == "partial" and stats.cache_delta.read == len(first.context_tokens)
    assert engine.counters()["hits_resume"] + engine.counters()["hits_exact"] == before + 1
    assert ids == _cold_reference(tmp_path / "r", path, resumed)
    engine.close()

    # Restart: a new engine on the same data dir restores from disk, also with another n_seq_max.
    for n_seq in (4, 2):
        with Engine(data) as e2:
            m2 = e2.load_model("m", _config(path, n_seq_max=n_seq))
            ids, stats = _run(m2, longer)
            assert stats.cache_hit_kind in ("partial", "exact")
            assert stats.cache_delta.read >= len(prompt)
            assert ids == longer_cold


def test_warm_equals_cold_tiny(tmp_path, tiny_model_path):
    _warm_equals_cold(tmp_path, tiny_model_path)


@pytest.mark.smollm2
def test_warm_equals_cold_smollm2(tmp_path, smollm2_path):
    _warm_equals_cold(tmp_path, smollm2_path)


def test_any_length_prefix_hit(tmp_path, tiny_model_path):
    """A finish save of a 700-token context; 50 more tokens → partial, read == 700."""
    with Engine(tmp_path / "d") as engine:
        model = engine.load_model("m", _config(tiny_model_path, policy=CachePolicy(
            min_tokens=8, cold_min_tokens=100000, cold_max_tokens=200000, boundary_trim_tokens=4,
            boundary_align_tokens=2048, continued_interval=100000,
        )))
        base = model.tokenize(TEXT * 30)
        prompt = base[:690]
        res = model.complete(model.detokenize(prompt), response_tokens=10)
        ctx = list(res.context_tokens)
        assert res.finish_key is not None
        engine.cache.flush()
        n = len(ctx)
        extended = ctx + base[690 : 690 + 50]
    with Engine(tmp_path / "d") as engine:  # a restart: the cells left in the seq are gone
        model = engine.load_model("m", _config(tiny_model_path, policy=CachePolicy(
            min_tokens=8, cold_min_tokens=100000, cold_max_tokens=200000, boundary_trim_tokens=4,
            boundary_align_tokens=2048, continued_interval=100000,
        )))
        _, stats = _run(model, extended, n=4)
        assert stats.cache_hit_kind == "partial"
        assert stats.cache_delta.read == n


def test_rows_saved_under_other_kv_cell_types_are_never_restored(tmp_path, tiny_model_path):
    """Rows saved under q8_0 K+V (the default before issue 24) are not restored into a context
    with today's q8_0 K + f16 V: the cell types are part of ``ctx_params_hash``, so the lookup
    never finds them and the turn runs cold, exactly as a cold run does. The same data dir
    opened with q8_0 K+V again serves them."""
    old = {"type_k": "q8_0", "type_v": "q8_0"}
    data = tmp_path / "data"
    with Engine(data) as engine:
        model = engine.load_model("m", _config(tiny_model_path, **old))
        prompt = model.tokenize(TEXT * 3)
        assert model.prefill_only(prompt).finish_key is not None
        engine.cache.flush()
        old_hash = model.cache_key_meta()["ctx_params_hash"]
    cold_ids = _cold_reference(tmp_path, tiny_model_path, prompt)
    with Engine(data) as engine:
        model = engine.load_model("m", _config(tiny_model_path))
        assert model.cache_key_meta()["ctx_params_hash"] != old_hash
        ids, stats = _run(model, prompt)
    assert (ids, stats.cache_hit_kind, stats.cache_delta.read) == (cold_ids, "cold", 0)
    with Engine(data) as engine:
        model = engine.load_model("m", _config(tiny_model_path, **old))
        _, stats = _run(model, prompt)
    assert (stats.cache_hit_kind, stats.cache_delta.read) == ("exact", len(prompt))


def _first_kv_file(data_dir: Path, row_key: bytes) -> Path:
    """The file holding a row's first cells: its v1 blob, or the chunk at position 0."""
    for path in data_dir.rglob(row_key.hex() + ".kvc"):
        return path
    for path in data_dir.rglob("*.kvch"):
        if int.from_bytes(path.read_bytes()[32:36], "little") == 0:  # header: start
            return path
    raise AssertionError("no file holds the row's KV")


def test_corrupt_blob_goes_cold(tmp_path, tiny_model_path):
    with Engine(tmp_path / "d") as engine:
        model = engine.load_model("m", _config(tiny_model_path))
        prompt = model.tokenize(TEXT * 2)
        model.prefill_only(prompt)
        engine.cache.flush()
        rows = [r for r in engine.cache.rows() if r.n_tokens == len(prompt)]
        assert rows
        # Remove the other rows so nothing else can serve the prompt.
        for r in engine.cache.rows():
            if r.key != rows[0].key:
                engine.cache.delete(r.key)
        blob = _first_kv_file(tmp_path / "d", rows[0].key)
        data = bytearray(blob.read_bytes())
        data[len(data) // 2] ^= 0xFF
        blob.write_bytes(bytes(data))
    with Engine(tmp_path / "d") as engine:  # a restart: the prompt's cells left in the seq are gone
        model = engine.load_model("m", _config(tiny_model_path))
        before = engine.counters()["corrupt_files"]
        _, stats = _run(model, prompt, n=3)
        assert stats.cache_hit_kind == "cold"
        assert engine.counters()["corrupt_files"] == before + 1
        assert not blob.exists()


def test_sticky_session_and_evict_save_restores(tmp_path, tiny_model_path):
    """Sessions evicted to make room save with reason ``evict`` and come back warm."""
    with Engine(tmp_path / "d") as engine:
        model = engine.load_model("m", _config(tiny_model_path, n_seq_max=1))
        a = model.complete(TEXT, response_tokens=4, session_id="a")
        model.complete("Something unrelated entirely, for another chat.", response_tokens=4, session_id="b")
        engine.cache.flush()
        assert engine.counters()["saves_evict"] >= 1
        nxt = list(a.context_tokens) + model.tokenize(" More please.")
        _, stats = _run(model, nxt, n=3, session_id="a")
        assert stats.cache_hit_kind in ("partial", "exact")
        assert stats.cache_delta.read == len(a.context_tokens)


def test_the_cold_save_is_made_after_the_first_token(tmp_path, tiny_model_path):
    """The policy's cold save of a prompt's head no longer splits the prefill there and packs
    before the first token (issue 24): it is cut from the whole prompt's cells once the first
    reply token is out. The row holds exactly the head, and a prompt that shares only that
    head restores it and gives the cold reply."""
    from app.cache.policy import cold_save_split
    from app.engine.events import PrefillProgress

    data = tmp_path / "data"
    with Engine(data) as engine:
        model = engine.load_model("m", _config(tiny_model_path, n_batch=512))  # one prefill slice
        prompt = model.tokenize(TEXT * 3)
        split = cold_save_split(len(prompt), POLICY)
        assert 0 < split < len(prompt) - 1
        events = list(model.infer(prompt, response_tokens=4))
        assert [e.done for e in events if isinstance(e, PrefillProgress)][1:] == [len(prompt)]  # not stopped at the head
        engine.cache.flush()
        cold = [r for r in engine.cache.rows() if r.save_reason == "cold"]
        assert [r.n_tokens for r in cold] == [split]
        assert list(cold[0].tokens) == prompt[:split]
        other = prompt[:split] + model.tokenize(" Something else entirely, to end the prompt.")
    with Engine(data) as engine:
        model = engine.load_model("m", _config(tiny_model_path))
        for row in [r for r in engine.cache.rows() if r.save_reason != "cold"]:
            engine.cache.delete(row.key)  # only the cold row can serve the head
        ids, stats = _run(model, other)
        assert stats.cache_delta.read == split
    assert ids == _cold_reference(tmp_path, tiny_model_path, other)


def test_saves_pack_into_memory_used_before_and_never_over_a_queued_one(tmp_path, tiny_model_path, monkeypatch):
    """A save packs into memory an earlier save used (``StateMemory``) only once nothing reads
    it: saves still queued (the writer held back) keep their bytes while later ones are made,
    and every row restores to the cold reply; once written, their memory serves the next."""
    import app.cache.saving.write_hold as store_mod

    lent = _record_lends(monkeypatch)
    monkeypatch.setattr(store_mod, "WRITE_GRACE_S", 4.0)  # the first save waits this long: all three queued
    policy = CachePolicy(min_tokens=8, cold_min_tokens=100000, cold_max_tokens=200000, continued_interval=100000,
                         boundary_trim_tokens=4, boundary_align_tokens=16)
    prompts = []
    data = tmp_path / "data"
    with Engine(data) as engine:
        model = engine.load_model("m", _config(tiny_model_path, policy=policy))
        for i in range(3):
            # (no two share a head: a lookup would restore it, lending too)
            prompt = model.tokenize(f"{('Alpha', 'Bravo', 'Charlie')[i]} conversation. " + TEXT * (2 + i))
            prompts.append(list(model.complete(model.detokenize(prompt), response_tokens=6).context_tokens))
        queued = lent[:]
        assert len(queued) == 3 and len({id(b) for b in queued}) == 3  # none packed over a queued save
        assert engine.cache.flush()
        model.complete("Something else entirely, after the writes.", response_tokens=4)
        assert len(lent) == 4 and any(lent[3] is b for b in queued)  # written: a kept buffer serves the next
    with Engine(data) as engine:  # a restart: the rows written, not the seqs' cells, serve them
        model = engine.load_model("m", _config(tiny_model_path, policy=policy))
        for ctx in prompts:
            ids, stats = _run(model, ctx, n=6)
            assert (stats.cache_hit_kind, stats.cache_delta.read) == ("exact", len(ctx))
            assert ids == _cold_reference(tmp_path, tiny_model_path, ctx, n=6)


def _record_lends(monkeypatch) -> list[bytearray]:
    """Every buffer ``StateMemory.lend`` lends from now on, in order."""
    from app.cache.blobs.state_buffers import StateMemory

    lent: list[bytearray] = []
    lend = StateMemory.lend

    def recording(self, n):
        view = lend(self, n)
        lent.append(view.obj)
        return view

    monkeypatch.setattr(StateMemory, "lend", recording)
    return lent


@pytest.mark.parametrize("tier", ["disk", "ram"])
def test_a_restore_reads_and_assembles_in_memory_made_before_and_restores_exactly(
    tmp_path, tiny_model_path, monkeypatch, tier
):
    """After a restart, a model's load makes the memory its largest row is read and assembled
    into (``Lookup.prepare``); a restore from disk reads its chunk files into one of those
    buffers and assembles the state in the other (a RAM tier's files are read in place: one);
    the reply is the cold one; and the next save packs into that memory too."""
    policy = CachePolicy(min_tokens=8, cold_min_tokens=100000, cold_max_tokens=200000, continued_interval=100000,
                         boundary_trim_tokens=4, boundary_align_tokens=16)
    data = tmp_path / "data"
    with Engine(data) as engine:
        model = engine.load_model("m", _config(tiny_model_path, policy=policy, tier=tier))
        ctx = list(model.complete("A conversation to come back to. " + TEXT * 3, response_tokens=6).context_tokens)
        assert engine.cache.flush()
        if tier == "ram":  # the RAM tier does not outlive the engine: the model is loaded again
            engine.unload("m")
            model = engine.load_model("m", _config(tiny_model_path, policy=policy, tier=tier))
            _check_restore_into_pool(engine, model, tmp_path, tiny_model_path, ctx, monkeypatch, lends=1)
    if tier == "disk":
        with Engine(data) as engine:
            model = engine.load_model("m", _config(tiny_model_path, policy=policy, tier=tier))
            _check_restore_into_pool(engine, model, tmp_path, tiny_model_path, ctx, monkeypatch, lends=2)


def _check_restore_into_pool(engine, model, tmp_path, tiny_model_path, ctx, monkeypatch, *, lends):
    memory = engine.cache.memory
    made = list(memory._bufs)  # noqa: SLF001
    assert len(made) >= 2  # made at load, or after the save was written: off the request's path
    lent = _record_lends(monkeypatch)
    longer = [*ctx, *ctx[5:12]]  # the conversation goes on
    ids, stats = _run(model, longer, n=6)
    assert stats.cache_hit_kind is not None and stats.cache_delta.read >= len(ctx) - 1
    assert ids == _cold_reference(tmp_path, tiny_model_path, longer, n=6)
    restore = lent[:lends]
    assert all(any(b is m for m in made) for b in restore)
    assert len({id(b) for b in restore}) == lends  # the files in one, the state in the other
    model.complete("Something else entirely, after the restore.", response_tokens=4)  # saved
    assert len(lent) > lends and all(any(b is m for m in made) for b in lent[lends:])  # into the same memory
