"""The chat view (objectName ``chatView``): the messages of the open conversation.

One :class:`ConversationPage` per recently opened conversation is kept in a stack, so
switching between chats (even while they stream) flips a page instead of rebuilding every
message widget on the GUI thread. When a page's conversation changes (a reply finished, a
branch switched) it is laid out again keeping every message widget that still shows the
same thing; while a reply streams only its :class:`MessageWidget` is updated (updates are
already per-frame). A hidden page catches up when it is shown again.
Where the model's view of a long conversation starts, a divider says that the messages above
it are no longer seen (or are seen as a summary).
"""

from __future__ import annotations

from collections import OrderedDict
from pathlib import Path

from PySide6.QtCore import QEvent, QPoint, Qt, QTimer
from PySide6.QtWidgets import (
    QApplication,
    QFileDialog,
    QFrame,
    QHBoxLayout,
    QLabel,
    QLayout,
    QPushButton,
    QScrollArea,
    QStackedWidget,
    QVBoxLayout,
    QWidget,
)

from app.conversation.window import WindowState
from app.conversation.wording import prefill_words, reply_line
from app.storage import Message, ReplyStats
from app.tools.loop import call_labels
from app.ui.chat.controller import ChatController
from app.ui.chat.message_widget import MessageWidget
from app.ui.chat.replies import UNLOADED
from app.ui.chat.tool_widgets import ToolMessageWidget

MAX_COLUMN_WIDTH = 820
SETTLE_PASSES = 8
"""Layout-request passes when a page is shown (label → body → message → column → page: five
levels deep, with room to spare)."""


