"""Tools in the chat, driven by clicks on the real window: a real MCP server (the SDK test
servers in tests/helpers/mcp_servers.py), the tiny model forced to call a tool (the grammar),
and the approval dialog answered by its buttons. Every test checks what actually ran on the
server (its call log), so a call without the user's consent would fail it."""

from __future__ import annotations

import json
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import QApplication, QCheckBox, QComboBox, QLineEdit, QPushButton

from app.storage import SamplingSettings
from app.tools.config import Limits, ServerConfig
from app.tools.http_client import MAX_REPLY_BYTES
from app.tools.loop import denied_message, stopped_message
from app.ui.chat.message_widget import MessageWidget
from app.ui.chat.tool_widgets import ToolApproval, ToolMessageWidget
from app.ui.main_window import MainWindow
from tests.helpers import hostile_http
from tests.helpers.mcp_servers import command
from tests.ui.helpers import chat_view, stop_button, type_and_send, wait_idle
from tests.ui.screens import screenshot

# No grammar of the chat's own: the forced call's grammar is the one that applies.
TOOL_SAMPLING = SamplingSettings(temperature=0.0, max_tokens=96)
WAIT_MS = 60_000


def _settings_tools(window: MainWindow, qtbot: Any) -> Any:
    dialog = window.app_actions.open_settings()
    qtbot.waitExposed(dialog)
    index = next(i for i in range(dialog.tabs.count()) if dialog.tabs.tabText(i) == "Tools")
    dialog.tabs.setCurrentIndex(index)
    return dialog


def _add_server_by_clicks(window: MainWindow, qtbot: Any, name: str, line: str) -> ServerConfig:
    dialog = _settings_tools(window, qtbot)
    page = dialog.tabs.currentWidget()
    qtbot.keyClicks(page.findChild(QLineEdit, "toolServerName"), name)
    page.findChild(QLineEdit, "toolServerCommand").setText(line)  # a long path: typed at once
    qtbot.mouseClick(page.findChild(QPushButton, "addToolServerButton"), Qt.MouseButton.LeftButton)
    steps = window.controller.tools
    server = steps.settings.servers()[-1]
    qtbot.waitUntil(lambda: steps.status(server.id).state == "running", timeout=WAIT_MS)
    qtbot.waitUntil(lambda: page.server_list.item(page.server_list.count() - 1).text().endswith("— running"))
    assert "• add: Add two integers." in page.details.toPlainText()
    screenshot(dialog, "settings-tools")
    dialog.close()
    return server


def _new_chat_with(window: MainWindow, qtbot: Any, server: ServerConfig, force: str) -> str:
    page = window.chat_page
    cid = page.new_conversation()
    if not page.settings_button.isChecked():
        qtbot.mouseClick(page.settings_button, Qt.MouseButton.LeftButton)
    box = page.settings_panel.tools
    check = next(c for c in box.findChildren(QCheckBox, "chatToolServer") if c.property("serverId") == server.id)
    assert not check.isChecked()  # off by default
    check.click()
    combo: QComboBox = box.findChild(QComboBox, "chatToolsForce")
    combo.setCurrentIndex(combo.findData(force))
    combo.activated.emit(combo.currentIndex())
    assert window.controller.tools.settings.chat(cid).servers == (server.id,)
    return cid


def _approval(qtbot: Any, window: MainWindow, asked: list[ToolApproval]) -> ToolApproval:
    qtbot.waitUntil(lambda: len(asked) > 0 and asked[-1].isVisible(), timeout=WAIT_MS)
    return asked[-1]


def _click(dialog: ToolApproval, name: str) -> None:
    button = dialog.findChild(QPushButton, name)
    assert button is not None, name
    button.click()


def _roles(window: MainWindow, cid: str) -> list[str]:
    return [m.role for m in window.controller.storage.active_branch(cid)]


def _expected(call_line: str) -> str:
    op, *args = call_line.split()
    if op == "add":
        return str(int(args[0]) + int(args[1]))
    if op == "multiply":
        return str(int(args[0]) * int(args[1]))
    return f"would delete {' '.join(args)}"


@pytest.fixture
def calls_log(tmp_path: Path) -> Path:
    return tmp_path / "calls.log"


def _ran(log: Path) -> list[str]:
    return log.read_text(encoding="utf-8").splitlines() if log.exists() else []


