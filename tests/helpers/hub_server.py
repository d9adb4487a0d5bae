"""A local Hugging Face Hub look-alike for tests: the endpoints ``huggingface_hub`` calls.

Point the real client at it (``HfApi(endpoint=server.endpoint)`` or ``HF_ENDPOINT``)::

    with HubServer() as hub:
        hub.add_repo("acme/tiny-GGUF", {"tiny-Q4_K_M.gguf": make_gguf_bytes()})
        hub.set_fault("acme/tiny-GGUF", "tiny-Q4_K_M.gguf", drop_after=10_000)

Endpoints (what ``HfApi.list_models``, ``HfApi.model_info(files_metadata=True)``,
``get_hf_file_metadata`` and a ranged GET of ``hf_hub_url`` send):

    GET  /api/models?search=&filter=&sort=&limit=&expand=      JSON list of repos
    GET  /api/models/{repo}[/revision/{rev}][?blobs=true]       repo info with ``siblings``
    HEAD /{repo}/resolve/{rev}/{path}                           ETag, X-Repo-Commit, X-Linked-*
    GET  /{repo}/resolve/{rev}/{path}        with Range → 206 + Content-Range

Faults, per file: ``drop_after`` (the first GET sends that many bytes, then the connection is
cut; later GETs are served normally), ``corrupt`` (other bytes than the advertised sha256),
``missing`` (404 EntryNotFound from resolve although the file is listed), ``chunk_delay``
(seconds to sleep per ``chunk_size`` bytes: a slow link), ``fail_first`` (503 to the first N
GETs), ``ignore_range`` (200 with the whole file to a ranged GET), ``redirect`` (302 to a
``/cdn/`` URL, as the Hub does for LFS files), ``redirect_loop`` (resolve redirects to itself), ``listed_checksum=False`` (the listing has no
sha256 and no blobId: nothing to verify against), ``short_by`` (every GET gets a well-formed
200 that is that many bytes short of the file, whatever its Range). ``lfs=False`` serves a
plain-git file (no LFS sha256; the client checks the git blob sha1). Per repo: ``private`` (401 unless the request
carries ``Authorization: Bearer <token>``), ``html_info`` (the repo's info is an HTML page).
Every request is logged in
``server.requests`` and body bytes served per file in ``server.bytes_served``.
"""

from __future__ import annotations

import hashlib
import json
import re
import socket
import tempfile
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import gguf
import numpy as np

DEFAULT_TOKEN = "hf_test_token"


def make_gguf_bytes(
    *,
    arch: str = "llama",
    n_floats: int = 64 * 1024,
    file_type: gguf.LlamaFileType = gguf.LlamaFileType.MOSTLY_Q4_K_M,
    name: str = "hub-test-model",
    seed: int = 0,
    context_length: int = 2048,
) -> bytes:
    """A small valid GGUF: a few metadata keys and one f32 tensor of ``n_floats`` values.

    The default is ~256 KiB: big enough for several progress callbacks and a mid-file drop,
    small enough to be instant. ``seed`` changes the bytes (and so the sha256).
    """
    rng = np.random.default_rng(seed)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "m.gguf"
        w = gguf.GGUFWriter(path, arch)
        w.add_name(name)
        w.add_type("model")
        w.add_context_length(context_length)
        w.add_embedding_length(64)
        w.add_block_count(1)
        w.add_head_count(4)
        w.add_head_count_kv(2)
        w.add_file_type(file_type)
        w.add_tensor("token_embd.weight", rng.standard_normal(n_floats).astype(np.float32))
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        return path.read_bytes()


@dataclass
class HubFile:
    content: bytes
    lfs: bool = True
    drop_after: int | None = None  # cut the first GET after this many body bytes
    corrupt: bool = False
    missing: bool = False
    chunk_delay: float = 0.0
    chunk_size: int = 16 * 1024
    fail_first: int = 0  # answer this many GETs with 503 first (a flaky CDN)
    ignore_range: bool = False  # answer ranged GETs with the whole file (200)
    redirect: bool = False  # resolve answers 302 to /cdn/… (as the Hub does for LFS files)
    listed_checksum: bool = True  # False: the listing gives neither an LFS sha256 nor a blobId
    short_by: int = 0  # every GET: a complete 200 (Range ignored) that is this many bytes short
    redirect_loop: bool = False  # resolve answers 302 to itself, forever
    num_drops: int = 0  # how many times the connection was cut

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.content).hexdigest()

    @property
    def git_sha1(self) -> str:
        return hashlib.sha1(b"blob %d\0" % len(self.content) + self.content).hexdigest()

    def served_bytes(self) -> bytes:
        if not self.corrupt:
            return self.content
        return bytes(b ^ 0xFF for b in self.content[:64]) + self.content[64:]


