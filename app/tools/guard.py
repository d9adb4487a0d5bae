"""A stdio MCP server's output, bounded in a process of its own (``python -m app.tools.guard`` or
the bundle's ``hearth --mcp-guard``): ``LIMIT -- COMMAND ARGS…``.

The guard starts the server, passes the app's messages to it unchanged, and passes its lines
back — except that a result's text parts longer than ``LIMIT`` characters are cut to it here,
and ``_meta`` says how long they were (``ORIGINAL_KEY``). Parsing a 10 MB line takes the
parsing thread's GIL for a second or more on a loaded machine; in the app's process that froze
the window (the SDK parses every line before the app sees it). A line over ``MAX_LINE`` bytes,
or one that is not JSON, is not parsed here either: it is replaced by a JSON-RPC error for the
request it answered when its id can be read, else passed on (the app's side reports a line
that is not JSON-RPC). Only the standard library: it starts fast.
"""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import sys
import threading
from typing import Any, BinaryIO

ORIGINAL_KEY = "hearth/original_chars"
MAX_LINE = 64 << 20
_ID = re.compile(rb'"id"\s*:\s*(-?\d+|"(?:[^"\\]|\\.)*")')


def command(limit: int, argv: list[str]) -> list[str]:
    """How to run ``argv`` (a server's command line) behind the guard."""
    if getattr(sys, "frozen", False):
        return [sys.executable, "--mcp-guard", str(limit), "--", *argv]
    return [sys.executable, "-m", "app.tools.guard", str(limit), "--", *argv]


def bounded_line(line: bytes, limit: int) -> bytes:
    """One line the server wrote, as the app is to read it."""
    if len(line) <= limit + 4096:  # nothing in it can be over the limit
        return line
    if len(line) > MAX_LINE:
        return _too_long(line[:4096], len(line))
    try:
        msg = json.loads(line)
    except ValueError:
        return line
    result = msg.get("result") if isinstance(msg, dict) else None
    if not isinstance(result, dict) or not isinstance(result.get("content"), list):
        return line
    content = result["content"]
    total = 0
    for part in content:
        if isinstance(part, dict) and isinstance(part.get("text"), str):
            total += len(part["text"])
            part["text"] = part["text"][:limit]
    if "structuredContent" in result:  # (the SDK writes a result both ways)
        result["structuredContent"] = _cut_strings(result["structuredContent"], limit)
    meta = result.setdefault("_meta", {})
    if isinstance(meta, dict):
        meta[ORIGINAL_KEY] = total
    return json.dumps(msg, ensure_ascii=False).encode("utf-8") + b"\n"


def _cut_strings(value: Any, limit: int) -> Any:
    """``value`` with each string cut to ``limit`` characters (the schema it follows still holds)."""
    if isinstance(value, str):
        return value[:limit]
    if isinstance(value, list):
        return [_cut_strings(v, limit) for v in value]
    if isinstance(value, dict):
        return {k: _cut_strings(v, limit) for k, v in value.items()}
    return value


def _too_long(head: bytes, size: int) -> bytes:
    """A JSON-RPC error for the request a line of ``size`` bytes (starting ``head``) answered."""
    found = _ID.search(head)
    if found is None:
        return head + b"\n"  # not JSON-RPC as far as the app can tell: it says so
    error: dict[str, Any] = {"jsonrpc": "2.0", "id": json.loads(found.group(1)),
                             "error": {"code": -32603, "message": f"the server's reply was {size:,} bytes, "
                                       f"over the {MAX_LINE:,} the app reads"}}  # fmt: skip
    return json.dumps(error).encode("utf-8") + b"\n"


def _pump(src: BinaryIO, dst: BinaryIO) -> None:
    try:
        while chunk := src.read1(65536) if hasattr(src, "read1") else src.read(65536):
            dst.write(chunk)
            dst.flush()
    except (OSError, ValueError):
        pass
    finally:
        with contextlib.suppress(OSError):
            dst.close()


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print("usage: guard LIMIT -- COMMAND [ARGS…]", file=sys.stderr)
        return 2
    limit = int(argv[0])
    try:
        proc = subprocess.Popen(argv[2:], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    except OSError as exc:
        print(f"cannot start {argv[2]}: {exc}", file=sys.stderr)
        return 127
    assert proc.stdin is not None and proc.stdout is not None
    threading.Thread(target=_pump, args=(sys.stdin.buffer, proc.stdin), daemon=True).start()
    out = sys.stdout.buffer
    try:
        while line := proc.stdout.readline(MAX_LINE + 1):
            if len(line) > MAX_LINE and not line.endswith(b"\n"):
                size = len(line)
                while rest := proc.stdout.readline(MAX_LINE):  # the rest of the line, dropped
                    size += len(rest)
                    if rest.endswith(b"\n"):
                        break
                out.write(_too_long(line[:4096], size))
            else:
                out.write(bounded_line(line, limit))
            out.flush()
    except (BrokenPipeError, OSError):
        pass
    finally:
        proc.terminate()
    return proc.wait()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