class ConversationPage(QScrollArea):
    """The rendered messages of one conversation (or the empty state for ``None``)."""

    def __init__(
        self, controller: ChatController, cid: str | None, parent: QWidget | None = None
    ) -> None:
        super().__init__(parent)
        self.setObjectName("conversationPage")
        self.setWidgetResizable(True)
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self._controller = controller
        self.conversation_id = cid
        self.stale = False
        self._messages: list[MessageWidget] = []
        self._live_widget: MessageWidget | None = None
        self._live_key: tuple[str, float] | None = None  # the live reply the widget shows
        self._keys: dict[str, tuple[object, ...]] = {}  # message id → what its widget shows
        self.divider: QFrame | None = None
        self._stick_to_bottom = True
        # (message index, switcher's y in the viewport) to restore after a branch switch
        self._anchor: tuple[int, int] | None = None
        self._anchor_tries = 0
        self._anchor_target: int | None = None

        outer = QWidget()
        outer.setObjectName("chatColumn")
        row = QHBoxLayout(outer)
        # NOTE: no minimum height from the layout: it is the sum of the messages' minimum
        # size hints, which word-wrapped text computes at its narrowest (a 3-exchange chat:
        # 919 px of minimum for 647 px of content), so the scroll area's bottom was blank.
        # The scroll area sizes the page by height-for-width instead (an explicit minimum
        # height keeps it from falling back to the minimum size hint).
        row.setSizeConstraint(QLayout.SizeConstraint.SetNoConstraint)
        outer.setMinimumHeight(1)
        row.setContentsMargins(24, 24, 24, 24)
        self._column = QWidget()
        self._column.setObjectName("chatColumn")
        self._column.setMaximumWidth(MAX_COLUMN_WIDTH)
        self._layout = QVBoxLayout(self._column)
        self._layout.setContentsMargins(0, 0, 0, 0)
        self._layout.setSpacing(22)
        row.addStretch(1)
        row.addWidget(self._column, 100)
        row.addStretch(1)
        self.setWidget(outer)
        bar = self.verticalScrollBar()
        bar.valueChanged.connect(self._on_scrolled)
        bar.rangeChanged.connect(self._on_range_changed)
        self.rerender()

    # -- public --------------------------------------------------------------------------

    def message_widgets(self) -> list[MessageWidget]:
        out = list(self._messages)
        if self._live_widget is not None:
            out.append(self._live_widget)
        return out

    def transcript(self) -> str:
        """Everything a person reads in the view, one message per paragraph."""
        return "\n\n".join(w.text() for w in self.message_widgets())

    def live_widget(self) -> MessageWidget | None:
        return self._live_widget

    def settle_layout(self) -> None:
        """Lay the page out now that it is shown, before it is painted.

        A hidden page ignores layout requests, so what changed while it was hidden (a reply
        that streamed or finished there) is laid out when it is shown, one level of boxes per
        event-loop turn: the column first, still at its old height, squeezed the replies'
        text (the first frames showed it cut at the bottom), and only then did the scroll area
        give it the new height. The pending requests are handled here, a level a pass (a
        page that did not change has none pending: a pass is then a look at the event queue)."""
        for _ in range(SETTLE_PASSES):
            QApplication.sendPostedEvents(None, QEvent.Type.LayoutRequest)

    def rerender(self, *, fresh: bool = False) -> None:
        """Lay the page out again for its conversation as stored now; ``fresh`` builds every
        widget anew (a theme change: icons and code colours are made at construction)."""
        if fresh:
            self._keys, self._live_key = {}, None
        self.stale = False
        # NOTE: no setUpdatesEnabled(False/True) around it: nothing is painted before the
        # event loop runs again anyway, and turning updates back on repaints the whole page.
        self._rebuild()
        if self._anchor is not None:
            QTimer.singleShot(0, self, self._restore_anchor)

    def _rebuild(self) -> None:
        # Message widgets whose message, branch position and label are unchanged are kept
        # (and so is the live reply's): a finished reply or a switch back to a chat whose
        # reply finished while hidden builds only what is new. Building a long reply's
        # widgets (Markdown labels, style polish, text layout) took ~60-600 ms of the GUI
        # thread on a loaded machine; reusing them, none.
        kept = {w.message_id: w for w in self._messages}
        kept_live, live_key = self._live_widget, self._live_key
        self._messages, self._live_widget, self._live_key = [], None, None
        shown: list[QWidget] = []
        cid = self.conversation_id
        if cid is None:
            shown.append(
                self._empty_state(
                    "Start a conversation",
                    "Type a message below to start a new chat, or open one from the sidebar.",
                )
            )
            self._show(shown)
            return
        branch = self._controller.branch_with_positions(cid)
        model_id = self._controller.model_of(cid)
        label = self._controller.models.label(model_id) if model_id else "Assistant"
        window = self._controller.window(cid)
        live = self._controller.live_reply(cid)
        self.divider = None
        keys: dict[str, tuple[object, ...]] = {}
        # Continue: the live reply grows from the cut reply's text, in the cut reply's place
        # (it re-streamed a whole copy under it before).
        continuing = (
            live is not None and bool(live.continued) and bool(branch)
            and branch[-1][0].role == "assistant" and branch[-1][0].id == live.leaf_id
        )  # fmt: skip
        calls = call_labels([(m.role, m.content) for m, _ in branch])  # the call each tool message answers
        for i, (msg, position) in enumerate(branch):
            if msg.id == window.start_id and i > 0:
                self.divider = _divider(window)
                shown.append(self.divider)
            last = i == len(branch) - 1
            if last and continuing:
                break
            # Continue is offered on the branch's last reply when it was cut short (the
            # context filled, or its model was unloaded): only then does the offer count.
            cut = msg.stats is not None and (
                msg.stats.context_full or msg.stats.finish_reason == UNLOADED
            )
            can_continue = last and live is None and cut
            key = (msg, position, calls[i] if msg.role == "tool" else label, can_continue)
            widget = kept.pop(msg.id, None)
            if widget is None and last and kept_live is not None and _became(kept_live, live_key, msg):
                # The reply that streamed here was saved: its widget becomes the message's.
                widget, kept_live = kept_live, None
                widget.finish(
                    msg, position, describe=self._describe, can_continue=can_continue
                )
                self._connect(widget)
            elif widget is None or self._keys.get(msg.id) != key:
                widget = self._message_widget(msg, position, str(key[2]), can_continue)
            keys[msg.id] = key
            self._messages.append(widget)
            shown.append(widget)
        self._keys = keys
        if live is not None:
            self._live_key = (live.parent_id, live.started)
            if kept_live is not None and live_key == self._live_key:
                self._live_widget = kept_live
            else:
                self._live_widget = MessageWidget("assistant", "", streaming=True, label=label)
            self._show_live(self._live_widget)
            shown.append(self._live_widget)
        # Every user message ends with a reply, or a card that says why not, with Retry.
        error = self._controller.failure(cid)
        unanswered = bool(branch) and branch[-1][0].role == "user"
        if live is None and (error or unanswered):
            shown.append(self._error_card(error))
        if not branch and live is None:
            shown.append(
                self._empty_state(
                    "How can I help?", "Ask anything. Replies stream from the local model."
                )
            )
        self._show(shown)
        busy = self._controller.is_busy(cid)
        for w in self._messages:
            for btn in w.action_buttons.values():
                btn.setEnabled(not busy)
            if w.switcher is not None:
                w.switcher.setEnabled(not busy)

    def _message_widget(
        self, msg: Message, position: tuple[int, int], label: str, can_continue: bool
    ) -> MessageWidget:
        if msg.role == "tool":  # ``label``: the tool's name
            tool = ToolMessageWidget(msg, label, position)
            self._connect(tool)
            return tool
        widget = MessageWidget(
            msg.role,
            msg.content,
            message_id=msg.id,
            thinking=msg.thinking,
            stats=msg.stats,
            branch=position,
            label=label,
            describe=self._describe,
            can_continue=can_continue,
        )
        self._connect(widget)
        return widget

    def _connect(self, widget: MessageWidget) -> None:
        widget.regenerate_requested.connect(self._on_regenerate_requested)
        widget.edit_submitted.connect(self._on_edit_submitted)
        widget.branch_stepped.connect(self._on_branch_stepped)
        widget.continue_requested.connect(self._on_continue_requested)

    def _show(self, widgets: list[QWidget]) -> None:
        """Lay out ``widgets`` (then a stretch); whatever was shown before and is not among
        them is deleted."""
        # NOTE: the items that stay in place are not taken out: re-adding a widget makes
        # the layout measure every wrapped label again (~50 ms for a long chat, loaded).
        layout = self._layout
        same = 0
        while same < min(len(widgets), layout.count()):
            item = layout.itemAt(same)
            if item is None or item.widget() is not widgets[same]:
                break
            same += 1
        tail = layout.itemAt(same) if same == len(widgets) == layout.count() - 1 else None
        if tail is not None and tail.spacerItem() is not None:
            return  # nothing moved: the layout is not invalidated
        keep = {id(w) for w in widgets}
        while layout.count() > same:
            item = layout.itemAt(same)
            w = item.widget() if item is not None else None
            if w is None:
                layout.takeAt(same)  # the stretch
                continue
            # NOTE: removeWidget, not takeAt: it deletes the layout's item for the widget.
            # An item taken out and left alive stayed the widget's own (Qt gives a widget to
            # a new item only when it has none), so the widget's size changes went to that
            # stale item: a continued reply that grew as it finished kept its old height in
            # the column, its end hidden under its line until the next resize.
            layout.removeWidget(w)
            if id(w) not in keep:
                w.hide()
                w.deleteLater()
        for w in widgets[same:]:
            layout.addWidget(w)
        layout.addStretch(1)

    def sync_live(self) -> None:
        """Show the live reply's latest text (called per frame while this page is visible)."""
        live = self._controller.live_reply(self.conversation_id or "")
        if live is None:
            return
        if self._live_widget is None:
            self.rerender()
            return
        self._show_live(self._live_widget)

    def _show_live(self, widget: MessageWidget) -> None:
        live = self._controller.live_reply(self.conversation_id or "")
        if live is None:
            return
        widget.set_content(live.text, live.thinking, live.thinking_done)
        if live.summarising:
            widget.set_progress("Summarising the older messages for the model…")
        elif live.prefill is not None and live.text == live.continued:
            widget.set_progress(prefill_words(*live.prefill, live.prefill_rate))
        else:
            widget.set_progress("")

    def _describe(self, stats: ReplyStats) -> str:
        return reply_line(stats, self.conversation_id or "", self._controller.title_of)

    # -- slots ---------------------------------------------------------------------------

    def _on_regenerate_requested(self, message_id: str) -> None:
        if self.conversation_id:
            self._stick_to_bottom = True
            self._controller.regenerate(self.conversation_id, message_id)

    def _on_edit_submitted(self, message_id: str, text: str) -> None:
        if self.conversation_id:
            self._stick_to_bottom = True
            QTimer.singleShot(
                0, lambda: self._controller.edit(self.conversation_id or "", message_id, text)
            )

    def _on_continue_requested(self, message_id: str) -> None:
        if self.conversation_id:
            cid = self.conversation_id
            self._stick_to_bottom = True
            QTimer.singleShot(0, lambda: self._controller.continue_reply(cid, message_id))

    def _on_branch_stepped(self, message_id: str, step: int) -> None:
        # NOTE: the page is rebuilt for the new branch; remember where the switcher was on
        # screen so the new sibling's switcher lands in the same place (the content above
        # it is the same), instead of the view jumping to the bottom.
        for i, w in enumerate(self._messages):
            if w.message_id == message_id and w.switcher is not None:
                y = w.switcher.mapTo(self.viewport(), QPoint(0, 0)).y()
                self._anchor = (i, y)
                self._stick_to_bottom = False
                break
        if self.conversation_id:
            cid = self.conversation_id
            QTimer.singleShot(0, lambda: self._controller.switch_branch(cid, message_id, step))

    def _on_scrolled(self, value: int) -> None:
        if self._anchor is not None:
            return  # a rebuild in progress moves the bar; the anchor decides
        bar = self.verticalScrollBar()
        self._stick_to_bottom = value >= bar.maximum() - 24

    def _on_range_changed(self, _lo: int, hi: int) -> None:
        if self._anchor is not None:
            self._restore_anchor()
        elif self._stick_to_bottom:
            self.verticalScrollBar().setValue(hi)

    def _restore_anchor(self) -> None:
        """Scroll so the switcher of the message at the anchored index is where it was.

        Wrapped text settles over a few layout passes, so this runs on every range change
        and then once per event-loop turn until the position holds (at most 20 turns).
        """
        if self._anchor is None:
            return
        index, y = self._anchor
        if index >= len(self._messages) or self._messages[index].switcher is None:
            self._anchor = None
            return
        inner = self.widget()
        layout = inner.layout() if inner is not None else None
        if inner is None or layout is None:
            return
        layout.activate()
        switcher = self._messages[index].switcher
        assert switcher is not None
        target = switcher.mapTo(inner, QPoint(0, 0)).y() - y
        bar = self.verticalScrollBar()
        # Settled: the same target twice running, and the bar could reach it.
        settled = target == self._anchor_target and 0 <= target <= bar.maximum()
        self._anchor_target = target
        bar.setValue(target)
        self._anchor_tries += 1
        if settled or self._anchor_tries >= 20:
            self._anchor = None
            self._anchor_tries = 0
            self._anchor_target = None
            self._stick_to_bottom = bar.value() >= bar.maximum() - 24
        else:
            QTimer.singleShot(0, self, self._restore_anchor)

    # -- helpers -------------------------------------------------------------------------

    def _empty_state(self, title: str, hint: str) -> QWidget:
        box = QWidget()
        layout = QVBoxLayout(box)
        layout.setContentsMargins(0, 80, 0, 0)
        t = QLabel(title)
        t.setObjectName("emptyTitle")
        t.setAlignment(Qt.AlignmentFlag.AlignCenter)
        h = QLabel(hint)
        h.setObjectName("emptyHint")
        h.setAlignment(Qt.AlignmentFlag.AlignCenter)
        layout.addWidget(t)
        layout.addWidget(h)
        return box

    def _error_card(self, error: str | None) -> QWidget:
        """Why the last message has no reply (``None``: it has none yet), with Retry."""
        card = QFrame()
        card.setObjectName("errorCard" if error else "unansweredCard")
        layout = QHBoxLayout(card)
        layout.setContentsMargins(14, 10, 10, 10)
        text = QLabel(
            f"The reply failed: {error}" if error else "This message has no reply yet."
        )
        text.setObjectName("errorCardText" if error else "unansweredText")
        text.setWordWrap(True)
        retry = QPushButton("Retry")
        retry.setObjectName("retryButton")
        retry.setProperty("class", "secondary")
        retry.clicked.connect(self._on_retry_clicked)
        layout.addWidget(text, 1)
        path = self._controller.model_file(self.conversation_id)
        if path is not None:  # its model is not loaded: load it again, or find its file
            gone = not path.is_file()
            if gone:
                text.setText(f"{text.text()} Its file was at {path}, which is gone.")
            button = QPushButton("Locate…" if gone else f"Load {self._controller.model_of(self.conversation_id)}")
            button.setObjectName("locateModelButton" if gone else "loadModelButton")
            button.setToolTip(f"Find {path.name} (or another model) and load it for this chat."
                              if gone else f"Load {path} for this chat.")
            button.setProperty("class", "secondary")
            button.clicked.connect(lambda: self._on_model_file_clicked(path, gone))
            layout.addWidget(button)
        layout.addWidget(retry)
        return card

    def _on_model_file_clicked(self, path: Path, gone: bool) -> None:
        cid = self.conversation_id
        if not cid:
            return
        if gone:
            start = next((str(p) for p in (path.parent, Path.home()) if p.is_dir()), "")
            chosen, _filter = QFileDialog.getOpenFileName(
                self, f"Where is {path.name}?", start, "GGUF models (*.gguf);;All files (*)"
            )
            if not chosen:
                return
            path = Path(chosen)
        self._controller.model_file_requested.emit(cid, str(path))

    def _on_retry_clicked(self) -> None:
        if self.conversation_id:
            cid = self.conversation_id
            QTimer.singleShot(0, lambda: self._controller.retry(cid))


