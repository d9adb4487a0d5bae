"""Where cache bytes live: ``ram`` (a dict in this process), ``ram_file`` (files on a tmpfs)
and ``disk`` (files under ``<data_dir>/kv/``).

A tier holds named files: KVC v1 blobs (``<hex key>.kvc``), KVC v2 chunks (``.kvch``) and
row manifests (``.kvr``). The RAM tier keeps each file as the parts it was written from
(header, payload), so neither saving nor loading copies a payload; every tier's files are
validated the same way on load.

File tiers publish atomically: each file goes to an exclusive temp file (``O_EXCL``), is
written and fsynced, then renamed onto its final name; the directory is fsynced once for
the batch (``put``), and each file's size and first part are read back and checked (the
payload's CRC32C is checked on every load). A crash can leave only temp files
(``*.kvc-tmp``), which ``remove_temp_files`` deletes at start-up, so a torn file never
appears under its final name.

Tiers are not thread-safe on their own for the same name; the store serialises writers.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import secrets
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Protocol

from app.cache.blobs import kvc_whole

log = logging.getLogger(__name__)

TIER_RAM = "ram"
TIER_RAM_FILE = "ram_file"
TIER_DISK = "disk"
TIERS = (TIER_RAM, TIER_RAM_FILE, TIER_DISK)
PERSISTENCE = {TIER_RAM: 0, TIER_RAM_FILE: 1, TIER_DISK: 2}  # what outlives what

BLOB_SUFFIX = ".kvc"
TEMP_SUFFIX = ".kvc-tmp"
CACHE_SUFFIXES = (BLOB_SUFFIX, ".kvr", ".kvch", TEMP_SUFFIX)
"""Every name the cache writes ends in one of these (v1 blobs, v2 manifests and chunks, temps)."""
SET_ASIDE_DIR = "set-aside"
"""Where a file tier moves what it finds under a cache file's name and cannot be one."""

Buffer = bytes | memoryview
FileParts = tuple[str, Sequence[Buffer]]  # (name, parts whose concatenation is the file)


class Tier(Protocol):
    name: str

    def put(self, files: Sequence[FileParts]) -> list[str]:
        """Publish files atomically (each whole or not at all) and validated; locations."""
        ...

    def get(self, name: str) -> bytes:
        """A whole file; ``FileNotFoundError`` when absent."""
        ...

    def get_parts(self, name: str, into: Callable[[int], memoryview] | None = None) -> tuple[Buffer, ...]:
        """A file as stored: the RAM tier's parts, or a file tier's bytes as one part —
        read into ``into(size)`` when given (memory used before; the RAM tier copies
        nothing and ignores it)."""
        ...

    def get_head(self, name: str, n: int) -> tuple[bytes, int]:
        """Up to ``n`` leading bytes of a file, and its size."""
        ...

    def remove(self, name: str) -> None: ...

    def has(self, name: str) -> bool: ...

    def size_of(self, name: str) -> int | None:
        """A file's size, or None when it is absent."""
        ...

    def names(self, suffix: str) -> list[str]:
        """Names of the files ending in ``suffix`` (``<64 hex digits><suffix>``)."""
        ...

    def patch(self, name: str, offset: int, data: bytes) -> None:
        """Best effort: overwrite a few header bytes in place (hit counts, last use)."""
        ...

    def location(self, name: str) -> str: ...


def blob_name(key: bytes) -> str:
    return key.hex() + BLOB_SUFFIX


def name_key(name: str) -> bytes | None:
    """The 32-byte key a file name starts with, or None when it is not ``<hex>.<suffix>``."""
    head = name.split(".", 1)[0]
    if len(head) != 64:
        return None
    try:
        return bytes.fromhex(head)
    except ValueError:
        return None


def _immutable(part: Buffer) -> Buffer:
    """``part`` itself when its memory never changes (bytes, a view of bytes), else a copy: a
    view of memory that is reused (a save packed into ``StateMemory``) is not kept by reference."""
    if isinstance(part, bytes) or (isinstance(part, memoryview) and isinstance(part.obj, bytes)):
        return part
    return bytes(part)


