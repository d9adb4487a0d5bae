"""Whatever else is found in a cache folder never stops a start (issue 51, item 4).

With the store closed, an entry under a cache file's name is replaced by something that is
not a regular file — a directory, a FIFO, a symlink (to ``/dev/zero``, to a real file
elsewhere), a directory named like an interrupted write. Reopening must not raise; each
such entry is moved to the tier's ``set-aside`` folder and counted
(``stray_files_set_aside``), every row whose own files are intact still serves exactly its
own tokens' KV, and the next start finds nothing left to set aside. Files with names the
cache never writes are left alone; a stray that cannot be moved is skipped.

NOTE: before, a directory in place of one ``.kvr`` stopped every start with
``IsADirectoryError`` from ``FileTier.remove`` (reconciling tried to delete it as an
unreadable file), until someone removed it by hand.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from app.cache.blobs.kvc_chunked import CHUNK_SUFFIX, ROW_SUFFIX
from app.cache.blobs.tiers import BLOB_SUFFIX, SET_ASIDE_DIR, TEMP_SUFFIX
from app.cache.lookup import Found
from app.cache.store import CacheStore
from tests.helpers.kv_states import state_for
from tests.unit.cache.conftest import META, payload_for

CHUNKED = [list(range(100, 100 + n)) for n in (6, 11)] + [list(range(300, 309))]
WHOLE = [[900 + i for i in range(n)] for n in (3, 9)]


def _open(root: Path) -> CacheStore:
    return CacheStore(root / "data", ram_file_dir=root / "shm", chunk_tokens=4)


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[bytes, list[int]]]]:
    """A small closed cache on disk: v2 rows with shared chunks and v1 blobs."""
    root = tmp_path_factory.mktemp("pristine")
    store = _open(root)
    for tokens in CHUNKED:
        store.submit_save(model_id="m", meta=META, tokens=tokens, payload=state_for(tokens), reason="finish",
                          tier="disk")
    for tokens in WHOLE:
        store.submit_save(model_id="m", meta=META, tokens=tokens, payload=payload_for(tokens), reason="finish",
                          tier="disk")
    assert store.flush(10)
    rows = {r.key: list(r.tokens) for r in store.rows()}
    store.close()
    assert len(rows) == len(CHUNKED) + len(WHOLE)
    yield root, rows


@pytest.fixture
def case(pristine: tuple[Path, dict[bytes, list[int]]], tmp_path: Path) -> tuple[Path, dict[bytes, list[int]]]:
    root, rows = pristine
    shutil.copytree(root / "data", tmp_path / "data")
    return tmp_path, rows


def _kv(root: Path) -> Path:
    return root / "data" / "kv"


def _one(root: Path, suffix: str) -> Path:
    return sorted(_kv(root).glob(f"*{suffix}"))[0]


def _replace_with_dir(path: Path) -> None:
    path.unlink()
    path.mkdir()
    (path / "inside").write_text("a user's file")  # not empty: rmdir would not do either


def _replace_with_fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path)  # opening it to read would block the start for ever


def _replace_with_dev_zero(path: Path) -> None:
    path.unlink()
    path.symlink_to("/dev/zero")  # reading it would never end


def _replace_with_link_out(path: Path) -> None:
    outside = path.parent.parent.parent / "elsewhere.bin"
    outside.write_bytes(path.read_bytes())
    path.unlink()
    path.symlink_to(outside)


STRAYS: dict[str, tuple[str, Callable[[Path], None]]] = {
    "a directory in place of a row manifest (the issue's case)": (ROW_SUFFIX, _replace_with_dir),
    "a directory in place of a chunk": (CHUNK_SUFFIX, _replace_with_dir),
    "a directory in place of a v1 blob": (BLOB_SUFFIX, _replace_with_dir),
    "a FIFO in place of a row manifest": (ROW_SUFFIX, _replace_with_fifo),
    "a symlink to /dev/zero in place of a chunk": (CHUNK_SUFFIX, _replace_with_dev_zero),
    "a symlink to a copy elsewhere in place of a v1 blob": (BLOB_SUFFIX, _replace_with_link_out),
}


def _check_serves_only_its_own(store: CacheStore, rows: dict[bytes, list[int]]) -> None:
    for tokens in CHUNKED:
        got = store.find(META, tokens)
        if isinstance(got, Found):
            assert got.payload == state_for(tokens[: got.n]), "restored another prefix's KV"
    for row in store.rows():
        assert list(row.tokens) == rows[row.key]
        payload = store.load(row)
        if payload is not None:
            assert payload == (state_for(rows[row.key]) if row.format == 2 else payload_for(rows[row.key]))


@pytest.mark.parametrize("what", list(STRAYS))
def test_an_entry_that_is_not_a_file_is_set_aside(case: tuple[Path, dict[bytes, list[int]]], what: str) -> None:
    root, rows = case
    suffix, replace = STRAYS[what]
    target = _one(root, suffix)
    replace(target)
    store = _open(root)  # must not raise (nor block on the FIFO, nor read /dev/zero)
    try:
        assert store.counters()["stray_files_set_aside"] == 1
        assert store.counters()["internal_errors"] == 0
        assert not os.path.lexists(target), "the stray entry is still under the cache file's name"
        aside = list((_kv(root) / SET_ASIDE_DIR).iterdir())
        assert [p.name.rsplit(".", 1)[0] for p in aside] == [target.name]
        if target.suffix == ".kvr" and aside[0].is_dir():
            assert (aside[0] / "inside").read_text() == "a user's file"  # moved, never deleted
        _check_serves_only_its_own(store, rows)
        assert len(store.rows()) >= len(rows) - 1 - (target.suffix == ".kvch") * len(CHUNKED)
        assert store.submit_save(model_id="m", meta=META, tokens=[5, 6, 7], payload=payload_for([5, 6, 7]),
                                 reason="finish", tier="disk") is not None
        assert store.flush(10)
    finally:
        store.close()
    again = _open(root)
    try:
        assert again.counters()["stray_files_set_aside"] == 0
        assert again.counters()["internal_errors"] == 0
        _check_serves_only_its_own(again, {**rows, **{r.key: list(r.tokens) for r in again.rows()}})
    finally:
        again.close()


def test_a_directory_named_like_an_interrupted_write_is_set_aside(case: tuple[Path, dict[bytes, list[int]]]) -> None:
    root, rows = case
    stray = _kv(root) / f"{'ab' * 32}{ROW_SUFFIX}.999999-0000{TEMP_SUFFIX}"
    stray.mkdir()
    store = _open(root)
    try:
        assert store.counters()["stray_files_set_aside"] == 1
        assert {r.key for r in store.rows()} == set(rows)
    finally:
        store.close()


def test_names_the_cache_never_writes_are_left_alone(case: tuple[Path, dict[bytes, list[int]]]) -> None:
    root, rows = case
    (_kv(root) / "notes.txt").write_text("mine")
    (_kv(root) / "backup").mkdir()
    (_kv(root) / SET_ASIDE_DIR).write_text("a file where the set-aside folder would go")
    store = _open(root)
    try:
        assert store.counters()["stray_files_set_aside"] == 0
        assert {r.key for r in store.rows()} == set(rows)
        assert (_kv(root) / "notes.txt").read_text() == "mine" and (_kv(root) / "backup").is_dir()
    finally:
        store.close()


def test_a_stray_that_cannot_be_moved_is_skipped(case: tuple[Path, dict[bytes, list[int]]]) -> None:
    """The set-aside folder cannot be made (a file has its name): the stray directory stays
    where it is, and the start still succeeds without reading or deleting it."""
    root, rows = case
    (_kv(root) / SET_ASIDE_DIR).write_text("in the way")
    target = _one(root, ROW_SUFFIX)
    _replace_with_dir(target)
    store = _open(root)
    try:
        assert store.counters()["stray_files_set_aside"] == 0
        assert target.is_dir() and (target / "inside").read_text() == "a user's file"
        assert {r.key for r in store.rows()} == set(rows) - {bytes.fromhex(target.name[:64])}
        _check_serves_only_its_own(store, rows)
    finally:
        store.close()
