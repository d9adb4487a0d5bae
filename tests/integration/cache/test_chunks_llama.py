"""KVC v2 on real llama.cpp (the tiny model) and real files: a state saved as chunks comes
back byte for byte after a restart, a lookup cut from a longer or diverging row continues
exactly like a cold prefill, a shared head is stored once, and a damaged shared chunk is
never served."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from app.cache.blobs import kvc_chunked, seqstate
from app.cache.keys import KeyMeta
from app.cache.lookup import Found
from app.cache.store import CacheStore
from app.engine.llama.llama_backend import LlamaBackend
from tests.integration.backend.driver import decode, prefill

N_NEW = 12


@pytest.fixture
def backend(tiny_model_path: Path) -> Iterator[LlamaBackend]:
    b = LlamaBackend(str(tiny_model_path), n_ctx_per_seq=1024, n_seq_max=4, n_batch=512, n_threads=1)
    yield b
    b.close()


def meta_of(b: LlamaBackend) -> KeyMeta:
    return KeyMeta(b.info.fingerprint, b.info.quant_type, b.info.ctx_params_hash)


def text_tokens(b: LlamaBackend, n: int, seed: str) -> list[int]:
    words = f"{seed} keeps every conversation warm and the cache stores each token once. "
    tokens = b.tokenize(words * (n // 8 + 2), add_special=False)
    return tokens[:n]


def cold(b: LlamaBackend, prompt: list[int]) -> tuple[list[int], np.ndarray]:
    b.seq_rm(0)
    prefill(b, 0, prompt)
    logits = b.seq_logits(0).copy()
    return decode(b, {0: len(prompt)}, N_NEW)[0], logits


def pack(b: LlamaBackend, tokens: list[int]) -> bytes:
    b.seq_rm(1)
    prefill(b, 1, tokens)
    return bytes(b.kv_pack(1))


def warm(b: LlamaBackend, hit: Found, prompt: list[int]) -> tuple[list[int], np.ndarray]:
    """Restore a hit into seq 2, drop its last cell, prefill the rest of the prompt."""
    assert b.kv_unpack(2, hit.payload)
    n = hit.n
    b.seq_rm(2, n - 1)
    prefill(b, 2, prompt[n - 1 :], pos=n - 1)
    logits = b.seq_logits(2).copy()
    return decode(b, {2: len(prompt)}, N_NEW)[2], logits


def assert_same(got: tuple[list[int], np.ndarray], want: tuple[list[int], np.ndarray]) -> None:
    """Same greedy tokens and bit-identical first logits (default KV types, one stream a seq)."""
    assert got[0] == want[0]
    assert np.array_equal(got[1], want[1])


def save(store: CacheStore, b: LlamaBackend, tokens: list[int], session: str = "") -> None:
    store.submit_save(model_id="tiny", meta=meta_of(b), tokens=tokens, payload=pack(b, tokens),
                      reason="finish", tier="disk", session_id=session)  # fmt: skip
    assert store.flush(30)


def test_chunks_round_trip_across_a_restart(tmp_path: Path, backend: LlamaBackend) -> None:
    prompt = text_tokens(backend, 300, "Hearth")  # three chunks: 128, 128, 44
    payload = pack(backend, prompt)
    with CacheStore(tmp_path / "d", ram_file_dir=tmp_path / "shm") as store:
        save(store, backend, prompt, "chat-1")
        assert len(list((tmp_path / "d" / "kv").glob("*" + kvc_chunked.CHUNK_SUFFIX))) == 3
    with CacheStore(tmp_path / "d", ram_file_dir=tmp_path / "shm") as store:  # a restart
        hit = store.find(meta_of(backend), prompt)
        assert isinstance(hit, Found) and hit.n == 300 and hit.source == "exact"
        assert hit.payload == payload  # byte for byte
        assert hit.row.session_id == "chat-1"
        assert_same(warm(backend, hit, prompt), cold(backend, prompt))


@pytest.mark.parametrize("case", ["regenerate", "edit", "branch", "follow_up"])
def test_any_shared_prefix_restores_and_continues_like_cold(
    tmp_path: Path, backend: LlamaBackend, case: str
) -> None:
    system = text_tokens(backend, 150, "System")
    turn = text_tokens(backend, 90, "User")
    reply = text_tokens(backend, 60, "Assistant")
    saved = system + turn + reply  # the row: a conversation up to its reply
    prompt = {
        "regenerate": system + turn,  # the same prompt again: a prefix of the longer row
        "edit": system + turn[:40] + text_tokens(backend, 30, "Edited"),
        "branch": system[:100] + text_tokens(backend, 50, "Branch"),
        "follow_up": saved + text_tokens(backend, 20, "Next"),
    }[case]
    shared = next((i for i, (x, y) in enumerate(zip(prompt, saved, strict=False)) if x != y),
                  min(len(prompt), len(saved)))  # fmt: skip
    with CacheStore(tmp_path / "d", ram_file_dir=tmp_path / "shm") as store:
        save(store, backend, saved)
        hit = store.find(meta_of(backend), prompt)
        assert isinstance(hit, Found) and hit.n == shared
        assert hit.payload == seqstate.cut(pack(backend, saved), shared)
        assert_same(warm(backend, hit, prompt), cold(backend, prompt))



def test_a_restore_assembled_for_the_contexts_streams_loads_without_a_rewrite_and_continues_like_cold(
    tmp_path: Path, backend: LlamaBackend
) -> None:
    """The engine asks for hits in its context's layout (``BackendInfo.kv_streams``: one
    stream a seq here, 4): chunks cut and put together once, loaded as they are."""
    assert backend.info.kv_streams == backend.n_stream == 4
    saved = text_tokens(backend, 300, "System")
    prompt = saved[:200] + text_tokens(backend, 30, "Edited")  # cut inside the second chunk
    with CacheStore(tmp_path / "d", ram_file_dir=tmp_path / "shm") as store:
        save(store, backend, saved)
    with CacheStore(tmp_path / "d", ram_file_dir=tmp_path / "shm") as store:  # a restart
        hit = store.find(meta_of(backend), prompt, n_stream=backend.info.kv_streams)
        assert isinstance(hit, Found) and hit.n == 200
        assert seqstate.parse(hit.payload).n_stream == 4
        assert seqstate.to_streams(hit.payload, 4) is hit.payload
        assert_same(warm(backend, hit, prompt), cold(backend, prompt))


def test_a_shared_head_is_stored_once_in_real_states(tmp_path: Path, backend: LlamaBackend) -> None:
    system = text_tokens(backend, 256, "System")  # exactly two chunks
    convs = [system + text_tokens(backend, 100, f"Chat {i}") for i in range(3)]
    with CacheStore(tmp_path / "d", ram_file_dir=tmp_path / "shm") as store:
        for conv in convs:
            save(store, backend, conv)
        per_cell = seqstate.parse(pack(backend, convs[0])).bytes_per_cell
        unique = 256 + 3 * 100
        used = store.tier_usage()["disk"][0]
        print(f"\n3 chats on a 256-token system prompt: {used} bytes, {unique * per_cell} unique")
        assert used <= 1.3 * unique * per_cell
        assert used < sum(len(pack(backend, c)) for c in convs) * 0.6
        for conv in convs:
            row = store.lookup_exact(meta_of(backend), conv)
            assert row is not None and store.load(row) == pack(backend, conv)


def test_chats_branching_inside_a_chunk_share_its_head(tmp_path: Path, backend: LlamaBackend) -> None:
    """A system prompt ending inside a chunk: the later chats use the head of the first
    chat's chunk instead of storing it again; every row still restores byte for byte, a
    prompt branching off restores exactly its shared cells, and a flipped bit in the chunk
    whose head they all share makes every one of them fall back, never serve it."""
    system = text_tokens(backend, 200, "System")  # 128 + 72 of the next chunk
    convs = [system + text_tokens(backend, 100, f"Chat {i}") for i in range(3)]
    meta = meta_of(backend)
    unique = {tuple(c[: i + 1]) for c in convs for i in range(len(c))}
    with CacheStore(tmp_path / "d", ram_file_dir=tmp_path / "shm") as store:
        for conv in convs:
            save(store, backend, conv)
        kv = tmp_path / "d" / "kv"
        cells = 0
        for path in kv.glob("*" + kvc_chunked.CHUNK_SUFFIX):
            data = path.read_bytes()
            cells += kvc_chunked.parse_chunk_header(data, len(data), bytes.fromhex(path.stem)).n
        assert cells == len(unique)  # each distinct prefix once
        for conv in convs:
            row = store.lookup_exact(meta, conv)
            assert row is not None and store.load(row) == pack(backend, conv)
        prompt = convs[1][:230] + text_tokens(backend, 20, "Edited")
        hit = store.find(meta, prompt)
        assert isinstance(hit, Found) and hit.n == 230
        assert hit.payload == seqstate.cut(pack(backend, convs[1]), 230)
        assert_same(warm(backend, hit, prompt), cold(backend, prompt))
        root = kvc_chunked.chain_root(meta.fingerprint, meta.quant_type, meta.ctx_params_hash, 128)
        first_chat = b"".join(t.to_bytes(4, "little") for t in convs[0])
        path = kv / kvc_chunked.chunk_name(kvc_chunked.chain_keys(root, first_chat, 128)[1])
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0x01
        path.write_bytes(bytes(data))
        report = store.verify()
        assert report.removed == (path.stem,) and report.rows_damaged == 3
        for conv in convs:
            hit = store.find(meta, conv)
            assert isinstance(hit, Found) and hit.n == 128  # the undamaged first chunk only
            assert_same(warm(backend, hit, conv), cold(backend, conv))


def test_a_damaged_shared_chunk_is_never_served(tmp_path: Path, backend: LlamaBackend) -> None:
    system = text_tokens(backend, 256, "System")
    convs = [system + text_tokens(backend, 60, f"Chat {i}") for i in range(2)]
    meta = meta_of(backend)
    with CacheStore(tmp_path / "d", ram_file_dir=tmp_path / "shm") as store:
        for conv in convs:
            save(store, backend, conv)
        root = kvc_chunked.chain_root(meta.fingerprint, meta.quant_type, meta.ctx_params_hash, 128)
        second = kvc_chunked.chain_keys(root, b"".join(t.to_bytes(4, "little") for t in system), 128)[1]
        path = tmp_path / "d" / "kv" / kvc_chunked.chunk_name(second)
        data = bytearray(path.read_bytes())
        data[len(data) // 3] ^= 0x01  # one bit of K in the shared second chunk
        path.write_bytes(bytes(data))
        for conv in convs:
            hit = store.find(meta, conv)
            assert isinstance(hit, Found) and hit.n == 128  # the first chunk only
            assert_same(warm(backend, hit, conv), cold(backend, conv))
        assert store.counters()["corrupt_files"] == 1 and not path.exists()
