"""The on-disk side of Hub downloads: names → library paths, partials' sidecars, checksums.

A repo id and a file name come from the network or from a user, so both are checked before
they become paths: ``owner/name`` maps to one folder ``owner--name`` of the models dir, a file
name to a relative path inside it, and anything else (control characters, ``..``, a second
spelling of the same path) is ``HubError(kind="invalid")`` before any request is made.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
from pathlib import Path, PurePosixPath
from typing import Any, Protocol


class HubError(Exception):
    """A Hub operation failed for a reason the user can act on.

    ``kind``: ``not_found``, ``unauthorized``, ``network``, ``checksum_mismatch``,
    ``insufficient_space``, ``cancelled``, ``busy``, ``invalid``, ``io``, ``hub``.
    """

    def __init__(self, message: str, kind: str) -> None:
        super().__init__(message)
        self.message = message
        self.kind = kind


# The Hub's own rule (huggingface_hub.utils.validate_repo_id): ASCII letters, digits, "_",
# "-", "."; at most 96 characters a part; no "--" or "..". fullmatch, not "$": "$" also matches
# before a trailing newline, and "acme/model\n" used to be accepted.
_REPO_PART_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,95}")
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")
NAME_MAX = 255
"""Bytes in one file or folder name on Linux, macOS and Windows file systems."""


def repo_dirname(repo_id: str) -> str:
    """``owner/name`` → ``owner--name`` (one library folder per repo); ``HubError`` if invalid.

    "--" is refused in ids, as the Hub does, so two repos never share a folder."""
    parts = repo_id.split("/") if isinstance(repo_id, str) else []
    if not 1 <= len(parts) <= 2 or not all(_REPO_PART_RE.fullmatch(p) for p in parts) or (
        "--" in repo_id or ".." in repo_id or repo_id.endswith(".")
    ):
        raise HubError(f"invalid repository id {repo_id!r} (expected owner/name)", "invalid")
    return repo_id.replace("/", "--")


def check_filename(filename: str) -> PurePosixPath:
    """A relative POSIX path inside the repo, in its one canonical spelling."""
    if not isinstance(filename, str):
        raise HubError(f"invalid file name {filename!r}", "invalid")
    p = PurePosixPath(filename)
    if (
        not filename or p.is_absolute() or ".." in p.parts or "\\" in filename
        or _CONTROL_RE.search(filename) or str(p) != filename or filename != filename.strip()
    ):
        raise HubError(f"invalid file name {filename!r}", "invalid")
    if any(len(part.encode()) > NAME_MAX for part in p.parts):
        raise HubError(f"the file name {filename[:40]!r}… is longer than the {NAME_MAX} bytes a file "
                       "system allows", "invalid")
    return p


class Hasher(Protocol):
    """sha256 (LFS files) or git's blob sha1 (plain files)."""

    def update(self, data: bytes, /) -> None: ...

    def hexdigest(self) -> str: ...


class GitBlobHasher:
    """git's blob sha1 (``sha1("blob <size>\\0" + content)``): the id of a non-LFS file."""

    def __init__(self, size: int) -> None:
        self._h = hashlib.sha1(b"blob %d\0" % size)

    def update(self, data: bytes) -> None:
        self._h.update(data)

    def hexdigest(self) -> str:
        return self._h.hexdigest()


def hash_prefix(part: Path, have: int, hasher: Hasher) -> None:
    """Feed the bytes of a resumed partial to the hasher (the state cannot be saved)."""
    if not have:
        part.unlink(missing_ok=True)
        return
    hash_file(part, hasher, have)


def hash_file(path: Path, hasher: Hasher, size: int) -> None:
    """Feed the first ``size`` bytes of ``path`` to the hasher."""
    with path.open("rb") as f:
        left = size
        while left and (chunk := f.read(min(left, 1 << 20))):
            hasher.update(chunk)
            left -= len(chunk)


def sidecar_path(part: Path) -> Path:
    return part.with_name(part.name + ".json")


def write_sidecar(part: Path, fields: dict[str, Any]) -> None:
    side = sidecar_path(part)
    tmp = side.with_name(side.name + ".tmp")
    tmp.write_text(json.dumps(fields, indent=1))
    os.replace(tmp, side)


def read_sidecar(side: Path) -> dict[str, Any] | None:
    try:
        meta = json.loads(side.read_text())
    except (OSError, ValueError):
        return None
    return meta if isinstance(meta, dict) and "repo_id" in meta and "filename" in meta else None


def remove_files(*paths: Path) -> None:
    for p in paths:
        with contextlib.suppress(OSError):
            p.unlink(missing_ok=True)


def mtime(p: Path) -> float:
    try:
        return p.stat().st_mtime
    except OSError:
        return 0.0


def device(p: Path) -> int | None:
    try:
        return p.stat().st_dev
    except OSError:
        return None


