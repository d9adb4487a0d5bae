"""Rendering a GGUF's chat template (Hugging Face conventions) in a worker process, bounded.

A chat template is code shipped inside a model file, so it is treated as hostile: it renders
in the bounded Jinja sandbox of ``app.jinja_sandbox``, and that sandbox runs in a separate
**worker process** so the bound holds whatever the template does — even one C-level call
that holds the GIL (``([[0]*1000]*100000)|sum(start=[])`` froze every thread of the app) or
builds gigabytes (``((2**4096)**4096)**4096``, a string doubled with ``~``):

- **time**: a render must answer within ``MAX_RENDER_SECONDS`` (5 s) of wall-clock time,
  else the worker is killed (SIGKILL) and the call fails; its CPU time is also capped by
  ``RLIMIT_CPU`` inside the worker;
- **memory**: the worker's address space is capped at ``MAX_WORKER_MEMORY`` (512 MiB,
  ``RLIMIT_AS``): a template that wants more fails with a ``MemoryError`` there, never here;
- the caller's thread only waits on a pipe (no GIL held): the GUI keeps painting, the
  scheduler keeps ticking (no render ever runs on the scheduler thread).

Every failure — the sandbox's refusals, a timeout, a worker that died — is ``InvalidRequest``.

Workers are kept warm: a pool (at most ``MAX_WORKERS``) is reused across renders, each keeps
its compiled templates, and ``prewarm()`` starts ``MAX_IDLE`` when a model loads.
NOTE: 2,000 renders of SmolLM2's template over a 6-message chat took 1.28 x the wall time
through a warm worker as in-process (whole-process timings, 5 paired runs, a loaded 2-core
machine): ~0.3 ms more per render, ~0.5 ms in all (the pipe round trip and JSON). Starting
a worker takes ~0.25 s, paid once per process (or after a template got one killed).
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import select
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import app
from app.chat_formats import CHATML, FORMATS, NO_FORMAT, choose_format
from app.engine.errors import InvalidRequest
from app.jinja_sandbox import FRAME, MAX_RENDER_SECONDS, READY

log = logging.getLogger(__name__)

MAX_WORKER_MEMORY = 512 * 1024 * 1024
"""Address space of a template worker (``RLIMIT_AS``): its Python needs ~25 MiB, a 16 M-character
prompt ~200 MiB more."""

KILL_AFTER_S = MAX_RENDER_SECONDS + 0.5
"""A render not answered by then is killed (the sandbox's own clock fires at 5 s first when
the template returns to Python at all)."""

START_TIMEOUT_S = 60.0
"""How long a new worker may take to import the sandbox (not charged to the template)."""

MAX_WORKERS = 4
"""Renders at once (server requests, the GUI's turns and its context meter); more wait."""

MAX_IDLE = 2

CHATML_TEMPLATE = CHATML.template
"""ChatML (``app.chat_formats``). A GGUF without a template gets the format its architecture
and vocabulary call for (``resolve_chat_format``), ChatML only when its vocabulary has ChatML's
tokens."""

NO_FORMAT_TEMPLATE = "{{ raise_exception('this model has no chat format: choose one in Models, Library') }}"
"""What a model with no usable chat format renders with: ``render_chat_template`` refuses it
with ``NO_FORMAT``'s words, without a render."""


def worker_command() -> list[str]:
    """How to start a worker: the bundle runs itself with ``--template-worker``."""
    args = [str(MAX_WORKER_MEMORY), str(int(MAX_RENDER_SECONDS) + 1)]
    if getattr(sys, "frozen", False):
        return [sys.executable, "--template-worker", *args]
    return [sys.executable, "-m", "app.jinja_sandbox", *args]


class _Dead(Exception):
    """The worker is gone (killed by a limit, or it exited); ``reused``: it had rendered
    before this request (it may have died idle, so the request deserves a fresh worker)."""

    def __init__(self, reused: bool = False) -> None:
        super().__init__()
        self.reused = reused


class _Worker:
    """One worker process and its pipes; used by one caller at a time."""

    def __init__(self) -> None:
        env = dict(os.environ)
        root = str(Path(app.__file__).resolve().parent.parent)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
        self.proc = subprocess.Popen(
            worker_command(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env,
        )  # fmt: skip
        self.ready = False
        self.num_renders = 0

    def _read(self, n: int, deadline: float) -> bytes:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        chunks: list[bytes] = []
        while n > 0:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise TimeoutError
            data = os.read(fd, min(n, 1 << 20))
            if not data:
                raise _Dead
            chunks.append(data)
            n -= len(data)
        return b"".join(chunks)

    def render(self, request: bytes) -> dict[str, Any]:
        self.num_renders += 1
        if not self.ready:
            if self._read(len(READY), time.monotonic() + START_TIMEOUT_S) != READY:
                raise _Dead
            self.ready = True
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(FRAME.pack(len(request)) + request)
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            raise _Dead from None
        deadline = time.monotonic() + KILL_AFTER_S
        (size,) = FRAME.unpack(self._read(FRAME.size, deadline))
        answer: dict[str, Any] = json.loads(self._read(size, deadline))
        return answer

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            log.error("template worker %d did not exit after SIGKILL", self.proc.pid)
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                pipe.close()


class WorkerPool:
    """Template workers, reused across renders; ``render`` is safe from any thread."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._idle: list[_Worker] = []
        self._num_workers = 0
        self._closed = False

    def _acquire(self) -> _Worker:
        with self._cond:
            while not self._idle and self._num_workers >= MAX_WORKERS:
                self._cond.wait()
            if self._idle:
                return self._idle.pop()
            self._num_workers += 1
        try:
            return _Worker()
        except OSError:
            self._forget()
            raise

    def _release(self, worker: _Worker) -> None:
        with self._cond:
            if len(self._idle) < MAX_IDLE and not self._closed:
                self._idle.append(worker)
                self._cond.notify()
                return
        self._discard(worker)

    def _discard(self, worker: _Worker) -> None:
        worker.kill()
        self._forget()

    def _forget(self) -> None:
        with self._cond:
            self._num_workers -= 1
            self._cond.notify()

    def render(self, request: bytes) -> str:
        for _attempt in range(2):
            try:
                return self._render(request)
            except _Dead as dead:
                if not dead.reused:  # a fresh worker died on it: the template killed it
                    raise InvalidRequest(
                        f"chat template failed: the renderer stopped (it needed more than {MAX_RENDER_SECONDS} s "
                        f"of CPU or {MAX_WORKER_MEMORY >> 20} MiB)"
                    ) from None
        raise InvalidRequest("chat template failed: two renderers in a row stopped")

    def _render(self, request: bytes) -> str:
        """One render on one worker; ``_Dead`` when it died (an idle worker may have died
        since its last render: the caller tries once more on a fresh one)."""
        try:
            worker = self._acquire()
        except OSError as exc:
            raise InvalidRequest(f"chat template: cannot start a renderer: {exc}") from exc
        try:
            answer = worker.render(request)
        except TimeoutError:
            self._discard(worker)
            raise InvalidRequest(f"chat template runs away: more than {MAX_RENDER_SECONDS} s") from None
        except (_Dead, ValueError):
            self._discard(worker)
            raise _Dead(reused=worker.num_renders > 1) from None
        except BaseException:
            self._discard(worker)
            raise
        if answer.get("exiting") or worker.proc.poll() is not None:
            self._discard(worker)
        else:
            self._release(worker)
        if "text" in answer:
            return str(answer["text"])
        raise InvalidRequest(str(answer.get("refused", "chat template failed")))

    def prewarm(self) -> None:
        """Start workers now until ``MAX_IDLE`` are idle, so the first renders do not wait
        for one (a worker starts in the background; its first render waits for it).

        NOTE: B9's two clients re-send their conversations together right after a server
        restart: with one worker started at load, the second render started a worker of its
        own beside the first request's read, and that request was admitted ~550 ms after it
        arrived (docs/history/benchmarks-2026-11-29-to-12-05.md, 2026-12-04 16:50)."""
        while True:
            with self._cond:
                if len(self._idle) >= MAX_IDLE or self._closed or self._num_workers >= MAX_WORKERS:
                    return
                self._num_workers += 1
            try:
                worker = _Worker()
            except OSError as exc:
                log.warning("cannot start a chat-template worker: %s", exc)
                self._forget()
                return
            self._release(worker)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            idle, self._idle = self._idle, []
        for worker in idle:
            self._discard(worker)


_POOL = WorkerPool()
atexit.register(_POOL.close)


def prewarm() -> None:
    """Have template workers ready (called when a model loads; cheap if they are)."""
    _POOL.prewarm()


def render_chat_template(
    source: str,
    messages: list[dict[str, Any]],
    *,
    bos_token: str = "",
    eos_token: str = "",
    add_generation_prompt: bool = True,
    tools: list[Any] | None = None,
) -> str:
    """Render a GGUF chat template in a worker, bounded in time and memory (see the module
    docstring). Every failure of the template is ``InvalidRequest``."""
    if source == NO_FORMAT_TEMPLATE:
        raise InvalidRequest(NO_FORMAT)
    request = {
        "source": source, "messages": messages, "bos_token": bos_token, "eos_token": eos_token,
        "add_generation_prompt": add_generation_prompt, "tools": tools,
    }  # fmt: skip
    try:
        data = json.dumps(request).encode()  # ASCII: lone surrogates travel as escapes
    except (TypeError, ValueError) as exc:
        raise InvalidRequest(f"chat messages must be JSON values: {exc}") from None
    return _POOL.render(data)


def resolve_chat_format(
    gguf_template: str | None, override: str | None, architecture: str | None, has_token: Callable[[str], bool]
) -> tuple[str, str | None]:
    """``(template source, format)`` a model renders its chats with, and what that is:
    ``override`` (``ModelConfig.chat_template``, format ``"custom"`` unless it is a built-in
    format's template) first, then the GGUF's own (``"file"``), then the built-in format its
    architecture and vocabulary call for (``app.chat_formats.choose_format``); else
    ``NO_FORMAT_TEMPLATE`` and None: the model cannot chat."""
    if override:
        return override, next((f.name for f in FORMATS.values() if f.template == override), "custom")
    if gguf_template:
        return gguf_template, "file"
    chosen = choose_format(architecture, has_token)
    if chosen is None:
        return NO_FORMAT_TEMPLATE, None
    return FORMATS[chosen].template, chosen