def test_add_server_enable_forced_call_allow_once_then_reply_and_restart(make_window, qtbot, data_dir, calls_log):
    window = make_window(sampling=TOOL_SAMPLING)
    server = _add_server_by_clicks(window, qtbot, "calculator", command("calc", str(calls_log)))
    asked: list[ToolApproval] = []
    window.controller.tools.approval_opened.connect(asked.append)
    cid = _new_chat_with(window, qtbot, server, "first")
    type_and_send(qtbot, window, "What is 2 plus 3?")
    dialog = _approval(qtbot, window, asked)
    assert _ran(calls_log) == []  # nothing runs before the answer
    args = json.loads(dialog.arguments)
    assert isinstance(args, dict)
    screenshot(dialog, "tool-approval")
    _click(dialog, "allowOnceButton")
    wait_idle(qtbot, window, cid)
    assert len(asked) == 1
    ran = _ran(calls_log)
    assert len(ran) == 1
    branch = window.controller.storage.active_branch(cid)
    assert [m.role for m in branch] == ["user", "assistant", "tool", "assistant"]
    assert branch[2].content == _expected(ran[0])
    # The model went on in the same sticky session: only the tool result (and the template's
    # turn markers) was read for the last reply.
    stats, call = branch[3].stats, branch[1].stats
    assert stats is not None and call is not None
    # The template writes the call its own way (spacing, key order), so the next step reads
    # the call again as well as the result: at most the call's tokens more than generic mode.
    assert stats.prompt_tokens - stats.tokens_reused <= 40 + call.completion_tokens, stats
    view = chat_view(window)
    tools = view.findChildren(ToolMessageWidget)
    assert len(tools) == 1 and not tools[0].body.isVisible()
    qtbot.mouseClick(tools[0].toggle, Qt.MouseButton.LeftButton)
    assert tools[0].body.isVisible()
    call = next(w for w in view.findChildren(MessageWidget) if w.message_id == branch[1].id)
    assert f"**Tool call:** `{ran[0].split()[0]}`" in call.body.source()
    screenshot(window, "tool-chat")
    # Exported with the conversation; a regenerated reply answers the same result (the call
    # is not run again).
    exported = json.loads(window.controller.storage.export_json(cid))
    assert [m["role"] for m in exported["messages"]] == ["user", "assistant", "tool", "assistant"]
    last = next(w for w in view.findChildren(MessageWidget) if w.message_id == branch[3].id)
    qtbot.mouseClick(last.action_buttons["regenerate"], Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: window.controller.storage.active_branch(cid)[-1].id != branch[3].id, timeout=WAIT_MS)
    wait_idle(qtbot, window, cid)
    again_branch = window.controller.storage.active_branch(cid)
    assert [m.id for m in again_branch[:3]] == [m.id for m in branch[:3]] and again_branch[3].role == "assistant"
    assert len(_ran(calls_log)) == 1
    window.close()
    # A restart restores the call and its result.
    again = make_window(sampling=TOOL_SAMPLING)
    again.chat_page.open_conversation(cid)
    qtbot.waitUntil(lambda: len(chat_view(again).findChildren(ToolMessageWidget)) == 1)
    assert [m.id for m in again.controller.storage.active_branch(cid)] == [m.id for m in again_branch]
    restored = chat_view(again).findChildren(ToolMessageWidget)[0]
    qtbot.mouseClick(restored.toggle, Qt.MouseButton.LeftButton)
    assert restored.body.isVisible() and restored.body.source().strip("~\n") == _expected(ran[0])


def test_deny_runs_nothing_and_tells_the_model(make_window, qtbot, calls_log):
    window = make_window(sampling=TOOL_SAMPLING)
    steps = window.controller.tools
    server = ServerConfig.stdio("calculator", command("calc", str(calls_log)))
    steps.settings.add_server(server)
    asked: list[ToolApproval] = []
    steps.approval_opened.connect(asked.append)
    cid = _new_chat_with(window, qtbot, server, "first")
    qtbot.waitUntil(lambda: server.id in steps.listing, timeout=WAIT_MS)
    type_and_send(qtbot, window, "Add 2 and 3")
    dialog = _approval(qtbot, window, asked)
    _click(dialog, "denyButton")
    wait_idle(qtbot, window, cid)
    branch = window.controller.storage.active_branch(cid)
    assert [m.role for m in branch] == ["user", "assistant", "tool", "assistant"]
    assert branch[2].content == denied_message(dialog.tool)
    assert _ran(calls_log) == []


