"""The conversation sidebar: new chat, search, the list (``conversationList``) and its menu.

A search that matches nothing shows ``searchEmpty`` ("No chats match …" and Clear search)
instead of a blank list. While the pointer is over the list its rows do not reorder (a reply
finishing elsewhere would otherwise move the row about to be clicked); they settle when the
pointer leaves.
"""

from __future__ import annotations

from PySide6.QtCore import (
    QEvent,
    QModelIndex,
    QObject,
    QPersistentModelIndex,
    QPoint,
    QRect,
    QSize,
    Qt,
    Signal,
)
from PySide6.QtGui import QAction, QColor, QFont, QKeySequence, QPainter, QPainterPath
from PySide6.QtWidgets import (
    QAbstractItemView,
    QFrame,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListView,
    QMenu,
    QPushButton,
    QStackedWidget,
    QStyle,
    QStyledItemDelegate,
    QStyleOptionViewItem,
    QVBoxLayout,
    QWidget,
)

from app.ui.qt_models.conversation_list import AGE_ROLE, BUSY_ROLE, ID_ROLE, ConversationListModel
from app.ui.theme import colors, current_icon


class ConversationDelegate(QStyledItemDelegate):
    ROW_HEIGHT = 38

    def sizeHint(
        self, option: QStyleOptionViewItem, index: QModelIndex | QPersistentModelIndex
    ) -> QSize:  # noqa: N802
        return QSize(option.rect.width(), self.ROW_HEIGHT)

    def paint(
        self,
        painter: QPainter,
        option: QStyleOptionViewItem,
        index: QModelIndex | QPersistentModelIndex,
    ) -> None:
        c = colors()
        painter.save()
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        rect = option.rect.adjusted(6, 2, -6, -2)
        selected = bool(option.state & QStyle.StateFlag.State_Selected)
        hovered = bool(option.state & QStyle.StateFlag.State_MouseOver)
        if selected or hovered:
            path = QPainterPath()
            path.addRoundedRect(rect, 8, 8)
            painter.fillPath(path, QColor(c.selected if selected else c.hover))
        busy = bool(index.data(BUSY_ROLE))
        right = rect.right() - 10
        if busy:
            painter.setPen(Qt.PenStyle.NoPen)
            painter.setBrush(QColor(c.accent))
            painter.drawEllipse(QRect(right - 8, rect.center().y() - 4, 8, 8))
            right -= 16
        else:
            small = QFont(option.font)
            small.setPointSizeF(max(7.0, option.font.pointSizeF() - 1.5))
            painter.setFont(small)
            painter.setPen(QColor(c.faint))
            age = str(index.data(AGE_ROLE) or "")
            width = painter.fontMetrics().horizontalAdvance(age)
            painter.drawText(
                QRect(right - width, rect.top(), width, rect.height()),
                Qt.AlignmentFlag.AlignVCenter,
                age,
            )
            right -= width + 8
        font = QFont(option.font)
        if selected:
            font.setWeight(QFont.Weight.DemiBold)
        painter.setFont(font)
        painter.setPen(QColor(c.text))
        text_rect = QRect(rect.left() + 10, rect.top(), right - rect.left() - 10, rect.height())
        title = painter.fontMetrics().elidedText(
            str(index.data() or ""), Qt.TextElideMode.ElideRight, text_rect.width()
        )
        painter.drawText(text_rect, Qt.AlignmentFlag.AlignVCenter, title)
        painter.restore()


