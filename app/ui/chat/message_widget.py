"""One message in the chat view: Markdown body with code blocks, folded thinking, the
reply's stats line, and its actions (copy, regenerate, edit, ‹ n/m › branch switcher)."""

from __future__ import annotations

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QFontDatabase, QGuiApplication, QResizeEvent
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

from app.storage import ReplyStats
from app.ui.chat.edit_keys import EditKeys
from app.ui.chat.highlight import highlight_html, plain_html
from app.ui.chat.markdown import Segment, split_markdown
from app.ui.theme import colors, current_icon


class CodeBlock(QFrame):
    """A fenced code block: language, Copy, and the code coloured by Pygments
    (``app.ui.chat.highlight``); a fence still being streamed stays plain until it closes."""

    def __init__(
        self, segment: Segment, parent: QWidget | None = None, *, highlight_open: bool = True
    ) -> None:
        super().__init__(parent)
        self.setObjectName("codeBlock")
        self._code = segment.text
        self._segment = segment
        self._highlight_open = highlight_open
        header = QFrame()
        header.setObjectName("codeHeader")
        self._lang = QLabel(segment.language or "code")
        self._lang.setObjectName("codeLang")
        self.copy_button = QToolButton()
        self.copy_button.setObjectName("copyButton")
        self.copy_button.setText("Copy")
        self.copy_button.setIcon(current_icon("copy", "muted"))
        self.copy_button.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.copy_button.setCursor(Qt.CursorShape.PointingHandCursor)
        self.copy_button.clicked.connect(self._on_copy_clicked)
        self._copied_timer = QTimer(self)
        self._copied_timer.setSingleShot(True)
        self._copied_timer.setInterval(1500)
        self._copied_timer.timeout.connect(lambda: self.copy_button.setText("Copy"))
        hl = QHBoxLayout(header)
        hl.setContentsMargins(12, 4, 6, 4)
        hl.addWidget(self._lang)
        hl.addStretch(1)
        hl.addWidget(self.copy_button)
        self._body = QLabel()
        self._body.setObjectName("codeText")
        self._body.setTextFormat(Qt.TextFormat.RichText)
        self._body.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self._body.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self._body.setWordWrap(True)
        self._render()
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(0)
        layout.addWidget(header)
        layout.addWidget(self._body)

    def code(self) -> str:
        return self._code

    def update_segment(self, segment: Segment) -> None:
        if segment != self._segment:
            self._code = segment.text
            self._segment = segment
            self._render()
        self._lang.setText(segment.language or "code")

    def is_highlighted(self) -> bool:
        return "<span" in self._body.text()

    def _render(self) -> None:
        seg = self._segment
        if seg.closed or self._highlight_open:
            self._body.setText(highlight_html(seg.text, seg.language, dark=colors().name == "dark"))
        else:
            self._body.setText(plain_html(seg.text))

    def _on_copy_clicked(self) -> None:
        QGuiApplication.clipboard().setText(self._code)
        self.copy_button.setText("Copied")
        # A child timer, not a free single shot: it dies with the block (a rerender within
        # 1.5 s deletes it).
        self._copied_timer.start()


