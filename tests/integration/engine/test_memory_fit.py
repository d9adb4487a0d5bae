"""Fits before it loads (issue 54): the fit is driven by fake ``MemAvailable`` and cgroup
values (``HEARTH_MEMINFO``, ``HEARTH_CGROUP_DIR``), the loads are real llama.cpp loads of the
tiny model (SmolLM2 for the refusal of a huge context), and the estimate is held to the sizes
llama.cpp logs when it allocates."""

from __future__ import annotations

import logging
import re
import time
from pathlib import Path

import pytest

from app.cache.policy import CachePolicy
from app.engine import Engine, ModelConfig
from app.engine.memory.memory_budget import DESKTOP_ROOM, DESKTOP_SHARE, LOW_WATER
from app.engine.memory.memory_fit import CGROUP_ENV, MEMINFO_ENV, DoesNotFit, read_shape
from app.units import human_bytes
from tests.helpers.tiny_families import ensure_tiny_family

MiB = 1 << 20
LLAMA_LOG = "app.engine.llama_cpp"


def _config(path: Path, **kw) -> ModelConfig:
    kw.setdefault("n_ctx", 2048)
    kw.setdefault("n_seq_max", 4)
    kw.setdefault("n_batch", 64)
    kw.setdefault("n_threads", 2)
    kw.setdefault("cache_enabled", False)
    return ModelConfig(path=str(path), **kw)


def available_leaving(room: int) -> int:
    """The MemAvailable whose automatic budget leaves ``room`` to a load (no cache to shed):
    available less the desktop's share (``DESKTOP_SHARE``, at least ``DESKTOP_ROOM``)."""
    a = room + DESKTOP_ROOM
    return a if a * DESKTOP_SHARE <= DESKTOP_ROOM else int(room / (1 - DESKTOP_SHARE)) + 1


@pytest.fixture
def meminfo(tmp_path, monkeypatch):
    """Set this machine's MemAvailable (bytes) for the engine's next look."""
    path = tmp_path / "meminfo"
    monkeypatch.setenv(MEMINFO_ENV, str(path))
    monkeypatch.delenv(CGROUP_ENV, raising=False)

    def set_available(n: int, total: int = 16 << 30) -> None:
        path.write_text(f"MemTotal: {total // 1024} kB\nMemFree: 1 kB\nMemAvailable: {n // 1024} kB\n")

    set_available(8 << 30)
    return set_available


@pytest.fixture
def engine(tmp_path):
    e = Engine(tmp_path / "data")
    yield e
    e.close()


MIB_LINE = re.compile(r"(model buffer|KV buffer|RS buffer|compute buffer|output buffer) size =\s+([0-9.]+) MiB")


@pytest.mark.parametrize(("which", "n_ctx", "n_seq", "n_batch"), [
    ("tiny", 1024, 2, 512), ("tiny", 2048, 1, 64), ("smollm2", 1024, 2, 512), ("smollm2", 2048, 1, 64),
    ("mamba2", 1024, 2, 512), ("lfm2", 1024, 2, 512), ("gemma3", 1024, 2, 512),
])  # fmt: skip
def test_the_estimate_is_what_llama_cpp_allocates(
    tmp_path, assets_dir, tiny_model_path, smollm2_path, which, n_ctx, n_seq, n_batch, caplog
):
    """Every part against the size llama.cpp logs as it allocates it, for every memory type
    (attention, recurrent, hybrid, sliding window)."""
    paths = {"tiny": tiny_model_path, "smollm2": smollm2_path}
    path = paths.get(which) or ensure_tiny_family(which, assets_dir)
    need = read_shape(path).need(n_ctx, n_seq, n_batch=n_batch)  # type: ignore[union-attr]
    caplog.set_level(logging.DEBUG, logger=LLAMA_LOG)
    with Engine(tmp_path / "data") as engine:
        engine.load_model("m", _config(path, n_ctx=n_ctx, n_seq_max=n_seq, n_batch=n_batch))
    logged: dict[str, float] = {}
    for r in caplog.records:
        m = MIB_LINE.search(r.getMessage()) if r.name == LLAMA_LOG else None
        if m and "~llama_context" not in r.getMessage():
            logged[m.group(1)] = logged.get(m.group(1), 0.0) + float(m.group(2)) * MiB
    memory = logged.get("KV buffer", 0.0) + logged.get("RS buffer", 0.0)
    assert need.kv + need.recurrent == pytest.approx(memory, rel=0.01, abs=0.01 * MiB)
    assert need.weights == pytest.approx(logged["model buffer"], rel=0.03)
    buffers = logged["compute buffer"] + logged["output buffer"]
    assert buffers <= need.buffers <= 1.15 * buffers + MiB, (need.buffers / MiB, buffers / MiB)


