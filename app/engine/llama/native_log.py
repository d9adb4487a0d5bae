"""llama.cpp's log bridge: native log records go to Python logging, never to stderr.

llama.cpp logs in pieces (progress dots, CONT records); lines are assembled here, kept in a
short ring so an error message can quote the native reason (``native_errors``/``detail``),
and sent to the ``app.engine.llama_cpp`` logger at DEBUG. ``init_llama`` installs the bridge
and initialises llama.cpp's backend once per process.
"""

from __future__ import annotations

import collections
import ctypes
import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import llama_cpp

from app.engine.llama.weight_kernels import set_process_kernels

# ggml_log_level: 1 debug, 2 info, 3 warn, 4 error, 5 = continues the previous record.
_LOG_ERROR = 4
_LOG_CONT = 5
_RECENT_LOG: collections.deque[tuple[int, str]] = collections.deque(maxlen=64)
_log_line: list[str] = []
_log_level = [0]
_log_lock = threading.Lock()
_log_count = [0]
_native_log = logging.getLogger("app.engine.llama_cpp")


@llama_cpp.llama_log_callback  # type: ignore[untyped-decorator]
def _on_llama_log(level: int, text: bytes, user_data: Any) -> None:
    # NOTE: llama.cpp logs in pieces (progress dots, CONT records); lines are assembled here,
    # remembered for error messages and sent to Python logging at DEBUG, never to stderr.
    piece = text.decode("utf-8", "replace") if text else ""
    with _log_lock:
        if not _log_line and level != _LOG_CONT:
            _log_level[0] = level
        _log_line.append(piece)
        if not piece.endswith("\n"):
            return
        line = "".join(_log_line).rstrip()
        _log_line.clear()
        if line:
            _RECENT_LOG.append((_log_level[0], line))
            _log_count[0] += 1
    if line:
        _native_log.debug("%s", line)


_initialised = False


def init_llama() -> None:
    """Route llama.cpp's logs to Python logging and initialise its backend (once per process)."""
    global _initialised
    if not _initialised:
        llama_cpp.llama_log_set(_on_llama_log, ctypes.c_void_p(0))
        set_process_kernels()  # before llama.cpp's first matmul reads it (weight_kernels)
        llama_cpp.llama_backend_init()
        _initialised = True


@contextmanager
def native_errors() -> Iterator[list[str]]:
    """Collect the error lines llama.cpp logs inside the block (for readable messages)."""
    start = _log_count[0]
    found: list[str] = []
    try:
        yield found
    finally:
        with _log_lock:
            n_new = min(_log_count[0] - start, len(_RECENT_LOG))
            recent = list(_RECENT_LOG)[len(_RECENT_LOG) - n_new :] if n_new else []
        found.extend(line for level, line in recent if level == _LOG_ERROR)


def detail(lines: list[str]) -> str:
    """The first (most specific) native error line, without its function-name prefix."""
    if not lines:
        return ""
    text = lines[0]
    for prefix in ("llama_model_load: ", "error loading model: "):
        text = text.split(prefix, 1)[-1]
    return f" ({text.split(': ', 1)[-1] if text.startswith(('llama_', 'gguf_')) else text})"