class MarkdownBody(QWidget):
    """Prose as Qt Markdown labels, fenced code as :class:`CodeBlock`; updated in place."""

    def __init__(
        self, parent: QWidget | None = None, *, markdown: bool = True, streaming: bool = False
    ) -> None:
        super().__init__(parent)
        self._markdown = markdown
        self._streaming = streaming
        self._layout = QVBoxLayout(self)
        self._layout.setContentsMargins(0, 0, 0, 0)
        self._layout.setSpacing(10)
        self._items: list[tuple[Segment, QWidget]] = []
        self._source = ""

    def source(self) -> str:
        return self._source

    def set_markdown(self, source: str) -> None:
        if source == self._source:
            return
        self._source = source
        segments = split_markdown(source) if self._markdown else [Segment("text", source)]
        for i, seg in enumerate(segments):
            if i < len(self._items):
                old, widget = self._items[i]
                if old == seg:
                    continue
                if old.kind == seg.kind:
                    self._apply(widget, seg)
                    self._items[i] = (seg, widget)
                    continue
                for _s, w in self._items[i:]:
                    w.deleteLater()
                del self._items[i:]
            widget = self._create(seg)
            self._layout.addWidget(widget)
            self._items.append((seg, widget))
        for _s, w in self._items[len(segments) :]:
            w.deleteLater()
        del self._items[len(segments) :]

    def _create(self, seg: Segment) -> QWidget:
        if seg.kind == "code":
            return CodeBlock(seg, highlight_open=not self._streaming)
        label = QLabel()
        label.setObjectName("messageText")
        label.setWordWrap(True)
        label.setTextFormat(
            Qt.TextFormat.MarkdownText if self._markdown else Qt.TextFormat.PlainText
        )
        label.setTextInteractionFlags(
            Qt.TextInteractionFlag.TextSelectableByMouse
            | Qt.TextInteractionFlag.LinksAccessibleByMouse
        )
        label.setOpenExternalLinks(True)
        label.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Minimum)
        label.setText(seg.text)
        return label

    @staticmethod
    def _apply(widget: QWidget, seg: Segment) -> None:
        if isinstance(widget, CodeBlock):
            widget.update_segment(seg)
        elif isinstance(widget, QLabel):
            widget.setText(seg.text)

    def code_blocks(self) -> list[CodeBlock]:
        return [w for _s, w in self._items if isinstance(w, CodeBlock)]


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


def format_stats(stats: ReplyStats) -> str:
    parts = [f"TTFT {stats.ttft_ms:.0f} ms", f"{stats.tokens_per_s:.1f} tok/s"]
    if stats.cache_hit_kind:
        parts.append(f"cache {stats.cache_hit_kind}")
    parts.append(f"KV read {stats.cache_read} · created {stats.cache_created}")
    if stats.finish_reason == "cancelled":
        parts.append("stopped")
    elif stats.finish_reason == "length":
        parts.append("max tokens")
    return "  ·  ".join(parts)


class MessageWidget(QFrame):
    """A user or assistant message; ``streaming`` marks the reply being generated."""

    regenerate_requested = Signal(str)
    edit_submitted = Signal(str, str)
    branch_stepped = Signal(str, int)

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
        self._layout.addWidget(self.body)
        self.meta = QLabel()
        self.meta.setObjectName("replyMeta")
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
        self._add_switcher(actions, branch)
        actions.addSpacing(10)
        actions.addWidget(self.meta)
        actions.addStretch(1)
        self._actions_row = QWidget()
        self._actions_row.setLayout(actions)
        self._layout.addWidget(self._actions_row)
        self.set_content(content, thinking)
        self.set_stats(stats)

    def _add_switcher(self, layout: QHBoxLayout, branch: tuple[int, int]) -> None:
        if branch[1] > 1:
            self.switcher = BranchSwitcher(*branch)
            self.switcher.stepped.connect(
                lambda step: self.branch_stepped.emit(self.message_id, step)
            )
            layout.addWidget(self.switcher)

    # -- updates -------------------------------------------------------------------------

    def set_content(self, content: str, thinking: str = "", thinking_done: bool = True) -> None:
        if self.role != "user" and self.streaming and not content and not thinking:
            self.body.set_markdown("…")
        else:
            self.body.set_markdown(content)
        if self.thinking_toggle is not None and self.thinking_text is not None:
            self.thinking_toggle.setVisible(bool(thinking))
            busy = self.streaming and not thinking_done
            self.thinking_toggle.setText(
                ("▾ " if self.thinking_toggle.isChecked() else "▸ ")
                + ("Thinking…" if busy else "Thought process")
            )
            self.thinking_text.setText(thinking)
        if self.streaming:
            self._actions_row.hide()

    def set_stats(self, stats: ReplyStats | None) -> None:
        if self.meta is None:
            return
        self.meta.setVisible(stats is not None)
        if stats is not None:
            self.meta.setText(format_stats(stats))
            self.meta.setToolTip(
                f"Prompt {stats.prompt_tokens} tokens, reply {stats.completion_tokens} tokens.\n"
                f"Cache hit kind: {stats.cache_hit_kind}; KV restored {stats.cache_read} tokens, "
                f"saved {stats.cache_created} more."
            )

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
