"""The "What was reused" tab: the last requests of every loaded model and, for each, what it
reused of what Hearth held and why not more, in plain words (``reuse_words``).

Reads each model's ``SchedulerSnapshot.recent_reuse`` (a ring of the last 50 finished
requests, replaced whole after every tick, so reading it needs no lock) whenever the
dashboard samples; the table is rebuilt only when a request finished since. Replies written
before this run (the engine's rings start empty) come from the chats' stored replies
(``past``), so the tab is not empty after a restart. Each request is counted the way the
Cache's figures count it ("Counted as": ``app.conversation.accounting``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence

from PySide6.QtWidgets import (
    QAbstractItemView,
    QHeaderView,
    QLabel,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.conversation.accounting import HitTotals, kind_of
from app.engine.events import ReuseRecord
from app.ui.cache.reuse_words import reuse_words
from app.ui.engine_api import ModelApi
from app.ui.state import cache_fmt as fmt
from app.ui.state.titles import ConversationTitles

COLUMNS = ("When", "Conversation", "Model", "Counted as", "What was reused")
WORDS = COLUMNS.index("What was reused")

KEEP_PER_MODEL = 200
"""Requests kept per model this run (its own ring holds its last 50)."""

PastRequests = Callable[[float], Sequence[tuple[str, ReuseRecord]]]
"""Requests finished before a time (unix seconds), newest first: (model id, record)."""


class ReusePanel(QWidget):
    def __init__(
        self,
        titles: ConversationTitles,
        parent: QWidget | None = None,
        *,
        past: PastRequests | None = None,
    ) -> None:
        super().__init__(parent)
        self.setObjectName("cacheReusePanel")
        self._titles = titles
        self._started = time.time()
        self._past: list[tuple[str, ReuseRecord]] | None = None
        self._read_past = past
        self._shown: tuple[tuple[str, float], ...] = ()
        self._seen: dict[str, tuple[ReuseRecord, ...]] = {}
        """Each model's requests this run, kept when it is unloaded (its ring goes with it)."""
        self._totals: HitTotals | None = None
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
        for col, width in enumerate((80, 180, 110, 150)):
            header.resizeSection(col, width)
        header.setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 8, 0, 0)
        layout.addWidget(caption)
        layout.addWidget(self.summary)
        layout.addWidget(self.table, 1)

    def refresh(self, models: Mapping[str, ModelApi], totals: HitTotals | None = None) -> None:
        """Show the recent requests of ``models`` (id → Model), newest first, and of the models
        unloaded since they answered; ``totals``: the cache's counts since it was created
        (the status bar's and the Space tab's), which the summary line gives too."""
        for model_id, model in models.items():
            self.keep(model_id, model)
        records = [(model_id, r) for model_id, recs in self._seen.items() for r in recs]
        records += self._past_records()
        self._totals = totals
        records.sort(key=lambda mr: mr[1].finished_at, reverse=True)
        shown = tuple((m, r.finished_at) for m, r in records)
        if shown == self._shown:
            self._refresh_ages(records)
            self._summarise([r for _m, r in records])
            return
        self._shown = shown
        self.table.setRowCount(len(records))
        for i, (model_id, rec) in enumerate(records):
            title = self._titles.title(rec.session_id) or ""
            words = reuse_words(
                rec.reuse, rec.prompt_tokens, session_id=rec.session_id, title_of=self._titles.title
            )
            kind = kind_of(rec.reuse.source)
            counted = "not counted (remote)" if kind is None else (
                f"{'hit' if kind.is_hit else 'miss'} · {kind.label.lower()}")
            cells = (fmt.age(rec.finished_at), title, model_id, counted, words)
            for col, text in enumerate(cells):
                item = QTableWidgetItem(text)
                if col == WORDS:
                    item.setToolTip(words)
                elif col == WORDS - 1 and kind is not None:
                    item.setToolTip(kind.help)
                self.table.setItem(i, col, item)
        self._summarise([r for _m, r in records])

    def keep(self, model_id: str, model: ModelApi) -> None:
        """Take ``model``'s latest requests into the list (called on each refresh, and by the
        dashboard just before a model is unloaded: its ring goes with it)."""
        recent = tuple(getattr(model.snapshot(), "recent_reuse", ()))
        kept = self._seen.get(model_id, ())
        # A model loaded again starts a new ring: what its last load answered stays too.
        new = [r for r in recent if r not in kept]
        if new:
            self._seen[model_id] = (*kept, *new)[-KEEP_PER_MODEL:]

    def words(self, row: int) -> str:
        item = self.table.item(row, WORDS)
        return item.text() if item is not None else ""

    def counted_as(self, row: int) -> str:
        item = self.table.item(row, WORDS - 1)
        return item.text() if item is not None else ""

    def _past_records(self) -> list[tuple[str, ReuseRecord]]:
        """The requests of earlier runs (read once: they do not change)."""
        if self._past is None:
            self._past = list(self._read_past(self._started)) if self._read_past else []
        return self._past

    def _refresh_ages(self, records: list[tuple[str, ReuseRecord]]) -> None:
        now = time.time()
        for i, (_m, rec) in enumerate(records):
            item = self.table.item(i, 0)
            if item is not None:
                item.setText(fmt.age(rec.finished_at, now))

    def _summarise(self, records: list[ReuseRecord]) -> None:
        """One source for the counts: the line gives the cache's own totals (what the status
        bar and the Space tab say), then how many of those requests the table lists. It used
        to count the listed ones itself ("hits 91 % of 22" beside the status bar's "96 % of
        24"): the table has only what the chats stored and this run's rings hold."""
        listed = HitTotals.of_requests(
            (r.reuse.source, r.prompt_tokens, r.reuse.tokens_reused) for r in records
        )
        totals = self._totals
        if totals is None or not totals.requests:
            if not records:
                self.summary.setText("No requests yet.")
                return
            self.summary.setText(f"The {len(records)} requests below: {listed.summary()}.")
            self.summary.setToolTip(listed.explanation().replace("Since the cache was created.", ""))
            return
        text = f"Since the cache was created: {totals.summary()}."
        if listed.requests < totals.requests:
            text += (f" Below, the {listed.requests:,} of them Hearth still knows: its chats' "
                     "replies and this run's requests of every model.")
        elif records:
            text += " Each of them is below."
        self.summary.setText(text)
        self.summary.setToolTip(totals.explanation())
