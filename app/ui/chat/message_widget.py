"""One message in the chat view: Markdown body with code blocks (``message_body``), folded
thinking, the reply's stats line (in plain words), and its actions (copy, regenerate, edit,
‹ n/m › branch switcher, Continue for a reply cut at the context end). While a reply's
prompt is read, its placeholder shows the progress."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QGuiApplication, QResizeEvent
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QSizePolicy,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.conversation.wording import reply_line, reply_tooltip
from app.storage import Message, ReplyStats
from app.tools.prompt import display_text
from app.ui.chat.edit_keys import EditKeys
from app.ui.chat.long_words import breakable
from app.ui.chat.message_body import MarkdownBody
from app.ui.chat.replies import UNLOADED
from app.ui.theme import current_icon

PHRASE_SEPARATOR = "  ·  "
"""Between the reply line's phrases (``app.conversation.wording.reply_line``)."""
KEPT_PHRASE = 44
"""A phrase up to this long wraps as a whole; a longer one ("reused 22 of 145 prompt tokens
still held for this chat") may break between its words, or the line would not fit a narrow
column."""


class ReplyLine(QLabel):
    """The line under a reply: it wraps between its phrases ("45.1 tok/s", "drafted 2,
    accepted 0"), never inside a short one. ``text()`` is the line as written; what is drawn
    has non-breaking spaces inside the phrases."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._plain = ""

    def setText(self, text: str) -> None:  # noqa: N802 - Qt override
        self._plain = text
        super().setText(PHRASE_SEPARATOR.join(
            part.replace(" ", "\u00a0") if len(part) <= KEPT_PHRASE else part
            for part in text.split(PHRASE_SEPARATOR)
        ))

    def text(self) -> str:
        return self._plain

class BranchSwitcher(QWidget):
    """‹ 2/3 › between a message and its siblings."""

    stepped = Signal(int)

    def __init__(self, position: int, count: int, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("branchSwitcher")
        self.prev_button = _action_button("left", "Previous branch")
        self.next_button = _action_button("right", "Next branch")
        self.label = QLabel(f"{position}/{count}")
        self.label.setObjectName("branchLabel")
        self.prev_button.clicked.connect(lambda: self.stepped.emit(-1))
        self.next_button.clicked.connect(lambda: self.stepped.emit(1))
        self.prev_button.setEnabled(position > 1)
        self.next_button.setEnabled(position < count)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(0)
        layout.addWidget(self.prev_button)
        layout.addWidget(self.label)
        layout.addWidget(self.next_button)


def _action_button(icon_name: str, tip: str) -> QToolButton:
    btn = QToolButton()
    btn.setObjectName("messageAction")
    btn.setIcon(current_icon(icon_name, "muted"))
    btn.setToolTip(tip)
    btn.setCursor(Qt.CursorShape.PointingHandCursor)
    btn.setAutoRaise(True)
    return btn


Describe = Callable[[ReplyStats], str]


class MessageWidget(QFrame):
    """A user or assistant message; ``streaming`` marks the reply being generated."""

    regenerate_requested = Signal(str)
    edit_submitted = Signal(str, str)
    branch_stepped = Signal(str, int)
    continue_requested = Signal(str)

    def __init__(
        self,
        role: str,
        content: str,
        *,
        message_id: str = "",
        thinking: str = "",
        stats: ReplyStats | None = None,
        branch: tuple[int, int] = (1, 1),
        streaming: bool = False,
        label: str = "Assistant",
        describe: Describe | None = None,
        can_continue: bool = False,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self.role = role
        self.message_id = message_id
        self.streaming = streaming
        self.setObjectName("userMessage" if role == "user" else "assistantMessage")
        self._layout = QVBoxLayout(self)
        self._layout.setContentsMargins(0, 0, 0, 0)
        self._layout.setSpacing(6)
        self.thinking_toggle: QToolButton | None = None
        self.thinking_text: QLabel | None = None
        self.meta: QLabel | None = None
        self.editor: QPlainTextEdit | None = None
        self.action_buttons: dict[str, QToolButton] = {}
        self.switcher: BranchSwitcher | None = None
        self.cut_notice: QFrame | None = None
        self.continue_button: QPushButton | None = None
        self.progress: QLabel | None = None
        self._describe = describe or reply_line
        self._can_continue = can_continue
        self.body = MarkdownBody(markdown=role != "user", streaming=streaming)
        if role == "user":
            self._build_user(content, branch)
        else:
            self._build_assistant(content, thinking, stats, branch, label)

    # -- construction --------------------------------------------------------------------

    def _build_user(self, content: str, branch: tuple[int, int]) -> None:
        self.bubble = QFrame()
        self.bubble.setObjectName("userBubble")
        bl = QVBoxLayout(self.bubble)
        bl.setContentsMargins(14, 10, 14, 10)
        bl.addWidget(self.body)
        self.body.set_markdown(content)
        self.bubble.setSizePolicy(QSizePolicy.Policy.Maximum, QSizePolicy.Policy.Preferred)
        row = QHBoxLayout()
        row.addStretch(1)
        row.addWidget(self.bubble, 0)
        self._layout.addLayout(row)
        self._user_row = row
        actions = QHBoxLayout()
        actions.setContentsMargins(0, 0, 0, 0)
        actions.addStretch(1)
        self._add_switcher(actions, branch)
        edit = _action_button("edit", "Edit and branch")
        edit.clicked.connect(self.begin_edit)
        self.action_buttons["edit"] = edit
        actions.addWidget(edit)
        self._layout.addLayout(actions)

    def _build_assistant(
        self,
        content: str,
        thinking: str,
        stats: ReplyStats | None,
        branch: tuple[int, int],
        label: str,
    ) -> None:
        head = QHBoxLayout()
        head.setSpacing(8)
        avatar = QLabel("H")
        avatar.setObjectName("avatar")
        avatar.setAlignment(Qt.AlignmentFlag.AlignCenter)
        avatar.setFixedSize(24, 24)
        name = QLabel(label)
        name.setObjectName("authorLabel")
        head.addWidget(avatar)
        head.addWidget(name)
        head.addStretch(1)
        self._layout.addLayout(head)
        self.thinking_toggle = QToolButton()
        self.thinking_toggle.setObjectName("thinkingToggle")
        self.thinking_toggle.setCheckable(True)
        self.thinking_toggle.setCursor(Qt.CursorShape.PointingHandCursor)
        self.thinking_toggle.toggled.connect(self._on_thinking_toggled)
        self.thinking_text = QLabel()
        self.thinking_text.setObjectName("thinkingText")
        self.thinking_text.setWordWrap(True)
        self.thinking_text.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.thinking_text.hide()
        self._layout.addWidget(self.thinking_toggle)
        self._layout.addWidget(self.thinking_text)
        self.progress = QLabel()
        self.progress.setObjectName("prefillText")
        self.progress.hide()
        self._layout.addWidget(self.progress)
        self._layout.addWidget(self.body)
        self.meta = ReplyLine()
        self.meta.setObjectName("replyMeta")
        # NOTE: the line wraps instead of running past the column's right edge (at 1280 px
        # it held ~110 characters; a cut reply's reason came last and was clipped).
        self.meta.setWordWrap(True)
        actions = QHBoxLayout()
        actions.setContentsMargins(0, 0, 0, 0)
        actions.setSpacing(2)
        copy = _action_button("copy", "Copy reply")
        copy.clicked.connect(lambda: QGuiApplication.clipboard().setText(self.body.source()))
        regen = _action_button("refresh", "Regenerate")
        regen.clicked.connect(lambda: self.regenerate_requested.emit(self.message_id))
        self.action_buttons.update({"copy": copy, "regenerate": regen})
        actions.addWidget(copy)
        actions.addWidget(regen)
        self._actions = actions
        self._add_switcher(actions, branch)
        actions.addSpacing(10)
        actions.addWidget(self.meta, 1)
        self._actions_row = QWidget()
        self._actions_row.setLayout(actions)
        self._layout.addWidget(self._actions_row)
        self.set_content(content, thinking)
        self.set_stats(stats)
        self._add_end_notice(stats)

    def finish(
        self,
        message: Message,
        branch: tuple[int, int] = (1, 1),
        *,
        describe: Describe | None = None,
        can_continue: bool = False,
    ) -> None:
        """The streaming reply was saved as ``message``: show it as a finished reply (its whole
        text, stats line, actions, switcher, why it ended) in this same widget. Building the
        reply anew lays its whole text out again: tens of ms of the GUI thread for a long reply."""
        assert self.role != "user" and self.streaming
        stats = message.stats
        self.message_id = message.id
        self.streaming = False
        self.set_content(message.content, message.thinking)
        if describe is not None:
            self._describe = describe
        self._can_continue = can_continue
        self.set_progress("")
        self.body.finish()
        self._add_switcher(self._actions, branch, index=2)
        self.set_stats(stats)
        self._add_end_notice(stats)
        self._actions_row.show()

    def _add_end_notice(self, stats: ReplyStats | None) -> None:
        if stats is not None and stats.context_full:
            self._add_cut_notice("The reply was cut: the conversation filled the model's context.")
        elif stats is not None and stats.finish_reason == UNLOADED:
            self._add_cut_notice(
                "The reply was interrupted: its model was unloaded while it was writing. "
                "This is what it had written."
            )

    def _add_cut_notice(self, words: str) -> None:
        """Why the reply ends early ("The reply was cut: the context is full") and, on the
        branch's last reply, Continue."""
        self.cut_notice = QFrame()
        self.cut_notice.setObjectName("cutNotice")
        row = QHBoxLayout(self.cut_notice)
        row.setContentsMargins(10, 6, 6, 6)
        text = QLabel(words)
        text.setObjectName("cutNoticeText")
        text.setWordWrap(True)
        row.addWidget(text, 1)
        if self._can_continue:
            self.continue_button = QPushButton("Continue")
            self.continue_button.setObjectName("continueButton")
            self.continue_button.setProperty("class", "secondary")
            self.continue_button.setToolTip(
                "Make room as this chat's overflow policy says, then let the model go on "
                "writing this reply."
            )
            self.continue_button.clicked.connect(
                lambda: self.continue_requested.emit(self.message_id)
            )
            row.addWidget(self.continue_button)
        self._layout.addWidget(self.cut_notice)

    def _add_switcher(self, layout: QHBoxLayout, branch: tuple[int, int], index: int = -1) -> None:
        if branch[1] > 1:
            self.switcher = BranchSwitcher(*branch)
            self.switcher.stepped.connect(
                lambda step: self.branch_stepped.emit(self.message_id, step)
            )
            layout.insertWidget(index, self.switcher)

    # -- updates -------------------------------------------------------------------------

    def set_progress(self, text: str) -> None:
        """A status line above the reply while it streams ("Reading the prompt… 512 / 900")."""
        if self.progress is not None:
            self.progress.setText(text)
            self.progress.setVisible(bool(text))

    def progress_text(self) -> str:
        return self.progress.text() if self.progress is not None and self.progress.isVisible() else ""

    def set_content(self, content: str, thinking: str = "", thinking_done: bool = True) -> None:
        if self.role != "user" and self.streaming and not content and not thinking:
            self.body.set_markdown("…")
        else:
            # a reply that called tools shows each call as its name and readable arguments
            self.body.set_markdown(display_text(content) if self.role == "assistant" else content)
        if self.thinking_toggle is not None and self.thinking_text is not None:
            self.thinking_toggle.setVisible(bool(thinking))
            busy = self.streaming and not thinking_done
            self.thinking_toggle.setText(
                ("▾ " if self.thinking_toggle.isChecked() else "▸ ")
                + ("Thinking…" if busy else "Thought process")
            )
            self.thinking_text.setText(breakable(thinking))
        if self.streaming:
            self._actions_row.hide()

    def set_stats(self, stats: ReplyStats | None) -> None:
        if self.meta is None:
            return
        # NOTE: an empty line rather than a hidden one: it is the row's stretch, which keeps
        # copy / regenerate at the left. A reply kept when its model was unloaded has no
        # speed or reuse figures to show.
        shown = stats is not None and stats.finish_reason != UNLOADED
        self.meta.setText(self._describe(stats) if stats is not None and shown else "")
        self.meta.setToolTip(reply_tooltip(stats) if stats is not None and shown else "")

    def text(self) -> str:
        return self.body.source()

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 — Qt override
        super().resizeEvent(event)
        if self.role == "user":
            self._fit_bubble()

    def _fit_bubble(self) -> None:
        """Size the user bubble to its text, up to 78% of the row, so short lines don't wrap."""
        labels = self.body.findChildren(QLabel)
        if not labels:
            return
        label = labels[0]
        limit = max(120, int(self.width() * 0.78) - 28)
        metrics = label.fontMetrics()
        natural = max(
            (metrics.horizontalAdvance(line) for line in label.text().splitlines()), default=0
        )
        label.setFixedWidth(min(natural + 4, limit))

    def _on_thinking_toggled(self, checked: bool) -> None:
        assert self.thinking_text is not None and self.thinking_toggle is not None
        self.thinking_text.setVisible(checked)
        label = self.thinking_toggle.text()[2:]
        self.thinking_toggle.setText(("▾ " if checked else "▸ ") + label)

    # -- editing (user messages) ---------------------------------------------------------

    def begin_edit(self) -> None:
        if self.editor is not None:
            return
        self.bubble.hide()
        box = QFrame()
        box.setObjectName("editBox")
        bl = QVBoxLayout(box)
        bl.setContentsMargins(12, 10, 12, 10)
        self.editor = QPlainTextEdit(self.body.source())
        self.editor.setObjectName("editInput")
        self.editor.setMinimumHeight(70)
        self.editor.setMaximumHeight(180)
        buttons = QHBoxLayout()
        buttons.addStretch(1)
        cancel = QPushButton("Cancel")
        cancel.setObjectName("secondaryButton")
        save = QPushButton("Send as new branch")
        save.setObjectName("primaryButton")
        cancel.clicked.connect(self._end_edit)
        save.clicked.connect(self._submit_edit)
        save.setToolTip("Send as a new branch (Ctrl+Enter); Esc cancels")
        self.editor.installEventFilter(
            EditKeys(self.editor, submit=self._submit_edit, cancel=self._end_edit)
        )
        buttons.addWidget(cancel)
        buttons.addWidget(save)
        bl.addWidget(self.editor)
        bl.addLayout(buttons)
        self._edit_box = box
        self._layout.insertWidget(1, box)
        self.editor.setFocus()

    def _submit_edit(self) -> None:
        if self.editor is None:
            return
        text = self.editor.toPlainText()
        self._end_edit()
        self.edit_submitted.emit(self.message_id, text)

    def _end_edit(self) -> None:
        if self.editor is None:
            return
        self._edit_box.hide()
        self._edit_box.deleteLater()
        self.editor = None
        self.bubble.show()