@dataclass
class HubRepo:
    repo_id: str
    files: dict[str, HubFile] = field(default_factory=dict)
    downloads: int = 0
    likes: int = 0
    last_modified: str = "2025-01-15T10:00:00.000Z"
    tags: tuple[str, ...] = ("gguf",)
    private: bool = False
    commit: str = ""
    html_info: bool = False  # the repo's info answers an HTML page (a proxy's or a captive portal's)

    def __post_init__(self) -> None:
        if not self.commit:
            self.commit = hashlib.sha1(self.repo_id.encode()).hexdigest()


@dataclass
class LoggedRequest:
    method: str
    path: str
    query: str
    range: str | None
    authorization: str | None
    num_body_bytes: int = 0  # file bytes written for this request


class HubServer:
    """The server; a context manager. ``endpoint`` is ``http://127.0.0.1:<port>``."""

    def __init__(self, token: str = DEFAULT_TOKEN) -> None:
        self.token = token
        self.repos: dict[str, HubRepo] = {}
        self.requests: list[LoggedRequest] = []
        self.bytes_served: dict[tuple[str, str], int] = defaultdict(int)
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- content ------------------------------------------------------------------------

    def add_repo(self, repo_id: str, files: dict[str, bytes] | None = None, **kw: Any) -> HubRepo:
        repo = HubRepo(repo_id, **kw)
        for name, content in (files or {}).items():
            repo.files[name] = HubFile(content, lfs=name.endswith(".gguf"))
        with self._lock:
            self.repos[repo_id] = repo
        return repo

    def add_file(self, repo_id: str, filename: str, content: bytes, **faults: Any) -> HubFile:
        f = HubFile(content, **faults)
        with self._lock:
            self.repos[repo_id].files[filename] = f
        return f

    def set_fault(self, repo_id: str, filename: str, **faults: Any) -> HubFile:
        f = self.repos[repo_id].files[filename]
        for k, v in faults.items():
            if not hasattr(f, k):
                raise AttributeError(f"unknown fault {k!r}")
            setattr(f, k, v)
        return f

    def file_requests(
        self, repo_id: str, filename: str, method: str | None = None
    ) -> list[LoggedRequest]:
        """Requests that hit ``/{repo}/resolve/*/{filename}`` (or its CDN redirect target)."""
        repo, cdn_repo = re.escape(repo_id), re.escape(repo_id.replace("/", "--"))
        pat = re.compile(
            rf"^/({repo}/resolve|cdn/{cdn_repo})/[^/]+/{re.escape(filename)}$"
        )
        with self._lock:
            return [r for r in self.requests
                    if pat.match(r.path) and (method is None or r.method == method)]

    # -- lifecycle ----------------------------------------------------------------------

    @property
    def endpoint(self) -> str:
        assert self._httpd is not None, "server not started"
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> HubServer:
        handler = type("Handler", (_Handler,), {"hub": self})
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
            name="hub-server", daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> HubServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- request helpers used by the handler ----------------------------------------------

    def _log(self, req: LoggedRequest) -> None:
        with self._lock:
            self.requests.append(req)

    def _count(self, key: tuple[str, str], n: int) -> None:
        with self._lock:
            self.bytes_served[key] += n

    def _find_repo(self, path_parts: list[str]) -> tuple[HubRepo | None, list[str]]:
        """Repos are ``owner/name``; fall back to a single-segment id."""
        with self._lock:
            for n in (2, 1):
                rid = "/".join(path_parts[:n])
                if rid in self.repos:
                    return self.repos[rid], path_parts[n:]
        return None, path_parts


_RESOLVE_RE = re.compile(r"^/(?P<repo>.+?)/resolve/(?P<rev>[^/]+)/(?P<file>.+)$")
_CDN_RE = re.compile(r"^/cdn/(?P<repo>[^/]+)/(?P<rev>[^/]+)/(?P<file>.+)$")  # repo: owner--name
_RANGE_RE = re.compile(r"^bytes=(\d*)-(\d*)$")