def test_always_allow_asks_once_per_tool_and_the_step_limit_ends_the_loop(make_window, qtbot, calls_log):
    window = make_window(sampling=TOOL_SAMPLING)
    steps = window.controller.tools
    steps.settings.set_limits(Limits(max_steps=3, timeout_s=20, max_result_chars=8000))
    server = ServerConfig.stdio("calculator", command("calc", str(calls_log)))
    steps.settings.add_server(server)
    asked: list[ToolApproval] = []

    def always(dialog: ToolApproval) -> None:  # every question is answered "Always allow"
        asked.append(dialog)
        QTimer.singleShot(0, lambda: _click(dialog, "alwaysAllowButton"))

    steps.approval_opened.connect(always)
    cid = _new_chat_with(window, qtbot, server, "every")
    qtbot.waitUntil(lambda: server.id in steps.listing, timeout=WAIT_MS)
    type_and_send(qtbot, window, "Keep adding numbers")
    qtbot.waitUntil(lambda: window.controller.failure(cid) is not None, timeout=WAIT_MS)
    wait_idle(qtbot, window, cid)
    roles = _roles(window, cid)
    assert roles.count("tool") == 3 and roles[-1] == "tool"
    ran = _ran(calls_log)
    assert len(ran) == 3
    tools = [d.tool for d in asked]
    assert len(tools) == len(set(tools)) >= 1  # a tool allowed always was not asked about again
    assert {line.split()[0] for line in ran} == set(tools)
    assert "3 tool steps" in (window.controller.failure(cid) or "")
    assert steps.settings.chat(cid).always == {f"{server.id}/{t}" for t in tools}
    screenshot(window, "tool-step-limit")


def test_stop_while_asking_runs_nothing(make_window, qtbot, calls_log):
    window = make_window(sampling=TOOL_SAMPLING)
    steps = window.controller.tools
    server = ServerConfig.stdio("calculator", command("calc", str(calls_log)))
    steps.settings.add_server(server)
    asked: list[ToolApproval] = []
    steps.approval_opened.connect(asked.append)
    cid = _new_chat_with(window, qtbot, server, "first")
    qtbot.waitUntil(lambda: server.id in steps.listing, timeout=WAIT_MS)
    type_and_send(qtbot, window, "Add 2 and 3")
    dialog = _approval(qtbot, window, asked)
    assert window.controller.is_busy(cid) and stop_button(window).isVisible()
    qtbot.mouseClick(stop_button(window), Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not dialog.isVisible())
    wait_idle(qtbot, window, cid)
    branch = window.controller.storage.active_branch(cid)
    assert [m.role for m in branch] == ["user", "assistant", "tool"]
    assert branch[2].content == stopped_message(dialog.tool)
    assert _ran(calls_log) == []
    assert window.controller.failure(cid) is None


def test_a_reply_that_is_not_a_call_is_a_normal_reply(make_window, qtbot, calls_log):
    window = make_window(sampling=TOOL_SAMPLING)
    steps = window.controller.tools
    server = ServerConfig.stdio("calculator", command("calc", str(calls_log)))
    steps.settings.add_server(server)
    asked: list[ToolApproval] = []
    steps.approval_opened.connect(asked.append)
    cid = _new_chat_with(window, qtbot, server, "")  # not forced
    qtbot.waitUntil(lambda: server.id in steps.listing, timeout=WAIT_MS)
    type_and_send(qtbot, window, "Hello there")
    wait_idle(qtbot, window, cid)
    branch = window.controller.storage.active_branch(cid)
    assert [m.role for m in branch] == ["user", "assistant"]
    assert "<tool_call>" not in branch[1].content
    assert asked == [] and _ran(calls_log) == []


class _StallMeter:
    """The gaps between 10 ms timer ticks on the GUI thread while it runs (``time.monotonic``
    spans); ``worst`` is the longest, in ms, of those within a window (cut to it)."""

    def __init__(self) -> None:
        self.gaps: list[tuple[float, float]] = []
        self.last = 0.0
        self.timer = QTimer()
        self.timer.setInterval(10)
        self.timer.timeout.connect(self._tick)

    def start(self) -> None:
        self.last = time.monotonic()
        self.timer.start()

    def _tick(self) -> None:
        now = time.monotonic()
        self.gaps.append((self.last, now))
        self.last = now

    def stop(self) -> int:
        self.timer.stop()
        self._tick()
        return self.worst()

    def worst(self, start: float = 0.0, end: float = float("inf")) -> int:
        cut = [min(b, end) - max(a, start) for a, b in self.gaps if b > start and a < end]
        return round(1000 * max(cut, default=0.0))

    def worst_ends(self, start: float = 0.0, end: float = float("inf")) -> float:
        """When (``time.monotonic``) the longest gap within the window ended."""
        cut = [(min(b, end) - max(a, start), min(b, end)) for a, b in self.gaps if b > start and a < end]
        return max(cut, default=(0.0, start))[1]

    def idle(self, qtbot: Any, ms: int = 1500) -> int:
        """The longest gap while nothing runs: what the machine alone costs the GUI thread."""
        self.start()
        qtbot.wait(ms)
        return self.stop()