def _became(widget: MessageWidget, live_key: tuple[str, float] | None, msg: Message) -> bool:
    """``msg`` (the branch's last) is the reply ``widget`` streamed: it answers the same
    message. (Its last words may not be in the widget yet: they came with the end.)"""
    return (
        live_key is not None
        and widget.streaming
        and msg.role == "assistant"
        and msg.parent_id == live_key[0]
    )


def _divider(window: WindowState) -> QFrame:
    """The line where older messages leave the model's view (with the summary, if any, or
    why there is none when the chat asked for one)."""
    summary = window.summary
    box = QFrame()
    box.setObjectName("contextDivider")
    layout = QVBoxLayout(box)
    layout.setContentsMargins(0, 0, 0, 0)
    row = QHBoxLayout()
    text = (
        "The model sees the messages above only as this summary"
        if summary
        else "The model no longer sees the messages above this line"
    )
    label = QLabel(text)
    label.setObjectName("dividerText")
    label.setToolTip(
        "This chat outgrew the model's context. Its overflow policy (chat settings) decided "
        "what the model keeps; the system prompt is always kept."
    )
    for part in (_line(), label, _line()):
        row.addWidget(part, 1 if part is not label else 0)
    layout.addLayout(row)
    if summary:
        body = QLabel(summary)
        body.setObjectName("dividerSummary")
        body.setWordWrap(True)
        body.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        layout.addWidget(body)
    elif window.no_summary:
        note = QLabel(
            f"No summary: the one the model wrote {window.no_summary}, so the oldest messages "
            "were dropped instead (as “drop the oldest turns” does)."
        )
        note.setObjectName("dividerNoSummary")
        note.setWordWrap(True)
        layout.addWidget(note)
    return box


