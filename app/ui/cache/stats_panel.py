"""Counters in words and numbers, and their history as pyqtgraph plots.

``StatsHistory`` (plain Python) keeps one sample per second of the store's counters and
tier usage; ``StatsPanel`` shows the latest numbers and plots the history.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass

import pyqtgraph as pg
from PySide6.QtWidgets import QFrame, QGridLayout, QHBoxLayout, QLabel, QVBoxLayout, QWidget

from app.cache.blobs.tiers import TIERS
from app.conversation.accounting import REUSE_KINDS, HitTotals, count_of
from app.ui.cache import style
from app.ui.state import cache_fmt as fmt

WINDOW_S = 300  # the plots show the last five minutes


@dataclass(frozen=True, slots=True)
class Sample:
    t: float
    hits: int
    misses: int
    bytes_by_tier: tuple[int, ...]

    @property
    def hit_rate(self) -> float | None:
        total = self.hits + self.misses
        return None if total == 0 else self.hits / total


class StatsHistory:
    """The last ``capacity`` samples (one a second: ten minutes by default)."""

    def __init__(self, capacity: int = 600) -> None:
        self.samples: deque[Sample] = deque(maxlen=capacity)
        self.latest: dict[str, int] = {}

    def add(self, counters: dict[str, int], now: float | None = None) -> Sample:
        self.latest = dict(counters)
        totals = HitTotals.from_counters(counters)  # one hit accounting (app.conversation)
        sample = Sample(
            t=time.time() if now is None else now,
            hits=totals.hits,
            misses=totals.misses,
            bytes_by_tier=tuple(counters.get(f"bytes_{t}", 0) for t in TIERS),
        )
        self.samples.append(sample)
        return sample


KIND_KEYS = {"session": "hits_sticky", "live": "hits_live", "cache": "hits_restored", "none": "misses"}
"""The number of each kind of request (``REUSE_KINDS``) is shown under this key."""
RESTORED_PARTS = (
    ("hits_exact", "a saved entry matched token for token"),
    ("hits_resume", "a chat went on from the entry its last turn saved"),
    ("hits_longest_prefix", "the start of a saved entry matched"),
)

# (counter, label, explanation) — what each number means to someone new to KV caches. The
# requests first, by where their reused tokens came from: the same words as under a reply.
NUMBERS = (
    *((KIND_KEYS[k.source], k.label, k.help) for k in REUSE_KINDS),
    ("saves_finish", "Saved at end of reply", fmt.REASON_HELP["finish"]),
    ("saves_cold", "Saved after reading", fmt.REASON_HELP["cold"]),
    ("saves_continued", "Saved mid-reply", fmt.REASON_HELP["continued"]),
    ("saves_evict", "Saved when slot freed", fmt.REASON_HELP["evict"]),
    ("saves_shutdown", "Saved at shutdown", fmt.REASON_HELP["shutdown"]),
    ("saves_dropped", "Saves skipped", "The disk writer was busy, so a save was skipped rather than slow the reply."),
    ("evictions", "Deleted for room", "Entries deleted because their storage place was full."),
    ("demotions", "Moved to disk", "Entries moved from RAM to disk to make room."),
    ("corrupt_files", "Damaged files", "Saved files found damaged and removed (never used)."),
)  # fmt: skip


class StatsPanel(QFrame):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("cacheCard")
        title = QLabel("WHAT THE CACHE SAVED YOU")
        title.setObjectName("cacheSection")
        self.headline = QLabel()
        self.headline.setObjectName("cacheBigNumber")
        self.headline.setWordWrap(True)
        self.subline = QLabel()
        self.subline.setObjectName("cacheCaption")
        self.subline.setWordWrap(True)
        grid = QGridLayout()
        grid.setHorizontalSpacing(18)
        grid.setVerticalSpacing(2)
        self.values: dict[str, QLabel] = {}
        for i, (name, label, tip) in enumerate(NUMBERS):
            value = QLabel("0")
            value.setObjectName(f"counter_{name}")
            value.setProperty("role", "number")
            value.setToolTip(tip)
            text = QLabel(label)
            text.setObjectName("cacheNumberLabel")
            text.setToolTip(tip)
            text.setWordWrap(True)  # "Shared with a running chat" wraps in an 800 px window
            n_kinds = len(REUSE_KINDS)  # the kinds of request on the first row, then the rest
            r, c = (0, i) if i < n_kinds else (1 + (i - n_kinds) // 5, (i - n_kinds) % 5)
            grid.addWidget(value, 2 * r, c)
            grid.addWidget(text, 2 * r + 1, c)
            self.values[name] = value
        self.times = QLabel()
        self.times.setObjectName("cacheCaption")

        self.hit_plot = self._plot("Hits (% of requests)", "Share of requests that were hits: held for their chat, shared with a running chat or restored from the cache.")
        self.hit_curve = self.hit_plot.plot([], [], pen=pg.mkPen("#e8590c", width=2))
        self.hit_plot.setYRange(0, 100)
        self.bytes_plot = self._plot("Stored (MiB)", "bytes held in each place")
        self._bytes_unit = ""
        self.bytes_plot.addLegend(offset=(5, 5))
        self.bytes_curves = [
            self.bytes_plot.plot([], [], pen=pg.mkPen(style.TIER_COLORS[t], width=2), name=fmt.TIER_LABELS[t])
            for t in TIERS
        ]
        plots = QHBoxLayout()
        plots.addWidget(self.hit_plot)
        plots.addWidget(self.bytes_plot)

        layout = QVBoxLayout(self)
        layout.addWidget(title)
        layout.addWidget(self.headline)
        layout.addWidget(self.subline)
        layout.addLayout(grid)
        layout.addWidget(self.times)
        layout.addLayout(plots, 1)
        self.apply_colors()

    def _plot(self, ylabel: str, tip: str) -> pg.PlotWidget:
        plot = pg.PlotWidget()
        plot.setToolTip(tip)
        plot.setMinimumHeight(180)
        plot.setMaximumHeight(240)
        plot.setMenuEnabled(False)
        plot.setMouseEnabled(x=False, y=False)
        plot.hideButtons()
        plot.setLabel("left", ylabel)
        plot.setLabel("bottom", "seconds ago")
        plot.showGrid(x=False, y=True, alpha=0.25)
        plot.setXRange(-WINDOW_S, 0, padding=0.02)
        return plot

    def apply_colors(self) -> None:
        c = style.chart_colors()
        for plot in (self.hit_plot, self.bytes_plot):
            plot.setBackground(c.background)
            for axis in ("left", "bottom"):
                ax = plot.getAxis(axis)
                ax.setPen(pg.mkPen(c.grid))
                ax.setTextPen(pg.mkPen(c.foreground))  # also colours the axis label

    def update_stats(self, history: StatsHistory) -> None:
        counters = history.latest
        for name, label in self.values.items():
            label.setText(f"{counters.get(name, 0):,}")
        for kind in REUSE_KINDS:
            self.values[KIND_KEYS[kind.source]].setText(f"{count_of(kind, counters):,}")
        restored = self.values[KIND_KEYS["cache"]]
        restored.setToolTip(
            REUSE_KINDS[2].help + "\n" + "\n".join(
                f"{counters.get(name, 0):,}: {words}" for name, words in RESTORED_PARTS
            )
        )
        totals = HitTotals.from_counters(counters)
        if totals.requests:
            self.headline.setText(_upper_first(totals.summary()))
            self.subline.setText(totals.explanation())
        else:
            self.headline.setText("No requests yet")
            self.subline.setText("Chat with a model: the numbers below show how often Hearth "
                                 "could skip re-reading a conversation.")
        self.times.setText(
            f"Average time to pack a conversation's memory: "
            f"{fmt.ms(counters.get('pack_total_ns', 0), _n_saves(counters))}  ·  "
            f"to load it back: {fmt.ms(counters.get('load_total_ns', 0), _n_restores(counters))}"
        )
        self._plot_history(history)

    def _plot_history(self, history: StatsHistory) -> None:
        samples = list(history.samples)
        if not samples:
            return
        now = samples[-1].t
        xs = [s.t - now for s in samples]
        rated = [(x, s.hit_rate) for x, s in zip(xs, samples, strict=True) if s.hit_rate is not None]
        self.hit_curve.setData([x for x, _ in rated], [100 * r for _, r in rated if r is not None])
        peak = max((max(s.bytes_by_tier) for s in samples), default=0)
        unit, scale = next(((u, f) for u, f in _UNITS if peak >= f), _UNITS[-1])
        if unit != self._bytes_unit:
            self._bytes_unit = unit
            self.bytes_plot.setLabel("left", f"Stored ({unit})")
        for i, curve in enumerate(self.bytes_curves):
            curve.setData(xs, [s.bytes_by_tier[i] / scale for s in samples])
        self.bytes_plot.setYRange(0, max(1.0, 1.15 * peak / scale), padding=0)


def _upper_first(text: str) -> str:
    return text[:1].upper() + text[1:]


_UNITS = (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10), ("bytes", 1))


def _n_saves(counters: dict[str, int]) -> int:
    """Saves actually written (asked for, minus skipped and duplicates)."""
    asked = sum(counters.get(f"saves_{r}", 0) for r in ("cold", "continued", "finish", "evict", "shutdown"))
    return asked - counters.get("saves_dropped", 0) - counters.get("duplicate_dropped", 0)


def _n_restores(counters: dict[str, int]) -> int:
    """How many restores ``load_total_ns`` timed: the "Restored from the cache" count shown
    beside it (one source), else the store's ``loads``. The store did not count ``loads`` for
    a restore of chunked rows, so "to load it back" said "—" after restores had happened."""
    restored = next(k for k in REUSE_KINDS if k.source == "cache")
    return count_of(restored, counters) or counters.get("loads", 0)
