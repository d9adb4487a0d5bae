"""The Chat work area: sidebar | header (title, model picker) + chat view + composer |
settings panel."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QByteArray, Qt, QTimer, Signal
from PySide6.QtGui import QTextCursor
from PySide6.QtWidgets import (
    QComboBox,
    QFileDialog,
    QFrame,
    QHBoxLayout,
    QLabel,
    QSplitter,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.conversation.state import NextTurn
from app.conversation.window import OverflowPolicy
from app.conversation.wording import prefill_words
from app.remote.endpoint import is_remote_id
from app.storage import SamplingSettings
from app.ui.chat.adapter_chip import AdapterChip
from app.ui.chat.chat_style import chat_extras_qss
from app.ui.chat.chat_view import ChatView
from app.ui.chat.composer import Composer
from app.ui.chat.controller import ChatController
from app.ui.chat.documents import ChatDocuments, DocumentsBar
from app.ui.chat.narrow_layout import NarrowLayout
from app.ui.chat.settings_panel import SettingsPanel
from app.ui.chat.sidebar import Sidebar
from app.ui.chat.type_ahead import TypeAhead
from app.ui.qt_models.conversation_list import ConversationListModel
from app.ui.theme import current_icon
from app.ui.widgets.elided import ElidedComboBox, ElidedLabel

LIBRARY_ITEM = "\x00library"
UNANSWERED_NOTE = ("Not sent: your last message has no reply yet. Press Retry under it (or "
                   "edit it) first; this message stays here.")


class ChatPage(QWidget):
    current_changed = Signal(str)
    library_requested = Signal()  # the model picker's "Load a model…" entry

    def __init__(self, controller: ChatController, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.controller = controller
        self.current_id: str | None = None
        self.list_model = ConversationListModel(controller.catalog, rename=controller.rename)
        self.sidebar = Sidebar(self.list_model)
        self.chat_view = ChatView(controller)
        self.composer = Composer()
        self.settings_panel = SettingsPanel()
        self.settings_panel.hide()
        self.settings_panel.tools.attach(controller.tools)
        controller.tools.dialog_parent = self  # the approval dialog asks over the chat

        header = QFrame()
        header.setObjectName("chatHeader")
        # NOTE: shortened with "…" to the room the header has (a long title was cut off under
        # the model picker in a narrow window); the whole title is its tooltip.
        self.title_label = ElidedLabel()
        self.title_label.setObjectName("chatTitle")
        # NOTE: at 800 px with the settings open the picker (as wide as a long model name)
        # left the title "W…": the title keeps room for ~14 characters, the picker shrinks
        # first and shortens its text with "…" (the open list shows every name whole).
        self.title_label.ensurePolished()  # its font is the style sheet's (12 pt)
        self.title_label.setMinimumWidth(self.title_label.fontMetrics().horizontalAdvance("n" * 14))
        self.model_picker = ElidedComboBox()
        self.model_picker.setObjectName("modelPicker")
        self.model_picker.setToolTip("The model this chat replies with")
        self.model_picker.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)
        self.model_picker.setMinimumWidth(96)
        self.settings_button = QToolButton()
        self.settings_button.setObjectName("headerButton")
        self.settings_button.setCheckable(True)
        self.settings_button.setText("Settings")
        self.settings_button.setToolTip("System prompt and sampling for this chat")
        self.settings_button.setIcon(current_icon("sliders", "muted"))
        self.settings_button.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.settings_button.toggled.connect(self.settings_panel.setVisible)
        hl = QHBoxLayout(header)
        hl.setContentsMargins(20, 10, 12, 10)
        hl.setSpacing(10)
        hl.addWidget(self.title_label, 1)
        hl.addWidget(self.model_picker)
        self.adapter_chip = AdapterChip()  # LoRA · name ×scale, while the model has adapters
        hl.addWidget(self.adapter_chip)
        hl.addWidget(self.settings_button)

        composer_row = QHBoxLayout()
        composer_row.setContentsMargins(24, 6, 24, 4)
        composer_row.addStretch(1)
        composer_row.addWidget(self.composer, 100)
        composer_row.addStretch(1)
        self.composer.setMaximumWidth(820)
        hint = QLabel("Replies come from a language model and can be wrong.")
        hint.setObjectName("composerHint")
        hint.setAlignment(Qt.AlignmentFlag.AlignCenter)

        panel = QWidget()
        panel.setObjectName("chatPanel")
        pl = QVBoxLayout(panel)
        pl.setContentsMargins(0, 0, 0, 10)
        pl.setSpacing(0)
        pl.addWidget(header)
        self.documents_bar = DocumentsBar()  # the chat's documents (app.ui.chat.documents)
        pl.addWidget(self.documents_bar)
        pl.addWidget(self.chat_view, 1)
        pl.addLayout(composer_row)
        pl.addWidget(hint)

        self.splitter = QSplitter(Qt.Orientation.Horizontal)
        self.splitter.setObjectName("chatSplitter")
        self.splitter.setHandleWidth(1)
        self.splitter.setChildrenCollapsible(False)
        self.splitter.addWidget(self.sidebar)
        self.splitter.addWidget(panel)
        self.splitter.addWidget(self.settings_panel)
        self.splitter.setStretchFactor(0, 0)
        self.splitter.setStretchFactor(1, 1)
        self.splitter.setStretchFactor(2, 0)
        self.splitter.setSizes([260, 900, 300])
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.splitter)
        # In a narrow window the sidebar steps aside while the settings panel is open.
        self.narrow_layout = NarrowLayout(self.splitter, self.sidebar, self.settings_panel)

        self.sidebar.new_requested.connect(self.new_conversation)
        self.sidebar.search_changed.connect(self._on_search_changed)
        self.sidebar.conversation_activated.connect(self.open_conversation)
        self.sidebar.delete_requested.connect(controller.delete)
        self.sidebar.export_requested.connect(self._on_export_requested)
        self.composer.send_requested.connect(self._on_send_requested)
        self.composer.stop_requested.connect(self._on_stop_requested)
        self.settings_panel.settings_edited.connect(self._on_settings_edited)
        controller.busy_changed.connect(self._on_busy_changed)
        controller.conversation_updated.connect(self._on_conversation_updated)
        controller.conversation_deleted.connect(self._on_conversation_deleted)
        controller.models_changed.connect(self.refresh_models)
        controller.context_changed.connect(self._on_context_changed)
        controller.models.count_received.connect(self._on_count_received)
        self.model_picker.activated.connect(self._on_model_picked)
        self.composer.draft_changed.connect(self._on_draft_changed)
        # Type-ahead (docs/user-guide.md): the draft is read into the chat's sequence while it is written.
        self.type_ahead = TypeAhead(controller)
        self.composer.input.textChanged.connect(
            lambda: self.type_ahead.edited(self.current_id, self.composer.input.toPlainText())
        )
        self.composer.input.pasted.connect(
            lambda: self.type_ahead.pasted(self.current_id, self.composer.input.toPlainText())
        )
        self.type_ahead.changed.connect(self._on_read_ahead_changed)
        self.settings_panel.type_ahead_edited.connect(self.type_ahead.set_enabled)
        self.documents = ChatDocuments(self, self)  # attach, drop, paste; read on attach
        self.settings_panel.overflow.policy_edited.connect(self._on_policy_edited)
        self.settings_panel.overflow.default_policy_edited.connect(controller.set_default_policy)
        self._draft_tokens: tuple[str, int] = ("", 0)
        """(the draft's text, its tokens) as last counted."""
        self._counting = ""
        self._drafts: dict[str, str] = {}
        """Chat id → its unsent draft while another chat is open (this session only)."""
        self.setStyleSheet(chat_extras_qss())
        self.refresh_models()
        self.list_model.modelReset.connect(lambda: self.sidebar.select(self.current_id))
        self.list_model.rowsInserted.connect(lambda *_: self.sidebar.select(self.current_id))
        self.list_model.rowsRemoved.connect(lambda *_: self.sidebar.select(self.current_id))
        self.list_model.rowsMoved.connect(lambda *_: self.sidebar.select(self.current_id))

    def refresh_icons(self) -> None:
        self.setStyleSheet(chat_extras_qss())
        self.sidebar.refresh_icons()
        self.settings_button.setIcon(current_icon("sliders", "muted"))
        self.composer.refresh_icons()
        self.chat_view.rerender()

    # -- conversations -------------------------------------------------------------------

    def new_conversation(self) -> str | None:
        conv = self.controller.new_conversation()
        if conv is None:
            return None
        self.open_conversation(conv.id)
        self.composer.input.setFocus()
        return conv.id

    def open_conversation(self, cid: str | None) -> None:
        if cid == self.current_id and cid is not None:
            return
        self.settings_panel.flush()
        conv = self.controller.conversation(cid) if cid else None
        left, text = self.current_id, self.composer.input.toPlainText()
        if left is not None:  # its draft waits for it; the box shows the next chat's own
            self._drafts[left] = text
            if not text.strip():
                del self._drafts[left]
        self.current_id = conv.id if conv else None
        self.sidebar.select(self.current_id)
        self.settings_panel.load(conv)
        self.settings_panel.overflow.load(
            self.current_id,
            self.controller.own_policy(conv.id) if conv is not None else None,
            self.controller.default_policy(),
        )
        self.chat_view.set_conversation(self.current_id)
        self._update_header()
        self.type_ahead.switched(self.current_id)
        if left is not None or (self.current_id or "") in self._drafts:  # (none open: the text stays)
            self._show_draft(self._drafts.pop(self.current_id or "", ""))
        self.settings_panel.set_type_ahead(self.type_ahead.enabled(conv.id) if conv else False)
        self._draft_tokens = ("", 0)
        self.update_meter()
        busy = self.controller.is_busy(self.current_id or "")
        self.composer.set_busy(busy)
        self.model_picker.setEnabled(not busy)
        self.current_changed.emit(self.current_id or "")

    def drafts(self) -> dict[str, str]:
        """Every chat's unsent message (the open chat's as it is in the box)."""
        out = {cid: text for cid, text in self._drafts.items() if text.strip()}
        text = self.composer.input.toPlainText()
        if self.current_id is not None:
            out.pop(self.current_id, None)
            if text.strip():
                out[self.current_id] = text
        return out

    def set_drafts(self, drafts: dict[str, str]) -> None:
        """Put back the unsent messages of an earlier run (the open chat's into the box)."""
        self._drafts.update(drafts)
        if self.current_id is not None and self.current_id in self._drafts:
            self._show_draft(self._drafts.pop(self.current_id))

    def _show_draft(self, text: str) -> None:
        """The open chat's draft in the box, the cursor at its end (type-ahead reads it again:
        what it read before is still in the chat's sequence, so nothing is read twice)."""
        box = self.composer.input
        if box.toPlainText() != text:
            box.setPlainText(text)
            box.moveCursor(QTextCursor.MoveOperation.End)

    def _update_header(self) -> None:
        conv = self.controller.conversation(self.current_id) if self.current_id else None
        self.title_label.set_full_text(conv.title if conv else "Hearth")
        self.refresh_models()

    # -- the chat's model --------------------------------------------------------------------

    def refresh_models(self) -> None:
        """Fill the picker: loaded models, this chat's model if it is not loaded, the Library."""
        picker = self.model_picker
        current = self.controller.model_of(self.current_id)
        loaded = self.controller.models.ids()
        picker.blockSignals(True)
        try:
            picker.clear()
            if current and current not in loaded:
                picker.addItem(f"{self.controller.models.label(current)} (not loaded)", current)
                path = self._model_file(current)
                if path is not None:
                    picker.setItemData(
                        0, f"Pick it to load it from {path}" if path.is_file() else
                        f"Its file was at {path}, which is gone: load another model, or send a "
                        "message and locate it", Qt.ItemDataRole.ToolTipRole,
                    )  # fmt: skip
            for model_id in loaded:
                picker.addItem(self.controller.models.label(model_id), model_id)
            if not current and not loaded:
                picker.addItem("No model loaded", "")
            picker.insertSeparator(picker.count())
            picker.addItem("Load a model…", LIBRARY_ITEM)
            picker.setItemData(
                picker.count() - 1, "Open Models → Library", Qt.ItemDataRole.ToolTipRole
            )
            picker.setCurrentIndex(max(0, picker.findData(current)))
        finally:
            picker.blockSignals(False)
        is_loaded = current in loaded
        if picker.property("loaded") != is_loaded:
            picker.setProperty("loaded", is_loaded)
            picker.style().unpolish(picker)
            picker.style().polish(picker)
        self.settings_panel.form.set_draft_models([
            (m, self.controller.models.label(m)) for m in loaded if m != current and not is_remote_id(m)
        ])  # fmt: skip
        self.update_meter()

    def show_model_loading(self, label: str | None) -> None:
        """While the default model loads, the picker says so; None: back to the chat's model."""
        if label is None:
            self.model_picker.setEnabled(not self.controller.is_busy(self.current_id or ""))
            self.refresh_models()
            return
        self.model_picker.blockSignals(True)
        try:
            self.model_picker.clear()
            self.model_picker.addItem(f"Loading {label}…", "")
        finally:
            self.model_picker.blockSignals(False)
        self.model_picker.setEnabled(False)

    def pick_model(self, model_id: str) -> None:
        """Reply with ``model_id`` in the open chat (and in new chats)."""
        if self.current_id:
            self.controller.set_model(self.current_id, model_id)
        else:
            self.controller.default_model_id = model_id
            self.refresh_models()

    def _on_model_picked(self, index: int) -> None:
        data = self.model_picker.itemData(index)
        if data == LIBRARY_ITEM:
            self.refresh_models()  # put the selection back on the chat's model
            self.library_requested.emit()
        elif isinstance(data, str) and data and data in self.controller.models.ids():
            self.pick_model(data)
        elif isinstance(data, str) and data and self.current_id:
            # "tiny-b (not loaded)": load it again from the file it was last loaded from.
            path = self._model_file(data)
            if path is not None and path.is_file():
                self.controller.model_file_requested.emit(self.current_id, str(path))

    def _model_file(self, model_id: str) -> Path | None:
        files = self.controller.model_files
        return None if files is None or is_remote_id(model_id) else files.get(model_id)

    # -- context meter -----------------------------------------------------------------------

    def _on_read_ahead_changed(self, cid: str) -> None:
        if cid != self.current_id:
            return
        view = self.type_ahead.view(cid)
        long_read = view is not None and view.reading and view.long
        self.composer.show_reading(prefill_words(view.held, view.target, view.rate) if view and long_read else "")
        self.update_meter()

    def _on_context_changed(self, cid: str) -> None:
        if cid == self.current_id:
            self.update_meter()

    def _on_draft_changed(self, text: str) -> None:
        bridge = self.controller.models.get(self.controller.model_of(self.current_id))
        if bridge is None or not text.strip():
            self._draft_tokens = (text, 0)
            self.update_meter()
            return
        self._counting = text
        bridge.count_tokens(self.current_id or "", text)

    def _on_count_received(self, key: str, n: int) -> None:
        if key == (self.current_id or ""):
            self._draft_tokens = (self._counting, n)  # the text last sent to be counted
            self.update_meter()

    def _over_the_limit(self, cid: str, turn: NextTurn, text: str) -> str:
        """Why ``text`` is not sent: under "stop at the limit", the chat's view and the draft
        (as the meter counts them, for this very text) need more than a prompt may use; ""
        when it may be sent (an uncounted draft is sent, and refused after with these words
        if it does not fit)."""
        if turn.policy is not OverflowPolicy.STOP:
            return ""
        use = self.controller.context_use(cid, turn)
        counted, draft = self._draft_tokens
        if use is None or counted.strip() != text:
            return ""
        need = use.used + draft
        if need <= use.limit:
            return ""
        return (f"Not sent: with this message the chat needs about {need:,} tokens, more than the "
                f"{use.limit:,} a prompt may use of the model's {use.n_ctx:,}-token context "
                f"({use.n_ctx - use.limit:,} are kept for the reply), and its policy is “stop at the "
                "limit”. Your message stays here: choose another policy in the chat settings, or "
                "start a new chat.")

    def update_meter(self) -> None:
        cid = self.current_id
        use = self.controller.context_use(cid) if cid else None
        draft = self._draft_tokens[1] if self.composer.input.toPlainText().strip() else 0
        view = self.type_ahead.view(cid)
        ahead = view.read if view is not None and draft else 0
        draft = max(draft, ahead)  # the count may lag the read by a pause
        if use is None:
            bridge = self.controller.models.get(self.controller.model_of(cid))
            n_ctx = bridge.n_ctx if bridge is not None else 0
            used = max(self.controller.last_context_tokens(cid), self.documents.head_tokens(cid)) if cid else 0
            self.composer.meter.set_use(used if n_ctx else None, n_ctx, n_ctx, draft, ahead=ahead)
            return
        policy = self.controller.policy(cid).label if cid else ""
        self.composer.meter.set_use(use.used, use.n_ctx, use.limit, draft, policy, ahead=ahead)

    # -- slots ---------------------------------------------------------------------------

    def _on_send_requested(self, text: str) -> None:
        self.settings_panel.flush()
        cid = self.current_id or self.new_conversation()
        if cid is None:
            return
        turn = self.controller.read_turn(cid)  # the send's one read of the chat
        if turn is None:
            return
        if turn.unanswered and not self.controller.is_busy(cid):  # no second user turn in a row
            self.composer.show_note(UNANSWERED_NOTE)
            return
        over = self._over_the_limit(cid, turn, text) or self.documents.too_big(cid)
        if over:  # the meter is red: say so now rather than fail after sending
            self.composer.show_note(over)
            return
        self.type_ahead.sending(cid)
        if self.controller.send(cid, text, turn):
            self.composer.input.clear()

    def _on_stop_requested(self) -> None:
        if self.current_id:
            self.controller.stop(self.current_id)

    def _on_search_changed(self, text: str) -> None:
        self.controller.refresh(text)

    def _on_busy_changed(self, cid: str, busy: bool) -> None:
        if cid == self.current_id:
            self.composer.set_busy(busy)
            self.model_picker.setEnabled(not busy)  # no model switch under a running reply
            if not busy:
                self.update_meter()

    def _on_conversation_updated(self, cid: str) -> None:
        if cid == self.current_id:
            self._update_header()

    def _on_conversation_deleted(self, cid: str, _title: str) -> None:
        self._drafts.pop(cid, None)
        if cid == self.current_id:
            self.composer.input.clear()  # its draft goes with it
            entries = self.controller.catalog.entries()
            QTimer.singleShot(0, lambda: self.open_conversation(entries[0].id if entries else None))
            self.current_id = None

    def _on_settings_edited(self, cid: str, system_prompt: str, sampling: SamplingSettings) -> None:
        self.controller.update_settings(cid, system_prompt=system_prompt, sampling=sampling)

    def _on_policy_edited(self, cid: str, policy: object) -> None:
        self.controller.set_policy(cid, OverflowPolicy.parse(policy) if policy else None)
        self.update_meter()

    def _on_export_requested(self, cid: str, fmt: str) -> None:
        conv = self.controller.conversation(cid)
        if conv is None:
            return
        suffix, filt = (".json", "JSON (*.json)") if fmt == "json" else (".md", "Markdown (*.md)")
        name = export_file_name(self.controller.export_title(cid))
        path, _ = QFileDialog.getSaveFileName(self, "Export conversation", name + suffix, filt)
        if path:
            self.controller.export(cid, path, fmt)

    # -- persistence of layout -----------------------------------------------------------

    def save_state(self) -> str:
        return bytes(self.splitter.saveState().toBase64().data()).decode("ascii")

    def restore_state(self, state: str | None) -> None:
        if state:
            self.splitter.restoreState(QByteArray.fromBase64(state.encode("ascii")))
        # The settings panel always starts closed; its width is kept in the splitter state.
        self.settings_panel.setVisible(self.settings_button.isChecked())


EXPORT_NAME_MAX = 80
"""Characters of a suggested export file name (before its suffix)."""


def export_file_name(title: str) -> str:
    """A file name from a chat's full title: letters, digits, spaces, "-" and "_" kept, the
    rest "_"; cut at a word boundary past ``EXPORT_NAME_MAX`` (no ellipsis in a file name)."""
    name = " ".join("".join(ch if ch.isalnum() or ch in " -_" else "_" for ch in title).split())
    if len(name) > EXPORT_NAME_MAX:
        cut = name[: EXPORT_NAME_MAX + 1]
        name = cut.rsplit(" ", 1)[0] if " " in cut else cut[:EXPORT_NAME_MAX]
    return name.strip(" _") or "chat"
