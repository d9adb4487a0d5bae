"""The chat's documents on screen (``app.ui.chat.documents`` runs them): the bar under the
chat's header, one line per document, and file drops onto the chat."""

from __future__ import annotations

from PySide6.QtCore import QEvent, QMimeData, QObject, Qt, Signal
from PySide6.QtGui import QDragEnterEvent, QDropEvent
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.storage import ChatDocument
from app.ui.theme import colors


def local_files(mime: QMimeData) -> list[str]:
    """The local files a drop or a paste carries (none for text)."""
    if not mime.hasUrls():
        return []
    return [u.toLocalFile() for u in mime.urls() if u.isLocalFile() and u.toLocalFile()]


class DocumentsBar(QFrame):
    """Under the chat's header: each document (name, pages, tokens, what holds it) with a ×,
    files being read, why a file was refused, and "New chat with these documents"."""

    new_chat_requested = Signal()
    remove_requested = Signal(object)  # ChatDocument
    pages_requested = Signal()  # "Keep pages…": a page range of the last PDF

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("documentsBar")
        self._rows = QVBoxLayout()
        self._rows.setSpacing(2)
        self.note = QLabel()
        self.note.setObjectName("documentsNote")
        self.note.setWordWrap(True)
        self.note.hide()
        self.new_chat = QPushButton("New chat with these documents")
        self.new_chat.setObjectName("newChatWithDocumentsButton")
        self.new_chat.setToolTip("A new chat that starts from these documents, already read (from the cache)")
        self.new_chat.clicked.connect(self.new_chat_requested)
        self.pages = QPushButton("Keep pages…")
        self.pages.setObjectName("documentPagesButton")
        self.pages.setToolTip("Attach only some pages of the PDF, so that it fits the context")
        self.pages.clicked.connect(self.pages_requested)
        self.pages.hide()
        foot = QHBoxLayout()
        foot.addWidget(self.note, 10)
        foot.addStretch(1)
        foot.addWidget(self.pages, 0, Qt.AlignmentFlag.AlignTop)
        foot.addWidget(self.new_chat, 0, Qt.AlignmentFlag.AlignTop)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(20, 6, 12, 6)
        layout.setSpacing(4)
        layout.addLayout(self._rows)
        layout.addLayout(foot)
        self.refresh_style()
        self.hide()

    def refresh_style(self) -> None:
        c = colors()
        self.setStyleSheet(
            f"QFrame#documentsBar {{ background: {c.window}; border-bottom: 1px solid {c.border}; }}"
            f"QLabel#documentRow {{ color: {c.text}; font-size: 9pt; }}"
            f"QLabel#documentReading {{ color: {c.muted}; font-size: 9pt; }}"
            f"QLabel#documentsNote {{ color: {c.error_text}; font-size: 8.5pt; }}"
        )

    def show_documents(self, rows: list[tuple[ChatDocument, str]], reading: list[str], note: str,
                       pages: bool = False) -> None:  # fmt: skip
        """``rows``: each document and its line; ``reading``: lines of files being read;
        ``pages``: offer "Keep pages…"."""
        self.pages.setVisible(pages)
        while self._rows.count():
            item = self._rows.takeAt(0)
            w = item.widget() if item is not None else None
            if w is not None:
                w.deleteLater()
        for doc, line in rows:
            row = QWidget()
            hl = QHBoxLayout(row)
            hl.setContentsMargins(0, 0, 0, 0)
            label = QLabel(line)
            label.setObjectName("documentRow")
            label.setToolTip(line)
            remove = QToolButton()
            remove.setObjectName("removeDocumentButton")
            remove.setText("×")
            remove.setToolTip(f"Remove {doc.name} from this chat: the next message is read without it "
                              "(the conversation after it is read again, once)")  # fmt: skip
            remove.clicked.connect(lambda _=False, d=doc: self.remove_requested.emit(d))
            hl.addWidget(label, 1)
            hl.addWidget(remove)
            self._rows.addWidget(row)
        for line in reading:
            label = QLabel(line)
            label.setObjectName("documentReading")
            self._rows.addWidget(label)
        self.note.setText(note)
        self.note.setVisible(bool(note))
        self.new_chat.setVisible(bool(rows))
        self.setVisible(bool(rows or reading or note))


def document_line(doc: ChatDocument, tokens: int | None, held: str) -> str:
    """""contract.pdf · 12 pages · 5,120 tokens · read: in this chat's memory"."""
    parts = [doc.name]
    if doc.pages:
        parts.append(f"{doc.pages} page{'s' if doc.pages != 1 else ''}")
    parts.append(f"{tokens:,} tokens" if tokens is not None else f"{len(doc.text):,} characters")
    if held:
        parts.append(held)
    return " · ".join(parts)


class DropFiles(QObject):
    """Files dropped anywhere on ``widget`` (the chat) are attached; text drops are not taken."""

    dropped = Signal(list)

    def __init__(self, widget: QWidget) -> None:
        super().__init__(widget)
        widget.setAcceptDrops(True)
        widget.installEventFilter(self)

    def eventFilter(self, obj: QObject, event: QEvent) -> bool:  # noqa: N802 — Qt override
        if isinstance(event, (QDragEnterEvent, QDropEvent)) and event.type() in (
            QEvent.Type.DragEnter, QEvent.Type.DragMove, QEvent.Type.Drop
        ):
            files = local_files(event.mimeData())
            if not files:
                return False
            event.acceptProposedAction()
            if event.type() == QEvent.Type.Drop:
                self.dropped.emit(files)
            return True
        return False