def _line() -> QFrame:
    line = QFrame()
    line.setObjectName("dividerLine")
    line.setFrameShape(QFrame.Shape.NoFrame)
    return line


class ChatView(QStackedWidget):
    """The open conversation's page, with the last few pages kept for instant switching."""

    MAX_PAGES = 8

    def __init__(self, controller: ChatController, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("chatView")
        self._controller = controller
        self._pages: OrderedDict[str | None, ConversationPage] = OrderedDict()
        self.conversation_id: str | None = None
        controller.conversation_changed.connect(self._on_conversation_changed)
        controller.reply_progressed.connect(self._on_reply_progressed)
        self.set_conversation(None)

    def page(self) -> ConversationPage:
        page = self.currentWidget()
        assert isinstance(page, ConversationPage)
        return page

    def set_conversation(self, cid: str | None) -> None:
        self.conversation_id = cid
        page = self._pages.get(cid)
        if page is None:
            page = ConversationPage(self._controller, cid)
            self._pages[cid] = page
            self.addWidget(page)
            self._evict()
        else:
            self._pages.move_to_end(cid)
            if page.stale:
                page.rerender()
            else:
                page.sync_live()
        self.setCurrentWidget(page)
        page.settle_layout()

    def page_of(self, cid: str | None) -> ConversationPage | None:
        """The kept page of ``cid`` (None if it has none now)."""
        return self._pages.get(cid)

    def forget(self, cid: str) -> None:
        """Drop a conversation's page (deleted conversation)."""
        page = self._pages.pop(cid, None)
        if page is not None and page is not self.currentWidget():
            self.removeWidget(page)
            page.deleteLater()

    def rerender(self) -> None:
        """Rebuild every kept page (e.g. after a theme change)."""
        for page in self._pages.values():
            page.rerender(fresh=True)

    def message_widgets(self) -> list[MessageWidget]:
        return self.page().message_widgets()

    def transcript(self) -> str:
        """Everything a person reads in the open conversation, one message per paragraph."""
        return self.page().transcript()

    def live_widget(self) -> MessageWidget | None:
        return self.page().live_widget()

    def _evict(self) -> None:
        while len(self._pages) > self.MAX_PAGES:
            cid, page = next(iter(self._pages.items()))
            if page is self.currentWidget():
                self._pages.move_to_end(cid)
                continue
            del self._pages[cid]
            self.removeWidget(page)
            page.deleteLater()

    def _on_conversation_changed(self, cid: str) -> None:
        page = self._pages.get(cid)
        if page is None:
            return
        if page is self.currentWidget():
            page.rerender()
        else:
            page.stale = True  # rebuilt when it is shown again, not while hidden

    def _on_reply_progressed(self, cid: str) -> None:
        # Hidden pages catch up when they are shown again (set_conversation → sync_live).
        if cid == self.conversation_id:
            self.page().sync_live()
