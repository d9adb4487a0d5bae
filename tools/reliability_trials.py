"""The hostile trials behind docs/reliability.md: each runs real parts and counts failures.

Every trial takes a scratch directory and returns a ``Trial``: how many attempts, how many
broke the promise, the promise itself, and one line per failure. Trials that need a child
process (kills, hostile templates) start ``sys.executable`` with this checkout on PYTHONPATH.
"""

from __future__ import annotations

import errno
import hashlib
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RNG_SEED = 15  # issue 15: the trials are the same on every run


@dataclass
class Trial:
    name: str
    promise: str
    trials: int = 0
    failures: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def fail(self, what: str) -> None:
        self.failures.append(what)


def _child(code: str, *args: str, **kw: Any) -> subprocess.Popen[bytes]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code), *args], env=env, cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, **kw)


# --------------------------------------------------------------------------- cache: kills during saves

_SAVER = """
import hashlib, sys
from pathlib import Path
from app.cache.keys import KeyMeta
from app.cache.store import CacheStore
data_dir, shm, start = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
meta = KeyMeta(b"\\x5a" * 32, "q4_1", b"\\xa5" * 32)
store = CacheStore(data_dir, ram_file_dir=shm, writer_queue=8)
i = start
while True:
    size = (64 << 10) * (1 + i % 16)
    payload = hashlib.sha256(str(i).encode()).digest() * (size // 32)
    if store.submit_save(model_id="crash", meta=meta, tokens=[i] * (1 + i % 50), payload=payload,
                         reason="continued", tier=("disk", "ram_file")[i % 2]):
        i += 1
    if i == start + 5:
        store.flush()
        print("saving", flush=True)
"""


