"""Where the user sets tools up: Settings › Tools (the MCP servers, their tools and state, the
loop's limits) and, in a chat's settings, which servers that chat may use (off by default)."""

from __future__ import annotations

import json

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QPlainTextEdit,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from app.storage import StorageError
from app.tools.config import ChatTools, Limits, ServerConfig
from app.tools.host import GUARD_CHARS
from app.ui.chat.sampling_form import section
from app.ui.chat.tool_steps import ToolSteps

RIGHTS_NOTE = ("An MCP server is a program that runs with your rights on this computer: add only "
               "servers you trust. Every call asks you first, unless you allow a tool in a chat.")  # fmt: skip
STATE_WORDS = {"stopped": "not running", "starting": "starting…", "running": "running", "failed": "failed"}
FORCE_CHOICES = (("", "When it wants to"), ("first", "In its first reply"), ("every", "In every reply"))


class ToolsSettings(QWidget):
    """Settings › Tools."""

    def __init__(self, steps: ToolSteps, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("toolsSettings")
        self.steps = steps
        v = QVBoxLayout(self)
        note = QLabel(RIGHTS_NOTE)
        note.setObjectName("toolsRightsNote")
        note.setWordWrap(True)
        v.addWidget(note)
        v.addWidget(section("MCP SERVERS"))
        self.server_list = QListWidget()
        self.server_list.setObjectName("toolServerList")
        v.addWidget(self.server_list, 1)
        self.details = QPlainTextEdit()
        self.details.setObjectName("toolServerDetails")
        self.details.setReadOnly(True)
        self.details.setPlaceholderText("Pick a server to see its tools, or why it failed.")
        v.addWidget(self.details, 1)
        row = QHBoxLayout()
        self.start_button = QPushButton("Start")
        self.start_button.setObjectName("startToolServerButton")
        self.remove_button = QPushButton("Remove")
        self.remove_button.setObjectName("removeToolServerButton")
        row.addWidget(self.start_button)
        row.addWidget(self.remove_button)
        row.addStretch(1)
        v.addLayout(row)
        v.addWidget(section("ADD A SERVER"))
        form = QFormLayout()
        self.name_edit = QLineEdit()
        self.name_edit.setObjectName("toolServerName")
        self.name_edit.setPlaceholderText("calculator")
        self.where_edit = QLineEdit()
        self.where_edit.setObjectName("toolServerCommand")
        self.where_edit.setPlaceholderText("a command (uvx some-mcp-server) or http://127.0.0.1:8000/mcp")
        form.addRow("Name", self.name_edit)
        form.addRow("Command or URL", self.where_edit)
        v.addLayout(form)
        self.add_button = QPushButton("Add server")
        self.add_button.setObjectName("addToolServerButton")
        self.error = QLabel()
        self.error.setObjectName("toolServerError")
        self.error.setWordWrap(True)
        self.error.hide()
        v.addWidget(self.add_button, 0, Qt.AlignmentFlag.AlignLeft)
        v.addWidget(self.error)
        v.addWidget(section("LIMITS"))
        limits = QFormLayout()
        self.max_steps = QSpinBox()
        self.max_steps.setObjectName("toolStepLimit")
        self.max_steps.setRange(1, 100)
        self.timeout = QDoubleSpinBox()
        self.timeout.setObjectName("toolTimeout")
        self.timeout.setRange(0.5, 3600)
        self.timeout.setSuffix(" s")
        self.max_chars = QSpinBox()
        self.max_chars.setObjectName("toolResultChars")
        self.max_chars.setRange(100, GUARD_CHARS)
        self.max_chars.setSingleStep(1000)
        self.max_chars.setSuffix(" characters")
        limits.addRow("Tool steps per reply", self.max_steps)
        limits.addRow("Time for one call", self.timeout)
        limits.addRow("Result shown to the model", self.max_chars)
        v.addLayout(limits)
        current = steps.settings.limits()
        self.max_steps.setValue(current.max_steps)
        self.timeout.setValue(current.timeout_s)
        self.max_chars.setValue(current.max_result_chars)
        for box in (self.max_steps, self.timeout, self.max_chars):
            box.valueChanged.connect(self._save_limits)
        self.add_button.clicked.connect(self.add_server)
        self.remove_button.clicked.connect(self._on_remove)
        self.start_button.clicked.connect(self._on_start)
        self.server_list.currentRowChanged.connect(lambda _row: self._show_details())
        steps.servers_changed.connect(self.refresh)
        self.refresh()

    def add_server(self) -> ServerConfig | None:
        name, where = self.name_edit.text().strip(), self.where_edit.text().strip()
        try:
            if where.startswith(("http://", "https://")):
                server = ServerConfig.http(name, where)
            else:
                server = ServerConfig.stdio(name, where)
            self.steps.settings.add_server(server)
        except (ValueError, StorageError) as exc:
            self.error.setText(f"Not added: {exc}.")
            self.error.show()
            return None
        self.error.hide()
        self.name_edit.clear()
        self.where_edit.clear()
        self.steps.start_server(server)  # lists its tools (or says why it cannot)
        self.refresh()
        self.server_list.setCurrentRow(self.server_list.count() - 1)
        return server

    def refresh(self) -> None:
        row = self.server_list.currentRow()
        self.server_list.clear()
        for server in self.steps.settings.servers():
            state = self.steps.status(server.id).state
            item = QListWidgetItem(f"{server.name} — {STATE_WORDS.get(state, state)}")
            item.setData(Qt.ItemDataRole.UserRole, server.id)
            item.setToolTip(server.where)
            self.server_list.addItem(item)
        if 0 <= row < self.server_list.count():
            self.server_list.setCurrentRow(row)
        self._show_details()

    def _current(self) -> ServerConfig | None:
        item = self.server_list.currentItem()
        return self.steps.settings.server(str(item.data(Qt.ItemDataRole.UserRole))) if item else None

    def _show_details(self) -> None:
        server = self._current()
        self.start_button.setEnabled(server is not None)
        self.remove_button.setEnabled(server is not None)
        if server is None:
            self.details.setPlainText("")
            return
        status = self.steps.status(server.id)
        lines = [f"{server.where}", f"State: {STATE_WORDS.get(status.state, status.state)}"]
        if status.error:
            lines.append(f"Error: {status.error}")
        for tool in self.steps.listing.get(server.id, ()):
            lines += ["", f"• {tool.name}: {tool.description}".rstrip(": "),
                      "  input: " + json.dumps(dict(tool.input_schema), ensure_ascii=False)]  # fmt: skip
        if status.stderr.strip():
            lines += ["", "What it wrote on stderr:", status.stderr.strip()]
        self.details.setPlainText("\n".join(lines))

    def _on_remove(self) -> None:
        server = self._current()
        if server is not None:
            self.steps.remove_server(server.id)

    def _on_start(self) -> None:
        server = self._current()
        if server is not None:
            self.steps.start_server(server)

    def _save_limits(self) -> None:
        limits = Limits(self.max_steps.value(), self.timeout.value(), self.max_chars.value())
        try:
            self.steps.settings.set_limits(limits)
        except StorageError as exc:
            self.error.setText(f"Could not save the limits: {exc}")
            self.error.show()


class ChatToolsBox(QWidget):
    """A chat's TOOLS section: a check box per server (off by default) and whether the model
    must call a tool."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("chatToolsBox")
        self.steps: ToolSteps | None = None
        self._cid: str | None = None
        self._shown: str | None = "-"  # the chat the boxes were made for
        self._v = QVBoxLayout(self)
        self._v.setContentsMargins(0, 0, 0, 0)
        self._v.setSpacing(6)
        self._v.addWidget(section("TOOLS"))
        self.empty = QLabel("No MCP servers yet: add one in Settings › Tools.")
        self.empty.setObjectName("chatToolsEmpty")
        self.empty.setWordWrap(True)
        self._v.addWidget(self.empty)
        self._rows = QVBoxLayout()
        self._v.addLayout(self._rows)
        self.checks: dict[str, QCheckBox] = {}
        force_row = QHBoxLayout()
        force_row.addWidget(QLabel("Call a tool"))
        self.force = QComboBox()
        self.force.setObjectName("chatToolsForce")
        self.force.setToolTip("“In its first reply” makes the model's first reply to each message a "
                              "tool call (for models that do not call tools by themselves).")  # fmt: skip
        for value, text in FORCE_CHOICES:
            self.force.addItem(text, value)
        force_row.addWidget(self.force, 1)
        self._v.addLayout(force_row)
        self.force.activated.connect(self._on_force)

    def attach(self, steps: ToolSteps) -> None:
        self.steps = steps
        steps.servers_changed.connect(self.refresh)
        self.refresh()

    def show_chat(self, cid: str | None) -> None:
        self._cid = cid
        self.refresh()
        if cid and self.steps is not None:
            self.steps.start_chat_servers(cid)

    def refresh(self) -> None:
        steps = self.steps
        servers = steps.settings.servers() if steps is not None else []
        if steps is not None and [s.id for s in servers] == list(self.checks) and self._shown == self._cid:
            for server in servers:  # the same boxes: only their states change
                state = steps.status(server.id).state
                self.checks[server.id].setText(f"{server.name} ({STATE_WORDS.get(state, state)})")
            return
        self._shown = self._cid
        for check in self.checks.values():
            check.setParent(None)  # out of the box now (a search for the boxes finds only the new ones)
            check.deleteLater()
        self.checks.clear()
        chat = steps.settings.chat(self._cid) if steps is not None and self._cid else ChatTools()
        self.empty.setVisible(not servers)
        for server in servers:
            state = steps.status(server.id).state if steps is not None else "stopped"
            check = QCheckBox(f"{server.name} ({STATE_WORDS.get(state, state)})")
            check.setObjectName("chatToolServer")
            check.setProperty("serverId", server.id)
            check.setChecked(server.id in chat.servers)
            check.setEnabled(self._cid is not None)
            check.toggled.connect(lambda on, sid=server.id: self._on_toggled(sid, on))
            self._rows.addWidget(check)
            self.checks[server.id] = check
        self.force.setEnabled(bool(chat.servers))
        self.force.setCurrentIndex(max(0, self.force.findData(chat.force_call)))

    def _on_toggled(self, server_id: str, on: bool) -> None:
        if self.steps is None or self._cid is None:
            return
        self.steps.settings.enable(self._cid, server_id, on)
        self.force.setEnabled(bool(self.steps.settings.chat(self._cid).servers))
        if on:
            self.steps.start_chat_servers(self._cid)

    def _on_force(self, _index: int) -> None:
        if self.steps is None or self._cid is None:
            return
        from dataclasses import replace

        chat = self.steps.settings.chat(self._cid)
        self.steps.settings.set_chat(self._cid, replace(chat, force_call=str(self.force.currentData())))
