"""Issue 26's hostile trials for docs/reliability.md: grammars, web pages, bad bodies and
connection floods against ``hearth serve``, damaged bytes in the cache database, chunk files
deleted under the cache, and Hub servers that misbehave.

Each reuses the regression tests' cases (``tests/property/test_grammars.py``,
``tests/integration/server/test_hostile_requests.py``, ``tests/unit/cache/test_db_damage.py``)
on real parts: llama.cpp in a child process, a real ``hearth serve``, real SQLite files, the
real huggingface_hub client against the local Hub server.
"""

from __future__ import annotations

import json
import random
import shutil
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from tools.reliability_trials import Trial


def hostile_grammars(scratch: Path, examples: int = 300) -> Trial:
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from tests.helpers.tiny_model import ASSETS_DIR, ensure_tiny_model
    from tests.property.test_grammars import Worker, _schemas, grammars

    t = Trial("hostile grammars and JSON schemas (Hypothesis-drawn GBNF, the issue's crashers)",
              "refused with invalid_request before llama.cpp sees it, or a normal reply; the process "
              "running llama.cpp never dies (before: SIGABRT on `root ::= [b-a]`)")
    worker = Worker(ensure_tiny_model(ASSETS_DIR), scratch / "data")
    outcomes: dict[str, int] = {}

    def ask(request: dict[str, Any]) -> None:
        t.trials += 1
        try:
            answer = worker.ask(request)
        except AssertionError as exc:  # the process died or hung
            t.fail(f"{exc}"[:200])
            return
        outcomes[answer["outcome"]] = outcomes.get(answer["outcome"], 0) + 1
        if answer["outcome"] == "refused" and answer.get("by") == "engine" and answer["code"] != "invalid_request":
            t.fail(f"{request!r:.120}: {answer['code']}")
        elif answer["outcome"] not in ("refused", "ran"):
            t.fail(f"{request!r:.120}: {answer}")

    common = settings(max_examples=examples, deadline=None, database=None, derandomize=True,
                      suppress_health_check=list(HealthCheck))

    @common
    @given(grammars, st.integers(0, 2**32 - 1), st.booleans())
    def gbnf(text: str, seed: int, hot: bool) -> None:
        ask({"gbnf": text, "seed": seed, "temperature": 1.5 if hot else 0.0})

    @common
    @given(_schemas(2), st.integers(0, 2**32 - 1))
    def schemas(schema: dict[str, Any], seed: int) -> None:
        ask({"schema": schema, "seed": seed, "temperature": 1.0})

    try:
        gbnf()
        schemas()
    finally:
        worker.close()
    t.notes.append(f"{examples} grammars + {examples} schemas (derandomized), sampled greedy and at "
                   f"temperature 1.5; outcomes {outcomes}")
    return t


def _serve(scratch: Path, *extra: str, fd_limit: int | None = None) -> Any:
    from tests.helpers.tiny_model import ASSETS_DIR, ensure_tiny_model
    from tests.integration.server.conftest import start_server
    from tests.integration.server.test_hostile_requests import _serve_with_fd_limit

    model = ensure_tiny_model(ASSETS_DIR)
    if fd_limit is not None:
        return _serve_with_fd_limit(model, scratch, fd_limit)
    return start_server(model, scratch, "--ctx", "1024", *extra)


def web_page_requests(scratch: Path) -> Trial:
    from tests.integration.server.test_hostile_requests import (
        CHAT,
        SIMPLE_BODIES,
        _engine_work,
        _post,
    )

    t = Trial("requests a web page can send to the keyless server (text/plain and form POSTs, any Origin)",
              "403 (an Origin not allowed) or 415 (not JSON) before anything runs; nothing generated")
    server = _serve(scratch)
    try:
        before = _engine_work(server)
        model = json.dumps(server.model_id).encode()
        for path in ("/v1/chat/completions", "/v1/completions", "/v1/embeddings"):
            for content_type, body in [*SIMPLE_BODIES, ("application/json", CHAT)]:
                for origin in ("https://evil.example", "null", None):
                    if origin is None and content_type == "application/json":
                        continue  # a non-browser JSON client: served, as it should be
                    headers = {"Content-Type": content_type, **({"Origin": origin} if origin else {})}
                    status, _ = _post(server, path, body.replace(b'"m"', model), headers)
                    t.trials += 1
                    if status not in (403, 415):
                        t.fail(f"{path} {content_type} from {origin}: {status}")
        if _engine_work(server) != before:
            t.fail("the engine generated tokens or a request began")
    finally:
        server.stop()
    return t


