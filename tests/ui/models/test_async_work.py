"""Background work as coroutines on the qasync GUI loop (app.ui.aio, issue #17): each
blocking call runs on a worker thread and the coroutine resumes on the GUI thread; a newer
Hub search cancels an older one; a failure is delivered or logged, never lost; a runner
that dies cancels its tasks, so no callback reaches a deleted widget."""

from __future__ import annotations

import logging
import threading

from PySide6.QtCore import QObject

from app.ui.aio import gui_loop, spawn
from app.ui.tasks import TaskRunner
from tests.ui.models.conftest import REPO


def test_a_coroutine_resumes_on_the_gui_thread_after_the_worker(qtbot):
    runner = TaskRunner(max_threads=1)
    seen: list[str] = []

    async def job() -> int:
        seen.append(threading.current_thread().name)
        value = await runner.call(lambda: (seen.append(threading.current_thread().name), 41)[1])
        seen.append(threading.current_thread().name)
        return value + 1

    task = runner.start(job())
    assert task.get_loop() is gui_loop()
    qtbot.waitUntil(task.done, timeout=5_000)
    assert task.result() == 42
    main = threading.main_thread().name
    assert seen[0] == main and seen[2] == main and seen[1].startswith("hearth-task")
    # The runner forgets the task in the task's done callback, which asyncio runs on a later
    # turn of the loop than the one that finished it: wait for that turn.
    qtbot.waitUntil(lambda: runner.num_pending == 0, timeout=5_000)


def test_failures_reach_on_error_or_the_log(qtbot, caplog):
    runner = TaskRunner()
    errors: list[Exception] = []

    def boom() -> None:
        raise OSError("disk on fire")

    runner.run(boom, on_error=errors.append)
    with caplog.at_level(logging.ERROR, logger="app.ui.aio"):
        runner.run(boom)  # no on_error: the traceback goes to the log
        qtbot.waitUntil(lambda: runner.num_pending == 0, timeout=5_000)
    assert [str(e) for e in errors] == ["disk on fire"]
    assert any("disk on fire" in str(r.exc_info[1]) for r in caplog.records if r.exc_info)


def test_a_destroyed_runner_cancels_its_tasks(qtbot):
    owner = QObject()
    runner = TaskRunner(parent=owner)
    executor = runner._executor
    delivered: list[int] = []
    started, release = threading.Event(), threading.Event()

    def work() -> int:
        started.set()
        return 1 if release.wait(5) else 0

    task = runner.run(work, on_done=delivered.append)
    qtbot.waitUntil(started.is_set, timeout=5_000)  # the worker runs when its owner dies
    owner.deleteLater()
    qtbot.waitUntil(task.cancelled, timeout=5_000)
    release.set()
    executor.shutdown(wait=True)  # the worker has returned: a delivery, if any, is on its way
    # A live runner's result comes back the same way, started after that one returned: once
    # it has arrived, a late delivery from the destroyed runner would have arrived too.
    TaskRunner().run(lambda: 2, on_done=delivered.append)
    qtbot.waitUntil(lambda: 2 in delivered, timeout=5_000)
    assert delivered == [2]


def test_spawn_logs_an_unhandled_exception(qtbot, caplog):
    async def broken() -> None:
        raise ValueError("a bug, loudly")

    with caplog.at_level(logging.ERROR, logger="app.ui.aio"):
        task = spawn(broken(), name="broken")
        qtbot.waitUntil(task.done, timeout=5_000)
    assert any("broken" in r.getMessage() for r in caplog.records)


def test_a_newer_hub_search_cancels_an_older_one(qtbot, make_manager, hub_server):
    mm = make_manager(endpoint=hub_server.endpoint)
    page = mm.hub_page
    finished: list[int] = []
    page.search_finished.connect(finished.append)
    page.search_field.setText("tiny")
    page.search()
    first = page._search_task
    page.search_field.setText("no-such-model-anywhere")
    page.search()
    qtbot.waitUntil(lambda: mm.io_runner.num_pending == 0, timeout=20_000)
    assert first is not None and first.cancelled()
    assert finished == [0]  # only the newer search reported
    assert page.results_model.rowCount() == 0
    assert page.repo_title.text() == "No GGUF repositories found"
    assert page.search_button.isEnabled()
    page.search_field.setText("tiny")
    with qtbot.waitSignal(page.search_finished, timeout=20_000) as found:
        page.search()
    assert found.args == [1] and page.results_model.result(0).id == REPO
