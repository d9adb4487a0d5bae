"""The agent loop on the GUI thread: a reply that ends in tool calls → each call asked about
(``ToolApproval``), run on the MCP host's thread, its result stored as a ``tool`` message →
the model goes on in the same sticky session (``ReplyRunner.start`` from the last result).

The decisions are ``app.tools.loop``'s; this class only sequences them, shows the question and
keeps the chat busy (Stop ends the step: a call not run yet is recorded as stopped, one
running is abandoned). A server that fails costs one error card (``ReplyRunner.report_failure``)
under the failed call's message; Retry there lets the model go on with the error as its result.
"""

from __future__ import annotations

import logging
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from typing import Any

from PySide6.QtCore import QObject, QTimer, Signal
from PySide6.QtWidgets import QWidget

from app.conversation.requests import GenerationRequest
from app.storage import Message, Storage, StorageError
from app.tools.config import ChatTools, ServerConfig, ToolSettings
from app.tools.host import CallResult, ServerStatus, ToolError, ToolHost, ToolInfo
from app.tools.loop import (
    Offer,
    PlannedCall,
    denied_message,
    failed_message,
    needs_consent,
    offer,
    plan_calls,
    problem_message,
    result_message,
    steps_taken,
    stopped_message,
    tool_choice,
)
from app.tools.prompt import calls_in
from app.ui.chat.replies import ReplyHooks, ReplyRunner
from app.ui.chat.tool_widgets import ToolApproval

log = logging.getLogger(__name__)


@dataclass(slots=True)
class _Step:
    """One reply's calls, handled in order."""

    cid: str
    leaf_id: str
    calls: list[PlannedCall]
    chat: ChatTools
    index: int = 0
    stopped: bool = False
    future: Future[Any] | None = None
    dialog: ToolApproval | None = None
    names: list[str] = field(default_factory=list)