def bad_bodies(scratch: Path) -> Trial:
    from tests.integration.server.test_hostile_requests import BAD_BODIES, _post

    t = Trial("bad request bodies (lone surrogates in every field, token ids out of range, 100,000 nested "
              "arrays, a 6 MB message, Content-Length: abc)",
              "a 4xx in OpenAI's error shape, never a 500; the server keeps serving")
    server = _serve(scratch)
    try:
        model = json.dumps(server.model_id).encode()
        for case, path, body in BAD_BODIES:
            data = (body if isinstance(body, bytes) else json.dumps(body).encode()).replace(b'"M"', model)
            status, reply = _post(server, path, data, {"Content-Type": "application/json"})
            t.trials += 1
            if status not in (400, 404, 413) or set(reply.get("error", {})) != {"message", "type", "param", "code"}:
                t.fail(f"{case}: {status} {str(reply)[:120]}")
        t.trials += 1
        if not _bad_content_length_is_json(server.base_url):
            t.fail("Content-Length: abc: not a JSON 400")
        if server.proc.poll() is not None:
            t.fail("the server died")
    finally:
        log = server.stop()
    if "Traceback" in log:
        t.fail("a traceback in the server's log")
    return t


def _bad_content_length_is_json(base_url: str) -> bool:
    from tests.integration.server.test_hostile_requests import post_with_content_length_abc

    head, body = post_with_content_length_abc(base_url)
    try:
        return head.startswith(b"HTTP/1.1 400") and "error" in json.loads(body)
    except ValueError:
        return False


def connection_flood(scratch: Path, n: int = 1100) -> Trial:
    from tests.integration.server.test_hostile_requests import CHAT, _post

    t = Trial(f"{n:,} connections that never finish their headers, at ulimit -n 1024",
              "other clients are still served while they are held; the log stays small")
    server = _serve(scratch, fd_limit=1024)
    url = urlsplit(server.base_url)
    held: list[socket.socket] = []
    try:
        for _ in range(n):
            s = socket.create_connection((url.hostname or "", url.port or 0), timeout=10)
            s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: app")
            held.append(s)
        for _ in range(5):
            t.trials += 1
            body = CHAT.replace(b'"m"', json.dumps(server.model_id).encode())
            status, _ = _post(server, "/v1/chat/completions", body, {"Content-Type": "application/json"})
            if status != 200:
                t.fail(f"a client was refused ({status}) while the connections were held")
    except (OSError, urllib.error.URLError) as exc:
        t.fail(f"{type(exc).__name__}: {exc}")
    finally:
        for s in held:
            s.close()
        server.stop()
    size = server.log_path.stat().st_size if server.log_path else 0
    t.notes.append(f"the server's log: {size:,} bytes")
    if size > 256 * 1024:
        t.fail(f"the log grew by {size:,} bytes")
    return t


def database_bytes(scratch: Path) -> Trial:
    from app.cache.store import DB_NAME, CacheStore
    from tests.helpers.kv_states import state_for
    from tests.unit.cache.conftest import META, payload_for
    from tests.unit.cache.test_db_damage import (
        CHUNKED,
        WHOLE,
        _check_serves_only_its_own,
        _damage,
        _positions,
    )

    t = Trial("one damaged byte in kvcache.sqlite, at each of ~300 positions (spread, and inside keys, "
              "fingerprints and token lists)",
              "the cache opens; every row served restores its own KV; damaged rows dropped and their files "
              "registered again (before: `ValueError: non-hexadecimal number` on every start)")
    pristine = scratch / "pristine"
    store = CacheStore(pristine / "data", ram_file_dir=pristine / "shm", chunk_tokens=4)
    for tokens in CHUNKED:
        store.submit_save(model_id="m", meta=META, tokens=tokens, payload=state_for(tokens), reason="finish",
                          tier="disk")
    for tokens in WHOLE:
        store.submit_save(model_id="m", meta=META, tokens=tokens, payload=payload_for(tokens), reason="finish",
                          tier="disk")
    store.flush(10)
    rows = {r.key: list(r.tokens) for r in store.rows()}
    store.close()
    original = (pristine / "data" / DB_NAME).read_bytes()
    rng = random.Random(2026)
    counted: dict[str, int] = {}
    for pos in _positions(original, rows):
        case = scratch / f"case{pos}"
        shutil.copytree(pristine / "data", case / "data")
        data = bytearray(original)
        _damage(data, pos, rng)
        (case / "data" / DB_NAME).write_bytes(bytes(data))
        t.trials += 1
        try:
            store = CacheStore(case / "data", ram_file_dir=case / "shm", chunk_tokens=4)
        except Exception as exc:  # noqa: BLE001 — the failure being counted
            t.fail(f"byte {pos}: {type(exc).__name__}: {exc}"[:200])
            continue
        try:
            _check_serves_only_its_own(store, rows)
            if {r.key for r in store.rows()} != set(rows):
                t.fail(f"byte {pos}: rows lost")
            for name in ("rows_dropped_damaged", "chunks_dropped_damaged", "rows_reregistered"):
                counted[name] = counted.get(name, 0) + (store.counters().get(name, 0) > 0)
        except AssertionError as exc:
            t.fail(f"byte {pos}: {exc}"[:200])
        finally:
            store.close()
        shutil.rmtree(case)
    t.notes.append(f"positions where rows were dropped as damaged / chunks dropped / rows re-registered: "
                   f"{counted.get('rows_dropped_damaged', 0)} / {counted.get('chunks_dropped_damaged', 0)} / "
                   f"{counted.get('rows_reregistered', 0)}")
    return t