class _Handler(BaseHTTPRequestHandler):
    hub: HubServer
    logged: LoggedRequest
    protocol_version = "HTTP/1.1"
    timeout = 10  # idle keep-alive connections give up

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass  # the test log is ``hub.requests``

    # -- dispatch -------------------------------------------------------------------------

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_HEAD(self) -> None:
        self._dispatch("HEAD")

    def _dispatch(self, method: str) -> None:
        url = urlsplit(self.path)
        path = unquote(url.path)
        self.logged = LoggedRequest(method, path, url.query, self.headers.get("Range"),
                                    self.headers.get("Authorization"))
        self.hub._log(self.logged)
        query = parse_qs(url.query)
        try:
            if path == "/api/models":
                self._search(query)
            elif path.startswith("/api/models/"):
                self._model_info(path.removeprefix("/api/models/"), query)
            elif m := _CDN_RE.match(path):
                self._resolve(method, m["repo"].replace("--", "/"), m["rev"], m["file"], cdn=True)
            elif m := _RESOLVE_RE.match(path):
                self._resolve(method, m["repo"], m["rev"], m["file"])
            else:
                self._error(404, "Not Found", code=None)
        except (BrokenPipeError, ConnectionResetError, TimeoutError):
            self.close_connection = True  # the client went away (pause/cancel) or stalled

    # -- responses ------------------------------------------------------------------------

    def _send_json(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _error(self, status: int, message: str, code: str | None) -> None:
        headers = {"X-Error-Message": message}
        if code:
            headers["X-Error-Code"] = code
        self._send_json(status, {"error": message}, headers)

    def _authorized(self, repo: HubRepo) -> bool:
        if not repo.private:
            return True
        auth = self.headers.get("Authorization", "")
        if auth == f"Bearer {self.hub.token}":
            return True
        if auth:
            self._error(401, "Invalid credentials in Authorization header", code=None)
        else:
            self._error(401, "Repository not found", code="RepoNotFound")
        return False

    # -- /api/models ---------------------------------------------------------------------

    def _repo_json(self, repo: HubRepo, keys: list[str] | None) -> dict[str, Any]:
        full = {
            "_id": repo.commit[:24], "id": repo.repo_id, "modelId": repo.repo_id,
            "author": repo.repo_id.split("/")[0], "downloads": repo.downloads,
            "likes": repo.likes, "lastModified": repo.last_modified,
            "createdAt": repo.last_modified, "tags": list(repo.tags),
            "private": repo.private, "library_name": "gguf", "sha": repo.commit,
        }
        if keys is None:
            return full
        return {"_id": full["_id"], "id": full["id"], **{k: full[k] for k in keys if k in full}}

    def _search(self, query: dict[str, list[str]]) -> None:
        text = (query.get("search") or [""])[0].lower()
        filters = query.get("filter", [])
        with self.hub._lock:
            repos = [r for r in self.hub.repos.values()
                     if not r.private and text in r.repo_id.lower()
                     and all(f in r.tags for f in filters)]
        sort = (query.get("sort") or [None])[0]
        if sort in ("downloads", "likes"):
            repos.sort(key=lambda r: getattr(r, sort), reverse=True)
        elif sort == "lastModified":
            repos.sort(key=lambda r: r.last_modified, reverse=True)
        if limit := (query.get("limit") or [None])[0]:
            repos = repos[: int(limit)]
        expand = query.get("expand")
        self._send_json(200, [self._repo_json(r, expand) for r in repos])

    def _model_info(self, rest: str, query: dict[str, list[str]]) -> None:
        parts = rest.split("/")
        repo, tail = self.hub._find_repo(parts)
        if repo is None:
            self._error(404, "Repository not found", code="RepoNotFound")
            return
        if not self._authorized(repo):
            return
        if repo.html_info:
            page = b"<!doctype html><html><body>Please sign in to the network</body></html>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(page)))
            self.end_headers()
            self.wfile.write(page)
            return
        if tail and not (len(tail) == 2 and tail[0] == "revision"
                         and tail[1] in ("main", repo.commit)):
            self._error(404, "Revision not found", code="RevisionNotFound")
            return
        blobs = (query.get("blobs") or ["false"])[0].lower() == "true"
        siblings = []
        for name, f in sorted(repo.files.items()):
            s: dict[str, Any] = {"rfilename": name}
            if blobs:
                s["size"] = len(f.content)
                if f.listed_checksum:
                    s["blobId"] = f.git_sha1
                if f.lfs and f.listed_checksum:
                    s["lfs"] = {"size": len(f.content), "sha256": f.sha256, "pointerSize": 134}
            siblings.append(s)
        body = self._repo_json(repo, None)
        body["siblings"] = siblings
        self._send_json(200, body)

    # -- /{repo}/resolve/{rev}/{file} ----------------------------------------------------

    def _resolve(
        self, method: str, repo_id: str, rev: str, filename: str, cdn: bool = False
    ) -> None:
        with self.hub._lock:
            repo = self.hub.repos.get(repo_id)
        if repo is None:
            self._error(404, "Repository not found", code="RepoNotFound")
            return
        if not cdn and not self._authorized(repo):
            return
        if rev not in ("main", repo.commit):
            self._error(404, "Revision not found", code="RevisionNotFound")
            return
        f = repo.files.get(filename)
        if f is None or f.missing:
            self._error(404, "Entry not found", code="EntryNotFound")
            return
        if f.redirect_loop:
            self.send_response(302)
            self.send_header("Location", self.path)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if f.redirect and f.lfs and not cdn:
            self._redirect_to_cdn(repo, filename, f)
            return
        if method == "GET" and f.fail_first > 0:
            f.fail_first -= 1
            self._error(503, "Service Unavailable", code=None)
            return
        body = f.served_bytes()
        total = len(body)
        if f.short_by and method == "GET":
            body = body[: max(total - f.short_by, 0)]
            total = len(body)
        etag = f'"{f.sha256 if f.lfs else f.git_sha1}"'
        start, end = 0, total - 1
        status = 200
        rng = None if f.ignore_range or f.short_by else self.headers.get("Range")
        if rng and method == "GET":
            m = _RANGE_RE.match(rng.strip())
            if not m or (not m[1] and not m[2]):
                self._error(400, "Malformed Range", code=None)
                return
            if m[1]:
                start = int(m[1])
                end = min(int(m[2]), total - 1) if m[2] else total - 1
            else:  # suffix range: the last N bytes
                start = max(0, total - int(m[2]))
            if start >= total or start > end:
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{total}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            status = 206
        length = end - start + 1
        self.send_response(status)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(length))
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("ETag", etag)
        self.send_header("X-Repo-Commit", repo.commit)
        if f.lfs:
            self.send_header("X-Linked-Etag", etag)
            self.send_header("X-Linked-Size", str(total))
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{end}/{total}")
        self.end_headers()
        if method == "HEAD":
            return
        self._stream(repo_id, filename, f, memoryview(body)[start : end + 1])

    def _redirect_to_cdn(self, repo: HubRepo, filename: str, f: HubFile) -> None:
        etag = f'"{f.sha256}"'
        self.send_response(302)
        cdn_repo = repo.repo_id.replace("/", "--")
        self.send_header("Location", f"{self.hub.endpoint}/cdn/{cdn_repo}/{repo.commit}/{filename}")
        self.send_header("X-Repo-Commit", repo.commit)
        self.send_header("X-Linked-Etag", etag)
        self.send_header("X-Linked-Size", str(len(f.content)))
        self.send_header("ETag", f'"{f.git_sha1}"')  # the pointer's etag, as on the Hub
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _stream(self, repo_id: str, filename: str, f: HubFile, data: memoryview) -> None:
        drop_at = None
        if f.drop_after is not None and f.num_drops == 0:
            drop_at = f.drop_after
        sent = 0
        while sent < len(data):
            n = f.chunk_size
            if drop_at is not None:
                n = min(n, drop_at - sent)
                if n <= 0:
                    f.num_drops += 1
                    self.wfile.flush()
                    # Cut the TCP connection mid-body: the client sees a short read.
                    self.connection.shutdown(socket.SHUT_RDWR)
                    self.close_connection = True
                    return
            chunk = data[sent : sent + n]
            self.wfile.write(chunk)
            self.hub._count((repo_id, filename), len(chunk))
            self.logged.num_body_bytes += len(chunk)
            sent += len(chunk)
            if f.chunk_delay:
                self.wfile.flush()
                time.sleep(f.chunk_delay)
