"""Usage of each cache tier against its quota, with the quota editable."""

from __future__ import annotations

from PySide6.QtWidgets import (
    QComboBox,
    QDoubleSpinBox,
    QFrame,
    QGridLayout,
    QLabel,
    QProgressBar,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.cache.blobs.tiers import TIERS
from app.ui.cache.actions import CacheActions
from app.ui.state import cache_fmt as fmt
from app.units import human_bytes

UNITS = {"MiB": 1 << 20, "GiB": 1 << 30}


class TierRow:
    """The widgets of one tier: bar, numbers, quota editor."""

    def __init__(self, tier: str, actions: CacheActions, grid: QGridLayout, line: int) -> None:
        self.tier = tier
        self._actions = actions
        name = QLabel(f"<b>{fmt.TIER_LABELS[tier]}</b>")
        name.setToolTip(fmt.TIER_HELP[tier])
        help_ = QLabel(fmt.TIER_HELP[tier])
        help_.setObjectName("cacheCaption")
        help_.setWordWrap(True)
        self.bar = QProgressBar()
        self.bar.setObjectName(f"tierBar_{tier}")
        self.bar.setProperty("tier", tier)
        self.bar.setRange(0, 1000)
        self.bar.setTextVisible(False)
        self.bar.setToolTip(fmt.TIER_HELP[tier])
        self.usage = QLabel()
        self.usage.setObjectName(f"tierUsage_{tier}")
        self.usage.setMinimumWidth(self.usage.fontMetrics().horizontalAdvance("999.9 MiB of 999.9 GiB (< 0.1 %)") + 8)
        self.quota = QDoubleSpinBox()
        self.quota.setObjectName(f"tierQuota_{tier}")
        self.quota.setRange(0, 1 << 20)
        self.quota.setDecimals(1)
        self.quota.setToolTip("The most this place may hold. When full, the least recently used "
                              "entries move to disk (or, from disk, are deleted).")
        self.unit = QComboBox()
        self.unit.addItems(list(UNITS))
        # NOTE: bounded widths so the row fits an 800 px window (the spin box's own hint
        # is as wide as its 1,048,576 maximum).
        self.quota.setMaximumWidth(100)
        self.unit.setMaximumWidth(80)
        self.bar.setMinimumWidth(40)
        self.apply = QToolButton()
        self.apply.setObjectName("cacheAction")
        self.apply.setText("Set limit")
        self.apply.clicked.connect(self.submit)
        grid.addWidget(name, line, 0)
        grid.addWidget(self.bar, line, 1)
        grid.addWidget(self.usage, line, 2)
        grid.addWidget(self.quota, line, 3)
        grid.addWidget(self.unit, line, 4)
        grid.addWidget(self.apply, line, 5)
        grid.addWidget(help_, line + 1, 1, 1, 5)
        self._quota_shown = -1

    def show_usage(self, used: int, quota: int) -> None:
        if quota <= 0:
            self.bar.setValue(1000 if used > 0 else 0)
            pct = "no room" if used == 0 else "over: pinned"
        else:
            # a sliver for any use at all: "empty" and "a few KiB" should not look alike
            self.bar.setValue(min(1000, max(round(used * 1000 / quota), 6 if used else 0)))
            share = 100 * used / quota
            pct = f"{share:.1f} %" if share >= 0.1 or not used else "< 0.1 %"
        self.usage.setText(f"{human_bytes(used)} of {human_bytes(quota)} ({pct})")
        if quota != self._quota_shown and not self.quota.hasFocus():
            self._quota_shown = quota
            unit = "GiB" if quota >= UNITS["GiB"] else "MiB"
            self.unit.setCurrentText(unit)
            self.quota.setValue(quota / UNITS[unit])

    def quota_bytes(self) -> int:
        return int(round(self.quota.value() * UNITS[self.unit.currentText()]))

    def submit(self) -> None:
        self._actions.set_quota(self.tier, self.quota_bytes())


class TiersPanel(QFrame):
    def __init__(self, actions: CacheActions, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("cacheCard")
        title = QLabel("WHERE SAVED MEMORY IS KEPT")
        title.setObjectName("cacheSection")
        grid = QGridLayout()
        grid.setColumnStretch(1, 1)
        grid.setHorizontalSpacing(10)
        self.rows = {tier: TierRow(tier, actions, grid, 2 * i) for i, tier in enumerate(TIERS)}
        layout = QVBoxLayout(self)
        layout.addWidget(title)
        layout.addLayout(grid)

    def update_usage(self, usage: dict[str, tuple[int, int]]) -> None:
        for tier, (used, quota) in usage.items():
            if tier in self.rows:
                self.rows[tier].show_usage(used, quota)