OVER = f"answered the call to dump with over {MAX_REPLY_BYTES:,} bytes"


@pytest.mark.parametrize(
    ("transport", "kind", "tool", "says", "timeout_s"),
    [
        ("stdio", "sleepy", "wait", "did not answer the call to wait within 2 s", 2.0),
        ("stdio", "crash", "boom", "failed the call to boom", 2.0),
        ("stdio", "badjson", "garble", "wrote something that is not JSON-RPC", 2.0),
        ("stdio", "flood", "dump", "", 60.0),  # 10 MB take seconds to arrive on a loaded machine
        # Streamable HTTP on this machine (tests/helpers/hostile_http.py): the same four, and a
        # reply that never ends; a reply over the app's bound is an error (it is not parsed).
        ("http", "sleepy", "wait", "did not answer the call to wait within 2 s", 2.0),
        ("http", "crash", "boom", "failed the call to boom", 2.0),
        ("http", "badjson", "garble", "wrote something that is not JSON-RPC", 2.0),
        ("http", "flood", "dump", OVER, 10.0),
        ("http", "endless", "dump", OVER, 10.0),
    ],
)
def test_hostile_server_costs_one_error_card_and_the_gui_stays_responsive(make_window, qtbot, transport, kind,
                                                                            tool, says, timeout_s):
    with ExitStack() as stack:
        if transport == "http":
            server = ServerConfig.http(kind, stack.enter_context(hostile_http.serve(kind)))
        else:
            server = ServerConfig.stdio(kind, command(kind))
        _hostile_journey(make_window, qtbot, server, tool, says, timeout_s)


def _hostile_journey(make_window: Any, qtbot: Any, server: ServerConfig, tool: str, says: str,
                     timeout_s: float) -> None:
    kind = server.name
    window = make_window(sampling=TOOL_SAMPLING)
    steps = window.controller.tools
    steps.settings.set_limits(Limits(max_steps=10, timeout_s=timeout_s, max_result_chars=300))
    steps.settings.add_server(server)
    asked: list[ToolApproval] = []
    steps.approval_opened.connect(asked.append)
    cid = _new_chat_with(window, qtbot, server, "first")
    qtbot.waitUntil(lambda: server.id in steps.listing, timeout=WAIT_MS)
    type_and_send(qtbot, window, "Go")
    dialog = _approval(qtbot, window, asked)
    assert dialog.tool == tool
    # When the call ends, on the MCP host's thread (before the GUI thread hears of it).
    ended: list[float] = []
    host, call = steps.host, steps.host.call

    def timed_call(*args: Any, **kwargs: Any) -> Any:
        future = call(*args, **kwargs)
        future.add_done_callback(lambda _: ended.append(time.monotonic()))
        return future

    host.call = timed_call  # type: ignore[method-assign]
    # What the machine alone costs the GUI thread now (the dialog open, nothing running): on a
    # loaded 2-core machine the OS takes 100+ ms from any thread now and then.
    before = _StallMeter().idle(qtbot)
    meter = _StallMeter()
    meter.start()
    t0 = time.monotonic()
    _click(dialog, "allowOnceButton")
    qtbot.waitUntil(lambda: "tool" in _roles(window, cid), timeout=WAIT_MS)
    took = time.monotonic() - t0
    meter.stop()
    wait_idle(qtbot, window, cid)
    after = _StallMeter().idle(qtbot)  # and again after it (the load may have changed meanwhile)
    assert len(ended) == 1
    running, worst = meter.worst(t0, ended[0]), meter.worst(t0)
    running_at = meter.worst_ends(t0, ended[0]) - t0
    branch = window.controller.storage.active_branch(cid)
    result = branch[[m.role for m in branch].index("tool")].content
    if kind == "flood" and server.kind == "stdio":  # a result, cut to the setting, and the cut said
        assert len(result) < 400 and "cut: the tool returned 10,000,000 characters" in result
        assert window.controller.failure(cid) is None
    else:
        assert says in result
        assert took < timeout_s + 1.0, took
        qtbot.waitUntil(lambda: window.controller.failure(cid) is not None)
        failure = window.controller.failure(cid) or ""
        assert "tool call failed" in failure and says in failure
        cards = [w for w in QApplication.allWidgets() if w.objectName() == "errorCard" and w.isVisible()]
        assert len(cards) <= 1
        screenshot(window, f"tool-hostile-{server.kind}-{kind}")
    noise = max(before, after)
    print(f"{server.kind} {kind}: the call ended in {took:.2f} s; the GUI thread's longest stall while it ran "
          f"{running} ms (ending {running_at:.2f} s after Allow), until its message was in {worst} ms "
          f"(idle before: {before} ms, after: {after} ms)")
    # While the call runs the GUI thread has nothing to do: a stall then is the server's doing
    # through the GIL (a 10 MB reply parsed in this process held it 1.8 s; 252 ms without the
    # guard at load ~6) or the machine's. The goal is 100 ms, met at load 5-8 (11-47 ms in most
    # runs), but at load 8-9 one stall of a 2 s wait reached 107 ms with the idle ones at 20 and
    # 36 ms: 150 ms (or twice the machine's own stalls) is held here.
    assert running <= max(150, 2 * noise), f"the GUI thread stalled {running} ms while the call ran"
    # Then the GUI thread records the result and draws the card, the app's own work for any
    # failed call: 20-95 ms at load 5-8 (103 and 106 ms in one run of nine), 120-167 ms at load
    # 9; quiet, 11-28 ms for all nine. Once, in a fresh clone's `make test` (two workers, this
    # case over HTTP), 524 ms with the idle stalls at 15/12 ms and 14 ms while the call ran: after
    # the call had ended, on the way to the card (its message came 2.55 s after Allow, 2.02 s in
    # the other runs). Not traced; quiet, every case stays under 30 ms. Not the goal's 100 ms,
    # then, beside other tests: a bound that still catches work that waits for the server on the GUI
    # thread (stopping one takes seconds).
    assert worst <= max(1000, 2 * noise), f"the GUI thread stalled {worst} ms (idle: {before}/{after} ms)"