def test_the_fit_chooses_context_then_chats_then_a_smaller_context(engine, meminfo, tiny_model_path):
    shape = read_shape(tiny_model_path)
    assert shape is not None and shape.context_length == 2048

    def need(ctx: int, seqs: int) -> int:
        return shape.need(ctx, seqs, n_batch=64).total

    # Everything the model was trained for, for 4 chats.
    meminfo(available_leaving(need(2048, 4) + 4096))
    m = engine.load_model("all", _config(tiny_model_path), fit="choose")
    assert (m.config.n_ctx, m.config.n_seq_max) == (2048, 4)
    assert m.model_info().context_size == 2048 and m.model_info().n_seq_max == 4
    assert engine.fit_words["all"].startswith("2,048 tokens × 4 chats: the whole trained context fits")
    engine.unload("all")

    # Not quite room for 4: fewer chats at the trained context.
    meminfo(available_leaving(need(2048, 3) + 4096))
    m = engine.load_model("three", _config(tiny_model_path), fit="choose")
    assert (m.config.n_ctx, m.config.n_seq_max) == (2048, 3)
    words = engine.fit_words["three"]
    assert words.startswith("2,048 tokens × 3 chats; 2,048 × 4 would need "), words
    assert human_bytes(need(2048, 4)) in words
    engine.unload("three")

    # Not room for one chat of the whole context: a smaller one.
    meminfo(available_leaving(need(2048, 1) - 4096))
    m = engine.load_model("small", _config(tiny_model_path), fit="choose")
    assert (m.config.n_ctx, m.config.n_seq_max) == (1024, 1)
    m.complete("Hello", response_tokens=4)  # it works
    engine.unload("small")

    # Not room for one chat of 256 tokens: refused, nothing loaded.
    meminfo(available_leaving(need(256, 1) - 4096))
    with pytest.raises(DoesNotFit, match=r"256 tokens × 1 chat needs .*; this machine has"):
        engine.load_model("none", _config(tiny_model_path), fit="choose")
    assert engine.list_models() == []


def test_a_setting_that_does_not_fit_is_refused_with_numbers_before_llama_cpp_allocates(
    engine, meminfo, tiny_model_path, caplog
):
    shape = read_shape(tiny_model_path)
    assert shape is not None
    wanted = shape.need(2048, 4, n_batch=64).total
    room = wanted - 64 * 1024
    meminfo(available_leaving(room))
    caplog.set_level(logging.DEBUG, logger=LLAMA_LOG)
    with pytest.raises(DoesNotFit) as caught:
        engine.load_model("m", _config(tiny_model_path))
    text = str(caught.value)
    assert caught.value.code == "does_not_fit"
    assert f"2,048 tokens × 4 chats needs {human_bytes(wanted)}" in text, text
    assert f"this machine has {human_bytes(room)}" in text, text
    assert not [r for r in caplog.records if r.name == LLAMA_LOG], "llama.cpp was asked for something"
    assert engine.list_models() == []

    # The same setting, forced: loaded (the machine really has the memory), and said.
    m = engine.load_model("m", _config(tiny_model_path), fit="force")
    assert (m.config.n_ctx, m.config.n_seq_max) == (2048, 4)
    assert engine.fit_words["m"].startswith("loaded against the estimate: 2,048 tokens × 4 chats needs")
    assert len(m.complete("Hi", response_tokens=2).generated) >= 1

    # With room for it, the same setting loads without a word.
    engine.unload("m")
    meminfo(available_leaving(wanted + 64 * 1024))
    engine.load_model("m", _config(tiny_model_path))
    assert "m" not in engine.fit_words


