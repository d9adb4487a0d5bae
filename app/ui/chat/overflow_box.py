"""The chat settings' "When the context is full" box: this chat's overflow policy (or the
app-wide default) and a button that makes the choice the default."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QComboBox, QLabel, QToolButton, QVBoxLayout, QWidget

from app.conversation.window import OverflowPolicy
from app.ui.widgets.elided import ElidedComboBox


class OverflowBox(QWidget):
    policy_edited = Signal(str, object)  # conversation id, OverflowPolicy (None: the default)
    default_policy_edited = Signal(object)  # OverflowPolicy for every chat without its own

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._cid: str | None = None
        self._default = OverflowPolicy.DROP_OLDEST
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(6)
        title = QLabel("WHEN THE CONTEXT IS FULL")
        title.setObjectName("sectionLabel")
        layout.addWidget(title)
        self.picker = ElidedComboBox()
        self.picker.setObjectName("overflowPolicy")
        self.picker.setToolTip(
            "What the model is shown once this chat no longer fits its context. The chat "
            "marks where older messages leave the model's view; the system prompt is kept."
        )
        # NOTE: sized by a few characters, not by its longest choice (361 px, wider than the
        # panel at 1280 px): the closed box elides, the open list shows every choice whole.
        self.picker.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.picker.setMinimumContentsLength(14)
        layout.addWidget(self.picker)
        self.make_default = QToolButton()
        self.make_default.setObjectName("makeDefaultPolicy")
        self.make_default.setText("Make it the default")
        self.make_default.setToolTip("Use this choice for every chat that has none of its own.")
        self.make_default.setAutoRaise(True)
        layout.addWidget(self.make_default)
        self._fill(None)
        self.picker.activated.connect(self._on_activated)
        self.make_default.clicked.connect(self._on_make_default)

    def load(self, cid: str | None, own: OverflowPolicy | None, default: OverflowPolicy) -> None:
        """Show conversation ``cid``'s own policy (None: it follows ``default``)."""
        self._cid, self._default = cid, default
        self._fill(own)

    def policy(self) -> OverflowPolicy | None:
        data = self.picker.currentData()  # Qt hands a str back (StrEnum is a str)
        return OverflowPolicy.parse(data) if isinstance(data, str) and data else None

    def choose(self, policy: OverflowPolicy | None) -> None:
        """Select ``policy`` as a person would (emits ``policy_edited``)."""
        self.picker.setCurrentIndex(0 if policy is None else self.picker.findData(policy.value))
        self._on_activated(self.picker.currentIndex())

    def _fill(self, own: OverflowPolicy | None) -> None:
        self.picker.clear()
        self.picker.addItem(f"Default: {self._default.label.lower()}", "")
        for p in OverflowPolicy:
            self.picker.addItem(p.label, p.value)
        for i in range(self.picker.count()):
            self.picker.setItemData(i, self.picker.itemText(i), Qt.ItemDataRole.ToolTipRole)
        self.picker.setCurrentIndex(0 if own is None else self.picker.findData(own.value))

    def _on_activated(self, _index: int) -> None:
        if self._cid is not None:
            self.policy_edited.emit(self._cid, self.policy())

    def _on_make_default(self) -> None:
        self._default = self.policy() or self._default
        self.default_policy_edited.emit(self._default)
        self._fill(None)
        if self._cid is not None:
            self.policy_edited.emit(self._cid, None)
