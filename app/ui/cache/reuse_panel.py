"""The "What was reused" tab: the last requests of every loaded model and, for each, what it
reused of what Hearth held and why not more, in plain words (``reuse_words``).

Reads each model's ``SchedulerSnapshot.recent_reuse`` (a ring of the last 50 finished
requests, replaced whole after every tick, so reading it needs no lock) whenever the
dashboard samples; the table is rebuilt only when a request finished since.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from PySide6.QtWidgets import (
    QAbstractItemView,
    QHeaderView,
    QLabel,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.engine.events import ReuseRecord
from app.ui.cache.reuse_words import reuse_words
from app.ui.engine_api import ModelApi
from app.ui.state import cache_fmt as fmt
from app.ui.state.titles import ConversationTitles

COLUMNS = ("When", "Conversation", "Model", "What was reused")


class ReusePanel(QWidget):
    def __init__(self, titles: ConversationTitles, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("cacheReusePanel")
        self._titles = titles
        self._shown: tuple[tuple[str, float], ...] = ()
        caption = QLabel(
            "Each request the models answered lately: how much of its prompt came from work "
            "already done (this chat's sequence in memory, another request running, or a "
            "saved conversation) and, when not all of it, why."
        )
        caption.setObjectName("cacheCaption")
        caption.setWordWrap(True)
        self.summary = QLabel("No requests yet.")
        self.summary.setObjectName("cacheStatus")
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setObjectName("cacheReuseTable")
        self.table.setHorizontalHeaderLabels(COLUMNS)
        self.table.verticalHeader().hide()
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setWordWrap(False)
        header = self.table.horizontalHeader()
        header.setStretchLastSection(True)
        for col, width in enumerate((80, 180, 110)):
            header.resizeSection(col, width)
        header.setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 8, 0, 0)
        layout.addWidget(caption)
        layout.addWidget(self.summary)
        layout.addWidget(self.table, 1)

    def refresh(self, models: Mapping[str, ModelApi]) -> None:
        """Show the recent requests of ``models`` (id → Model), newest first."""
        records: list[tuple[str, ReuseRecord]] = []
        for model_id, model in models.items():
            snap = model.snapshot()
            records += [(model_id, r) for r in getattr(snap, "recent_reuse", ())]
        records.sort(key=lambda mr: mr[1].finished_at, reverse=True)
        shown = tuple((m, r.finished_at) for m, r in records)
        if shown == self._shown:
            self._refresh_ages(records)
            return
        self._shown = shown
        self.table.setRowCount(len(records))
        for i, (model_id, rec) in enumerate(records):
            title = self._titles.title(rec.session_id) or ""
            words = reuse_words(
                rec.reuse, rec.prompt_tokens, session_id=rec.session_id, title_of=self._titles.title
            )
            for col, text in enumerate((fmt.age(rec.finished_at), title, model_id, words)):
                item = QTableWidgetItem(text)
                if col == 3:
                    item.setToolTip(words)
                self.table.setItem(i, col, item)
        self._summarise([r for _m, r in records])

    def words(self, row: int) -> str:
        item = self.table.item(row, 3)
        return item.text() if item is not None else ""

    def _refresh_ages(self, records: list[tuple[str, ReuseRecord]]) -> None:
        now = time.time()
        for i, (_m, rec) in enumerate(records):
            item = self.table.item(i, 0)
            if item is not None:
                item.setText(fmt.age(rec.finished_at, now))

    def _summarise(self, records: list[ReuseRecord]) -> None:
        if not records:
            self.summary.setText("No requests yet.")
            return
        prompt = sum(r.prompt_tokens for r in records)
        reused = sum(r.reuse.tokens_reused for r in records)
        warm = sum(1 for r in records if r.reuse.tokens_reused > 0)
        share = f"{100 * reused / prompt:.0f} %" if prompt else "–"
        self.summary.setText(
            f"Last {len(records)} requests: {warm} reused earlier work — {reused:,} of "
            f"{prompt:,} prompt tokens ({share}) were not read again."
        )
