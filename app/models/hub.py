"""Hugging Face Hub: search GGUF repos, list their files, download one with resume and checks.

Search, repo info, URL building, auth headers, file metadata and the HTTP session all come
from ``huggingface_hub``. The byte transfer is ours (a ranged GET on the client's session)
because ``hf_hub_download`` cannot be paused and resumed from a partial after a restart,
cancelled between chunks, or made to verify before anything reaches the library.

A download's life::

    model_info(blobs) ─ expected size + LFS sha256
        │   free-space check (refused here, before any request for the file)
    HEAD resolve ─ etag, commit
        │
    downloads_dir/<repo>--<file>.part   +  .part.json sidecar {repo, filename, sha256, size, etag}
        │   GET Range: bytes=<have>-   (retried with back-off; cancel keeps the partial = pause)
    sha256(partial) == LFS sha256 ? ── no ─▶ partial deleted, HubError(checksum_mismatch)
        │ yes
    models_dir/<owner>--<name>/<file>   (atomic rename; the library only ever sees whole files)

Names, paths, sidecars and checksums are in ``app.models.hub_files``; a file already at its
destination counts as installed only when its checksum matches too.
"""

from __future__ import annotations

import errno
import hashlib
import logging
import os
import re
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

import huggingface_hub
from huggingface_hub import HfApi, ModelInfo, get_session, hf_hub_url
from huggingface_hub.errors import HfHubHTTPError
from huggingface_hub.utils import (  # type: ignore[attr-defined]  # public, lazily exported
    build_hf_headers,
    hf_raise_for_status,
)

from app.models.hub_files import (
    NAME_MAX,
    GitBlobHasher,
    Hasher,
    HubError,
    check_filename,
    device,
    hash_file,
    hash_prefix,
    mtime,
    read_sidecar,
    remove_files,
    repo_dirname,
    sidecar_path,
    write_sidecar,
)
from app.models.library import quant_from_filename
from app.units import human_bytes

try:  # huggingface_hub >= 1.0 talks HTTP through httpx (2.x: the httpx2 fork)
    import httpx2 as _httpx
except ImportError:  # pragma: no cover - depends on the installed client
    import httpx as _httpx  # type: ignore[no-redef]

log = logging.getLogger(__name__)

DEFAULT_ENDPOINT = "https://huggingface.co"
SPACE_MARGIN_BYTES = 1 << 20  # never fill a disk to the last byte
_PROGRESS_INTERVAL_S = 0.1
_RETRY_STATUS = frozenset({408, 429, 500, 502, 503, 504})
MAX_FETCH_FACTOR = 3
MAX_FETCH_SLACK = 64 << 20
"""A download gives up after fetching 3 x the file's size + 64 MiB (restarts included)."""

ProgressCallback = Callable[[int, int, float], None]  # (done, total, bytes_per_s)
Cancel = Callable[[], bool] | threading.Event | None  # polled between chunks
FreeSpaceProbe = Callable[[Path], int]
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class RepoInfo:
    id: str
    downloads: int
    likes: int
    updated: datetime | None
    tags: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class RemoteFile:
    repo_id: str
    filename: str
    size: int | None
    sha256: str | None  # the LFS sha256; None for a file kept in plain git
    quant: str | None
    blob_id: str | None = None  # git sha1 of the blob (the check for non-LFS files)

    @property
    def is_verifiable(self) -> bool:
        """The listing gave a checksum (LFS sha256 or git blob sha1); without one only the
        size can be checked, and a wrong file of the right size would be accepted."""
        return bool(self.sha256 or self.blob_id)


@dataclass(frozen=True, slots=True)
class Downloaded:
    """A finished download: where it is, and whether its checksum was checked."""

    path: Path
    verified: bool


@dataclass(frozen=True, slots=True)
class PartialDownload:
    """A download that stopped before the end (paused, cancelled, interrupted, app closed)."""

    repo_id: str
    filename: str
    sha256: str | None
    size: int
    etag: str | None
    num_bytes_done: int
    path: Path


