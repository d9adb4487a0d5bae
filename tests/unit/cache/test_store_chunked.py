"""KVC v2 in the store, on real files and SQLite: chunked rows round-trip, shared prefixes are
stored once, a lookup reuses the longest prefix shared with any row (longer, diverging or
still being written), and every reason a lookup can miss for is reported."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from app.cache.blobs import kvc_chunked, seqstate
from app.cache.blobs.kvc_whole import crc32c
from app.cache.keys import KeyMeta
from app.cache.lookup import Found, NotFound
from app.cache.policy import CachePolicy
from app.cache.store import CacheStore
from app.engine.cache_hooks import Hit, StoreCache
from tests.helpers.kv_states import bytes_per_token, state_for
from tests.unit.cache.conftest import META, OTHER_META, Gate

SYSTEM = list(range(5000, 5300))  # a 300-token shared system prompt


def put(
    store: CacheStore,
    tokens: Sequence[int],
    *,
    tier: str = "disk",
    meta: KeyMeta = META,
    session: str | None = None,
    flush: bool = True,
) -> bytes | None:
    key = store.submit_save(
        model_id="m", meta=meta, tokens=list(tokens), payload=state_for(tokens), reason="finish",
        tier=tier, session_id=session, prompt_text=f"{len(tokens)} tokens",
    )  # fmt: skip
    if flush:
        assert store.flush(10)
    return key


def found(store: CacheStore, prompt: Sequence[int], **kw: object) -> Found:
    got = store.find(META, list(prompt), **kw)  # type: ignore[arg-type]
    assert isinstance(got, Found), got
    assert got.payload == state_for(list(prompt[: got.n])), "the restored cells are not the prompt's"
    return got


def files(store: CacheStore, suffix: str, tier: str = "disk") -> list[Path]:
    return sorted(store._file_tiers[tier].dir.glob("*" + suffix))


@pytest.fixture
def small(open_store: Callable[..., CacheStore]) -> CacheStore:
    """A store with 4-token chunks, so short token lists make long chains."""
    return open_store(chunk_tokens=4)


@pytest.mark.parametrize("tier", ["ram", "ram_file", "disk"])
def test_chunked_round_trip_in_every_tier(small: CacheStore, tier: str) -> None:
    tokens = list(range(100, 111))  # chunks of 4, 4, 3
    key = put(small, tokens, tier=tier, session="chat-1")
    row = small.get(key)  # type: ignore[arg-type]
    assert row is not None and row.format == 2 and row.tier == tier and row.session_id == "chat-1"
    assert small.load(row) == state_for(tokens)
    got = found(small, tokens)
    assert (got.source, got.n) == ("exact", 11)
    if tier != "ram":
        assert len(files(small, kvc_chunked.CHUNK_SUFFIX, tier)) == 3
        assert len(files(small, kvc_chunked.ROW_SUFFIX, tier)) == 1
    assert small.counters()[f"bytes_{tier}"] == sum(small.tier_usage()[tier][:1])


def test_lookup_cuts_longer_and_diverging_rows_to_the_shared_prefix(small: CacheStore) -> None:
    conv = list(range(10, 40))  # a saved 30-token conversation
    put(small, conv, session="chat-A")
    regenerate = conv[:22]  # the prompt of a reply being regenerated: a prefix of the row
    got = found(small, regenerate)
    assert (got.n, got.source, got.row.n_tokens, got.row.session_id) == (22, "longest_prefix", 30, "chat-A")
    edit = conv[:17] + [999, 998, 997]  # an edited message: diverges inside a chunk
    assert found(small, edit).n == 17
    branch = conv[:9] + [1] * 12  # a branch from an early message
    assert found(small, branch).n == 9
    follow_up = conv + [77, 78]  # and the plain case, a prompt extending the row
    assert found(small, follow_up).n == 30
    miss = small.find(META, [3, 4, 5])
    assert miss == NotFound("nothing_shared", 0)


def test_a_save_is_found_and_cut_while_the_writer_still_writes_it(
    small: CacheStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate = Gate()
    gate.install(monkeypatch, small, "disk")
    conv = list(range(50, 70))
    put(small, conv, flush=False, session="s")
    assert gate.entered.wait(5)
    got = found(small, conv[:13] + [1, 2])  # served from memory, cut to 13 cells
    assert got.n == 13 and got.row.status == "writing" and got.row.session_id == "s"
    assert found(small, conv).source == "exact"
    gate.release.set()
    assert small.flush(10)
    assert found(small, conv[:13] + [1, 2]).row.status == "available"


def test_a_shared_system_prompt_is_stored_once(open_store: Callable[..., CacheStore]) -> None:
    """The ~20-chat flow of issue 13, at the real chunk size and a realistic KV size per
    token (4 layers of 512-wide q8_0 K and V rows, ~4.4 KB a token)."""
    store = open_store()
    shape = {"n_layer": 4, "k_row": 544, "v_row": 544}
    per_token = bytes_per_token(**shape)
    unique: set[tuple[int, ...]] = set()
    whole_rows = 0  # what storing every row whole (KVC v1) takes
    for chat in range(20):
        conv = list(SYSTEM)
        for turn in range(4):
            conv += [chat * 1000 + turn * 100 + i for i in range(60)]  # ~60 new tokens a turn
            store.submit_save(model_id="m", meta=META, tokens=conv, payload=state_for(conv, **shape),
                              reason="finish", tier="disk")  # fmt: skip
            assert store.flush(10)
            whole_rows += len(conv) * per_token
            unique.update(tuple(conv[: i + 1]) for i in range(len(conv)))
    used = store.tier_usage()["disk"][0]
    ideal = len(unique) * per_token
    print(f"\n20 chats x 4 turns: {used} bytes on disk, {ideal} unique, {whole_rows} as whole rows")
    assert used <= 1.3 * ideal  # B8's goal
    assert used <= whole_rows / 3  # issue 13: at most a third of storing whole rows
    # every row still restores exactly
    for row in store.rows():
        assert store.load(row) == state_for(list(row.tokens), **shape)


def test_a_full_chunk_supersedes_the_partial_tail_of_an_earlier_turn(small: CacheStore) -> None:
    turn1 = list(range(200, 206))  # chunks [4] [2]
    put(small, turn1)
    assert len(files(small, kvc_chunked.CHUNK_SUFFIX)) == 2
    turn2 = turn1 + [300, 301, 302, 303]  # extends the partial: [4] [4] [2]
    put(small, turn2)
    assert len(files(small, kvc_chunked.CHUNK_SUFFIX)) == 3  # the 2-token partial is gone
    for tokens in (turn1, turn2):
        assert found(small, tokens).n == len(tokens)


def stored_chunk_tokens(store: CacheStore, tier: str = "disk") -> list[int]:
    """How many tokens each chunk file on ``tier`` holds (read from the files themselves)."""
    out = []
    for path in files(store, kvc_chunked.CHUNK_SUFFIX, tier):
        data = path.read_bytes()
        out.append(kvc_chunked.parse_chunk_header(data, len(data), bytes.fromhex(path.stem)).n)
    return out


def test_branches_inside_chunks_store_every_token_once(open_store: Callable[..., CacheStore]) -> None:
    """Chats on a system prompt that ends inside a chunk, a regenerate and an edit branching
    inside chunks, a turn extending a partial tail: every distinct prefix is stored once."""
    store = open_store(chunk_tokens=4)
    head = [7, 8, 9, 10, 11, 12]  # ends two tokens into the second chunk
    saved: list[list[int]] = []
    for chat in range(4):
        conv = list(head)
        for turn in range(3):
            conv = conv + [1000 * chat + 10 * turn + i for i in range(5)]
            saved.append(conv)
    regenerate = saved[1][:-2] + [55, 56, 57]  # a reply regenerated from inside its chunk
    edit = saved[4][:8] + [66, 67, 68, 69, 70]  # an edited user message
    saved += [regenerate, edit]
    for conv in saved:
        put(store, conv)
    unique = {tuple(conv[: i + 1]) for conv in saved for i in range(len(conv))}
    assert sum(stored_chunk_tokens(store)) == len(unique)
    on_disk = files(store, kvc_chunked.CHUNK_SUFFIX) + files(store, kvc_chunked.ROW_SUFFIX)
    assert store.tier_usage()["disk"][0] == sum(p.stat().st_size for p in on_disk)
    for conv in saved:  # every row restores exactly, also cut at every length
        row = store.lookup_exact(META, conv)
        assert row is not None and store.load(row) == state_for(conv)
        for n in range(2, len(conv)):
            assert found(store, conv[:n] + [4242]).n == n
    store.close()
    store = open_store(chunk_tokens=4)  # a restart lays the same chains over the same files
    assert sum(stored_chunk_tokens(store)) == len(unique)
    for conv in saved:
        assert found(store, conv).n == len(conv)
    assert store.counters()["chunks_orphaned"] == 0


def test_after_a_restart_the_first_restore_is_read_and_assembled_into_memory_made_at_load(
    open_store: Callable[..., CacheStore],
) -> None:
    """``prepare_restores`` (a model's load): the memory the model's largest chunked row
    would be read and assembled into is made before any request, so the first restore after
    a start does not pay for fresh pages (B9's restart turn); another model's rows do not
    count."""
    store = open_store(chunk_tokens=4)
    short, long = list(range(10, 30)), list(range(100, 190))
    put(store, short)
    put(store, long)
    put(store, list(range(300, 700)), meta=OTHER_META)  # larger, but another model's
    store.close()
    store = open_store(chunk_tokens=4)
    row = store.lookup_exact(META, long)
    assert row is not None and row.format == 2
    largest = max(r.size for r in store._catalog.rows() if r.namespace == row.namespace)
    made = store.prepare_restores(META)
    assert made >= 2 * largest  # its chunk files and its state
    assert store.memory.kept_bytes == made
    assert store.prepare_restores(META) == 0  # made once
    buffers = list(store.memory._bufs)
    got = found(store, short)
    assert isinstance(got.payload, memoryview) and any(got.payload.obj is b for b in buffers)  # type: ignore[arg-type]
    got.release(got.payload)
    got = found(store, long)
    assert got.n == len(long) and got.payload == state_for(long)
    assert any(got.payload.obj is b for b in buffers)  # type: ignore[union-attr]
    assert store.memory.kept_bytes == made  # nothing new was kept


def test_once_a_save_is_written_the_memory_to_restore_it_is_made(open_store: Callable[..., CacheStore]) -> None:
    """A store that started empty: once a row is written, the writer makes the memory a
    restore of it reads its chunk files and assembles its state into (two buffers), so the
    first restore finds it made; a longer row later makes larger buffers in their place."""
    store = open_store(chunk_tokens=4)
    assert store.memory.kept_bytes == 0
    conv = list(range(10, 50))
    put(store, conv)  # (flushed: the writer has also run what it queued after the write)
    row = store.lookup_exact(META, conv)
    assert row is not None and row.format == 2
    made = list(store.memory._bufs)
    assert len(made) == 2 and all(len(b) >= row.size for b in made)
    got = found(store, conv + [7])
    assert isinstance(got.payload, memoryview) and any(got.payload.obj is b for b in made)  # type: ignore[arg-type]
    assert all(any(b is m for m in made) for b in store.memory._bufs)  # nothing new
    got.release(got.payload)
    longer = list(range(100, 400))
    put(store, longer)
    big = store.lookup_exact(META, longer)
    assert big is not None
    assert sum(len(b) >= big.size for b in store.memory._bufs) >= 2


def test_a_row_extended_turn_by_turn_keeps_at_most_one_partial_chunk(small: CacheStore) -> None:
    conv = list(range(300, 303))
    for turn in range(8):
        conv = conv + [400 + 10 * turn + i for i in range(turn % 3 + 1)]
        put(small, conv)
        sizes = stored_chunk_tokens(small)
        assert sum(sizes) == len(conv) and sum(n < 4 for n in sizes) <= 1


def test_quotas_count_unique_bytes_and_evict_by_reference(open_store: Callable[..., CacheStore]) -> None:
    store = open_store(chunk_tokens=4)
    base = list(range(1, 13))  # three full chunks every row shares
    put(store, base + [100, 101])
    one_row = store.tier_usage()["disk"][0]
    shared = sum(p.stat().st_size for p in files(store, kvc_chunked.CHUNK_SUFFIX)) - (
        store.tier_usage()["disk"][0] - sum(p.stat().st_size for p in files(store, kvc_chunked.ROW_SUFFIX))
        - sum(p.stat().st_size for p in files(store, kvc_chunked.CHUNK_SUFFIX))
    )
    assert shared > 0
    for i in range(2, 6):
        put(store, base + [100 * i, 100 * i + 1])
    used = store.tier_usage()["disk"][0]
    assert used < 5 * one_row * 0.6  # the shared head counts once
    assert used == sum(p.stat().st_size for p in files(store, "")) - sum(
        p.stat().st_size for p in store._file_tiers["disk"].dir.glob("*.kvc")
    )
    store.set_quota("disk", used - 1)  # one row must go: the least recently used
    assert store.counters()["evictions"] >= 1
    keys_left = {r.tokens[-2] for r in store.rows()}
    assert 100 not in keys_left  # the first row was the LRU one
    for row in store.rows():  # the shared chunks stayed: every row still restores
        assert store.load(row) == state_for(list(row.tokens))
    assert store.tier_usage()["disk"][0] <= used - 1


def test_demotion_moves_a_row_with_its_chunks(open_store: Callable[..., CacheStore]) -> None:
    store = open_store(chunk_tokens=4)
    a = list(range(1, 11))
    b = a[:8] + [50, 51]
    put(store, a, tier="ram_file")
    put(store, b, tier="ram_file")
    used = store.tier_usage()["ram_file"][0]
    store.set_quota("ram_file", used - 1)  # A (LRU) is demoted to disk, shared chunks too
    row_a = store.lookup_exact(META, a)
    assert row_a is not None and row_a.tier == "disk" and store.counters()["demotions"] == 1
    assert store.load(row_a) == state_for(a)
    row_b = store.lookup_exact(META, b)
    assert row_b is not None and store.load(row_b) == state_for(b)
    assert store.tier_usage()["ram_file"][0] <= used - 1


def test_a_row_saved_to_disk_takes_shared_chunks_from_less_lasting_tiers(
    open_store: Callable[..., CacheStore],
) -> None:
    store = open_store(chunk_tokens=4)
    put(store, list(range(1, 10)), tier="ram")
    put(store, list(range(1, 9)) + [70, 71], tier="disk")  # shares two chunks held in RAM
    store.close()
    reopened = open_store(chunk_tokens=4)  # RAM is gone; the disk row must be whole
    row = reopened.lookup_exact(META, list(range(1, 9)) + [70, 71])
    assert row is not None and reopened.load(row) == state_for(list(range(1, 9)) + [70, 71])


@pytest.mark.parametrize("how", ["deleted", "garbage"])
def test_database_rebuilt_from_chunks_and_manifests(open_store: Callable[..., CacheStore], how: str) -> None:
    store = open_store(chunk_tokens=4)
    rows = {"a": list(range(1, 12)), "b": list(range(1, 7)) + [40, 41, 42]}
    for sid, tokens in rows.items():
        put(store, tokens, session=sid)
    usage = store.tier_usage()["disk"][0]
    store.close()
    db = store.data_dir / "kvcache.sqlite"
    if how == "deleted":
        for suffix in ("", "-wal", "-shm"):
            Path(f"{db}{suffix}").unlink(missing_ok=True)
    else:
        db.write_bytes(b"\x00garbage" * 1000)
    again = open_store(chunk_tokens=4)
    assert again.db_rebuilt and again.tier_usage()["disk"][0] == usage
    assert again.counters()["rows_reregistered"] == 2 and again.counters()["chunks_reregistered"] >= 4
    for sid, tokens in rows.items():
        got = found(again, tokens)
        assert got.n == len(tokens) and got.row.session_id == sid


def test_unreferenced_chunks_are_collected_at_start_up(open_store: Callable[..., CacheStore]) -> None:
    """A crash between a save's chunks and its manifest leaves chunks no row uses."""
    store = open_store(chunk_tokens=4)
    key = put(store, list(range(1, 10)))  # three chunks and a manifest
    store.close()
    # the crash: the manifest never landed, nor did the database learn of the chunks
    (store._file_tiers["disk"].dir / kvc_chunked.row_name(key)).unlink()  # type: ignore[arg-type]
    for suffix in ("", "-wal", "-shm"):
        Path(f"{store.data_dir / 'kvcache.sqlite'}{suffix}").unlink(missing_ok=True)
    chunk_files = files(store, kvc_chunked.CHUNK_SUFFIX)
    for path in chunk_files[:2]:  # two written an hour ago; the third may be another
        data = bytearray(path.read_bytes())  # process's save in progress: kept
        data[40:48] = int(time.time() - 3600).to_bytes(8, "little")
        size = int.from_bytes(data[8:12], "little")
        data[12:16] = crc32c(bytes(data[16:size])).to_bytes(4, "little")
        path.write_bytes(bytes(data))
    again = open_store(chunk_tokens=4)
    assert again.rows() == []
    assert again.counters()["chunks_orphaned"] == 2
    assert files(again, kvc_chunked.CHUNK_SUFFIX) == chunk_files[2:]


def test_miss_reasons(open_store: Callable[..., CacheStore]) -> None:
    store = open_store(chunk_tokens=4)
    conv = list(range(1, 21))
    assert store.find(META, conv) == NotFound("nothing_shared", 0)
    put(store, conv, meta=OTHER_META)  # another adapter set / context parameters
    miss = store.find(META, conv + [5])
    assert miss == NotFound("other_identity", 20)
    put(store, [1, 99, 98])  # shares one token here: too little to restore
    assert store.find(META, [1, 7]) == NotFound("too_short", 1)
    key = put(store, list(range(500, 530)))
    assert store.evict(key)  # type: ignore[arg-type]
    assert store.find(META, list(range(500, 520))) == NotFound("evicted", 20)


def test_a_damaged_shared_chunk_makes_every_row_fall_back_never_serve_bad_kv(
    open_store: Callable[..., CacheStore],
) -> None:
    store = open_store(chunk_tokens=4)
    head = list(range(1, 9))  # chunks H0 [1..4], H1 [5..8], shared by three rows
    convs = [head + [100 * i + j for j in range(6)] for i in range(1, 4)]
    for conv in convs:
        put(store, conv)
    h1 = kvc_chunked.chain_keys(kvc_chunked.chain_root(META.fingerprint, META.quant_type, META.ctx_params_hash, 4),
                         bytes(b"".join(t.to_bytes(4, "little") for t in head)), 4)[1]  # fmt: skip
    path = store._file_tiers["disk"].dir / kvc_chunked.chunk_name(h1)
    data = bytearray(path.read_bytes())
    data[-3] ^= 0x40  # one flipped bit in the KV bytes
    path.write_bytes(bytes(data))
    for conv in convs:  # each falls back to the undamaged head: 4 tokens, never the bad chunk
        got = found(store, conv)
        assert got.n == 4 and store.counters()["corrupt_files"] == 1
    assert not path.exists()
    report = store.verify()
    assert report.rows_damaged == 3 and report.removed == ()
    put(store, head + [7, 7, 7])  # a new row over the same head stores the chunk again
    for conv in convs:  # ...for everyone
        assert found(store, conv).n == len(conv)
    assert store.verify().rows_damaged == 0


def test_a_row_saved_again_restores_its_lost_chunks(open_store: Callable[..., CacheStore]) -> None:
    store = open_store(chunk_tokens=4)
    conv = list(range(1, 15))
    put(store, conv)
    victim = files(store, kvc_chunked.CHUNK_SUFFIX)[0]
    victim.write_bytes(b"garbage")
    assert store.verify().rows_damaged == 1
    assert found(store, conv).n < len(conv)
    put(store, conv)  # the same row again (say a shutdown save): not a duplicate while damaged
    assert store.counters()["duplicate_dropped"] == 0
    assert found(store, conv).n == len(conv) and store.verify().rows_damaged == 0


@pytest.mark.parametrize("change", ["grown", "shrunk"])
def test_a_chunk_file_of_another_size_than_the_catalog_says_is_never_served(
    open_store: Callable[..., CacheStore], change: str
) -> None:
    """Chunk files are read into one lent view sized by the catalog (``_Arena``): a file that
    grew past its slot gets memory of its own, one that shrank reads short; either fails its
    checks, the row restores only the sound chunks before it, and the pool goes on lending."""
    store = open_store(chunk_tokens=4)
    conv = list(range(1, 15))
    put(store, conv)
    row = store.lookup_exact(META, conv)
    assert row is not None
    chain = store._catalog.chunks.chain(row.key)
    last = store._file_tiers["disk"].dir / kvc_chunked.chunk_name(chain[-1])  # read after the others
    data = last.read_bytes()
    last.write_bytes(data + b"\x00" * 50_000 if change == "grown" else data[: len(data) // 2])
    got = found(store, conv)  # (found: only the prompt's own cells)
    assert got.n == 4 * (len(chain) - 1)  # the chunks before it
    got.release(got.payload)
    put(store, conv)  # saved again: the lost chunk written again
    again = found(store, conv)
    assert again.n == len(conv)
    again.release(again.payload)
    assert found(store, conv).n == len(conv)


def test_verify_finds_a_flipped_byte_in_a_shared_chunk(open_store: Callable[..., CacheStore]) -> None:
    store = open_store(chunk_tokens=4)
    for i in range(3):
        put(store, list(range(1, 9)) + [i])
    victim = files(store, kvc_chunked.CHUNK_SUFFIX)[0]
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 1
    victim.write_bytes(bytes(data))
    report = store.verify()
    assert victim.name[:64] in report.removed and report.chunks_checked >= 4
    assert report.rows_damaged >= 1 and store.counters()["corrupt_files"] == 1


def test_v1_blobs_and_chunked_rows_live_together(open_store: Callable[..., CacheStore]) -> None:
    store = open_store(chunk_tokens=4)
    opaque = list(range(300, 310))
    store.submit_save(model_id="m", meta=META, tokens=opaque, payload=b"\x07" * 99,
                      reason="finish", tier="disk")  # fmt: skip  # not a seq state: stored whole
    put(store, list(range(400, 410)))
    assert store.flush(10)
    formats = sorted(r.format for r in store.rows())
    assert formats == [1, 2]
    assert files(store, ".kvc") and files(store, kvc_chunked.ROW_SUFFIX)
    store.close()
    again = open_store(chunk_tokens=4)
    row = again.lookup_exact(META, opaque)
    assert row is not None and again.load(row) == b"\x07" * 99
    got = again.find(META, opaque + [1])
    assert isinstance(got, Found) and got.n == 10 and got.payload == b"\x07" * 99
    assert isinstance(again.find(META, opaque[:5]), NotFound)  # a whole blob is never cut


def test_a_v1_blob_is_converted_to_chunks_the_first_time_it_is_used(
    open_store: Callable[..., CacheStore],
) -> None:
    """Blobs written before KVC v2 keep working, and become chunks when first loaded."""
    from app.cache.blobs import kvc_whole
    from app.cache.blobs.tiers import blob_name
    from app.cache.keys import encode_tokens

    store = open_store(chunk_tokens=4)
    old = list(range(1, 15))
    # a KVC v1 blob as the previous version wrote it, dropped into the disk tier
    meta = kvc_whole.BlobMeta(META.fingerprint, META.quant_type, META.ctx_params_hash, tuple(old),
                        save_reason="finish", model_id="m", session_id="chat-old")  # fmt: skip
    payload = state_for(old)
    store.close()
    blob = store._file_tiers["disk"].dir / blob_name(META.key(encode_tokens(old)))
    blob.write_bytes(kvc_whole.build_file(meta, payload))
    store = open_store(chunk_tokens=4)
    row = store.lookup_exact(META, old)
    assert row is not None and row.format == 1 and row.session_id == "chat-old"
    assert isinstance(store.find(META, old[:10] + [5]), NotFound)  # a whole blob is not cut
    assert store.load(row) == payload  # the first use queues the conversion
    assert store.flush(10)
    row = store.lookup_exact(META, old)
    assert row is not None and row.format == 2 and row.session_id == "chat-old" and row.hits == 1
    assert not blob.exists() and store.counters()["rows_converted"] == 1
    assert found(store, old[:10] + [5]).n == 10  # now it can be cut
    store.close()
    again = open_store(chunk_tokens=4)
    row = again.lookup_exact(META, old)
    assert row is not None and row.format == 2 and again.load(row) == payload


def test_a_row_being_loaded_keeps_its_chunks_through_eviction(open_store: Callable[..., CacheStore]) -> None:
    store = open_store(chunk_tokens=4)
    keep = list(range(1, 11))
    put(store, keep)
    for i in range(3):
        put(store, list(range(1, 9)) + [50 + i, 60 + i])  # share keep's first two chunks
    key = store.lookup_exact(META, keep).key  # type: ignore[union-attr]
    store._load_pins[key] += 1  # as while a restore reads it
    store.set_quota("disk", 1)  # everything else must go
    assert [r.key for r in store.rows()] == [key]
    store._load_pins[key] -= 1
    assert store.load(store.get(key)) == state_for(keep)  # type: ignore[arg-type]
    store.set_quota("disk", 0)
    assert store.rows() == [] and files(store, "") == []


def test_a_row_whose_first_chunk_was_lost_misses_as_corrupt(open_store: Callable[..., CacheStore]) -> None:
    store = open_store(chunk_tokens=4)
    conv = list(range(1, 11))
    put(store, conv)
    first = next(p for p in files(store, kvc_chunked.CHUNK_SUFFIX) if int.from_bytes(p.read_bytes()[32:36], "little") == 0)
    first.write_bytes(b"damaged")
    assert store.find(META, conv) == NotFound("corrupt", 10)  # found damaged now
    assert store.find(META, conv) == NotFound("corrupt", 10)  # and still said later


def test_a_restore_whose_chain_went_away_under_it_restores_nothing(small: CacheStore) -> None:
    """A row deleted between its load pin and the chain read (seen under threads): nothing
    to read is a plain empty restore, not an error."""
    tokens = list(range(700, 711))
    row = small.get(put(small, tokens))  # type: ignore[arg-type]
    assert row is not None
    with small._catalog.lock:
        small._catalog.chunks.detach(row.key)
    got = small._chunked.restore(row, len(tokens))
    assert (got.payload, got.n) == (None, 0)


def test_a_restore_is_assembled_in_the_loading_contexts_stream_layout(
    small: CacheStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``find(n_stream=2)``: the chunks (or a pending save, cut) are put together once, as a
    two-stream state, so ``kv_unpack`` loads it without a second whole copy (issue 24, B9's
    first turns after a restart)."""
    conv = list(range(400, 430))
    put(small, conv)
    for prompt in (conv + [1, 2], conv[:17] + [9]):  # the whole row; a cut inside a chunk
        one = found(small, prompt)
        two = small.find(META, prompt, n_stream=2)
        assert isinstance(two, Found) and two.n == one.n
        assert seqstate.parse(two.payload).n_stream == 2
        assert two.payload == seqstate.to_streams(one.payload, 2)
        assert seqstate.to_streams(two.payload, 2) is two.payload  # loaded as it is
    gate = Gate()
    gate.install(monkeypatch, small, "disk")
    pending = list(range(600, 620))
    put(small, pending, flush=False)
    assert gate.entered.wait(5)
    cut = small.find(META, pending[:13] + [1], n_stream=2)  # served from memory, cut to 13 cells
    assert isinstance(cut, Found) and cut.n == 13
    assert cut.payload == seqstate.to_streams(state_for(pending[:13]), 2)
    gate.release.set()
    assert small.flush(10)


def test_a_models_cache_hooks_restore_in_its_contexts_stream_layout(small: CacheStore) -> None:
    """``StoreCache(kv_streams=...)`` (the Engine passes ``BackendInfo.kv_streams``) asks the
    store for hits in that layout."""
    conv = list(range(800, 820))
    put(small, conv)
    for streams in (1, 2, 4):
        hooks = StoreCache(small, model_id="m", policy=CachePolicy(), tier="disk", context_size=4096,
                           quant_bits=16, kv_streams=streams)  # fmt: skip
        hit = hooks.lookup(META, conv + [5], None)
        assert isinstance(hit, Hit) and len(hit.tokens) == 20
        assert seqstate.parse(hit.payload).n_stream == streams
        assert hit.payload == seqstate.to_streams(state_for(conv), streams)


def test_a_restore_lends_its_memory_to_the_next_once_released(small: CacheStore) -> None:
    """Restores are read and assembled into memory used before (``StateMemory``): once a
    hit is released (loaded), the next restore writes into the same memory, and the released
    view can no longer be read; a hit still held keeps its own bytes whatever restores follow."""
    long, short = list(range(100, 130)), list(range(200, 223))
    put(small, long)
    put(small, short)
    first = found(small, long)
    assert isinstance(first.payload, memoryview)
    used = list(small.memory._bufs)  # its chunk files' and its state's
    first.release(first.payload)
    with pytest.raises(ValueError):
        bytes(first.payload)
    held = found(small, short)  # (found checks the cells against the prompt's own)
    assert isinstance(held.payload, memoryview) and any(held.payload.obj is b for b in used)
    again = found(small, long)
    assert isinstance(again.payload, memoryview) and again.payload.obj is not held.payload.obj
    again.release(again.payload)
    found(small, long[:9])
    assert held.payload == state_for(short), "a restore overwrote a hit still held"
    hooks = StoreCache(small, model_id="m", policy=CachePolicy(), tier="disk", context_size=4096, quant_bits=16)
    hit = hooks.lookup(META, short + [5], None)
    assert isinstance(hit, Hit) and hit.payload == state_for(short)
    hit.release()
    with pytest.raises(ValueError):
        bytes(hit.payload)
