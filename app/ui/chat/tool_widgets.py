"""The tool loop's widgets: the question before a call runs, and a tool result in the chat."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QCloseEvent
from PySide6.QtWidgets import (
    QDialog,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.storage import Message
from app.ui.chat.message_widget import MessageWidget

PREVIEW_CHARS = 20_000
"""A tool result longer than this is shown cut in the chat (the model saw its own bound)."""


class ToolApproval(QDialog):
    """"Allow this call?": Allow once, Always allow this tool in this chat, or Deny (the
    default: Enter or Esc denies). Non-blocking (``open``): ``answered`` says the choice —
    ``once``, ``always`` or ``deny``."""

    answered = Signal(str)

    def __init__(self, tool: str, server: str, arguments: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("toolApprovalDialog")
        self.setWindowTitle("Allow a tool call?")
        self.setModal(True)
        self._sent = False
        layout = QVBoxLayout(self)
        layout.setSizeConstraint(QVBoxLayout.SizeConstraint.SetNoConstraint)  # (offscreen warns otherwise)
        self.resize(480, 320)
        head = QLabel(f"The model wants to call <b>{_esc(tool)}</b> on the MCP server <b>{_esc(server)}</b>.")
        head.setObjectName("toolApprovalText")
        head.setWordWrap(True)
        layout.addWidget(head)
        args = QPlainTextEdit(arguments)
        args.setObjectName("toolApprovalArguments")
        args.setReadOnly(True)
        args.setMinimumHeight(120)
        layout.addWidget(args)
        note = QLabel("The server runs with your rights on this computer. Allow only what you "
                      "would do yourself.")  # fmt: skip
        note.setObjectName("toolApprovalNote")
        note.setWordWrap(True)
        layout.addWidget(note)
        row = QHBoxLayout()
        self.deny_button = self._button("Deny", "denyButton", "deny", row)
        row.addStretch(1)
        self._button(f"Always allow {tool} in this chat", "alwaysAllowButton", "always", row)
        self._button("Allow once", "allowOnceButton", "once", row)
        layout.addLayout(row)
        self.deny_button.setDefault(True)
        self.deny_button.setFocus()
        self.tool, self.arguments = tool, arguments

    def _button(self, text: str, name: str, choice: str, row: QHBoxLayout) -> QPushButton:
        btn = QPushButton(text)
        btn.setObjectName(name)
        btn.setAutoDefault(False)
        btn.clicked.connect(lambda: self._answer(choice))
        row.addWidget(btn)
        return btn

    def _answer(self, choice: str) -> None:
        if not self._sent:
            self._sent = True
            self.answered.emit(choice)
        self.accept()

    def reject(self) -> None:  # Esc, or the window's close button: deny
        self._answer("deny")

    def closeEvent(self, event: QCloseEvent) -> None:  # noqa: N802 - Qt override
        self._answer("deny")
        event.accept()

    def close_unanswered(self) -> None:
        """Stop pressed while asking: close without an answer."""
        self._sent = True
        self.done(QDialog.DialogCode.Rejected)


class ToolMessageWidget(MessageWidget):
    """A tool result: one line ("Result of add"), the text folded under it."""

    def __init__(self, msg: Message, name: str, position: tuple[int, int], parent: QWidget | None = None) -> None:
        # NOTE: the body is rendered when first unfolded: a code block built at once added
        # tens of ms to the GUI thread's turn that shows a result (or a failed call's card).
        super().__init__("tool", "", message_id=msg.id, branch=position,
                         label=f"Tool · {name}" if name else "Tool", parent=parent)  # fmt: skip
        self.result = msg.content
        self.setObjectName("toolMessage")
        regen = self.action_buttons.pop("regenerate", None)
        if regen is not None:
            regen.hide()
        self.toggle = QToolButton()
        self.toggle.setObjectName("toolResultToggle")
        self.toggle.setCheckable(True)
        self.toggle.setCursor(Qt.CursorShape.PointingHandCursor)
        self.toggle.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.toggle.setArrowType(Qt.ArrowType.RightArrow)
        first = msg.content.strip().splitlines()[0] if msg.content.strip() else "(empty)"
        # short: the button is as wide as its text, and a wide one widened the chat column past
        # the window (the tool-hostile screenshots)
        self.toggle.setText(f"Result of {name or 'the call'}: {first[:40]}{'…' if len(first) > 40 else ''}")
        self.toggle.setToolTip(first[:300])
        self.toggle.toggled.connect(self._on_toggled)
        self._layout.insertWidget(self._layout.indexOf(self.body), self.toggle)
        self.body.hide()

    def _on_toggled(self, shown: bool) -> None:
        if shown and not self.body.source():
            text = self.result if len(self.result) <= PREVIEW_CHARS else self.result[:PREVIEW_CHARS] + "\n…"
            fence = "~~~~" if "~~~" in text else "~~~"
            self.body.set_markdown(f"{fence}\n{text}\n{fence}")
        self.body.setVisible(shown)
        self.toggle.setArrowType(Qt.ArrowType.DownArrow if shown else Qt.ArrowType.RightArrow)


def _esc(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