class RamTier:
    """Files as tuples of their parts in a dict; lost when the process exits."""

    name = TIER_RAM

    def __init__(self) -> None:
        self._files: dict[str, tuple[Buffer, ...]] = {}
        self._lock = threading.Lock()

    def put(self, files: Sequence[FileParts]) -> list[str]:
        kept = [(name, tuple(_immutable(p) for p in parts)) for name, parts in files]
        with self._lock:
            for name, parts in kept:
                self._files[name] = parts
        return [TIER_RAM] * len(files)

    def get_parts(self, name: str, into: Callable[[int], memoryview] | None = None) -> tuple[Buffer, ...]:
        with self._lock:
            parts = self._files.get(name)
        if parts is None:
            raise FileNotFoundError(f"no RAM file {name}")
        return parts

    def get(self, name: str) -> bytes:
        parts = self.get_parts(name)
        return parts[0] if len(parts) == 1 and isinstance(parts[0], bytes) else b"".join(parts)

    def get_head(self, name: str, n: int) -> tuple[bytes, int]:
        parts = self.get_parts(name)
        first = bytes(parts[0][:n]) if parts else b""
        if len(first) < n and len(parts) > 1:
            first = b"".join(parts)[:n]
        return first, sum(len(p) for p in parts)

    def remove(self, name: str) -> None:
        with self._lock:
            self._files.pop(name, None)

    def has(self, name: str) -> bool:
        with self._lock:
            return name in self._files

    def size_of(self, name: str) -> int | None:
        with self._lock:
            parts = self._files.get(name)
        return None if parts is None else sum(len(p) for p in parts)

    def names(self, suffix: str) -> list[str]:
        with self._lock:
            return [n for n in self._files if n.endswith(suffix)]

    def patch(self, name: str, offset: int, data: bytes) -> None:
        pass  # RAM files die with the process; the index has the numbers

    def location(self, name: str) -> str:
        return TIER_RAM


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_all(fd: int, data: Buffer) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