def deleted_chunk_files(scratch: Path) -> Trial:
    from app.cache.store import CacheStore
    from tests.unit.cache.test_db_damage import CHUNKED, _save_chunked

    t = Trial("chunk files deleted under the cache (at rest, and while it runs)",
              "rows with nothing left to restore are dropped at start-up and by verify; none is listed "
              "while restoring cold")
    for when in ("at rest", "while running"):
        d = scratch / when.replace(" ", "-")
        store = CacheStore(d / "data", ram_file_dir=d / "shm", chunk_tokens=4)
        for tokens in CHUNKED[:2]:
            _save_chunked(store, tokens)
        if when == "at rest":
            store.close()
        for chunk in (d / "data" / "kv").glob("*.kvch"):
            chunk.unlink()
        if when == "at rest":
            store = CacheStore(d / "data", ram_file_dir=d / "shm", chunk_tokens=4)
        else:
            store.verify()
        t.trials += 1
        if store.rows():
            t.fail(f"{when}: {len(store.rows())} rows still listed")
        store.close()
    return t


def hub_faults(scratch: Path) -> Trial:
    from app.models.hub import HubClient, HubError
    from tests.helpers.hub_server import HubServer, make_gguf_bytes

    t = Trial("a Hub that misbehaves: every GET 1,000 bytes short, a redirect loop, HTML for JSON, names "
              "too long for the file system, a folder at the partial path, no checksum in the listing",
              "a HubError naming the problem, after a bounded number of requests; an unverifiable file is "
              "reported as not verified")
    repo, name = "acme/Tiny-GGUF", "tiny-Q4_K_M.gguf"
    content = make_gguf_bytes(seed=1)
    with HubServer() as hub:
        hub.add_repo(repo, {name: content})
        hub.add_repo("o" * 90 + "/" + "n" * 90, {"m" * 60 + "-Q4_K_M.gguf": content})

        def client(tag: str) -> HubClient:
            return HubClient(endpoint=hub.endpoint, token=None, models_dir=scratch / tag / "models",
                             downloads_dir=scratch / tag / "partial", backoff_base_s=0.01, backoff_max_s=0.05)

        def expect(tag: str, call: Callable[[HubClient], Any], kind: str, setup: Callable[[], None]) -> None:
            t.trials += 1
            setup()
            c = client(tag)
            try:
                call(c)
                t.fail(f"{tag}: no error")
            except HubError as exc:
                if exc.kind != kind:
                    t.fail(f"{tag}: HubError({exc.kind}), expected {kind}")
            except Exception as exc:  # noqa: BLE001 — the failure being counted
                t.fail(f"{tag}: raw {type(exc).__name__}: {exc}"[:200])

        def fault(**kw: Any) -> Callable[[], None]:
            return lambda: hub.set_fault(repo, name, **kw)

        t0 = time.monotonic()
        expect("short", lambda c: c.download(repo, name), "network", fault(short_by=1000))
        gets = len(hub.file_requests(repo, name, "GET"))
        t.notes.append(f"every GET 1,000 bytes short: gave up after {gets} GETs in {time.monotonic() - t0:.1f} s")
        expect("redirect loop", lambda c: c.download(repo, name), "hub", fault(short_by=0, redirect_loop=True))
        expect("long name", lambda c: c.download(repo, "x" * 251 + ".gguf"), "invalid", fault(redirect_loop=False))

        def html() -> None:
            hub.repos[repo].html_info = True

        expect("html", lambda c: c.list_files(repo), "hub", html)
        hub.repos[repo].html_info = False

        def folder() -> None:
            client("folder").partial_path(repo, name).mkdir(parents=True)

        expect("folder", lambda c: c.download(repo, name), "io", folder)
        t.trials += 1
        try:
            long_repo = "o" * 90 + "/" + "n" * 90
            if client("long repo").download(long_repo, "m" * 60 + "-Q4_K_M.gguf").read_bytes() != content:
                t.fail("long repo: wrong bytes")
        except Exception as exc:  # noqa: BLE001
            t.fail(f"long repo: {type(exc).__name__}: {exc}"[:200])
        t.trials += 1
        hub.set_fault(repo, name, listed_checksum=False)
        if client("unverified").download_checked(repo, name).verified:
            t.fail("a file without a listed checksum was reported as verified")
    return t


SERVER_TRIALS = [hostile_grammars, web_page_requests, bad_bodies, connection_flood, database_bytes,
                 deleted_chunk_files, hub_faults]