class ToolSteps(QObject, ReplyHooks):
    servers_changed = Signal()  # a server was added, removed, started or failed
    approval_opened = Signal(object)  # the ToolApproval dialog asking now
    _done = Signal(object, object)  # (what, future): a host future ended (any thread → GUI)

    def __init__(self, storage: Storage, runner: ReplyRunner) -> None:
        super().__init__()
        self.storage = storage
        self.runner = runner
        self.settings = ToolSettings(storage)
        self.dialog_parent: QWidget | None = None
        self._host: ToolHost | None = None
        self.listing: dict[str, tuple[ToolInfo, ...]] = {}
        self._active: dict[str, _Step] = {}
        self._done.connect(self._on_done)
        runner.hooks = self

    @property
    def host(self) -> ToolHost:
        if self._host is None:
            self._host = ToolHost()  # its thread starts with the first server
        return self._host

    def shutdown(self) -> None:
        for cid in list(self._active):
            self.stop(cid)
        if self._host is not None:
            self._host.shutdown()

    # -- servers ----------------------------------------------------------------------------

    def status(self, server_id: str) -> ServerStatus:
        if self._host is None:
            return ServerStatus(server_id, "stopped")
        return self._host.status(server_id)

    def start_server(self, server: ServerConfig) -> None:
        if self.status(server.id).state in ("starting", "running"):
            return
        future = self.host.start(server)
        self.servers_changed.emit()
        future.add_done_callback(lambda f: self._done.emit(("started", server.id), f))

    def start_chat_servers(self, cid: str) -> None:
        """Start the servers a chat uses (when it is opened, or one is enabled in it)."""
        chat = self._chat(cid)
        for server in self.settings.servers():
            if server.id in chat.servers:
                self.start_server(server)

    def remove_server(self, server_id: str) -> None:
        self.settings.remove_server(server_id)
        self.listing.pop(server_id, None)
        if self._host is not None:
            self._host.stop(server_id)
        self.servers_changed.emit()

    def _chat(self, cid: str) -> ChatTools:
        try:
            return self.settings.chat(cid)
        except StorageError as exc:
            log.warning("could not read the tools of %s: %s", cid, exc)
            return ChatTools()

    def _offer(self, chat: ChatTools) -> Offer:
        servers = [s for s in self.settings.servers() if s.id in chat.servers]
        return offer([(s, self.listing[s.id]) for s in servers if s.id in self.listing])

    # -- ReplyHooks ---------------------------------------------------------------------------

    def request(self, cid: str, history: list[Message], request: GenerationRequest) -> GenerationRequest:
        chat = self._chat(cid)
        if not chat.servers:
            return request
        tools = self._offer(chat)
        if not tools.specs:
            self.start_chat_servers(cid)  # offered from the next request on
            return request
        roles = [m.role for m in history]
        choice = tool_choice(chat, roles)
        if steps_taken(roles) >= self.settings.limits().max_steps:
            choice = "auto"
        return replace(request, tools=tools.specs, tool_choice=choice)

    def replied(self, cid: str, reply: Message) -> None:
        chat = self._chat(cid)
        if not chat.servers or cid in self._active:
            return
        tools = self._offer(chat)
        calls = calls_in(reply.content, tools.specs) if tools.specs else []
        if not calls:
            return
        step = _Step(cid, reply.id, plan_calls(calls, tools), chat)
        self._active[cid] = step
        self.runner.busy_changed.emit(cid, True)
        self._next(step)

    def busy(self, cid: str) -> bool:
        return cid in self._active

    def stop(self, cid: str) -> None:
        step = self._active.get(cid)
        if step is None:
            return
        step.stopped = True
        running = step.future is not None
        if step.future is not None:
            step.future.cancel()
        if step.dialog is not None:
            step.dialog.close_unanswered()
        if step.index < len(step.calls):
            self._record(step, stopped_message(step.calls[step.index].call.name, running=running))
        self._end(step)

    # -- the step -----------------------------------------------------------------------------

    def _next(self, step: _Step) -> None:
        if step.stopped:
            return
        if step.index >= len(step.calls):
            self._after(step)
            return
        planned = step.calls[step.index]
        if planned.problem:
            self._answered(step, problem_message(planned.call.name, planned.problem))
        elif needs_consent(planned, step.chat):
            self._ask(step, planned)
        else:
            self._run(step, planned)

    def _ask(self, step: _Step, planned: PlannedCall) -> None:
        assert planned.route is not None
        dialog = ToolApproval(planned.call.name, planned.route.server.name, planned.pretty_arguments,
                              self.dialog_parent)  # fmt: skip
        step.dialog = dialog
        dialog.answered.connect(lambda choice: self._on_answer(step, planned, str(choice)))
        dialog.open()
        self.approval_opened.emit(dialog)

    def _on_answer(self, step: _Step, planned: PlannedCall, choice: str) -> None:
        step.dialog = None
        if step.stopped or self._active.get(step.cid) is not step:
            return
        if choice == "deny" or planned.route is None:
            self._answered(step, denied_message(planned.call.name))
            return
        if choice == "always":
            try:
                self.settings.allow_always(step.cid, planned.route.key)
            except StorageError as exc:
                self.runner.error_raised.emit(f"Could not remember the choice: {exc}")
            step.chat = replace(step.chat, always=step.chat.always | {planned.route.key})
        self._run(step, planned)

    def _run(self, step: _Step, planned: PlannedCall) -> None:
        assert planned.route is not None
        timeout = self.settings.limits().timeout_s
        step.future = self.host.call(planned.route.server, planned.route.tool.name, planned.arguments, timeout)
        step.future.add_done_callback(lambda f: self._done.emit(("called", step), f))

    def _on_done(self, what: tuple[str, Any], future: Future[Any]) -> None:
        kind, subject = what
        if kind == "started":
            self._on_started(str(subject), future)
            return
        step: _Step = subject
        if step.stopped or self._active.get(step.cid) is not step or future.cancelled():
            return
        step.future = None
        planned = step.calls[step.index]
        try:
            result: CallResult = future.result()
        except ToolError as exc:
            text = failed_message(planned.call.name, str(exc))
            leaf = self._record(step, text, show=False)
            self._end(step, show=leaf is None)  # the failure's card redraws the chat once
            # NOTE: each in a turn of the event loop of its own: together they held the GUI
            # thread ~110 ms on a loaded machine (the hostile-server journeys' stall meter).
            QTimer.singleShot(0, self.servers_changed.emit)
            if leaf is not None:
                why = f"the tool call failed: {exc}. Retry lets the model go on with this error as the result."
                QTimer.singleShot(0, lambda: self.runner.report_failure(step.cid, leaf, why))
            return
        limit = self.settings.limits().max_result_chars
        self._answered(step, result_message(result.text, result.is_error, limit, result.total_chars))

    def _on_started(self, server_id: str, future: Future[Any]) -> None:
        try:
            self.listing[server_id] = future.result()
        except ToolError as exc:
            log.info("MCP server %s did not start: %s", server_id, exc)
            self.listing.pop(server_id, None)
        self.servers_changed.emit()

    def _answered(self, step: _Step, text: str) -> None:
        if self._record(step, text) is None:
            self._end(step)
            return
        step.index += 1
        self._next(step)

    def _record(self, step: _Step, text: str, *, show: bool = True) -> str | None:
        """Store a call's outcome as a ``tool`` message under the step's leaf; its id.
        ``show``: redraw the chat now (else whoever comes next does)."""
        try:
            msg = self.storage.add_message(step.cid, step.leaf_id, "tool", text)
        except StorageError as exc:
            self.runner.error_raised.emit(f"Could not save the tool result: {exc}")
            return None
        step.leaf_id = msg.id
        if show:
            self.runner.changed.emit(step.cid)
        return msg.id

    def _after(self, step: _Step) -> None:
        """Every call answered: the model goes on, unless the turn used its steps."""
        self._end(step)
        try:
            roles = [m.role for m in self.storage.path_to(step.leaf_id)]
        except StorageError as exc:
            self.runner.error_raised.emit(str(exc))
            return
        limit = self.settings.limits().max_steps
        if steps_taken(roles) >= limit:
            self.runner.report_failure(step.cid, step.leaf_id, f"the reply stopped after {limit} tool steps (the "
                                       "limit in Settings › Tools). Retry lets the model go on.")  # fmt: skip
            return
        self.runner.start(step.cid, step.leaf_id)

    def _end(self, step: _Step, *, show: bool = True) -> None:
        if self._active.get(step.cid) is step:
            del self._active[step.cid]
            self.runner.busy_changed.emit(step.cid, False)
            if show:
                self.runner.changed.emit(step.cid)
