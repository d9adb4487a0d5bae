"""The "Live scheduler" tab: per loaded model, its seq slots, queue and recent ticks.

Reads ``Model.snapshot()`` (lock-free, replaced whole after every tick) on a GUI timer;
nothing here ever waits for the scheduler thread.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable

import pyqtgraph as pg
from PySide6.QtWidgets import (
    QFrame,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QScrollArea,
    QVBoxLayout,
    QWidget,
)

from app.engine.errors import NotFound
from app.engine.events import SchedulerSnapshot, SlotInfo
from app.ui.cache import style
from app.ui.engine_api import EngineApi, ModelApi

log = logging.getLogger(__name__)

SessionNamer = Callable[[str], str | None]

STATE_TEXT = {
    "free": "free",
    "prefilling": "reading prompt",
    "generating": "writing reply",
    "pinned": "holding a chat",
    "reading_ahead": "reading ahead",
}
STATE_HELP = {
    "free": "Nothing in this slot: ready for a new conversation.",
    "prefilling": "The model is reading a prompt into this slot's memory.",
    "generating": "The model is writing a reply, one token per step.",
    "pinned": "Idle, but keeps a conversation's memory so its next message starts instantly.",
    "reading_ahead": (
        "Reading a message while it is being written (type-ahead), only when nothing else "
        "needs the model: its reply starts the moment it is sent."
    ),
}
N_TICKS = 60


class SlotChip(QFrame):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("slotChip")
        self.title = QLabel()
        self.state = QLabel()
        self.who = QLabel()
        self.who.setObjectName("cacheCaption")
        layout = QVBoxLayout(self)
        layout.setContentsMargins(8, 6, 8, 6)
        layout.setSpacing(1)
        for w in (self.title, self.state, self.who):
            layout.addWidget(w)
        self.slot_state = "free"
        self._shown: tuple[SlotInfo, str | None] | None = None

    def show_slot(self, slot: SlotInfo, n_ctx: int, name: str | None) -> None:
        if (slot, name) == self._shown:
            return
        self._shown = (slot, name)
        self.slot_state = slot.state
        color = style.SLOT_COLORS.get(slot.state, "#9ca3af")
        self.title.setText(f"<b>Slot {slot.seq_id}</b>")
        self.state.setText(f"<span style='color:{color}'>●</span> {STATE_TEXT.get(slot.state, slot.state)}")
        if slot.state == "free":
            self.who.setText("—")
        else:
            who = name or slot.session_id or "one-off request"
            self.who.setText(f"{who[:28]} · {slot.num_tokens:,}/{n_ctx:,} tokens")
        self.setToolTip(STATE_HELP.get(slot.state, ""))
        self.setStyleSheet(f"QFrame#slotChip {{ border: 1px solid {color}; }}")


class ModelMonitor(QFrame):
    """One loaded model: slot chips, queue, tokens/s and a tick composition chart."""

    def __init__(
        self, model: ModelApi, namer: SessionNamer | None, parent: QWidget | None = None
    ) -> None:
        super().__init__(parent)
        self.setObjectName("cacheCard")
        self.model = model
        self._namer = namer
        self._n_ctx = getattr(getattr(model, "config", None), "n_ctx", 0)
        self._rate: deque[tuple[float, int]] = deque(maxlen=20)
        self.title = QLabel(f"<b>{model.id}</b>")
        self.status = QLabel()
        self.status.setObjectName("cacheStatus")
        head = QHBoxLayout()
        head.addWidget(self.title)
        head.addWidget(self.status, 1)
        # What this model's memory lets the cache reuse (docs/design.md §8): "recurrent: reuse from
        # checkpoints at turn boundaries", read once (it does not change while loaded).
        info = model.model_info()
        self.memory = QLabel(f"Memory: {info.memory_reuse}" if info.memory_reuse else "")
        self.memory.setObjectName("cacheCaption")
        self.memory.setWordWrap(True)
        self.chips_box = QGridLayout()
        self.chips: list[SlotChip] = []
        self.chart = pg.PlotWidget()
        self.chart.setMinimumHeight(120)
        self.chart.setMaximumHeight(170)
        self.chart.setMenuEnabled(False)
        self.chart.setMouseEnabled(x=False, y=False)
        self.chart.hideButtons()
        self.chart.setLabel("left", "tokens")
        self.chart.setLabel("bottom", "recent steps (newest right)")
        self.chart.setToolTip(
            "Each bar is one step of the model. Orange: prompt tokens read in that step; "
            "green: reply tokens written (one per conversation generating)."
        )
        self.prefill_bars = pg.BarGraphItem(x=[], height=[], width=0.8, brush=style.PREFILL_COLOR)
        self.decode_bars = pg.BarGraphItem(x=[], y0=[], height=[], width=0.8, brush=style.DECODE_COLOR)
        self.chart.addItem(self.prefill_bars)
        self.chart.addItem(self.decode_bars)
        self.chart.setXRange(-0.5, N_TICKS - 0.5)
        self.chart.getAxis("bottom").setStyle(showValues=False)
        layout = QVBoxLayout(self)
        layout.addLayout(head)
        layout.addWidget(self.memory)
        layout.addLayout(self.chips_box)
        legend = QLabel(
            f"<span style='color:{style.PREFILL_COLOR}'>■</span> prompt tokens read  "
            f"<span style='color:{style.DECODE_COLOR}'>■</span> reply tokens written"
        )
        legend.setObjectName("cacheCaption")
        layout.addWidget(legend)
        layout.addWidget(self.chart)
        self.apply_colors()

    def apply_colors(self) -> None:
        c = style.chart_colors()
        self.chart.setBackground(c.background)
        for axis in ("left", "bottom"):
            ax = self.chart.getAxis(axis)
            ax.setPen(pg.mkPen(c.grid))
            ax.setTextPen(pg.mkPen(c.foreground))

    def refresh(self) -> SchedulerSnapshot:
        snap: SchedulerSnapshot = self.model.snapshot()
        while len(self.chips) < len(snap.slots):
            chip = SlotChip(self)
            i = len(self.chips)
            self.chips_box.addWidget(chip, i // 4, i % 4)
            self.chips.append(chip)
        for chip, slot in zip(self.chips, snap.slots, strict=False):
            name = self._namer(slot.session_id) if self._namer and slot.session_id else None
            chip.show_slot(slot, self._n_ctx, name)
        now = time.monotonic()
        self._rate.append((now, snap.num_tokens_generated))
        t0, n0 = self._rate[0]
        rate = (snap.num_tokens_generated - n0) / (now - t0) if now - t0 > 0.2 else 0.0
        busy = sum(1 for s in snap.slots if s.state in ("prefilling", "generating"))
        self.status.setText(
            f"  {busy} of {len(snap.slots)} slots busy · {snap.pending_len} waiting in queue · "
            f"{rate:.1f} tokens/s"
            + (f" · last start: {snap.last_cache_hit.kind}" if snap.last_cache_hit else "")
        )
        ticks = snap.recent_ticks[-N_TICKS:]
        xs = list(range(N_TICKS - len(ticks), N_TICKS))
        pre = [t.num_prefill_tokens for t in ticks]
        dec = [t.num_decode_rows for t in ticks]
        self.prefill_bars.setOpts(x=xs, height=pre, width=0.8)
        self.decode_bars.setOpts(x=xs, y0=pre, height=dec, width=0.8)
        return snap


class SchedulerPanel(QWidget):
    """Cards for every loaded model; ``refresh`` re-reads the engine's model list."""

    def __init__(
        self, engine: EngineApi, namer: SessionNamer | None = None, parent: QWidget | None = None
    ) -> None:
        super().__init__(parent)
        self.setObjectName("cacheSchedulerPanel")
        self._engine = engine
        self._namer = namer
        self.monitors: dict[str, ModelMonitor] = {}
        caption = QLabel(
            "A model works on several conversations at once, each in its own slot. Every "
            "step, it reads some prompt tokens and writes one reply token per busy slot, all "
            "in one batch. A slot \"holding a chat\" keeps that conversation ready for its "
            "next message."
        )
        caption.setObjectName("cacheCaption")
        caption.setWordWrap(True)
        self.empty = QLabel("No model is loaded.")
        self.empty.setObjectName("cacheStatus")
        inner = QWidget()
        inner.setObjectName("cacheScrollInner")
        self._cards = QVBoxLayout(inner)
        self._cards.setContentsMargins(0, 0, 0, 0)
        self._cards.addWidget(self.empty)
        self._cards.addStretch(1)
        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QFrame.Shape.NoFrame)
        scroll.setWidget(inner)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 8, 0, 0)
        layout.addWidget(caption)
        layout.addWidget(scroll, 1)

    def refresh(self) -> None:
        try:
            ids = [info.id for info in self._engine.list_models()]
        except Exception:  # list_models reads a published mapping: nothing is expected to fail
            log.exception("listing the loaded models failed (a bug)")
            ids = []
        for gone in set(self.monitors) - set(ids):
            self.monitors.pop(gone).deleteLater()
        for model_id in ids:
            if model_id not in self.monitors:
                try:
                    model = self._engine.get_model(model_id)
                except NotFound:  # unloaded (on the loader's thread) since list_models
                    continue
                except Exception:
                    log.exception("reading the loaded model %r failed (a bug)", model_id)
                    continue
                mon = ModelMonitor(model, self._namer)
                self._cards.insertWidget(self._cards.count() - 1, mon)
                self.monitors[model_id] = mon
        self.empty.setVisible(not self.monitors)
        for mon in self.monitors.values():
            mon.refresh()

    def slot_states(self, model_id: str) -> list[str]:
        mon = self.monitors.get(model_id)
        return [c.slot_state for c in mon.chips] if mon else []

    def apply_colors(self) -> None:
        for mon in self.monitors.values():
            mon.apply_colors()