def test_a_huge_context_on_smollm2_is_refused_by_the_estimate_not_by_malloc(tmp_path, smollm2_path, caplog):
    """Before: llama.cpp was asked for 282 GB of KV, then (the f16 fallback) for 368 GB."""
    caplog.set_level(logging.DEBUG, logger=LLAMA_LOG)
    with Engine(tmp_path / "data") as engine:
        started = time.perf_counter()
        with pytest.raises(DoesNotFit, match=r"1,048,576 tokens × 16 chats needs 275\.\d GiB .*; this machine has"):
            engine.load_model("m", ModelConfig(path=str(smollm2_path), n_ctx=1 << 20, n_seq_max=16, n_threads=2))
        assert time.perf_counter() - started < 2.0
    assert not [r for r in caplog.records if r.name == LLAMA_LOG]


@pytest.mark.parametrize("version", [2, 1])
def test_a_cgroup_limit_is_what_the_machine_has(engine, meminfo, tmp_path, monkeypatch, tiny_model_path, version):
    """Plenty of MemAvailable, but the cgroup (v2 ``memory.max``, v1 ``memory.limit_in_bytes``)
    leaves less: the cgroup's headroom is what counts."""
    shape = read_shape(tiny_model_path)
    assert shape is not None
    wanted = shape.need(2048, 4, n_batch=64).total
    cg = tmp_path / "cgroup"
    cg.mkdir()
    limit, used = 512 * MiB, 512 * MiB - available_leaving(wanted - 4096)
    names = ("memory.max", "memory.current") if version == 2 else ("memory.limit_in_bytes", "memory.usage_in_bytes")
    (cg / names[0]).write_text(f"{limit}\n")
    (cg / names[1]).write_text(f"{used}\n")
    monkeypatch.setenv(CGROUP_ENV, str(cg))
    meminfo(8 << 30)
    with pytest.raises(DoesNotFit, match="this machine has"):
        engine.load_model("m", _config(tiny_model_path))
    assert engine.memory.machine().words().endswith(f"(its memory limit is 512.0 MiB, {human_bytes(used)} used)")
    (cg / names[0]).write_text("max\n" if version == 2 else "9223372036854771712\n")
    engine.load_model("m", _config(tiny_model_path))


def test_hearths_cap_setting_refuses_a_load_the_machine_could_take(tmp_path, meminfo, tiny_model_path):
    with (Engine(tmp_path / "data", memory_cap=64 * MiB) as engine,
          pytest.raises(DoesNotFit, match=r"Hearth's memory cap of 64\.0 MiB leaves")):
        engine.load_model("m", _config(tiny_model_path))


def _saved_rows(engine, model, n: int) -> None:
    for i in range(n):
        model.complete(f"Conversation {i}: tell me about the number {i} and its friends", response_tokens=12)
    assert engine.cache.flush()