class FileTier:
    """Files in one directory.

    Only regular files are the tier's: anything else under a cache file's name (a
    directory, a symlink, a FIFO — what a hand or another program put there) is moved to
    ``SET_ASIDE_DIR`` at start-up (``set_aside_strays``) and never listed, read or deleted.
    NOTE: a directory named like a ``.kvr`` stopped every start with ``IsADirectoryError``
    (reconciling tried to delete it as an unreadable file), until someone removed it by hand.
    """

    def __init__(self, name: str, directory: Path) -> None:
        self.name = name
        self.dir = directory
        self.set_aside = 0
        """Entries this tier moved away (the store counts them as ``stray_files_set_aside``).
        A tier directory that is itself a file is left alone: the tier takes no saves
        (``probe_writable``), the start goes on."""
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:  # reported again by every write; the store keeps running
            log.error("cache tier %s: cannot create %s: %s", name, directory, exc)

    def path(self, key: bytes) -> Path:
        """The path of a v1 blob."""
        return self.dir / blob_name(key)

    def location(self, name: str) -> str:
        return str(self.dir / name)

    def put(self, files: Sequence[FileParts]) -> list[str]:
        done: list[Path] = []
        temps: list[tuple[Path, Path]] = []
        try:
            for name, parts in files:
                tmp = self.dir / f"{name}.{os.getpid()}-{secrets.token_hex(4)}{TEMP_SUFFIX}"
                temps.append((tmp, self.dir / name))
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
                try:
                    for part in parts:
                        _write_all(fd, part)
                    os.fsync(fd)
                finally:
                    os.close(fd)
            for tmp, final in temps:
                os.rename(tmp, final)
                done.append(final)
            _fsync_dir(self.dir)
            # NOTE: the size and the first part (a header) are read back, not the whole
            # payload: re-reading and re-checking 14 MB took ~16 ms of CPU per save on this
            # machine, next to the decode threads. Payload CRCs are checked on every load.
            for (_name, parts), final in zip(files, done, strict=True):
                with open(final, "rb") as f:
                    size = os.fstat(f.fileno()).st_size
                    head = f.read(len(parts[0])) if parts else b""
                if size != sum(len(p) for p in parts) or (parts and head != parts[0]):
                    raise kvc_whole.CorruptBlob(f"{final} does not read back as written")
        except BaseException:
            for tmp, _ in temps:
                with contextlib.suppress(OSError):
                    tmp.unlink()
            for final in done:
                with contextlib.suppress(OSError):
                    final.unlink()
            raise
        return [str(p) for p in done]

    def get(self, name: str) -> bytes:
        return (self.dir / name).read_bytes()

    def get_parts(self, name: str, into: Callable[[int], memoryview] | None = None) -> tuple[Buffer, ...]:
        if into is None:
            return (self.get(name),)
        with open(self.dir / name, "rb", buffering=0) as f:
            view = into(os.fstat(f.fileno()).st_size)
            got = 0
            while got < len(view) and (n := f.readinto(view[got:])):
                got += n
        return (view[:got],)  # shorter than its size when the file shrank meanwhile: the checks say so

    def get_head(self, name: str, n: int) -> tuple[bytes, int]:
        with open(self.dir / name, "rb") as f:
            return f.read(n), os.fstat(f.fileno()).st_size

    def remove(self, name: str) -> None:
        try:
            (self.dir / name).unlink()
        except FileNotFoundError:
            pass
        except IsADirectoryError:  # not a file of ours: set aside, never fatal
            self._set_aside(name)

    def has(self, name: str) -> bool:
        return (self.dir / name).is_file()

    def _set_aside(self, name: str) -> bool:
        """Move ``name`` into ``SET_ASIDE_DIR`` (under a fresh name); False if it cannot be."""
        aside = self.dir / SET_ASIDE_DIR
        try:
            aside.mkdir(exist_ok=True)
            os.rename(self.dir / name, aside / f"{name}.{secrets.token_hex(4)}")
        except OSError as exc:
            log.error("cache tier %s: cannot set %s aside: %s", self.name, name, exc)
            return False
        self.set_aside += 1
        log.warning("cache tier %s: %s is not a cache file; moved to %s", self.name, name, aside)
        return True

    def set_aside_strays(self) -> int:
        """Start-up: move every entry named like a cache file that is not a regular file
        (a directory, a symlink, a FIFO, a socket, a device) into ``SET_ASIDE_DIR``; returns
        how many were moved. One that cannot be moved is left where it is: ``names`` never
        lists it, so nothing reads or deletes it."""
        moved = 0
        for entry in self._entries():
            if entry.name.endswith(CACHE_SUFFIXES) and not _is_regular(entry):
                moved += self._set_aside(entry.name)
        return moved

    def _entries(self) -> list[os.DirEntry[str]]:
        try:
            with os.scandir(self.dir) as it:
                return list(it)
        except OSError:
            return []

    def size_of(self, name: str) -> int | None:
        try:
            st = os.stat(self.dir / name)
        except OSError:
            return None
        return st.st_size if os.path.isfile(self.dir / name) else None

    def names(self, suffix: str) -> list[str]:
        return [e.name for e in self._entries()
                if e.name.endswith(suffix) and len(e.name) == 64 + len(suffix) and _is_regular(e)]

    def patch(self, name: str, offset: int, data: bytes) -> None:
        # NOTE: header fields outside every CRC and key, patched in place without fsync:
        # they only order LRU and show hits after a database rebuild.
        try:
            fd = os.open(self.dir / name, os.O_WRONLY)
        except OSError:
            return
        try:
            os.pwrite(fd, data, offset)
        except OSError as exc:
            log.debug("could not update the header of %s: %s", name, exc)
        finally:
            os.close(fd)

    def probe_writable(self) -> OSError | None:
        """None when a file can be created here, else the error that refused it (a
        read-only file system, no permission, a missing directory)."""
        probe = self.dir / f".probe-{os.getpid()}-{secrets.token_hex(4)}{TEMP_SUFFIX}"
        try:
            fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except OSError as exc:
            return exc
        os.close(fd)
        with contextlib.suppress(OSError):
            probe.unlink()
        return None

    def remove_temp_files(self) -> int:
        """Delete leftovers of interrupted writes; returns how many were removed.

        Temp names carry the writer's pid (``<name>.<pid>-<rand>.kvc-tmp``); files of a
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


# -- KVC v1 whole-row blobs on any tier ----------------------------------------------------


def write_blob(tier: Tier, key: bytes, prefix: bytes, payload: Buffer) -> str:
    """Store a v1 blob (``prefix + payload``) atomically and validated; its location."""
    meta = kvc_whole.parse_meta(prefix, total_size=len(prefix) + len(payload))
    if meta.payload_offset != len(prefix) or meta.key != key:
        raise kvc_whole.CorruptBlob("the prefix does not describe this payload or key")
    return tier.put([(blob_name(key), (prefix, payload))])[0]


def read_blob_parts(tier: Tier, key: bytes) -> tuple[bytes, Buffer]:
    """A v1 blob as (prefix, payload), unvalidated; ``FileNotFoundError`` when absent."""
    parts = tier.get_parts(blob_name(key))
    if len(parts) == 2:
        return bytes(parts[0]), parts[1]
    data = bytes(parts[0]) if len(parts) == 1 else b"".join(parts)
    offset = kvc_whole.payload_offset_of(data[: kvc_whole.FIXED_SIZE])
    return data[:offset], data[offset:]


def read_blob_prefix(tier: Tier, key: bytes) -> tuple[bytes, int]:
    """The bytes before a v1 blob's payload and the blob's total size."""
    fixed, size = tier.get_head(blob_name(key), kvc_whole.FIXED_SIZE)
    offset = kvc_whole.payload_offset_of(fixed)
    if offset > size:
        raise kvc_whole.CorruptBlob("payload offset beyond the end of the file")
    head, _ = tier.get_head(blob_name(key), offset)
    return head, size


def touch_blob(tier: Tier, key: bytes, hits: int, last_used: int) -> None:
    """Best effort: record a load in a v1 blob's header (hit count, last-used time)."""
    name = blob_name(key)
    tier.patch(name, kvc_whole.HITS_OFFSET, kvc_whole.HITS_FIELD.pack(min(hits, 0xFFFFFFFF)))
    tier.patch(name, kvc_whole.LAST_USED_OFFSET, kvc_whole.LAST_USED_FIELD.pack(last_used))


def blob_keys(tier: Tier) -> Iterator[bytes]:
    for name in tier.names(BLOB_SUFFIX):
        key = name_key(name)
        if key is not None:
            yield key


def _is_regular(entry: os.DirEntry[str]) -> bool:
    """A regular file itself (a symlink is not, whatever it points to)."""
    try:
        return entry.is_file(follow_symlinks=False)
    except OSError:
        return False


def _writer_alive(temp_name: str) -> bool:
    try:
        stem = temp_name[: -len(TEMP_SUFFIX)]
        pid = int(stem.rsplit(".", 1)[1].split("-")[0])
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
