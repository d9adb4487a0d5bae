"""Chat templates render in a worker process: a template that holds the GIL inside one C call,
or allocates without end, is cut off at the bound on the caller's side while the caller's
process — its GUI thread — keeps running (issue 26).

Each case runs in a child process with a hang guard, so a regression (a render back on the
caller's thread) fails the test instead of freezing the suite.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from app.engine.chat_template import KILL_AFTER_S, MAX_IDLE, MAX_WORKER_MEMORY, WorkerPool

ROOT = Path(__file__).resolve().parents[3]
HANG_GUARD_S = 180  # the child's whole run; a frozen GIL would hold it for many minutes

_HEARTBEAT = """
import json, sys, threading, time
from PySide6.QtCore import QTimer
from PySide6.QtGui import QGuiApplication
from app.engine.chat_template import CHATML_TEMPLATE, render_chat_template
from app.engine.errors import InvalidRequest

source = sys.argv[1]
messages = [{"role": "user", "content": "Hi"}]
render_chat_template(CHATML_TEMPLATE, messages)  # a warm worker, as in the app
qt = QGuiApplication([])
beats = []
heart = QTimer()
heart.setInterval(5)
heart.timeout.connect(lambda: beats.append(time.monotonic()))
result = {}

def hostile():  # as a bridge thread renders a chat turn
    t0 = time.monotonic()
    try:
        render_chat_template(source, messages)
        result["outcome"] = "rendered"
    except InvalidRequest as exc:
        result["outcome"] = str(exc)
    result["seconds"] = time.monotonic() - t0
    try:
        result["after"] = render_chat_template(CHATML_TEMPLATE, messages)
    except InvalidRequest as exc:
        result["after"] = ""
        result["after_error"] = str(exc)

worker = threading.Thread(target=hostile)
heart.start()
QTimer.singleShot(50, worker.start)
done = QTimer()
done.setInterval(20)
done.timeout.connect(lambda: qt.quit() if result.get("after") is not None else None)
done.start()
qt.exec()
worker.join()
gaps = [b - a for a, b in zip(beats, beats[1:])]
print(json.dumps({**result, "beats": len(beats), "max_gap_ms": 1000 * max(gaps)}))
"""


def _run(source: str) -> dict[str, object]:
    proc = subprocess.run([sys.executable, "-c", _HEARTBEAT, source], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "QT_QPA_PLATFORM": "offscreen", "PYTHONPATH": str(ROOT)},
                          timeout=HANG_GUARD_S)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result: dict[str, object] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def test_a_render_that_holds_the_gil_is_killed_while_the_gui_thread_keeps_beating() -> None:
    """Before: ``sum`` held the GIL in one C call; the GUI thread never ran again."""
    result = _run("{{ ([[0]*1000]*100000)|sum(start=[])|length }}")
    assert "runs away" in str(result["outcome"]) or "renderer stopped" in str(result["outcome"]), result
    assert result["after"], "the next render failed"
    # The render lasted ~KILL_AFTER_S; a 5 ms timer kept firing all along (a frozen GIL would
    # show one gap of minutes). 1 s is a generous bound for a loaded machine.
    assert float(result["seconds"]) < 4 * KILL_AFTER_S, result  # type: ignore[arg-type]
    assert int(result["beats"]) > 100 and float(result["max_gap_ms"]) < 1000, result  # type: ignore[call-overload]


def test_a_render_that_wants_gigabytes_is_refused_at_the_memory_bound() -> None:
    """Before: doubling a string with ``~`` reached 1.5-2.0 GB in the app's own process."""
    src = "{% set ns = namespace(s='a') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}"
    result = _run(src)
    assert f"{MAX_WORKER_MEMORY >> 20} MiB" in str(result["outcome"]), result
    assert result["after"] and float(result["max_gap_ms"]) < 1000, result  # type: ignore[arg-type]


def test_the_bundle_runs_the_worker_as_hearth_template_worker() -> None:
    """In the PyInstaller bundle ``sys.executable`` is ``hearth`` itself: ``hearth
    --template-worker`` must speak the worker's protocol (here as ``python -m app``)."""
    from app.jinja_sandbox import FRAME, READY, read_frame

    request = json.dumps({"source": "{{ messages[0].content }}!", "messages": [{"role": "user", "content": "Hi"}]})
    proc = subprocess.run([sys.executable, "-m", "app", "--template-worker", str(MAX_WORKER_MEMORY), "6"],
                          input=FRAME.pack(len(request)) + request.encode(), capture_output=True, cwd=ROOT,
                          timeout=HANG_GUARD_S)
    assert proc.returncode == 0 and proc.stdout.startswith(READY), proc.stderr[-2000:]
    import io

    assert json.loads(read_frame(io.BytesIO(proc.stdout[len(READY):])) or b"{}") == {"text": "Hi!"}


def test_a_model_load_starts_enough_workers_for_two_first_renders_at_once() -> None:
    # B9: two clients re-send their conversations together right after a server restart;
    # with one warm worker, the second render started one of its own beside the first read.
    pool = WorkerPool()
    try:
        pool.prewarm()
        assert len(pool._idle) == MAX_IDLE >= 2
        started = list(pool._idle)
        pool.prewarm()  # enough are idle: none started
        assert pool._idle == started and pool._num_workers == MAX_IDLE
        assert all(w.proc.poll() is None for w in started)
    finally:
        pool.close()
    assert all(w.proc.wait(10) is not None for w in started)