def test_under_pressure_the_ram_tier_gives_way_to_disk_and_no_reply_is_stopped(engine, meminfo, tiny_model_path):
    policy = CachePolicy(min_tokens=8, cold_min_tokens=10**6, cold_max_tokens=2 * 10**6)
    m = engine.load_model("m", _config(tiny_model_path, cache_enabled=True, tier="ram", policy=policy, n_ctx=512))
    _saved_rows(engine, m, 4)
    store = engine.cache
    ram_before, quota = store.tier_usage()["ram"]
    rows_before = {r.key for r in store.rows()}
    assert ram_before > 0 and rows_before

    stream = m.infer(m.tokenize("A long reply while memory runs short:"), response_tokens=120)
    meminfo(LOW_WATER // 2)  # another app took the memory
    freed = engine.memory.relieve(store)
    assert freed >= ram_before
    assert store.tier_usage()["ram"][0] == 0
    assert {r.key for r in store.rows()} >= rows_before, "a cached conversation was lost"
    assert all(r.tier == "disk" for r in store.rows() if r.key in rows_before)
    assert any("memory short" in n for n in engine.memory.notices)
    assert engine.memory_status()["shed"] >= ram_before
    stats = stream.result(timeout=60)
    assert not stats.cancelled and (stats.completion_tokens == 120 or stats.finish_reason == "stop")

    meminfo(8 << 30)  # the memory is back: so is the tier's quota
    engine.memory.relieve(store)
    assert store.tier_usage()["ram"][1] == quota


def test_a_load_makes_the_ram_tier_give_way_first(tmp_path, meminfo, tiny_model_path):
    """The RAM tier's rows count as room: a load that fits only with them gone moves them to
    disk before llama.cpp allocates, and loads. (A cap far above the machine: what the machine
    has decides, to the byte.)"""
    with Engine(tmp_path / "data", memory_cap=1 << 40) as engine:
        _the_tier_gives_way(engine, meminfo, tiny_model_path)


def _the_tier_gives_way(engine, meminfo, tiny_model_path):
    policy = CachePolicy(min_tokens=8, cold_min_tokens=10**6, cold_max_tokens=2 * 10**6)
    m = engine.load_model("m", _config(tiny_model_path, cache_enabled=True, tier="ram", policy=policy, n_ctx=512))
    _saved_rows(engine, m, 3)
    store = engine.cache
    ram, _ = store.tier_usage()["ram"]
    pool = store.memory.kept_bytes
    assert ram > 0
    shape = read_shape(tiny_model_path)
    assert shape is not None
    wanted = shape.need(2048, 2, n_batch=64).total
    meminfo(wanted - pool - ram // 2)  # room only with the pool and half the tier gone
    engine.load_model("second", _config(tiny_model_path, n_seq_max=2))
    assert store.memory.kept_bytes == 0 or pool == 0
    assert store.tier_usage()["ram"][0] <= ram - ram // 2
    assert engine.memory.shed_bytes >= pool + ram // 2
    assert all(r.tier == "disk" for r in store.rows()) or store.tier_usage()["ram"][0] > 0


def test_the_ram_tier_lives_in_what_the_cap_leaves(tmp_path, meminfo, smollm2_path):
    """With a cap, the RAM tier's quota is what the cap leaves beside the process and the loaded
    models (less a headroom), lowered at a load and given back at the unload."""
    from app.cache.space.eviction import DEFAULT_QUOTAS
    from app.engine.memory.memory_budget import TIER_HEADROOM, process_rss

    cap = process_rss() + 600 * MiB
    headroom = int(cap * TIER_HEADROOM)
    with Engine(tmp_path / "data", memory_cap=cap) as engine:
        store = engine.cache
        assert store.tier_usage()["ram"][1] == DEFAULT_QUOTAS["ram"]
        engine.load_model("m", _config(smollm2_path, n_ctx=1024, n_seq_max=2, cache_enabled=True))
        need = read_shape(smollm2_path).need(1024, 2, n_batch=64).total  # type: ignore[union-attr]
        quota = store.tier_usage()["ram"][1]
        # what the cap leaves beside the process as it was (± what the load itself moved) and the model
        assert abs(quota - (600 * MiB - need - headroom)) < 48 * MiB, (quota / MiB, need / MiB)
        assert store.memory.limit == quota  # the state buffers live in it too
        engine.unload("m")
        assert store.tier_usage()["ram"][1] > quota + need // 2  # given back
