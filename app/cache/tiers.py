"""Where blob bytes live: ``ram`` (a dict in this process), ``ram_file`` (files on a tmpfs)
and ``disk`` (files under ``<data_dir>/kv/``).

Every tier stores whole KVC blobs (the RAM tier keeps the prefix and the payload as two
objects, so neither saving nor loading copies the payload), and a load validates RAM and
file blobs the same way.

File tiers publish atomically: an exclusive temp file (``O_EXCL``) is written, fsynced,
renamed onto ``<hex key>.kvc``, the directory is fsynced, and the file's size and prefix are
read back and checked (the payload's CRC32C is checked on every load). A crash can leave
only temp files (``*.kvc-tmp``), which ``remove_temp_files`` deletes at start-up, so a torn
``.kvc`` never appears under its final name.

Tiers are not thread-safe on their own for the same key; the store serialises writers.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import secrets
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

from app.cache import kvc

log = logging.getLogger(__name__)

TIER_RAM = "ram"
TIER_RAM_FILE = "ram_file"
TIER_DISK = "disk"
TIERS = (TIER_RAM, TIER_RAM_FILE, TIER_DISK)

BLOB_SUFFIX = ".kvc"
TEMP_SUFFIX = ".kvc-tmp"


class Tier(Protocol):
    name: str

    def write(self, key: bytes, prefix: bytes, payload: bytes | memoryview) -> str:
        """Store a blob (``prefix + payload``) atomically and validated; return its location."""
        ...

    def read(self, key: bytes) -> bytes:
        """The whole blob; ``FileNotFoundError`` when absent."""
        ...

    def read_parts(self, key: bytes) -> tuple[bytes, bytes | memoryview]:
        """The blob as (prefix, payload), unvalidated; ``FileNotFoundError`` when absent."""
        ...

    def read_prefix(self, key: bytes) -> tuple[bytes, int]:
        """The bytes before the payload and the blob's total size (for re-registration)."""
        ...

    def delete(self, key: bytes) -> None: ...

    def touch(self, key: bytes, hits: int, last_used: int) -> None:
        """Best effort: record a load in the blob header (hit count, last-used time)."""
        ...

    def exists(self, key: bytes) -> bool: ...

    def list_keys(self) -> Iterator[bytes]: ...

    def location(self, key: bytes) -> str: ...


class RamTier:
    """Blobs as (prefix, payload) pairs of bytes in a dict; lost when the process exits."""

    name = TIER_RAM

    def __init__(self) -> None:
        self._blobs: dict[bytes, tuple[bytes, bytes | memoryview]] = {}
        self._lock = threading.Lock()

    def write(self, key: bytes, prefix: bytes, payload: bytes | memoryview) -> str:
        # Framing, lengths and key, as the file tiers' read-back checks. NOTE: not the payload
        # CRC again: kvc.build computed it from this very (immutable) payload a moment ago.
        meta = kvc.parse_meta(prefix, total_size=len(prefix) + len(payload))
        if meta.payload_offset != len(prefix) or meta.key != key:
            raise kvc.CorruptBlob("the prefix does not describe this payload or key")
        with self._lock:
            self._blobs[key] = (prefix, payload)
        return TIER_RAM

    def read_parts(self, key: bytes) -> tuple[bytes, bytes | memoryview]:
        with self._lock:
            parts = self._blobs.get(key)
        if parts is None:
            raise FileNotFoundError(f"no RAM blob {key.hex()}")
        return parts

    def read(self, key: bytes) -> bytes:
        prefix, payload = self.read_parts(key)
        return prefix + payload

    def read_prefix(self, key: bytes) -> tuple[bytes, int]:
        prefix, payload = self.read_parts(key)
        return prefix, len(prefix) + len(payload)

    def delete(self, key: bytes) -> None:
        with self._lock:
            self._blobs.pop(key, None)

    def touch(self, key: bytes, hits: int, last_used: int) -> None:
        pass  # RAM blobs die with the process; the index has the numbers

    def exists(self, key: bytes) -> bool:
        with self._lock:
            return key in self._blobs

    def list_keys(self) -> Iterator[bytes]:
        with self._lock:
            return iter(list(self._blobs))

    def location(self, key: bytes) -> str:
        return TIER_RAM


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_all(fd: int, data: bytes | memoryview) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


