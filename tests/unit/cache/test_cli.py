"""``hearth cache ls|stats|gc|verify`` on a real data directory."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from app.cache import cli
from app.cache.store import CacheStore
from tests.unit.cache.conftest import META, save


def make_cache(tmp_path: Path) -> Path:
    data = tmp_path / "data"
    with CacheStore(data, ram_file_dir=tmp_path / "shm") as store:
        save(store, list(range(40)), model_id="smol", reason="cold")
        save(store, list(range(90)), model_id="smol", tier="ram_file")
        save(store, list(range(7)), model_id="other", size=2000)
        store.count("hits_exact", 2)
    return data


def run(tmp_path: Path, *argv: str) -> tuple[int, str]:
    out = io.StringIO()
    code = cli.main(
        ["--data-dir", str(tmp_path / "data"), "--ram-file-dir", str(tmp_path / "shm"), *argv],
        out,
    )
    return code, out.getvalue()


def test_ls(tmp_path: Path) -> None:
    make_cache(tmp_path)
    code, text = run(tmp_path, "ls")
    lines = text.splitlines()
    assert code == 0 and lines[0].split() == [
        "KEY", "MODEL", "TOKENS", "SIZE", "TIER", "REASON", "AGE", "HITS", "PIN",
    ]  # fmt: skip
    assert lines[-1] == "3 entries"
    assert any(META.key(list(range(40))).hex()[:12] in line and "cold" in line for line in lines)
    assert any("ram_file" in line and " 90 " in line for line in lines)
    code, text = run(tmp_path, "ls", "--model", "other")
    assert text.splitlines()[-1] == "1 entries" and "other" in text


def test_stats(tmp_path: Path) -> None:
    make_cache(tmp_path)
    code, text = run(tmp_path, "stats")
    assert code == 0
    assert "entries: 3" in text and "ram_file" in text
    assert "  saves_cold" in text and "  hits_exact" in text
    counters = dict(
        line.split() for line in text.split("counters:\n")[1].splitlines() if line.strip()
    )
    assert counters["saves_finish"] == "2" and counters["hits_exact"] == "2"


def test_gc(tmp_path: Path) -> None:
    make_cache(tmp_path)
    code, text = run(tmp_path, "gc")
    assert code == 0 and text.startswith("gc: 0 rows")


def test_verify_reports_and_removes_bad_blobs(tmp_path: Path) -> None:
    data = make_cache(tmp_path)
    code, text = run(tmp_path, "verify")
    assert code == 0 and "verified 3 blobs: 3 ok, 0 removed" in text and "verifying 3/3" in text
    victim = data / "kv" / (META.key(list(range(7))).hex() + ".kvc")
    raw = bytearray(victim.read_bytes())
    raw[-3] ^= 0x10
    victim.write_bytes(raw)
    code, text = run(tmp_path, "verify", "--no-progress")
    assert code == 1 and "verified 3 blobs: 2 ok, 1 removed" in text
    assert META.key(list(range(7))).hex() in text and not victim.exists()
    assert "verifying" not in text


def test_human_formats() -> None:
    assert cli.human_bytes(512) == "512 B" and cli.human_bytes(3 << 20) == "3.0 MiB"
    assert cli.human_age(30) == "30s" and cli.human_age(7200) == "2h"


def test_verify_and_stats_with_chunked_rows(tmp_path: Path) -> None:
    from app.cache.blobs import kvc_chunked
    from tests.helpers.kv_states import state_for

    data = tmp_path / "data"
    with CacheStore(data, ram_file_dir=tmp_path / "shm", chunk_tokens=4) as store:
        for tail in ([50, 51], [60, 61], [70]):  # three rows on one 8-token head
            tokens = list(range(1, 9)) + tail
            store.submit_save(model_id="smol", meta=META, tokens=tokens, payload=state_for(tokens),
                              reason="finish", tier="disk")  # fmt: skip
    code, text = run(tmp_path, "stats")
    assert code == 0 and "entries: 3 (3 chunked, 0 whole)" in text
    code, text = run(tmp_path, "verify", "--no-progress")
    assert code == 0 and "verified 3 blobs: 3 ok, 0 removed" in text
    assert "checked 5 chunks; 0 rows now restore only up to a lost chunk" in text
    shared = next(p for p in (data / "kv").glob("*" + kvc_chunked.CHUNK_SUFFIX)
                  if int.from_bytes(p.read_bytes()[32:36], "little") == 4)  # fmt: skip
    raw = bytearray(shared.read_bytes())
    raw[-1] ^= 1
    shared.write_bytes(raw)
    code, text = run(tmp_path, "verify", "--no-progress")
    assert code == 1 and "3 rows now restore only up to a lost chunk" in text
    assert shared.name[:64] in text and not shared.exists()


def test_a_cache_dir_that_cannot_be_used_is_one_clear_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "data"
    blocker.write_bytes(b"a file where the data dir should be")
    out = io.StringIO()
    code = cli.main(["--data-dir", str(blocker / "cache"), "--ram-file-dir", str(tmp_path / "shm"), "ls"], out)
    err = capsys.readouterr().err
    assert code == 0 and out.getvalue().splitlines()[-1] == "0 entries"
    assert "note: the cache directory is missing or is not a directory" in err
    assert "Traceback" not in err