def kills_during_saves(scratch: Path, rounds: int = 20) -> Trial:
    from app.cache.store import CacheStore

    t = Trial("SIGKILL while the cache writes blobs", "no torn or lost blob is ever served; the store opens")
    rng = random.Random(RNG_SEED)
    data_dir, shm = scratch / "data", scratch / "shm"
    kept: set[bytes] = set()
    for r in range(rounds):
        child = _child(_SAVER, str(data_dir), str(shm), str(r * 100_000))
        assert child.stdout is not None
        child.stdout.readline()
        time.sleep(rng.uniform(0.02, 0.6))
        child.send_signal(signal.SIGKILL)
        child.wait(30)
        t.trials += 1
        try:
            with CacheStore(data_dir, ram_file_dir=shm) as store:
                rows = {row.key: row for row in store.rows()}
                for key in kept - set(rows):
                    t.fail(f"round {r}: row {key.hex()[:12]} saved in an earlier round is gone")
                for row in rows.values():
                    payload = store.load(row)
                    first = row.tokens[0]
                    good = hashlib.sha256(str(first).encode()).digest() * (len(payload or b"") // 32)
                    if payload is None or payload != good or row.tokens != (first,) * (1 + first % 50):
                        t.fail(f"round {r}: row {row.key.hex()[:12]} is torn or wrong")
                kept = set(rows)
        except Exception as exc:  # noqa: BLE001 — counted, it is what the trial looks for
            t.fail(f"round {r}: the store did not open: {exc!r}")
    t.notes.append(f"{len(kept)} rows held after the last round")
    return t


# --------------------------------------------------------------------------- cache: bit flips


def bit_flips(scratch: Path, flips: int = 60) -> Trial:
    from app.cache.keys import KeyMeta
    from app.cache.store import CacheStore

    t = Trial("one bit flipped anywhere in a saved blob", "a damaged blob is a miss, never served")
    rng = random.Random(RNG_SEED)
    meta = KeyMeta(b"\x11" * 32, "q4_1", b"\x22" * 32)
    tokens = list(range(1, 41))
    payload = bytes(rng.randrange(256) for _ in range(4096))
    caught = harmless = 0
    for i in range(flips):
        data_dir = scratch / f"flip{i}"
        with CacheStore(data_dir) as store:
            store.submit_save(model_id="m", meta=meta, tokens=tokens, payload=payload, reason="finish",
                              tier="disk", prompt_text="a prompt")
            store.flush(10)
        (blob,) = (data_dir / "kv").glob("*.kvc")
        data = bytearray(blob.read_bytes())
        at = rng.randrange(len(data))
        data[at] ^= 1 << rng.randrange(8)
        blob.write_bytes(data)
        t.trials += 1
        with CacheStore(data_dir) as store:
            row = store.lookup_exact(meta, tokens)
            got = store.load(row) if row is not None else None
        if got is None:
            caught += 1
        elif got == payload:
            harmless += 1  # a byte no check covers and nothing reads for serving (e.g. prompt text)
        else:
            t.fail(f"flip at byte {at} of {len(data)}: served {len(got)} wrong bytes")
    t.notes.append(f"{caught} caught as corrupt, {harmless} in bytes that do not change what is served")
    return t


# --------------------------------------------------------------------------- cache: database damage


def _damage(db: Path, how: str) -> None:
    if how == "deleted":
        for suffix in ("", "-wal", "-shm"):
            Path(f"{db}{suffix}").unlink(missing_ok=True)
    elif how == "garbage":
        db.write_bytes(os.urandom(64 << 10))
    elif how == "truncated":
        db.write_bytes(db.read_bytes()[:100])
    elif how == "empty":
        db.write_bytes(b"")
    elif how == "header zeroed":
        data = bytearray(db.read_bytes())
        data[:100] = bytes(100)
        db.write_bytes(data)
    elif how == "pages scrambled":
        data = bytearray(db.read_bytes())
        rng = random.Random(RNG_SEED)
        for _ in range(64):
            data[rng.randrange(100, len(data))] = rng.randrange(256)
        db.write_bytes(data)
    elif how == "a directory":
        for suffix in ("", "-wal", "-shm"):
            Path(f"{db}{suffix}").unlink(missing_ok=True)
        db.mkdir()


DB_DAMAGE = ("deleted", "garbage", "truncated", "empty", "header zeroed", "pages scrambled", "a directory")


def database_damage(scratch: Path, n_rows: int = 30) -> Trial:
    from app.cache.keys import KeyMeta
    from app.cache.store import DB_NAME, CacheStore

    t = Trial("the cache's SQLite file damaged (7 ways)",
              "the store opens and rebuilds every row from the blobs, payloads intact")
    meta = KeyMeta(b"\x11" * 32, "q4_1", b"\x22" * 32)
    rebuilt = 0
    for how in DB_DAMAGE:
        data_dir = scratch / how.replace(" ", "_")
        with CacheStore(data_dir) as store:
            for n in range(1, n_rows + 1):
                store.submit_save(model_id="m", meta=meta, tokens=list(range(n)), payload=bytes([n]) * 512,
                                  reason="finish", tier="disk")
            store.flush(30)
        _damage(data_dir / DB_NAME, how)
        t.trials += 1
        try:
            with CacheStore(data_dir) as store:
                rows = store.rows()
                good = sum(store.load(r) == bytes([r.n_tokens]) * 512 for r in rows)
        except Exception as exc:  # noqa: BLE001
            t.fail(f"{how}: the store did not open: {exc!r}")
            continue
        if good != n_rows:
            t.fail(f"{how}: {good}/{n_rows} rows back")
        rebuilt += good
    t.notes.append(f"{rebuilt}/{n_rows * len(DB_DAMAGE)} rows rebuilt")
    return t


# --------------------------------------------------------------------------- storage: kills while writing

_WRITER = """
import sys
from app.storage import Storage
store = Storage(sys.argv[1])
conv = store.create_conversation("kill test")
parent = None
while True:
    msg = store.add_message(conv.id, parent, "user" if parent is None else "assistant", "x" * 200)
    parent = msg.id
    print(msg.id, flush=True)
"""


def kills_during_conversation_writes(scratch: Path, rounds: int = 20) -> Trial:
    from app.storage import Storage

    t = Trial("SIGKILL during a storm of conversation writes",
              "every message acknowledged before the kill is there after a restart")
    rng = random.Random(RNG_SEED)
    db = scratch / "hearth.db"
    acked_total = 0
    for r in range(rounds):
        child = _child(_WRITER, str(db))
        assert child.stdout is not None
        acked: list[str] = [child.stdout.readline().decode().strip()]  # it is writing now
        deadline = time.monotonic() + rng.uniform(0.01, 0.5)
        while time.monotonic() < deadline:
            line = child.stdout.readline().decode().strip()
            if line:
                acked.append(line)
        child.send_signal(signal.SIGKILL)
        child.wait(30)
        t.trials += 1
        acked_total += len(acked)
        try:
            store = Storage(db)
            try:
                missing = 0
                for mid in acked:
                    try:
                        store.get_message(mid)
                    except Exception:  # noqa: BLE001
                        missing += 1
            finally:
                store.close()
        except Exception as exc:  # noqa: BLE001
            t.fail(f"round {r}: the database did not open: {exc!r}")
            continue
        if missing:
            t.fail(f"round {r}: {missing} of {len(acked)} acknowledged messages lost")
    t.notes.append(f"{acked_total} acknowledged messages checked")
    return t


# --------------------------------------------------------------------------- cache: full disk


def full_disk(scratch: Path, n_requests: int = 10) -> Trial:
    from app.cache.blobs import tiers
    from app.cache.policy import CachePolicy
    from app.engine import Engine, ModelConfig
    from tests.helpers.tiny_model import ASSETS_DIR, ensure_tiny_model

    t = Trial("the disk fills up under the cache (ENOSPC on every blob write)",
              "generation goes on; each failed save is counted; saves work again when space is back")
    path = ensure_tiny_model(ASSETS_DIR)
    real = tiers._write_all

    def no_space(fd: int, data: bytes | memoryview) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    policy = CachePolicy(min_tokens=4, cold_min_tokens=10**6, cold_max_tokens=2 * 10**6)
    with Engine(scratch / "data") as engine:
        model = engine.load_model("m", ModelConfig(path=str(path), n_ctx=256, n_seq_max=2, n_batch=128,
                                                   n_threads=2, tier="disk", policy=policy))
        tiers._write_all = no_space  # type: ignore[assignment]
        try:
            for i in range(n_requests):
                t.trials += 1
                try:
                    model.complete(f"Request {i} while the disk is full", response_tokens=4)
                except Exception as exc:  # noqa: BLE001
                    t.fail(f"request {i}: {exc!r}")
            engine.cache.flush(30)
        finally:
            tiers._write_all = real  # type: ignore[assignment]
        errors = engine.counters().get("save_errors", 0)
        if errors < n_requests:
            t.fail(f"only {errors} of {n_requests} failed saves counted")
        model.complete("Space is back", response_tokens=4)
        engine.cache.flush(30)
        if not engine.cache.rows():
            t.fail("no save worked after space came back")
        t.notes.append(f"{errors} failed saves counted")
    return t


TRIALS: list[Callable[[Path], Trial]] = [
    kills_during_saves, bit_flips, database_damage, full_disk, kills_during_conversation_writes,
]