class Sidebar(QFrame):
    new_requested = Signal()
    search_changed = Signal(str)
    conversation_activated = Signal(str)
    rename_requested = Signal(str)
    delete_requested = Signal(str)
    export_requested = Signal(str, str)  # id, "markdown" | "json"

    def __init__(self, model: ConversationListModel, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("sidebar")
        self.setMinimumWidth(200)
        self.model = model
        title = QLabel("Chats")
        title.setObjectName("sidebarTitle")
        self.new_button = QPushButton("  New chat")
        self.new_button.setObjectName("newChatButton")
        self.new_button.setIcon(current_icon("plus"))
        self.new_button.setCursor(Qt.CursorShape.PointingHandCursor)
        self.new_button.setToolTip("New chat (Ctrl+N)")
        self.new_button.clicked.connect(self.new_requested)
        self.search = QLineEdit()
        self.search.setObjectName("searchField")
        self.search.setPlaceholderText("Search chats")
        self.search.setClearButtonEnabled(True)
        self._search_action = self.search.addAction(
            current_icon("search", "muted"), QLineEdit.ActionPosition.LeadingPosition
        )
        self.search.textChanged.connect(self.search_changed)
        self.list = QListView()
        self.list.setObjectName("conversationList")
        self.list.setModel(model)
        self.list.setItemDelegate(ConversationDelegate(self.list))
        self.list.setMouseTracking(True)
        self.list.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.list.setEditTriggers(
            QAbstractItemView.EditTrigger.EditKeyPressed
            | QAbstractItemView.EditTrigger.DoubleClicked
        )
        self.list.setVerticalScrollMode(QAbstractItemView.ScrollMode.ScrollPerPixel)
        self.list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)  # titles elide
        self.list.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.list.customContextMenuRequested.connect(self._on_context_menu_requested)
        self.list.selectionModel().currentChanged.connect(self._on_current_changed)
        delete = QAction("Delete", self.list)
        delete.setShortcut(QKeySequence.StandardKey.Delete)
        delete.setShortcutContext(Qt.ShortcutContext.WidgetShortcut)
        delete.triggered.connect(self._on_delete_shortcut)
        self.list.addAction(delete)
        self.list.viewport().installEventFilter(self)

        self.empty = QWidget()
        self.empty.setObjectName("searchEmpty")
        self.empty_label = QLabel()
        self.empty_label.setObjectName("searchEmptyText")
        self.empty_label.setWordWrap(True)
        self.empty_label.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.clear_search_button = QPushButton("Clear search")
        self.clear_search_button.setObjectName("clearSearchButton")
        self.clear_search_button.setProperty("class", "secondary")
        self.clear_search_button.setCursor(Qt.CursorShape.PointingHandCursor)
        self.clear_search_button.clicked.connect(self.search.clear)
        el = QVBoxLayout(self.empty)
        el.setContentsMargins(8, 24, 8, 8)
        el.setSpacing(10)
        el.addWidget(self.empty_label)
        el.addWidget(self.clear_search_button, 0, Qt.AlignmentFlag.AlignHCenter)
        el.addStretch(1)
        self.list_stack = QStackedWidget()
        self.list_stack.addWidget(self.list)
        self.list_stack.addWidget(self.empty)
        for signal in (model.modelReset, model.rowsInserted, model.rowsRemoved):
            signal.connect(self._update_empty)
        self.search.textChanged.connect(self._update_empty)

        head = QHBoxLayout()
        head.addWidget(title)
        head.addStretch(1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(10, 14, 10, 10)
        layout.setSpacing(10)
        layout.addLayout(head)
        layout.addWidget(self.new_button)
        layout.addWidget(self.search)
        layout.addWidget(self.list_stack, 1)
        self._update_empty()

    def refresh_icons(self) -> None:
        self.new_button.setIcon(current_icon("plus"))
        self._search_action.setIcon(current_icon("search", "muted"))
        self.list.viewport().update()

    def select(self, cid: str | None) -> None:
        row = self.model.row_of(cid) if cid else -1
        sel = self.list.selectionModel()
        if row < 0:
            sel.clearSelection()
            return
        idx = self.model.index(row, 0)
        if self.list.currentIndex() != idx:
            self.list.setCurrentIndex(idx)

    def is_showing_no_results(self) -> bool:
        return self.list_stack.currentWidget() is self.empty

    def _update_empty(self, *_args: object) -> None:
        query = self.search.text().strip()
        none = bool(query) and self.model.rowCount() == 0
        if none:
            shown = query if len(query) <= 40 else query[:39] + "…"
            self.empty_label.setText(f"No chats match “{shown}”.\nTitles and messages are searched.")
        self.list_stack.setCurrentWidget(self.empty if none else self.list)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 — Qt override
        if watched is self.list.viewport():
            if event.type() == QEvent.Type.Enter:
                self.model.hold_order(True)
            elif event.type() == QEvent.Type.Leave:
                self.model.hold_order(False)
        return super().eventFilter(watched, event)

    def current_id(self) -> str | None:
        idx = self.list.currentIndex()
        return str(idx.data(ID_ROLE)) if idx.isValid() else None

    def _on_current_changed(self, current: QModelIndex, _previous: QModelIndex) -> None:
        if current.isValid():
            self.conversation_activated.emit(str(current.data(ID_ROLE)))

    def _on_delete_shortcut(self) -> None:
        cid = self.current_id()
        if cid:
            self.delete_requested.emit(cid)

    def _on_context_menu_requested(self, pos: QPoint) -> None:
        idx = self.list.indexAt(pos)
        if not idx.isValid():
            return
        cid = str(idx.data(ID_ROLE))
        menu = QMenu(self)
        menu.addAction("Rename", lambda: self.list.edit(idx))
        menu.addSeparator()
        menu.addAction("Export as Markdown…", lambda: self.export_requested.emit(cid, "markdown"))
        menu.addAction("Export as JSON…", lambda: self.export_requested.emit(cid, "json"))
        menu.addSeparator()
        menu.addAction("Delete", lambda: self.delete_requested.emit(cid))
        menu.exec(self.list.viewport().mapToGlobal(pos))
