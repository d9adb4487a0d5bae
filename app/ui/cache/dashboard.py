"""``CacheDashboard``: the Cache work area (docs/design.md §5) — what is kept, why, and what it saves.

Given only an ``Engine``, it shows the cache rows (live, from the store's notifications),
tier usage and quotas, counters and their history, the prefix tree of one model's
conversations, and the scheduler of every loaded model. Models may be loaded and unloaded
while it lives: the list is re-read every second. Store actions run on a worker thread.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from PySide6.QtCore import QEvent, Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QProgressBar,
    QScrollArea,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from app.cache.contents.index import Row
from app.conversation.accounting import HitAccount, HitTotals
from app.engine.errors import NotFound
from app.ui.cache import style
from app.ui.cache.actions import CacheActions
from app.ui.cache.feed import CacheFeed
from app.ui.cache.memory_bar import MemoryBar
from app.ui.cache.reuse_panel import PastRequests, ReusePanel
from app.ui.cache.rows_panel import RowsPanel
from app.ui.cache.scheduler_panel import SchedulerPanel, SessionNamer
from app.ui.cache.stats_panel import StatsHistory, StatsPanel
from app.ui.cache.tiers_panel import TiersPanel
from app.ui.cache.tree_panel import TreePanel
from app.ui.engine_api import EngineApi, ModelApi
from app.ui.qt_models.cache_rows import CacheRowsModel
from app.ui.state.previews import Detokenizer, PreviewCache
from app.ui.state.row_state import CacheRowState
from app.ui.state.titles import ConversationTitles

log = logging.getLogger(__name__)

STATS_MS = 1000
SCHEDULER_MS = 250
TAB_ROWS, TAB_SPACE, TAB_TREE, TAB_SCHEDULER, TAB_REUSE = range(5)


class CacheDashboard(QWidget):
    """The Cache area. ``session_namer`` (optional) turns a session id into a conversation
    title for the scheduler view; ``past_requests`` (optional) gives the requests of earlier
    runs for "What was reused" (the chats' stored replies)."""

    action_finished = Signal(str, str)  # action name, message
    action_failed = Signal(str, str)  # action name, error

    def __init__(
        self,
        engine: EngineApi,
        parent: QWidget | None = None,
        *,
        session_namer: SessionNamer | None = None,
        past_requests: PastRequests | None = None,
    ) -> None:
        super().__init__(parent)
        self.setObjectName("cacheDashboard")
        self.setAttribute(Qt.WidgetAttribute.WA_StyledBackground, True)
        self.engine = engine
        self._styling = False
        self._qss = ""
        self._apply_style()  # before the children exist: each is polished once, when shown
        self.store = engine.cache
        self._models: dict[str, ModelApi] = {}
        self._model_by_fp: dict[str, ModelApi] = {}
        self._known_fps: set[str] = set()
        self.refresh_models()

        self.state = CacheRowState()
        self.previews = PreviewCache(self._detokenizer_for)
        self.titles = ConversationTitles(session_namer)
        self.rows_model = CacheRowsModel(self.state, self.previews, self, titles=self.titles)
        self.rows_model.setObjectName("cacheRowsModel")
        self.cache_actions = CacheActions(self.store, self)
        self.history = StatsHistory()
        # Lifetime counters (this session's plus those saved when earlier ones closed), so the
        # savings figures agree with the status bar and survive restarts.
        self.hit_account = HitAccount(self.store)

        self.rows_panel = RowsPanel(self.rows_model, self.previews, self.cache_actions)
        self.tiers_panel = TiersPanel(self.cache_actions)
        self.memory_bar = MemoryBar()  # the one memory budget (issue 54)
        self.stats_panel = StatsPanel()
        self.tree_panel = TreePanel(self.store, self.state, self.previews, self.titles)
        self.scheduler_panel = SchedulerPanel(engine, session_namer)
        self.reuse_panel = ReusePanel(self.titles, past=past_requests)
        self.feed = CacheFeed(self.store, self.state, self)
        self.feed.rows_changed.connect(self._on_rows_changed)

        space = QWidget()
        space.setObjectName("cacheScrollInner")
        space_layout = QVBoxLayout(space)
        space_layout.setContentsMargins(0, 8, 0, 0)
        space_layout.addWidget(self.memory_bar)
        space_layout.addWidget(self.tiers_panel)
        space_layout.addWidget(self.stats_panel, 1)
        space_scroll = QScrollArea()
        space_scroll.setWidgetResizable(True)
        space_scroll.setWidget(space)
        space_scroll.setFrameShape(QScrollArea.Shape.NoFrame)
        space_scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)

        self.tabs = QTabWidget()
        self.tabs.setObjectName("cacheTabs")
        self.tabs.setDocumentMode(True)
        self.tabs.tabBar().setDrawBase(False)
        self.tabs.addTab(self.rows_panel, "Saved conversations")
        self.tabs.addTab(space_scroll, "Space && savings")
        self.tabs.addTab(self.tree_panel, "Conversation tree")
        self.tabs.addTab(self.scheduler_panel, "Live scheduler")
        self.tabs.addTab(self.reuse_panel, "What was reused")
        self.tabs.setTabToolTip(TAB_ROWS, "Every saved point of every conversation, live.")
        self.tabs.setTabToolTip(TAB_SPACE, "How full each storage place is, and how often saved work was reused.")
        self.tabs.setTabToolTip(TAB_TREE, "Which conversations share a beginning.")
        self.tabs.setTabToolTip(TAB_SCHEDULER, "What each loaded model is doing right now.")
        self.tabs.setTabToolTip(TAB_REUSE, "What each recent request reused, and why not more.")
        self.tabs.currentChanged.connect(self._on_tab_changed)

        title = QLabel("Cache")
        title.setObjectName("cacheTitle")
        intro = QLabel(
            "Before a model can answer, it has to read the whole conversation — slow for long "
            "chats. Hearth keeps the result of that reading (the model's working memory, "
            "called a KV cache) so the next message, or the same chat after a restart, "
            "continues instantly. Remote models (added in the Library) have no local KV cache: "
            "their server keeps its own."
        )
        intro.setObjectName("cacheIntro")
        intro.setWordWrap(True)

        self.action_status = QLabel("")
        self.action_status.setObjectName("cacheStatus")
        self.action_progress = QProgressBar()
        self.action_progress.setObjectName("cacheActionProgress")
        self.action_progress.setMaximumWidth(220)
        self.action_progress.setMaximumHeight(14)
        self.action_progress.setVisible(False)
        foot = QHBoxLayout()
        foot.addWidget(self.action_status, 1)
        foot.addWidget(self.action_progress)

        layout = QVBoxLayout(self)
        # NOTE: no minimum size pushed onto a top-level window (the dashboard shown on its
        # own, as in tests): the offscreen platform warns on every size-hint change.
        layout.setSizeConstraint(QVBoxLayout.SizeConstraint.SetNoConstraint)
        layout.setContentsMargins(20, 16, 20, 12)
        layout.addWidget(title)
        layout.addWidget(intro)
        layout.addWidget(self.tabs, 1)
        layout.addLayout(foot)

        self.cache_actions.started.connect(self._on_action_started)
        self.cache_actions.progressed.connect(self._on_action_progressed)
        self.cache_actions.finished.connect(self._on_action_finished)
        self.cache_actions.failed.connect(self._on_action_failed)

        self._stats_timer = QTimer(self)
        self._stats_timer.setInterval(STATS_MS)
        self._stats_timer.timeout.connect(self.sample)
        self._stats_timer.start()
        self._scheduler_timer = QTimer(self)
        self._scheduler_timer.setInterval(SCHEDULER_MS)
        self._scheduler_timer.timeout.connect(self.scheduler_panel.refresh)
        self._apply_colors()
        self.sample()
        self._on_rows_changed()

    # -- public -------------------------------------------------------------------------------

    def refresh_models(self) -> None:
        """Re-read the loaded models (for previews, filters and the scheduler view)."""
        models: dict[str, ModelApi] = {}
        try:
            infos = self.engine.list_models()
        except Exception:  # list_models reads a published mapping: nothing is expected to fail
            log.exception("listing the loaded models failed (a bug)")
            infos = []
        for info in infos:
            try:
                models[info.id] = self.engine.get_model(info.id)
            except NotFound:  # unloaded (on the loader's thread) since list_models
                continue
            except Exception:
                log.exception("reading the loaded model %r failed (a bug)", info.id)
        self._models = models
        by_fp: dict[str, ModelApi] = {}
        for m in models.values():
            try:
                by_fp[m.effective_fingerprint().hex()] = m
            except Exception:  # a pure function of the adapter list: nothing is expected to fail
                log.exception("the fingerprint of model %r failed (a bug)", m.id)
        self._model_by_fp = by_fp
        if set(by_fp) != self._known_fps:  # a model came or went: text can be read anew
            self._known_fps = set(by_fp)
            if hasattr(self, "tree_panel"):
                self.tree_panel.model.reread_text()

    def sample(self) -> None:
        """Take one sample of counters and usage; refresh the numbers and plots."""
        try:
            counters = self.hit_account.counters()
            usage = self.store.tier_usage()
        except Exception:  # in-memory counters and usage under the store's locks: nothing is expected
            log.exception("reading the cache's counters failed (a bug)")
            return
        self.refresh_models()
        self.titles.clear()  # chats may have been renamed; re-read when next shown
        self.history.add(counters)
        self.tiers_panel.update_usage(usage)
        if self.tabs.currentIndex() == TAB_SPACE:
            self.refresh_memory()
        self.stats_panel.update_stats(self.history)
        self._update_model_lists()
        if self.tabs.currentIndex() == TAB_TREE:
            self.tree_panel.refresh()
        self.reuse_panel.refresh(self._models, HitTotals.from_counters(counters))

    def keep_requests_of(self, model_id: str) -> None:
        """``model_id`` is about to be unloaded: "What was reused" keeps its requests."""
        try:
            model = self.engine.get_model(model_id)
        except Exception:  # not a local model (remote), or gone already: nothing to keep
            return
        self.reuse_panel.keep(model_id, model)

    def select_tab(self, index: int) -> None:
        self.tabs.setCurrentIndex(index)

    def shutdown(self) -> None:
        """Stop timers and store notifications; wait for running actions. Idempotent."""
        self._stats_timer.stop()
        self._scheduler_timer.stop()
        self.feed.close()
        self.cache_actions.wait()

    # -- internals ------------------------------------------------------------------------------

    def _detokenizer_for(self, row: Row) -> Detokenizer | None:
        model = self._models.get(row.model_id) or self._model_by_fp.get(row.fingerprint)
        return None if model is None else model.detokenize

    def _update_model_lists(self) -> None:
        ids = sorted(set(self.state.model_ids()) | set(self._models))
        self.rows_panel.set_model_ids(ids)
        self.tree_panel.set_model_ids(ids)

    def _on_rows_changed(self, *args: object) -> None:
        self._update_model_lists()
        if self.tabs.currentIndex() == TAB_TREE:
            self.tree_panel.refresh()

    def refresh_memory(self) -> None:
        """The memory bar, from the engine's budget (an engine without one: no bar)."""
        status = getattr(self.engine, "memory_status", None)
        self.memory_bar.setVisible(callable(status))
        if callable(status):
            self.memory_bar.update_budget(status())

    def _on_tab_changed(self, index: int) -> None:
        if index == TAB_SPACE:
            self.refresh_memory()
        if index == TAB_TREE:
            self.tree_panel.refresh()
        if index == TAB_SCHEDULER:
            self.scheduler_panel.refresh()
            self._scheduler_timer.start()
        else:
            self._scheduler_timer.stop()

    def _on_action_started(self, name: str) -> None:
        self.action_progress.setRange(0, 0)
        self.action_progress.setVisible(True)
        self.action_status.setText(f"Working: {name}…")

    def _on_action_progressed(self, done: int, total: int) -> None:
        self.action_progress.setRange(0, max(total, 1))
        self.action_progress.setValue(done)

    def _on_action_finished(self, name: str, message: str) -> None:
        self.action_progress.setVisible(False)
        self.action_status.setText(message)
        self.sample()
        self.action_finished.emit(name, message)

    def _on_action_failed(self, name: str, error: str) -> None:
        self.action_progress.setVisible(False)
        self.action_status.setText(f"Could not {name}: {error}")
        self.action_failed.emit(name, error)

    def _apply_style(self) -> None:
        qss = style.stylesheet()
        if qss != self._qss:  # restyling 20,000 table rows is not free: only on a real change
            self._qss = qss
            self.setStyleSheet(qss)
        if hasattr(self, "stats_panel"):
            self._apply_colors()

    def _apply_colors(self) -> None:
        c = style.palette()
        self.rows_model.set_colors(c.muted, c.accent)
        self.stats_panel.apply_colors()
        self.scheduler_panel.apply_colors()

    def changeEvent(self, event: QEvent) -> None:  # noqa: N802 (Qt override)
        if event.type() == QEvent.Type.PaletteChange and not self._styling:
            self._styling = True
            try:
                self._apply_style()
            finally:
                self._styling = False
        super().changeEvent(event)

    # -- convenience for tests and the lead ---------------------------------------------------

    def selected_keys(self) -> Sequence[bytes]:
        return self.rows_panel.selected_keys()