def _is_cancelled(cancel: Cancel) -> bool:
    if cancel is None:
        return False
    if hasattr(cancel, "is_set"):
        return bool(cancel.is_set())
    return bool(cancel())


class HubClient:
    """Search and download GGUF models from a Hugging Face Hub (or a compatible server).

    ``endpoint`` defaults to ``HF_ENDPOINT``, then huggingface.co; ``token`` to ``HF_TOKEN``,
    then the token saved by ``hf auth login``. ``free_space`` and ``sleep`` are injectable so
    tests can fake a full disk and skip back-off waits.
    """

    def __init__(
        self,
        endpoint: str | None = None,
        token: str | None = None,
        *,
        models_dir: Path | str,
        downloads_dir: Path | str | None = None,
        free_space: FreeSpaceProbe | None = None,
        max_retries: int = 5,
        backoff_base_s: float = 0.5,
        backoff_max_s: float = 8.0,
        timeout_s: float = 30.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.endpoint = (endpoint or os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")
        self.token = token or os.environ.get("HF_TOKEN") or _stored_token()
        self.models_dir = Path(models_dir)
        self.downloads_dir = (
            Path(downloads_dir) if downloads_dir else self.models_dir / ".downloads"
        )
        self._free_space = free_space or (lambda p: shutil.disk_usage(p).free)
        self.max_retries = max_retries
        self.backoff_base_s = backoff_base_s
        self.backoff_max_s = backoff_max_s
        self.timeout_s = timeout_s
        self._sleep = sleep
        self._api = HfApi(endpoint=self.endpoint, library_name="hearth")
        self._active: set[Path] = set()
        self._active_lock = threading.Lock()

    # -- queries ----------------------------------------------------------------------------

    def search(self, query: str, limit: int = 50) -> list[RepoInfo]:
        """GGUF repos matching ``query``, most downloaded first."""
        if limit <= 0:
            return []

        params: dict[str, Any] = {"filter": "gguf", "sort": "downloads", "limit": limit,
                                  "expand": ["downloads", "likes", "lastModified", "tags"]}
        if query:
            params["search"] = query

        def call() -> list[RepoInfo]:
            # NOTE: the same request as HfApi.list_models (one page), on the client's session,
            # because list_models retries a failed connection five times with back-off of its
            # own: with no network a search took 23 s to fail. A search is interactive: one
            # retry after ``backoff_base_s``, then a clear "could not reach the Hub" (0.5 s).
            r = get_session().get(f"{self.endpoint}/api/models", params=params,
                                  headers=build_hf_headers(token=self._auth(), library_name="hearth"),
                                  timeout=self.timeout_s)
            hf_raise_for_status(r)
            models = [ModelInfo(**item) for item in r.json()]  # type: ignore[no-untyped-call]
            return [
                RepoInfo(m.id, m.downloads or 0, m.likes or 0, m.last_modified, tuple(m.tags or ()))
                for m in models
            ]

        return self._with_retries(call, what=f"search for {query!r}", max_retries=min(self.max_retries, 1))

    def list_files(self, repo_id: str) -> list[RemoteFile]:
        """The repo's GGUF files with size, LFS sha256 and the quantisation in the name."""
        return self._list_files(repo_id, None)

    def _list_files(self, repo_id: str, cancel: Cancel) -> list[RemoteFile]:
        repo_dirname(repo_id)  # refuse a bad id before any request
        info = self._model_info(repo_id, cancel)
        return [
            RemoteFile(
                repo_id=repo_id,
                filename=s.rfilename,
                size=s.lfs.size if s.lfs else s.size,
                sha256=s.lfs.sha256 if s.lfs else None,
                quant=quant_from_filename(s.rfilename),
                blob_id=s.blob_id,
            )
            for s in info.siblings or ()
            if s.rfilename.lower().endswith(".gguf")
        ]

    def installed_path(self, repo_id: str, filename: str) -> Path:
        """Where ``download`` puts the file (whether or not it is there yet)."""
        return self.models_dir / repo_dirname(repo_id) / check_filename(filename)

    def partial_path(self, repo_id: str, filename: str) -> Path:
        """``<owner>--<name>--<file>.part``, or a hash of them when that name (with its
        ``.json.tmp`` sidecar) would pass the 255 bytes a file name may have."""
        flat = str(check_filename(filename)).replace("/", "--")
        name = f"{repo_dirname(repo_id)}--{flat}.part"
        if len(name.encode()) + len(".json.tmp") > NAME_MAX:
            digest = hashlib.sha256(f"{repo_id}/{filename}".encode()).hexdigest()[:40]
            name = f"{digest}.part"
        return self.downloads_dir / name

    def list_partials(self) -> list[PartialDownload]:
        """Downloads that can be resumed (e.g. after an app restart), oldest first."""
        out: list[PartialDownload] = []
        if not self.downloads_dir.is_dir():
            return out
        for side in sorted(self.downloads_dir.glob("*.part.json"), key=mtime):
            meta = read_sidecar(side)
            part = side.with_suffix("")
            if meta is not None and part.is_file():
                out.append(self._partial(meta, part))
        return out

    def discard_partial(self, repo_id: str, filename: str) -> None:
        """Forget a paused download: delete its partial file and sidecar (idempotent)."""
        part = self.partial_path(repo_id, filename)
        with self._active_lock:
            if part in self._active:
                raise HubError(f"{filename} is still downloading; cancel it first", "busy")
        remove_files(part, sidecar_path(part))

    # -- download ---------------------------------------------------------------------------

    def download(
        self,
        repo_id: str,
        filename: str,
        progress: ProgressCallback | None = None,
        cancel: Cancel = None,
        *,
        keep_partial: bool = True,
    ) -> Path:
        """``download_checked`` without the verification flag."""
        return self.download_checked(repo_id, filename, progress, cancel, keep_partial=keep_partial).path

    def download_checked(
        self,
        repo_id: str,
        filename: str,
        progress: ProgressCallback | None = None,
        cancel: Cancel = None,
        *,
        keep_partial: bool = True,
    ) -> Downloaded:
        """Download one file into the library; its path, and whether it was verified (False
        when the Hub's listing has no checksum for it: then only its size was checked).

        Resumes from a partial left by an earlier call (also from another process), checks
        free space before fetching, verifies the sha256 before installing. ``cancel`` is polled
        between chunks; when it fires, ``HubError(kind="cancelled")`` is raised and the partial
        is kept (a pause) unless ``keep_partial`` is false.
        """
        try:
            return self._download_checked(repo_id, filename, progress, cancel, keep_partial)
        except OSError as e:  # a folder where the partial or the model goes, a name too long…
            raise HubError(f"cannot store {filename} from {repo_id}: {e.strerror or e}"
                           f"{f' ({e.filename})' if e.filename else ''}", "io") from e

    def _download_checked(self, repo_id: str, filename: str, progress: ProgressCallback | None,
                          cancel: Cancel, keep_partial: bool) -> Downloaded:
        dest = self.installed_path(repo_id, filename)
        part = self.partial_path(repo_id, filename)
        with self._active_lock:
            if part in self._active:
                raise HubError(f"{filename} from {repo_id} is already downloading", "busy")
            self._active.add(part)
        try:
            remote = self._remote_file(repo_id, filename, cancel)
            if not remote.is_verifiable:
                log.warning("%s in %s has no checksum on the Hub: it cannot be verified", filename, repo_id)
            if self._is_installed(remote, dest):
                log.info("%s already installed at %s", filename, dest)
                if progress is not None:
                    progress(remote.size or 0, remote.size or 0, 0.0)
                return Downloaded(dest, remote.is_verifiable)
            path = self._download(remote, part, dest, progress, cancel, keep_partial)
            return Downloaded(path, remote.is_verifiable)
        finally:
            with self._active_lock:
                self._active.discard(part)

    def _download(
        self,
        remote: RemoteFile,
        part: Path,
        dest: Path,
        progress: ProgressCallback | None,
        cancel: Cancel,
        keep_partial: bool,
    ) -> Path:
        if remote.size is None:
            raise HubError(f"the Hub did not report the size of {remote.filename}", "hub")
        self.downloads_dir.mkdir(parents=True, exist_ok=True)
        dest.parent.mkdir(parents=True, exist_ok=True)
        have = self._reuse_partial(remote, part)
        self._check_space(remote.size, have, dest.parent)

        url = hf_hub_url(remote.repo_id, remote.filename, endpoint=self.endpoint)
        meta = self._with_retries(
            lambda: self._api.get_hf_file_metadata(
                url=url, token=self._auth(), timeout=self.timeout_s
            ),
            what=f"{remote.filename} in {remote.repo_id}", cancel=cancel,
        )
        if meta.size is not None and meta.size != remote.size:
            raise HubError(f"{remote.filename}: the Hub reports two different sizes "
                           f"({meta.size} and {remote.size}); try again later", "hub")
        if meta.commit_hash:
            url = hf_hub_url(remote.repo_id, remote.filename, revision=meta.commit_hash,
                             endpoint=self.endpoint)
        write_sidecar(part, {**_sidecar_fields(remote), "etag": meta.etag,
                              "commit": meta.commit_hash})
        hasher = _new_hasher(remote)
        hash_prefix(part, have, hasher)
        try:
            hasher = self._transfer(url, part, remote, hasher, progress, cancel)
        except HubError as e:
            # A network failure or a pause keeps the partial for a later resume.
            if e.kind == "checksum_mismatch" or (e.kind == "cancelled" and not keep_partial):
                remove_files(part, sidecar_path(part))
            raise
        self._verify(remote, hasher, part)
        self._install(part, dest)
        log.info("downloaded %s/%s to %s", remote.repo_id, remote.filename, dest)
        return dest

    def _transfer(
        self,
        url: str,
        part: Path,
        remote: RemoteFile,
        hasher: Hasher,
        progress: ProgressCallback | None,
        cancel: Cancel,
    ) -> Hasher:
        """GET the rest of the file into ``part``; return the hasher that saw every byte.

        Each attempt asks for ``Range: bytes=<have>-``; a cut connection, a 5xx or a response
        that ends before the file does is retried with back-off. The count of failures restarts
        only when the partial grows past its largest size so far, and a download may fetch at
        most ``MAX_FETCH_FACTOR`` times the file's size in all.

        NOTE: a server answering every GET with a complete 200 a little short of the file (and
        ignoring Range) made this loop forever: 9,051 GETs and 2.4 GB for a 0.26 MB file in
        30 s, since a response that ended without an error did not count as a failure.
        """
        total = remote.size or 0
        meter = _Meter(progress, total)
        failures = 0
        budget = MAX_FETCH_FACTOR * total + MAX_FETCH_SLACK
        with part.open("ab") as f:
            done = high = f.tell()
            meter.report(done, force=True)
            while done < total:
                _raise_if_cancelled(cancel, remote)
                try:
                    done, hasher = self._fetch_once(url, f, done, remote, hasher, meter, cancel)
                    if done >= total:
                        break
                    err: object = f"the Hub's response ended {total - done:,} bytes before the end of the file"
                except (_httpx.TransportError, _Retryable) as e:
                    f.flush()
                    done = f.seek(0, os.SEEK_END)
                    err = e
                except _httpx.HTTPError as e:  # e.g. TooManyRedirects: retrying will not help
                    raise _request_error(e, f"{remote.filename} in {remote.repo_id}") from e
                failures = 1 if done > high else failures + 1
                high = max(high, done)
                if failures > self.max_retries or meter.received > budget:
                    raise HubError(
                        f"the download of {remote.filename} keeps failing ({err}); gave up after "
                        f"{failures} tries in a row. It is paused and will continue from where it "
                        "stopped", "network")
                self._backoff(failures, cancel)
            meter.report(done, force=True)
        return hasher

    def _fetch_once(
        self,
        url: str,
        f: BinaryIO,
        done: int,
        remote: RemoteFile,
        hasher: Hasher,
        meter: _Meter,
        cancel: Cancel,
    ) -> tuple[int, Hasher]:
        """One ranged GET, appended to ``f``; returns the new byte count and hasher."""
        headers = build_hf_headers(token=self._auth(), library_name="hearth")
        headers["Accept-Encoding"] = "identity"  # byte offsets must be file offsets
        if done:
            headers["Range"] = f"bytes={done}-"
        timeout = _httpx.Timeout(self.timeout_s)
        with get_session().stream("GET", url, headers=headers, timeout=timeout) as r:
            if r.status_code in _RETRY_STATUS:
                raise _Retryable(f"HTTP {r.status_code}")
            if r.status_code == 416:  # the partial is longer than the file
                raise HubError(f"{remote.filename}: the partial download does not match the "
                               "file on the Hub", "checksum_mismatch")
            self._raise_for_status(r, remote)
            if done and _range_start(r) != done:  # Range ignored: start over
                log.info("server ignored the Range request; restarting %s", remote.filename)
                f.seek(0)
                f.truncate()
                done, hasher = 0, _new_hasher(remote)
            for chunk in r.iter_bytes():  # as received: a cut loses nothing already read
                try:
                    f.write(chunk)
                except OSError as e:
                    raise _disk_error(e, remote) from e
                hasher.update(chunk)
                done += len(chunk)
                meter.received += len(chunk)
                meter.report(done)
                if _is_cancelled(cancel):
                    f.flush()
                    _raise_if_cancelled(cancel, remote)
        if done > (remote.size or 0):
            raise HubError(f"{remote.filename}: the Hub sent more bytes than announced",
                           "checksum_mismatch")
        return done, hasher

    def _raise_for_status(self, r: Any, remote: RemoteFile) -> None:
        if r.status_code < 400:
            return
        r.read()
        try:
            hf_raise_for_status(r)
        except HfHubHTTPError as e:
            what = f"{remote.filename} in {remote.repo_id}"
            raise _http_error(r.status_code, what, self.token is not None, e) from e

    def _verify(self, remote: RemoteFile, hasher: Hasher, part: Path) -> None:
        got = hasher.hexdigest()
        want = remote.sha256 or remote.blob_id
        if want and got != want.lower():
            remove_files(part, sidecar_path(part))
            algo = "SHA-256" if remote.sha256 else "git SHA-1"
            raise HubError(
                f"{remote.filename} from {remote.repo_id} failed verification: its {algo} is "
                f"{got[:16]}… but the Hub says {want[:16]}…; the download was deleted and "
                "nothing was installed", "checksum_mismatch")

    def _is_installed(self, remote: RemoteFile, dest: Path) -> bool:
        """``dest`` holds exactly the Hub's file: same size and the same checksum.

        NOTE: a size match alone used to count: a wrong file of the right size at the
        destination was returned as installed. A mismatch is downloaded again, and the
        verified download replaces it.
        """
        want = remote.sha256 or remote.blob_id
        try:
            if not dest.is_file() or remote.size is None or dest.stat().st_size != remote.size:
                return False
            if not want:
                return True  # the Hub gave nothing to check against; the size is all we have
            hasher = _new_hasher(remote)
            hash_file(dest, hasher, remote.size)
        except OSError as e:
            log.warning("cannot read %s (%s); downloading it again", dest, e)
            return False
        if hasher.hexdigest() == want.lower():
            return True
        log.warning("%s has the size of %s but not its checksum; downloading it again",
                       dest, remote.filename)
        return False

    def _install(self, part: Path, dest: Path) -> None:
        tmp = dest.with_name(dest.name + ".installing")
        try:
            os.replace(part, dest)
        except OSError:  # another filesystem: copy next to the target, then rename
            shutil.copyfile(part, tmp)
            os.replace(tmp, dest)
            part.unlink(missing_ok=True)
        sidecar_path(part).unlink(missing_ok=True)

    # -- helpers ----------------------------------------------------------------------------

    def _auth(self) -> str | bool:
        return self.token or False  # False: never fall back to an implicit token

    def _model_info(self, repo_id: str, cancel: Cancel) -> ModelInfo:
        return self._with_retries(
            lambda: self._api.model_info(repo_id, files_metadata=True, token=self._auth(),
                                         timeout=self.timeout_s),
            what=f"repository {repo_id}", cancel=cancel,
        )

    def _remote_file(self, repo_id: str, filename: str, cancel: Cancel) -> RemoteFile:
        check_filename(filename)
        for rf in self._list_files(repo_id, cancel):
            if rf.filename == filename:
                return rf
        raise HubError(f"{filename} was not found in {repo_id}", "not_found")

    def _reuse_partial(self, remote: RemoteFile, part: Path) -> int:
        """Bytes already fetched, if the partial belongs to this exact file; else start over."""
        meta = read_sidecar(sidecar_path(part))
        if not part.is_file():
            return 0
        fields = _sidecar_fields(remote)
        if meta is None or any(meta.get(k) != v for k, v in fields.items()):
            log.info("discarding a stale partial download %s", part)
            remove_files(part, sidecar_path(part))
            return 0
        have = part.stat().st_size
        if have > (remote.size or 0):
            remove_files(part, sidecar_path(part))
            return 0
        log.info("resuming %s at byte %d", remote.filename, have)
        return have

    def _check_space(self, size: int, have: int, install_dir: Path) -> None:
        need = size - have + SPACE_MARGIN_BYTES
        free = self._free_space(self.downloads_dir)
        if free < need:
            raise HubError(
                f"not enough disk space in {self.downloads_dir}: the download needs "
                f"{human_bytes(need)} and only {human_bytes(free)} is free", "insufficient_space")
        if device(install_dir) != device(self.downloads_dir):  # install will copy
            free = self._free_space(install_dir)
            if free < size + SPACE_MARGIN_BYTES:
                raise HubError(
                    f"not enough disk space in {install_dir}: the model needs "
                    f"{human_bytes(size)} and only {human_bytes(free)} is free", "insufficient_space")

    def _backoff(self, failures: int, cancel: Cancel) -> None:
        delay = min(self.backoff_max_s, self.backoff_base_s * 2 ** (failures - 1))
        log.info("network error; retry %d/%d in %.2fs", failures, self.max_retries, delay)
        left = delay
        while left > 0:  # in slices, so a cancel during the wait is seen promptly
            if _is_cancelled(cancel):
                return
            step = min(left, 0.1)
            self._sleep(step)
            left -= step

    def _with_retries(
        self, fn: Callable[[], T], *, what: str, max_retries: int | None = None, cancel: Cancel = None
    ) -> T:
        """Call ``fn``; retry network errors and 5xx with back-off; map HTTP errors."""
        retries = self.max_retries if max_retries is None else max_retries
        failures = 0
        while True:
            try:
                return fn()
            except HfHubHTTPError as e:
                status = e.response.status_code if e.response is not None else None
                if status not in _RETRY_STATUS:
                    raise _http_error(status, what, self.token is not None, e) from e
                err: Exception = e
            except _httpx.TransportError as e:
                err = e
            except _httpx.HTTPError as e:
                raise _request_error(e, what) from e
            except (ValueError, KeyError, TypeError) as e:  # HTML, or JSON of another shape
                raise HubError(f"the Hub's answer about {what} could not be read (it is not the "
                               f"Hub's API: is {self.endpoint} a Hugging Face Hub?): {e}", "hub") from e
            failures += 1
            if failures > retries:
                raise HubError(f"could not reach the Hub at {self.endpoint} ({what}): {err}",
                               "network") from err
            self._backoff(failures, cancel)
            if _is_cancelled(cancel):
                raise HubError(f"cancelled while waiting for the Hub ({what})", "cancelled")

    def _partial(self, meta: dict[str, Any], part: Path) -> PartialDownload:
        return PartialDownload(meta["repo_id"], meta["filename"], meta.get("sha256"),
                               int(meta.get("size") or 0), meta.get("etag"),
                               part.stat().st_size, part)


class _Retryable(Exception):
    """A response status worth retrying (5xx, 429, 408)."""


class _Meter:
    """Calls ``progress(done, total, bytes_per_s)`` at most every 0.1 s (and at the ends)."""

    def __init__(self, progress: ProgressCallback | None, total: int) -> None:
        self.progress = progress
        self.total = total
        self.last_t = time.monotonic()
        self.last_done: int | None = None
        self.rate = 0.0
        self.received = 0  # body bytes of every response so far (restarts included)

    def report(self, done: int, force: bool = False) -> None:
        if self.progress is None:
            return
        now = time.monotonic()
        if self.last_done is None:
            self.last_done, self.last_t = done, now
            self.progress(done, self.total, 0.0)
            return
        dt = now - self.last_t
        if not force and dt < _PROGRESS_INTERVAL_S:
            return
        if dt > 0:
            inst = (done - self.last_done) / dt
            self.rate = inst if self.rate == 0.0 else 0.7 * self.rate + 0.3 * inst
        self.last_done, self.last_t = done, now
        self.progress(done, self.total, self.rate)


def _new_hasher(remote: RemoteFile) -> Hasher:
    """sha256 for LFS files (checked against the LFS oid), else git's blob sha1."""
    return hashlib.sha256() if remote.sha256 else GitBlobHasher(remote.size or 0)


def _sidecar_fields(remote: RemoteFile) -> dict[str, Any]:
    return {"repo_id": remote.repo_id, "filename": remote.filename,
            "sha256": remote.sha256, "size": remote.size}


def _range_start(r: Any) -> int:
    """Where a response body starts in the file: 0 for a 200, from Content-Range for a 206."""
    if r.status_code != 206:
        return 0
    m = re.match(r"bytes (\d+)-", r.headers.get("Content-Range", ""))
    return int(m[1]) if m else -1


def _raise_if_cancelled(cancel: Cancel, remote: RemoteFile) -> None:
    if _is_cancelled(cancel):
        raise HubError(f"download of {remote.filename} cancelled", "cancelled")


def _disk_error(e: OSError, remote: RemoteFile) -> HubError:
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        return HubError(f"the disk filled up while downloading {remote.filename}; free some "
                        "space and resume", "insufficient_space")
    return HubError(f"cannot write the download of {remote.filename}: {e.strerror or e}", "io")


def _request_error(e: Exception, what: str) -> HubError:
    if isinstance(e, _httpx.TooManyRedirects):
        return HubError(f"the Hub redirected the request for {what} in a loop; try again later", "hub")
    return HubError(f"the request for {what} failed: {e}", "hub")


def _http_error(status: int | None, what: str, has_token: bool | None, e: Exception) -> HubError:
    server_msg = getattr(e, "server_message", None) or ""
    if status == 404:
        return HubError(f"not found: {what} does not exist on the Hub", "not_found")
    if status == 401:
        if has_token is False or (has_token is None and "Invalid credentials" not in server_msg):
            return HubError(
                f"authentication required: {what} is private or gated (or does not exist); "
                "set a Hugging Face token (HF_TOKEN) that can access it", "unauthorized")
        return HubError(f"token rejected: the Hub refused the token for {what}; "
                        "check HF_TOKEN", "unauthorized")
    if status == 403:
        return HubError(f"access denied to {what}: the token lacks permission, or the repo is "
                        "gated and its terms must be accepted on the Hub", "unauthorized")
    return HubError(f"the Hub returned an error for {what}: {e}", "hub")


def _stored_token() -> str | None:
    """The token saved by ``hf auth login`` (HF_TOKEN is read before this)."""
    try:
        return huggingface_hub.get_token()
    except Exception:  # noqa: BLE001 - a broken token store must not stop the app
        log.debug("no stored Hugging Face token", exc_info=True)
        return None


__all__ = ["Downloaded", "HubClient", "HubError", "PartialDownload", "RemoteFile", "RepoInfo"]