def test_a_model_whose_template_renders_tools_calls_them_natively(make_window, qtbot, tmp_path, calls_log):
    """Native mode: the tools go through the model's own template, the call comes back as the
    engine's tool-call span, and the result is rendered by the template as a ``tool`` message."""
    from tests.helpers.tiny_model import write_tiny_model
    from tests.integration.server.test_native_tools import TEMPLATE

    model = write_tiny_model(tmp_path / "tiny-tools.gguf", chat_template=TEMPLATE)
    window = make_window(sampling=TOOL_SAMPLING, model_path=model, model_id="tiny-tools")
    steps = window.controller.tools
    server = ServerConfig.stdio("calculator", command("calc", str(calls_log)))
    steps.settings.add_server(server)
    asked: list[ToolApproval] = []
    steps.approval_opened.connect(asked.append)
    cid = _new_chat_with(window, qtbot, server, "first")
    qtbot.waitUntil(lambda: server.id in steps.listing, timeout=WAIT_MS)
    type_and_send(qtbot, window, "Add 2 and 3")
    _click(_approval(qtbot, window, asked), "allowOnceButton")
    wait_idle(qtbot, window, cid)
    branch = window.controller.storage.active_branch(cid)
    assert [m.role for m in branch] == ["user", "assistant", "tool", "assistant"]
    ran = _ran(calls_log)
    assert len(ran) == 1 and branch[2].content == _expected(ran[0])
    stats, call = branch[3].stats, branch[1].stats
    assert stats is not None and call is not None
    # The template writes the call its own way (spacing, key order), so the next step reads
    # the call again as well as the result: at most the call's tokens more than generic mode.
    assert stats.prompt_tokens - stats.tokens_reused <= 40 + call.completion_tokens, stats


def test_stop_while_a_call_runs_abandons_it(make_window, qtbot):
    window = make_window(sampling=TOOL_SAMPLING)
    steps = window.controller.tools
    steps.settings.set_limits(Limits(max_steps=10, timeout_s=60.0, max_result_chars=2000))
    server = ServerConfig.stdio("sleepy", command("sleepy"))
    steps.settings.add_server(server)
    asked: list[ToolApproval] = []
    steps.approval_opened.connect(asked.append)
    cid = _new_chat_with(window, qtbot, server, "first")
    qtbot.waitUntil(lambda: server.id in steps.listing, timeout=WAIT_MS)
    type_and_send(qtbot, window, "Wait for me")
    _click(_approval(qtbot, window, asked), "allowOnceButton")
    qtbot.wait(300)  # the call is running (it never returns)
    assert window.controller.is_busy(cid)
    t0 = time.monotonic()
    qtbot.mouseClick(stop_button(window), Qt.MouseButton.LeftButton)
    wait_idle(qtbot, window, cid)
    assert time.monotonic() - t0 < 1.0
    branch = window.controller.storage.active_branch(cid)
    assert [m.role for m in branch] == ["user", "assistant", "tool"]
    assert branch[2].content == stopped_message("wait", running=True)
    assert window.controller.failure(cid) is None