class FileTier:
    """Blobs as ``<hex key>.kvc`` files in one directory."""

    def __init__(self, name: str, directory: Path) -> None:
        self.name = name
        self.dir = directory
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:  # reported again by every write; the store keeps running
            log.error("cache tier %s: cannot create %s: %s", name, directory, exc)

    def path(self, key: bytes) -> Path:
        return self.dir / (key.hex() + BLOB_SUFFIX)

    def location(self, key: bytes) -> str:
        return str(self.path(key))

    def write(self, key: bytes, prefix: bytes, payload: bytes | memoryview) -> str:
        final = self.path(key)
        tmp = self.dir / f"{key.hex()}.{os.getpid()}-{secrets.token_hex(4)}{TEMP_SUFFIX}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            try:
                _write_all(fd, prefix)
                _write_all(fd, payload)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.rename(tmp, final)
        except BaseException:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise
        _fsync_dir(self.dir)
        # NOTE: the size and the prefix are read back, not the whole payload: re-reading and
        # re-checking 14 MB took ~16 ms of CPU per save on this machine, next to the decode
        # threads. The payload's CRC32C (in the prefix) is checked on every load.
        try:
            with open(final, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                head = f.read(len(prefix))
            if size != len(prefix) + len(payload) or head != prefix:
                raise kvc.CorruptBlob(f"{final} does not read back as written")
        except (OSError, kvc.CorruptBlob):
            with contextlib.suppress(OSError):
                final.unlink()
            raise
        return str(final)

    def read(self, key: bytes) -> bytes:
        return self.path(key).read_bytes()

    def read_parts(self, key: bytes) -> tuple[bytes, bytes | memoryview]:
        data = self.read(key)
        offset = kvc.payload_offset_of(data[: kvc.FIXED_SIZE])
        return data[:offset], data[offset:]

    def read_prefix(self, key: bytes) -> tuple[bytes, int]:
        with open(self.path(key), "rb") as f:
            size = os.fstat(f.fileno()).st_size
            fixed = f.read(kvc.FIXED_SIZE)
            offset = kvc.payload_offset_of(fixed)
            if offset > size:
                raise kvc.CorruptBlob("payload offset beyond the end of the file")
            return fixed + f.read(offset - len(fixed)), size

    def delete(self, key: bytes) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.path(key).unlink()

    def touch(self, key: bytes, hits: int, last_used: int) -> None:
        # NOTE: header fields outside the CRC and the key, patched in place without fsync:
        # they only order LRU and show hits after a database rebuild.
        try:
            fd = os.open(self.path(key), os.O_WRONLY)
        except OSError:
            return
        try:
            os.pwrite(fd, kvc.HITS_FIELD.pack(min(hits, 0xFFFFFFFF)), kvc.HITS_OFFSET)
            os.pwrite(fd, kvc.LAST_USED_FIELD.pack(last_used), kvc.LAST_USED_OFFSET)
        except OSError as exc:
            log.debug("could not update the header of %s: %s", key.hex(), exc)
        finally:
            os.close(fd)

    def exists(self, key: bytes) -> bool:
        return self.path(key).is_file()

    def list_keys(self) -> Iterator[bytes]:
        try:
            names = os.listdir(self.dir)
        except OSError:
            return iter(())
        out = []
        for name in names:
            if not name.endswith(BLOB_SUFFIX) or len(name) != 64 + len(BLOB_SUFFIX):
                continue
            try:
                out.append(bytes.fromhex(name[:64]))
            except ValueError:
                continue
        return iter(out)

    def remove_temp_files(self) -> int:
        """Delete leftovers of interrupted writes; returns how many were removed.

        Temp names carry the writer's pid (``<hex key>.<pid>-<rand>.kvc-tmp``); files of a
        process that is still alive (say the GUI, while ``hearth cache ls`` runs) are kept.
        """
        removed = 0
        try:
            names = os.listdir(self.dir)
        except OSError:
            return 0
        for name in names:
            if name.endswith(TEMP_SUFFIX) and not _writer_alive(name):
                with contextlib.suppress(OSError):
                    (self.dir / name).unlink()
                    removed += 1
        return removed


def _writer_alive(temp_name: str) -> bool:
    try:
        pid = int(temp_name.split(".")[1].split("-")[0])
    except (IndexError, ValueError):
        return False
    if pid == os.getpid() or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def default_ram_file_dir(data_dir: Path) -> Path:
    """``/dev/shm/hearth-<uid>/<hash of data dir>``, or ``<data_dir>/kv-ramfile`` without shm."""
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK):
        digest = hashlib.sha256(str(data_dir.resolve()).encode()).hexdigest()[:16]
        return shm / f"hearth-{os.getuid()}" / digest
    return data_dir / "kv-ramfile"
